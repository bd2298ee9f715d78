//! The future of one balanced call: the endpoint's response, reported to polylb when it ends.

use crate::error::{BoxError, Error};
use crate::report::Report;
use pin_project_lite::pin_project;
use polylb::Outcome;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// Judges an endpoint's result for polylb: see [`Builder::classify`](crate::Builder::classify).
pub type Classifier<T, E> = Arc<dyn Fn(&Result<T, E>) -> Outcome + Send + Sync>;

pin_project! {
    /// The response of the endpoint a call went to. When it resolves, its outcome (by the
    /// builder's classifier: by default `Ok` a success, `Err` a failure) and the time since the
    /// call are reported to polylb; dropped before that, the call is reported
    /// [`Outcome::Cancelled`].
    pub struct ResponseFuture<F, T, E> {
        #[pin]
        state: State<F, T, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, T, E> {
        Called {
            #[pin]
            response: F,
            report: Option<Report>,
            classify: Option<Classifier<T, E>>,
        },
        Refused {
            error: Option<Error>,
        },
    }
}

impl<F, T, E> ResponseFuture<F, T, E> {
    pub(crate) fn called(response: F, report: Report, classify: Option<Classifier<T, E>>) -> Self {
        ResponseFuture {
            state: State::Called {
                response,
                report: Some(report),
                classify,
            },
        }
    }

    pub(crate) fn refused(error: Error) -> Self {
        ResponseFuture {
            state: State::Refused { error: Some(error) },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F, T, E>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                response,
                report,
                classify,
            } => {
                let result = ready!(response.poll(cx));
                if let Some(report) = report.take() {
                    let outcome = match classify {
                        Some(classify) => classify(&result),
                        None if result.is_ok() => Outcome::Success,
                        None => Outcome::Failure,
                    };
                    report.finish(outcome);
                }
                Poll::Ready(result.map_err(Into::into))
            }
            StateProj::Refused { error } => Poll::Ready(Err(match error.take() {
                Some(e) => e.into(),
                None => "ResponseFuture polled after it completed".into(),
            })),
        }
    }
}

impl<F, T, E> std::fmt::Debug for ResponseFuture<F, T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

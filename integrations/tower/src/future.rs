//! The future of one balanced call: the endpoint's response, reported to polylb when it ends.

use crate::body::{AtBodyEnd, AtResponse, ReportingBody};
use crate::error::{BoxError, Error};
use crate::grpc;
use crate::report::Report;
use http_body::Body;
use pin_project_lite::pin_project;
use polylb::Outcome;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// Judges an endpoint's result for polylb: see [`Builder::classify`](crate::Builder::classify).
pub type Classifier<T, E> = Arc<dyn Fn(&Result<T, E>) -> Outcome + Send + Sync>;

pin_project! {
    /// The response of the endpoint a call went to. When it resolves, its outcome (by the
    /// builder's classifier: by default `Ok` a success, `Err` a failure) and the time since the
    /// call are reported to polylb; past the builder's [`timeout`](crate::Builder::timeout)
    /// first, [`Outcome::Timeout`] (and it fails with [`Error::Timeout`]); dropped before
    /// either, the call is reported [`Outcome::Cancelled`].
    ///
    /// With `At` = [`AtBodyEnd`] (a `Balance` built with
    /// [`report_at_body_end`](crate::Builder::report_at_body_end)) it resolves with the
    /// endpoint's `http::Response<B>` as an `http::Response<ReportingBody<B>>`, whose body
    /// reports the call when it ends, unless the headers were final (see there).
    pub struct ResponseFuture<F, T, E, At = AtResponse> {
        #[pin]
        state: State<F, T, E>,
        at: PhantomData<fn() -> At>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, T, E> {
        Called {
            #[pin]
            response: F,
            deadline: Option<Pin<Box<Deadline>>>,
            report: Option<Report>,
            classify: Option<Classifier<T, E>>,
        },
        Refused {
            error: Option<Error>,
        },
    }
}

pin_project! {
    /// When a call gives up waiting for its endpoint: see
    /// [`Builder::timeout`](crate::Builder::timeout). Boxed, so that a call without one
    /// carries a null pointer, not tokio's timer entry, through its response future's moves.
    struct Deadline {
        #[pin]
        sleep: tokio::time::Sleep,
        limit: Duration,
    }
}

impl Deadline {
    // Out of line: the timer's setup would otherwise be inlined into every `call`.
    #[inline(never)]
    fn after(limit: Duration) -> Pin<Box<Self>> {
        Box::pin(Deadline {
            sleep: tokio::time::sleep(limit),
            limit,
        })
    }
}

impl<F, T, E, At> ResponseFuture<F, T, E, At> {
    /// The future of a call `start` began (the endpoint's response future and the call's
    /// report), or of one polylb refused.
    #[inline]
    pub(crate) fn of(
        start: Result<(F, Report), Error>,
        classify: Option<Classifier<T, E>>,
        timeout: Option<Duration>,
    ) -> Self {
        match start {
            Ok((response, report)) => ResponseFuture::called(response, report, classify, timeout),
            Err(e) => ResponseFuture::refused(e),
        }
    }

    #[inline]
    fn called(
        response: F,
        report: Report,
        classify: Option<Classifier<T, E>>,
        timeout: Option<Duration>,
    ) -> Self {
        ResponseFuture {
            state: State::Called {
                response,
                deadline: timeout.map(Deadline::after),
                report: Some(report),
                classify,
            },
            at: PhantomData,
        }
    }

    fn refused(error: Error) -> Self {
        ResponseFuture {
            state: State::Refused { error: Some(error) },
            at: PhantomData,
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
        let mut state = self.project().state;
        let limit = match state.as_mut().project() {
            StateProj::Called {
                response,
                deadline,
                report,
                classify,
            } => 'called: {
                let result = match response.poll(cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => break 'called ready!(timed_out(deadline, report, cx)),
                };
                if let Some(report) = report.take() {
                    let outcome = match classify {
                        Some(classify) => classify(&result),
                        None if result.is_ok() => Outcome::Success,
                        None => Outcome::Failure,
                    };
                    report.finish(outcome);
                }
                return Poll::Ready(result.map_err(Into::into));
            }
            StateProj::Refused { error } => return Poll::Ready(Err(refusal(error))),
        };
        Poll::Ready(Err(give_up(state, limit)))
    }
}

impl<F, B, E> Future for ResponseFuture<F, http::Response<B>, E, AtBodyEnd>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    B: Body,
{
    type Output = Result<http::Response<ReportingBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        let limit = match state.as_mut().project() {
            StateProj::Called {
                response,
                deadline,
                report,
                classify,
            } => 'called: {
                let result = match response.poll(cx) {
                    Poll::Ready(result) => result,
                    Poll::Pending => break 'called ready!(timed_out(deadline, report, cx)),
                };
                let Some(report) = report.take() else {
                    // Polled again after it resolved: the call has been reported.
                    let response = result.map_err(Into::into)?;
                    return Poll::Ready(Ok(response.map(ReportingBody::unreported)));
                };
                // The headers' verdict: final for an `Err` or a failure, else the outcome
                // unless the trailers carry a `grpc-status`.
                let verdict = match classify {
                    Some(classify) => classify(&result),
                    None => grpc::classify(&result),
                };
                return match result {
                    Ok(response) => {
                        let (parts, body) = response.into_parts();
                        let body = ReportingBody::new(body, &parts.headers, report, verdict);
                        Poll::Ready(Ok(http::Response::from_parts(parts, body)))
                    }
                    Err(e) => {
                        report.finish(verdict);
                        Poll::Ready(Err(e.into()))
                    }
                };
            }
            StateProj::Refused { error } => return Poll::Ready(Err(refusal(error))),
        };
        Poll::Ready(Err(give_up(state, limit)))
    }
}

/// Pending while the deadline, if any, has not passed; once it has, ready with the limit, the
/// call reported a timeout.
fn timed_out(
    deadline: &mut Option<Pin<Box<Deadline>>>,
    report: &mut Option<Report>,
    cx: &mut Context<'_>,
) -> Poll<Duration> {
    let Some(deadline) = deadline else {
        return Poll::Pending;
    };
    let mut deadline = deadline.as_mut().project();
    if deadline.sleep.as_mut().poll(cx).is_pending() {
        // tokio's `Sleep` answers Pending without looking at its deadline once the task's
        // coop budget is spent, as it is on every poll by an endpoint that works on this task's
        // time (one that yields as tokio asks): the clock says whether the deadline has passed.
        // Pending for want of budget, the `Sleep` has woken the task to be polled again.
        if tokio::time::Instant::now() < deadline.sleep.deadline() {
            return Poll::Pending;
        }
    }
    let limit = *deadline.limit;
    if let Some(report) = report.take() {
        report.finish(Outcome::Timeout);
    }
    Poll::Ready(limit)
}

/// Ends a call whose deadline has passed: its endpoint's future is dropped now, which cancels
/// the request, rather than whenever the caller drops this one.
fn give_up<F, T, E>(mut state: Pin<&mut State<F, T, E>>, limit: Duration) -> BoxError {
    state.set(State::Refused { error: None });
    Error::Timeout(limit).into()
}

fn refusal(error: &mut Option<Error>) -> BoxError {
    match error.take() {
        Some(e) => e.into(),
        None => "ResponseFuture polled after it completed".into(),
    }
}

impl<F, T, E, At> std::fmt::Debug for ResponseFuture<F, T, E, At> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

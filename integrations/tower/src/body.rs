//! Reporting an HTTP call when its response body ends: [`ReportingBody`], and the markers
//! [`AtResponse`] and [`AtBodyEnd`] that say when a [`Balance`](crate::Balance) reports.

use crate::grpc;
use crate::report::Report;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use polylb::Outcome;
use std::fmt;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{ready, Context, Poll};

/// A [`Balance`](crate::Balance) that reports each call when its response future resolves
/// (the default): for an `http::Response`, at its headers.
#[derive(Debug)]
pub enum AtResponse {}

/// A [`Balance`](crate::Balance) over `http::Response<B>` endpoints that reports each call
/// when its response **body** ends, by the `grpc-status` of its trailers, as polylb's gRPC
/// adapters in other languages report a stream: see
/// [`Builder::report_at_body_end`](crate::Builder::report_at_body_end).
#[derive(Debug)]
pub enum AtBodyEnd {}

pin_project! {
    /// The body of a response from a [`Balance`](crate::Balance) built with
    /// [`report_at_body_end`](crate::Builder::report_at_body_end): the endpoint's body `B`,
    /// frame for frame, with the call kept in flight until it ends and reported then, once:
    ///
    /// - at its end (`poll_frame` returns `None`, a trailers frame, or a data frame after
    ///   which [`is_end_stream`](Body::is_end_stream) is true, or `is_end_stream` returns
    ///   true, as it may between polls): by the trailers' `grpc-status`
    ///   if they have one ([`grpc::outcome_of_code`]), else by the classifier's verdict on the
    ///   headers, except that a gRPC response (`content-type: application/grpc`, `+proto`...,
    ///   not gRPC-Web) ending with no `grpc-status` is a failure (cut short: tonic answers
    ///   `UNKNOWN`); the latency is from the call to the body's end;
    /// - at an error from `B`: [`Outcome::Failure`];
    /// - dropped before its end: [`Outcome::Cancelled`] (no verdict on the endpoint, as a
    ///   dropped response future).
    ///
    /// A response that was reported at its headers (its headers were already final: see
    /// [`report_at_body_end`](crate::Builder::report_at_body_end)) passes its body through
    /// and reports nothing more. Its data and error types are `B`'s.
    pub struct ReportingBody<B> {
        #[pin]
        body: B,
        // A lock only for `is_end_stream`, which takes `&self`: `poll_frame` reaches it
        // with `get_mut`, without locking.
        pending: Mutex<Option<Pending>>,
    }
}

/// A call still in flight, and its outcome if the body ends with no `grpc-status`.
struct Pending {
    report: Report,
    verdict: Outcome,
}

/// Whether `headers` are a gRPC response's (`application/grpc`, `application/grpc+proto`,
/// `application/grpc;...`), whose status must come in its trailers. gRPC-Web
/// (`application/grpc-web...`) carries its trailers in the body, not as HTTP trailers.
fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let Some(rest) = content_type.as_bytes().strip_prefix(b"application/grpc") else {
        return false;
    };
    matches!(rest.first(), None | Some(b'+') | Some(b';'))
}

impl<B: Body> ReportingBody<B> {
    /// Wraps the body of a response whose headers the classifier judged `verdict`: the call is
    /// reported now if the headers are final, else when the body ends.
    pub(crate) fn new(body: B, headers: &HeaderMap, report: Report, verdict: Outcome) -> Self {
        // A failure at the headers, or a gRPC status in them ("trailers-only": the stream ends
        // with them, and clients read no trailers after it), is final; so is an empty body.
        if verdict != Outcome::Success
            || headers.contains_key("grpc-status")
            || body.is_end_stream()
        {
            report.finish(verdict);
            return ReportingBody::unreported(body);
        }
        // A gRPC response must end with a status in its trailers: one that ends without (a
        // stream cut by an RST_STREAM(NO_ERROR), which hyper reads as its end, or by a
        // truncating proxy) is a failure, which tonic answers as `UNKNOWN`.
        let verdict = if is_grpc(headers) {
            Outcome::Failure
        } else {
            verdict
        };
        ReportingBody {
            body,
            pending: Mutex::new(Some(Pending { report, verdict })),
        }
    }

    /// A body whose call has been reported (or is reported by no one).
    pub(crate) fn unreported(body: B) -> Self {
        ReportingBody {
            body,
            pending: Mutex::new(None),
        }
    }
}

impl<B: Body> Body for ReportingBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.body.as_mut().poll_frame(cx));
        let slot = this.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(pending) = slot.as_ref() {
            let ended = match &frame {
                None => Some(pending.verdict),
                Some(Err(_)) => Some(Outcome::Failure),
                Some(Ok(frame)) => match frame.trailers_ref() {
                    // Trailers are a body's last frame.
                    Some(trailers) => {
                        Some(grpc::outcome_of_trailers(trailers).unwrap_or(pending.verdict))
                    }
                    // A reader may stop at `is_end_stream` without polling for the `None`.
                    None if this.body.is_end_stream() => Some(pending.verdict),
                    None => None,
                },
            };
            // Taken only at the end: until then the call stays in flight.
            if let Some(outcome) = ended {
                if let Some(pending) = slot.take() {
                    pending.report.finish(outcome);
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.body.is_end_stream();
        if ended {
            // The end can be learned between polls (hyper's HTTP/2 body, after its last data,
            // by an END_STREAM or RST_STREAM(NO_ERROR) that arrives later), and a reader that
            // sees it polls no more (hyper's own body writers, tonic's `Body::new`): the call
            // ends here, or it would stay in flight until the body is dropped, then a cancel.
            let pending = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(pending) = pending {
                let outcome = pending.verdict;
                pending.report.finish(outcome);
            }
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B: fmt::Debug> fmt::Debug for ReportingBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReportingBody")
            .field("body", &self.body)
            .field(
                "in_flight",
                &!matches!(self.pending.try_lock().as_deref(), Ok(None)),
            )
            .finish()
    }
}

//! [`Balance`]: the tower `Service` that sends each request to the endpoint polylb picks.

use crate::body::{AtBodyEnd, AtResponse, ReportingBody};
use crate::endpoints::{Describe, Endpoints};
use crate::error::{BoxError, Error};
use crate::future::{Classifier, ResponseFuture};
use crate::report::{Clock, Report};
use polylb::{Balancer, Status};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::discover::Discover;
use tower::Service;

/// Names a request's method (see [`Builder::method`](crate::Builder::method)).
pub type MethodOf<Req> = dyn for<'r> Fn(&'r Req) -> &'r str + Send + Sync;
/// Gives a request's hash key (see [`Builder::hash_key`](crate::Builder::hash_key)).
pub type KeyOf<Req> = dyn for<'r> Fn(&'r Req) -> Cow<'r, [u8]> + Send + Sync;

/// The response type of `D`'s endpoints for `Req`.
pub(crate) type Response<D, Req> = <<D as Discover>::Service as Service<Req>>::Response;
/// The error type of `D`'s endpoints for `Req`.
pub(crate) type EndpointError<D, Req> = <<D as Discover>::Service as Service<Req>>::Error;
/// The future of a `call` of a `Balance<D, Req, At>`.
pub(crate) type CallFuture<D, Req, At> = ResponseFuture<
    <<D as Discover>::Service as Service<Req>>::Future,
    Response<D, Req>,
    EndpointError<D, Req>,
    At,
>;

/// A tower [`Service`] that balances requests over the endpoints a [`Discover`] yields, by
/// any polylb strategy. Build one with [`Balance::builder`] (keys that are `Display`) or
/// [`Builder::new`](crate::Builder::new).
///
/// It is a ready cache: [`poll_ready`](Service::poll_ready) applies discovery's changes (all
/// the changes one poll sees as one polylb update), polls the endpoints that are not ready,
/// and is ready when at least one endpoint is. [`call`](Service::call) lets polylb pick among
/// the ready endpoints, by the request's method and hash key, and spends that endpoint's
/// readiness. Each response's outcome and latency go back to polylb when it resolves.
///
/// - An endpoint whose `poll_ready` fails is dropped from the set, as tower's p2c balancer
///   drops it; its error is not returned. Discovery may insert it again.
/// - While the set is empty, `poll_ready` is pending until discovery inserts an endpoint; once
///   discovery has ended with the set empty, it fails with [`Error::NoEndpoints`].
/// - Discovery's errors are returned by `poll_ready` (after the changes before them are
///   applied); so is an [`Error::Update`] when polylb refuses the set, which leaves the
///   previous set in place.
/// - An endpoint stays ready from its `Ready(Ok)` until its next call: it is not polled again
///   in between.
///
/// `At` says when a call is reported: [`AtResponse`] (the default) when its response future
/// resolves; [`AtBodyEnd`] (from [`Builder::report_at_body_end`](crate::Builder::report_at_body_end),
/// for `http::Response` endpoints) when the response's body ends.
///
/// # Example
///
/// ```
/// use polylb_tower::Balance;
/// use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let endpoints = ["a", "b", "c"].map(|name| {
///     service_fn(move |req: String| async move {
///         Ok::<_, std::convert::Infallible>(format!("{name} got {req}"))
///     })
/// });
/// // ServiceList's keys are the indexes 0, 1, 2: by default each is an endpoint's address.
/// let mut balance = Balance::builder(ServiceList::new(endpoints))
///     .config("loadbalance=leastactive")
///     .build()?;
/// let answer = balance.ready().await?.call("hello".to_string()).await?;
/// assert!(answer.ends_with("got hello"));
/// # Ok(())
/// # }
/// ```
pub struct Balance<D, Req, At = AtResponse>
where
    D: Discover,
    D::Service: Service<Req>,
{
    pub(crate) discover: D,
    pub(crate) discover_ended: bool,
    pub(crate) balancer: Balancer,
    pub(crate) endpoints: Endpoints<D::Key, D::Service>,
    pub(crate) describe: Box<Describe<D::Key>>,
    pub(crate) method_of: Option<Box<MethodOf<Req>>>,
    pub(crate) key_of: Option<Box<KeyOf<Req>>>,
    pub(crate) classify: Option<Classifier<Response<D, Req>, EndpointError<D, Req>>>,
    /// Method names interned so far: polylb interns each name once, under a lock; this map
    /// spares calls that lock.
    pub(crate) methods: HashMap<Box<str>, u32>,
    pub(crate) clock: Clock,
    pub(crate) timeout: Option<Duration>,
    pub(crate) at: PhantomData<fn() -> At>,
}

impl<D, Req, At> Balance<D, Req, At>
where
    D: Discover,
    D::Service: Service<Req>,
{
    /// The polylb balancer: for [`stats_json`](Balancer::stats_json), say. A clone shares it,
    /// so take one before the `Balance` moves into a `Buffer`.
    pub fn balancer(&self) -> &Balancer {
        &self.balancer
    }

    /// How many endpoints the set holds.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// How many endpoints are ready for a call.
    pub fn ready_len(&self) -> usize {
        self.endpoints.ready_ids().len()
    }
}

impl<D, Req, At> Balance<D, Req, At>
where
    D: Discover + Unpin,
    D::Key: Hash + Eq + Clone,
    D::Error: Into<BoxError>,
    D::Service: Service<Req>,
{
    /// Takes every change discovery has now, and applies them as one update.
    fn poll_discover(&mut self, cx: &mut Context<'_>) -> Result<(), BoxError> {
        let mut changes = Vec::new();
        let mut failed = None;
        while !self.discover_ended {
            match Pin::new(&mut self.discover).poll_discover(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => self.discover_ended = true,
                Poll::Ready(Some(Ok(change))) => changes.push(change),
                Poll::Ready(Some(Err(e))) => {
                    failed = Some(e.into());
                    break;
                }
            }
        }
        if !changes.is_empty() {
            // Read only when needed: a clock read costs about as much as polylb's pick.
            let now = (self.clock)();
            self.endpoints
                .apply(changes, &*self.describe, &self.balancer, now)
                .map_err(Error::Update)?;
        }
        failed.map_or(Ok(()), Err)
    }

    fn method_id(&mut self, request: &Req) -> Result<u32, Error> {
        let Some(method_of) = &self.method_of else {
            return Ok(0);
        };
        let name = method_of(request);
        if name.is_empty() {
            return Ok(0);
        }
        if let Some(&id) = self.methods.get(name) {
            return Ok(id);
        }
        let id = self.balancer.method(name).map_err(Error::Method)?;
        self.methods.insert(name.into(), id);
        Ok(id)
    }

    /// polylb's pick among the ready endpoints.
    fn pick(&self, method: u32, request: &Req) -> Result<u64, Status> {
        let key = self.key_of.as_ref().map(|key_of| key_of(request));
        let key = key.as_deref().unwrap_or_default();
        if self.endpoints.all_ready() {
            self.balancer.select(method, key, 0)
        } else {
            let ready = self.endpoints.ready_ids();
            self.balancer.select_among(method, key, ready, &[], 0)
        }
    }

    /// `poll_ready` of either `Service` implementation.
    fn poll_set(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.poll_discover(cx)?;
        self.endpoints
            .poll_pending::<Req>(cx, &self.balancer, self.clock)
            .map_err(Error::Update)?;
        if !self.endpoints.ready_ids().is_empty() {
            Poll::Ready(Ok(()))
        } else if self.endpoints.is_empty() && self.discover_ended {
            Poll::Ready(Err(Error::NoEndpoints.into()))
        } else {
            // Woken by discovery (unless it ended) or by an endpoint becoming ready.
            Poll::Pending
        }
    }

    /// `call` of either `Service` implementation.
    #[inline]
    fn respond(&mut self, request: Req) -> CallFuture<D, Req, At> {
        ResponseFuture::of(
            self.start_call(request),
            self.classify.clone(),
            self.timeout,
        )
    }

    /// The picked endpoint's response future and
    /// the call's report, or why there is none.
    #[inline]
    fn start_call(
        &mut self,
        request: Req,
    ) -> Result<(<D::Service as Service<Req>>::Future, Report), Error> {
        if self.endpoints.ready_ids().is_empty() {
            // Called without a ready endpoint: candidates would be empty, which polylb reads
            // as the whole set.
            return Err(Error::NotReady);
        }
        let method = self.method_id(&request)?;
        let id = self.pick(method, &request).map_err(Error::Select)?;
        let report = Report::start(&self.balancer, method, id, self.clock);
        match self.endpoints.call(id, request) {
            Some(response) => Ok((response, report)),
            // Dropping `report` ends the pick as cancelled.
            None => Err(Error::Select(Status::UnknownCandidate)),
        }
    }
}

impl<D, Req> Service<Req> for Balance<D, Req>
where
    D: Discover + Unpin,
    D::Key: Hash + Eq + Clone,
    D::Error: Into<BoxError>,
    D::Service: Service<Req>,
    EndpointError<D, Req>: Into<BoxError>,
{
    type Response = Response<D, Req>;
    type Error = BoxError;
    type Future = CallFuture<D, Req, AtResponse>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.poll_set(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        self.respond(request)
    }
}

/// Reports each call when its response's body ends: see
/// [`Builder::report_at_body_end`](crate::Builder::report_at_body_end).
impl<D, Req, B> Service<Req> for Balance<D, Req, AtBodyEnd>
where
    D: Discover + Unpin,
    D::Key: Hash + Eq + Clone,
    D::Error: Into<BoxError>,
    D::Service: Service<Req, Response = http::Response<B>>,
    EndpointError<D, Req>: Into<BoxError>,
    B: http_body::Body,
{
    type Response = http::Response<ReportingBody<B>>;
    type Error = BoxError;
    type Future = CallFuture<D, Req, AtBodyEnd>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.poll_set(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        self.respond(request)
    }
}

impl<D, Req, At> fmt::Debug for Balance<D, Req, At>
where
    D: Discover,
    D::Service: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balance")
            .field("strategy", &self.balancer.strategy_name())
            .field("endpoints", &self.endpoints.len())
            .field("ready", &self.endpoints.ready_ids().len())
            .field("discover_ended", &self.discover_ended)
            .finish_non_exhaustive()
    }
}

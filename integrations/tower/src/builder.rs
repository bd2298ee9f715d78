//! [`Builder`]: configures a [`Balance`].

use crate::balance::{Balance, EndpointError, KeyOf, MethodOf, Response};
use crate::body::{AtBodyEnd, AtResponse};
use crate::endpoints::{Describe, Endpoints};
use crate::error::Error;
use crate::future::Classifier;
use crate::report::Clock;
use polylb::{Balancer, Invoker, Outcome};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::discover::Discover;
use tower::Service;

/// Configures a [`Balance`]: the polylb configuration, how endpoints and requests are
/// described to polylb, and how responses are judged.
///
/// ```
/// use polylb::{Invoker, Outcome};
/// use polylb_tower::Builder;
/// use std::borrow::Cow;
/// use tower::{discover::Change, service_fn, Service, ServiceExt};
///
/// struct Request { method: &'static str, user: String }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // Any `Stream` of `Result<Change<K, S>, E>` discovers: here, a list of changes
/// // (`Listed` yields an iterator's items).
/// let backend = |status: u16| service_fn(move |_: Request| async move {
///     Ok::<_, std::convert::Infallible>(status)
/// });
/// let changes = [("10.0.0.1:8080", 200), ("10.0.0.2:8080", 503)]
///     .map(|(addr, status)| Ok::<_, std::convert::Infallible>(Change::Insert(addr, backend(status))));
/// let discover = Listed(changes.into_iter());
///
/// let mut balance = Builder::new(discover, |addr: &&str| {
///         Invoker::new(0, *addr).weight(100).zone("eu-west-1a") // the id is the balancer's
///     })
///     .config("loadbalance=consistenthash")
///     .method(|req: &Request| req.method)
///     .hash_key(|req: &Request| Cow::Borrowed(req.user.as_bytes()))
///     .classify(|result: &Result<u16, _>| match result {
///         Ok(503) | Err(_) => Outcome::Failure,
///         Ok(_) => Outcome::Success,
///     })
///     .build()?;
/// let request = Request { method: "getUser", user: "alice".into() };
/// let status = balance.ready().await?.call(request).await?;
/// assert!(status == 200 || status == 503);
/// # Ok(())
/// # }
/// # struct Listed<I>(I);
/// # impl<I: Iterator + Unpin> futures_core::Stream for Listed<I> {
/// #     type Item = I::Item;
/// #     fn poll_next(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>)
/// #         -> std::task::Poll<Option<I::Item>> { std::task::Poll::Ready(self.0.next()) }
/// # }
/// ```
pub struct Builder<D, Req, At = AtResponse>
where
    D: Discover,
    D::Service: Service<Req>,
{
    discover: D,
    balancer: Option<Balancer>,
    config: String,
    describe: Box<Describe<D::Key>>,
    method_of: Option<Box<MethodOf<Req>>>,
    key_of: Option<Box<KeyOf<Req>>>,
    classify: Option<Classifier<Response<D, Req>, EndpointError<D, Req>>>,
    clock: Clock,
    timeout: Option<Duration>,
    at: PhantomData<fn() -> At>,
}

impl<D, Req> Balance<D, Req>
where
    D: Discover,
    D::Key: fmt::Display,
    D::Service: Service<Req>,
{
    /// A builder for endpoints whose keys are their addresses: each is described to polylb
    /// by the key's text, weight 100 (the default weight), no zone, no warm-up.
    /// [`Builder::describe`] replaces that; [`Builder::new`] takes keys of any type.
    pub fn builder(discover: D) -> Builder<D, Req> {
        Builder::new(discover, |key: &D::Key| Invoker::new(0, key.to_string()))
    }
}

impl<D, Req> Builder<D, Req>
where
    D: Discover,
    D::Service: Service<Req>,
{
    /// A builder whose endpoints `describe` describes to polylb (see [`describe`](Self::describe)).
    /// The configuration is polylb's default (`random`); requests have method `""` and an
    /// empty hash key; a response is a success when `Ok`, a failure when `Err`.
    pub fn new<F>(discover: D, describe: F) -> Self
    where
        F: Fn(&D::Key) -> Invoker + Send + Sync + 'static,
    {
        Builder {
            discover,
            balancer: None,
            config: String::new(),
            describe: Box::new(describe),
            method_of: None,
            key_of: None,
            classify: None,
            clock: Instant::now,
            timeout: None,
            at: PhantomData,
        }
    }
}

impl<D, Req, At> Builder<D, Req, At>
where
    D: Discover,
    D::Service: Service<Req>,
{
    /// polylb's configuration string, e.g. `loadbalance=peakewma` (README's key table); checked
    /// by [`build`](Self::build).
    pub fn config(mut self, config: impl Into<String>) -> Self {
        self.config = config.into();
        self.balancer = None;
        self
    }

    /// Balances with this polylb balancer (built with [`Balancer::with_config`] from a
    /// hand-built `Config`, say) instead of one built from [`config`](Self::config). Its set
    /// is replaced by the discovered endpoints: give each `Balance` a balancer of its own.
    pub fn balancer(mut self, balancer: Balancer) -> Self {
        self.balancer = Some(balancer);
        self
    }

    /// How an endpoint's key is described to polylb: its address (what consistent hashing
    /// places on the ring and subsetting hashes), weight, start time and warm-up, zone. The
    /// returned [`Invoker`]'s `id` is ignored: the balancer gives each key an id, which a key
    /// that leaves and comes back within 60 s gets again (so `roundrobin` resumes its counter
    /// there, as Dubbo does for a URL); an endpoint is described when it is inserted, and again
    /// when it is inserted anew under the same key.
    pub fn describe<F>(mut self, describe: F) -> Self
    where
        F: Fn(&D::Key) -> Invoker + Send + Sync + 'static,
    {
        self.describe = Box::new(describe);
        self
    }

    /// The method a request calls, for strategies and statistics kept per method (each
    /// distinct name is interned once; at most [`polylb::MAX_METHODS`]). Default: `""`.
    pub fn method<F>(mut self, method_of: F) -> Self
    where
        F: for<'r> Fn(&'r Req) -> &'r str + Send + Sync + 'static,
    {
        self.method_of = Some(Box::new(method_of));
        self
    }

    /// The key a hashing strategy (`consistenthash`, `boundedhash`, `maglev`, `rendezvous`)
    /// places a request by: the same key goes to the same endpoint while it is ready. Those
    /// strategies need it ([`build`](Self::build) refuses them without it); the others ignore
    /// it.
    pub fn hash_key<F>(mut self, key_of: F) -> Self
    where
        F: for<'r> Fn(&'r Req) -> Cow<'r, [u8]> + Send + Sync + 'static,
    {
        self.key_of = Some(Box::new(key_of));
        self
    }

    /// Judges an endpoint's result for polylb (docs/outcomes.md): an HTTP 503 as
    /// [`Outcome::Failure`], a deadline's error as [`Outcome::Timeout`], an error of the
    /// service's own as [`Outcome::Success`]. Default: `Ok` a success, `Err` a failure. The
    /// caller still gets the result as it was. gRPC endpoints (tonic's `Channel`) answer error
    /// statuses in `Ok` responses: pass [`grpc::classify`](crate::grpc::classify).
    ///
    /// It sees the result when the endpoint's future resolves: for an `http::Response`, at
    /// its headers, before its body and trailers. By default the call is reported then; with
    /// [`report_at_body_end`](Self::report_at_body_end) its verdict on a successful response
    /// waits for the body's end, where a `grpc-status` in the trailers replaces it.
    pub fn classify<F>(mut self, classify: F) -> Self
    where
        F: Fn(&Result<Response<D, Req>, EndpointError<D, Req>>) -> Outcome + Send + Sync + 'static,
    {
        self.classify = Some(Arc::new(classify));
        self
    }

    /// The monotonic clock a call's latency is read from. Default: [`Instant::now`]. Tests in
    /// tokio's paused time pass `|| tokio::time::Instant::now().into_std()`, so that a
    /// `sleep` in an endpoint is the latency polylb learns.
    pub fn clock(mut self, clock: fn() -> Instant) -> Self {
        self.clock = clock;
        self
    }

    /// Gives each call `limit` to answer, from `call` until its response future resolves (for
    /// an `http::Response`, its headers): past it, the call is reported
    /// [`Outcome::Timeout`], its endpoint's future is dropped (which cancels the request) and
    /// the response future fails with [`Error::Timeout`]. Default: no limit.
    ///
    /// Put the deadline here rather than in a tower `Timeout` around the `Balance`: one around
    /// it drops the response future, which reads as this side giving up (a cancel, the
    /// endpoint's slowness unseen), so an endpoint that has stalled keeps its share. One
    /// around each endpoint answers an `Err`, a failure to the default classifier. This one is
    /// a timeout, which `peakewma` and `adaptive` weigh and outlier ejection counts, whatever
    /// the classifier. Needs a tokio runtime with its timer enabled, as tower's `Timeout` does;
    /// each call's timer is a heap allocation (a `Balance` without a limit carries none).
    /// With [`report_at_body_end`](Self::report_at_body_end) the limit is for the headers
    /// too: a deadline for a whole stream is the server's to enforce (`grpc-timeout`), and its
    /// answer of `DEADLINE_EXCEEDED` is a timeout as well.
    ///
    /// ```
    /// use polylb_tower::{Balance, Error};
    /// use std::time::Duration;
    /// use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let stalled = service_fn(|_: ()| async {
    ///     tokio::time::sleep(Duration::from_secs(10)).await;
    ///     Ok::<_, std::convert::Infallible>("late")
    /// });
    /// let mut balance = Balance::builder(ServiceList::new([stalled]))
    ///     .config("loadbalance=peakewma")
    ///     .timeout(Duration::from_millis(250))
    ///     .build()?;
    /// let error = balance.ready().await?.call(()).await.unwrap_err();
    /// assert!(matches!(error.downcast_ref(), Some(Error::Timeout(_))));
    /// let stats = balance.balancer().stats_json(0);
    /// assert!(stats.contains("\"timeouts\":1") && stats.contains("\"active\":0"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Reports each call when its response's **body** ends, not when the response future
    /// resolves (at the headers): for endpoints answering `http::Response<B>` with an
    /// [`http_body::Body`] `B` (tonic's `Channel`, hyper's client), so that a gRPC status in the
    /// trailers is seen and a stream is one call, as polylb's gRPC adapters in other languages
    /// report it (docs/outcomes.md, "Streams"). The [`Balance`] then answers
    /// `http::Response<ReportingBody<B>>`: the same response, whose body
    /// ([`ReportingBody`](crate::ReportingBody)) passes `B`'s frames and errors through.
    ///
    /// - The call stays in flight (for `leastactive`, `p2c`, `peakewma`) until the body ends;
    ///   its latency is from the call to the body's end (a stream's life).
    /// - At the end: the trailers' `grpc-status` if they have one, by
    ///   [`grpc::outcome_of_code`](crate::grpc::outcome_of_code); else the classifier's
    ///   verdict on the headers, but a failure for a gRPC response (`content-type:
    ///   application/grpc`, not gRPC-Web) cut short with no `grpc-status`. An error from the body is a failure; a body dropped before
    ///   its end, a cancel.
    /// - Reported at once, at the headers, when they are final: an `Err`, a verdict other
    ///   than success (an HTTP 503, a `grpc-status: 14` in the headers), any `grpc-status` in
    ///   the headers (a "trailers-only" response: gRPC clients read no trailers after it), or
    ///   a body that is empty ([`is_end_stream`](http_body::Body::is_end_stream)).
    /// - The classifier defaults to [`grpc::classify`](crate::grpc::classify) here (a
    ///   `grpc-status` in the headers, else the HTTP status); [`classify`](Self::classify)
    ///   replaces it.
    ///
    /// Read the body to its end, or drop it: a body kept unread keeps its call in flight, as
    /// a gRPC stream must be ended or cancelled. Bodies that tonic's generated clients read
    /// (unary replies, streams read to their end) end with their trailers.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http_body_util::{BodyExt, Full};
    /// use polylb_tower::Balance;
    /// use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// // A gRPC server answering UNAVAILABLE after a message: the status is in the trailers.
    /// let server = service_fn(|_: http::Request<()>| async {
    ///     let mut trailers = http::HeaderMap::new();
    ///     trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
    ///     let body = Full::new(Bytes::from_static(b"\0\0\0\0\0")).with_trailers(async { Some(Ok(trailers)) });
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(body))
    /// });
    /// let mut balance = Balance::builder(ServiceList::new([server]))
    ///     .config("loadbalance=p2c&outlier.consecutiveFailures=5")
    ///     .report_at_body_end()
    ///     .build()?;
    /// let response = balance.ready().await?.call(http::Request::new(())).await?;
    /// let stats = || balance.balancer().stats_json(0);
    /// assert!(stats().contains("\"active\":1")); // in flight until the body ends
    /// let trailers = response.into_body().collect().await?.trailers().cloned();
    /// assert_eq!(trailers.unwrap()["grpc-status"], "14");
    /// assert!(stats().contains("\"failures\":1") && stats().contains("\"active\":0"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn report_at_body_end<B>(self) -> Builder<D, Req, AtBodyEnd>
    where
        D::Service: Service<Req, Response = http::Response<B>>,
        B: http_body::Body,
    {
        Builder {
            discover: self.discover,
            balancer: self.balancer,
            config: self.config,
            describe: self.describe,
            method_of: self.method_of,
            key_of: self.key_of,
            classify: self.classify,
            clock: self.clock,
            timeout: self.timeout,
            at: PhantomData,
        }
    }

    /// The [`Balance`]; [`Error::Config`] if polylb refuses the configuration, or
    /// [`Error::NoHashKey`] for a strategy that places requests by their key
    /// (`consistenthash`, `boundedhash`, `maglev`, `rendezvous`) without a
    /// [`hash_key`](Self::hash_key).
    pub fn build(self) -> Result<Balance<D, Req, At>, Error> {
        let balancer = match self.balancer {
            Some(balancer) => balancer,
            None => Balancer::new(&self.config).map_err(Error::Config)?,
        };
        let strategy = balancer.strategy_name();
        if self.key_of.is_none() && HASHING_STRATEGIES.contains(&strategy) {
            return Err(Error::NoHashKey(strategy));
        }
        Ok(Balance {
            discover: self.discover,
            discover_ended: false,
            balancer,
            endpoints: Endpoints::new(),
            describe: self.describe,
            method_of: self.method_of,
            key_of: self.key_of,
            classify: self.classify,
            methods: HashMap::new(),
            clock: self.clock,
            timeout: self.timeout,
            at: PhantomData,
        })
    }
}

/// polylb's strategies that place each request by its key (docs/strategies.md): without a key
/// every request would hash alike, to one endpoint.
const HASHING_STRATEGIES: [&str; 4] = ["consistenthash", "boundedhash", "maglev", "rendezvous"];

impl<D, Req, At> fmt::Debug for Builder<D, Req, At>
where
    D: Discover,
    D::Service: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("balancer", &self.balancer)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

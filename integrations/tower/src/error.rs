//! The errors the balancer itself raises; endpoints' and discovery's errors pass through boxed.

use std::fmt;
use std::time::Duration;

/// The error type of [`Balance`](crate::Balance)'s `Service` implementation: an endpoint's
/// or the discovery's own error, boxed as tower's balancers box theirs, or an [`Error`] of
/// this crate (find it with `downcast_ref::<polylb_tower::Error>()`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong in the balancer itself, as opposed to in an endpoint or the discovery.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration string was refused when the balancer was built.
    Config(polylb::Error),
    /// polylb refused the set that discovery's changes of one `poll_ready` would have made (a
    /// negative weight from the describer, say). The endpoints those changes inserted or
    /// replaced are dropped and the previous ones kept; the endpoints they removed leave all
    /// the same (discovery does not send a removal twice).
    Update(polylb::Error),
    /// A method name could not be interned (more than [`polylb::MAX_METHODS`] distinct names).
    Method(polylb::Error),
    /// `call` without a ready endpoint: `poll_ready` must return `Ready(Ok(()))` first.
    NotReady,
    /// polylb selected no endpoint for a call (its status says why).
    Select(polylb::Status),
    /// Discovery ended while the set was empty: no endpoint can ever become ready.
    NoEndpoints,
    /// The strategy (named) places each request by its key, and no
    /// [`hash_key`](crate::Builder::hash_key) gives one: every request would go to one
    /// endpoint. Refused by [`build`](crate::Builder::build).
    NoHashKey(&'static str),
    /// The endpoint did not answer within the [`timeout`](crate::Builder::timeout): the call
    /// was reported [`polylb::Outcome::Timeout`] and its response future dropped.
    Timeout(Duration),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => write!(f, "polylb configuration refused: {e}"),
            Error::Update(e) => write!(
                f,
                "polylb refused the discovered set (its new endpoints are dropped, the \
                 previous ones kept but those removed): {e}"
            ),
            Error::Method(e) => write!(f, "method name refused: {e}"),
            Error::NotReady => f.write_str("called before poll_ready returned Ready(Ok)"),
            Error::Select(s) => write!(f, "no endpoint selected: {s}"),
            Error::NoEndpoints => f.write_str("discovery ended with no endpoints"),
            Error::NoHashKey(strategy) => write!(
                f,
                "loadbalance={strategy} places each request by its key, but no hash_key gives \
                 one: every request would go to one endpoint"
            ),
            Error::Timeout(limit) => write!(f, "no response from the endpoint within {limit:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) | Error::Update(e) | Error::Method(e) => Some(e),
            Error::Select(s) => Some(s),
            Error::NotReady | Error::NoEndpoints | Error::NoHashKey(_) | Error::Timeout(_) => None,
        }
    }
}

"""polylb: load balancing for RPC clients (Apache Dubbo's strategies, exact, and more).

A thin ctypes binding of libpolylb. Importing the package loads the library (the copy bundled at
install time, or the one named by the ``POLYLB_LIBRARY`` environment variable) and checks its C
ABI version; a missing or mismatched library raises ``ImportError`` right here.

    >>> import polylb
    >>> with polylb.Balancer(loadbalance="roundrobin") as lb:
    ...     lb.update([polylb.Invoker(1, "10.0.0.1:20880"), polylb.Invoker(2, "10.0.0.2:20880")])
    ...     with lb.call() as call:
    ...         pass  # send the request to invoker call.id
"""

from ._arguments import id_array
from ._balancer import Balancer, library_version
from ._call import Call
from ._config import build_config
from ._invoker import Invoker
from ._errors import (
    BalancerClosedError,
    BufferTooSmallError,
    ConfigError,
    DuplicateIdError,
    IdOutOfRangeError,
    InvalidArgumentError,
    InvalidUtf8Error,
    LimitExceededError,
    NegativeWeightError,
    NoCandidateError,
    NoProviderError,
    NullPointerError,
    PanicError,
    PolylbError,
    UnknownCandidateError,
    UnknownMethodError,
    UnknownOutcomeError,
)
from ._ffi import ABI_VERSION, LIBRARY_ENV, LIBRARY_PATH, Outcome, Status

__version__ = "0.1.0"


def library_path() -> str:
    """The file the native library was loaded from."""
    return str(LIBRARY_PATH)


__all__ = [
    "ABI_VERSION",
    "LIBRARY_ENV",
    "Balancer",
    "BalancerClosedError",
    "BufferTooSmallError",
    "Call",
    "ConfigError",
    "DuplicateIdError",
    "IdOutOfRangeError",
    "InvalidArgumentError",
    "InvalidUtf8Error",
    "Invoker",
    "LimitExceededError",
    "NegativeWeightError",
    "NoCandidateError",
    "NoProviderError",
    "NullPointerError",
    "Outcome",
    "PanicError",
    "PolylbError",
    "Status",
    "UnknownCandidateError",
    "UnknownMethodError",
    "UnknownOutcomeError",
    "build_config",
    "id_array",
    "library_path",
    "library_version",
]

"""polylb for httpx: :class:`BalancedTransport` and :class:`AsyncBalancedTransport`, httpx
transports that send each request to an HTTP endpoint polylb picks and report how it ended.

Needs httpx (``pip install polylb[httpx]``); ``import polylb`` itself never imports httpx.
"""

try:
    import httpx as _httpx  # type: ignore[import-not-found, unused-ignore]  # noqa: F401 (the hint below if missing)
except ImportError as error:  # pragma: no cover - exercised by a subprocess test
    raise ImportError("polylb.httpx needs httpx: pip install 'polylb[httpx]' (or pip install httpx)") from error

from ._endpoints import Endpoint
from ._outcomes import Classifier, error_outcome, status_outcome
from ._transport import AsyncBalancedTransport, BalancedTransport, NoEndpointsError

__all__ = [
    "AsyncBalancedTransport",
    "BalancedTransport",
    "Classifier",
    "Endpoint",
    "NoEndpointsError",
    "error_outcome",
    "status_outcome",
]

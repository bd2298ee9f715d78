"""polylb for grpcio: :class:`BalancedChannel`, a ``grpc.Channel`` balanced by polylb.

Needs grpcio (``pip install polylb[grpc]``); ``import polylb`` itself never imports grpc.
"""

try:
    import grpc as _grpc  # type: ignore[import-untyped, unused-ignore]  # noqa: F401 (the hint below if missing)
except ImportError as error:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "polylb.grpc needs grpcio: pip install 'polylb[grpc]' (or pip install grpcio)"
    ) from error

from ._channel import BalancedChannel
from ._errors import NoEndpointsError
from ._members import ChannelFactory, Endpoint, KeyFunction

__all__ = ["BalancedChannel", "ChannelFactory", "Endpoint", "KeyFunction", "NoEndpointsError"]

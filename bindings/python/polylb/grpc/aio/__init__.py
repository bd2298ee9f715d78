"""polylb for grpc.aio: :class:`BalancedChannel`, a ``grpc.aio.Channel`` balanced by polylb.

Needs grpcio, as :mod:`polylb.grpc` does.
"""

from .._members import ChannelFactory, Endpoint, KeyFunction
from ._channel import BalancedChannel
from ._errors import NoEndpointsError

__all__ = ["BalancedChannel", "ChannelFactory", "Endpoint", "KeyFunction", "NoEndpointsError"]

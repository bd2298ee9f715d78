"""The error of a call the balanced channel could not send anywhere."""

from __future__ import annotations

from typing import Any, Callable, Iterator, NoReturn, Optional

import grpc  # type: ignore[import-untyped, unused-ignore]

NO_ENDPOINTS = "polylb balanced channel has no endpoints (call BalancedChannel.update() first)"
CLOSED = "Cannot invoke RPC: the polylb balanced channel is closed"


class NoEndpointsError(grpc.RpcError, grpc.Call, grpc.Future):  # type: ignore[misc, unused-ignore]
    """``UNAVAILABLE``: the balanced channel has no endpoint to send the call to.

    A ``grpc.RpcError`` like the one grpcio raises for a channel that cannot connect, so code that
    handles gRPC errors handles this one; nothing was sent, so nothing is reported to the balancer.
    It is also an ended call (``grpc.Call``, ``grpc.Future``, an iterator that raises it), which is
    what ``future()`` and the streaming forms return, as grpcio returns its failed calls."""

    def __init__(self, details: str = NO_ENDPOINTS) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> Any:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Any:
        return None

    def trailing_metadata(self) -> Any:
        return None

    def debug_error_string(self) -> str:
        return self._details

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> Optional[float]:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def result(self, timeout: Optional[float] = None) -> NoReturn:
        raise self

    def exception(self, timeout: Optional[float] = None) -> "NoEndpointsError":
        return self

    def traceback(self, timeout: Optional[float] = None) -> Any:
        return self.__traceback__

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> NoReturn:
        raise self

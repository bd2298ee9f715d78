"""What an asyncio call the balanced channel could not send anywhere raises, and returns."""

from __future__ import annotations

from typing import Any, Callable, Generator, NoReturn, Optional

import grpc  # type: ignore[import-untyped, unused-ignore]
import grpc.aio  # type: ignore[import-untyped, unused-ignore]

from .. import _errors as _sync
from .._errors import NO_ENDPOINTS


class NoEndpointsError(_sync.NoEndpointsError, grpc.aio.AioRpcError):  # type: ignore[misc, unused-ignore]
    """``UNAVAILABLE``: the balanced channel has no endpoint to send the call to. Both
    ``polylb.grpc.NoEndpointsError`` and ``grpc.aio.AioRpcError``, so either ``except`` catches
    it, as it catches grpc.aio's error for a channel that cannot connect."""

    def __init__(self, details: str = NO_ENDPOINTS) -> None:
        grpc.aio.AioRpcError.__init__(
            self, grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details, details
        )
        self._details = details


class Unsent:
    """The grpc.aio call of a call that was never sent: it has ended, with ``error``'s status,
    and awaiting it, reading from it or writing to it raises ``error``."""

    __slots__ = ("_error",)

    def __init__(self, error: NoEndpointsError) -> None:
        self._error = error

    def __await__(self) -> Generator[Any, None, NoReturn]:
        raise self._error
        yield  # pragma: no cover - makes this a generator: awaiting it raises

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def time_remaining(self) -> Optional[float]:
        return None

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    async def code(self) -> Any:
        return grpc.StatusCode.UNAVAILABLE

    async def details(self) -> str:
        return self._error.details()

    async def debug_error_string(self) -> str:
        return self._error.details()

    async def initial_metadata(self) -> Any:
        return grpc.aio.Metadata()

    async def trailing_metadata(self) -> Any:
        return grpc.aio.Metadata()

    async def wait_for_connection(self) -> NoReturn:
        raise self._error

    async def read(self) -> NoReturn:
        raise self._error

    async def write(self, request: Any) -> NoReturn:
        raise self._error

    async def done_writing(self) -> None:
        pass

"""Exceptions: one class per library status code, all under :class:`PolylbError`.

Each subclass also derives from the built-in exception a Python programmer would reach for
(``ValueError`` for bad input, ``LookupError`` for an id or name that is not there), so code that
already catches those keeps working.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

from ._ffi import Status, status_text


class PolylbError(Exception):
    """An error reported by libpolylb (or by this binding before calling it).

    ``status`` is the library's status code (a :class:`polylb.Status` when it is a known one) and
    ``message`` the library's text: the detailed message for cold calls (config, update), the
    code's static description for hot calls (select, report), which have no message buffer.
    """

    status: int
    message: str

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        try:
            self.status = Status(status)
        except ValueError:  # a code newer than this binding: keep the number
            self.status = status
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={int(self.status)}, message={self.message!r})"

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Rebuilt from (status, message), not from Exception's args (the message alone), so
        # that pickle and copy work: an error raised in a multiprocessing worker reaches the
        # parent as itself.
        return (_rebuild, (type(self), int(self.status), self.message))


class NullPointerError(PolylbError):
    """PLB_ERR_NULL_POINTER: a NULL handle or pointer reached the library (a binding bug)."""


class InvalidUtf8Error(PolylbError, ValueError):
    """PLB_ERR_INVALID_UTF8: a config, address, zone or method name given as bytes is not UTF-8."""


class ConfigError(PolylbError, ValueError):
    """PLB_ERR_INVALID_CONFIG: unknown key (the message suggests the nearest), bad value, duplicate."""


class NegativeWeightError(PolylbError, ValueError):
    """PLB_ERR_NEGATIVE_WEIGHT: an invoker's weight is below zero."""


class DuplicateIdError(PolylbError, ValueError):
    """PLB_ERR_DUPLICATE_ID: two invokers in one update share an id."""


class IdOutOfRangeError(PolylbError, ValueError):
    """PLB_ERR_ID_OUT_OF_RANGE: an invoker id is negative or above 2**63 - 1."""


class NoProviderError(PolylbError):
    """PLB_ERR_NO_PROVIDER: select on an empty invoker set."""


class NoCandidateError(PolylbError):
    """PLB_ERR_NO_CANDIDATE: every candidate was excluded."""


class UnknownCandidateError(PolylbError, LookupError):
    """PLB_ERR_UNKNOWN_CANDIDATE: a candidate id is not in the current invoker set."""


class UnknownMethodError(PolylbError, LookupError):
    """PLB_ERR_UNKNOWN_METHOD: a method id that :meth:`polylb.Balancer.method` did not return."""


class UnknownOutcomeError(PolylbError, ValueError):
    """PLB_ERR_UNKNOWN_OUTCOME: an outcome that is not one of :class:`polylb.Outcome`."""


class BufferTooSmallError(PolylbError):
    """PLB_ERR_BUFFER_TOO_SMALL: handled inside :meth:`polylb.Balancer.stats`; seen only on a bug."""


class PanicError(PolylbError):
    """PLB_ERR_PANIC: a bug inside polylb was caught at the C boundary; the process is intact."""


class InvalidArgumentError(PolylbError, ValueError):
    """PLB_ERR_INVALID_ARGUMENT: e.g. a negative elapsed time or a NaN/negative cpu load."""


class LimitExceededError(PolylbError):
    """PLB_ERR_LIMIT_EXCEEDED: e.g. more distinct method names than the library allows."""


class BalancerClosedError(PolylbError, ValueError):
    """The :class:`polylb.Balancer` was closed; like I/O on a closed file, this is a ValueError.

    Its ``status`` is ``Status.NULL_POINTER``: a closed balancer has no handle left to pass.
    """

    def __init__(self, message: str = "the balancer is closed") -> None:
        super().__init__(Status.NULL_POINTER, message)


def _rebuild(cls: Type[PolylbError], status: int, message: str) -> PolylbError:
    """An error as pickled by :meth:`PolylbError.__reduce__` (subclasses with other
    constructors, such as :class:`BalancerClosedError`, included)."""
    error = cls.__new__(cls)
    PolylbError.__init__(error, status, message)
    return error


ERROR_CLASSES: Dict[int, Type[PolylbError]] = {
    Status.NULL_POINTER: NullPointerError,
    Status.INVALID_UTF8: InvalidUtf8Error,
    Status.INVALID_CONFIG: ConfigError,
    Status.NEGATIVE_WEIGHT: NegativeWeightError,
    Status.DUPLICATE_ID: DuplicateIdError,
    Status.ID_OUT_OF_RANGE: IdOutOfRangeError,
    Status.NO_PROVIDER: NoProviderError,
    Status.NO_CANDIDATE: NoCandidateError,
    Status.UNKNOWN_CANDIDATE: UnknownCandidateError,
    Status.UNKNOWN_METHOD: UnknownMethodError,
    Status.UNKNOWN_OUTCOME: UnknownOutcomeError,
    Status.BUFFER_TOO_SMALL: BufferTooSmallError,
    Status.PANIC: PanicError,
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.LIMIT_EXCEEDED: LimitExceededError,
}


def error_for(status: int, message: Optional[str] = None) -> PolylbError:
    """The exception for a (positive) status code, with the library's message."""
    if not message:
        message = status_text(status)
    return ERROR_CLASSES.get(status, PolylbError)(status, message)

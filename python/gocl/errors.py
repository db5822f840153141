"""Exceptions carrying gocl's result code and its sentence (goclGetLastError)."""

from __future__ import annotations


class GoclError(RuntimeError):
    """A gocl call failed. ``code`` is the goclResult_t, the message says what
    failed, on which rank, and what to do."""

    code = -1

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class GoclSystemError(GoclError):
    code = 2


class GoclInternalError(GoclError):
    code = 3


class InvalidArgumentError(GoclError, ValueError):
    code = 4


class InvalidUsageError(GoclError):
    code = 5


class RemoteError(GoclError):
    """A peer failed, closed its connection, or disagreed on the call; a rank
    that died is named on every rank ("reported by rank N" when a neighbour
    saw it first)."""

    code = 6


class GoclTimeoutError(GoclError, TimeoutError):
    """No progress within GOCL_TIMEOUT. Every rank's message names the same
    rank: the one at the root of the wait chain (stopped, hung, or not making
    the call), not the neighbour this rank happened to wait for."""

    code = 8


class ForkError(InvalidUsageError):
    """gocl was used in a child created by fork() after it was loaded."""


_BY_CODE = {c.code: c for c in (GoclSystemError, GoclInternalError, InvalidArgumentError, InvalidUsageError,
                                RemoteError, GoclTimeoutError)}


def error_for(code: int, message: str) -> GoclError:
    cls = _BY_CODE.get(code, GoclError)
    return cls(message or f"gocl error {code}", code)

"""The engine's error answers as typed errors, so no caller reads a status code.

`_gateway` maps every aiodocker error into these (or into `EngineUnavailable` /
`EngineTimeout`); they are importable from there too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from .._errors import EngineUnavailable, SandboxError
from ._access import PERMISSION_HINT, START_HINT

__all__ = ["EngineConflict", "EngineError", "EngineNotFound", "answer_error", "first_call",
           "unreachable"]


class EngineError(SandboxError):
    """Raised when the engine answered a call with an error status.

    Attributes:
        status: The HTTP status the engine answered.
    """

    def __init__(self, message: str, *, status: int, details: str = "",
                 retryable: bool | None = None, cause: BaseException | None = None) -> None:
        super().__init__(message, details=details, retryable=retryable, cause=cause)
        self.status = status


class EngineNotFound(EngineError):
    """Raised when the engine answered 404: the container, exec, image or network is gone."""


class EngineConflict(EngineError):
    """Raised when the engine answered 409: e.g. a name taken, or a container not running."""


def answer_error(status: int, message: str, action: str,
                 cause: BaseException | None = None) -> EngineError:
    """The typed error for the engine's error answer ``status`` to ``action``."""
    kind = {404: EngineNotFound, 409: EngineConflict}.get(status, EngineError)
    return kind(f"{action}: the engine answered {status}", status=status, details=message,
                retryable=status >= 500, cause=cause)


def unreachable(action: str, address: str, *, denied: bool, details: str,
                cause: BaseException) -> EngineUnavailable:
    """The error for a connect to the engine's socket that failed (``denied``: permission
    denied on it, not retryable), said alike whichever client made it."""
    if denied:
        return EngineUnavailable(
            f"{action}: permission denied on the Docker engine's socket at {address}: this "
            f"user may not use the engine; {PERMISSION_HINT}", details=details,
            retryable=False, cause=cause)
    return EngineUnavailable(f"{action}: no Docker engine answers at {address}; {START_HINT}",
                             details=details, cause=cause)


def lost(action: str, address: str, details: str, cause: BaseException | None
         ) -> EngineUnavailable:
    """The error for a connection to the engine that broke during a call, said alike
    whichever client made it."""
    return EngineUnavailable(f"{action}: lost the connection to the engine at {address}",
                             details=details, cause=cause)


@contextlib.contextmanager
def first_call(on_error: Callable[[], object] | None = None) -> Iterator[None]:
    """Around a create's first engine call (the ping, with or without ``/info``): an engine
    error there says the engine is unavailable, except a failed ``/info`` read, reported as
    itself. ``on_error`` runs first if the call fails (a read going on beside it stops)."""
    try:
        yield
    except BaseException as exc:
        if on_error is not None:
            on_error()
        if isinstance(exc, EngineUnavailable) or not isinstance(exc, SandboxError) or \
                exc.message.startswith("read engine info"):
            raise
        raise EngineUnavailable(exc.message, details=exc.details, cause=exc) from exc

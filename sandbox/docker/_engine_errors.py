"""The engine's error answers as typed errors, so no caller reads a status code.

`_gateway` maps every aiodocker error into these (or into `EngineUnavailable` /
`EngineTimeout`); they are importable from there too.
"""

from __future__ import annotations

from .._errors import SandboxError

__all__ = ["EngineConflict", "EngineError", "EngineNotFound"]


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

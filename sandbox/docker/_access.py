"""Telling "no engine" from "this user may not use the engine" when a connect fails.

A user outside the docker group gets EACCES on the engine's socket; reporting that as "no
engine answers" sends them looking for a daemon that is running. aiodocker flattens the
connect error into its message and keeps the original as the exception's context.
"""

from __future__ import annotations

__all__ = ["PERMISSION_HINT", "START_HINT", "permission_denied"]

START_HINT = (
    "is Docker installed and running? Start it (e.g. `sudo systemctl start docker`), or point "
    "DOCKER_HOST at a running engine"
)
PERMISSION_HINT = (
    "add the user to the docker group (`sudo usermod -aG docker $USER`, then log in again), "
    "or point DOCKER_HOST at an engine this user may use"
)


def permission_denied(exc: BaseException) -> bool:
    """Whether a failed connect was refused for lack of permission (EACCES on the socket).

    aiodocker flattens the connect error into its message; the original is the context."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        os_error = getattr(seen, "os_error", seen)
        if isinstance(os_error, PermissionError):
            return True
        seen = seen.__cause__ or seen.__context__
    text = str(getattr(exc, "message", exc))
    return "[Errno 13]" in text or "Permission denied" in text

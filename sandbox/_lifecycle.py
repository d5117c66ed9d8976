"""The sandbox's lifecycle state machine, owned by `Sandbox` and driven by its backend.

`Sandbox` moves it through creation and cleanup; a backend reports what only the engine
knows (the sandbox stopped, was removed, paused, or the SDK's own background work failed)
through `fail` and `set_paused`. Every call that needs a running sandbox asks
`require_running`, which raises the error that says why it is not running.

The backend's RUNNING comes when the container (pod, process) runs, before the last steps of
its create (the sandbox user's ids, ``/etc/hosts``, the repository, the config's tools): the
sandbox is the user's only once `Sandbox.initialize` has finished (`ready`). Until then what
users see (`shown_status`) is STARTING, and their calls (`require_ready`) are refused, as
during the rest of the create; the create's own steps use `require_running`.
"""

from __future__ import annotations

from ._errors import (
    ResourceLimitExceeded,
    SandboxAlreadyInitialized,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
)
from ._models import SandboxStatus

__all__ = ["Lifecycle"]

#: The states a sandbox can leave only through cleanup.
_ENDED = (SandboxStatus.STOPPING, SandboxStatus.DESTROYED)
#: The states of a sandbox whose create is under way (until `Lifecycle.ready`).
_CREATING = (SandboxStatus.CREATING, SandboxStatus.STARTING, SandboxStatus.RUNNING,
             SandboxStatus.PAUSED)


class Lifecycle:
    """Where one sandbox is (`status`), why (`reason`), and how it ended, if it did."""

    def __init__(self) -> None:
        self._status = SandboxStatus.CREATING
        self.initialized = False
        self.reason = ""
        self.exit_code: int | None = None
        self.oom_killed = False
        self.gone = False
        self.background_error: BaseException | None = None
        #: Cleanup was asked for and removes the sandbox without a delay: background work
        #: that has not begun yet (an event watcher) need not begin (`Supervisor.start`).
        self.removing = False
        #: `Sandbox.initialize` has finished: calls from any task may use the sandbox.
        self.ready = False

    @property
    def status(self) -> SandboxStatus:
        """Where the sandbox is now."""
        return self._status

    @property
    def shown_status(self) -> SandboxStatus:
        """The status users see: STARTING while running but not yet `ready`."""
        status = self._status
        if not self.ready and status in (SandboxStatus.RUNNING, SandboxStatus.PAUSED):
            return SandboxStatus.STARTING
        return status

    def begin(self) -> None:
        """Start initialization, once per sandbox object."""
        if self.initialized:
            raise SandboxAlreadyInitialized("this sandbox was already initialized; create a "
                                            "new Sandbox for another one")
        self.initialized = True

    def advance(self, status: SandboxStatus) -> None:
        """Move to ``status`` on the way up (STARTING, RUNNING) or down (STOPPING, DESTROYED)."""
        self._status = status

    def fail(self, reason: str, *, exit_code: int | None = None, oom_killed: bool = False,
             gone: bool = False, error: BaseException | None = None) -> bool:
        """Record that the sandbox stopped by itself, was stopped by a limit, was removed from
        outside (``gone``), or that the SDK lost track of it (``error``).

        The first failure is the news: a later one changes nothing, nor does a failure seen
        while cleanup is under way. Returns whether this call recorded it.
        """
        if self._status in _ENDED or self._status is SandboxStatus.FAILED:
            self.oom_killed = self.oom_killed or oom_killed
            return False
        self._status = SandboxStatus.FAILED
        self.reason = reason
        self.exit_code = exit_code
        self.oom_killed = self.oom_killed or oom_killed
        self.gone = gone
        self.background_error = error
        return True

    def set_paused(self, paused: bool, reason: str = "") -> None:
        """Follow a pause or unpause seen on the engine (from outside the SDK)."""
        if paused and self._status is SandboxStatus.RUNNING:
            self._status, self.reason = SandboxStatus.PAUSED, reason
        elif not paused and self._status is SandboxStatus.PAUSED:
            self._status, self.reason = SandboxStatus.RUNNING, ""

    @property
    def alive(self) -> bool:
        """True while commands may run or are merely frozen (RUNNING or PAUSED)."""
        return self._status in (SandboxStatus.RUNNING, SandboxStatus.PAUSED)

    def not_running(self) -> SandboxError:
        """The error for a call that needs a running sandbox, given why it is not running."""
        if not self.initialized:
            return SandboxNotRunning("the sandbox was never initialized: call initialize() or "
                                     "use `async with Sandbox(...)`")
        if self.oom_killed:
            return ResourceLimitExceeded(
                "the sandbox's main process was killed by the out-of-memory killer",
                details=self.reason,
            )
        reason = f" ({self.reason})" if self.reason else ""
        if self.gone:
            return SandboxNotFound(f"the sandbox is gone{reason}")
        if self.background_error is not None:
            return SandboxNotRunning(
                f"the sandbox is {self._status.value}{reason}",
                details="the SDK lost track of the sandbox; call cleanup() and start a new one",
                cause=self.background_error)
        if self._status in _ENDED:
            # Most often: a call after the `async with` block, which removed the sandbox.
            return SandboxNotRunning(
                f"the sandbox is {self._status.value}{reason}: it was removed when its "
                "`async with` block ended (or cleanup() was called)",
                details="make the call inside the block, or start a new Sandbox for it "
                "(a Sandbox object runs one sandbox, once)")
        return SandboxNotRunning(f"the sandbox is {self._status.value}{reason}")

    def require_running(self) -> None:
        """Raise the error that says why the sandbox cannot run commands now, if it cannot."""
        if self._status is not SandboxStatus.RUNNING:
            raise self.not_running()

    def require_ready(self) -> None:
        """`require_running` for a user's call: also refused while the create is finishing."""
        if self._status is not SandboxStatus.RUNNING or not self.ready:
            self.check_ready()
            raise self.not_running()

    def check_ready(self) -> None:
        """Refuse a user's call while the create is under way (CREATING to its end); for
        calls whose backend decides the rest (`require_running`, in its file operations)."""
        if self.initialized and not self.ready and self._status in _CREATING:
            raise self.not_ready()

    def not_ready(self) -> SandboxError:
        """The error for a user's call made while the sandbox is still being created."""
        return SandboxNotRunning(
            f"the sandbox is {self.shown_status.value}: initialize() has not finished",
            details="wait for initialize() (or `async with`) to return before using the "
            "sandbox from another task")

"""The behaviour suite every backend runs: `check_backend` (exported by `sandbox.testing`).

In the spirit of trio's ``trio.testing.check_*_stream``: a third-party backend proves it keeps
the `Sandbox` contract by running the same checks the SDK's own backends run. Each check is a
named `Check` in `CHECKS`, so a test suite can parametrize over them (one pytest test per
check, one shared sandbox per backend); `check_backend` runs them all in one call and reports
which failed.

A backend declares what it `supports` (see `CAPABILITIES`). A check of a capability the
backend declares must work; for one it does not declare among ``command_user``, ``pool_reuse`` and
``checkpoint``, the suite checks that the SDK refuses it with a typed error naming the backend
(never an AttributeError or a silent no-op). The checks of ``commands``, ``host_copy`` and
``gc`` are skipped when undeclared (an in-memory fake answers commands from a script and has no
host side: there is nothing real to check), and ``usage`` then checks only the types.

From pytest, one test per check with one shared sandbox per backend::

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def harness():
        async with Harness(BackendUnderTest(name="mine", config=..., make=...)) as h:
            yield h

    @pytest.mark.asyncio(loop_scope="module")
    @pytest.mark.parametrize("check", CHECKS, ids=str)
    async def test_contract(harness, check):
        try:
            await harness.run(check)
        except CheckSkipped as exc:
            pytest.skip(str(exc))
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import attrs

from ._backend import Process, SupportsHealth
from ._checkpoint import remove_checkpoint
from ._constants import IMAGE_BUSYBOX
from ._errors import (
    CheckpointFailed,
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    ConfigError,
    CopyLimitExceeded,
    FileOperationFailed,
    NetworkAccessDenied,
    SandboxAlreadyInitialized,
    SandboxError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxNotRunning,
    SandboxPermissionDenied,
    SecurityViolation,
    StdinClosed,
    UnsafeArchive,
)
from ._gc import GcItem, gc
from ._models import Command, ResourceUsage, SandboxConfig, SandboxStatus
from ._pool import SandboxPool
from ._protocol import ExecutionSandbox
from ._sandbox import Sandbox
from ._shield import finish_despite_cancel

__all__ = ["CAPABILITIES", "CHECKS", "BackendUnderTest", "Check", "CheckSkipped",
           "ContractFailed", "ContractReport", "Harness", "Outcome", "check_backend"]

#: What a backend may declare in `BackendUnderTest.supports`:
#:
#: - ``commands``: commands really run (streaming, stdin, timeouts, kills, sessions, usage).
#: - ``host_copy``: ``copy_files`` moves real bytes between the host and the sandbox.
#: - ``command_user``: a command may run as another user than the sandbox's (``allow_write=
#:   False`` runs it as nobody); else it is refused with `CommandStartFailed`.
#: - ``pool_reuse``: a `SandboxPool` with ``max_uses > 1`` resets and reuses a sandbox; else
#:   the pool refuses with `ConfigError`.
#: - ``checkpoint``: `Sandbox.checkpoint` keeps the filesystem to start new sandboxes from;
#:   else `CheckpointFailed` (or `ConfigError`).
#: - ``usage``: `get_resource_usage` measures the sandbox (memory in use is above 0).
#: - ``gc``: `sandbox.gc` sees the backend's sandboxes (keeps a live one, finds none after
#:   cleanup).
CAPABILITIES = frozenset({"commands", "host_copy", "command_user", "pool_reuse", "checkpoint",
                          "usage", "gc"})

#: Leftovers of one sandbox seen from the host: given the sandbox and a marker (the seconds of
#: a ``sleep`` started in it), what of it is still there, as short descriptions.
LeftoverProbe = Callable[["Sandbox", str], Awaitable[list[str]]]


def _capabilities(value: Iterable[str]) -> frozenset[str]:
    names = frozenset(value)
    unknown = sorted(names - CAPABILITIES)
    if unknown:
        raise ConfigError(f"supports: unknown capabilities {unknown}",
                          details=f"use some of {sorted(CAPABILITIES)}")
    return names


@attrs.frozen(kw_only=True)
class BackendUnderTest:
    """A backend as the suite sees it.

    Attributes:
        name: Shown in reports and test ids, e.g. ``"docker+gvisor"``.
        config: The base config; its image must have a POSIX shell and busybox-like tools
            (``sleep``, ``head``, ``tr``, ``id``, ``ln``, ``setsid``).
        make: Builds an uninitialized `Sandbox` from a config, e.g.
            ``lambda cfg: Sandbox(backend=MyBackend(cfg))``.
        supports: The `CAPABILITIES` the backend claims; the suite holds it to them.
        refusal_name: What a typed refusal must name (case-insensitive); by default
            ``config.type``.
        leftovers: Looks from the host for what remains of a sandbox (containers, pods,
            processes holding the marker); None skips that part of the cleanup check.
    """

    name: str
    config: SandboxConfig
    make: Callable[[SandboxConfig], Sandbox] = Sandbox
    supports: frozenset[str] = attrs.field(default=CAPABILITIES, converter=_capabilities)
    refusal_name: str = ""
    leftovers: LeftoverProbe | None = None

    @property
    def names(self) -> str:
        return self.refusal_name or self.config.type


class CheckSkipped(Exception):
    """A check does not apply to this backend (it lacks an emulated capability)."""


class ContractFailed(AssertionError):
    """`check_backend` found checks the backend fails; `report` says which and why."""

    def __init__(self, report: ContractReport) -> None:
        super().__init__(str(report))
        self.report = report


@attrs.frozen
class Check:
    """One named behaviour; ``fresh`` checks make their own sandboxes, the others share one."""

    name: str
    area: str
    doc: str
    run: Callable[[Context], Awaitable[None]] = attrs.field(repr=False)
    needs: frozenset[str] = frozenset()
    fresh: bool = False

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Outcome:
    check: str
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""


@attrs.frozen
class ContractReport:
    """What `check_backend` found, one `Outcome` per check."""

    backend: str
    outcomes: tuple[Outcome, ...]

    def of(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def ok(self) -> bool:
        return not self.of("failed")

    def __str__(self) -> str:
        counts = ", ".join(f"{len(self.of(s))} {s}" for s in ("passed", "failed", "skipped"))
        lines = [f"backend {self.backend}: {counts}"]
        lines += [f"  FAILED {o.check}: {o.detail}" for o in self.of("failed")]
        return "\n".join(lines)


# -- the context a check runs in ---------------------------------------------------------------

class Context:
    """What a check gets: the backend, the shared sandbox, fresh ones, a host temp dir."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self.subject = harness.subject
        self.tmp = harness.tmp

    def supports(self, capability: str) -> bool:
        return capability in self.subject.supports

    def config(self, **changes: Any) -> SandboxConfig:
        """The base config with ``changes`` (and the environment the checks expect)."""
        changes.setdefault("environment", {"BASE": "1"})
        return attrs.evolve(self.subject.config, **changes)

    async def shared(self) -> Sandbox:
        """The sandbox the non-fresh checks share, with its cwd and environment as new."""
        return await self._harness.shared()

    @contextlib.asynccontextmanager
    async def fresh(self, **changes: Any) -> AsyncIterator[Sandbox]:
        """A new sandbox of its own, removed after the block."""
        async with self.subject.make(self.config(**changes)) as sb:
            yield sb

    def host_dir(self, name: str) -> Path:
        path = self.tmp / f"{name}-{secrets.token_hex(4)}"
        path.mkdir()
        return path

    @staticmethod
    def marker() -> str:
        """Seconds for a ``sleep`` no other process on the machine has in its argv."""
        return str(7_000_000 + secrets.randbelow(2_000_000))

    async def holding(self, sb: Sandbox, marker: str) -> list[str]:
        """Command lines of the sandbox's processes holding ``marker``, read by a new exec."""
        r = await sb.execute_command(["/bin/sh", "-c", _PS])
        return [line for line in r.stdout.splitlines() if marker in line]

    async def expect_gone(self, sb: Sandbox, marker: str, after: str) -> None:
        """No process of the sandbox may hold ``marker`` any more (``after`` says since what)."""
        left = await self.holding(sb, marker)
        _expect(not left, f"still running {after}: {left}")

    def refuses(self, exc: BaseException) -> None:
        """``exc`` must name the backend, so the user learns which one lacks what."""
        _expect(self.subject.names.lower() in str(exc).lower(),
                f"the refusal does not name the backend {self.subject.names!r}: {exc!r}")


#: Every process's argv, skipping the scan's own shell; run by `Context.holding`.
_PS = (r"for d in /proc/[0-9]*; do [ $d = /proc/$$ ] && continue; "
       r"c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null) || continue; echo \"$c\"; done")


def _expect(condition: object, message: str) -> None:
    if not condition:
        raise AssertionError(message)


@contextlib.contextmanager
def _raises(kinds: type[BaseException] | tuple[type[BaseException], ...],
            match: str = "") -> Iterator[list[BaseException]]:
    """Like ``pytest.raises`` (pytest is not a dependency of the SDK)."""
    caught: list[BaseException] = []
    try:
        yield caught
    except kinds as exc:
        _expect(not match or re.search(match, str(exc)),
                f"{type(exc).__name__} raised, but {match!r} is not in {str(exc)!r}")
        caught.append(exc)
    else:
        raise AssertionError(f"{kinds} was not raised")


# -- the harness: runs checks against one backend ----------------------------------------------

class Harness:
    """Runs checks against one backend, holding the sandbox the non-fresh checks share.

    Use it as an async context manager (pytest: a module-scoped fixture), then `run` each
    check; `CheckSkipped` says a check does not apply.
    """

    def __init__(self, subject: BackendUnderTest, tmp: Path | None = None) -> None:
        self.subject = subject
        self._own_tmp: tempfile.TemporaryDirectory[str] | None = None
        if tmp is None:
            self._own_tmp = tempfile.TemporaryDirectory(prefix="sandbox-contract-")
            tmp = Path(self._own_tmp.name)
        self.tmp = tmp
        self._shared: Sandbox | None = None
        self._env: dict[str, str] = {}
        self._broken: BaseException | None = None

    async def __aenter__(self) -> Harness:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._drop_shared()
        finally:
            if self._own_tmp is not None:
                self._own_tmp.cleanup()

    async def _drop_shared(self) -> None:
        sb, self._shared = self._shared, None
        if sb is not None:
            await finish_despite_cancel(sb.cleanup())

    async def shared(self) -> Sandbox:
        if self._broken is not None:
            raise AssertionError(f"the shared sandbox could not be made: "
                                 f"{type(self._broken).__name__}: {self._broken}"
                                 ) from self._broken
        sb = self._shared
        if sb is not None and sb.status is not SandboxStatus.RUNNING:
            await self._drop_shared()  # an earlier check broke it: the next gets a new one
            sb = None
        if sb is None:
            sb = self.subject.make(attrs.evolve(self.subject.config,
                                                environment={"BASE": "1"}))
            try:
                await sb.initialize()
            except Exception as exc:
                self._broken = exc
                raise
            self._shared, self._env = sb, sb.get_environment()
        await sb.set_working_directory(self.subject.config.working_dir)
        sb.set_environment({**dict.fromkeys(sb.get_environment()), **self._env})
        return sb

    async def run(self, check: Check, *, deadline: float = 240) -> None:
        """Run ``check``; raises what it found, or `CheckSkipped`. A check still running
        after ``deadline`` seconds fails (a hung backend must not hang the suite)."""
        missing = sorted(check.needs - self.subject.supports)
        if missing:
            raise CheckSkipped(f"{self.subject.name} does not claim {', '.join(missing)}")
        with anyio.move_on_after(deadline) as scope:
            await check.run(Context(self))
        if scope.cancelled_caught:
            raise AssertionError(f"{check.name} did not finish within {deadline} s")


async def check_backend(
    factory: Callable[[SandboxConfig], Sandbox] = Sandbox, *,
    config: SandboxConfig | None = None, name: str = "",
    supports: Sequence[str] | frozenset[str] = CAPABILITIES, refusal_name: str = "",
    leftovers: LeftoverProbe | None = None, only: Sequence[str] = (),
    raise_on_failure: bool = True,
) -> ContractReport:
    """Run every check (or those named in ``only``) against the backend ``factory`` makes.

    Example:
        report = await check_backend(lambda cfg: Sandbox(backend=MyBackend(cfg)),
                                     config=SandboxConfig(type="mine", image=...),
                                     supports={"commands", "host_copy"})

    Raises:
        ContractFailed: A check failed (unless ``raise_on_failure=False``); its report lists
            every check with what it found.
    """
    config = config or SandboxConfig(image=IMAGE_BUSYBOX)
    subject = BackendUnderTest(name=name or config.type, config=config, make=factory,
                               supports=frozenset(supports), refusal_name=refusal_name,
                               leftovers=leftovers)
    unknown = sorted(set(only) - {c.name for c in CHECKS})
    if unknown:
        raise ConfigError(f"only: no checks named {unknown}")
    outcomes: list[Outcome] = []
    async with Harness(subject) as harness:
        for check in CHECKS:
            if only and check.name not in only:
                continue
            try:
                await harness.run(check)
            except CheckSkipped as exc:
                outcomes.append(Outcome(check.name, "skipped", str(exc)))
            except Exception as exc:
                outcomes.append(Outcome(check.name, "failed", f"{type(exc).__name__}: {exc}"))
            else:
                outcomes.append(Outcome(check.name, "passed"))
    report = ContractReport(subject.name, tuple(outcomes))
    if raise_on_failure and not report.ok:
        raise ContractFailed(report)
    return report


# -- the checks --------------------------------------------------------------------------------

_CHECKS: list[Check] = []


def _check(area: str, *, needs: Sequence[str] = (), fresh: bool = False
           ) -> Callable[[Callable[[Context], Awaitable[None]]],
                         Callable[[Context], Awaitable[None]]]:
    def register(fn: Callable[[Context], Awaitable[None]]) -> Callable[[Context], Awaitable[None]]:
        name = fn.__name__.lstrip("_")
        _CHECKS.append(Check(name, area, (fn.__doc__ or "").strip().split("\n")[0], fn,
                             frozenset(needs), fresh))
        return fn
    return register


def _unique(stem: str) -> str:
    """A relative name no other check in the shared sandbox uses."""
    return f"{stem}-{secrets.token_hex(4)}"


# -- lifecycle ---------------------------------------------------------------------------------

@_check("lifecycle", fresh=True)
async def _lifecycle_rules(ctx: Context) -> None:
    """create -> running -> destroyed; a second initialize and use after cleanup refused."""
    box = ctx.subject.make(ctx.config())
    await box.cleanup()  # before initialize: nothing to remove, a no-op
    _expect(box.status is SandboxStatus.CREATING, f"new sandbox is {box.status}")
    await box.initialize()
    try:
        with _raises(SandboxAlreadyInitialized, "already initialized"):
            await box.initialize()
        _expect(box.status is SandboxStatus.RUNNING, f"initialized sandbox is {box.status}")
    finally:
        await box.cleanup()
    await box.cleanup()  # idempotent
    _expect(box.status is SandboxStatus.DESTROYED, f"cleaned-up sandbox is {box.status}")
    with _raises(SandboxNotRunning):
        await box.execute_command("true")
    with _raises(SandboxNotRunning):
        await box.read_file("x")


@_check("lifecycle")
async def _info_and_health(ctx: Context) -> None:
    """get_info and the engine's health answer for a running sandbox."""
    sb = await ctx.shared()
    _expect(isinstance(sb, ExecutionSandbox), "not an ExecutionSandbox")
    info = await sb.get_info()
    _expect(info.status is SandboxStatus.RUNNING, f"get_info says {info.status}")
    _expect(info.id and info.type == ctx.subject.config.type, f"id/type wrong: {info!r}")
    _expect(info.created_at is not None, "get_info has no created_at")
    backend = sb.backend
    _expect(isinstance(backend, SupportsHealth), "the backend has no health (SupportsHealth)")
    assert isinstance(backend, SupportsHealth)
    health = await backend.health()
    _expect(health == "", f"health of a running sandbox is {health!r}, not ''")


# -- exec --------------------------------------------------------------------------------------

@_check("exec")
async def _commands_refused_by_policy(ctx: Context) -> None:
    """Empty commands, network in an isolated sandbox, restrict_paths and root: typed refusals."""
    sb = await ctx.shared()
    with _raises(ConfigError):
        await sb.execute_command("")
    with _raises(NetworkAccessDenied):
        await sb.execute_command(Command.shell("true", allow_network=True))
    with _raises(SecurityViolation):
        await sb.execute_command(Command.shell("true", restrict_paths=["/workspace"]))
    with _raises(SecurityViolation):
        await sb.execute_command(Command.shell("id -u", user="root"))


@_check("exec", needs=["commands"])
async def _exec_exit_codes_and_signals(ctx: Context) -> None:
    """Exit codes, signals, both streams and times come back in the result."""
    sb = await ctx.shared()
    r = await sb.execute_command("echo out; echo err >&2")
    _expect(r.success and r.exit_code == 0 and (r.stdout, r.stderr) == ("out\n", "err\n"),
            f"{r!r}")
    _expect(r.start_time is not None and r.end_time is not None and r.end_time >= r.start_time,
            f"times {r.start_time} {r.end_time}")
    r = await sb.execute_command("exit 3")
    _expect((r.exit_code, r.success, r.signal) == (3, False, ""), f"exit 3: {r!r}")
    r = await sb.execute_command("kill -9 $$")
    _expect((r.exit_code, r.signal) == (137, "SIGKILL"), f"kill -9: {r!r}")


@_check("exec", needs=["commands"])
async def _exec_streams_while_running(ctx: Context) -> None:
    """stream_command yields output before the command ends (it waits on our stdin)."""
    sb = await ctx.shared()
    with anyio.fail_after(120):
        async with sb.stream_command("echo one; read x; echo two $x >&2") as proc:
            chunks = aiter(proc)
            first = await anext(chunks)
            _expect((first.stream, first.data) == ("stdout", b"one\n"), f"first {first!r}")
            _expect(proc.running, "ended before its input came")
            await proc.write_stdin("go\n")
            await proc.close_stdin()
            rest = [chunk async for chunk in chunks]
            result = await proc.wait()
    _expect(b"".join(c.data for c in rest if c.stream == "stderr") == b"two go\n", f"{rest!r}")
    _expect(result.success and (result.stdout, result.stderr) == ("one\n", "two go\n"),
            f"{result!r}")


@_check("exec", needs=["commands"])
async def _exec_callbacks_while_running(ctx: Context) -> None:
    """execute_command's callbacks see output while the command still runs."""
    sb = await ctx.shared()
    seen = anyio.Event()
    got: list[bytes] = []

    def on_stdout(data: bytes) -> None:
        got.append(data)
        seen.set()

    async def feed() -> AsyncIterator[bytes]:
        await seen.wait()  # only the first line, delivered early, lets the command go on
        yield b"go\n"

    with anyio.fail_after(120):
        r = await sb.execute_command(Command.shell("echo one; read x; echo got $x",
                                                   stdin=feed()), on_stdout=on_stdout)
    _expect(r.stdout == "one\ngot go\n" and b"".join(got) == b"one\ngot go\n", f"{r!r} {got}")


@_check("exec", needs=["commands"])
async def _exec_stdin(ctx: Context) -> None:
    """Stdin as bytes (every byte value), as text, and written to a live handle."""
    sb = await ctx.shared()
    payload = bytes(range(256)) * 1024
    r = await sb.execute_command(Command(executable="cat", stdin=payload, timeout=120))
    _expect(r.success and r.stdout_bytes == payload,
            f"cat gave {len(r.stdout_bytes)} bytes of {len(payload)}: {r.error}")
    r = await sb.execute_command(Command(executable="wc", args=["-l"],
                                         stdin_content="a\nb\nc\n"))
    _expect(r.stdout.strip() == "3", f"wc -l: {r!r}")
    async with sb.stream_command(["cat"]) as proc:
        await proc.write_stdin(b"ping\n")
        await proc.close_stdin()
        r = await proc.wait()
        _expect(r.success and r.stdout == "ping\n", f"{r!r}")
        with _raises(StdinClosed):  # also a BrokenPipeError
            await proc.write_stdin(b"late\n")


@_check("exec", needs=["commands"])
async def _exec_timeout_kills_the_tree(ctx: Context) -> None:
    """At its timeout the command and its background children are gone; output so far kept."""
    sb, m = await ctx.shared(), ctx.marker()
    r = await sb.execute_command(Command.shell(
        f"echo started; sleep {m} & sleep {m}", timeout=1))
    _expect(r.timed_out and not r.success and "timed out" in r.error, f"{r!r}")
    _expect(r.stdout == "started\n", f"output so far lost: {r.stdout!r}")
    await ctx.expect_gone(sb, m, "after the timeout")


@_check("exec", needs=["commands"])
async def _exec_timeout_kills_setsid_escapees(ctx: Context) -> None:
    """A child that left the process group and session (setsid) is killed at the timeout too."""
    sb, m = await ctx.shared(), ctx.marker()
    r = await sb.execute_command(Command.shell(
        f"setsid sleep {m} >/dev/null 2>&1 < /dev/null & sleep {m}", timeout=1))
    _expect(r.timed_out, f"{r!r}")
    await ctx.expect_gone(sb, m, "after the timeout")


@_check("exec", needs=["commands"])
async def _exec_idle_timeout(ctx: Context) -> None:
    """A command silent for idle_timeout is killed, with its output so far."""
    sb, m = await ctx.shared(), ctx.marker()
    r = await sb.execute_command(Command.shell(f"echo prompt; sleep {m}", idle_timeout=1))
    _expect(r.timed_out and "idle" in r.error and r.stdout == "prompt\n", f"{r!r}")
    await ctx.expect_gone(sb, m, "after the idle timeout")


@_check("exec", needs=["commands"])
async def _exec_aclose_and_cancel_kill(ctx: Context) -> None:
    """aclose (idempotent) kills a streamed command; cancelling execute_command kills it."""
    sb, m = await ctx.shared(), ctx.marker()
    async with sb.stream_command(f"echo up; sleep {m}") as proc:
        _expect(isinstance(proc, Process), f"{proc!r} is not a sandbox.Process")
        async for chunk in proc:
            _expect(chunk.data == b"up\n", f"{chunk!r}")
            break
        await proc.aclose()
        await proc.aclose()
        _expect(not proc.running, "running after aclose")
        result = await proc.wait()
    _expect(result.signal == "SIGKILL" and not result.success, f"{result!r}")
    started = anyio.Event()
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            await sb.execute_command(f"echo up; sleep {m}", on_stdout=lambda _: started.set())
        tg.start_soon(run)
        await started.wait()
        tg.cancel_scope.cancel()
    await ctx.expect_gone(sb, m, "after aclose/cancel")


@_check("exec", needs=["commands"])
async def _exec_kill_signals_the_tree(ctx: Context) -> None:
    """Process.kill sends the named signal to the command and its children."""
    sb, m = await ctx.shared(), ctx.marker()
    async with sb.stream_command(f"sleep {m} & echo up; wait") as proc:
        async for _chunk in proc:
            break
        await proc.kill("TERM")
        result = await proc.wait()
    _expect(result.signal == "SIGTERM" and not result.success, f"{result!r}")
    await ctx.expect_gone(sb, m, "after kill('TERM')")


@_check("exec", needs=["commands"])
async def _exec_output_bytes_and_utf8(ctx: Context) -> None:
    """Output keeps its bytes; text is UTF-8 with invalid bytes replaced, even split."""
    sb = await ctx.shared()
    r = await sb.execute_command(r"printf '\303'; sleep 0.2; printf '\251 \377\n'")
    _expect(r.stdout_bytes == b"\xc3\xa9 \xff\n" and r.stdout == "\u00e9 \ufffd\n", f"{r!r}")


@_check("exec", needs=["commands"])
async def _exec_truncates_at_max_output_bytes(ctx: Context) -> None:
    """Output past max_output_bytes is dropped and flagged; the command runs to its end."""
    sb = await ctx.shared()
    got: list[bytes] = []
    r = await sb.execute_command(Command.shell(
        "head -c 100000 /dev/zero; echo done >&2", max_output_bytes=1000), on_stdout=got.append)
    _expect(r.truncated and r.success and len(r.stdout_bytes) == 1000, f"{r!r}")
    _expect(r.stderr == "done\n", f"stderr {r.stderr!r}")
    _expect(sum(map(len, got)) == 100000, f"callbacks got {sum(map(len, got))} of 100000")


@_check("exec", needs=["commands"])
async def _exec_start_errors_are_typed(ctx: Context) -> None:
    """A missing program, a non-executable file, a missing working directory: typed errors."""
    sb = await ctx.shared()
    plain = f"/tmp/{_unique('plain')}"
    await sb.write_file(plain, "echo hi\n", mode=0o644)
    cases: list[tuple[Command | list[str], type[SandboxError], str]] = [
        (["no-such-tool-x"], CommandNotFound, "no-such-tool-x"),
        (["/bin/no-such-tool-x"], CommandNotFound, "no-such-tool-x"),
        ([plain], CommandNotExecutable, "not (an )?executable"),
        (Command(executable="true", working_dir="/no/such/dir"), CommandStartFailed,
         "/no/such/dir"),
    ]
    for cmd, kind, pattern in cases:
        with _raises(kind, pattern):
            await sb.execute_command(cmd)
        with _raises(kind, pattern):
            async with sb.stream_command(cmd) as proc:
                await proc.wait()
    r = await sb.execute_command("no-such-tool-x")
    _expect(r.exit_code == 127, f"the shell's own not-found is exit 127: {r!r}")


@_check("exec", needs=["commands"])
async def _exec_concurrent(ctx: Context) -> None:
    """Commands run side by side in one sandbox, each with its own output."""
    sb = await ctx.shared()
    out: dict[int, str] = {}

    async def one(i: int) -> None:
        out[i] = (await sb.execute_command(f"echo {i}")).stdout

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    _expect(out == {i: f"{i}\n" for i in range(8)}, f"{out}")


# -- files -------------------------------------------------------------------------------------

@_check("files")
async def _files_round_trip_and_list(ctx: Context) -> None:
    """write_file, read_file and list_files agree on content, size and mode."""
    sb = await ctx.shared()
    d = _unique("rt")
    await sb.write_file(f"{d}/b.txt", "hi", mode=0o600)
    _expect(await sb.read_file(f"{sb.get_working_directory()}/{d}/b.txt") == b"hi", "read back")
    infos = await sb.list_files(d)
    got = [(i.name, i.size, i.mode, i.is_dir) for i in infos]
    _expect(got == [("b.txt", 2, 0o600, False)], f"list: {got}")
    (one,) = await sb.list_files(f"{d}/b.txt")
    _expect(one.name == "b.txt" and one.path.endswith(f"/{d}/b.txt"), f"{one!r}")
    _expect(any(i.name == d and i.is_dir for i in await sb.list_files(".")), "dir not listed")
    await sb.write_file(f"{d}/b.txt", "again")  # overwrite
    _expect(await sb.read_file(f"{d}/b.txt") == b"again", "overwrite")


@_check("files")
async def _files_errors_are_typed(ctx: Context) -> None:
    """Missing files, directories read as files, host-to-host copies: typed errors."""
    sb = await ctx.shared()
    d = _unique("err")
    with _raises(SandboxFileNotFound):
        await sb.read_file(f"{d}/missing")
    with _raises(SandboxFileNotFound):
        await sb.list_files(f"{d}/missing")
    await sb.write_file(f"{d}/f", "x")
    with _raises(SandboxIsADirectory):
        await sb.read_file(d)
    with _raises(FileOperationFailed):
        await sb.copy_files("/a", "/b")


@_check("files")
async def _files_large_and_partial(ctx: Context) -> None:
    """Binary data of several MiB round-trips intact; max_bytes reads only the head."""
    sb = await ctx.shared()
    data = os.urandom(4 << 20)
    name = _unique("big.bin")
    await sb.write_file(name, data)
    back = await sb.read_file(name)
    _expect(back == data, f"4 MiB came back as {len(back)} bytes, equal: {back == data}")
    _expect(await sb.read_file(name, max_bytes=10) == data[:10], "max_bytes head")
    (info,) = await sb.list_files(name)
    _expect(info.size == len(data), f"listed size {info.size}")


#: Names a hostile agent (or an unlucky one) makes: each must round-trip and list as itself.
ODD_NAMES = ("new\nline.txt", "sp ace", "-dash", "tab\tx", "ünï😀", "quote'\"", "trail\n",
             "$(touch pwned)", "*")


@_check("files")
async def _files_odd_names(ctx: Context) -> None:
    """Names with newlines, quotes, globs, shell syntax and non-ASCII are only names."""
    sb = await ctx.shared()
    d = _unique("odd")
    for i, name in enumerate(ODD_NAMES):
        await sb.write_file(f"{d}/{name}", str(i))
    for name in ("new\nline.txt", "trail\n", "$(touch pwned)"):  # reading: the worst three
        got = await sb.read_file(f"{d}/{name}")
        _expect(got == str(ODD_NAMES.index(name)).encode(), f"{name!r} read back {got!r}")
    listed = {i.name: i.size for i in await sb.list_files(d)}
    _expect(listed == {name: len(str(i)) for i, name in enumerate(ODD_NAMES)},
            f"listed {sorted(listed.items())}")
    with _raises((FileOperationFailed, ConfigError), "NUL"):
        await sb.list_files(f"{d}/a\0b")
    with _raises((FileOperationFailed, ConfigError), "NUL"):
        await sb.write_file(f"{d}/a\0b", "x")


@_check("files", needs=["commands"])
async def _files_special_files_refused(ctx: Context) -> None:
    """read_file refuses devices and FIFOs (which never end) at once, and dangling links."""
    sb = await ctx.shared()
    d = f"/tmp/{_unique('special')}"
    r = await sb.execute_command(f"mkdir {d} && mkfifo {d}/pipe && ln -s /dev/zero {d}/zero && "
                                 f"echo hi > {d}/real && ln -s {d}/real {d}/link && "
                                 f"ln -s {d}/gone {d}/dangling")
    _expect(r.success, f"{r!r}")
    for path in ("/dev/zero", f"{d}/pipe", f"{d}/zero"):
        with anyio.fail_after(60), _raises(FileOperationFailed, "not a regular file"):
            await sb.read_file(path)
    _expect(await sb.read_file(f"{d}/link") == b"hi\n", "a link to a file is read through")
    with _raises(SandboxFileNotFound):
        await sb.read_file(f"{d}/dangling")
    infos = {i.name: i for i in await sb.list_files(d)}
    _expect(infos["zero"].is_symlink and infos["zero"].link_target == "/dev/zero",
            f"{infos.get('zero')!r}")


@_check("files", needs=["commands"])
async def _files_permission_denied(ctx: Context) -> None:
    """Writing where the (non-root) sandbox user may not is SandboxPermissionDenied."""
    sb = await ctx.shared()
    with _raises(SandboxPermissionDenied, "/etc/contract-x"):
        await sb.write_file("/etc/contract-x", "no")


@_check("files", needs=["commands", "host_copy"])
async def _files_copy_both_ways(ctx: Context) -> None:
    """A tree goes in and comes out with its modes, never with setuid."""
    sb = await ctx.shared()
    src = ctx.host_dir("src") / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('x')\n")
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "run.sh").chmod(0o755)
    d = _unique("copy")
    await sb.write_file(f"{d}/.keep", "")
    await sb.copy_files(str(src), f"sandbox:{d}")
    r = await sb.execute_command(f"./{d}/proj/run.sh && cat {d}/proj/pkg/mod.py && "
                                 f"chmod u+s {d}/proj/run.sh")
    _expect(r.stdout == "run\nprint('x')\n", f"{r!r}")
    out = ctx.host_dir("out")
    await sb.copy_files(f"sandbox:{d}/proj", str(out))
    _expect((out / "proj" / "pkg" / "mod.py").read_text() == "print('x')\n", "content")
    mode = stat.S_IMODE((out / "proj" / "run.sh").stat().st_mode)
    _expect(mode == 0o755, f"run.sh came out as {oct(mode)}")
    with _raises(SandboxFileNotFound):
        await sb.copy_files(f"sandbox:{d}/nope", str(out))


@_check("files", needs=["commands", "host_copy"])
async def _files_copy_out_hostile(ctx: Context) -> None:
    """Symlinks out of the sandbox are refused, oversize trees stop at the cap; nothing lands."""
    sb = await ctx.shared()
    d = _unique("hostile")
    r = await sb.execute_command(f"mkdir -p {d}/proj && echo data > {d}/proj/data.txt && "
                                 f"ln -s data.txt {d}/proj/inside && "
                                 f"ln -s /etc/hostname {d}/report.txt && "
                                 f"head -c 3000000 /dev/zero > {d}/big")
    _expect(r.success, f"{r!r}")
    out = ctx.host_dir("hostile")
    with _raises(UnsafeArchive):
        await sb.copy_files(f"sandbox:{d}/report.txt", str(out / "report.txt"))
    _expect(os.listdir(out) == [], f"left at the destination: {os.listdir(out)}")
    await sb.copy_files(f"sandbox:{d}/proj", str(out))  # a link inside the tree is kept
    _expect(os.readlink(out / "proj" / "inside") == "data.txt", "inner link")
    await sb.execute_command(f"ln -s /etc/hostname {d}/proj/host")
    with _raises(UnsafeArchive, "/etc/hostname"):
        await sb.copy_files(f"sandbox:{d}/proj", str(out / "again"))
    with _raises(CopyLimitExceeded):
        await sb.copy_files(f"sandbox:{d}/big", str(out / "big"), max_bytes=1 << 20)
    _expect(sorted(os.listdir(out)) == ["proj"], f"left: {os.listdir(out)}")


# -- environment and working directory ---------------------------------------------------------

@_check("env")
async def _environment_and_working_directory(ctx: Context) -> None:
    """cwd and environment are the sandbox's state; commands see them (where they run)."""
    sb = await ctx.shared()
    d = _unique("sub")
    await sb.write_file(f"{d}/x", "")
    await sb.set_working_directory(d)
    _expect(sb.get_working_directory() == f"{ctx.subject.config.working_dir}/{d}",
            f"cwd {sb.get_working_directory()}")
    env = sb.get_environment()
    env["CHANGED"] = "1"
    _expect("CHANGED" not in sb.get_environment(), "get_environment is not a copy")
    sb.set_environment({"NEW": "2"})
    _expect(sb.get_environment().get("NEW") == "2" and sb.get_environment()["BASE"] == "1",
            f"{sb.get_environment()}")
    with _raises(ConfigError):
        sb.set_environment({"A=B": "x"})
    if ctx.supports("commands"):
        r = await sb.execute_command(Command.shell("pwd; echo $BASE$NEW$CMD",
                                                   environment={"CMD": "c"}))
        _expect(r.stdout == f"{sb.get_working_directory()}\n12c\n", f"{r!r}")
        r = await sb.execute_command(Command(executable="pwd", working_dir="/tmp"))
        _expect(r.stdout == "/tmp\n", f"{r!r}")
    sb.set_environment({"BASE": None, "ABSENT": None})
    _expect("BASE" not in sb.get_environment(), "None did not remove BASE")
    if ctx.supports("commands"):
        r = await sb.execute_command("echo ${BASE-unset}")
        _expect(r.stdout == "unset\n", f"{r!r}")


@_check("env")
async def _working_directory_must_exist(ctx: Context) -> None:
    """A missing cwd is FileNotFoundError, a file is 'not a directory'; cwd unchanged."""
    sb = await ctx.shared()
    before = sb.get_working_directory()
    with _raises(FileNotFoundError, "does not exist"):
        await sb.set_working_directory("/no/such/dir")
    name = _unique("plain")
    await sb.write_file(name, "x")
    with _raises(FileOperationFailed, "not a directory") as caught:
        await sb.set_working_directory(name)
    _expect(not isinstance(caught[0], FileNotFoundError), "a file is not 'not found'")
    _expect(sb.get_working_directory() == before, "cwd changed by a refused call")


# -- per-command user --------------------------------------------------------------------------

@_check("user", needs=["commands"])
async def _command_user(ctx: Context) -> None:
    """A command may name the sandbox's own user; nobody (allow_write=False) runs or is refused."""
    sb = await ctx.shared()
    uid = (await sb.execute_command("id -u")).stdout.strip()
    _expect(uid.isdigit() and uid != "0", f"the sandbox user is {uid!r}, not a non-root uid")
    r = await sb.execute_command(Command.shell("id -u", user=uid))
    _expect(r.stdout == f"{uid}\n", f"as its own user: {r!r}")
    nobody = Command.shell("id -u; touch /workspace/by-nobody", allow_write=False)
    if ctx.supports("command_user"):
        r = await sb.execute_command(nobody)
        _expect(r.stdout.startswith("65534\n") and not r.success, f"as nobody: {r!r}")
    else:
        with _raises(CommandStartFailed) as caught:
            await sb.execute_command(nobody)
        ctx.refuses(caught[0])


# -- sessions ----------------------------------------------------------------------------------

@_check("sessions", needs=["commands"])
async def _session_state_and_timeouts(ctx: Context) -> None:
    """A session keeps cd/export/functions; its timeouts kill the tree, not the session."""
    sb, m = await ctx.shared(), ctx.marker()
    async with sb.session() as sh:
        await sh.run("cd /tmp && export X=1 && f() { echo fn; }")
        r = await sh.run("echo $PWD $X; f")
        _expect(r.stdout == "/tmp 1\nfn\n" and sh.cwd == "/tmp", f"{r!r} cwd={sh.cwd}")
        r = await sh.run("cat", stdin="in\n")
        _expect(r.stdout == "in\n", f"stdin: {r!r}")
        r = await sh.run(f"echo a; sleep {m} & sleep {m}", timeout=1)
        _expect(r.timed_out and r.stdout == "a\n", f"timeout: {r!r}")
        # The command's processes were killed, not its shell (a shell that outlives the kill's
        # grace is replaced, and the result says so).
        _expect("shell_ended" not in r.metadata, f"the timeout replaced the shell: {r!r}")
        await ctx.expect_gone(sb, m, "after the session's timeout")
        r = await sh.run("echo $X ok")
        _expect(r.stdout == "1 ok\n", f"the session lost its state at a timeout: {r!r}")
        r = await sh.run("exit 3")
        _expect(r.exit_code == 3, f"exit: {r!r}")
        r = await sh.run("echo back")
        _expect(r.stdout == "back\n", f"no fresh shell after exit: {r!r}")


@_check("sessions", needs=["commands"])
async def _session_timeout_kills_subshells(ctx: Context) -> None:
    """A timeout kills the command's background subshells too (a fork of the shell that runs
    no program of its own carries no marker in /proc), not the shell nor an earlier
    command's background job."""
    sb, m, k = await ctx.shared(), ctx.marker(), ctx.marker()
    async with sb.session() as sh:
        await sh.run(f"export Y=2; sleep {k} >/dev/null 2>&1 &")
        r = await sh.run(f"(while :; do sleep {m}; done) & sleep {m}", timeout=1)
        _expect(r.timed_out and "shell_ended" not in r.metadata, f"timeout: {r!r}")
        # A loop that outlived the kill starts its sleep again at once.
        await anyio.sleep(0.3)
        await ctx.expect_gone(sb, m, "after the timeout of a command with a subshell")
        _expect(await ctx.holding(sb, k), "an earlier command's background job was killed")
        r = await sh.run("echo $Y")
        _expect(r.stdout == "2\n", f"the session lost its state at a timeout: {r!r}")
    await ctx.expect_gone(sb, k, "after the session's end")


async def _sizes(sb: Sandbox, path: str) -> tuple[int, int]:
    """The size of ``path`` now and 0.3 s later (-1: unreadable): a loop still appending to it
    makes the second larger."""
    sizes = []
    for pause in (0.3, 0.0):
        r = await sb.execute_command(f"wc -c < {path}")
        sizes.append(int(r.stdout) if r.stdout.strip().isdigit() else -1)
        await anyio.sleep(pause)
    return sizes[0], sizes[1]


@_check("sessions", needs=["commands"])
async def _session_timeout_kills_builtin_subshells(ctx: Context) -> None:
    """A timeout kills the command's subshells that run builtins alone (no process of it
    carries its marker), those the shell starts after the kill and those a double fork hands
    to the sandbox's init too, not the shell nor an earlier command's such subshell."""
    sb, m = await ctx.shared(), ctx.marker()
    mine, theirs, after, adopted = (f"{sb.get_working_directory()}/{_unique(n)}"
                                    for n in ("mine", "theirs", "after", "adopted"))
    try:
        async with sb.session() as sh:
            # Each loop appends a newline to its file with builtins alone: its heartbeat.
            await sh.run(f"export Y=2; (while :; do echo >> {theirs}; done) &")
            # Past the clock tick (10 ms) the next command is sent in: an earlier subshell of
            # builtins alone started within it is taken for that command's (docs/security.md).
            await anyio.sleep(0.1)
            r = await sh.run(f"(while :; do echo >> {mine}; done) & sleep {m}", timeout=1)
            _expect(r.timed_out and "shell_ended" not in r.metadata, f"timeout: {r!r}")
            await ctx.expect_gone(sb, m, "after the timeout of a command with a subshell")
            first, then = await _sizes(sb, mine)
            _expect(first > 0, f"the command's loop never ran: {first}")
            _expect(then == first, "a timed-out command's subshell of builtins alone outlived "
                    f"it (its file grew from {first} to {then} bytes)")
            first, then = await _sizes(sb, theirs)
            _expect(then > first > 0, "an earlier command's subshell of builtins alone was "
                    f"killed by a later command's timeout ({first}, then {then} bytes)")
            r = await sh.run("echo $Y")
            _expect(r.stdout == "2\n", f"the session lost its state at a timeout: {r!r}")
            # What the shell starts after the kill (the rest of the line, once the sleep is
            # killed, here after counting a while in builtins: past the kill's last look) is
            # the command's too: a look once its end is reported takes it.
            r = await sh.run(f"sleep {m}; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
                             f"(while :; do echo >> {after}; done) &", timeout=1)
            _expect(r.timed_out and "shell_ended" not in r.metadata, f"timeout: {r!r}")
            first, then = await _sizes(sb, after)
            _expect(then == first, "a subshell the shell started after a timeout's kill "
                    f"outlived the command (its file grew from {first} to {then} bytes)")
            # A double fork: the loop leaves the shell's children (the init adopts it).
            r = await sh.run(f"( (while :; do echo >> {adopted}; done) & ); sleep {m}",
                             timeout=1)
            _expect(r.timed_out and "shell_ended" not in r.metadata, f"timeout: {r!r}")
            first, then = await _sizes(sb, adopted)
            _expect(then == first, "a double-forked subshell of builtins alone outlived the "
                    f"command's timeout (its file grew from {first} to {then} bytes)")
        first, then = await _sizes(sb, theirs)
        _expect(then == first, "an earlier command's subshell outlived the session's end")
    finally:
        with contextlib.suppress(SandboxError):
            await sb.execute_command(f"rm -f {mine} {theirs} {after} {adopted}")


# -- pools -------------------------------------------------------------------------------------

@_check("pool", fresh=True)
async def _pool_acquire_release(ctx: Context) -> None:
    """A pool hands out running sandboxes (its health check passes) and counts them."""
    async with SandboxPool(ctx.config(), min_ready=0, max_size=1,
                           factory=ctx.subject.make) as pool:
        async with pool.acquire() as sb:
            _expect(sb.status is SandboxStatus.RUNNING, f"handed out {sb.status}")
            if ctx.supports("commands"):
                _expect((await sb.execute_command("echo hi")).stdout == "hi\n", "echo")
            first = sb
        async with pool.acquire() as sb:
            _expect(sb is not first, "max_uses=1 handed the same sandbox out twice")
            _expect(sb.id != first.id, f"two sandboxes share the id {sb.id!r}")
        stats = pool.stats()
    _expect(stats.acquired == 2 and stats.unhealthy == 0, f"{stats!r}")


@_check("pool", fresh=True)
async def _pool_reuse_resets(ctx: Context) -> None:
    """max_uses > 1: the next user gets the sandbox back as new, or the pool refuses it."""
    config = ctx.config()
    if not ctx.supports("pool_reuse"):
        with _raises(ConfigError) as caught:
            SandboxPool(config, max_uses=2, factory=ctx.subject.make)
        ctx.refuses(caught[0])
        return
    name = _unique("left")
    async with SandboxPool(config, min_ready=0, max_size=1, max_uses=2,
                           factory=ctx.subject.make) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            await sb.write_file(name, "left behind")
            sb.set_environment({"LEFT": "1"})
            await sb.set_working_directory("/tmp")
        async with pool.acquire() as sb:
            _expect(sb.id == first, f"not reused: {pool.stats()!r}")
            with _raises(SandboxFileNotFound):
                await sb.read_file(f"{config.working_dir}/{name}")
            _expect("LEFT" not in sb.get_environment(), "environment not reset")
            _expect(sb.get_working_directory() == config.working_dir, "cwd not reset")


# -- checkpoints -------------------------------------------------------------------------------

@_check("checkpoint")
async def _checkpoint_or_typed_refusal(ctx: Context) -> None:
    """A checkpoint starts a sandbox with the files; memory=True or no support: CheckpointFailed."""
    sb = await ctx.shared()
    name = f"contract-{secrets.token_hex(6)}"
    if not ctx.supports("checkpoint"):
        for attempt in (lambda: sb.checkpoint(name), lambda: sb.fork(1)):
            with _raises((CheckpointFailed, ConfigError)) as caught:
                await attempt()
            ctx.refuses(caught[0])
        return
    with _raises(CheckpointFailed):
        await sb.checkpoint(name, memory=True)
    path = f"{sb.get_working_directory()}/{_unique('kept')}"
    await sb.write_file(path, "kept")
    point = await sb.checkpoint(name)
    try:
        async with ctx.subject.make(point.config) as child:
            _expect(await child.read_file(path) == b"kept", "the file did not survive")
    finally:
        with contextlib.suppress(SandboxError):
            await remove_checkpoint(name)


# -- resource usage ----------------------------------------------------------------------------

@_check("usage")
async def _resource_usage(ctx: Context) -> None:
    """get_resource_usage answers a ResourceUsage (measured where the backend claims usage)."""
    sb = await ctx.shared()
    usage = await sb.get_resource_usage()
    _expect(isinstance(usage, ResourceUsage), f"{usage!r}")
    _expect(all(isinstance(u, ResourceUsage) for u in sb.usage_history()), "usage_history")
    if ctx.supports("usage"):
        _expect(usage.memory_usage > 0 and usage.timestamp is not None, f"{usage!r}")


# -- cleanup and gc ----------------------------------------------------------------------------

@_check("cleanup", fresh=True)
async def _cleanup_leaves_nothing(ctx: Context) -> None:
    """After cleanup nothing of the sandbox runs or remains, detached children included."""
    m = ctx.marker()
    sb = ctx.subject.make(ctx.config())
    await sb.initialize()
    try:
        if ctx.supports("commands"):
            r = await sb.execute_command(f"setsid sleep {m} >/dev/null 2>&1 </dev/null & "
                                         f"sleep {m} >/dev/null 2>&1 </dev/null &")
            _expect(r.success, f"{r!r}")
        if ctx.subject.leftovers is not None:
            seen = await ctx.subject.leftovers(sb, m)
            _expect(seen, "the leftover probe sees nothing of a running sandbox")
    finally:
        await sb.cleanup()
    _expect(sb.status is SandboxStatus.DESTROYED, f"{sb.status}")
    with _raises(SandboxNotRunning):
        await sb.execute_command("true")
    if ctx.subject.leftovers is not None:
        left = await ctx.subject.leftovers(sb, m)
        _expect(not left, f"left after cleanup: {left}")
    if ctx.supports("gc"):
        report = await gc(dry_run=True)
        found = [i for i in report.removed + report.kept if sb.id in f"{i.id} {i.name}"]
        _expect(not found, f"gc still finds the cleaned-up sandbox: {found}")


@_check("cleanup", needs=["gc"])
async def _gc_spares_a_live_sandbox(ctx: Context) -> None:
    """gc sees a live sandbox and keeps it: its owner (this process) is alive."""
    sb = await ctx.shared()
    report = await gc(dry_run=True)
    keys = {sb.id, str(getattr(sb.backend, "container_id", "") or sb.id)}

    def mine(items: Sequence[GcItem]) -> list[GcItem]:
        return [i for i in items if any(k in f"{i.id} {i.name}" for k in keys)]

    _expect(not mine(report.removed), f"gc would remove a live sandbox: {mine(report.removed)}")
    _expect(mine(report.kept), f"gc does not see the live sandbox {sb.id}")


#: Every check, in the order `check_backend` runs them.
CHECKS: tuple[Check, ...] = tuple(_CHECKS)

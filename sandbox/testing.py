"""An in-memory sandbox for unit-testing agent code without an engine.

`FakeSandbox` implements `ExecutionSandbox`: files, working directory and environment live in
memory, and commands answer from results you script. Nothing runs.

Example:
    fake = FakeSandbox()
    fake.on_command("pytest", CommandResult(exit_code=1, stdout="1 failed"))
    fake.fail_next("read_file", SandboxFileNotFound("gone", path="/x"))
    async with fake:
        result = await fake.execute_command("pytest -q")
    assert fake.commands[0].args == ("-c", "pytest -q")
"""

from __future__ import annotations

import contextlib
import inspect
import math
import posixpath
import re
import secrets
import signal as _signal
import stat
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import anyio
import attrs
from anyio.abc import TaskGroup

from ._archive import check_limits
from ._backend import Process, ProcessSpec
from ._backend_base import BackendBase
from ._constants import (
    DEFAULT_COPY_MAX_BYTES,
    DEFAULT_COPY_MAX_ENTRIES,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_USER,
)
from ._contract import *  # noqa: F403 (re-exported: check_backend, CHECKS, the harness)
from ._errors import (
    SandboxError,
    SandboxFileNotFound,
    SandboxIsADirectory,
)
from ._ids import Identity, identity_of
from ._lifecycle import Lifecycle
from ._models import (
    Command,
    CommandResult,
    FileInfo,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
)
from ._output import StreamName
from ._process_base import ProcessBase, Reader, unconfirmed_kill
from ._protocol import CommandLike, OutputCallback, to_command
from ._sandbox import Sandbox, session_host
from ._session import Callback, Session, SessionJob
from ._signals import parse_signal, signal_name
from ._tty import check_terminal_size

__all__ = ["FakeBackend", "FakeProcess", "FakeSandbox", "FakeSession", "Step"]

Responder = CommandResult | SandboxError | Callable[[Command], CommandResult]


@attrs.frozen
class Step:
    """One step of a scripted `FakeProcess`: make them with the class methods.

    Example:
        FakeProcess(("build",), script=[Step.out("compiling\\n"), Step.sleep(0.01),
                                        Step.out("warning\\n", "stderr"), Step.exit(2)])
    """

    kind: Literal["out", "sleep", "hang", "stdin_eof", "drained", "exit"]
    stream: StreamName = "stdout"
    data: bytes = b""
    seconds: float = 0.0
    code: int = 0

    @classmethod
    def out(cls, data: bytes | str, stream: StreamName = "stdout") -> Step:
        """Print ``data`` on ``stream``."""
        return cls("out", stream=stream, data=data.encode() if isinstance(data, str) else data)

    @classmethod
    def sleep(cls, seconds: float) -> Step:
        """Wait ``seconds`` (silently)."""
        return cls("sleep", seconds=seconds)

    @classmethod
    def hang(cls) -> Step:
        """Wait until killed."""
        return cls("hang")

    @classmethod
    def stdin_eof(cls) -> Step:
        """Wait until stdin is closed (``cat``)."""
        return cls("stdin_eof")

    @classmethod
    def drained(cls) -> Step:
        """Wait until the reader took all output so far, or waits for the result."""
        return cls("drained")

    @classmethod
    def exit(cls, code: int) -> Step:
        """Exit with ``code`` (128+N reads as killed by signal N); the script's end is exit 0."""
        return cls("exit", code=code)


class FakeProcess(ProcessBase):
    """The fake's `Process`, on the real handle's machinery (`ProcessBase`): output, deadlines,
    truncation, callbacks, kill and cancellation behave as on every backend; nothing runs.

    Either a ``script`` of `Step` values (output over time, hangs, exit codes), or a finished
    ``result`` it replays: its output, then its end once that output was read (or waited for).
    What is written to its stdin is kept in `stdin`; ``echo_stdin`` prints it back on stdout;
``on_stdin`` answers each write with steps played at once (`play`: a fake shell, a REPL).
    ``ignore`` names signals it survives (``"TERM"``); ``unkillable`` makes a KILL that is not
    seen to work (the result is then `KillFailed` unless the script exits by a signal). `kill`
    before the end (or leaving the block early, or `aclose`) ends it as killed by that signal.

    Example:
        proc = FakeProcess(("cat",), script=[Step.stdin_eof()], echo_stdin=True, timeout=1)
        async with proc.lifetime(b"hello"):
            assert (await proc.wait()).stdout == "hello"
    """

    def __init__(self, argv: Sequence[str], result: CommandResult | None = None, *,
                 script: Sequence[Step] = (), echo_stdin: bool = False,
                 on_stdin: Callable[[bytes], Iterable[Step]] | None = None,
                 ignore: Collection[str] = (), unkillable: bool = False,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                 timeout: float | None = None, idle_timeout: float | None = None,
                 on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None,
                 iterate: bool = True,
                 finalize: Callable[[CommandResult], Awaitable[CommandResult]] | None = None,
                 ) -> None:
        super().__init__(argv, max_output_bytes=max_output_bytes, timeout=timeout,
                         idle_timeout=idle_timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                         iterate=iterate, finalize=finalize)
        self.stdin = bytearray()
        #: The signals it was sent, by name ("KILL", "TERM"), in order.
        self.signals: list[str] = []
        self._signalled = anyio.Event()
        self._scripted = result
        if result is not None and not script:
            script = (Step.out(result.stdout_bytes or result.stdout.encode()),
                      Step.out(result.stderr_bytes or result.stderr.encode(), "stderr"),
                      Step.drained(), Step.exit(result.exit_code))
        self._script = tuple(script)
        self._echo = echo_stdin
        self._on_stdin = on_stdin
        self._ignore = {_signal.Signals(parse_signal(s)).name.removeprefix("SIG")
                        for s in ignore}
        self._unkillable = unkillable
        out_send, out_receive = anyio.create_memory_object_stream[tuple[StreamName, bytes]](
            math.inf)
        self._out_send, self._out_receive = out_send, out_receive
        self._exit_code: int | None = None
        self._stdin_eof = anyio.Event()
        self._read_all = anyio.Event()  # the reader took the output (replay)
        self._play_scope = anyio.CancelScope()
        #: The last size given to `resize`, if any.
        self.size: tuple[int, int] | None = None

    async def resize(self, rows: int, cols: int) -> None:
        """Record the terminal size in `size` (checked as the real handle checks it)."""
        check_terminal_size(rows, cols)
        self.size = (rows, cols)

    async def wait(self) -> CommandResult:
        self._read_all.set()
        return await super().wait()

    async def wait_signalled(self) -> None:
        """Wait until it was sent a signal (by `kill`, a deadline or leaving the block)."""
        await self._signalled.wait()

    def release(self) -> None:
        super().release()
        self._out_send.close()
        self._out_receive.close()

    # -- the script ---------------------------------------------------------------------------

    def _start(self, tg: TaskGroup, stdin: bytes | AsyncIterable[bytes] | None) -> None:
        super()._start(tg, stdin)
        tg.start_soon(self._play)

    async def _play(self) -> None:
        with self._play_scope:
            for step in self._script:
                if step.kind in ("out", "exit"):
                    self.play(step)
                    if step.kind == "exit":
                        return
                elif step.kind == "sleep":
                    await anyio.sleep(step.seconds)
                elif step.kind == "hang":
                    await anyio.sleep_forever()
                elif step.kind == "stdin_eof":
                    await self._stdin_eof.wait()
                elif step.kind == "drained":
                    await self._read_all.wait()
            self._exit(0)

    def play(self, *steps: Step) -> None:
        """Play output and exit steps now, as if the command did them (waits are skipped)."""
        for step in steps:
            if self._exit_code is not None:
                return
            if step.kind == "out" and step.data:
                self._out_send.send_nowait((step.stream, step.data))
            elif step.kind == "exit":
                self._exit(step.code)

    def _exit(self, code: int) -> None:
        if self._exit_code is None:
            self._exit_code = code
            self._out_send.close()
            self._play_scope.cancel()

    # -- hooks --------------------------------------------------------------------------------

    def _sources(self) -> Sequence[Reader]:
        return (self._read,)

    async def _read(self) -> tuple[StreamName, bytes] | None:
        try:
            return await self._out_receive.receive()
        except anyio.EndOfStream:
            return None

    def _reader_waits(self) -> None:
        if not self._out_receive.statistics().current_buffer_used:
            self._read_all.set()

    async def _write_in(self, data: bytes) -> None:
        self.stdin += data
        if self._echo and data:
            self.play(Step.out(data))
        if self._on_stdin is not None:
            self.play(*self._on_stdin(data))

    async def _write_eof(self) -> None:
        self._stdin_eof.set()

    async def _signal_tree(self, signal: str) -> None:
        if self._exit_code is None:
            self.signals.append(signal)
            self._signalled.set()
        if self._exit_code is not None or signal in self._ignore:
            return
        if signal == "KILL":
            self._kill_confirmed = not self._unkillable
            if self._unkillable:
                return
        self._exit(128 + _signal.Signals["SIG" + signal])
        if signal == "KILL":
            await self._await_end_after_kill()

    async def _conclude(self) -> CommandResult:
        await self._eof.wait()
        code = -1 if self._exit_code is None else self._exit_code
        sig = signal_name(code)
        if self._scripted is not None:
            if code == self._scripted.exit_code:
                return self._scripted
            return attrs.evolve(self._scripted, exit_code=code, success=False, signal=sig)
        if self._killed and not sig and not self._kill_confirmed:
            raise unconfirmed_kill(f"{self.argv[0]!r}: {self._kill_reason or 'it was killed'}",
                                   details=f"it ended by itself with exit code {code}")
        if self._killed and not sig:
            sig = "SIGKILL"
        return self._make_result(exit_code=code, signal=sig, errors=[self._kill_reason],
                                 metadata={"backend": "fake"})


def _text(command: Command) -> str:
    """What a rule's pattern is matched against: the script of a shell command, else argv."""
    if command.executable == "/bin/sh" and command.args[:1] == ("-c",) and len(command.args) > 1:
        return command.args[1]
    return " ".join((command.executable, *command.args))


class FakeBackend(BackendBase):
    """An in-memory `Backend`: files and directories in dicts, commands answered by a function.

    No policy lives here: `Sandbox` decides every command and resolves every path, exactly as
    over the Docker backend, so a fake sandbox refuses what a real one refuses.
    """

    def __init__(self, config: SandboxConfig | None = None, *,
                 respond: Callable[[ProcessSpec], CommandResult] | None = None) -> None:
        super().__init__(config, sandbox_id=f"fake-{secrets.token_hex(6)}")  # one id each
        self._respond = respond or (lambda spec: CommandResult(exit_code=0, success=True))
        self.files: dict[str, tuple[bytes, int]] = {}
        self.dirs: set[str] = {"/", self._config.working_dir}
        self.usage = ResourceUsage()

    # -- state ----------------------------------------------------------------------

    @property
    def lifecycle(self) -> Lifecycle:
        """The lifecycle `Sandbox` gave at create (a test may move it to any state)."""
        return self._life

    @property
    def user(self) -> str:
        """``run_as_user`` (and group), else the SDK's default non-root user."""
        user, group = self._config.security.run_as_user, self._config.security.run_as_group
        if not user:
            user, _, default_group = DEFAULT_USER.partition(":")
            group = group or default_group
        return f"{user}:{group or user}" if group or user.isdigit() else user

    @property
    def identity(self) -> Identity | None:
        """The ids `user` names, when numeric."""
        return identity_of(self.user)

    def require_running(self) -> None:
        """Raise why the sandbox cannot run commands now, if it cannot."""
        self._life.require_running()

    # -- lifecycle ----------------------------------------------------------------------

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        self.dirs.add(self.begin_create(lifecycle, config, environment).working_dir)
        self._created_at = datetime.now(UTC)
        lifecycle.advance(SandboxStatus.RUNNING)

    async def remove(self) -> None:
        """Nothing outlives the object; the files stay readable for assertions."""

    # -- commands ----------------------------------------------------------------------

    async def run_process(
        self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        self.require_running()
        result = self._respond(spec)
        for callback, text in ((on_stdout, result.stdout), (on_stderr, result.stderr)):
            if callback is not None and text:
                outcome = callback(text.encode())
                if inspect.isawaitable(outcome):
                    await outcome
        return result

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[FakeProcess]:
        self.require_running()
        proc = FakeProcess(spec.argv, self._respond(spec))
        async with proc.lifetime(spec.stdin):
            yield proc

    # -- files ----------------------------------------------------------------------

    async def write_file(self, target: str, content: bytes, mode: int = 0o644) -> None:
        self.require_running()
        if target in self.dirs:
            raise SandboxIsADirectory(f"write {target!r} failed: it is a directory", path=target)
        self.files[target] = (content, mode)
        parent = posixpath.dirname(target)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    async def read_file(self, target: str, max_bytes: int | None = None) -> bytes:
        self.require_running()
        if target in self.dirs:
            raise SandboxIsADirectory(f"read {target!r} failed: it is a directory", path=target)
        if target not in self.files:
            raise SandboxFileNotFound(f"read {target!r} failed: no such file or directory",
                                      path=target)
        data = self.files[target][0]
        return data if max_bytes is None else data[:max_bytes]

    async def list_files(self, target: str) -> list[FileInfo]:
        self.require_running()
        now = datetime.now(UTC)
        if target in self.files:
            data, mode = self.files[target]
            return [_info(target, len(data), stat.S_IFREG | mode, now)]
        if target not in self.dirs:
            raise SandboxFileNotFound(f"list {target!r} failed: no such file or directory",
                                      path=target)
        entries = [_info(d, 0, stat.S_IFDIR | 0o755, now)
                   for d in sorted(self.dirs) if d != target and posixpath.dirname(d) == target]
        entries += [_info(f, len(d), stat.S_IFREG | m, now) for f, (d, m)
                    in sorted(self.files.items()) if posixpath.dirname(f) == target]
        return entries

    async def copy_in(self, source: Path, target: str) -> None:
        """Record-only: the fake has no host side."""
        self.require_running()

    async def copy_out(self, target: str, dest: Path, *, max_bytes: int,
                       max_entries: int) -> None:
        """Record-only: the fake has no host side."""
        self.require_running()

    async def path_kind(self, target: str) -> str:
        self.require_running()
        return "dir" if target in self.dirs else "file" if target in self.files else "none"

    # -- info ----------------------------------------------------------------------

    async def get_resource_usage(self) -> ResourceUsage:
        self.require_running()
        return self.usage

    def usage_history(self) -> list[ResourceUsage]:
        return [self.usage]

    async def health(self) -> str:
        status = self._life.status
        return "" if status is SandboxStatus.RUNNING else f"the sandbox is {status.value}"

    async def get_info(self) -> SandboxInfo:
        return SandboxInfo(id=self.id, name=self.id, type=self._config.type,
                           status=self._life.status, created_at=self._created_at,
                           started_at=self._created_at, image=self._config.image,
                           config=self._config, allocated_resources=self._config.resources,
                           labels=dict(self._config.labels),
                           annotations=dict(self._config.annotations))


def _info(path: str, size: int, mode: int, when: datetime) -> FileInfo:
    return FileInfo(name=posixpath.basename(path), path=path, size=size,
                    mode=stat.S_IMODE(mode), mod_time=when, is_dir=stat.S_ISDIR(mode),
                    owner="root", group="root", permissions=stat.filemode(mode))


class FakeSandbox(Sandbox):
    """A scriptable, engine-free `Sandbox`: the real one over a `FakeBackend`.

    Commands answer from rules added with `on_command` (first match wins, a regex searched in
    the shell script or the joined argv), else `default_result`. `fail_next(method, error)`
    makes the next call of a method raise. Every command run is kept in `commands`. The
    policy, working directory, environment and paths are the real `Sandbox`'s.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self._fake = FakeBackend(config, respond=self._answer)
        super().__init__(self._fake.config, backend=self._fake)
        self.commands: list[Command] = []
        self.default_result = CommandResult(exit_code=0, success=True)
        self._rules: list[tuple[re.Pattern[str], Responder]] = []
        self._failures: dict[str, list[SandboxError]] = {}
        self._pending: list[Command] = []

    # -- what the in-memory backend holds -------------------------------------------------------

    @property
    def status(self) -> SandboxStatus:
        """Where the sandbox is in its lifecycle; a test may set it to script a state."""
        return self._life.status

    @status.setter
    def status(self, value: SandboxStatus) -> None:
        self._life.advance(value)

    @property
    def files(self) -> dict[str, tuple[bytes, int]]:
        """Path -> (content, mode) of every file written."""
        return self._fake.files

    @property
    def dirs(self) -> set[str]:
        """Every directory that exists."""
        return self._fake.dirs

    @property
    def usage(self) -> ResourceUsage:
        """What `get_resource_usage` returns."""
        return self._fake.usage

    @usage.setter
    def usage(self, value: ResourceUsage) -> None:
        self._fake.usage = value

    # -- scripting ----------------------------------------------------------------------

    def on_command(self, pattern: str, response: Responder) -> None:
        """Answer commands matching ``pattern`` with a result, an error, or a function."""
        self._rules.append((re.compile(pattern), response))

    def fail_next(self, method: str, error: SandboxError) -> None:
        """Make the next call of ``method`` (e.g. "read_file") raise ``error``."""
        self._failures.setdefault(method, []).append(error)

    def _check(self, method: str) -> None:
        queued = self._failures.get(method)
        if queued:
            raise queued.pop(0)

    def _answer(self, spec: ProcessSpec) -> CommandResult:
        """The backend's responder: the scripted answer to the command being run."""
        command = self._pending.pop()
        self.commands.append(command)
        response: Responder = self.default_result
        for pattern, candidate in self._rules:
            if pattern.search(_text(command)):
                response = candidate
                break
        if isinstance(response, SandboxError):
            raise response
        result = response(command) if callable(response) else response
        now = datetime.now(UTC)
        return attrs.evolve(result, start_time=result.start_time or now,
                            end_time=result.end_time or now,
                            success=result.exit_code == 0 and not result.timed_out,
                            combined=result.combined or result.stdout + result.stderr)

    # -- the public methods, each first taking a failure queued by fail_next ---------------------

    async def initialize(self, config: SandboxConfig | None = None) -> None:
        self._check("initialize")
        await super().initialize(config)

    async def cleanup(self) -> None:
        self._check("cleanup")
        await super().cleanup()

    async def execute_command(
        self, cmd: CommandLike, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        self._check("execute_command")
        command = to_command(cmd)
        self._pending.append(command)
        try:
            return await super().execute_command(command, on_stdout=on_stdout,
                                                 on_stderr=on_stderr)
        finally:
            self._pending.clear()

    @contextlib.asynccontextmanager
    async def session(self, *, shell: str | None = None, restart: bool = True,
                      usage: bool = False) -> AsyncIterator[Session]:
        """A `FakeSession`: each command answers from the rules, as `execute_command` does."""
        self._check("session")
        yield FakeSession(self)

    @contextlib.asynccontextmanager
    async def stream_command(self, cmd: CommandLike, *,
                             tty: bool = False) -> AsyncIterator[Process]:
        self._check("stream_command")
        command = to_command(cmd)
        self._pending.append(command)
        try:
            async with super().stream_command(command, tty=tty) as proc:
                self._pending.clear()
                yield proc
        finally:
            self._pending.clear()

    async def write_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        self._check("write_file")
        await super().write_file(path, content, mode)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        self._check("read_file")
        return await super().read_file(path, max_bytes=max_bytes)

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        self._check("list_files")
        return await super().list_files(path)

    async def copy_files(
        self, source: str, dest: str, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
        max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
    ) -> None:
        """Record-only: the fake has no host side; limits and scripted failures still apply."""
        check_limits(max_bytes, max_entries)
        self._check("copy_files")
        await super().copy_files(source, dest, max_bytes=max_bytes, max_entries=max_entries)

    async def set_working_directory(self, path: str) -> None:
        self._check("set_working_directory")
        await super().set_working_directory(path)

    async def get_resource_usage(self) -> ResourceUsage:
        self._check("get_resource_usage")
        return await super().get_resource_usage()

    async def get_info(self) -> SandboxInfo:
        self._check("get_info")
        return await super().get_info()


class FakeSession(Session):
    """The fake's session: ``run`` and ``start`` answer each command line from the fake's
    rules (it is recorded in `FakeSandbox.commands` as ``/bin/sh -c LINE``); nothing runs and
    no state carries over, and ``start`` always returns the finished result."""

    def __init__(self, fake: FakeSandbox) -> None:
        super().__init__(session_host(fake), shell=None, restart=True)
        self._fake_sandbox = fake
        self._kind = "sh"

    async def run(
        self, cmd: str, *,
        timeout: float | None = None,  # noqa: ASYNC109 (as Session.run)
        idle_timeout: float | None = None, stdin: bytes | str | None = None,
        on_stdout: Callback | None = None, on_stderr: Callback | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> CommandResult:
        self._check_args(cmd, timeout, idle_timeout, max_output_bytes)
        command = Command.shell(cmd, stdin=stdin, max_output_bytes=max_output_bytes,
                                timeout=timeout or 0, idle_timeout=idle_timeout or 0)
        return await self._fake_sandbox.execute_command(command, on_stdout=on_stdout,
                                                        on_stderr=on_stderr)

    async def start(
        self, cmd: str, *, yield_after: float = 10.0,
        timeout: float | None = None,  # noqa: ASYNC109 (as Session.start)
        idle_timeout: float | None = None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        keep_chars: int = 16_000,
    ) -> CommandResult | SessionJob:
        return await self.run(cmd, timeout=timeout, idle_timeout=idle_timeout,
                              max_output_bytes=max_output_bytes)

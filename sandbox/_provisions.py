"""``SandboxConfig.tools`` and ``mcp_servers`` made real at initialize, on any backend.

Tools: every named executable must be in the sandbox when it starts, or `initialize` fails
naming the missing ones; `Sandbox.get_info` then lists each with its path (in
``SandboxInfo.tools``, carried on the wire as annotations under `TOOL_ANNOTATION`).

MCP servers: each entry of ``mcp_servers`` is ``"name=command args..."`` (or just
``"command args..."``, named after the command's base name). Its command is started in the
sandbox at initialize, under the sandbox's policy and limits, but with no time limit (it
serves for the sandbox's life); `McpServer` keeps the process and hands its stdout lines to the
one MCP client attached at a time (``sandbox._mcp_client``). It is killed at cleanup.

Everything read back from the sandbox (the tool check's output, the server's stdout and
stderr) is untrusted: the check's lines are validated, the server's lines are bounded in size
(and those waiting for a client, in bytes; with no client attached they are dropped) and only
ever parsed as JSON-RPC by the client, and its stderr is kept as a bounded tail.
"""

from __future__ import annotations

import asyncio
import collections
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

import attrs

from ._constants import ANNOTATION_TOOL as TOOL_ANNOTATION
from ._errors import ConfigError, McpServerFailed, SandboxError, SandboxInitFailed
from ._models import Command, CommandResult, SandboxConfig, SandboxInfo
from ._tasks import cancel_and_wait

if TYPE_CHECKING:
    from ._backend import Process

__all__ = ["TOOL_ANNOTATION", "McpServer", "McpServerSpec", "Provisions", "check_provisions",
           "parse_mcp_server", "provision"]


class Runner(Protocol):
    """What the provisioning needs of a sandbox: its config, and running a command."""

    @property
    def config(self) -> SandboxConfig: ...

    async def execute_command(self, cmd: Command) -> CommandResult: ...

#: A tool or server name: a plain file name (no path, no spaces, no leading dash).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+@-]{0,127}")
_MAX_PATH = 4096
#: An MCP server's stdout line (one JSON-RPC message) may not be longer than this.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Bytes of an MCP server's lines held for a client that has not read them yet; past it the
#: server waits on its stdout as on a full pipe. Lines printed with no client attached are
#: dropped at once (a client that attaches drops what came before it anyway).
MAX_QUEUED_BYTES = 2 * MAX_MESSAGE_BYTES
#: How much of an MCP server's stderr is kept, for the report when it fails.
STDERR_TAIL = 8 * 1024
#: Seconds the tool check may take.
CHECK_TIMEOUT = 60.0

# For each argument: the path of the executable it names (searched in $PATH unless it is
# absolute), or an empty line when there is none. Walks $PATH itself: `command -v` would
# also answer for shell builtins, which are no executables.
_FIND = r"""for n; do
  found=
  case $n in
    /*) if [ -f "$n" ] && [ -x "$n" ]; then found=$n; fi ;;
    *) IFS=:
       for d in $PATH; do
         [ -n "$d" ] || d=.
         if [ -f "$d/$n" ] && [ -x "$d/$n" ]; then found=$d/$n; break; fi
       done
       unset IFS ;;
  esac
  printf '%s\n' "$found"
done"""


def _check_executable(field: str, name: str) -> None:
    if name.startswith("/"):
        if "\x00" in name or "\n" in name or len(name) > _MAX_PATH:
            raise ConfigError(f"{field}: {name!r} is not a usable path")
        return
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{field}: {name!r} is not an executable name",
                          details="give a file name found in the sandbox's PATH (letters, "
                          "digits and ._+@- only) or an absolute path")


@attrs.frozen
class McpServerSpec:
    """One entry of ``SandboxConfig.mcp_servers``: the name clients use, and the command."""

    name: str
    argv: tuple[str, ...]


def parse_mcp_server(entry: str) -> McpServerSpec:
    """Parse ``"name=command args..."`` or ``"command args..."`` (shell-style quoting)."""
    name, sep, rest = entry.partition("=")
    if not (sep and _NAME.fullmatch(name)):
        name, rest = "", entry
    try:
        argv = tuple(shlex.split(rest))
    except ValueError as exc:
        raise ConfigError(f"mcp_servers: cannot parse {entry!r}: {exc}") from exc
    if not argv:
        raise ConfigError(f"mcp_servers: {entry!r} names no command",
                          details='write "name=command args..." or "command args..."')
    name = name or posixpath.basename(argv[0])
    _check_executable(f"mcp_servers[{name!r}]", argv[0])
    if not _NAME.fullmatch(name):
        raise ConfigError(f"mcp_servers: {name!r} is not a usable server name",
                          details='name it explicitly: "name=command args..."')
    return McpServerSpec(name, argv)


def parse_mcp_servers(entries: Sequence[str]) -> dict[str, McpServerSpec]:
    """Parse every entry; two servers with one name are refused."""
    specs: dict[str, McpServerSpec] = {}
    for entry in entries:
        spec = parse_mcp_server(entry)
        if spec.name in specs:
            raise ConfigError(f"mcp_servers: two servers are named {spec.name!r}",
                              details='name them apart: "name=command args..."')
        specs[spec.name] = spec
    return specs


def _parse_found(stdout: str, names: Sequence[str]) -> dict[str, str]:
    """The check's output, one line per name; anything else is refused, not trusted."""
    lines = stdout.split("\n")
    if len(lines) != len(names) + 1 or lines[-1] != "":
        raise SandboxInitFailed("the tool check printed something unexpected",
                                details=f"expected {len(names)} lines, got {stdout[:200]!r}")
    found: dict[str, str] = {}
    for name, path in zip(names, lines, strict=False):
        if not path:
            continue
        if (not path.startswith("/") or len(path) > _MAX_PATH or not path.isprintable()
                or posixpath.basename(path) != posixpath.basename(name)):
            raise SandboxInitFailed(f"the tool check printed an unusable path for {name!r}",
                                    details=repr(path[:200]))
        found[name] = path
    return found


async def find_executables(sb: Runner, names: Sequence[str]) -> dict[str, str]:
    """Where each executable is in the sandbox (names not found are left out)."""
    if not names:
        return {}
    command = Command.argv(["/bin/sh", "-c", _FIND, "sh", *names], timeout=CHECK_TIMEOUT)
    try:
        result = await sb.execute_command(command)
    except SandboxError as exc:
        raise SandboxInitFailed("could not check for the tools the config names",
                                details=f"{exc} (the check needs /bin/sh in the image)",
                                cause=exc) from exc
    if result.exit_code != 0 or result.timed_out:
        raise SandboxInitFailed(
            "could not check for the tools the config names",
            details=f"the check exited with {result.exit_code}: {result.stderr[-300:]!r}")
    return _parse_found(result.stdout, names)


def _short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


class _LineQueue:
    """Lines waiting for the client, bounded in bytes (not in lines: one line may be 16 MiB);
    after `end`, every reader gets None."""

    def __init__(self, max_bytes: int) -> None:
        self._lines: collections.deque[bytes | None] = collections.deque()
        self._bytes = 0
        self._max = max_bytes
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def put(self, line: bytes) -> None:
        """Queue ``line``, first waiting while it would pass the bound (one line always fits
        into an empty queue: its length is bounded by the caller)."""
        while self._lines and self._bytes + len(line) > self._max:
            await self._changed.wait()
        self._lines.append(line)
        self._bytes += len(line)
        self._notify()

    def end(self) -> None:
        self._lines.append(None)
        self._notify()

    async def get(self) -> bytes | None:
        while not self._lines:
            await self._changed.wait()
        line = self._lines[0]
        if line is not None:  # the end stays, for every later reader
            self._lines.popleft()
            self._bytes -= len(line)
            self._notify()
        return line

    def clear(self) -> None:
        """Drop the lines queued (not the end)."""
        ended = bool(self._lines) and self._lines[-1] is None
        self._lines.clear()
        self._bytes = 0
        if ended:
            self._lines.append(None)
        self._notify()

    @property
    def queued_bytes(self) -> int:
        return self._bytes


class McpServer:
    """An MCP server process in the sandbox and the lines it has printed on stdout.

    `serve` is the body of the task that owns the process; a client takes lines with
    `receive_line` and writes with `send`. After the process ended, `failure` says how.
    """

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.result: CommandResult | None = None
        self.error: BaseException | None = None
        self.ended = asyncio.Event()
        self.attached = False
        self._lines = _LineQueue(MAX_QUEUED_BYTES)
        #: Lines the server printed while no client was attached (dropped, never held).
        self.dropped_lines = 0
        self._stderr = bytearray()
        self._proc: Process | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr (up to `STDERR_TAIL` bytes)."""
        return self._stderr.decode("utf-8", "replace")

    async def serve(self, open_service: Callable[[Command], AbstractAsyncContextManager[Process]],
                    started: asyncio.Event) -> None:
        """Start the server and move its output until it ends; cancel to stop it."""
        try:
            # Output is kept only to a small bound: the lines go to the client as they come.
            command = Command.argv(list(self.spec.argv), max_output_bytes=64 * 1024)
            async with open_service(command) as proc:
                self._proc = proc
                started.set()
                if await self._pump(proc):
                    self.result = await proc.wait()
                # else: it broke the protocol; leaving the block kills it
        except Exception as exc:  # recorded, and reported by failure(); never lost
            self.error = exc
        finally:
            started.set()
            self.ended.set()
            self._lines.end()

    async def _pump(self, proc: Process) -> bool:
        """Move output until the process ends (True), or until it broke the rules (False)."""
        pending = bytearray()
        async for chunk in proc:
            if chunk.stream != "stdout":
                self._stderr += chunk.data
                del self._stderr[:-STDERR_TAIL]
                continue
            # Only the new bytes are searched: a long line costs linear time, not quadratic.
            start = len(pending)
            pending += chunk.data
            while (end := pending.find(b"\n", start)) >= 0:
                if not self.attached:
                    self.dropped_lines += 1
                else:
                    with memoryview(pending) as view:
                        line = bytes(view[:end])  # one copy, not two
                    if line.strip():
                        await self._lines.put(line)
                del pending[:end + 1]
                start = 0
            if len(pending) > MAX_MESSAGE_BYTES:
                self.error = McpServerFailed(
                    f"MCP server {self.name!r} sent a message longer than "
                    f"{MAX_MESSAGE_BYTES} bytes; it was stopped", server=self.name)
                return False
        return True

    def failure(self) -> McpServerFailed:
        """The error saying why the server does not serve (it ended)."""
        if isinstance(self.error, McpServerFailed):
            return self.error
        tail = self.stderr_tail.strip()
        last = tail.splitlines()[-1] if tail else ""
        code = self.result.exit_code if self.result is not None else None
        if self.error is not None:
            what = f"failed: {self.error}"
        elif self.result is not None and self.result.exit_code > 128:
            what = f"was killed by signal {self.result.exit_code - 128}"
        else:
            what = f"exited with status {code}"
        return McpServerFailed(
            f"MCP server {self.name!r} ({_short(shlex.join(self.spec.argv))}) {what}"
            + (f"; its stderr ends: {last[-300:]}" if last else ""),
            server=self.name, exit_code=code, stderr=tail, cause=self.error)

    def drain(self) -> None:
        """Drop lines a previous client left unread."""
        self._lines.clear()

    async def receive_line(self) -> bytes | None:
        """The next line the server printed, or None once it ended."""
        return await self._lines.get()

    async def send(self, data: bytes) -> None:
        """Write to the server's stdin; raise `failure` if it no longer runs."""
        if self.ended.is_set() or self._proc is None:
            raise self.failure()
        try:
            await self._proc.write_stdin(data)
        except SandboxError as exc:
            raise self.failure() from exc


class Provisions:
    """What initialize made for the config's tools and MCP servers; `stop` ends the servers."""

    def __init__(self, tools: Mapping[str, str]) -> None:
        self.tools = dict(tools)
        self.servers: dict[str, McpServer] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start_server(
        self, spec: McpServerSpec,
        open_service: Callable[[Command], AbstractAsyncContextManager[Process]],
    ) -> None:
        server = McpServer(spec)
        started = asyncio.Event()
        self.servers[spec.name] = server
        self._tasks.append(asyncio.ensure_future(server.serve(open_service, started)))
        await started.wait()

    def annotate(self, info: SandboxInfo) -> SandboxInfo:
        """``info`` with the tools listed in its annotations."""
        if not self.tools:
            return info
        notes = {**info.annotations,
                 **{TOOL_ANNOTATION + name: path for name, path in self.tools.items()}}
        return attrs.evolve(info, annotations=notes)

    def server(self, name: str) -> McpServer:
        try:
            return self.servers[name]
        except KeyError:
            known = ", ".join(sorted(self.servers)) or "none"
            raise ConfigError(f"no MCP server named {name!r} in this sandbox",
                              details=f"SandboxConfig.mcp_servers names: {known}") from None

    async def stop(self) -> None:
        """Stop every server (killing its process) and wait for that; shielded."""
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)


def check_provisions(config: SandboxConfig) -> dict[str, McpServerSpec]:
    """Refuse malformed ``tools`` and ``mcp_servers`` entries (before anything is made);
    return the servers by name.

    Raises:
        ConfigError: An entry is malformed, or two servers share a name.
    """
    for name in config.tools:
        _check_executable("tools", name)
    return parse_mcp_servers(config.mcp_servers)


async def provision(
    sb: Runner, servers: Mapping[str, McpServerSpec],
    open_service: Callable[[Command], AbstractAsyncContextManager[Process]],
) -> Provisions:
    """Check the config's tools and start its MCP servers; return what was made.

    Raises:
        SandboxInitFailed: A tool or a server's executable is not in the sandbox.
    """
    config = sb.config
    wanted = list(dict.fromkeys([*config.tools, *(s.argv[0] for s in servers.values())]))
    found = await find_executables(sb, wanted)
    missing = [f"tools: {n!r}" for n in config.tools if n not in found]
    missing += [f"mcp_servers[{s.name!r}]: {s.argv[0]!r}" for s in servers.values()
                if s.argv[0] not in found]
    if missing:
        raise SandboxInitFailed(
            "executables the config names are not in the sandbox: " + "; ".join(missing),
            details=f"install them in the image {config.image!r}, or fix the names")
    provisions = Provisions({n: found[n] for n in config.tools})
    try:
        for spec in servers.values():
            await provisions.start_server(spec, open_service)
    except BaseException:
        await provisions.stop()
        raise
    return provisions

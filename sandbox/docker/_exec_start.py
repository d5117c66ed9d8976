"""Starting an exec: refuse what Linux could not start, and name why the engine could not.

A command too large for execve is refused before the engine sees it. When the engine could
not start a command (a missing program, user or working directory, no execute permission), it
says so in the command's output; `read_start_failure` tells that message from output by the
exec's Pid and `start_error` maps it to `CommandNotFound`, `CommandNotExecutable` or
`CommandStartFailed`. The engine facts are in docs/engine-notes.md, section "exec: streams,
stdin, exit codes".
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import CommandNotExecutable, CommandNotFound, CommandStartFailed, SandboxError
from .._output import StreamName
from ._gateway import Engine

#: Linux's limits for a new program (execve): bytes per argument or environment string
#: (MAX_ARG_STRLEN, NUL included), and for all of them plus their pointers (a quarter of the
#: default 8 MiB stack). runc enforces them; gVisor is more lenient, but commands stay portable.
MAX_ARG_STRLEN = 128 << 10
ARG_MAX = 2 << 20
#: Kept free for the environment the container adds (image ENV, PATH, HOSTNAME, HOME).
ENV_RESERVE = 64 << 10


def check_exec_size(argv: Sequence[str], env: Sequence[str]) -> None:
    """Refuse, before the engine sees it, a command Linux (or the engine) could not start.

    Otherwise a 200 KB argument comes back as exit 1 with runc's message on stderr (which a
    program could print too, so it cannot be trusted), and a 10 MB environment as the engine's
    "message length exceeds maximum message size" (4 MiB).
    """
    total = 0
    labelled = [(f"argv[{i}]", a) for i, a in enumerate(argv)]
    labelled += [(f"environment entry {e.partition('=')[0]!r} (KEY=value)", e) for e in env]
    for label, text in labelled:
        size = len(text.encode("utf-8", "surrogatepass")) + 1
        if size > MAX_ARG_STRLEN:
            raise CommandStartFailed(
                f"cannot start {argv[0]!r}: {label} is {size - 1} bytes, but Linux allows at "
                f"most {MAX_ARG_STRLEN - 1} bytes per argument or environment entry",
                details="pass large data through stdin or a file (write_file) instead",
            )
        total += size + 8
    if total > ARG_MAX - ENV_RESERVE:
        raise CommandStartFailed(
            f"cannot start {argv[0]!r}: its arguments and environment take {total} bytes, but "
            f"Linux allows about {ARG_MAX} bytes in all ({ENV_RESERVE} of them kept for the "
            "container's own environment)",
            details="pass large data through stdin or a file (write_file) instead",
        )



def start_error(text: str, argv: Sequence[str], user: str, workdir: str) -> CommandStartFailed:
    """Name the cause of a start failure from the engine's message.

    Only called when the engine said the process never started (Pid 0): then the text is the
    engine's, not something the command printed.
    """
    low = text.lower()
    name = argv[0]
    if "unable to find user" in low or "unable to find group" in low:
        kind = "group" if "unable to find group" in low else "user"
        return CommandStartFailed(
            f"cannot start {name!r}: the {kind} in user={user!r} does not exist in the sandbox "
            f"(no entry in its /etc/{'group' if kind == 'group' else 'passwd'})",
            details=f"use a numeric uid[:gid] or a {kind} the image defines; engine: {text}",
        )
    if "chdir to cwd" in low or "initial working directory" in low:
        return CommandStartFailed(
            f"cannot start {name!r}: its working directory {workdir!r} does not exist in the "
            "sandbox", details=text,
        )
    if "message length" in low and "maximum message size" in low:
        return CommandStartFailed(
            f"cannot start {name!r}: its arguments and environment exceed the engine's 4 MiB "
            "message limit", details=f"pass large data through stdin or a file; engine: {text}",
        )
    if "executable file not found" in low or "error finding executable" in low:
        return CommandNotFound(f"cannot start {name!r}: it was not found in the sandbox's PATH",
                               details=text)
    if "no such file or directory" in low:
        return CommandNotFound(
            f"cannot start {name!r}: it (or the interpreter its #! line names) does not exist "
            "in the sandbox", details=text)
    if "permission denied" in low:
        return CommandNotExecutable(
            f"cannot start {name!r}: it is not executable (no execute permission, a "
            "directory, or on a noexec mount)", details=text)
    return CommandStartFailed(f"could not start {name!r} in the sandbox", details=text)


async def read_start_failure(
    engine: Engine, exec_id: str, name: StreamName, data: bytes, argv: Sequence[str], user: str,
    workdir: str,
) -> CommandStartFailed | None:
    """The error to raise if the first message is the engine saying the command could not
    start, else None (the message is output).

    The engine writes its error as one stdout line ending in CRLF, after marking the
    exec exited (code 126) with no Pid. Any command can print the same text, so only
    the Pid decides: the engine holds the exec's lock from the start until the Pid is
    set, so an inspect made after a started command's output always shows its Pid.
    """
    if name != "stdout" or not data.endswith(b"\r\n") or b"\n" in data[:-2] \
            or len(data) > 64 << 10:
        return None  # not one CRLF line: output (no inspect for most CRLF text)
    try:
        info = await engine.inspect_exec(exec_id, deadline=10)
    except SandboxError:
        return None  # deliver it as output; the result still sees Pid 0 if it never ran
    if info.get("Pid") or info.get("Running") or info.get("ExitCode") not in (126, 127):
        return None
    text = data.decode(errors="replace").strip()
    return start_error(text, argv, user, workdir)

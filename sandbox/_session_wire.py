"""The text a session writes to its shell and the markers it reads back: pure functions.

Each command is one line fed to a long-lived shell. After the command the shell prints an end
marker on stdout (carrying the exit status and the working directory) and one on stderr; a
marker is ``\\x1eSBX`` + a fresh random nonce + ``:`` + payload + NUL. The shell renders the
marker with ``printf`` from octal escapes, so the wrapper's own text (visible with ``set -x``
or ``set -v``) never contains the marker bytes: output imitating a marker is output. Both
streams carry a marker because the engine copies stdout and stderr separately: only the
marker on a stream says that stream's output of the command is all in. Status 0 is said with
a second secret of the command (``o`` + token), any other status by its number (``x``), so a
process that reads markers off a stdout it shares (a child of the command holds it) cannot
turn a failure into a success.

What this does not stop: the command runs in that shell and may change it (functions named
like the wrapper's builtins, a DEBUG trap, ``set -v``, a background subshell reading the
shell's input), so it can forge its own result and those of later commands in the same shell.
Other processes cannot: the shell's input, where the nonces travel, is closed to them
(``_session_shell``).

A command given stdin reads it through a pipe from a small reader the shell forks, which takes
the input from the shell's own stdin as lines of ``printf`` formats (``#`` + escapes, a comment
if the shell itself ever read one) until a line ``:`` (a no-op for the shell); so the input ends
with EOF for the command while the session's stdin stays open.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping
from typing import Final, Literal

#: Every marker starts so; the nonce and a colon follow.
MARK: Final = b"\x1eSBX"
#: How the wrapper writes ``MARK`` (rendered by printf; the text itself never matches).
_MARK_FMT: Final = "\\036SBX"
#: Hex digits in a nonce.
NONCE_LEN: Final = 32
#: The environment variable marking every process a command starts, for the timeout sweep.
COMMAND_VAR: Final = "SANDBOX_SESSION_CMD"
#: Payload a marker may carry before its NUL (the working directory is at most PATH_MAX).
MAX_PAYLOAD: Final = 64 << 10
#: Input bytes per reader line (each byte takes up to 4 characters).
STDIN_LINE: Final = 4096
#: The line that ends a command's input (a no-op should the shell read it).
STDIN_END: Final = ":\n"

StreamName = Literal["stdout", "stderr"]

# Bytes printf may take literally in a format; all else is written as an octal escape.
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ,./_=+:@")
_ESCAPE = [chr(b) if b in _PLAIN else f"\\{b:03o}" for b in range(256)]

#: Shell set-up sent once: bash runs the last element of a pipeline in the shell itself (so
#: a command given stdin keeps its cd and export) and expands aliases as a terminal does.
#: A session shell's environment names here the loader variables (``LD_*``) it was started
#: without, their values under ``SANDBOX_RESTORE_<name>`` (`loader_restored`); ``SETUP``
#: exports them again, for the commands only (the loader reads them once, at a start).
RESTORE_VAR: Final = "SANDBOX_RESTORE"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

SETUP: Final = (
    f"for _sbx_n in ${{{RESTORE_VAR}-}}; do "
    f"eval \"export $_sbx_n=\\\"\\${{{RESTORE_VAR}_$_sbx_n}}\\\"; "
    f"unset {RESTORE_VAR}_$_sbx_n\"; done; unset {RESTORE_VAR} _sbx_n\n"
    'if [ -n "${BASH_VERSION:-}" ]; then shopt -s lastpipe expand_aliases; set +o history; '
    "fi 2>/dev/null\n"
)


def loader_restored(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a session shell: every ``LD_*`` empty (a library the sandbox user planted
    on such a path would run inside the guarded shell and read its secrets), the values kept
    under `RESTORE_VAR` names for ``SETUP`` to export for the commands."""
    names = [name for name, value in env.items() if name.startswith("LD_") and value]
    if not names:
        return dict(env)
    out = {**env, **dict.fromkeys(names, "")}
    kept = [name for name in names if _IDENT.fullmatch(name)]
    out.update({f"{RESTORE_VAR}_{name}": env[name] for name in kept})
    out[RESTORE_VAR] = " ".join(kept)
    return out

def exit_trap(nonce: str) -> str:
    """Set-up making the shell say it is exiting (``q`` + status on stdout, ``Q`` on stderr),
    so an ``exit`` is seen at once even while a background job holds the output open."""
    return (f"trap 'printf \"{_MARK_FMT}{nonce}:q%d\\000\" \"$?\"; "
            f"printf \"{_MARK_FMT}{nonce}:Q\\000\" >&2' EXIT\n")


#: Sent first to a shell the SDK started as ``bash --posix -p`` (``shell_argv``, ``AUTO_SHELL``):
#: back to bash's own mode, as a plain ``bash`` would run, unless the environment exports
#: ``POSIXLY_CORRECT`` (then a plain bash starts in POSIX mode too). The two flags are only
#: there so that nothing of the environment runs in the session's shell as it starts, where
#: a ``printf`` function or a trap forges every later command's result and a guarded shell
#: would be guarded no longer: ``--posix`` and ``-p`` (privileged) both keep bash from
#: sourcing the file ``BASH_ENV`` names (an image's, or one the sandbox user can write), and
#: ``-p`` also keeps it from importing exported functions (``BASH_FUNC_printf%%``: a POSIX
#: mode bash still imports those) and from applying ``SHELLOPTS`` and ``BASHOPTS`` (``xtrace``
#: with an image's ``PS4='$(...)'`` runs code before every line). ``set +p`` leaves privileged
#: mode (the real and effective ids are the same: it changes no id); leaving POSIX mode
#: restores bash's defaults but keeps ``inherit_errexit``, which ``--posix`` turned on.
#: Commands still see ``BASH_ENV``, the ``BASH_FUNC_*`` variables and ``PS4`` (a ``bash``
#: they start sources and imports them, as on a plain exec); ``ENV`` is read by interactive
#: shells alone, which a session's never is.
POSIX_OFF: Final = (
    'if [ -n "${BASH_VERSION:-}" ]; then set +p; '
    "if ! compgen -e POSIXLY_CORRECT >/dev/null 2>&1; then "
    "set +o posix; shopt -u inherit_errexit; fi; fi 2>/dev/null\n"
)

#: Starts bash when the image has it (privileged and in POSIX mode: see ``POSIX_OFF``), else
#: the POSIX sh, reading commands from stdin. ``unset`` first: a bash run as ``sh`` imports
#: exported functions (``command``), and ``unset``, a special builtin, wins over them there.
AUTO_SHELL: Final = (
    "unset -f command 2>/dev/null; "
    "if command -v bash >/dev/null 2>&1; then exec bash --posix --noprofile --norc -p; fi; "
    "exec /bin/sh"
)


def quote(text: str) -> str:
    """``text`` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


def printf_format(data: bytes) -> str:
    """A printf format printing exactly ``data`` (safe in double quotes, never starts with -)."""
    return "".join([_ESCAPE[b] for b in data])


def stdin_lines(data: bytes) -> Iterator[str]:
    """The reader's lines carrying ``data`` (without the end line)."""
    for off in range(0, len(data), STDIN_LINE):
        yield "#" + printf_format(data[off : off + STDIN_LINE]) + "\n"


def _end_markers(nonce: str, token: str) -> str:
    # Status 0 is said with ``token`` (``o``), any other with its number (``x``): a process
    # that reads a failing command's marker off a shared stdout learns no way to say success.
    return (f"case $? in 0) printf '{_MARK_FMT}{nonce}:o{token}:%s\\000' \"$PWD\";; "
            f"*) printf '{_MARK_FMT}{nonce}:x%d:%s\\000' \"$?\" \"$PWD\";; esac; "
            f"printf '{_MARK_FMT}{nonce}:e\\000' >&2")


def wrap(command: str, nonce: str, command_id: str, *, reader: bool, token: str,
         bash: bool = False) -> str:
    """The line that runs ``command`` in the shell itself and then prints its end markers.

    ``command eval`` keeps a syntax error from ending a POSIX shell. Without ``reader`` the
    command's stdin is /dev/null (never the session's own stdin, which carries the commands);
    with it, a forked reader feeds the command and first prints a ``r`` marker on stderr,
    after which (and not before: dash reads its input in blocks) input lines may be sent.

    Under ``bash`` (``lastpipe``) the shell parks its own stdin at fd 255 while the pipeline's
    last part runs in it, and does not mark it close-on-exec: every program the command ran
    inherited the session's command channel, which another process of the user could open
    through ``/proc/<program>/fd/255`` and write commands into. ``255<&-`` closes it for the
    part (bash saves and restores it around the redirection); POSIX sh runs that part in a
    subshell and has no such fd, and dash cannot parse a descriptor above 9.
    """
    setup = f"{COMMAND_VAR}={command_id}; export {COMMAND_VAR}; "
    body = f"command eval {quote(command + chr(10))}"
    if not reader:
        return f"{setup}{body} </dev/null; {_end_markers(nonce, token)}\n"
    feeder = (
        "{ trap '' PIPE; "
        f"printf '{_MARK_FMT}{nonce}:r\\000' >&2; "
        "while IFS= read -r l; do case $l in '#'*) printf \"${l#?}\" 2>/dev/null;; "
        "*) break;; esac; done; }"
    )
    # The markers again after the pipeline: under a POSIX sh the command runs in a subshell,
    # and an ``exit`` there skips the inner ones. Seen twice, the second pair is dropped.
    close = " 255<&-" if bash else ""
    return (f"{setup}{feeder} | {{ {body}; {_end_markers(nonce, token)}; }}{close}; "
            f"{_end_markers(nonce, token)}\n")


class MarkerScanner:
    """Split one stream into the command's output and the markers bearing ``nonce``.

    `feed` returns the output to pass on and the payloads of markers seen, in order; bytes
    that could be the start of a marker are held until the next chunk says. Output after the
    end marker (``x`` or ``e``; ``q`` or ``Q`` with the ``shell`` nonce: the shell exits) is
    not the command's: it is counted in `dropped`. Markers of a ``stale`` nonce (the previous
    command's, printed twice by design) are dropped silently.
    """

    def __init__(self, nonce: str, stale: tuple[str, ...] = (), shell: str = "") -> None:
        self._nonce = nonce.encode()
        self._own = frozenset(n.encode() for n in (nonce, shell) if n)
        self._stale = frozenset(n.encode() for n in stale)
        self._plen = len(MARK) + len(self._nonce) + 1
        self._held = b""
        self.ended = False
        self.dropped = 0

    def feed(self, data: bytes) -> tuple[list[bytes], list[bytes]]:
        out: list[bytes] = []
        marks: list[bytes] = []
        buf = self._held + data if self._held else data
        self._held = b""
        pos = search = 0  # pos: first byte not yet passed on; search: where to look next
        plen = self._plen
        while True:
            at = buf.find(MARK, search)
            if at < 0:
                keep = self._partial(buf, pos)
                self._emit(out, buf[pos:keep])
                self._held = buf[keep:]
                break
            if len(buf) - at < plen:  # too short to tell yet
                self._emit(out, buf[pos:at])
                self._held = buf[at:]
                break
            nonce = buf[at + len(MARK) : at + plen - 1]
            if buf[at + plen - 1] != 0x3A or (nonce not in self._own and nonce not in self._stale):
                search = at + 1
                continue
            end = buf.find(b"\0", at + plen, at + plen + MAX_PAYLOAD + 1)
            if end < 0:
                if len(buf) - at > plen + MAX_PAYLOAD:
                    search = at + 1  # no NUL within reach: not a marker of ours
                    continue
                self._emit(out, buf[pos:at])
                self._held = buf[at:]
                break
            self._emit(out, buf[pos:at])
            if nonce in self._own:
                payload = buf[at + plen : end]
                marks.append(payload)
                if payload[:1] in (b"o", b"x", b"e", b"q", b"Q"):
                    self.ended = True  # later output is not the command's; a late r counts
            pos = search = end + 1
        return out, marks

    def _emit(self, out: list[bytes], piece: bytes) -> None:
        if not piece:
            return
        if self.ended:
            self.dropped += len(piece)
        else:
            out.append(piece)

    @staticmethod
    def _partial(buf: bytes, pos: int) -> int:
        """Where trailing bytes that could begin a marker start (``len(buf)`` if none)."""
        start = buf.rfind(MARK[:1], max(pos, len(buf) - len(MARK) + 1))
        if start < 0 or not MARK.startswith(buf[start:]):
            return len(buf)
        return start

    def flush(self) -> bytes:
        """Bytes held back when the stream ended without completing a marker."""
        held, self._held = self._held, b""
        return held


def parse_end(payload: bytes, token: str) -> tuple[int | None, str]:
    """The exit status and working directory from an ``o`` or ``x`` marker's payload.

    The status is None when the marker is not one the wrapper prints: ``o`` without the
    command's ``token``, ``x`` with status 0 or no number (someone else wrote it).
    """
    word, _, cwd = payload[1:].partition(b":")
    code: int | None
    if payload[:1] == b"o":
        code = 0 if secrets.compare_digest(word, token.encode()) else None
    else:
        code = parse_status(word)
        code = None if code == 0 else code
    return code, cwd.decode("utf-8", errors="replace")


def parse_status(word: bytes) -> int | None:
    """A status as the shell prints it (``%d``), or None if it is not one."""
    if not word.isdigit() or len(word) > 3:
        return None
    return int(word)


def head_tail(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and end.

    The dropped middle is replaced by a line saying how much was left out, so a model reading
    it knows the output is incomplete.
    """
    if limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    dropped = len(text) - head - tail
    return (f"{text[:head]}\n[... {dropped} characters of output omitted ...]\n"
            f"{text[len(text) - tail:] if tail else ''}")

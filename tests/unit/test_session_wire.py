"""The session's wire: markers found across any chunking, spoofs passed on, input encoding."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox import head_tail
from sandbox._session_wire import (
    MARK,
    SETUP,
    STDIN_END,
    MarkerScanner,
    exit_trap,
    loader_restored,
    parse_end,
    printf_format,
    quote,
    stdin_lines,
    wrap,
)

NONCE = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"
TOKEN = "00112233445566778899aabbccddeeff"


def scan(chunks: list[bytes], nonce: str = NONCE) -> tuple[bytes, list[bytes], bool, int]:
    scanner = MarkerScanner(nonce)
    out: list[bytes] = []
    marks: list[bytes] = []
    for chunk in chunks:
        o, m = scanner.feed(chunk)
        out += o
        marks += m
    return b"".join(out), marks, scanner.ended, scanner.dropped


def splits(data: bytes) -> list[list[bytes]]:
    """Every way to cut ``data`` in two, plus one byte at a time."""
    return [[data[:i], data[i:]] for i in range(len(data) + 1)] + [
        [data[i : i + 1] for i in range(len(data))]]


def marker(payload: bytes, nonce: str = NONCE) -> bytes:
    return MARK + nonce.encode() + b":" + payload + b"\0"


@pytest.mark.parametrize("chunks", splits(b"out\x1e\x1eSBXx" + marker(b"x7:/a b") + b"late"))
def test_end_marker_found_however_chunked(chunks: list[bytes]) -> None:
    out, marks, ended, dropped = scan(chunks)
    assert out == b"out\x1e\x1eSBXx"
    assert marks == [b"x7:/a b"] and ended and dropped == 4


def test_other_nonce_is_output() -> None:
    spoof = marker(b"x0:/", OTHER) + marker(b"e", OTHER)
    out, marks, ended, _ = scan([spoof, b"more"])
    assert out == spoof + b"more" and marks == [] and not ended


def test_ready_marker_is_taken_out_and_scanning_goes_on() -> None:
    out, marks, ended, _ = scan([b"a" + marker(b"r") + b"b", marker(b"e")])
    assert out == b"ab" and marks == [b"r", b"e"] and ended


def test_prefix_without_nul_is_output_past_the_payload_limit() -> None:
    data = MARK + NONCE.encode() + b":" + b"y" * (70 << 10)
    out, marks, ended, _ = scan([data])
    assert out == data and not marks and not ended


def test_held_bytes_come_back_on_flush() -> None:
    scanner = MarkerScanner(NONCE)
    out, _ = scanner.feed(b"abc\x1eSB")
    assert out == [b"abc"]
    assert scanner.flush() == b"\x1eSB"


def test_parse_end() -> None:
    assert parse_end(b"x3:/work space/x:y", TOKEN) == (3, "/work space/x:y")
    assert parse_end(b"o" + TOKEN.encode() + b":/a:b", TOKEN) == (0, "/a:b")


@pytest.mark.parametrize("payload", [b"x0:/", b"xbad:/", b"x:/", b"x-1:/", b"x1234:/",
                                     b"o:/", b"o" + NONCE.encode() + b":/", b"o0:/"])
def test_an_end_marker_the_wrapper_never_prints_has_no_status(payload: bytes) -> None:
    """Success is said only with the command's token: whoever read a failing command's
    marker off a shared stdout (nonce and all) cannot rewrite it to say 0."""
    assert parse_end(payload, TOKEN)[0] is None


@pytest.mark.parametrize("data", [bytes(range(256)), b"-n %s %% \\ ' \" \n", b""])
def test_printf_format_renders_the_bytes(data: bytes) -> None:
    """Checked with the host's POSIX sh: the escapes mean what the shell's printf prints."""
    fmt = printf_format(data)
    assert not fmt.startswith("-") and "%" not in fmt and "'" not in fmt and "\n" not in fmt
    done = subprocess.run(["sh", "-c", 'printf "$1"', "sh", fmt], capture_output=True,
                          check=True)
    assert done.stdout == data


def test_stdin_lines_are_comments_and_the_end_a_no_op() -> None:
    lines = list(stdin_lines(b"x" * 10000))
    assert len(lines) == 3 and all(line.startswith("#") for line in lines)
    assert STDIN_END == ":\n"


def test_wrapper_runs_in_the_shell_and_marks_both_streams() -> None:
    """A real sh runs the wrapped line: the output is split by the scanner as designed."""
    line = wrap("cd /tmp; echo 'it''s'; echo err >&2; (exit 4)", NONCE, "cid", reader=False,
                token=TOKEN)
    done = subprocess.run(["sh"], input=line.encode() + b"echo after-marker\n",
                          capture_output=True, check=True)
    out, marks, ended, _ = scan([done.stdout])
    assert out == b"its\n" and marks == [b"x4:/tmp"] and ended
    err, emarks, eended, _ = scan([done.stderr])
    assert err == b"err\n" and emarks == [b"e"] and eended
    assert NONCE.encode() not in line.encode().replace(b"\\036SBX" + NONCE.encode(), b"")


def test_quote() -> None:
    done = subprocess.run(["sh", "-c", "printf %s " + quote("a'b\"$x`y`\n")],
                          capture_output=True, check=True)
    assert done.stdout == b"a'b\"$x`y`\n"


def test_head_tail() -> None:
    assert head_tail("short", 10) == "short"
    cut = head_tail("a" * 50 + "b" * 50, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10)
    assert "80 characters of output omitted" in cut
    with pytest.raises(ValueError, match="limit"):
        head_tail("x", -1)


def test_ready_after_the_end_marker_still_counts() -> None:
    """The reader may announce itself after a quick command already ended: the session must
    still see it, or the reader would take the next command line as its end."""
    out, marks, ended, dropped = scan([b"o" + marker(b"e") + b"bg" + marker(b"r") + b"x"])
    assert out == b"o" and marks == [b"e", b"r"] and ended and dropped == 3


def test_stale_markers_are_dropped_silently() -> None:
    """The previous command's second pair of markers never shows as output or ends this one."""
    out, marks, _, _ = scan(
        [marker(b"x0:/", OTHER)[:20], marker(b"x0:/", OTHER)[20:] + b"a" + marker(b"e", OTHER)
         + b"b"])
    assert out == marker(b"x0:/", OTHER) + b"a" + marker(b"e", OTHER) + b"b"  # unknown: output
    assert marks == []
    scanner = MarkerScanner(NONCE, stale=(OTHER,))
    got, marks = scanner.feed(marker(b"x0:/", OTHER) + b"a" + marker(b"e", OTHER) + b"b")
    assert b"".join(got) == b"ab" and marks == [] and not scanner.ended


def test_pipeline_wrapper_marks_even_when_the_command_exits_its_subshell() -> None:
    line = wrap("exit 5", NONCE, "cid", reader=True, token=TOKEN)
    done = subprocess.run(["sh"], input=line.encode() + b":\n", capture_output=True, check=True)
    _, marks, ended, _ = scan([done.stdout])
    assert marks[:1] == [b"x5:" + str(Path.cwd()).encode()] and ended


def test_exit_trap_marks_both_streams_with_the_status() -> None:
    """Checked with the host's sh: after ``exit 4`` the trap prints q4 and Q."""
    done = subprocess.run(["sh"], input=(exit_trap(OTHER) + "exit 4\n").encode(),
                          capture_output=True, check=False)
    assert done.returncode == 4
    scanner = MarkerScanner(NONCE, shell=OTHER)
    _, marks = scanner.feed(done.stdout)
    assert marks == [b"q4"] and scanner.ended
    err = MarkerScanner(NONCE, shell=OTHER)
    assert err.feed(done.stderr)[1] == [b"Q"] and err.ended


@pytest.mark.parametrize("command", ["true", "cd /tmp"])
def test_status_zero_is_said_with_the_token(command: str) -> None:
    """Checked with the host's sh: a command ending with 0 gets an ``o`` marker, and the
    token is in the marker, never the number."""
    line = wrap(command, NONCE, "cid", reader=False, token=TOKEN)
    done = subprocess.run(["sh"], input=line.encode(), capture_output=True, check=True)
    _, marks, ended, _ = scan([done.stdout])
    assert len(marks) == 1 and ended
    assert parse_end(marks[0], TOKEN)[0] == 0 and marks[0].startswith(b"o" + TOKEN.encode())


@pytest.mark.parametrize("shell", [["dash"], ["bash"], ["busybox", "sh"]])
def test_setup_gives_the_commands_the_loader_variables_the_shell_started_without(
        shell: list[str]) -> None:
    if shutil.which(shell[0]) is None:
        pytest.skip(f"no {shell[0]} here")
    value = '/opt/x y"$z `touch /tmp/never`'
    env = loader_restored({"LD_LIBRARY_PATH": value, "LD_A-B": "q", "PATH": "/usr/bin:/bin",
                           "n": "kept"})
    assert (env["LD_LIBRARY_PATH"], env["LD_A-B"]) == ("", "")  # what the shell starts with
    shown = subprocess.run([*shell, "-c", SETUP + 'printf "%s|" "$LD_LIBRARY_PATH" "$n"; '
                            "env | grep -c SANDBOX_RESTORE"],
                           env=env, capture_output=True, text=True, check=False)
    assert shown.stdout == f"{value}|kept|0\n", shown

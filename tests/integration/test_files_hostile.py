"""File operations against names and tools a hostile sandbox controls: listings no name can
break, and helpers that cannot hang (each has a deadline and is killed at it)."""

from __future__ import annotations

import time

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    FileOperationFailed,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    TimeoutExceeded,
    _constants,
    to_json,
)
from sandbox import _helper_files as _files

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: The attacker: root in the sandbox (an explicit opt-in since the defaults are non-root),
#: who can replace any tool the SDK execs.
HOSTILE_ROOT = SecurityPolicy(run_as_user="root")

# printf's escapes make the names, so no byte of them passes through this test's own argv.
_MAKE_NAMES = r"""cd /tmp/d || exit 1
for n in 'new\nline.txt' 'cr\rx' 'tab\tx' 'esc\033[31mx' 'bad\377\376x' 'trail\n'; do
  f=$(printf "$n."); : > "${f%.}" || exit 1
done
: > 'trail'   # the name 'trail\n' must not be confused with this one
ln -s "$(printf 'x\n81a4/9/0/0/0/root/root//etc/forged\n->y')" /tmp/d/forged || exit 1
t=$(printf 'ends\n\n.'); ln -s "${t%.}" /tmp/d/nl || exit 1
"""


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])
async def test_list_files_is_not_fooled_by_names(image: str) -> None:
    async with Sandbox(SandboxConfig(image=image)) as sb:
        r = await sb.execute_command(["sh", "-c", "mkdir /tmp/d && " + _MAKE_NAMES])
        assert r.success, r
        infos = {i.name: i for i in await sb.list_files("/tmp/d")}
        assert set(infos) == {"new\nline.txt", "cr\rx", "tab\tx", "esc\x1b[31mx",
                              "bad\ufffd\ufffdx", "trail\n", "trail", "forged", "nl"}
        assert all(i.path == "/tmp/d/" + name for name, i in infos.items())
        assert infos["forged"].is_symlink
        assert infos["forged"].link_target == "x\n81a4/9/0/0/0/root/root//etc/forged\n->y"
        assert infos["nl"].link_target == "ends\n\n"
        assert not infos["trail\n"].is_symlink and infos["trail\n"].size == 0
        for info in infos.values():
            to_json(info)  # serializable, even with a name that was not UTF-8
        # The name with a newline can be used as it was listed.
        await sb.write_file("/tmp/d/new\nline.txt", "ok")
        assert await sb.read_file(infos["new\nline.txt"].path) == b"ok"
        (one,) = await sb.list_files("/tmp/d/new\nline.txt")
        assert one.name == "new\nline.txt" and one.size == 2
        (root,) = [i for i in await sb.list_files("/") if i.name == "tmp"]
        assert root.path == "/tmp" and root.is_dir
        with pytest.raises(FileOperationFailed, match="NUL"):
            await sb.list_files("/tmp/d/a\0b")


# These run on the Debian image: busybox's ash runs its own applets (stat, head, cat) without a
# PATH lookup, so there a tool can only be replaced by replacing busybox (and sh) itself.


async def test_a_replaced_stat_cannot_forge_entries_or_run_forever(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=HOSTILE_ROOT)) as sb:
        r = await sb.execute_command(["sh", "-c", "mkdir /tmp/d && : > /tmp/d/a"])
        assert r.success, r
        # As root in the sandbox: a stat that tries to add a record for a file outside the
        # directory; $(...) drops its NULs, so it only garbles the one entry's group.
        forge = "#!/bin/sh\nprintf '81a4:1:1:0:0:r:r\\0/etc/shadow\\0\\0\\0'\n"
        await sb.write_file("/usr/local/bin/stat", forge, mode=0o755)
        (only,) = await sb.list_files("/tmp/d")
        assert only.path == "/tmp/d/a" and only.group == "r/etc/shadow"
        await sb.write_file("/usr/local/bin/stat", "#!/bin/sh\necho 'not:stat'\n", mode=0o755)
        with pytest.raises(FileOperationFailed, match="malformed"):
            await sb.list_files("/tmp/d")
        # A listing past the byte cap is refused (and the helper killed), not read to the end.
        monkeypatch.setattr(_files, "MAX_LIST_BYTES", 1 << 20)
        await sb.write_file("/usr/local/bin/stat", "#!/bin/sh\nexec python3 -c "
                            "'print(\"81a4:1:1:0:0:r:\" + \"x\" * 2000000)'\n", mode=0o755)
        with anyio.fail_after(60), pytest.raises(FileOperationFailed, match="refused: more than"):
            await sb.list_files("/tmp/d")
        # One that prints forever fills only the shell's $(...) and meets the deadline.
        monkeypatch.setattr(_constants, "HELPER_TIMEOUT", 2.0)
        await sb.write_file("/usr/local/bin/stat", "#!/bin/sh\nexec yes\n", mode=0o755)
        with anyio.fail_after(60), pytest.raises(TimeoutExceeded, match="list '/tmp/d'"):
            await sb.list_files("/tmp/d")
        assert await _helpers_left(sb, "yes") == ""


async def _helpers_left(sb: Sandbox, needle: str) -> str:
    """Command lines of processes in the sandbox holding ``needle``, read by a fresh exec."""
    script = (r"for d in /proc/[0-9]*; do [ $d = /proc/$$ ] && continue; "
              r"c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null) || continue; echo \"$c\"; done")
    r = await sb.execute_command(["/bin/sh", "-c", script])  # as root in these images
    return "\n".join(line for line in r.stdout.splitlines() if needle in line)


#: What a hostile root puts in place of head, cat and stat: never answers.
_STALL = "#!/bin/sh\nexec sleep 987\n"


async def test_replaced_tools_cannot_hang_file_operations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_constants, "HELPER_TIMEOUT", 2.0)
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=HOSTILE_ROOT)) as sb:
        await sb.write_file("f", "data")
        await sb.write_file("/tmp/stall", _STALL, mode=0o755)
        await sb.write_file("/tmp/yes", "#!/bin/sh\nexec yes 987\n", mode=0o755)
        await sb.write_file("/tmp/trickle", "#!/bin/sh\nwhile :; do echo 987; sleep 0.2; "
                            "done\n", mode=0o755)
        r = await sb.execute_command(["sh", "-c", "mkdir -p /usr/local/bin && for t in head "
                                      "cat stat; do cp /tmp/stall /usr/local/bin/$t; done"])
        assert r.success, r
        calls = {"read": lambda: sb.read_file("f"), "write": lambda: sb.write_file("g", "x"),
                 "list": lambda: sb.list_files(".")}
        for op, call in calls.items():
            started = time.monotonic()
            with anyio.fail_after(60), pytest.raises(
                    TimeoutExceeded, match=rf"^{op} '/workspace(/.)?' did not finish within 2 s "
                                           r"\(has a tool in the sandbox been replaced\?\)"):
                await call()
            assert time.monotonic() - started < 45  # the deadline, not the 987 s sleep
            assert await _helpers_left(sb, "987") == "", op
        # A head that streams forever is cut off at read_file's limit, not read into memory.
        monkeypatch.setattr(_files, "DEFAULT_READ_LIMIT", 1 << 20)
        r = await sb.execute_command(["sh", "-c", "cp /tmp/yes /usr/local/bin/head && "
                                      "rm /usr/local/bin/stat"])
        assert r.success, r
        with anyio.fail_after(60), pytest.raises(FileOperationFailed, match="grew past"):
            await sb.read_file("f")
        assert await _helpers_left(sb, "987") == ""
        # One that trickles just fast enough to keep earning time still ends at the ceiling.
        monkeypatch.setattr(_constants, "HELPER_MIN_RATE", 1.0)
        monkeypatch.setattr(_constants, "HELPER_MAX_TIME", 4.0)
        r = await sb.execute_command(["cp", "/tmp/trickle", "/usr/local/bin/head"])
        assert r.success, r
        with anyio.fail_after(60), pytest.raises(TimeoutExceeded, match="within 4 s"):
            await sb.read_file("f")
        assert await _helpers_left(sb, "987") == ""
        # The sandbox still works, and the error is a TimeoutError for generic handlers.
        assert (await sb.execute_command("echo fine")).stdout == "fine\n"
        assert issubclass(TimeoutExceeded, TimeoutError)


async def test_a_big_write_and_read_get_time_in_proportion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline grows with the data moved: 16 MiB at a 0.5 s base still goes through."""
    monkeypatch.setattr(_constants, "HELPER_TIMEOUT", 0.5)
    monkeypatch.setattr(_constants, "HELPER_MIN_RATE", float(1 << 20))
    data = bytes(range(256)) * (1 << 16)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.write_file("big", data)
        assert await sb.read_file("big") == data


async def test_read_file_max_bytes_reads_no_more_inside_the_sandbox() -> None:
    """read_file(max_bytes=) asks the sandbox for that much only: a 1000 MiB (sparse) file
    costs a 10-byte read, and a `head` that answers with more is stopped at the bound."""
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=HOSTILE_ROOT)) as sb:
        r = await sb.execute_command(["sh", "-c", "printf 'first line\\n' > big && "
                                      "truncate -s 1000M big && printf abc > small"])
        assert r.success, r
        # The helper's own argv, as the sandbox sees it (a logging wrapper around head).
        await sb.write_file("/usr/local/bin/head", '#!/bin/sh\necho "$@" >> /tmp/head.args\n'
                            'exec /usr/bin/head "$@"\n', mode=0o755)
        with anyio.fail_after(60):
            assert await sb.read_file("big", max_bytes=10) == b"first line"
            assert await sb.read_file("small", max_bytes=10) == b"abc"
        assert (await sb.read_file("/tmp/head.args")).split(b"\n")[0] == b"-c 10 -- /workspace/big"
        for bad in (0, -1, True, 1.5, (1 << 30) + 1):
            with pytest.raises(ConfigError, match="max_bytes"):
                await sb.read_file("big", max_bytes=bad)  # type: ignore[arg-type]
        # A head that prints without end is cut off at the bound, not read into memory.
        await sb.write_file("/usr/local/bin/head", "#!/bin/sh\nexec yes 987\n", mode=0o755)
        with anyio.fail_after(60), pytest.raises(FileOperationFailed,
                                                 match="printed more than the 4096 bytes"):
            await sb.read_file("big", max_bytes=4096)
        assert await _helpers_left(sb, "987") == ""

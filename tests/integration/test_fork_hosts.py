"""A fork's children get /etc/hosts from their own keepalive (`_hosts_init`), not from a root
exec each: observed in real containers. Each child's hosts are right before its first command
however slow the write, made without an exec or an archive PUT, by a main process that runs as
root like the source's; where the keepalive cannot write (a hostile checkpoint), the PUT
does. Playing the attacker: a checkpoint whose root replaced the shell so that it points
/etc/hosts at a file of its own gets no write through that symlink, and a program planted in
a PATH directory the user owns is not what the root keepalive runs."""

from __future__ import annotations

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig
from sandbox.docker import _hosts_init
from tests.integration.test_create_fast import Calls
from tests.integration.test_fork_workdir import as_root
from tests.integration.test_netless import (
    HOSTS_PUT,
    SHOW_HOSTS,
    Execs,
    assert_hosts,
    never_seen,
    sh,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

CONFIG = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)
#: The ids the container's main process (docker-init and the keepalive) runs with.
MAIN_IDS = "stat -c %u:%g /proc/1"


async def fork_and_show(source: Sandbox, name: str, show: str = SHOW_HOSTS) -> list[str]:
    """What each of two children of ``source`` shows (``show``); they are removed after."""
    children = await source.fork(2, name=name)
    try:
        return [await sh(child, show) for child in children]
    finally:
        async with anyio.create_task_group() as tg:
            for child in children:
                tg.start_soon(child.cleanup)


async def test_children_write_hosts_from_a_root_keepalive_without_an_exec_or_a_put(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    never_seen(monkeypatch)
    async with Sandbox(CONFIG) as source:
        main = await sh(source, MAIN_IDS)
        assert main == "0:0\n"
        calls, execs = Calls(monkeypatch), Execs(monkeypatch)
        shown = await fork_and_show(source, f"{prefix}-hosts", SHOW_HOSTS + "; " + MAIN_IDS)
    assert execs.hosts_writes() == 0, execs.made
    assert HOSTS_PUT not in calls.actions, calls.actions
    for text in shown:
        # The main process runs as the source's did (the commit made the sandbox user the
        # checkpoint's, which a create without a user would have given it instead).
        assert text.endswith("\n" + main), text
        assert_hosts(text.removesuffix(main))


async def test_hosts_are_right_before_a_childs_first_command_however_slow_the_write(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The create waits for the keepalive's word: a slow write delays it, never the file.
    never_seen(monkeypatch)
    monkeypatch.setattr(_hosts_init, "WRITE_SH", "sleep 1.5\n" + _hosts_init.WRITE_SH)
    async with Sandbox(CONFIG) as source:
        calls = Calls(monkeypatch)
        for text in await fork_and_show(source, f"{prefix}-slow"):
            assert_hosts(text)
    assert HOSTS_PUT not in calls.actions, calls.actions


async def test_the_archive_put_writes_hosts_where_the_keepalive_cannot(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A root without capabilities (a hostile one, or a root command) left /etc unwritable to
    # itself; the children's keepalive (the same root) fails, and says so: the engine writes.
    never_seen(monkeypatch)
    async with Sandbox(CONFIG) as source:
        as_root(source, "chmod 555 /etc")
        calls = Calls(monkeypatch)
        for text in await fork_and_show(source, f"{prefix}-refused"):
            assert_hosts(text)
    assert calls.actions.count(HOSTS_PUT) == 2, calls.actions


async def test_the_keepalive_gives_up_in_time_and_the_put_writes_hosts(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # No word within the deadline (a shell that stalls): the PUT writes the file, the
    # create goes on.
    never_seen(monkeypatch)
    monkeypatch.setattr(_hosts_init, "MARKER_TIMEOUT", 0.5)
    monkeypatch.setattr(_hosts_init, "WRITE_SH", "sleep 30\n" + _hosts_init.WRITE_SH)
    async with Sandbox(CONFIG) as source:
        calls = Calls(monkeypatch)
        for text in await fork_and_show(source, f"{prefix}-stall"):
            assert_hosts(text)
    assert calls.actions.count(HOSTS_PUT) == 2, calls.actions


#: A shell that, run as root, first points /etc/hosts at a file of the checkpoint's own; then
#: runs the real shell.
HOSTILE_SH = """#!/bin/busybox ash
if [ "$(/bin/busybox id -u)" = 0 ]; then
  /bin/busybox ln -sfn /etc/target /etc/hosts
fi
exec /bin/busybox ash "$@"
"""


async def test_a_checkpoint_whose_shell_plants_a_symlink_at_hosts_gets_no_write_through_it(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attacker: a root without capabilities in the source replaced /bin/sh, which is the
    # children's keepalive: it plants a symlink at /etc/hosts before the SDK's script runs.
    # The script renames a new file over it: /etc/hosts is a regular file with the hosts,
    # and the file the symlink named is untouched (a write through it fails both).
    never_seen(monkeypatch)
    async with Sandbox(CONFIG) as source:
        await source.write_file("/tmp/hostile-sh", HOSTILE_SH, mode=0o755)
        as_root(source, "printf 'keep\\n' > /etc/target && rm /bin/sh && "
                        "cp /tmp/hostile-sh /bin/sh && chmod 755 /bin/sh")
        calls = Calls(monkeypatch)
        shown = await fork_and_show(
            source, f"{prefix}-hostile-sh",
            SHOW_HOSTS + "; cat /etc/target; [ -L /etc/hosts ] || echo regular")
    assert HOSTS_PUT not in calls.actions, calls.actions
    for text in shown:
        assert text.endswith("\nkeep\nregular\n"), text
        assert_hosts(text.removesuffix("keep\nregular\n"))


async def test_a_sleep_planted_in_a_path_directory_is_not_what_the_root_keepalive_runs(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attacker: a `sleep` noting who ran it, in a PATH directory before the system's
    # (/usr/local/bin; put there by a root without capabilities, as a user would in a
    # directory it owns, a conda prefix). The children's keepalive is root: its loop takes
    # `sleep` from the system's directories first, so no root call is noted. (Debian's
    # dash looks `sleep` up in PATH; busybox's shell runs its own applet whatever the PATH.)
    never_seen(monkeypatch)
    planted = '#!/bin/sh\nid -u >> /tmp/ran\nexec /bin/sleep "$@"\n'
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, stats_interval=0)) as source:
        await source.write_file("/tmp/planted", planted, mode=0o755)
        as_root(source, "mkdir -p /usr/local/bin && cp /tmp/planted /usr/local/bin/sleep && "
                        "chmod 755 /usr/local/bin/sleep && : > /tmp/ran && chmod 666 /tmp/ran")
        assert "/usr/local/bin" in await sh(source, "echo $PATH")
        assert await sh(source, "sleep 0; cat /tmp/ran") == "1000\n"  # it is found first
        for text in await fork_and_show(source, f"{prefix}-planted",
                                        "sleep 0.2; cat /tmp/ran; echo end"):
            assert text == "1000\n1000\nend\n", text  # the child's own call, and no root one


async def test_the_host_sees_a_childs_keepalive_as_it_sees_its_sources(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The keepalive keeps its command line (no exec): the host's views of the container
    # (a pool's reset, `health` without the engine) find docker-init and it as expected.
    never_seen(monkeypatch)
    async with Sandbox(CONFIG) as source:
        seen = await source.backend.host_inspector()  # type: ignore[attr-defined]
        children = await source.fork(1, name=f"{prefix}-view")
        try:
            child = children[0]
            view = await child.backend.host_inspector()  # type: ignore[attr-defined]
            assert type(view) is type(seen), (view, seen)
            assert await child.backend.health() == ""  # type: ignore[attr-defined]
        finally:
            await children[0].cleanup()


async def test_a_childs_user_cannot_kill_its_keepalive_as_in_its_source(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attacker: the sandbox user signals the main process's child (the keepalive). It
    # runs as root in the source, so that fails; a child whose main process ran as the
    # checkpoint's user (the commit's) was stopped by it.
    never_seen(monkeypatch)
    kill = "kill -9 $(cat /proc/1/task/1/children) 2>/dev/null; echo $?"
    async with Sandbox(CONFIG) as source:
        assert await sh(source, kill) == "1\n"
        for text in await fork_and_show(source, f"{prefix}-kill", kill + "; sleep 0.3; echo alive"):
            assert text == "1\nalive\n", text

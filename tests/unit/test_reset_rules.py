"""The pool reset's pure rules: ids as the kernel reports them, who may change a directory,
what counts as a difference, and no reuse of a sandbox nobody can see from outside."""

from __future__ import annotations

import stat

import anyio
import pytest

from sandbox import Command, Sandbox, SandboxConfig, SandboxPool
from sandbox._constants import ROOT_PATH
from sandbox._hostview import Identity, Meta, identity_of_status
from sandbox._reset import _TOOL_DIRS, _differs, _unsafe_tool_dirs
from sandbox.testing import FakeBackend

USER = Identity((1000,) * 4, (1000,) * 4, frozenset({1000}))


def test_identity_comes_from_the_status_file_numbers() -> None:
    text = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t42\t1000\t1000\n" \
           "Groups:\t1000 42 \n"
    got = identity_of_status(text)
    assert got == Identity((1000,) * 4, (1000, 42, 1000, 1000), frozenset({1000, 42}))
    assert got != USER and not got.is_root
    assert str(got) == "uid 1000 gid 42/1000"
    assert identity_of_status("Uid:\t0\t0\t0\t0\nGid:\t5\t5\t5\t5\nGroups:\n").is_root
    with pytest.raises(ValueError):
        identity_of_status("Uid:\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\n")


@pytest.mark.parametrize(("uid", "gid", "mode", "may"), [
    (1000, 1000, 0o755, True),       # its own: mode, ACLs, xattrs
    (0, 0, 0o755, False),            # root's, read-only to it
    (0, 0, 0o1777, False),           # /tmp: writable, but sticky and not its own
    (0, 0, 0o777, True),             # writable by all: user xattrs
    (0, 1000, 0o775, True),          # writable by its group
    (0, 42, 0o775, False),           # writable by a group it is not in
    (1000, 0, 0o1700, True),         # its own, sticky or not
])
def test_who_may_change_a_directory(uid: int, gid: int, mode: int, may: bool) -> None:
    assert USER.may_change(uid, gid, mode | stat.S_IFDIR) is may


def test_every_field_of_a_directory_counts() -> None:
    base = Meta(kind=stat.S_IFDIR, mode=0o755, uid=1000, gid=1000)
    assert _differs(base, base) == ""
    assert _differs(base, Meta(kind=stat.S_IFDIR, mode=0o777, uid=1000, gid=1000)) == \
        "mode 755 -> 777"
    acl = Meta(kind=stat.S_IFDIR, mode=0o755, uid=1000, gid=1000,
               xattrs=(("system.posix_acl_default", b"\x02\x00\x00\x00"),))
    assert "system.posix_acl_default" in _differs(base, acl)
    assert "gone" in _differs(base, None)
    assert _differs(base, Meta(kind=stat.S_IFLNK, mode=0o777, uid=1000, gid=1000))


class VisibleFake(FakeBackend):
    """A fake with an (empty) change list but no view from outside."""

    async def filesystem_changes(self) -> list[tuple[str, str]]:
        return []


@pytest.mark.asyncio
async def test_no_reuse_of_what_cannot_be_seen_from_outside() -> None:
    seen: list[Sandbox] = []
    async with SandboxPool(SandboxConfig(), min_ready=1, max_size=1, max_uses=5,
                           factory=lambda c: Sandbox(backend=VisibleFake(c))) as pool:
        for _ in range(3):
            with anyio.fail_after(10):
                async with pool.acquire() as sb:
                    seen.append(sb)
        assert pool.stats().reused == 0
    assert len({id(sb) for sb in seen}) == 3


@pytest.mark.asyncio
async def test_a_sandbox_remembers_every_user_its_commands_ran_as() -> None:
    async with Sandbox(backend=FakeBackend(SandboxConfig())) as sb:
        await sb.execute_command("true")
        await sb.execute_command(Command.shell("true", allow_write=False))
        await sb.execute_command(Command.shell("true", user="nobody"))
        # Names reach the engine as the numbers they resolve to (`_ids.narrow_user`).
        assert sb.command_users() == {sb.backend.user, "65534:65534"}


def test_no_host_view_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK that is not root on the engine's host cannot freeze or signal the sandbox's
    processes: it gets a reason (and the pool no reuse), never a half-working view."""
    import os

    from sandbox.docker import _hostview

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    why = _hostview.HostView.find("c0ffee", 1, ("/bin/sh",))
    assert isinstance(why, str) and "not root" in why


def test_the_resets_tools_are_trusted_only_in_directories_only_root_may_change() -> None:
    root_dir = Meta(kind=stat.S_IFDIR, mode=0o755, uid=0, gid=0)
    link = Meta(kind=stat.S_IFLNK, mode=0o777, uid=0, gid=0)
    assert _unsafe_tool_dirs({"/usr/bin": root_dir, "/bin": link, "/sbin": None}) == ""
    for bad in (Meta(kind=stat.S_IFDIR, mode=0o775, uid=0, gid=1000),
                Meta(kind=stat.S_IFDIR, mode=0o1777, uid=0, gid=0),
                Meta(kind=stat.S_IFDIR, mode=0o755, uid=1000, gid=0),
                Meta(kind=stat.S_IFLNK, mode=0o777, uid=1000, gid=1000)):
        assert "/usr/bin" in _unsafe_tool_dirs({"/bin": link, "/usr/bin": bad})
    # The reset's tools are looked up in ROOT_PATH: each of its directories is checked.
    assert "/usr/local" not in ROOT_PATH and set(ROOT_PATH.split(":")) <= set(_TOOL_DIRS)


class _GoneView:
    """A host view whose container went away under it (its init's /proc entry is gone)."""

    def kill_all(self, identity: Identity) -> str:
        raise FileNotFoundError(2, "No such file or directory", "/proc/1203/root")


@pytest.mark.asyncio
async def test_a_sandbox_gone_from_the_hosts_view_is_not_reused_and_nothing_raises() -> None:
    """Seen in CI: a pool's reset read /proc/<init>/root after the container's init had gone,
    and FileNotFoundError escaped the pool. It is a reason not to reuse, not a crash."""
    from sandbox._reset import Baseline, reset

    async with Sandbox(backend=VisibleFake(SandboxConfig())) as sb:
        base = Baseline(changes=frozenset(), cwd=sb.get_working_directory(),
                        env=tuple(sorted(sb.get_environment().items())),
                        user=sb.backend.user, identity=USER,
                        inspector=_GoneView())  # type: ignore[arg-type]
        why = await reset(sb, base)
    assert "could not be seen from the host" in why and "/proc/1203/root" in why

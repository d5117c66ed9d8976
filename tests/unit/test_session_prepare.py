"""The script that makes a session shell's unreadable copy (`sandbox._session_shell._PREPARE`),
run on the host as root under dash and busybox sh, with ``$TMPDIR`` as its only base.

Run as root in the sandbox, it must not take a directory whose path someone else can change
(they would rename root's directory and put their own, with a shell of theirs, in its place:
the path is kept per sandbox), nor run a program from the image's PATH, which may hold a
directory the sandbox user can write."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandbox._backend import ProcessSpec
from sandbox._session_shell import _PREPARE, ShellCopy, guarded_shell

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes directories owned by root and "
                             "by another user")

BASES = '/dev "${TMPDIR:-/tmp}" /tmp /var/tmp'
SHELLS = [s for s in (("/bin/sh",), ("busybox", "sh")) if shutil.which(s[0])]
USER = 1000


def prepare(shell: tuple[str, ...], tmpdir: Path, path: str = "/usr/bin:/bin",
            **env: str) -> str | None:
    """Run the script with ``tmpdir`` as its only base: the copy's path, or None if refused."""
    assert BASES in _PREPARE  # the one line changed here, so the rest runs as in a sandbox
    script = _PREPARE.replace(BASES, '"${TMPDIR:-/tmp}"')
    done = subprocess.run([*shell, "-c", script, "sandbox-session-prepare"], cwd="/",
                          env={"PATH": path, "TMPDIR": str(tmpdir), **env}, capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0:
        assert done.stdout == "", done
        return None
    return done.stdout


def mkdir(path: Path, mode: int, uid: int = 0) -> Path:
    path.mkdir()
    os.chown(path, uid, 0)
    os.chmod(path, mode)
    return path


@pytest.fixture
def root_dir(tmp_path: Path) -> Path:
    """A directory nobody but root can change the path of (pytest's are root's, 0700)."""
    return mkdir(tmp_path / "ok", 0o755)


@as_root
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_base_only_root_can_change_is_taken(shell: tuple[str, ...], root_dir: Path) -> None:
    for base in (root_dir, mkdir(root_dir / "sticky", 0o1777)):
        made = prepare(shell, base)
        assert made is not None and made.startswith(f"{base}/.sandbox-session-"), (base, made)
        assert os.stat(made).st_mode & 0o7777 == 0o111
        assert os.stat(os.path.dirname(made)).st_mode & 0o7777 == 0o711


@as_root
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_base_another_user_can_change_is_refused(shell: tuple[str, ...], root_dir: Path) -> None:
    """Each of these was taken before: the user (or a group, or anyone) could rename root's
    directory there, or a directory along its path."""
    user_home = mkdir(root_dir / "home", 0o755, USER)
    bases = {
        "owned by the user": mkdir(root_dir / "user", 0o755, USER),
        "writable by anyone, not sticky": mkdir(root_dir / "open", 0o777),
        "writable by its group": mkdir(root_dir / "group", 0o775),
        "root's, in the user's directory": mkdir(user_home / "tmp", 0o755),
    }
    for why, base in bases.items():
        assert prepare(shell, base) is None, why
        assert not any(base.iterdir()), why


@as_root
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_a_symlink_is_followed_to_where_it_points(shell: tuple[str, ...], root_dir: Path) -> None:
    """A link the user may replace is resolved once: the path kept is the directory's own."""
    user_home = mkdir(root_dir / "home", 0o755, USER)
    (user_home / "tmp").symlink_to(root_dir)
    made = prepare(shell, user_home / "tmp")
    assert made is not None and made.startswith(f"{root_dir}/.sandbox-session-"), made


@as_root
@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_the_images_path_and_bash_env_are_not_used(shell: tuple[str, ...], root_dir: Path,
                                                   tmp_path: Path) -> None:
    """Programs planted in a PATH directory first (as a sandbox user could, in a directory of
    theirs the image's PATH names) never run, nor does a file BASH_ENV names when the copy of
    bash is tried: the script sets its own PATH and unsets BASH_ENV."""
    planted = tmp_path / "planted"
    planted.mkdir()
    ran = tmp_path / "ran"
    for name in ("bash", "cp", "mktemp", "chmod", "ls", "id", "rm"):
        prog = planted / name
        prog.write_text(f"#!/bin/sh\necho {name} >> {ran}\nexec /usr/bin/{name} \"$@\"\n")
        prog.chmod(0o755)
    bash_env = tmp_path / "bash_env"
    bash_env.write_text(f"echo BASH_ENV >> {ran}\n")
    made = prepare(shell, root_dir, path=f"{planted}:/usr/bin:/bin", BASH_ENV=str(bash_env))
    assert made is not None and made.startswith(f"{root_dir}/.sandbox-session-"), made
    assert not ran.exists(), ran.read_text()


@as_root
def test_functions_a_bash_as_sh_imports_never_run(root_dir: Path, tmp_path: Path) -> None:
    """Where /bin/sh is bash (Fedora, RHEL), it imports the environment's exported functions,
    found before builtins and programs, and the copy of bash imports them too: none of them
    runs, neither in the script (``cp``, ``[``: unset first) nor in the copy's trial (``:``:
    it is given no command). Before the fix all three ran, as root."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    sh = tmp_path / "bin" / "sh"
    sh.parent.mkdir()
    sh.symlink_to(bash)
    ran = tmp_path / "ran"
    funcs = {f"BASH_FUNC_{name}%%": f"() {{ echo {name} >> {ran}; }}"
             for name in ("cp", "[", ":", "chmod", "printf", "command")}
    made = prepare((str(sh),), root_dir, **funcs)
    assert not ran.exists(), ran.read_text()
    assert made is not None and made.startswith(f"{root_dir}/.sandbox-session-"), made


class _Backend:
    """Enough of a backend for `guarded_shell`: the first prepare (root's) fails, the next
    works."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.users: list[str] = []

    async def run_process(self, spec: ProcessSpec) -> SimpleNamespace:
        self.users.append(spec.user)
        ok = len(self.users) > 1
        return SimpleNamespace(exit_code=0 if ok else 1,
                               stdout="/tmp/.sandbox-session-x/bash" if ok else "")


@pytest.mark.asyncio
@pytest.mark.parametrize(("user", "by_root"), [("1000:1000", False), ("0:0", True),
                                                ("root", True)])
async def test_the_fallback_copy_is_made_as_the_sandbox_user(user: str, by_root: bool) -> None:
    """Not as "" (the backend's default: root on Docker, whose main process is root now), and
    labelled by who made it: a root-owned copy said to be the user's would be left behind,
    the probe's ``rm -rf`` as the user refused."""
    backend = _Backend(user)
    copy = await guarded_shell(backend, backend)  # type: ignore[arg-type]
    assert backend.users == ["0:0", user]
    assert copy == ShellCopy("/tmp/.sandbox-session-x/bash", by_root=by_root)

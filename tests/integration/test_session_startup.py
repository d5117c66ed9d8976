"""What a session's shell runs as it starts: none of the environment's start-up files.

A non-interactive bash sources the file ``BASH_ENV`` names before it reads its first command,
and that file (the image's, or one the sandbox user, an agent, can write) would then run in
the session's shell itself: a ``printf`` function or a trap there reports any status for
every later command, so even a fresh, guarded session could not be trusted. The shell starts
as ``bash --posix`` (which reads no start-up file when not interactive) and leaves POSIX mode
at once; commands still see ``BASH_ENV`` and ``ENV`` and a ``bash`` they start sources it, as
on a plain exec. ``ENV`` is read only by interactive shells (sh, ash, bash), which a session's
never is. Checked by a start-up file that records each shell that runs it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig, SecurityPolicy
from tests.conftest import derived_image

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: The start-up file: appends the pid of the shell that sources it to /tmp/sourced.
RC = "echo sourced $$ >> /tmp/sourced"
#: Writes it to /tmp/rc as the sandbox user (so the user can change it, as an agent could).
WRITE_RC = f"printf '%s\\n' '{RC}' > /tmp/rc && rm -f /tmp/sourced"


@pytest.fixture(scope="module")
def env_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The python image with ``ENV BASH_ENV=/tmp/rc ENV=/tmp/rc`` (the image's own)."""
    yield from derived_image(tmp_path_factory.mktemp("env-image"),
                             f"sandbox-test-bash-env:{uuid.uuid4().hex[:8]}",
                             "ENV BASH_ENV=/tmp/rc ENV=/tmp/rc\n")


ENV = {"environment": {"BASH_ENV": "/tmp/rc", "ENV": "/tmp/rc"}}
CASES: dict[str, tuple[str, dict[str, object], bool, bool]] = {
    # image ("" for env_image), extra config, whether bash runs the session, guarded
    "python-config-env": (IMAGE_PYTHON, ENV, True, True),
    "python-image-env": ("", {}, True, True),
    "python-root": (IMAGE_PYTHON, {**ENV, "security": SecurityPolicy(run_as_user="root")},
                    True, False),
    "busybox-config-env": (IMAGE_BUSYBOX, ENV, False, True),
    # gVisor runs the plain shell (AUTO_SHELL); the process backend's copy is the user's.
    "python-runsc": (IMAGE_PYTHON, {**ENV, "runtime": "runsc"}, True, False),
    "python-process": (IMAGE_PYTHON, {**ENV, "type": "process"}, True, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_session_shell_sources_no_start_up_file(case: str, env_image: str) -> None:
    """The marker never appears from the session's start (nor from a replaced shell), the
    commands see the variables, and a bash a command starts does source the file (the plain
    exec behaviour). Before the fix the python cases recorded the shell's own pid."""
    image, extra, bash, guarded = CASES[case]
    async with Sandbox(SandboxConfig(image=image or env_image, **extra)) as sb:  # type: ignore[arg-type]
        assert (await sb.execute_command(WRITE_RC)).success
        async with sb.session() as sh:
            r = await sh.run('echo "$BASH_ENV $ENV $$ ${BASH_VERSION:+bash}"')
            said = r.stdout.split()
            assert said[:2] == ["/tmp/rc", "/tmp/rc"], r
            assert said[3:] == (["bash"] if bash else []), r
            pid = said[2]
            seen = await sb.execute_command("cat /tmp/sourced 2>/dev/null; true")
            assert seen.stdout == "", (case, pid, seen)
            # A timeout inside the shell itself replaces it: the new one sources nothing.
            stuck = await sh.run("while :; do :; done", timeout=1)
            assert stuck.timed_out, stuck
            r = await sh.run("echo $$")
            assert r.stdout.strip() != pid, r
            seen = await sb.execute_command("cat /tmp/sourced 2>/dev/null; true")
            assert seen.stdout == "", (case, seen)
            if bash:
                r = await sh.run("bash -c 'echo child $$'")
                child = r.stdout.split()[1]
                seen = await sb.execute_command("cat /tmp/sourced")
                assert seen.stdout == f"sourced {child}\n", seen
            assert sh.guarded is guarded, sh.guarded


@pytest.mark.parametrize("posix", [False, True], ids=["plain", "POSIXLY_CORRECT"])
async def test_the_session_shell_runs_in_bashs_own_mode(posix: bool) -> None:
    """The shell is started in POSIX mode only to skip ``BASH_ENV``: a command finds bash as a
    plain ``bash`` would be (POSIX mode off, ``inherit_errexit`` off, no ``POSIXLY_CORRECT``),
    or, when the environment exports ``POSIXLY_CORRECT``, in POSIX mode as a plain bash."""
    env = {"POSIXLY_CORRECT": "1"} if posix else {}
    query = "set -o | grep -w posix; shopt inherit_errexit; echo \"[${POSIXLY_CORRECT-unset}]\""
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, environment=env)) as sb:
        plain = await sb.execute_command(["bash", "-c", query])
        async with sb.session() as sh:
            r = await sh.run(query)
    assert r.stdout.split() == plain.stdout.split(), (r, plain)
    want = ["posix", "on" if posix else "off", "inherit_errexit", "on" if posix else "off",
            "[1]" if posix else "[unset]"]
    assert r.stdout.split() == want, r


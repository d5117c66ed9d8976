"""What the environment can plant in a session's shell: nothing that runs there.

A POSIX mode bash reads no ``BASH_ENV`` file but still imports exported functions
(``BASH_FUNC_printf%%``: the wrapper's own ``printf``, ``compgen`` in ``POSIX_OFF``) and, for
a non-root shell, applies ``SHELLOPTS=xtrace`` with the environment's ``PS4``, whose ``$(...)``
then runs before every line. The environment is the image's ``ENV`` or the config's
``environment=``: an image built by someone else must not be able to forge a guarded
session's results. The shell starts privileged (``bash --posix -p``), which imports none of
it; commands still get those variables as on an exec. Each planted piece of code leaves a
file behind if it ever runs; before the fix the python cases left all three.
"""

from __future__ import annotations

import pytest

from sandbox import IMAGE_PYTHON, Sandbox, SandboxConfig, SecurityPolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: Code the environment plants: each leaves /tmp/pwn.<name> if it runs (and keeps working).
PLANTED = {
    "BASH_FUNC_printf%%": '() { : > /tmp/pwn.printf; builtin printf "$@"; }',
    "BASH_FUNC_compgen%%": '() { : > /tmp/pwn.compgen; builtin compgen "$@"; }',
    "SHELLOPTS": "xtrace",
    "PS4": "$(: > /tmp/pwn.ps4)+ ",
}
CASES: dict[str, dict[str, object]] = {
    "docker": {},  # guarded
    "docker-root": {"security": SecurityPolicy(run_as_user="root")},  # no PS4 for root
    "runsc": {"runtime": "runsc"},  # the plain shell (AUTO_SHELL)
    "process": {"type": "process"},
}
#: The planted variables a command's children get (a bash re-exports a function reformatted).
SHOW = "env | grep -o -e '^BASH_FUNC_[a-z]*%%' -e '^PS4=.*' | sort"


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_environment_runs_nothing_in_the_session_shell(case: str) -> None:
    """Statuses and output stay right, no planted code ran, and the shell itself has neither
    the functions nor xtrace; what a command starts sees the environment as a plain exec's
    command does (a ``bash`` it starts imports the function)."""
    cfg = SandboxConfig(image=IMAGE_PYTHON, environment=PLANTED, **CASES[case])  # type: ignore[arg-type]
    async with Sandbox(cfg) as sb:
        async with sb.session() as sh:
            r = await sh.run("echo hi; false")
            assert (r.exit_code, r.stdout, r.stderr) == (1, "hi\n", ""), r
            r = await sh.run("echo ok")
            assert (r.exit_code, r.stdout, r.stderr) == (0, "ok\n", ""), r
            r = await sh.run('type -t printf compgen; echo "[$-]"; set -o | grep -w -e xtrace '
                             "-e privileged")
            lines = r.stdout.split("\n")
            assert lines[:2] == ["builtin", "builtin"], r
            assert "x" not in lines[2] and "p" not in lines[2], r
            assert r.stdout.split()[-4:] == ["privileged", "off", "xtrace", "off"], r
            ran = await sb.execute_command("ls /tmp/pwn.* 2>/dev/null; true")
            assert ran.stdout == "", (case, ran)
            # As on a plain ``bash -c`` exec: the variables reach what commands start. The
            # plain shell (gVisor) is started through /bin/sh (dash), which drops them, as
            # it does for a command given as a string.
            via_sh = case == "runsc"
            inside = await sh.run(SHOW)
            plain = await sb.execute_command(SHOW if via_sh else ["bash", "-c", SHOW])
            assert inside.stdout == plain.stdout, (inside, plain)
            assert ("BASH_FUNC_printf%%" in plain.stdout) is not via_sh, plain
            child = await sh.run("bash -c 'type -t printf' 2>/dev/null")
            assert child.stdout == ("builtin\n" if via_sh else "function\n"), child
        if case == "docker":
            assert sh.guarded


@pytest.mark.parametrize("case", ["docker", "process"])
async def test_an_exported_printf_forges_nothing(case: str) -> None:
    """The reviewer's function alone: a ``printf`` that prints nothing would swallow every
    end marker (before the fix the session's start failed: its probe never ended)."""
    cfg = SandboxConfig(image=IMAGE_PYTHON, environment={"BASH_FUNC_printf%%": "() { :; }"},
                        **CASES[case])  # type: ignore[arg-type]
    async with Sandbox(cfg) as sb, sb.session() as sh:
        r = await sh.run("printf 'a%s\\n' b; false")
        assert (r.exit_code, r.stdout, r.stderr) == (1, "ab\n", ""), r
        assert sh.guarded is (case == "docker")

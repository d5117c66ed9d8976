"""The pytest plugin as a user meets it: test files run by pytester in a fresh pytest process
(a fresh pid, so its leak check sees only what that run made), against the real engine."""

from __future__ import annotations

import re

import pytest

from tests.conftest import container_exists

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("engine")

INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
asyncio_default_test_loop_scope = function
{extra}
"""


#: Plugins the test dependencies install that these runs do not need (they take seconds to
#: import); ours still loads through its entry point, as for a user.
UNNEEDED = ("langsmith_plugin", "benchmark", "codspeed", "recording", "syrupy", "socket")


def run(pytester: pytest.Pytester, source: str, extra_ini: str = "") -> pytest.RunResult:
    pytester.makeini(INI.format(extra=extra_ini))
    pytester.makepyfile(source)
    off = [arg for name in UNNEEDED for arg in ("-p", f"no:{name}")]
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *off, timeout=240)


def test_fixtures_markers_ini_and_session_sandbox(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        import pytest
        from sandbox import CommandResult, SandboxStatus

        @pytest.mark.asyncio
        async def test_default(sandbox):
            assert sandbox.status is SandboxStatus.RUNNING
            # The ini option chose the image: busybox has no python3.
            r = await sandbox.execute_command("command -v python3 || busybox | head -1")
            assert r.stdout.startswith("BusyBox"), r.stdout

        @pytest.mark.asyncio
        @pytest.mark.sandbox(image="sandbox-python:latest", memory_limit=128 << 20)
        async def test_marker(sandbox):
            r = await sandbox.execute_command(
                "python3 -c 'print(1)'; cat /sys/fs/cgroup/memory.max "
                "/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null")
            assert r.stdout.split() == ["1", str(128 << 20)], r.stdout

        IDS = []

        @pytest.mark.asyncio(loop_scope="session")
        @pytest.mark.parametrize("n", [1, 2])
        async def test_session(sandbox_session, n):
            IDS.append(sandbox_session.id)
            await sandbox_session.write_file(f"f{n}", "x")
            names = [f.name for f in await sandbox_session.list_files(".")]
            assert names == ["f1", "f2"][:n]
            assert len(set(IDS)) == 1

        @pytest.mark.asyncio
        async def test_fake(fake_sandbox):
            fake_sandbox.on_command("pytest", CommandResult(exit_code=1, stdout="1 failed"))
            r = await fake_sandbox.execute_command("pytest -q")
            assert (r.exit_code, r.stdout) == (1, "1 failed")
    """, "sandbox_image = sandbox-busybox:latest\nfilterwarnings = error")
    result.assert_outcomes(passed=5)
    assert "left" not in result.stdout.str()


def test_the_leak_check_fails_a_session_that_leaked(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        import pytest
        from sandbox import Sandbox, SandboxConfig

        # (A leaked sandbox also leaves tasks in a closed loop: that run warns, not errs.)
        LEAKED = []  # kept, so its engine client is not collected (and warned about) early

        @pytest.mark.asyncio
        async def test_forgets_cleanup():
            sb = Sandbox(SandboxConfig(image="sandbox-busybox:latest"))
            await sb.initialize()   # and never cleanup()
            LEAKED.append(sb)

        @pytest.mark.asyncio
        async def test_cleans_up(sandbox):
            assert (await sandbox.execute_command("true")).success
    """)
    result.assert_outcomes(passed=2, errors=1)  # the error: the leak, at the last teardown
    result.stdout.fnmatch_lines([
        "*this session left 1 sandbox resources behind:*",
        "*container sandbox-*: left behind by this process (now removed)*",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # It removed what it reported.
    name = re.search(r"container (sandbox-\w+): left behind", result.stdout.str())
    assert name is not None and not container_exists(name.group(1))


def test_the_leak_check_can_be_turned_off(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        import pytest

        def test_nothing_made():
            import sandbox.docker  # as if a sandbox might have been made
    """, "sandbox_leak_check = false")
    result.assert_outcomes(passed=1)

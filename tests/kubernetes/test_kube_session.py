"""Sessions and terminals over the Kubernetes backend: the session is backend-neutral (one
long-lived process through ``open_process``); a terminal is refused until the backend has
one."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from sandbox import ConfigError, Sandbox
from tests.kubernetes._cluster import Target, cluster

pytestmark = pytest.mark.asyncio


async def test_session_over_kubernetes(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with cluster(tmp_path, request.config) as kube, \
            Sandbox(backend=kube.backend()) as sb, sb.session() as sh:
        with anyio.fail_after(60):
            await sh.run("cd /tmp && export SESS=7")
            r = await sh.run("echo $SESS $PWD; echo err >&2; printf tail")
            assert r.stdout == "7 /tmp\ntail" and r.stderr == "err\n"
            r = await sh.run("cat", stdin=b"in\x00put")
            assert r.stdout_bytes == b"in\x00put"


async def test_tty_is_refused(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with cluster(tmp_path, request.config) as kube, Sandbox(backend=kube.backend()) as sb:
        with pytest.raises(ConfigError, match="tty=True is not supported"):
            async with sb.stream_command("true", tty=True):
                pass


async def _dying_shell(kube: Target, how: str) -> None:
    """The shell dies under a command while ``sleep 600 &`` holds its output: the command ends
    at once with the shell's end (as on Docker), not at its time limit (the runtime reports an
    exec's end only once its output ends: before, 60 s and "a loop in the shell itself?", or
    for ever with no limit); what it left is killed; the next command gets a new shell."""
    async with Sandbox(backend=kube.backend()) as sb, sb.session() as sh:
        with anyio.fail_after(60):
            assert (await sh.run("export KEEP=1")).success
        with anyio.fail_after(120):  # the time limit is the assertion, not a duration
            r = await sh.run(f"echo before; sleep 600 & echo $! > /tmp/job; {how}", timeout=60)
        assert not r.timed_out and not r.success, r
        assert r.metadata.get("shell_ended") == "true" and r.stdout == "before\n", r
        assert "exited with code 137 (SIGKILL)" in r.error and "loop" not in r.error, r
        with anyio.fail_after(60):
            again = await sh.run("echo ${KEEP:-gone}; kill -0 $(cat /tmp/job) 2>/dev/null "
                                 "&& echo job-alive; ps -o args")
        assert again.stdout.startswith("gone\n") and "job-alive" not in again.stdout, again
        assert "sleep 600" not in again.stdout and again.metadata["shell"] == "2", again


@pytest.mark.parametrize("how", ["kill -9 $$", "kill -KILL $$ & wait"])
async def test_a_killed_shell_ends_its_command_while_a_job_holds_its_output(
        how: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with cluster(tmp_path, request.config) as kube:
        await _dying_shell(kube, how)


async def test_a_killed_shell_ends_its_command_on_the_fake(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same on the fake API server, whose exec also ends only once its output ended."""
    async with cluster(tmp_path, request.config, fake_only=True) as kube:
        await _dying_shell(kube, "kill -9 $$")


async def test_the_watch_spares_a_living_shell_and_leaves_nothing(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The death watch acts only once the shell is dead: a command that times out is killed
    and the shell lives on; a job left in the background runs on (past the watch's looks)
    until the session ends; nothing of the session is left after it."""
    async with cluster(tmp_path, request.config) as kube, \
            Sandbox(backend=kube.backend()) as sb:
        async with sb.session() as sh:
            with anyio.fail_after(60):
                r = await sh.run("export KEEP=1; sleep 600", timeout=2)
            assert r.timed_out and r.metadata.get("shell_ended") is None, r
            with anyio.fail_after(60):
                await sh.run("sleep 300 >/dev/null 2>&1 & echo $! > /tmp/bg")
                r = await sh.run("sleep 3; echo $KEEP; kill -0 $(cat /tmp/bg) && echo bg-alive")
            assert r.stdout == "1\nbg-alive\n" and r.metadata["shell"] == "1", r
        with anyio.fail_after(60):
            left = await sb.execute_command("ps -o args")
        assert "sleep 300" not in left.stdout and "sandbox-session" not in left.stdout, left

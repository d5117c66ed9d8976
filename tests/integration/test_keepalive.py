"""The Docker keepalive (the container's root main process, `sandbox.docker._keepalive`) never
runs a ``sleep`` from outside the system's directories, observed in real containers.

Playing the attacker: an image with no ``sleep`` in /usr/sbin:/usr/bin:/sbin:/bin (its tools
in a prefix, as a conda or Nix image's are) whose PATH puts a directory the sandbox user owns
ahead, holding a ``sleep`` that notes who ran it. The keepalive of a new sandbox and of a
fork's child (the one that writes /etc/hosts first) must never run it: it waits in its shell
instead, still ends on SIGTERM, and the host's view of the container still counts it as the
container's own. The base is the Python image: its /bin/sh is dash, which looks ``sleep`` up
in PATH (busybox's shell runs its own applet whatever PATH says, so a busybox image cannot
be attacked this way and this test could not fail there).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import anyio
import pytest

from sandbox import IMAGE_PYTHON, Sandbox, SandboxConfig
from sandbox._hostview import Identity
from sandbox.docker._hostview import HostView
from sandbox.docker._keepalive import KEEPALIVE
from tests.conftest import derived_image, docker_cli
from tests.integration.test_create_fast import Calls
from tests.integration.test_netless import HOSTS_PUT, SHOW_HOSTS, assert_hosts, never_seen, sh

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: Who ran the planted ``sleep``, one uid a line (a directory anyone may write: root
#: without capabilities too).
RAN = "/opt/log/ran"

PLANT = (
    "RUN cp /usr/bin/sleep /opt/real-sleep && "
    "rm -f /usr/sbin/sleep /usr/bin/sleep /sbin/sleep /bin/sleep && "
    "mkdir -p /opt/userbin /opt/log && chmod 0777 /opt/log && "
    f"printf '#!/bin/sh\\nid -u >> {RAN}\\nexec /opt/real-sleep \"$@\"\\n' "
    "> /opt/userbin/sleep && chmod 0755 /opt/userbin/sleep && "
    "chown -R 1000:1000 /opt/userbin\n"
    "ENV PATH=/opt/userbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
)


@pytest.fixture(scope="module")
def planted_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Python image without a system ``sleep``, and the user's own ahead in PATH."""
    yield from derived_image(tmp_path_factory.mktemp("planted"),
                             f"sandbox-test-planted-sleep:{uuid.uuid4().hex[:8]}", PLANT,
                             base=IMAGE_PYTHON)


async def test_no_root_keepalive_runs_a_sleep_planted_in_a_user_path_directory(
        planted_image: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    never_seen(monkeypatch)
    async with Sandbox(SandboxConfig(image=planted_image, stats_interval=0)) as source:
        # The plant is what a PATH lookup finds, and it notes its caller: the user's own.
        assert "/opt/userbin/sleep" in await sh(source, "command -v sleep")
        assert (await sh(source, f"sleep 0; sleep 0.3; cat {RAN}")).split() == ["1000", "1000"]
        # The keepalive runs, root, and its child is a fork of its own shell (no program);
        # seen by a root observer (the engine's exec, not the SDK's).
        cid = source.backend.container_id  # type: ignore[attr-defined]
        shown = docker_cli("exec", "-u", "0", cid, "/bin/sh", "-c",
                           "read -r k _ < /proc/1/task/1/children; stat -c %u:%g /proc/$k; "
                           "for c in $(cat /proc/$k/task/$k/children); do "
                           "tr '\\0' ' ' < /proc/$c/cmdline; echo; done")
        assert shown.splitlines() == ["0:0", " ".join(KEEPALIVE) + " "], shown
        # The host's view counts that fork as the container's own (a pool's reset).
        view = await source.backend.host_inspector()  # type: ignore[attr-defined]
        if isinstance(view, HostView):
            user = Identity((1000,) * 4, (1000,) * 4, frozenset({1000}))
            assert await anyio.to_thread.run_sync(view.kill_all, user) == ""
        # A fork's child: its keepalive writes /etc/hosts, then waits the same way.
        calls = Calls(monkeypatch)
        children = await source.fork(1, name=f"{prefix}-planted")
        try:
            child = children[0]
            text = await sh(child, SHOW_HOSTS)
            assert_hosts(text)
            assert (await sh(child, f"sleep 0.3; cat {RAN}")).split() == ["1000"] * 3
            assert await child.backend.health() == ""  # type: ignore[attr-defined]
        finally:
            await children[0].cleanup()
    assert HOSTS_PUT not in calls.actions, calls.actions


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
async def test_the_keepalive_without_a_system_sleep_ends_on_sigterm(
        planted_image: str, runtime: str) -> None:
    # It waits (gVisor's /proc opens the pipe read-write too, or it would have exited) and
    # `docker stop` sends SIGTERM (docker-init forwards it): the shell's trap ends it with 0,
    # rather than the engine's SIGKILL (137) after the timeout.
    cid = docker_cli("run", "-d", "--runtime", runtime, "--init", "--network", "none",
                     "--user", "0:0",
                     "--entrypoint", KEEPALIVE[0], planted_image, *KEEPALIVE[1:]).strip()
    try:
        await anyio.sleep(0.5)
        state = json.loads(docker_cli("inspect", "-f", "{{json .State}}", cid))
        assert state["Running"], state
        gone = docker_cli("exec", cid, "sh", "-c", f"cat {RAN} 2>/dev/null; echo end")
        assert gone == "end\n", gone  # the plant never ran
        docker_cli("stop", "-t", "60", cid)
        state = json.loads(docker_cli("inspect", "-f", "{{json .State}}", cid))
        assert state["ExitCode"] == 0, state
    finally:
        docker_cli("rm", "-f", cid, check=False)

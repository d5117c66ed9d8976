"""A kubeconfig's exec credential plugin: run with stdin from /dev/null, and killed with all
it started when the wait for it ends early (``sandbox ps`` giving up on a place).

kubernetes_asyncio's own runner gave the plugin the terminal's stdin and left it running
when its caller gave up: a plugin waiting at a login prompt went on reading the terminal
after ``sandbox ps`` had returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.kubernetes import _gc, _ps
from sandbox.kubernetes._credential import run_credential_plugin
from sandbox.kubernetes._gateway import Cluster
from tests.kubernetes.conftest import Target

pytestmark = pytest.mark.asyncio


@pytest.fixture
def piped_stdin() -> Iterator[None]:
    """This process's fd 0 is a pipe (as a terminal would be, not /dev/null) meanwhile."""
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)


def plugin_kubeconfig(tmp_path: Path, server: str, script: str) -> Path:
    """A kubeconfig whose user's credential comes from the plugin ``script`` (sh)."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text("#!/bin/sh\n" + script)
    plugin.chmod(stat.S_IRWXU)
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "users": [{"name": "u", "user": {"exec": {
               "apiVersion": "client.authentication.k8s.io/v1beta1",
               "command": str(plugin), "args": [str(tmp_path)]}}}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


def dead(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (killed, not yet reaped by its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def left(pid: int) -> tuple[int, bytes]:
    return pid, Path(f"/proc/{pid}/cmdline").read_bytes()

async def assert_all_gone(pids: list[int]) -> None:
    """Every pid is gone within 5 s (a grandchild is reaped by its new parent meanwhile)."""
    for _ in range(100):
        if all(dead(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert all(dead(pid) for pid in pids), [left(pid) for pid in pids if not dead(pid)]



@pytest.mark.usefixtures("piped_stdin")
async def test_a_plugins_token_is_used_and_it_reads_dev_null(fake_kube: Target,
                                                             tmp_path: Path) -> None:
    assert fake_kube.fake is not None
    token = fake_kube.fake.token
    kubeconfig = plugin_kubeconfig(tmp_path, fake_kube.fake.url, f"""
readlink /proc/self/fd/0 > "$1/stdin"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$1/info"
echo '{{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
       "status": {{"token": "{token}"}}}}'
""")
    cluster = await Cluster.connect(kubeconfig=str(kubeconfig), context=None, in_cluster=False)
    try:
        found = await cluster.call("list", "GET", "/api/v1/namespaces/sandboxes/pods")
    finally:
        await cluster.close()
    assert found.get("kind") == "PodList"  # the plugin's token was accepted
    assert (tmp_path / "stdin").read_text().strip() == "/dev/null"
    assert json.loads((tmp_path / "info").read_text())["spec"] == {"interactive": False}


@pytest.mark.usefixtures("piped_stdin")
async def test_a_plugin_that_never_answers_is_killed_when_ps_gives_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = plugin_kubeconfig(tmp_path, "http://127.0.0.1:9", """
echo $$ > "$1/pid"
sleep 300 &
echo $! > "$1/child"
wait
""")
    for module in (_gc, _ps):
        monkeypatch.setattr(module, "PLACE_DEADLINE", 1.0)
    started = time.monotonic()
    try:
        assert await _ps._pods_in({"kubeconfig": str(kubeconfig)}, "default") == []
        assert time.monotonic() - started < 10
        pids = [int((tmp_path / name).read_text()) for name in ("pid", "child")]
        await assert_all_gone(pids)
    finally:  # leave nothing running, whatever failed
        for name in ("pid", "child"):
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)


def written_pid(path: Path) -> int | None:
    """The pid the plugin wrote to ``path``, once its line is whole."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.endswith("\n") else None


async def test_a_plugin_is_killed_when_the_wait_ends_while_asyncio_still_starts_it(
        tmp_path: Path) -> None:
    """The cancellation comes after the plugin runs (it has started a child) and before
    asyncio hands its handle over (it is still connecting the pipes): asyncio then killed the
    plugin alone, and its child ran on (the SDK never had the handle to kill the group)."""
    plugin = tmp_path / "plugin.sh"
    plugin.write_text('#!/bin/sh\necho $$ > "$1/pid"\nsleep 300 &\necho $! > "$1/child"\nwait\n')
    plugin.chmod(stat.S_IRWXU)
    loop = asyncio.get_running_loop()
    real_connect = loop.connect_read_pipe
    inside, cancelled = asyncio.Event(), asyncio.Event()

    async def slow_connect(*args: Any, **kwargs: Any) -> Any:
        if not inside.is_set():  # the plugin's stdout: hold the start until it was given up
            for _ in range(1000):  # up to 10 s: the plugin has started its child
                if written_pid(tmp_path / "child") is not None:
                    break
                await asyncio.sleep(0.01)
            inside.set()
            await cancelled.wait()
        return await real_connect(*args, **kwargs)

    loop.connect_read_pipe = slow_connect  # type: ignore[method-assign]
    try:
        waiting = asyncio.ensure_future(run_credential_plugin(
            [str(plugin), str(tmp_path)], dict(os.environ), "client.authentication.k8s.io/v1"))
        async with asyncio.timeout(10):
            await inside.wait()
        waiting.cancel()
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        pids = [written_pid(tmp_path / name) or 0 for name in ("pid", "child")]
        await assert_all_gone(pids)
    finally:  # leave nothing running, whatever failed
        del loop.connect_read_pipe
        for name in ("pid", "child"):
            with contextlib.suppress(TypeError, ProcessLookupError):
                os.kill(written_pid(tmp_path / name), signal.SIGKILL)  # type: ignore[arg-type]

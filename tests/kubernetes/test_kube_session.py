"""Sessions and terminals over the Kubernetes backend: the session is backend-neutral (one
long-lived process through ``open_process``); a terminal is refused until the backend has
one."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from sandbox import ConfigError, Sandbox
from tests.kubernetes._cluster import cluster

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

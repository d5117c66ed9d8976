from __future__ import annotations

import pytest

from sandbox import Sandbox
from tests.kubernetes._cluster import Target

pytestmark = pytest.mark.asyncio


async def test_smoke(kube: Target) -> None:
    async with Sandbox(backend=kube.backend()) as sb:
        r = await sb.execute_command("echo hi; echo err >&2; id; pwd; exit 3")
        print(r, r.stdout, r.stderr)
        assert r.exit_code == 3

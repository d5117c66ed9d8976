"""`sandbox.testing.CHECKS`, the behaviour suite, on every backend: one test per backend and
check (ids like ``docker-exec_stdin``); the findings are conftest's KNOWN_FAILURES."""

from __future__ import annotations

import pytest

from sandbox.testing import CHECKS, Check, CheckSkipped, Harness
from tests.contract.conftest import broken_until_merged

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("engine")]


@pytest.mark.parametrize("check", CHECKS, ids=str)
async def test_backend_keeps_the_contract(harness: Harness, check: Check) -> None:
    try:
        await harness.run(check)
    except CheckSkipped as exc:
        pytest.skip(str(exc))
    except Exception as exc:
        why = broken_until_merged(harness.subject.name, exc)
        if why:
            pytest.xfail(why)
        raise

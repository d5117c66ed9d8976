"""Fixtures of the Kubernetes backend's tests: a cluster per test (the fake by default)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.kubernetes._cluster import Target, cluster


@pytest_asyncio.fixture
async def kube(tmp_path: Path, pytestconfig: pytest.Config) -> AsyncIterator[Target]:
    async with cluster(tmp_path, pytestconfig) as target:
        yield target

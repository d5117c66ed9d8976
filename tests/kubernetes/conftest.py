"""Fixtures of the Kubernetes backend's tests: ``kube`` is the real local cluster when it runs
(``make kube``), else the fake API server; ``fake_kube`` is always the fake."""

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


@pytest_asyncio.fixture
async def fake_kube(tmp_path: Path, pytestconfig: pytest.Config) -> AsyncIterator[Target]:
    """The fake API server, for what a real cluster cannot be made to do here (v5 exec, API
    errors and timeouts, fault injection)."""
    async with cluster(tmp_path, pytestconfig, fake_only=True) as target:
        yield target

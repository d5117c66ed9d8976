"""`sandbox.testing.check_backend` as a third party calls it: one call runs every check and
reports which failed; a backend that breaks the contract is caught, by name."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from sandbox import (
    CheckpointFailed,
    ConfigError,
    SandboxConfig,
)
from sandbox.testing import (
    CHECKS,
    ContractFailed,
    FakeBackend,
    FakeSandbox,
    check_backend,
)
from tests.contract.conftest import KNOWN_FAILURES

pytestmark = pytest.mark.asyncio

FAKE = SandboxConfig(type="fake")


async def test_one_call_reports_every_check() -> None:
    report = await check_backend(FakeSandbox, config=FAKE, supports=(), name="fake",
                                 refusal_name="fake", raise_on_failure=False)
    assert [o.check for o in report.outcomes] == [c.name for c in CHECKS]
    assert {o.check for o in report.of("failed")} == \
        {check for backend, check in KNOWN_FAILURES if backend == "fake"}
    assert report.of("passed") and report.of("skipped")
    with pytest.raises(ContractFailed, match="FAILED files_round_trip_and_list") as info:
        await check_backend(_LossySandbox, config=FAKE, supports=(), refusal_name="fake",
                            only=["pool_reuse_resets", "files_round_trip_and_list"])
    assert [o.status for o in info.value.report.outcomes] == ["failed", "passed"]


class _NoCheckpointBackend(FakeBackend):
    """The bug of issue 27 in a backend's own code: it claims checkpoints (`Sandbox` then asks
    it), but answers with an AttributeError instead of a typed refusal."""

    async def checkpoint(self, image: str, labels: Mapping[str, str], *,
                         memory: bool = False) -> str:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute '_store'")


class _NoCheckpointSandbox(FakeSandbox):
    def __init__(self, config: SandboxConfig | None = None) -> None:
        super().__init__(config)
        self._fake = self._impl = _NoCheckpointBackend(config, respond=self._answer)


class _LossySandbox(FakeSandbox):
    """Drops the last byte of every file read: the files checks must notice."""

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return (await super().read_file(path, max_bytes=max_bytes))[:-1]


async def test_a_backend_that_breaks_the_contract_fails_the_named_checks() -> None:
    report = await check_backend(_NoCheckpointSandbox, config=FAKE, supports=(),
                                 refusal_name="fake", raise_on_failure=False,
                                 only=["checkpoint_or_typed_refusal"])
    (outcome,) = report.outcomes
    assert outcome.status == "failed" and "AttributeError" in outcome.detail
    report = await check_backend(_LossySandbox, config=FAKE, supports=(), refusal_name="fake",
                                 raise_on_failure=False)
    failed = {o.check for o in report.of("failed")}
    assert {"files_round_trip_and_list", "files_large_and_partial", "files_odd_names"} <= failed


async def test_a_refusal_must_name_the_backend() -> None:
    """A typed refusal that does not say which backend refused is a failure."""
    report = await check_backend(FakeSandbox, config=FAKE, supports=(), refusal_name="acme",
                                 raise_on_failure=False, only=["checkpoint_or_typed_refusal"])
    assert "does not name the backend 'acme'" in report.outcomes[0].detail
    async with FakeSandbox(FAKE) as sb:
        with pytest.raises(CheckpointFailed, match="fake"):
            await sb.checkpoint("x")


async def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown capabilities"):
        await check_backend(FakeSandbox, config=FAKE, supports=("teleport",))
    with pytest.raises(ConfigError, match="no checks named"):
        await check_backend(FakeSandbox, config=FAKE, only=["nope"])

"""Inspect AI's own provider checks (``inspect_ai.util._sandbox.self_check``) on our provider.

Every check runs against the real engine, once per config below, each config sharing one
sandbox across its checks (as Inspect's own runner does). A check fails here only where the
sandbox's documented policy is the reason; each such expected failure is strict (it must
fail) and listed in docs/guides/agents.md with the same reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import inspect_ai.util._sandbox.self_check as self_check
import pytest
import pytest_asyncio
from inspect_ai.util import SandboxEnvironment, SandboxUserUnsupportedError
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

import sandbox.integrations.inspect as inspect_provider
from sandbox import ConfigError, GcItem, GcReport, SandboxConfig, SecurityPolicy, to_json
from sandbox.integrations.inspect import NAME, SandboxDockerEnvironment, load_config
from tests.conftest import sandbox_containers

pytestmark = pytest.mark.usefixtures("engine")

# Inspect's checks, collected as this module's tests, in the loop of the shared sandboxes.
for _check in self_check.__all__:
    globals()[_check] = pytest.mark.asyncio(loop_scope="module")(getattr(self_check, _check))

#: The checks our policy makes fail, by config, each with its reason (also in the docs:
#: docs/guides/agents.md).
ROOT_REFUSED = ("the sandbox user is not root and a per-command user may only narrow it: "
                "user='root' raises SandboxUserUnsupportedError")
NO_CAPABILITIES = ("every capability is dropped, root's too (adding one is an audited opt-in): "
                   "adduser as root cannot chown and chmod the new user's home")
CONFIGS: dict[str, tuple[SandboxConfig, dict[str, str]]] = {
    # The default: a non-root user, so Inspect's permission checks hold.
    "default": (SandboxConfig(), {"test_exec_as_user": ROOT_REFUSED}),
    # The audited root opt-in, so Inspect's user switching (adduser as root) is possible.
    # The audited root opt-in: root, but without capabilities, so it too must respect file
    # permissions (CAP_DAC_OVERRIDE is dropped), which Inspect's permission checks prove.
    "root": (SandboxConfig(security=SecurityPolicy(run_as_user="root")),
             {"test_exec_as_user": NO_CAPABILITIES}),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=sorted(CONFIGS))
async def _provider_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                        ) -> AsyncIterator[tuple[str, SandboxEnvironment]]:
    """One sandbox per config, created and removed through the provider's own lifecycle."""
    name: str = request.param
    config_file = tmp_path_factory.mktemp(name) / "sandbox.json"
    config_file.write_text(to_json(CONFIGS[name][0]))
    spec = str(config_file)
    await SandboxDockerEnvironment.task_init("self-check", spec)
    envs = await SandboxDockerEnvironment.sample_init("self-check", spec, {})
    try:
        yield name, envs["default"]
    finally:
        await SandboxDockerEnvironment.sample_cleanup("self-check", spec, envs, False)
        await SandboxDockerEnvironment.task_cleanup("self-check", spec, True)


@pytest.fixture
def sandbox_env(request: pytest.FixtureRequest,
                _provider_env: tuple[str, SandboxEnvironment]) -> SandboxEnvironment:
    """What Inspect's checks take; marks the checks our policy makes fail for this config."""
    name, env = _provider_env
    reason = CONFIGS[name][1].get(request.node.originalname)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return env


def test_every_expected_failure_names_a_real_check() -> None:
    for _, xfails in CONFIGS.values():
        assert set(xfails) <= set(self_check.__all__)


def test_the_readme_lists_every_expected_failure() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "agents.md").read_text()
    for _, xfails in CONFIGS.values():
        for check in xfails:
            assert f"`{check}`" in readme, check


def test_registered_under_its_name_through_the_entry_point() -> None:
    assert registry_find_sandboxenv(NAME) is SandboxDockerEnvironment


@pytest.mark.asyncio(loop_scope="module")
async def test_a_command_runs_as_a_user_the_image_defines(sandbox_env: SandboxEnvironment
                                                          ) -> None:
    # What test_exec_as_user checks after its adduser, with the image's own user.
    assert (await sandbox_env.exec(["whoami"], user="sandbox")).stdout == "sandbox\n"


@pytest.mark.asyncio(loop_scope="module")
async def test_root_for_one_command_is_refused_as_unsupported() -> None:
    envs = await SandboxDockerEnvironment.sample_init("t", None, {})
    env = envs["default"]
    try:
        with pytest.raises(SandboxUserUnsupportedError):
            await env.exec(["id", "-u"], user="root")
        assert (await env.exec(["id", "-u"])).stdout == "1000\n"
    finally:
        await SandboxDockerEnvironment.sample_cleanup("t", None, envs, False)
    assert isinstance(env, SandboxDockerEnvironment)
    assert sandbox_containers(env.sandbox.id) == []


@pytest.mark.asyncio(loop_scope="module")
async def test_task_cleanup_removes_what_an_interrupted_sample_left() -> None:
    envs = await SandboxDockerEnvironment.sample_init("t", None, {})
    env = envs["default"]
    assert isinstance(env, SandboxDockerEnvironment)
    assert sandbox_containers(env.sandbox.id)
    # No sample_cleanup: the run was interrupted.
    await SandboxDockerEnvironment.task_cleanup("t", None, True)
    assert sandbox_containers(env.sandbox.id) == []


@pytest.mark.asyncio(loop_scope="module")
async def test_cli_cleanup_runs_gc(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    gone = GcItem(kind="container", id="c1", name="sandbox-c1", reason="its owner has exited")
    calls: list[bool] = []

    async def fake_gc() -> GcReport:
        calls.append(True)
        return GcReport(removed=(gone,))

    monkeypatch.setattr(inspect_provider, "gc", fake_gc)
    await SandboxDockerEnvironment.cli_cleanup(None)
    assert calls == [True]
    out = capsys.readouterr().out
    assert "removed container sandbox-c1: its owner has exited" in out
    assert "sandbox-docker: removed 1, kept 0" in out


def test_a_bad_config_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"image": 7}))
    with pytest.raises(ConfigError, match=r"bad\.json"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match=r"missing\.json"):
        load_config(str(tmp_path / "missing.json"))

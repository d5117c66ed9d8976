"""pytest plugin: sandboxes as fixtures, and a check that a session leaves none behind.

Loaded by pytest through the ``pytest11`` entry point once ``sandbox`` is installed; the
fixtures are async and need pytest-asyncio (``pip install 'sandbox[pytest]'``).

Fixtures:
    sandbox: A started `Sandbox` for one test, removed after it.
    sandbox_session: One `Sandbox` shared by the whole session. Tests using it must run in
        the session's event loop: ``@pytest.mark.asyncio(loop_scope="session")``.
    fake_sandbox: A started, scriptable `sandbox.testing.FakeSandbox` (no engine).
    sandbox_config: The `SandboxConfig` the ``sandbox`` and ``fake_sandbox`` fixtures use;
        override it to build your own.

Configuration, the marker winning over the ini options (``[tool.pytest.ini_options]``)::

    sandbox_image = "sandbox-busybox:latest"
    sandbox_runtime = "runsc"
    sandbox_memory_limit = "536870912"   # bytes
    sandbox_cpu_limit = "1.5"            # cores
    sandbox_network = true               # a networked sandbox (isolated by default)

    @pytest.mark.sandbox(image="sandbox-busybox:latest", memory_limit=256 << 20)
    @pytest.mark.sandbox(config=SandboxConfig(...))   # a whole config, then the keywords

Leak check: when the session has created sandboxes, it fails (an error at the last test's
teardown) if any container, network or volume this process created during the session is
still there, and removes them. ``sandbox_leak_check = false`` turns it off.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from .._errors import ConfigError, EngineUnavailable
from .._models import ResourceLimits, SandboxConfig
from .._sandbox import Sandbox

__all__ = ["build_config"]

#: What the ``sandbox`` marker and the ini options may set.
_KEYS = ("image", "runtime", "memory_limit", "cpu_limit", "network")
#: The package a Docker sandbox's creation imports: no sandbox was made while it is not loaded.
_DOCKER_MODULE = "sandbox.docker"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("sandbox_image", "image of the sandbox fixtures' sandboxes", default="")
    parser.addini("sandbox_runtime", "OCI runtime of the sandbox fixtures, e.g. runsc",
                  default="")
    parser.addini("sandbox_memory_limit", "memory limit of the sandbox fixtures, in bytes",
                  default="")
    parser.addini("sandbox_cpu_limit", "CPU limit of the sandbox fixtures, in cores",
                  default="")
    parser.addini("sandbox_network", "give the sandbox fixtures a network", type="bool",
                  default=False)
    parser.addini("sandbox_leak_check", "fail the session if it left sandboxes behind",
                  type="bool", default=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sandbox(config=None, *, image, runtime, memory_limit, cpu_limit, network): "
                   "configure the test's sandbox fixture (see sandbox.integrations."
                   "pytest_plugin)")


def _number(name: str, value: object, kind: Callable[[Any], Any]) -> Any:
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"sandbox {name} must be a number, got {value!r}",
                              details=f"set sandbox_{name} (ini) or "
                                      f"@pytest.mark.sandbox({name}=...)") from None
    return value


def build_config(ini: Mapping[str, Any], marker: Mapping[str, Any] | None = None,
                 base: SandboxConfig | None = None) -> SandboxConfig:
    """The fixtures' `SandboxConfig`: ``base`` (default `SandboxConfig()`), then the ini
    options, then the marker's keywords; empty ini values leave the config as it is.

    Raises:
        ConfigError: An unknown marker keyword, or a value of the wrong kind.
    """
    marker = dict(marker or {})
    unknown = set(marker) - {*_KEYS, "config"}
    if unknown:
        raise ConfigError(f"@pytest.mark.sandbox got unknown keywords {sorted(unknown)}",
                          details=f"it takes config= and {', '.join(_KEYS)}")
    config = marker.pop("config", None) or base or SandboxConfig()
    if not isinstance(config, SandboxConfig):
        raise ConfigError(f"@pytest.mark.sandbox(config=...) must be a SandboxConfig, got "
                          f"{type(config).__name__}")
    settings = {k: v for k, v in ini.items() if v not in ("", None)}
    settings.update(marker)
    if settings.get("image"):
        config = attrs.evolve(config, image=settings["image"])
    if settings.get("runtime"):
        config = attrs.evolve(config, runtime=settings["runtime"])
    resources: ResourceLimits = config.resources
    if "memory_limit" in settings:
        resources = attrs.evolve(resources, memory_limit=_number(
            "memory_limit", settings["memory_limit"], int))
    if "cpu_limit" in settings:
        resources = attrs.evolve(resources, cpu_limit=_number(
            "cpu_limit", settings["cpu_limit"], float))
    config = attrs.evolve(config, resources=resources)
    if settings.get("network") is True:
        config = attrs.evolve(
            config, network=attrs.evolve(config.network, isolated=False),
            security=attrs.evolve(config.security, allow_networking=True,
                                  isolate_network=False))
    return config


def _ini(config: pytest.Config) -> dict[str, Any]:
    return {key: config.getini(f"sandbox_{key}") for key in _KEYS}


@pytest.fixture
def sandbox_config(request: pytest.FixtureRequest) -> SandboxConfig:
    """The config of this test's ``sandbox`` (and ``fake_sandbox``): ini, then marker."""
    marker = request.node.get_closest_marker("sandbox")
    if marker is not None and marker.args:
        raise ConfigError("@pytest.mark.sandbox takes keywords only, e.g. "
                          "@pytest.mark.sandbox(image='sandbox-busybox:latest')")
    return build_config(_ini(request.config), marker.kwargs if marker else None)


try:
    import pytest_asyncio as _pytest_asyncio
except ImportError:  # the fixtures say what is missing when used
    _pytest_asyncio = None  # type: ignore[assignment]


def _async_fixture(**kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    if _pytest_asyncio is not None:
        return _pytest_asyncio.fixture(**kwargs)

    def missing(fn: Callable[..., Any]) -> Any:
        def fail(request: pytest.FixtureRequest) -> None:
            pytest.fail(f"the {fn.__name__!r} fixture needs pytest-asyncio: "
                        "pip install 'sandbox[pytest]'", pytrace=False)
        fail.__name__ = fn.__name__
        fail.__doc__ = fn.__doc__
        return pytest.fixture(scope=kwargs.get("scope", "function"), name=fn.__name__)(fail)
    return missing


@_async_fixture()
async def sandbox(sandbox_config: SandboxConfig) -> AsyncIterator[Sandbox]:
    """A started sandbox for this test, removed after it (configure with the ``sandbox``
    marker or the ``sandbox_*`` ini options)."""
    async with Sandbox(sandbox_config) as sb:
        yield sb


@_async_fixture(scope="session", loop_scope="session")
async def sandbox_session(pytestconfig: pytest.Config) -> AsyncIterator[Sandbox]:
    """One sandbox for the whole session (ini options only; markers are per test). Use it
    from tests in the session loop: ``@pytest.mark.asyncio(loop_scope="session")``."""
    async with Sandbox(build_config(_ini(pytestconfig))) as sb:
        yield sb


@_async_fixture()
async def fake_sandbox(sandbox_config: SandboxConfig) -> AsyncIterator[Any]:
    """A started `sandbox.testing.FakeSandbox` with this test's config: script it with
    ``on_command`` and ``fail_next``; nothing runs."""
    from ..testing import FakeSandbox

    async with FakeSandbox(sandbox_config) as fake:
        yield fake


@pytest.fixture(scope="session", autouse=True)
def _sandbox_leak_check(pytestconfig: pytest.Config) -> Iterator[None]:
    """Fail the session (at its last teardown) if it left sandboxes of this process behind.

    Autouse and first, so it ends after every other session fixture; it asks the engine only
    if a sandbox may have been created (the Docker backend was loaded).
    """
    started = datetime.now(UTC)
    yield
    if not pytestconfig.getini("sandbox_leak_check") or _DOCKER_MODULE not in sys.modules:
        return
    from ..docker._leaks import leftovers

    try:
        left = asyncio.run(leftovers(since=started, remove=True))
    except EngineUnavailable as exc:
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"sandbox leak check skipped: {exc}")
        return
    if left:
        lines = "\n".join(f"  {item.kind} {item.name or item.id[:12]}: {item.reason}"
                          for item in left)
        pytest.fail(f"this session left {len(left)} sandbox resources behind:\n{lines}\n"
                    "use `async with Sandbox(...)` (or the sandbox fixture), or await "
                    "cleanup()", pytrace=False)

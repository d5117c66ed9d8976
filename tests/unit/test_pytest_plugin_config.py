"""How the pytest plugin builds the fixtures' SandboxConfig from ini options and the marker."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from sandbox import ConfigError, ResourceLimits, SandboxConfig
from sandbox.integrations.pytest_plugin import build_config

NO_INI = {"image": "", "runtime": "", "memory_limit": "", "cpu_limit": "", "network": False}


def test_nothing_set_is_the_default_config() -> None:
    assert build_config(NO_INI) == SandboxConfig()


def test_the_marker_wins_over_the_ini() -> None:
    ini = {**NO_INI, "image": "a:1", "runtime": "runsc", "memory_limit": "1000",
           "cpu_limit": "1.5"}
    config = build_config(ini, {"image": "b:2", "memory_limit": 2000})
    assert (config.image, config.runtime) == ("b:2", "runsc")
    assert (config.resources.memory_limit, config.resources.cpu_limit) == (2000, 1.5)


def test_a_whole_config_then_keywords() -> None:
    base = SandboxConfig(image="c:3", resources=ResourceLimits(process_limit=7))
    config = build_config(NO_INI, {"config": base, "cpu_limit": 0.5})
    assert (config.image, config.resources.process_limit, config.resources.cpu_limit) == \
        ("c:3", 7, 0.5)


def test_network_opens_the_sandbox() -> None:
    config = build_config({**NO_INI, "network": True})
    assert not config.network.isolated
    assert config.security.allow_networking and not config.security.isolate_network
    assert build_config(NO_INI).network.isolated


@pytest.mark.parametrize(("marker", "match"), [
    ({"imgae": "x"}, r"unknown keywords \['imgae'\]"),
    ({"config": {"image": "x"}}, "must be a SandboxConfig, got dict"),
    ({"memory_limit": "lots"}, "memory_limit must be a number, got 'lots'"),
])
def test_bad_settings_are_named(marker: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_config(NO_INI, marker)


def test_registered_as_a_pytest_plugin() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert eps.get("sandbox") == "sandbox.integrations.pytest_plugin"

"""Command policy and sandbox paths, decided without an engine."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sandbox import (
    Command,
    ConfigError,
    FileOperationFailed,
    NetworkAccessDenied,
    NetworkConfig,
    SandboxConfig,
    SecurityPolicy,
    SecurityViolation,
)
from sandbox._audit import Auditor
from sandbox._backend import ProcessSpec
from sandbox._paths import parse_copy, resolve
from sandbox._policy import merge_environment, plan_process

CFG = SandboxConfig(timeout=timedelta(seconds=30))


def plan(command: Command, *, config: SandboxConfig = CFG, user: str = "1000:1000",
         cwd: str = "/workspace") -> ProcessSpec:
    return plan_process(command, config=config, user=user, cwd=cwd, env={"A": "1", "B": "2"},
                        audit=Auditor("t", config.security))


def test_a_plain_command_inherits_the_sandbox() -> None:
    spec = plan(Command.shell("echo hi"))
    assert spec == ProcessSpec(argv=("/bin/sh", "-c", "echo hi"), env={"A": "1", "B": "2"},
                               workdir="/workspace", user="1000:1000", time_limit=30.0,
                               max_output_bytes=spec.max_output_bytes)


def test_per_command_settings_narrow() -> None:
    spec = plan(Command(executable="ls", working_dir="../tmp", environment={"B": "3"},
                        timeout=timedelta(seconds=2), idle_timeout=timedelta(seconds=1),
                        stdin_content="in", user="1234"))
    assert (spec.workdir, spec.env, spec.time_limit, spec.idle_timeout, spec.stdin,
            spec.user) == ("/tmp", {"A": "1", "B": "3"}, 2.0, 1.0, b"in", "1234:1234")
    assert plan(Command(executable="ls", allow_write=False)).user == "65534:65534"
    assert plan(Command(executable="ls", stdin="text")).stdin == b"text"


@pytest.mark.parametrize("asked", ["root", "0", "0:0", "1000:0", "1000:root"])
def test_a_command_cannot_widen_to_root(asked: str) -> None:
    with pytest.raises(SecurityViolation, match="would run as root"):
        plan(Command(executable="id", user=asked))
    assert plan(Command(executable="id", user=asked), user="0:0").user.startswith(asked)


def test_network_and_restrict_paths_are_refused() -> None:
    with pytest.raises(NetworkAccessDenied, match="isolated"):
        plan(Command(executable="wget", allow_network=True))
    open_cfg = SandboxConfig(network=NetworkConfig(isolated=False),
                             security=SecurityPolicy(allow_networking=True,
                                                     isolate_network=False))
    assert plan(Command(executable="wget", allow_network=True), config=open_cfg).argv == \
        ("wget",)
    with pytest.raises(SecurityViolation, match="restrict_paths"):
        plan(Command(executable="ls", restrict_paths=("/x",)))


def test_merge_environment_sets_and_removes() -> None:
    assert merge_environment({"A": "1", "B": "2"}, {"A": None, "C": "3", "Z": None}) == \
        {"B": "2", "C": "3"}
    with pytest.raises(ConfigError):
        merge_environment({}, {"A=B": "x"})
    with pytest.raises(ConfigError, match="must be a string"):
        merge_environment({}, {"A": 1})  # type: ignore[dict-item]


def test_paths_and_copy_arguments() -> None:
    assert resolve("/w", "a/../b") == "/w/b" and resolve("/w", "/x//y") == "/x/y"
    assert resolve("/w", "../../..") == "/"
    for bad in ("", "a\0b"):
        with pytest.raises(FileOperationFailed):
            resolve("/w", bad)
    into = parse_copy("/w", "./src", "sandbox:dst")
    assert (into.into_sandbox, into.sandbox_path, into.host_path) == (True, "/w/dst", "./src")
    out = parse_copy("/w", "sandbox:/etc/x", "/tmp/y")
    assert (out.into_sandbox, out.sandbox_path, out.host_path) == (False, "/etc/x", "/tmp/y")
    for source, dest in (("/a", "/b"), ("sandbox:/a", "sandbox:/b")):
        with pytest.raises(FileOperationFailed, match="exactly one side"):
            parse_copy("/w", source, dest)

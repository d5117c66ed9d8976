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
from sandbox._ids import Identity
from sandbox._paths import parse_copy, resolve
from sandbox._policy import merge_environment, plan_argv, plan_process

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
                        stdin_content="in", user="1000"))
    assert (spec.workdir, spec.env, spec.time_limit, spec.idle_timeout, spec.stdin,
            spec.user) == ("/tmp", {"A": "1", "B": "3"}, 2.0, 1.0, b"in", "1000:1000")
    assert plan(Command(executable="ls", allow_write=False)).user == "65534:65534"
    assert plan(Command(executable="ls", stdin="text")).stdin == b"text"


@pytest.mark.parametrize("asked", ["root", "0", "0:0", "1000:0", "1000:root", "00", "+0",
                                   "-0", "000:000", "00:1000", "0:0:x", ":1000", ":",
                                   "1000:-0", "root:1000", "1000:+00"])
def test_a_command_cannot_widen_to_root(asked: str) -> None:
    with pytest.raises(SecurityViolation, match=r"\(root\)"):
        plan(Command(executable="id", user=asked))
    assert plan(Command(executable="id", user=asked), user="0:0").user.startswith(asked)


@pytest.mark.parametrize("asked", ["1000:42", "1000:shadow", "1234", "33:1000", "sandbox",
                                   "1000:sandbox", "1000:1001", "65534:42", "www-data",
                                   "-1", "4294967296"])
def test_a_command_cannot_take_another_uid_or_group(asked: str) -> None:
    auditor = Auditor("t", SecurityPolicy(log_security_events=True))
    with pytest.raises(SecurityViolation, match="only the sandbox's own ids"):
        plan_process(Command(executable="id", user=asked), config=CFG, user="1000:1000",
                     cwd="/", env={}, audit=auditor)


@pytest.mark.parametrize(("asked", "runs_as"), [
    ("1000", "sandbox"), ("01000", "sandbox"), ("+1000:100", "sandbox"),
    ("1000:65534", "1000:65534"), ("nobody", "65534:65534"), ("65534", "65534:65534"),
    ("nobody:nogroup", "65534:65534"), ("sandbox", "sandbox"), ("sandbox:users", "sandbox"),
    ("1000:users", "sandbox"), ("65534:users", "65534:100"),
])
def test_own_ids_and_nobody_are_allowed_as_numbers(asked: str, runs_as: str) -> None:
    own = Identity(1000, 100, "sandbox", "users")
    spec = plan_process(Command(executable="id", user=asked), config=CFG, user="sandbox",
                        cwd="/", env={}, audit=Auditor("t", CFG.security), identity=own)
    assert spec.user == runs_as


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


@pytest.mark.parametrize("config", [CFG, SandboxConfig()])
@pytest.mark.parametrize("argv", [["true"], ("ls", "-l", "/"), ["echo", "", "é"]])
def test_a_plain_argv_plans_as_its_command_would(argv: list[str] | tuple[str, ...],
                                                 config: SandboxConfig) -> None:
    env = {"A": "1"}
    spec = plan_argv(argv, config=config, user="1000:1000", cwd="/workspace", env=env)
    assert spec == plan_process(Command.argv(argv), config=config, user="1000:1000",
                                cwd="/workspace", env=env, audit=Auditor("t", config.security))
    assert spec is not None and spec.env is not env  # a copy: the sandbox's may change


@pytest.mark.parametrize("argv", [
    "true", b"true", [], [""], ["true", 1], ["tr\0ue"], ["true", "a\0"], iter(["true"]),
    Command(executable="true"), ["true", None],
])
def test_anything_but_a_plain_argv_takes_the_full_path(argv: object) -> None:
    """The full path's checks and messages then apply (`Command.argv`, `to_command`)."""
    assert plan_argv(argv, config=CFG, user="", cwd="/", env={}) is None


class _Argv(list[str]):
    pass


def test_a_list_subclass_takes_the_full_path() -> None:
    assert plan_argv(_Argv(["true"]), config=CFG, user="", cwd="/", env={}) is None

"""`RootEnv`: which image variables the create hides from root, and each exec's environment."""

from __future__ import annotations

from typing import Any

from sandbox._backend import ProcessSpec
from sandbox._constants import ROOT_PATH
from sandbox.docker._root_env import RootEnv, hidden_from_root

IMAGE_ENV = ["PATH=/opt/conda/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/conda/lib",
             "LD_PRELOAD=/home/user/x.so", "BASH_ENV=/home/user/.rc", "ENV=/home/user/.shrc",
             "GCONV_PATH=/home/user/g", "LANG=C.UTF-8", "LD_AUDIT=", "TMPDIR=/home/user/t",
             "HTTP_PROXY=image"]


def test_the_create_sets_the_images_loader_and_shell_variables_empty() -> None:
    body: dict[str, Any] = {"Env": ["HTTP_PROXY=config"]}
    env = RootEnv.hide(body, IMAGE_ENV, sandbox_user="1000:1000")
    assert env.image == {"LD_LIBRARY_PATH": "/opt/conda/lib", "LD_PRELOAD": "/home/user/x.so",
                         "BASH_ENV": "/home/user/.rc", "ENV": "/home/user/.shrc",
                         "GCONV_PATH": "/home/user/g", "TMPDIR": "/home/user/t"}
    assert body["Env"] == ["HTTP_PROXY=config", *(f"{k}=" for k in env.image)]
    # The commit puts the image's values back (a sandbox from it hides them again).
    assert env.committed() == [f"{k}={v}" for k, v in env.image.items()]


def test_nothing_to_hide_leaves_the_body_and_specs_alone() -> None:
    body: dict[str, Any] = {"Env": []}
    env = RootEnv.hide(body, ["PATH=/usr/bin", "LANG=C"], sandbox_user="1000:1000")
    assert body == {"Env": []} and env.committed() == []
    spec = ProcessSpec(argv=("true",), env={"A": "1"}, user="1000:1000")
    assert env.spec(spec) is spec


def test_the_sandbox_users_execs_get_the_images_values_beneath_their_own() -> None:
    env = RootEnv.hide({}, IMAGE_ENV, sandbox_user="1000:1000")
    for user in ("1000:1000", "65534:65534", "sandbox"):
        got = env.spec(ProcessSpec(argv=("true",), env={"LD_PRELOAD": "mine"}, user=user)).env
        assert got == {**env.image, "LD_PRELOAD": "mine"}
    # "" is the sandbox's default user, as on the other backends (the container's is root).
    default = env.spec(ProcessSpec(argv=("true",), env={"LD_PRELOAD": "mine"}))
    assert (default.user, default.env) == ("1000:1000", {**env.image, "LD_PRELOAD": "mine"})


def test_the_sdks_root_execs_get_the_system_path_and_the_variables_empty() -> None:
    env = RootEnv.hide({}, IMAGE_ENV, sandbox_user="1000:1000")
    for user in ("0:0", "0", "root", "root:root", "+00:1000"):
        got = env.spec(ProcessSpec(argv=("sh",), env={"PATH": "/x", "K": "v"}, user=user)).env
        assert got == {"K": "v", **dict.fromkeys(env.image, ""), "PATH": ROOT_PATH}, user
    # Where the sandbox user is root (an opt-in), every exec is the user's: the image's values.
    mine = RootEnv.hide({}, IMAGE_ENV, sandbox_user="root")
    assert mine.spec(ProcessSpec(argv=("sh",), user="0:0")).env == mine.image


def test_hidden_names() -> None:
    for name in ("LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT", "LD_DEBUG_OUTPUT", "BASH_ENV",
                 "ENV", "CDPATH", "GCONV_PATH", "GLIBC_TUNABLES", "SHELLOPTS",
                 "BASH_FUNC_sleep%%", "BASH_FUNC_[%%"):
        assert hidden_from_root(name), name
    for name in ("PATH", "HOME", "LANG", "PYTHONPATH", "LDFLAGS", "ENVIRONMENT"):
        assert not hidden_from_root(name), name


def test_the_images_exported_functions_are_empty_for_root_and_kept_for_the_user() -> None:
    # A root script run by bash-as-sh would import ``sleep`` (or ``[``) over the command.
    body: dict[str, Any] = {"Env": []}
    env = RootEnv.hide(body, ["BASH_FUNC_sleep%%=() { id; }"], sandbox_user="1000:1000")
    assert body["Env"] == ["BASH_FUNC_sleep%%="]
    assert env.spec(ProcessSpec(argv=("sh",), user="0:0")).env["BASH_FUNC_sleep%%"] == ""
    assert env.spec(ProcessSpec(argv=("sh",))).env["BASH_FUNC_sleep%%"] == "() { id; }"


def test_a_session_shell_starts_without_the_loader_variables_its_commands_get_back() -> None:
    env = RootEnv.hide({}, IMAGE_ENV, sandbox_user="1000:1000")
    spec = env.spec(ProcessSpec(argv=("bash",), env={"LD_BIND_NOW": "1"}, sealed=True)).env
    assert (spec["LD_LIBRARY_PATH"], spec["LD_PRELOAD"], spec["LD_BIND_NOW"]) == ("", "", "")
    assert spec["SANDBOX_RESTORE"].split() == ["LD_LIBRARY_PATH", "LD_PRELOAD", "LD_BIND_NOW"]
    assert spec["SANDBOX_RESTORE_LD_LIBRARY_PATH"] == "/opt/conda/lib"
    assert spec["SANDBOX_RESTORE_LD_BIND_NOW"] == "1"
    assert spec["TMPDIR"] == "/home/user/t"  # the rest as for any user exec

"""The process backend's seccomp compiler and installer, observed on the real kernel.

Each check runs a fresh Python child that (optionally) compiles and installs a filter, then makes
syscalls and reports their errno; the same child without the filter shows the calls would act
differently, so every assertion depends on the filter being there.
"""

from __future__ import annotations

import copy
import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox._errors import SandboxInitFailed
from sandbox.process import _seccomp
from sandbox.process._seccomp import DEFAULT_DENIED, DEFAULT_PROFILE, compile_profile, install

pytestmark = pytest.mark.skipif(bool(_seccomp.problem()), reason=_seccomp.problem())

_ROOT = Path(_seccomp.__file__).resolve().parents[2]
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWUSER = 0x00020000, 0x04000000, 0x10000000

# Runs in the child: `call(name, *args)` gives 0 on success, else the errno.
_PRELUDE = """
import ctypes, json, os, subprocess, sys
from sandbox.process import _seccomp
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    return 0 if getattr(libc, name)(*args) != -1 else ctypes.get_errno()
def oserr(fn, *args):
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return 0
out = {}
def install():
    if sys.argv[1] != "none":
        _seccomp.install(_seccomp.compile_profile(json.loads(sys.argv[1])))
"""


def _child(body: str, profile: Any = None, filtered: bool = True) -> dict[str, Any]:
    """Run `body` in a Python child (filter installed where the body calls install())."""
    argument = json.dumps(profile) if filtered else "none"
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + body + "\nprint(json.dumps(out))", argument],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


_DENIALS = f"""
# Own user, mount and UTS namespaces first, so mount, setns and a nested unshare work unfiltered.
uid, gid = os.getuid(), os.getgid()
assert call("unshare", {CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS}) == 0
for name, text in (("uid_map", f"0 {{uid}} 1"), ("setgroups", "deny"), ("gid_map", f"0 {{gid}} 1")):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
uts = os.open("/proc/self/ns/uts", os.O_RDONLY)
install()
out["mount"] = call("mount", b"none", b"/mnt", b"tmpfs", 0, None)
out["setns"] = call("setns", uts, 0)
out["keyctl"] = call("syscall", 250, 0, ctypes.c_long(-3), 0)  # KEYCTL_GET_KEYRING_ID session
out["clone3"] = call("syscall", 435, None, 0)
out["unshare"] = call("unshare", {CLONE_NEWUSER})
"""


def test_default_filter_denies_namespaces_mount_and_keys() -> None:
    denied = _child(_DENIALS, profile=None)
    assert denied == {"unshare": errno.EPERM, "mount": errno.EPERM, "keyctl": errno.EPERM,
                      "setns": errno.EPERM, "clone3": errno.ENOSYS}
    plain = _child(_DENIALS, filtered=False)
    assert plain["unshare"] == 0 and plain["mount"] == 0 and plain["setns"] == 0
    assert plain["keyctl"] != errno.EPERM and plain["clone3"] not in (0, errno.ENOSYS)


def test_default_filter_keeps_ordinary_work(tmp_path: Path) -> None:
    body = f"""
install()
path = {str(tmp_path / "f")!r}
with open(path, "w") as f:
    f.write("data")
with open(path) as f:
    out["read"] = f.read()
pid = os.fork()
if pid == 0:
    os._exit(7)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["true"] = subprocess.run(["true"]).returncode
out["persona_query"] = call("personality", ctypes.c_ulong(0xFFFFFFFF))
out["persona_set"] = call("personality", ctypes.c_ulong(0x0400000))  # READ_IMPLIES_EXEC
out["seccomp_mode"] = [l for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
"""
    result = _child(body, profile=None)
    assert result["read"] == "data" and result["fork"] == 7 and result["true"] == 0
    assert result["persona_query"] == 0 and result["persona_set"] == errno.EPERM
    assert result["seccomp_mode"].split() == ["Seccomp:", "2"]
    assert _child(body, filtered=False)["persona_set"] == 0


_MKDIR = """
install()
out["mkdir"] = oserr(os.mkdir, sys.argv[2] + "/d")
out["rmdir"] = oserr(os.rmdir, sys.argv[2] + "/d")
out["symlink"] = oserr(os.symlink, "x", sys.argv[2] + "/l")
out["unlink"] = oserr(os.unlink, sys.argv[2] + "/l")
"""


def _fs_child(profile: Any, tmp_path: Path) -> dict[str, Any]:
    body = _MKDIR.replace("sys.argv[2]", repr(str(tmp_path)))
    return _child(body, profile=profile)


def _deny(names: list[str], **extra: Any) -> dict[str, Any]:
    return {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EACCES, **extra}


def test_custom_profile_errno_ret(tmp_path: Path) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["mkdir", "mkdirat"])]}
    result = _fs_child(profile, tmp_path)
    assert result["mkdir"] == errno.EACCES and result["rmdir"] == errno.ENOENT
    assert result["symlink"] == 0 and result["unlink"] == 0
    assert _fs_child({"defaultAction": "SCMP_ACT_ALLOW"}, tmp_path)["mkdir"] == 0


def test_includes_and_excludes_follow_docker(tmp_path: Path) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        _deny(["mkdir", "mkdirat"], includes={"caps": ["CAP_SYS_ADMIN"]}),  # we hold no caps
        _deny(["rmdir"], excludes={"caps": ["CAP_SYS_ADMIN"]}),
        _deny(["symlink", "symlinkat"], includes={"arches": ["arm64"], "minKernel": "3.0"}),
        _deny(["unlink", "unlinkat"], excludes={"arches": ["arm64"]},
              includes={"minKernel": "4.8"}),
    ]}
    result = _fs_child(profile, tmp_path)
    assert result == {"mkdir": 0, "rmdir": errno.EACCES, "symlink": 0, "unlink": errno.EACCES}
    newer = copy.deepcopy(profile)
    newer["syscalls"][3]["includes"]["minKernel"] = "999.0"
    assert _fs_child(newer, tmp_path)["unlink"] == 0


def test_capability_gated_allow_stays_denied() -> None:
    """Docker's own entry allowing mount with CAP_SYS_ADMIN does not apply: no capabilities."""
    gated = copy.deepcopy(dict(DEFAULT_PROFILE))
    entry = {"names": ["mount", "unshare"], "action": "SCMP_ACT_ALLOW"}
    gated["syscalls"].append({**entry, "includes": {"caps": ["CAP_SYS_ADMIN"]}})
    assert _child(_DENIALS, profile=gated)["mount"] == errno.EPERM
    ungated = copy.deepcopy(dict(DEFAULT_PROFILE))
    ungated["syscalls"].append(entry)
    assert _child(_DENIALS, profile=ungated)["mount"] == 0


_PERSONA = """
install()
out["zero"] = call("personality", ctypes.c_ulong(0))
out["query"] = call("personality", ctypes.c_ulong(0xFFFFFFFF))
out["eight"] = call("personality", ctypes.c_ulong(8))
"""


def test_argument_conditions() -> None:
    unless_zero = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{
        "names": ["personality"], "action": "SCMP_ACT_ERRNO",
        "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_NE"}]}]}
    assert _child(_PERSONA, unless_zero) == {"zero": 0, "query": errno.EPERM, "eight": errno.EPERM}
    # Two conditions on one argument: one rule each (an OR), as runc does.
    either = copy.deepcopy(unless_zero)
    either["syscalls"][0]["args"] = [{"index": 0, "value": v, "op": "SCMP_CMP_EQ"}
                                     for v in (8, 0xFFFFFFFF)]
    assert _child(_PERSONA, either) == {"zero": 0, "query": errno.EPERM, "eight": errno.EPERM}
    assert _child(_PERSONA, filtered=False) == {"zero": 0, "query": 0, "eight": 0}


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"defaultAction": "SCMP_ACT_NOPE"}, "defaultAction 'SCMP_ACT_NOPE'"),
        ({}, "defaultAction None"),
        ({"defaultAction": "SCMP_ACT_TRACE"}, "no tracer"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": {"names": ["mkdir"]}}, "syscalls must"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": "X"}]},
         "action 'X'"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["mkdir"], args=[
            {"index": 7, "value": 0, "op": "SCMP_CMP_EQ"}])]}, "syscalls[0].args[0].index 7"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["mkdir"], args=[
            {"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}])]}, "args[0].value -1"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["mkdir"], args=[
            {"index": 0, "op": "SCMP_CMP_ABOUT"}])]}, "args[0].op"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["a"], name="b")]},
         "both name and names"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [_deny(["mkdir"], includes={
            "minKernel": "new"})]}, "syscalls[0].minKernel 'new'"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["mkdir"], "action": "SCMP_ACT_KILL", "errnoRet": 1}]}, "errnoRet"),
        ({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 70000}, "defaultErrnoRet 70000"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_Z80"]}, "SCMP_ARCH_Z80"),
        ({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
          "archMap": []}, ""),
        ({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
          "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}, "both architectures and archMap"),
    ],
)
def test_bad_documents_name_the_field(document: dict[str, Any], named: str) -> None:
    if not named:  # an empty archMap is no archMap: accepted
        assert len(compile_profile(document)) % 8 == 0
        return
    with pytest.raises(SandboxInitFailed) as caught:
        compile_profile(document)
    assert caught.value.message.startswith("security.seccomp_profile: ")
    assert named in caught.value.message


def test_default_profile_covers_every_syscall_of_this_arch() -> None:
    """Each syscall this libseccomp knows natively is allowed, conditional or in DEFAULT_DENIED."""
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
    native = lib.seccomp_arch_native()
    known = set()
    for number in range(1024):
        name = lib.seccomp_syscall_resolve_num_arch(native, number)
        if name:
            known.add(ctypes.string_at(name).decode())
    allowed = set(DEFAULT_PROFILE["syscalls"][0]["names"])
    conditional = {n for e in DEFAULT_PROFILE["syscalls"][1:] for n in e["names"]}
    assert not allowed & set(DEFAULT_DENIED)
    assert not conditional & set(DEFAULT_DENIED)
    assert known <= allowed | conditional | set(DEFAULT_DENIED)
    assert {"mount", "unshare", "setns", "keyctl", "bpf", "kexec_load"} <= set(DEFAULT_DENIED)


def test_install_refuses_a_malformed_program() -> None:
    for program in (b"1234567", b"\0" * 8 * 4097, b"\0" * 8):  # the last: kernel says no
        with pytest.raises(OSError) as caught:
            install(program)
        assert caught.value.errno == errno.EINVAL


@pytest.mark.parametrize("action", ["SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL", "SCMP_ACT_TRAP"])
def test_killing_actions_end_the_command_with_sigsys(tmp_path: Path, action: str) -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["mkdir", "mkdirat"], "action": action}]}
    body = f"install()\nos.mkdir({str(tmp_path / 'd')!r})\n"
    for filtered, returncode in ((True, -signal.SIGSYS), (False, 0)):
        argument = json.dumps(profile) if filtered else "none"
        proc = subprocess.run([sys.executable, "-c", _PRELUDE + body, argument], timeout=60,
                              env={**os.environ, "PYTHONPATH": str(_ROOT)}, check=False)
        assert proc.returncode == returncode


def test_problem_is_empty_with_libseccomp_installed() -> None:
    assert _seccomp.problem() == ""

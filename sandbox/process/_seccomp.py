"""Seccomp filters for the process backend: Docker-format profiles compiled to classic BPF.

`compile_profile` turns the JSON profile Docker accepts (``defaultAction``, ``archMap``,
``syscalls`` with ``args``/``includes``/``excludes``) into the raw ``struct sock_filter`` array,
using the system's libseccomp (Debian package libseccomp2) through ctypes; `install` loads that
program into the calling process with two ``prctl`` calls, no libseccomp needed. The fork server
runs `install` in its single-threaded child after it joined the sandbox's namespaces and right
before exec, so the filter never has to allow what the SDK itself needs (setns, unshare, mount).

Rules follow moby's (profiles/seccomp/seccomp_linux.go) and runc's handling: with no capabilities
held, ``includes.caps`` entries never apply and ``excludes.caps`` ones always do; arches use
Docker's names (amd64, arm64); ``minKernel`` is "major.minor"; unknown names are skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from sandbox._errors import SandboxInitFailed

from ._forkserver import install_filter as install

__all__ = [
    "DEFAULT_DENIED",
    "DEFAULT_PROFILE",
    "compile_profile",
    "compiled",
    "install",
    "memfd",
    "problem",
    "with_setns",
]


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Docker's default profile (moby/moby, vendor/github.com/moby/profiles/seccomp/default.json, read
# at b985e23, 2026-08) as it applies to a container holding no capabilities: deny with EPERM,
# allow these names everywhere (names this host's libseccomp does not know are skipped)...
_ALLOWED = _names("""
    accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown
    chown32 clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime
    clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect
    copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old
    epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit
    exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod
    fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock
    fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate
    ftruncate64 futex futex_requeue futex_time64 futex_wait futex_waitv futex_wake futimesat
    getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32
    getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority
    getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage
    getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr
    getxattrat inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl
    io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup
    io_submit ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
    lchown32 lgetxattr link linkat listen listmount listxattr listxattrat llistxattr _llseek
    lremovexattr lseek lsetxattr lstat lstat64 madvise map_shadow_stack membarrier memfd_create
    memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect
    mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend
    mq_timedsend_time64 mq_unlink mremap mseal msgctl msgget msgrcv msgsnd msync munlock
    munlockall munmap name_to_handle_at nanosleep newfstatat _newselect open openat openat2 pause
    pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll
    ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pselect6_time64
    pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom recvmmsg
    recvmmsg_time64 recvmsg remap_file_pages removexattr removexattrat rename renameat renameat2
    restart_syscall riscv_hwprobe rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
    rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64
    rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam sched_get_priority_max
    sched_get_priority_min sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64
    sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select
    semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg
    sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer
    setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
    setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
    setuid32 setxattr setxattrat shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4
    sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statmount statx
    symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
    timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64
    timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill
    truncate truncate64 ugetrlimit umask uname unlink unlinkat uretprobe utime utimensat
    utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
""")

# ...and these entries, Docker's conditional ones kept as data in its own format. Entries gated on
# a capability (includes.caps) are left out: they never apply to a capability-less process.
_CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_CONDITIONAL: tuple[dict[str, Any], ...] = (
    {"names": ["process_vm_readv", "process_vm_writev", "ptrace"],
     "includes": {"minKernel": "4.8"}},
    *({"names": ["socket"], "args": [{"index": 0, "value": v, "op": op}]}
      for v, op in ((38, "SCMP_CMP_LT"), (39, "SCMP_CMP_EQ"), (40, "SCMP_CMP_GT"))),
    *({"names": ["personality"], "args": [{"index": 0, "value": v, "op": "SCMP_CMP_EQ"}]}
      for v in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF)),
    {"names": ["sync_file_range2", "swapcontext"], "includes": {"arches": ["ppc64le"]}},
    {"names": ["arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint",
               "cacheflush", "set_tls"], "includes": {"arches": ["arm", "arm64"]}},
    {"names": ["arch_prctl"], "includes": {"arches": ["amd64", "x32"]}},
    {"names": ["modify_ldt"], "includes": {"arches": ["amd64", "x32", "x86"]}},
    {"names": ["s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr"],
     "includes": {"arches": ["s390", "s390x"]}},
    {"names": ["riscv_flush_icache"], "includes": {"arches": ["riscv64"]}},
    # clone without any namespace flag (on s390 the flags are the second argument).
    {"names": ["clone"], "excludes": {"arches": ["s390", "s390x"]},
     "args": [{"index": 0, "value": _CLONE_NAMESPACE_FLAGS, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["clone"], "includes": {"arches": ["s390", "s390x"]},
     "args": [{"index": 1, "value": _CLONE_NAMESPACE_FLAGS, "op": "SCMP_CMP_MASKED_EQ"}]},
    # clone3 hides its flags behind a pointer: ENOSYS, so libc falls back to clone.
    {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
)
_DEFAULT_ARCH_MAP = [
    {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    {"architecture": "SCMP_ARCH_S390X", "subArchitectures": ["SCMP_ARCH_S390"]},
]
DEFAULT_PROFILE: Mapping[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": errno.EPERM,
    "archMap": _DEFAULT_ARCH_MAP,
    "syscalls": [
        {"names": list(_ALLOWED), "action": "SCMP_ACT_ALLOW"},
        *({"action": "SCMP_ACT_ALLOW", **entry} for entry in _CONDITIONAL),
    ],
}

#: Syscalls the default denies (EPERM) whatever their arguments: Docker's capability-gated ones and
#: those it never allows; not the conditional clone, clone3, personality, socket (families 38, 40).
DEFAULT_DENIED = _names("""
    _sysctl acct add_key afs_syscall bpf chroot clock_settime clock_settime64 create_module
    delete_module fanotify_init finit_module fsconfig fsmount fsopen fspick get_kernel_syms
    get_mempolicy getpmsg init_module io_uring_enter io_uring_register io_uring_setup ioperm iopl
    kcmp kexec_file_load kexec_load keyctl lookup_dcookie lsm_get_self_attr lsm_list_modules
    lsm_set_self_attr mbind migrate_pages mount mount_setattr move_mount move_pages nfsservctl
    open_by_handle_at open_tree perf_event_open pidfd_getfd pivot_root process_madvise putpmsg
    query_module quotactl quotactl_fd reboot request_key security set_mempolicy
    set_mempolicy_home_node setdomainname sethostname setns settimeofday stime swapoff swapon sysfs
    syslog tuxcall umount umount2 unshare uselib userfaultfd ustat vhangup vm86 vm86old vserver
""")

_FIELD = "security.seccomp_profile"
_ACT_ERRNO = 0x00050000  # | errno; the action values are libseccomp's SCMP_ACT_* (seccomp.h)
_ACTIONS = {"SCMP_ACT_ALLOW": 0x7FFF0000, "SCMP_ACT_LOG": 0x7FFC0000, "SCMP_ACT_TRAP": 0x00030000,
            "SCMP_ACT_KILL": 0, "SCMP_ACT_KILL_THREAD": 0, "SCMP_ACT_KILL_PROCESS": 0x80000000,
            "SCMP_ACT_ERRNO": _ACT_ERRNO}
_NO_HANDLER = {"SCMP_ACT_TRACE": "no tracer is attached to sandboxed commands",
               "SCMP_ACT_NOTIFY": "no seccomp agent listens for notifications"}
# enum scmp_compare in libseccomp's seccomp.h.
_OPS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
        "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
# The arches each native one runs (Docker's archMap), and Docker's name for the native one.
_RUNS = {"x86_64": ("x86", "x32"), "aarch64": ("arm",), "s390x": ("s390",),
         "mips64": ("mips", "mips64n32"), "mipsel64": ("mipsel", "mipsel64n32")}
_DOCKER_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "loongarch64": "loong64"}
_ARCH_NAMES = _names("x86 x86_64 x32 arm aarch64 loongarch64 mips mipsel mips64 mipsel64 mips64n32"
                     " mipsel64n32 ppc ppc64 ppc64le s390 s390x riscv64 parisc parisc64")


class _ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = (("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64))



def _fail(what: str, do: str = "") -> SandboxInitFailed:
    return SandboxInitFailed(f"{_FIELD}: {what}", details=do)


@functools.cache
def _libseccomp() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    ctx, u32, name = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p
    for func, restype, argtypes in (
        ("seccomp_init", ctx, [u32]), ("seccomp_release", None, [ctx]),
        ("seccomp_arch_native", u32, []), ("seccomp_arch_resolve_name", u32, [name]),
        ("seccomp_arch_add", ctypes.c_int, [ctx, u32]),
        ("seccomp_syscall_resolve_name", ctypes.c_int, [name]),
        ("seccomp_rule_add_array", ctypes.c_int,
         [ctx, u32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)]),
        ("seccomp_export_bpf", ctypes.c_int, [ctx, ctypes.c_int]),
    ):
        getattr(lib, func).restype = restype
        getattr(lib, func).argtypes = argtypes
    return lib


@functools.cache
def problem() -> str:
    """Return "" when seccomp profiles can be compiled here, else a one-line reason."""
    try:
        _libseccomp()
    except (OSError, AttributeError) as exc:
        return f"libseccomp cannot be loaded ({exc}): install the package libseccomp2"
    return ""


def compile_profile(document: Mapping[str, Any] | None) -> bytes:
    """Compile a Docker-format seccomp profile (None: `DEFAULT_PROFILE`) to a BPF program.

    Returns the raw ``struct sock_filter`` array (8 bytes per instruction) for `install`.
    Raises `SandboxInitFailed` naming the bad field of a bad document, or when libseccomp is
    missing or refuses the filter.
    """
    if document is None:
        document = DEFAULT_PROFILE
    if not isinstance(document, Mapping):
        raise _fail("the profile must be a JSON object", f"got {type(document).__name__}")
    if reason := problem():
        raise _fail(reason)
    lib = _libseccomp()
    default = _action(document, "defaultAction", "defaultErrnoRet")
    syscalls = document.get("syscalls") or []
    if not isinstance(syscalls, list):
        raise _fail("syscalls must be a list of rules", f"got {type(syscalls).__name__}")
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise _fail("libseccomp refused the defaultAction", f"action 0x{default:08x}")
    try:
        for token in _arches(lib, document):
            _check(lib.seccomp_arch_add(ctx, token), "adding an architecture", f"0x{token:08x}",
                   ok=(-errno.EEXIST,))
        for i, entry in enumerate(syscalls):
            _add_entry(lib, ctx, default, f"syscalls[{i}]", entry)
        return _export(lib, ctx)
    finally:
        lib.seccomp_release(ctx)


def _action(entry: Mapping[str, Any], key: str, errno_key: str) -> int:
    """Map an action name (and its errno) to libseccomp's action value."""
    name = entry.get(key)
    if name in _NO_HANDLER:
        raise _fail(f"{key} {name} cannot be honoured: {_NO_HANDLER[name]}",
                    "use SCMP_ACT_ERRNO, SCMP_ACT_KILL_PROCESS or SCMP_ACT_TRAP instead")
    if not isinstance(name, str) or name not in _ACTIONS:
        raise _fail(f"{key} {name!r} is not a seccomp action",
                    "use one of " + ", ".join(sorted(_ACTIONS)))
    ret = entry.get(errno_key)
    if ret is None:
        return _ACTIONS[name] | (errno.EPERM if name == "SCMP_ACT_ERRNO" else 0)
    if name != "SCMP_ACT_ERRNO":
        raise _fail(f"{errno_key} is only valid with SCMP_ACT_ERRNO", f"{key} is {name}")
    if isinstance(ret, bool) or not isinstance(ret, int) or not 0 <= ret <= 4095:
        raise _fail(f"{errno_key} {ret!r} is not an errno", "give an integer from 0 to 4095")
    return _ACT_ERRNO | ret


def _arch_token(lib: ctypes.CDLL, docker_name: object, where: str, strict: bool = True) -> int:
    if not isinstance(docker_name, str) or not docker_name.startswith("SCMP_ARCH_"):
        raise _fail(f"{where} {docker_name!r} is not an architecture", "e.g. SCMP_ARCH_X86_64")
    token = int(lib.seccomp_arch_resolve_name(docker_name[10:].lower().encode()))
    if not token and strict:
        raise _fail(f"{where} {docker_name!r} is not an architecture libseccomp knows")
    return token


@functools.cache
def _host_arches() -> tuple[str, tuple[int, ...]]:
    """Docker's name for this host's arch, and the libseccomp tokens of the arches it runs."""
    lib = _libseccomp()
    by_token = {int(lib.seccomp_arch_resolve_name(n.encode())): n for n in _ARCH_NAMES}
    native = by_token.get(int(lib.seccomp_arch_native()), os.uname().machine)
    runs = (native, *_RUNS.get(native, ()))
    tokens = tuple(int(lib.seccomp_arch_resolve_name(n.encode())) for n in runs)
    return _DOCKER_ARCH.get(native, native), tuple(t for t in tokens if t)


def _arches(lib: ctypes.CDLL, document: Mapping[str, Any]) -> list[int]:
    """The listed arches this host runs, besides the native one seccomp_init already holds."""
    listed, arch_map = document.get("architectures") or [], document.get("archMap") or []
    if listed and arch_map:
        raise _fail("both architectures and archMap are given", "use one of them")
    if not isinstance(listed, list) or not isinstance(arch_map, list):
        raise _fail("architectures and archMap must be lists")
    tokens = [_arch_token(lib, a, "architectures entry") for a in listed]
    runs = _host_arches()[1]
    for item in arch_map:
        if not isinstance(item, Mapping):
            raise _fail("archMap entries must be objects with architecture, subArchitectures")
        main = _arch_token(lib, item.get("architecture"), "archMap architecture", strict=False)
        if main == runs[0]:
            subs = item.get("subArchitectures") or []
            if not isinstance(subs, list):
                raise _fail("archMap subArchitectures must be a list")
            tokens += [main, *(_arch_token(lib, s, "archMap subArchitecture") for s in subs)]
    return [t for t in dict.fromkeys(tokens) if t in runs[1:]]


def _kernel_at_least(minimum: object, where: str) -> bool:
    wanted = re.fullmatch(r"(\d+)\.(\d+)", minimum) if isinstance(minimum, str) else None
    if wanted is None:
        raise _fail(f"{where}.minKernel {minimum!r} is not a version", 'write it as "4.8"')
    release = tuple(int(n) for n in re.findall(r"\d+", os.uname().release)[:2])
    return release >= (int(wanted[1]), int(wanted[2]))


def _applies(entry: Mapping[str, Any], where: str) -> bool:
    """Docker's includes/excludes filter, for a process holding no capabilities."""
    arch = _host_arches()[0]
    for key in ("includes", "excludes"):
        cond = entry.get(key) or {}
        if not isinstance(cond, Mapping):
            raise _fail(f"{where}.{key} must be an object with caps, arches, minKernel")
        for field in ("caps", "arches"):
            if not isinstance(cond.get(field) or [], list):
                raise _fail(f"{where}.{key}.{field} must be a list of names")
        arches, caps = cond.get("arches") or [], cond.get("caps") or []
        minimum = cond.get("minKernel")
        newer = None if minimum is None else _kernel_at_least(minimum, where)
        if key == "excludes" and (arch in arches or newer):
            return False
        if key == "includes" and ((arches and arch not in arches) or caps or newer is False):
            return False
    return True


def _conditions(entry: Mapping[str, Any], where: str) -> list[list[_ArgCmp]]:
    """The argument conditions grouped into rules: libseccomp refuses two conditions on one
    argument in a rule, so then (like runc, hence Docker) each condition gets its own rule."""
    args = entry.get("args") or []
    if not isinstance(args, list):
        raise _fail(f"{where}.args must be a list")
    conds: list[_ArgCmp] = []
    for j, arg in enumerate(args):
        at = f"{where}.args[{j}]"
        if not isinstance(arg, Mapping):
            raise _fail(f"{at} must be an object with index, value, valueTwo, op")
        index, op = arg.get("index"), arg.get("op")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= 5:
            raise _fail(f"{at}.index {index!r} is not a syscall argument", "use 0 to 5")
        if op not in _OPS:
            raise _fail(f"{at}.op {op!r} is not a comparison", "use " + ", ".join(_OPS))
        values = [arg.get("value", 0), arg.get("valueTwo", 0)]
        for key, value in zip(("value", "valueTwo"), values, strict=True):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
                raise _fail(f"{at}.{key} {value!r} is not an unsigned 64-bit integer")
        conds.append(_ArgCmp(index, _OPS[op], values[0], values[1]))
    if len({c.arg for c in conds}) < len(conds):
        return [[c] for c in conds]
    return [conds]


def _add_entry(lib: ctypes.CDLL, ctx: int, default: int, where: str, entry: object) -> None:
    if not isinstance(entry, Mapping):
        raise _fail(f"{where} must be an object with names, action, args")
    if entry.get("name") and entry.get("names"):
        raise _fail(f"{where} has both name and names", "use one of them")
    names: object = [entry["name"]] if entry.get("name") else entry.get("names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise _fail(f"{where}.names must be a list of syscall names")
    action = _action(entry, "action", "errnoRet")
    rules = _conditions(entry, where)
    if not _applies(entry, where) or action == default:
        return  # libseccomp refuses a rule that repeats the default action; it changes nothing
    for name in names:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number == -1:  # __NR_SCMP_ERROR: unknown on this host's arches; Docker skips it too
            continue
        for conds in rules:
            array = (_ArgCmp * max(len(conds), 1))(*conds)
            _check(lib.seccomp_rule_add_array(ctx, action, number, len(conds), array),
                   f"adding {where} for {name!r}")


def _check(rc: int, doing: str, hint: str = "", ok: Sequence[int] = ()) -> None:
    if rc < 0 and rc not in ok:
        raise _fail(f"libseccomp failed {doing}: {os.strerror(-rc)}", hint)


def _export(lib: ctypes.CDLL, ctx: int) -> bytes:
    fd = os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC)
    try:
        _check(lib.seccomp_export_bpf(ctx, fd), "exporting the BPF program")
        return os.pread(fd, os.lseek(fd, 0, os.SEEK_END), 0)
    finally:
        os.close(fd)




_programs: dict[str, bytes] = {}


async def compiled(profile: str) -> bytes:
    """The program for a plan's ``seccomp`` ("" none, "default", or a profile's JSON),
    compiled once per process (the default takes ~25 ms here), with `with_setns`."""
    if not profile:
        return b""
    if profile not in _programs:
        document = DEFAULT_PROFILE if profile == "default" else json.loads(profile)
        _programs[profile] = await anyio.to_thread.run_sync(compile_profile,
                                                            with_setns(document))
    return _programs[profile]


def with_setns(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """``document`` allowing ``setns`` first: the zygote loads the filter before it joins the
    sandbox (so the load overlaps bwrap's start). Harmless in the sandbox: setns needs
    CAP_SYS_ADMIN, and no process there holds any capability."""
    if document.get("defaultAction") == "SCMP_ACT_ALLOW" or not isinstance(document, Mapping):
        return document
    rules = document.get("syscalls")
    allow = {"names": ["setns"], "action": "SCMP_ACT_ALLOW"}
    return {**document, "syscalls": [allow, *rules] if isinstance(rules, list) else rules}


def memfd(program: bytes) -> int:
    """An anonymous file holding ``program`` at offset 0, for bwrap's ``--seccomp FD``."""
    fd = os.memfd_create("sandbox-seccomp")
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd

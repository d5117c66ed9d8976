"""Bad input gets a clear answer: the right error class, naming what was wrong, in bounded time.

Cases already covered elsewhere are not repeated: invalid image references and pull_policy
"never" (test_lifecycle), a missing executable, empty argv and non-UTF-8 output (test_exec),
writing to /proc and ``..`` inside a path (test_files).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import aiodocker
import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    Command,
    CommandExecutionFailed,
    ConfigError,
    FileOperationFailed,
    ResourceLimits,
    Sandbox,
    SandboxAlreadyExists,
    SandboxAlreadyInitialized,
    SandboxConfig,
    SandboxError,
    SandboxInitFailed,
    SandboxNotRunning,
    SandboxStatus,
    SecurityPolicy,
    SecurityViolation,
)
from tests.conftest import our_containers, sandbox_containers

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def busybox(**kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, **kw))  # type: ignore[arg-type]


async def init_fails(sb: Sandbox, *needles: str, within: float = 15) -> SandboxInitFailed:
    """Initialize must raise SandboxInitFailed mentioning every needle and leave nothing."""
    t0 = time.monotonic()
    with pytest.raises(SandboxInitFailed) as ei:
        await sb.initialize()
    assert time.monotonic() - t0 < within
    for needle in needles:
        assert needle in str(ei.value), (needle, str(ei.value))
    assert sb.status is SandboxStatus.FAILED
    # This sandbox's own containers: other processes may be creating theirs meanwhile.
    assert sandbox_containers(sb.id) == []
    return ei.value


async def test_image_that_cannot_be_pulled_fails_fast_naming_it() -> None:
    ref = "127.0.0.1:1/nothing/here:1"
    await init_fails(Sandbox(SandboxConfig(image=ref)), ref, "pull", within=10)


async def test_a_taken_name_fails_and_leaves_the_other_container_alone() -> None:
    """The name belongs to a container the SDK did not make: refuse, never remove it."""
    name = f"not-ours-{uuid.uuid4().hex[:8]}"
    docker = aiodocker.Docker()
    try:
        theirs = await docker.containers.create(
            {"Image": IMAGE_BUSYBOX, "Cmd": ["sleep", "600"]}, name=name)
        err = await init_fails(busybox(name=name), name, "already exists", "SandboxConfig.name")
        assert type(err) is SandboxAlreadyExists
        info = await theirs.show()
        assert info["Name"] == f"/{name}" and "io.sandbox.id" not in info["Config"]["Labels"]
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await (await docker.containers.get(name)).delete(force=True)
        await docker.close()


async def test_a_missing_tool_or_mcp_server_fails_initialize_naming_it() -> None:
    err = await init_fails(busybox(tools=("x",), mcp_servers=("fs=y --z",)), "tools: 'x'",
                           "mcp_servers['fs']: 'y'")
    assert "not in the sandbox" in str(err)


async def test_working_directory_that_is_a_file() -> None:
    await init_fails(busybox(working_dir="/bin/busybox"), "/bin/busybox")


async def test_unknown_user_per_command_names_it() -> None:
    # A non-root sandbox refuses every name but its own and nobody's before the engine sees it
    async with busybox() as sb:
        with pytest.raises(SecurityViolation, match="nosuchuser"):
            await sb.execute_command(Command(executable="id", user="nosuchuser"))
    # A root sandbox passes names on: the engine's refusal is named
    async with busybox(security=SecurityPolicy(run_as_user="root")) as sb:
        with pytest.raises(CommandExecutionFailed, match="nosuchuser"):
            await sb.execute_command(Command(executable="id", user="nosuchuser"))
        assert (await sb.execute_command("echo fine")).stdout == "fine\n"


async def test_unknown_sandbox_user_fails_at_initialize() -> None:
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX,
                               security=SecurityPolicy(run_as_user="nosuchuser")))
    await init_fails(sb, "run_as_user 'nosuchuser'", "no matching entries in passwd")


@pytest.mark.parametrize(("field", "value"), [
    ("memory_limit", -1), ("cpu_limit", -0.5), ("process_limit", -3),
    ("cpu_limit", float("nan")), ("wall_time_limit", -1),
])
async def test_negative_limits_are_config_errors_naming_the_field(field: str,
                                                                  value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        ResourceLimits(**{field: value})


@pytest.mark.parametrize(("limits", "field"), [
    (ResourceLimits(memory_limit=2 << 20), "memory_limit"),  # under 6 MiB
    (ResourceLimits(cpu_limit=4096), "cpu_limit"),
    (ResourceLimits(process_limit=10**12), "process_limit"),
])
async def test_absurd_limits_fail_naming_the_field(limits: ResourceLimits, field: str) -> None:
    try:
        sb = busybox(resources=limits)
    except ConfigError as exc:  # refused before any engine call: fine too
        assert field in str(exc)
        return
    await init_fails(sb, field)


async def test_nul_bytes_in_args_or_env_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="NUL"):
        SandboxConfig(environment={"A": "x\0y"})
    async with busybox() as sb:
        with pytest.raises(ConfigError, match="NUL"):
            await sb.execute_command(["echo", "a\0b"])
        with pytest.raises(ConfigError, match="NUL"):
            await sb.execute_command(Command.shell("true", environment={"A": "\0"}))
        with pytest.raises(ConfigError, match="NUL"):
            sb.set_environment({"B": "1\0"})
        with pytest.raises(ConfigError):
            sb.set_environment({"C=D": "1"})
        assert "B" not in sb.get_environment()
        with pytest.raises(FileOperationFailed, match="NUL"):
            await sb.read_file("a\0b")


async def test_dot_dot_past_the_root_is_normalized() -> None:
    async with busybox() as sb:
        await sb.write_file("/../../tmp/../tmp/x.txt", "x")
        assert await sb.read_file("/tmp/x.txt") == b"x"
        infos = await sb.list_files("../../../tmp/x.txt")
        assert infos[0].path == "/tmp/x.txt"


async def test_reading_a_2_gib_file_is_refused_without_loading_it() -> None:
    async with busybox() as sb:
        r = await sb.execute_command("truncate -s 2G /tmp/big && stat -c %s /tmp/big")
        assert r.stdout == f"{2 << 30}\n", r
        t0 = time.monotonic()
        with pytest.raises(FileOperationFailed) as ei:
            await sb.read_file("/tmp/big")
        assert time.monotonic() - t0 < 5
        msg = str(ei.value)
        assert "copy_files" in msg and str(2 << 30) in msg and "/tmp/big" in msg


async def test_every_public_method_after_cleanup() -> None:
    sb = busybox(environment={"K": "v"})
    await sb.initialize()
    await sb.cleanup()
    calls = {
        "execute_command": lambda: sb.execute_command("true"),
        "write_file": lambda: sb.write_file("a", "b"),
        "read_file": lambda: sb.read_file("a"),
        "list_files": lambda: sb.list_files(),
        "copy_files in": lambda: sb.copy_files(__file__, "sandbox:/tmp/x"),
        "copy_files out": lambda: sb.copy_files("sandbox:/etc/hostname", "/tmp"),
        "set_working_directory": lambda: sb.set_working_directory("/tmp"),
        "get_resource_usage": lambda: sb.get_resource_usage(),
    }
    for name, call in calls.items():
        with anyio.fail_after(2), pytest.raises(SandboxNotRunning, match="destroyed"):
            await call()
        _ = name
    with anyio.fail_after(2), pytest.raises(SandboxNotRunning):
        async with sb.stream_command("true"):
            pass
    with pytest.raises(SandboxAlreadyInitialized):
        await sb.initialize()
    # What needs no container still answers, from what the sandbox knows.
    with anyio.fail_after(2):
        info = await sb.get_info()
        await sb.cleanup()
    assert info.status is SandboxStatus.DESTROYED
    assert sb.get_working_directory() == "/workspace"
    assert sb.get_environment() == {"K": "v"}
    assert all(u.timestamp is not None for u in sb.usage_history())


async def test_one_sandbox_from_many_tasks_at_once() -> None:
    async with busybox() as sb:
        errors: list[str] = []

        async def worker(i: int) -> None:
            for j in range(4):
                data = f"{i}-{j}\n" * 1000
                await sb.write_file(f"w{i}.txt", data)
                got = await sb.read_file(f"w{i}.txt")
                r = await sb.execute_command(f"wc -l < w{i}.txt")
                if got.decode() != data or r.stdout.strip() != "1000":
                    errors.append(f"{i}-{j}")

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(worker, i)
        assert errors == []
        names = {f.name for f in await sb.list_files()}
        assert {f"w{i}.txt" for i in range(10)} <= names


async def test_cleanup_while_commands_run_and_concurrent_cleanups() -> None:
    sb = busybox()
    await sb.initialize()
    outcomes: list[str] = []

    async def long_command() -> None:
        try:
            r = await sb.execute_command("sleep 100")
            outcomes.append(f"result {r.exit_code}")
        except SandboxError as exc:
            outcomes.append(type(exc).__name__)

    async def cleanup() -> None:
        await sb.cleanup()
        outcomes.append("cleaned")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(long_command)
            await anyio.sleep(0.5)
            for _ in range(4):
                tg.start_soon(cleanup)
    assert outcomes.count("cleaned") == 4
    assert len(outcomes) == 7, outcomes
    assert sb.status is SandboxStatus.DESTROYED
    assert sb.backend.container_id not in our_containers()

"""Nothing leaks: every way out of ``async with`` removes what the sandbox created; gc
collects what a process killed hard left behind, and nothing else."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiodocker
import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SandboxStatus, gc
from sandbox._constants import (
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_SANDBOX_ID,
)
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

ROOT = Path(__file__).resolve().parents[2]


def leftovers(sandbox_id: str) -> dict[str, list[str]]:
    """Containers, networks and volumes labelled with this sandbox id (should be none)."""
    label = f"label={LABEL_SANDBOX_ID}={sandbox_id}"
    found = {
        "containers": docker_cli("ps", "-aq", "--filter", label).split(),
        "networks": docker_cli("network", "ls", "-q", "--filter", label).split(),
        "volumes": docker_cli("volume", "ls", "-q", "--filter", label).split(),
    }
    return {k: v for k, v in found.items() if v}


def busybox() -> Sandbox:
    return Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))


async def test_normal_exit_and_exception_leave_nothing() -> None:
    async with busybox() as sb:
        assert leftovers(sb.id)  # the check can see what it looks for
        assert (await sb.execute_command("echo ok")).stdout == "ok\n"
    assert leftovers(sb.id) == {}
    with pytest.raises(ZeroDivisionError):
        async with busybox() as sb2:
            await sb2.execute_command("true")
            _ = 1 / 0
    assert sb2.status is SandboxStatus.DESTROYED and leftovers(sb2.id) == {}


async def task_in_a_long_command() -> tuple[asyncio.Task[None], list[Sandbox]]:
    """A task inside `async with Sandbox` running `sleep 1000`, and (soon) its sandbox."""
    boxes: list[Sandbox] = []
    running = asyncio.Event()

    async def work() -> None:
        async with busybox() as sb:
            boxes.append(sb)
            running.set()
            await sb.execute_command("sleep 1000")

    task = asyncio.ensure_future(work())
    await asyncio.wait_for(running.wait(), 30)
    return task, boxes


async def test_asyncio_task_cancel_during_command_leaves_nothing() -> None:
    task, boxes = await task_in_a_long_command()
    await asyncio.sleep(0.3)
    task.cancel()
    t0 = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t0 < 10
    assert boxes[0].status is SandboxStatus.DESTROYED
    assert leftovers(boxes[0].id) == {}


async def test_repeated_task_cancel_during_cleanup_still_removes() -> None:
    """A caller that cancels again and again while cleanup runs cannot make it leak."""
    task, boxes = await task_in_a_long_command()
    await asyncio.sleep(0.2)
    for _ in range(20):
        task.cancel()
        await asyncio.sleep(0.02)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert boxes[0].status is SandboxStatus.DESTROYED
    assert leftovers(boxes[0].id) == {}


async def test_anyio_cancel_scope_during_command_and_during_cleanup() -> None:
    boxes: list[Sandbox] = []

    async def work() -> None:
        async with busybox() as sb:
            boxes.append(sb)
            await sb.execute_command("sleep 1000")

    with anyio.move_on_after(3) as scope:
        await work()
    assert scope.cancelled_caught
    assert leftovers(boxes[0].id) == {}
    # Cancelled while cleanup itself runs: the shield keeps removal going.
    sb = busybox()
    await sb.initialize()
    with anyio.move_on_after(0.01):
        await sb.cleanup()
    assert sb.status is SandboxStatus.DESTROYED and leftovers(sb.id) == {}


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3, 0.6])
async def test_cancel_at_any_point_of_initialize_leaves_nothing(delay: float) -> None:
    sb = busybox()
    task = asyncio.ensure_future(sb.initialize())
    await asyncio.sleep(delay)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        # CREATING: cancelled before it began (nothing was made, initialize may be retried).
        assert sb.status in (SandboxStatus.FAILED, SandboxStatus.CREATING)
        assert leftovers(sb.id) == {}
    else:  # it finished first: then it must work and clean up
        assert sb.status is SandboxStatus.RUNNING
        await sb.cleanup()
        assert leftovers(sb.id) == {}


CHILD = textwrap.dedent("""
    import asyncio, faulthandler, signal, sys
    from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

    faulthandler.register(signal.SIGUSR1)  # a child that hangs shows where (the test asks)
    # As a program started from a terminal: a suite run as a background job of a shell
    # without job control (CI) ignores SIGINT, and its children inherit that; then asyncio.run
    # installs no Ctrl-C handler and the child never hears the test's SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def tasks() -> None:  # SIGUSR2: where each asyncio task waits
        for task in asyncio.all_tasks():
            print("task", task.get_name(), "cancelling", task.cancelling(), file=sys.stderr)
            task.print_stack(file=sys.stderr)
            coro = task.get_coro()
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
                if frame is not None:
                    print("  at", frame.f_code.co_filename, frame.f_lineno,
                          frame.f_code.co_name, file=sys.stderr)
                coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        sys.stderr.flush()

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, tasks)
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            print(sb.id, flush=True)
            await sb.execute_command("sleep 1000")

    asyncio.run(main())
""")


async def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sandbox`` with text output."""
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "sandbox", *args], cwd=ROOT,
                                       env=env, check=False)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


async def start_child() -> tuple[subprocess.Popen[str], str]:
    """A Python process that opens a sandbox, prints its id and waits in a command."""
    proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True))
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline)
    if not line:
        proc.wait(10)
        raise AssertionError(f"the child failed: {proc.stderr.read() if proc.stderr else ''}")
    await anyio.sleep(0.5)  # inside execute_command by now
    return proc, line.strip()


async def test_keyboard_interrupt_in_a_child_process_leaves_nothing() -> None:
    proc, sandbox_id = await start_child()
    try:
        assert leftovers(sandbox_id)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=30))
        except subprocess.TimeoutExpired:
            # Where it hangs: every thread's stack, then the rest of its stderr.
            proc.send_signal(signal.SIGUSR2)
            await anyio.sleep(1)
            proc.send_signal(signal.SIGUSR1)
            await anyio.sleep(1)
            proc.kill()
            _, err = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=10))
            raise AssertionError(f"the child did not exit 30 s after SIGINT:\n{err}") from None
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert "KeyboardInterrupt" in err, err
    assert leftovers(sandbox_id) == {}


async def test_gc_collects_what_a_killed_process_left_and_only_that(tmp_path: Path) -> None:
    proc, sandbox_id = await start_child()
    proc.kill()  # SIGKILL: no cleanup can run
    await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=30))
    assert leftovers(sandbox_id)
    async with aiodocker.Docker() as docker:
        # Beside it: an unlabelled container, and one labelled by an owner on another host.
        plain = await docker.containers.create(
            {"Image": IMAGE_BUSYBOX, "Cmd": ["true"], "HostConfig": {"NetworkMode": "none"}})
        foreign = await docker.containers.create({
            "Image": IMAGE_BUSYBOX, "Cmd": ["true"], "HostConfig": {"NetworkMode": "none"},
            "Labels": {LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE, LABEL_OWNER_HOST: "elsewhere",
                       LABEL_OWNER_PID: "1"},
        })
        try:
            async with busybox() as alive:
                dry = await gc(dry_run=True, docker=docker)
                names = {i.name: i.reason for i in dry.removed_containers}
                assert f"sandbox-{sandbox_id}" in names
                assert f"pid {proc.pid}" in names[f"sandbox-{sandbox_id}"]
                kept = {i.id: i.reason for i in dry.kept_containers}
                assert "this process" in kept[alive.backend.container_id or ""]
                assert "another host" in kept[foreign.id]
                assert plain.id not in kept and plain.id not in names
                assert leftovers(sandbox_id)  # a dry run removes nothing

                # The CLI says the same, one line per resource.
                out = await cli("gc", "--dry-run")
                assert out.returncode == 0, out.stderr
                assert f"would remove container sandbox-{sandbox_id}: its owner (pid " \
                    f"{proc.pid}) has exited" in out.stdout

                report = await gc(docker=docker)
                assert sandbox_id in {i.name.removeprefix("sandbox-")
                                      for i in report.removed_containers}
                assert leftovers(sandbox_id) == {}
                assert (await alive.execute_command("echo still")).stdout == "still\n"
                await plain.show()
                await foreign.show()
        finally:
            for c in (plain, foreign):
                await c.delete(force=True)


async def test_gc_cli_with_engine_down_prints_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    out = await cli("gc", env=env)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"{tmp_path}/nothing.sock" in out.stderr and "DOCKER_HOST" in out.stderr
    out = await cli("gc", "--debug", env=env)
    assert out.returncode != 0 and "Traceback" in out.stderr


async def test_an_exec_leaves_no_reference_cycle_holding_its_connection() -> None:
    """The attach connection of a finished command is freed as soon as nobody holds it, not
    left in a reference cycle for the garbage collector (which then ran three times as
    often as for the same execs without it, the connection's socket and buffers in it)."""
    import gc as pygc

    async with busybox() as sb:
        await sb.execute_command("true")
        pygc.collect()
        pygc.disable()
        pygc.set_debug(pygc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                assert (await sb.execute_command("echo ok")).stdout == "ok\n"
            pygc.collect()
            held = sorted({type(o).__name__ for o in pygc.garbage
                           if type(o).__name__ in ("ResponseHandler", "FlowControlDataQueue")})
        finally:
            pygc.set_debug(0)
            pygc.garbage.clear()
            pygc.enable()
        assert held == []

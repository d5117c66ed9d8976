"""The session scenario: a command in a persistent shell against an exec per command.

Side by side in one run, interleaved: a `true` round trip through ``Session.run``, through
``execute_command`` (one exec each) and through raw aiodocker (one exec each); sequential
``echo`` loops; and 20 MiB of stdout through the session against an exec's. Peer SDKs (see
``impl_peers.py``) join where they are installed in the bench's virtualenv.
"""

from __future__ import annotations

from typing import Any

from common import MIB, Box
from impl_peers import peers

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig


class _Session:
    """``Session.run`` on a session opened once for the scenario."""

    name = "sandbox SDK session (run)"

    def __init__(self, session: Any) -> None:
        self.session = session

    async def exec_true(self, box: Box) -> None:
        result = await self.session.run("true")
        assert result.exit_code == 0, result

    async def echo(self, box: Box, text: str) -> None:
        result = await self.session.run(f"echo {text}")
        assert result.stdout == f"{text}\n", result

    async def stream(self, box: Box, nbytes: int) -> int:
        result = await self.session.run(f"head -c {nbytes} /dev/zero", max_output_bytes=nbytes)
        return len(result.stdout_bytes)


class _Exec:
    """An exec per command, through the SDK (``execute_command``) or raw aiodocker."""

    def __init__(self, impl: Any, name: str) -> None:
        self.impl = impl
        self.name = name

    async def exec_true(self, box: Box) -> None:
        await self.impl.exec_true(box)

    async def echo(self, box: Box, text: str) -> None:
        if hasattr(self.impl, "echo"):
            await self.impl.echo(box, text)
        else:
            result = await box.sb.execute_command(["echo", text])
            assert result.stdout == f"{text}\n", result

    async def stream(self, box: Box, nbytes: int) -> int:
        n: int = await (self.impl.capture(box, nbytes) if hasattr(self.impl, "capture")
                        else self.impl.stream(box, nbytes))
        return n


async def session_scenario(bench: Any) -> None:
    """Rows: `true` round trip, 100 and 1,000 sequential echos, 20 MiB of stdout."""
    sdk, raw = bench.impls[0], bench.impls[1]
    [box] = await bench.open_boxes(IMAGE_BUSYBOX, 1)
    try:
        async with box.sb.session() as session:
            impls = [_Session(session), _Exec(sdk, "sandbox SDK (execute_command)"),
                     _Exec(raw, "aiodocker")]
            # Alone first (the idle case), then interleaved with execs on the same sandbox,
            # where each session call starts while the engine still finishes the exec before.
            await bench.interleaved("command round trip `true`, session alone",
                                    bench.reps(100, 30), lambda impl: impl.exec_true(box),
                                    impls=impls[:1], warmup=5)
            await bench.interleaved("command round trip `true`", bench.reps(100, 30),
                                    lambda impl: impl.exec_true(box), impls=impls, warmup=5)

            async def echos(impl: Any, n: int) -> None:
                for i in range(n):
                    await impl.echo(box, f"e{i}")

            await bench.interleaved("100 sequential `echo`", bench.reps(3, 1),
                                    lambda impl: echos(impl, 100), impls=impls, unit="ms")
            await bench.interleaved("1,000 sequential `echo` (session)", bench.reps(5, 2),
                                    lambda impl: echos(impl, 1000), impls=impls[:1], unit="ms")
    finally:
        await bench.close_boxes([box])
    [pybox] = await bench.open_boxes(IMAGE_PYTHON, 1)
    try:
        async with pybox.sb.session() as session:
            impls = [_Session(session), _Exec(sdk, "sandbox SDK (execute_command)"),
                     _Exec(raw, "aiodocker")]

            async def op(impl: Any, nbytes: int = 20 * MIB) -> None:
                got = await impl.stream(pybox, nbytes)
                assert got == nbytes, (impl.name, got)

            await bench.interleaved("session: stdout 20 MiB", bench.reps(9, 3), op,
                                    unit="MiB/s", impls=impls, rate_mib=20)
    finally:
        await bench.close_boxes([pybox])


class _SDKCreate:
    """The SDK as the peers are measured: create, then one command; a session or an exec."""

    def __init__(self, session: bool) -> None:
        self.session = session
        self.name = "sandbox SDK session (run)" if session else "sandbox SDK (execute_command)"

    async def create(self, image: str) -> Any:
        sb = Sandbox(SandboxConfig(image=image))
        await sb.__aenter__()
        if not self.session:
            return sb, None, None
        cm = sb.session()
        return sb, cm, await cm.__aenter__()

    async def exec_true(self, handle: Any) -> None:
        sb, _, session = handle
        result = await (session.run("true") if session else sb.execute_command(["true"]))
        assert result.exit_code == 0, result

    async def remove(self, handle: Any) -> None:
        sb, cm, _ = handle
        if cm is not None:
            await cm.__aexit__(None, None, None)
        await sb.cleanup()


async def peers_scenario(bench: Any) -> None:
    """Create-to-first-command and a `true` round trip: the SDK beside each installed peer,
    on the python image (llm-sandbox wants a language image)."""
    impls = [_SDKCreate(True), _SDKCreate(False), *peers()]
    handles: dict[str, Any] = {}

    async def first(impl: Any) -> None:
        handle = await impl.create(IMAGE_PYTHON)
        await impl.exec_true(handle)
        handles.setdefault(impl.name, []).append(handle)

    try:
        await bench.interleaved("create to first command (python image)", bench.reps(3, 1),
                                first, impls=impls, warmup=0)
        for impl in impls:  # keep one of each for the round trips, remove the rest
            # Newest first: a session is a context manager, left in the reverse order.
            for handle in reversed(handles[impl.name][1:]):
                await impl.remove(handle)
            handles[impl.name] = handles[impl.name][:1]
        await bench.interleaved("command round trip `true` (peers)", bench.reps(15, 5),
                                lambda impl: impl.exec_true(handles[impl.name][0]),
                                impls=impls, warmup=1)
    finally:
        for impl in impls:
            for handle in handles.get(impl.name, []):
                try:
                    await impl.remove(handle)
                except Exception as exc:  # report, and let the sweep remove it
                    print(f"  {impl.name}: remove failed: {exc}", flush=True)

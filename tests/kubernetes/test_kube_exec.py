"""Exec over the channel protocol (v5 and v4): stdin and EOF, streams apart, exit codes,
timeouts that kill the whole tree, start failures that output cannot forge."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
import pytest_asyncio

from sandbox import Command, Sandbox
from sandbox._errors import (
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    EngineUnavailable,
    SandboxNotFound,
    StdinClosed,
)
from sandbox.kubernetes._exec import parse_status
from sandbox.kubernetes._gateway import Cluster, delete_options
from tests.kubernetes._cluster import Target, cluster
from tests.kubernetes._fake_apiserver import V4, V5


@pytest_asyncio.fixture(params=["cluster", "fake-v5"])
async def box(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sandbox]:
    """A sandbox on the real cluster (Kubernetes 1.20: v4 only), or on the fake API server
    speaking v4 only when no cluster is up; and on the fake offering v5 first, because no
    cluster here speaks v5 (1.30+)."""
    if request.param == "cluster":
        target = cluster(tmp_path, request.config, protocols=(V4,))
    else:
        target = cluster(tmp_path, request.config, fake_only=True, protocols=(V5, V4))
    async with target as kube, Sandbox(backend=kube.backend()) as sb:
        sb.kube = kube  # type: ignore[attr-defined]
        yield sb


def processes(sb: Sandbox) -> list[int]:
    """Processes in the fake Pod other than its keep-alive and the keep-alive's sleep."""
    kube: Target = sb.kube  # type: ignore[attr-defined]
    assert kube.fake is not None
    pod = kube.fake.pods[(kube.namespace, sb.backend.pod_name)]
    keep = pod.target
    return [p for p in pod.processes() if p != keep and _ppid(p) != keep]


async def gone(sb: Sandbox, patience: float = 5.0) -> None:
    """Wait until the killed processes have left (a SIGKILLed process takes a moment to be
    reaped); fail naming them if they outlive ``patience``."""
    left = processes(sb)
    with anyio.move_on_after(patience):
        while left:
            await anyio.sleep(0.05)
            left = processes(sb)
    assert left == []


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def test_parse_status() -> None:
    assert parse_status(b'{"metadata":{},"status":"Success"}') == (0, "")
    failure = (b'{"status":"Failure","reason":"NonZeroExitCode","message":"exit 3",'
               b'"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}')
    assert parse_status(failure) == (3, "")
    assert parse_status(failure.replace(b'"3"}', b'"300"}'))[0] is None
    assert parse_status(b'{"status":"Failure","message":"no such container"}') == \
        (None, "no such container")
    assert parse_status(b"\xff garbage")[0] is None


@pytest.mark.asyncio
async def test_protocol_is_negotiated(box: Sandbox) -> None:
    kube: Target = box.kube  # type: ignore[attr-defined]
    result = await box.execute_command("true")
    if kube.fake is not None:
        assert kube.fake.exec_protocols[-1] == kube.fake.protocols[0]
        assert result.metadata["exec_protocol"] == kube.fake.protocols[0]
    else:  # a 1.20 API server: v4, and the SDK's upgrade was accepted (no 406)
        assert result.metadata["exec_protocol"] == V4 == box.backend.exec_protocol


@pytest.mark.asyncio
async def test_streams_apart_and_exit_code(box: Sandbox) -> None:
    result = await box.execute_command("printf out; printf err >&2; exit 42")
    assert (result.stdout, result.stderr, result.exit_code) == ("out", "err", 42)
    assert not result.success
    chunks = []
    async with box.stream_command("echo a; echo b >&2") as proc:
        chunks = [(c.stream, c.data) async for c in proc]
        assert (await proc.wait()).exit_code == 0
    assert ("stdout", b"a\n") in chunks and ("stderr", b"b\n") in chunks


@pytest.mark.asyncio
async def test_stdin_and_eof(box: Sandbox) -> None:
    # Every byte value, in several stdin messages (v4's framed stdin is read at ~1 MB/s).
    data = bytes(range(256)) * (4096 if box.backend.exec_protocol == V5 else 1200)
    result = await box.execute_command(Command(executable="sh", args=(
        "-c", "wc -c; echo done"),
        stdin=data))
    assert result.stdout.split() == [str(len(data)), "done"]
    assert (await box.execute_command(Command(executable="cat", stdin=data))).stdout_bytes \
        == data
    # Interactive: the command sees EOF when we close stdin, and only then.
    async with box.stream_command("cat; echo eof") as proc:
        await proc.write_stdin(b"line\n")
        await proc.close_stdin()
        with anyio.fail_after(20):
            result = await proc.wait()
    assert result.stdout == "line\neof\n"


@pytest.mark.asyncio
async def test_timeout_kills_the_whole_tree(box: Sandbox) -> None:
    start = time.monotonic()
    result = await box.execute_command(Command(
        executable="sh", args=("-c", "sleep 300 & sleep 300 & echo started; wait"),
        timeout=timedelta(seconds=1)))
    assert time.monotonic() - start < 30
    assert result.timed_out and result.signal == "SIGKILL" and result.stdout == "started\n"
    if box.kube.fake is not None:  # type: ignore[attr-defined]
        assert processes(box) == []


@pytest.mark.asyncio
async def test_leaving_a_stream_kills_and_kill_signals(box: Sandbox) -> None:
    async with box.stream_command("trap 'echo term; exit 7' TERM; echo up; "
                                  "while :; do sleep 0.05; done") as proc:
        async for chunk in proc:
            assert chunk.data == b"up\n"
            break
        await proc.kill("TERM")
        with anyio.fail_after(20):
            result = await proc.wait()
    assert result.exit_code == 7 and "term" in result.stdout
    async with box.stream_command("sleep 300 & sleep 300") as proc:
        pass
    assert proc.result is None or not proc.result.success
    if box.kube.fake is not None:  # type: ignore[attr-defined]
        assert processes(box) == []


@pytest.mark.asyncio
async def test_start_failures(box: Sandbox) -> None:
    with pytest.raises(CommandNotFound):
        await box.execute_command(["no-such-program"])
    with pytest.raises(CommandNotExecutable):
        await box.execute_command(["/etc/passwd"])
    with pytest.raises(CommandStartFailed, match="working directory"):
        await box.execute_command(Command(executable="true", working_dir="/nope"))
    # Output that looks like the wrapper's report is output: the nonce is not known to it.
    result = await box.execute_command("printf 'sandbox-start-0:notfound\\n' >&2; exit 127")
    assert result.exit_code == 127 and "notfound" in result.stderr


@pytest.mark.asyncio
async def test_environment_and_workdir_per_command(box: Sandbox) -> None:
    box.set_environment({"A": "one two", "B": "$(x)"})
    result = await box.execute_command(Command(
        executable="sh", args=("-c", 'printf "%s|%s|%s" "$A" "$B" "$PWD"'),
        environment={"C": "c"}, working_dir="/tmp"))
    assert result.stdout == "one two|$(x)|/tmp"


@pytest.mark.asyncio
async def test_a_different_user_per_command_is_refused(box: Sandbox) -> None:
    # Kubernetes exec cannot switch users: a read-only (nobody) command is refused, not run
    # as the sandbox user with write access.
    with pytest.raises(CommandStartFailed, match="Pod's user"):
        await box.execute_command(Command(executable="true", allow_write=False))


@pytest.mark.asyncio
async def test_pod_removed_from_outside(box: Sandbox) -> None:
    kube: Target = box.kube  # type: ignore[attr-defined]
    cluster_ = await Cluster.connect(kubeconfig=kube.kubeconfig, context=None,
                                     in_cluster=False)
    try:
        await cluster_.call("remove the Pod behind the SDK's back", "DELETE",
                            f"/api/v1/namespaces/{kube.namespace}/pods/{box.backend.pod_name}",
                            body=delete_options(""))
    finally:
        await cluster_.close()
    with pytest.raises(SandboxNotFound):
        await box.execute_command("true")


@pytest.mark.asyncio
async def test_a_broken_stream_kills_the_command_and_says_so(box: Sandbox) -> None:
    """Fake only: fault injection (the API server drops the exec streams)."""
    kube: Target = box.kube  # type: ignore[attr-defined]
    if kube.fake is None:
        pytest.skip("fault injection: the fake's case of this test covers it")
    with pytest.raises(EngineUnavailable, match="exec stream"):
        async with box.stream_command("echo up; sleep 300") as proc:
            async for _chunk in proc:
                await kube.fake.drop_exec_streams()
            with anyio.fail_after(30):
                await proc.wait()
    await gone(box)
    assert (await box.execute_command("echo still")).stdout == "still\n"


@pytest.mark.asyncio
async def test_the_stdin_messages_on_the_wire(box: Sandbox) -> None:
    """v5: data on channel 0, then the close message [255, 0]. v4: the wrapper's frames, a
    length line before each piece and "0" for EOF, all on channel 0. Fake only: it reads the
    frames the server received."""
    kube: Target = box.kube  # type: ignore[attr-defined]
    if kube.fake is None:
        pytest.skip("reads the frames the fake received; the fake's case covers it")
    async with box.stream_command("cat") as proc:
        await proc.write_stdin(b"hi")
        await proc.close_stdin()
        with anyio.fail_after(20):
            assert (await proc.wait()).stdout == "hi"
    frames = kube.fake.client_frames[-1]
    if kube.fake.protocols[0] == V5:
        assert frames == [b"\x00hi", b"\xff\x00"]
    else:
        assert frames == [b"\x002\nhi", b"\x000\n"]


@pytest.mark.asyncio
async def test_stdin_after_the_end_is_closed(box: Sandbox) -> None:
    async with box.stream_command("head -c 3 >/dev/null; echo read") as proc:
        await proc.write_stdin(b"abc")
        with anyio.fail_after(30), pytest.raises(StdinClosed):
            while True:  # the command stopped reading; writes fail once it has ended
                await proc.write_stdin(b"x" * 65536)
        assert (await proc.wait()).stdout == "read\n"


@pytest.mark.asyncio
async def test_idle_timeout_and_output_cap(box: Sandbox) -> None:
    idle = await box.execute_command(Command(
        executable="sh", args=("-c", "echo once; sleep 300"), idle_timeout=timedelta(seconds=1)))
    assert idle.timed_out and "idle timeout" in idle.error and idle.stdout == "once\n"
    capped = await box.execute_command(Command(
        executable="sh", args=("-c", "head -c 100000 /dev/zero"), max_output_bytes=1000))
    assert capped.truncated and len(capped.stdout_bytes) == 1000 and capped.exit_code == 0


@pytest.mark.asyncio
async def test_the_commands_variables_do_not_bend_the_wrapper(box: Sandbox) -> None:
    # The wrapper's own names, and IFS, which its reads use.
    box.set_environment({"n": "x", "d": "/tmp", "f": "framed", "IFS": "x", "me": "1"})
    result = await box.execute_command(["sh", "-c", 'printf "%s|%s" "$PWD" "$d"'])
    assert result.stdout == "/workspace|/tmp"
    with pytest.raises(CommandNotFound):
        await box.execute_command(["no-such-program"])
    async with box.stream_command("exit 4") as proc:  # v4: the decoder still ends with it
        with anyio.fail_after(20):
            assert (await proc.wait()).exit_code == 4

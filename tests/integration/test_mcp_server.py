"""`python -m sandbox mcp` driven by the mcp package's own stdio client, on the real engine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, SandboxConfig, gc, to_json
from sandbox._constants import LABEL_OWNER_PID
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def labelled(mark: str) -> list[dict[str, Any]]:
    """The containers carrying this test's label, as `docker inspect` shows them."""
    ids = docker_cli("ps", "-aq", "--filter", f"label=test.mcp={mark}").split()
    return json.loads(docker_cli("inspect", *ids)) if ids else []


@asynccontextmanager
async def server(tmp_path: Path, *extra: str,
                 image: str = IMAGE_BUSYBOX) -> AsyncIterator[tuple[ClientSession, str]]:
    """The server on stdio, its sandbox labelled with a fresh mark; yields (session, mark)."""
    mark = uuid.uuid4().hex
    config = tmp_path / "config.json"
    config.write_text(to_json(SandboxConfig(image=image, labels={"test.mcp": mark})))
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "sandbox", "mcp", "--config", str(config), *extra],
                                   env={"PYTHONPATH": os.getcwd()})
    with open(tmp_path / "server.err", "w") as errlog:  # noqa: ASYNC230
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            with anyio.fail_after(60):
                await session.initialize()
            yield session, mark


def wait_dead(pid: int, within: float = 60) -> None:
    """Until ``pid`` is gone or a zombie (its parent, the client, reaps it later)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs after {within:g} s")


def text(result: Any) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content)


def structured(result: Any) -> Any:
    assert not result.is_error, result
    return result.structured_content


async def test_tools_run_commands_and_move_files(tmp_path: Path) -> None:
    async with server(tmp_path, "--memory", "256m") as (session, mark):
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"run_command", "read_file", "write_file", "list_files",
                         "resource_usage", "session_run", "session_poll", "session_write",
                         "session_kill"}
        [container] = labelled(mark)
        assert container["State"]["Running"]
        assert container["HostConfig"]["Memory"] == 256 * 1024 * 1024

        ran = structured(await session.call_tool(
            "run_command", {"command": "echo out; echo err >&2; exit 3"}))
        assert (ran["exit_code"], ran["stdout"], ran["stderr"]) == (3, "out\n", "err\n")
        assert ran["timed_out"] is False

        with anyio.fail_after(30):
            slow = structured(await session.call_tool(
                "run_command", {"command": "sleep 60", "timeout": 1}))
        assert slow["timed_out"] is True

        assert "wrote 6 bytes" in text(await session.call_tool(
            "write_file", {"path": "notes/a.txt", "content": "hello\n"}))
        assert text(await session.call_tool("read_file", {"path": "notes/a.txt"})) == "hello\n"
        listing = structured(await session.call_tool("list_files", {"path": "notes"}))
        assert [(e["name"], e["size"]) for e in listing["result"]] == [("a.txt", 6)]
        # What the tool wrote is really in the container.
        assert docker_cli("exec", container["Id"], "cat", "/workspace/notes/a.txt") == "hello\n"

        usage = structured(await session.call_tool("resource_usage", {}))
        assert usage["memory_usage"] > 0 and usage["process_count"] >= 1

        missing = await session.call_tool("read_file", {"path": "/nope"})
        assert missing.is_error and "/nope" in "".join(c.text for c in missing.content)
    # The client went away (stdin closed): the server removed the sandbox before exiting.
    assert labelled(mark) == []


def vm_kib(pid: int, field: str) -> int:
    """A VmHWM (peak) or VmRSS line of /proc/<pid>/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


async def test_read_file_on_a_huge_sparse_file_keeps_the_server_small(tmp_path: Path) -> None:
    """Issue 26: read_file read the whole file (up to 1 GiB) to show max_bytes of it; two
    calls on a sparse 1000 MiB file took the server from 83 MB to over 2 GB."""
    async with server(tmp_path) as (session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        made = structured(await session.call_tool(
            "run_command", {"command": "printf 'top\\n' > big; truncate -s 1000M big"}))
        assert made["exit_code"] == 0, made
        before = vm_kib(owner, "VmHWM")
        with anyio.fail_after(120):
            for _ in range(2):
                shown = text(await session.call_tool("read_file", {"path": "big"}))
                assert shown.startswith("top\n") and len(shown) < (1 << 20) + 100
                assert shown.endswith(f"[... {1000 * (1 << 20) - (1 << 20)} more bytes not "
                                      "shown]")
            small = text(await session.call_tool("read_file", {"path": "big", "max_bytes": 3}))
            assert small == "top\n[... 1048575997 more bytes not shown]"
        grown_mib = (vm_kib(owner, "VmHWM") - before) / 1024
        assert grown_mib < 200, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
        too_much = await session.call_tool("read_file", {"path": "big", "max_bytes": 1 << 30})
        assert too_much.is_error and "max_bytes" in too_much.content[0].text


def ps(container: dict[str, Any]) -> str:
    """The container's process list, as `docker top` shows it (not through the SDK)."""
    return docker_cli("top", container["Id"])


async def test_session_tools_keep_state_and_come_back_to_jobs(tmp_path: Path) -> None:
    # bash: a started command runs in the shell itself (lastpipe); under a POSIX sh its cd
    # and export would be lost (README, Sessions).
    async with server(tmp_path, image=IMAGE_PYTHON) as (session, mark):
        [container] = labelled(mark)
        with anyio.fail_after(60):
            ran = structured(await session.call_tool("session_run", {"command": "cd /tmp"}))
            assert (ran["status"], ran["exit_code"]) == ("exited", 0)
            ran = structured(await session.call_tool(
                "session_run", {"command": "export GREETING=hi; pwd; echo $GREETING"}))
            assert (ran["exit_code"], ran["stdout"], ran["cwd"]) == (0, "/tmp\nhi\n", "/tmp")

            # Not done within yield_after: a job id and the output so far, then its end.
            ran = structured(await session.call_tool(
                "session_run", {"command": "echo early; sleep 2; echo done",
                                "yield_after": 0.5}))
            assert ran["status"] == "running" and ran["output"] == "early\n"
            job = ran["job_id"]
            refused = await session.call_tool("session_run", {"command": "true"})
            assert refused.is_error and job in refused.content[0].text
            polled = structured(await session.call_tool(
                "session_poll", {"job_id": job, "yield_after": 30}))
            assert (polled["status"], polled["exit_code"]) == ("exited", 0)
            assert polled["stdout"] == "early\ndone\n"
            gone = await session.call_tool("session_poll", {"job_id": job})
            assert gone.is_error and "no running session job" in gone.content[0].text

            # Input to a job waiting for it.
            ran = structured(await session.call_tool(
                "session_run", {"command": "read line; echo got $line", "yield_after": 0.2}))
            assert ran["status"] == "running"
            assert "wrote 4 bytes" in text(await session.call_tool(
                "session_write", {"job_id": ran["job_id"], "text": "abc\n"}))
            polled = structured(await session.call_tool(
                "session_poll", {"job_id": ran["job_id"], "yield_after": 30}))
            assert (polled["exit_code"], polled["stdout"]) == (0, "got abc\n")

            # A killed job ends, with what it started, and the session lives on.
            ran = structured(await session.call_tool(
                "session_run", {"command": "sleep 100", "yield_after": 0.2}))
            assert ran["status"] == "running" and "sleep 100" in ps(container)
            killed = structured(await session.call_tool("session_kill",
                                                        {"job_id": ran["job_id"]}))
            assert killed["status"] == "exited" and killed["exit_code"] != 0
            assert "sleep 100" not in ps(container)
            ran = structured(await session.call_tool("session_run", {"command": "pwd"}))
            assert ran["stdout"] == "/tmp\n"

            # Two at once: one job, one refusal naming it (not a call stuck behind the job).
            calls: list[Any] = []

            async def call() -> None:
                calls.append(await session.call_tool(
                    "session_run", {"command": "sleep 100", "yield_after": 1}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                tg.start_soon(call)
            [job] = [structured(c)["job_id"] for c in calls if not c.is_error]
            [refused] = [c for c in calls if c.is_error]
            assert job in refused.content[0].text
            await session.call_tool("session_kill", {"job_id": job})

            # Output given to the model is bounded, keeping its head and tail.
            ran = structured(await session.call_tool(
                "session_run", {"command": "echo first; seq 1 200000; echo last"}))
            assert len(ran["stdout"]) < 20_000 and "omitted" in ran["stdout"]
            assert ran["stdout"].startswith("first\n") and ran["stdout"].endswith("last\n")

            bad = await session.call_tool("session_run", {"command": "true",
                                                          "yield_after": -1})
            assert bad.is_error and "yield_after" in bad.content[0].text

            # A job still running when the client goes away does not keep the server.
            ran = structured(await session.call_tool(
                "session_run", {"command": "sleep 100", "yield_after": 0}))
            assert ran["status"] == "running"
            started = time.monotonic()
    assert time.monotonic() - started < 60
    assert labelled(mark) == []


async def test_a_killed_server_leaves_a_sandbox_gc_finds(tmp_path: Path) -> None:
    async with server(tmp_path) as (_session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        os.kill(owner, signal.SIGKILL)
        await anyio.to_thread.run_sync(wait_dead, owner)
    try:
        assert [c["Id"] for c in labelled(mark)] == [container["Id"]]
        report = await gc(dry_run=True)
        assert container["Id"] in [item.id for item in report.removed]
    finally:
        docker_cli("rm", "-f", container["Id"])


async def test_sigterm_removes_the_sandbox(tmp_path: Path) -> None:
    async with server(tmp_path) as (_session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        os.kill(owner, signal.SIGTERM)
        # While the client still holds stdin open: the signal alone ends it.
        await anyio.to_thread.run_sync(wait_dead, owner)
    assert labelled(mark) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def http_server(tmp_path: Path, *extra: str,
                      env: dict[str, str] | None = None) -> AsyncIterator[HttpServer]:
    """``sandbox mcp --http`` (or with --unix-socket in ``extra``) until it listens; its
    sandbox is labelled with a fresh mark. Leaving stops it with SIGTERM (exit 143)."""
    mark = uuid.uuid4().hex
    config = tmp_path / "config.json"
    config.write_text(to_json(SandboxConfig(image=IMAGE_BUSYBOX, labels={"test.mcp": mark})))
    port = free_port()
    errlog = tmp_path / "server.err"
    socket_path = extra[extra.index("--unix-socket") + 1] if "--unix-socket" in extra else ""
    with open(errlog, "wb") as err:  # noqa: ASYNC230
        proc = await anyio.open_process(
            [sys.executable, "-m", "sandbox", "mcp", "--http", "--port", str(port),
             "--config", str(config), *extra], stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})})
    try:
        with anyio.fail_after(60):
            while b"Application startup complete" not in errlog.read_bytes():
                assert proc.returncode is None, errlog.read_text()
                await anyio.sleep(0.1)
            if socket_path:
                assert stat.S_ISSOCK(os.stat(socket_path).st_mode)
            else:
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
        yield HttpServer(proc, f"http://127.0.0.1:{port}/mcp", mark, errlog)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            assert await proc.wait() == 143
        assert labelled(mark) == []
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.aclose()
        for c in labelled(mark):
            docker_cli("rm", "-f", c["Id"])


class HttpServer:
    def __init__(self, proc: Any, url: str, mark: str, errlog: Path) -> None:
        self.proc, self.url, self.mark, self.errlog = proc, url, mark, errlog

    @property
    def stderr(self) -> str:
        return self.errlog.read_text()

    def token_file(self) -> Path:
        [line] = [ln for ln in self.stderr.splitlines() if "token file: " in ln]
        return Path(line.split("token file: ", 1)[1].removesuffix(" (mode 0600)"))


def http_client(token: str = "", session_ids: list[str] | None = None,
                statuses: list[int] | None = None, **options: Any) -> httpx2.AsyncClient:
    """The client the mcp package's transport uses, with a token; it notes the session ids
    and response statuses seen."""
    async def seen(response: httpx2.Response) -> None:
        if session_ids is not None and (sid := response.headers.get("mcp-session-id")):
            session_ids.append(sid)
        if statuses is not None:
            statuses.append(response.status_code)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(headers=headers, event_hooks={"response": [seen]}, **options)


def tools_call(session_id: str, command: str) -> dict[str, Any]:
    """What an attacker posts: a run_command call into someone else's session."""
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": command}},
            "_headers": {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18",
                         "accept": "application/json, text/event-stream"}}


async def post_as_attacker(url: str, session_id: str, command: str,
                           token: str = "") -> httpx2.Response:
    body = tools_call(session_id, command)
    headers = body.pop("_headers")
    if token:
        headers["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient() as raw:
        return await raw.post(url, json=body, headers=headers)


def exists_in(container: dict[str, Any], path: str) -> bool:
    """Whether ``path`` exists in the container, asked of the engine (not the SDK)."""
    return docker_cli("exec", container["Id"], "sh", "-c",
                      f"test -e {path} && echo yes || echo no").strip() == "yes"


async def test_streamable_http_needs_the_token(tmp_path: Path) -> None:
    """Issue 26: any local user could drive the HTTP server. Now a request without the
    token gets 401 and runs no tool, even inside a session the owner opened."""
    run = tmp_path / "run"
    run.mkdir()
    async with http_server(tmp_path, env={"XDG_RUNTIME_DIR": str(run)}) as srv:
        token_file = srv.token_file()
        assert token_file.parent == run / "sandbox"
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 40 and srv.stderr.count(token) == 1  # printed once
        [container] = labelled(srv.mark)
        with anyio.fail_after(60):
            # The official client without the token (or with a wrong one) is refused.
            for wrong in ("", token[:-1] + ("A" if token[-1] != "A" else "B")):
                statuses: list[int] = []
                with pytest.raises(BaseException, match="unhandled errors"):
                    async with http_client(wrong, statuses=statuses) as client, \
                            streamable_http_client(srv.url, http_client=client) as (r, w), \
                            ClientSession(r, w) as session:
                        await session.initialize()
                assert statuses and set(statuses) == {401}, statuses
            # With it, it works; an attacker holding the session id but not the token
            # cannot run a command in that session.
            sids: list[str] = []
            async with http_client(token, sids) as client, \
                    streamable_http_client(srv.url, http_client=client) as (r, w), \
                    ClientSession(r, w) as session:
                await session.initialize()
                ran = structured(await session.call_tool("run_command",
                                                         {"command": "echo over http"}))
                assert ran["stdout"] == "over http\n"
                for guess in ("", "x" * len(token)):
                    denied = await post_as_attacker(srv.url, sids[0], "touch /tmp/pwned",
                                                    guess)
                    assert denied.status_code == 401, denied.text
                assert not exists_in(container, "/tmp/pwned")
                # The same post with the token does run (the refusal was the token's).
                allowed = await post_as_attacker(srv.url, sids[0], "touch /tmp/owner", token)
                assert allowed.status_code == 200, allowed.text
                assert exists_in(container, "/tmp/owner")
    assert not token_file.exists()  # removed with the server


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
          "-c"]
#: Another local user: tries to read the token, then to initialize without it and with a guess.
OTHER_USER = r"""
import json, sys, urllib.error, urllib.request
path, url = sys.argv[1], sys.argv[2]
out = {}
try:
    out["token"] = open(path).read()
except OSError as exc:
    out["token_error"] = exc.__class__.__name__
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "intruder", "version": "1"}}}
for name, auth in (("no_token", None), ("guessed", "Bearer guessed")):
    req = urllib.request.Request(url, data=json.dumps(init).encode(), method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    if auth:
        req.add_header("authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            out[name] = resp.status
    except urllib.error.HTTPError as exc:
        out[name] = exc.code
print(json.dumps(out))
"""


def shared_tmp() -> Path:
    """A directory every user can enter (pytest's tmp_path is the test user's alone), so
    only the server's own permissions stand between another user and its files."""
    path = Path(tempfile.mkdtemp(prefix="mcp-auth-"))
    path.chmod(0o755)
    return path


async def test_another_local_user_cannot_read_the_token_or_drive_the_server(
        tmp_path: Path) -> None:
    run = shared_tmp()
    try:
        async with http_server(tmp_path, env={"XDG_RUNTIME_DIR": str(run)}) as srv:
            with anyio.fail_after(60):
                other = await anyio.run_process(
                    [*NOBODY, OTHER_USER, str(srv.token_file()), srv.url], check=False)
            assert other.returncode == 0, other.stderr
            seen = json.loads(other.stdout)
            assert seen == {"token_error": "PermissionError", "no_token": 401, "guessed": 401}
    finally:
        shutil.rmtree(run, ignore_errors=True)


#: Another local user connecting to the unix socket.
OTHER_USER_SOCKET = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as exc:
    print(exc.__class__.__name__)
"""


async def test_unix_socket_serves_only_its_user(tmp_path: Path) -> None:
    where = shared_tmp()
    path = where / "mcp.sock"
    try:
        async with http_server(tmp_path, "--unix-socket", str(path)) as srv:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert "token" not in srv.stderr
            with anyio.fail_after(60):
                transport = httpx2.AsyncHTTPTransport(uds=str(path))
                async with http_client(transport=transport) as client, \
                        streamable_http_client("http://localhost/mcp",
                                               http_client=client) as (r, w), \
                        ClientSession(r, w) as session:
                    await session.initialize()
                    ran = structured(await session.call_tool("run_command",
                                                             {"command": "echo over a socket"}))
                    assert ran["stdout"] == "over a socket\n"
                other = await anyio.run_process([*NOBODY, OTHER_USER_SOCKET, str(path)],
                                                check=False)
            assert other.stdout.decode().strip() == "PermissionError", other
        assert not path.exists()  # removed with the server
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_no_auth_serves_anyone_with_a_loud_warning(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--no-auth") as srv:
        assert "WARNING: --no-auth: ANY LOCAL USER" in srv.stderr
        with anyio.fail_after(60):
            async with http_client() as client, \
                    streamable_http_client(srv.url, http_client=client) as (r, w), \
                    ClientSession(r, w) as session:
                await session.initialize()
                assert structured(await session.call_tool(
                    "run_command", {"command": "echo open"}))["stdout"] == "open\n"


@pytest.mark.parametrize("flags", [["--no-auth", "--unix-socket", "/tmp/x.sock"],
                                   ["--token-file", "/tmp/t", "--unix-socket", "/tmp/x.sock"],
                                   ["--no-auth"]])
async def test_http_flags_that_do_not_go_together_are_refused(flags: list[str]) -> None:
    http = [] if flags == ["--no-auth"] else ["--http"]
    with anyio.fail_after(60):
        proc = await anyio.run_process([sys.executable, "-m", "sandbox", "mcp", *http, *flags],
                                       check=False)
    assert proc.returncode == 2 and b"error:" in proc.stderr, proc.stderr


async def test_http_refuses_an_address_other_than_loopback() -> None:
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-m", "sandbox", "mcp", "--http", "--host", "0.0.0.0"],
            check=False)
    assert proc.returncode == 2
    assert b"loopback only" in proc.stderr


async def test_http_on_a_taken_port_fails_clearly_and_tells_no_token(tmp_path: Path) -> None:
    """Another local user listening on 127.0.0.1:PORT first: the server must not announce a
    URL and a token that the squatter would receive; it fails before making a sandbox."""
    mark = uuid.uuid4().hex
    config = tmp_path / "config.json"
    config.write_text(to_json(SandboxConfig(image=IMAGE_BUSYBOX, labels={"test.mcp": mark})))
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    with socket.create_server(("127.0.0.1", 0)) as squatter, anyio.fail_after(60):
        port = squatter.getsockname()[1]
        proc = await anyio.run_process(
            [sys.executable, "-m", "sandbox", "mcp", "--http", "--port", str(port),
             "--config", str(config)], check=False,
            env={**os.environ, "PYTHONPATH": os.getcwd(), "XDG_RUNTIME_DIR": str(run)})
    err = proc.stderr.decode()
    assert proc.returncode != 0 and f"port {port} is already in use" in err, err
    assert "token:" not in err and "token file" not in err and "serving" not in err, err
    assert not list(run.rglob("*.token")) and labelled(mark) == []

"""An MCP client driving `python -m sandbox mcp`: what a coding agent's host does.

The client starts the server as a subprocess speaking MCP on stdin/stdout (the server creates
one sandbox), lists its tools, and calls them: write a script, run it, read what it wrote,
use the persistent session (a `cd` that carries over, a slow command polled to its end),
look at the resource use. When the client closes, the server removes the sandbox.

    pip install 'sandbox[mcp]'
    python examples/mcp_client.py
"""

from __future__ import annotations

import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from sandbox import IMAGE_PYTHON

SCRIPT = """\
import platform, os
print("hello from", platform.system(), "as uid", os.getuid())
open("out.txt", "w").write("written inside the sandbox\\n")
"""


def text(result: object) -> str:
    return "".join(getattr(c, "text", "") for c in getattr(result, "content", []))


async def main() -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sandbox", "mcp", "--image", IMAGE_PYTHON, "--memory", "512m"],
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))

        print(text(await session.call_tool("write_file",
                                           {"path": "hello.py", "content": SCRIPT})))
        ran = await session.call_tool("run_command", {"command": "python3 hello.py",
                                                      "timeout": 30})
        result = ran.structured_content or {}
        print(f"run_command: exit {result.get('exit_code')}, stdout: "
              f"{str(result.get('stdout')).strip()}")
        print("read_file out.txt:", text(await session.call_tool("read_file",
                                                               {"path": "out.txt"})).strip())
        listing = (await session.call_tool("list_files", {"path": "."})).structured_content
        names = sorted(e["name"] for e in (listing or {}).get("result", []))
        print("list_files:", ", ".join(names))
        slow = await session.call_tool("run_command", {"command": "sleep 30", "timeout": 1})
        print("a command past its timeout: timed_out =",
              (slow.structured_content or {}).get("timed_out"))
        # The persistent session: cd carries over, and a long command comes back early.
        await session.call_tool("session_run", {"command": "cd /tmp"})
        job = (await session.call_tool("session_run", {
            "command": "pwd; sleep 2; echo built", "yield_after": 0.5})).structured_content or {}
        print(f"session_run: {job.get('status')} as job {job.get('job_id')}, so far: "
              f"{str(job.get('output')).strip()}")
        done = (await session.call_tool("session_poll", {
            "job_id": job.get("job_id", ""), "yield_after": 30})).structured_content or {}
        print(f"session_poll: exit {done.get('exit_code')}, stdout: "
              f"{' '.join(str(done.get('stdout')).split())}")
        usage = (await session.call_tool("resource_usage", {})).structured_content or {}
        print(f"resource_usage: {usage.get('memory_usage', 0) // 1024} KiB of memory, "
              f"{usage.get('process_count')} processes")
    print("client closed; the server removed its sandbox")


if __name__ == "__main__":
    asyncio.run(main())

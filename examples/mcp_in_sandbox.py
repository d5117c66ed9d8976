"""An agent using an untrusted MCP server that runs inside the sandbox.

`SandboxConfig.mcp_servers` starts the server in the sandbox (isolated, no network, limited
memory, as an unprivileged user), and `Sandbox.mcp_client` hands the agent an MCP session
over the server's stdin/stdout. The "model" here is a stand-in that picks tool calls from the
server's tool list. The server is examples/servers/tiny_mcp_server.py (standard library only),
passed to `python3 -c`; a server installed in the image would be named by its command.

    pip install 'sandbox[mcp]'
    python examples/mcp_in_sandbox.py
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from sandbox import (
    IMAGE_PYTHON,
    McpServerFailed,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
)

SERVER = (Path(__file__).parent / "servers" / "tiny_mcp_server.py").read_text()


def plan(tool_names: list[str]) -> list[tuple[str, dict[str, object]]]:
    """Stand-in for a model: decide which tools to call, given what the server offers."""
    calls: list[tuple[str, dict[str, object]]] = []
    if "whoami" in tool_names:
        calls.append(("whoami", {}))
    if "add" in tool_names:
        calls.append(("add", {"a": 19, "b": 23}))
    if "run_python" in tool_names:
        calls.append(("run_python", {"code": "import os\n"
                                     "print('sees the host files:', os.path.exists("
                                     "'/root/.ssh'), '- cores:', os.cpu_count())"}))
    return calls


async def main() -> None:
    config = SandboxConfig(
        image=IMAGE_PYTHON, tools=["python3"],
        mcp_servers=["tiny=" + shlex.join(["python3", "-c", SERVER])],
        resources=ResourceLimits(memory_limit=256 * 1024 * 1024),
    )
    async with Sandbox(config) as sb:
        print("python3 in the sandbox:", (await sb.get_info()).tools["python3"])
        async with sb.mcp_client("tiny") as session:
            tools = [t.name for t in (await session.list_tools()).tools]
            print("the server offers:", ", ".join(tools))
            for name, args in plan(tools):
                result = await session.call_tool(name, args)
                answer = "".join(getattr(c, "text", "") for c in result.content).strip()
                print(f"agent called {name}: {answer}")
        # A server that dies is reported with its exit status and the end of its stderr.
        try:
            async with sb.mcp_client("tiny") as session:
                await session.call_tool("crash", {})
        except McpServerFailed as exc:
            print("the server crashed:", str(exc).split(") ", 1)[-1])
    print("sandbox removed, and the server with it")


if __name__ == "__main__":
    asyncio.run(main())

"""A tiny MCP server over stdio, standard library only, to run inside a sandbox.

It speaks just enough of the Model Context Protocol (JSON-RPC 2.0, one message per line) for
a client to initialize, list its tools and call them. Tools: ``add`` (two numbers),
``run_python`` (runs code with this interpreter and returns what it printed), ``whoami``
(uid and working directory, to show where it runs), and ``crash`` (exits with status 3 after
a line on stderr, to show how a dead server is reported). Run it as
``python3 tiny_mcp_server.py`` or pass its source to ``python3 -c``.
"""

import json
import os
import subprocess
import sys

TOOLS = [
    {"name": "add", "description": "Add two numbers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "number"},
                                                      "b": {"type": "number"}},
                     "required": ["a", "b"]}},
    {"name": "run_python", "description": "Run Python code; return what it printed.",
     "inputSchema": {"type": "object", "properties": {"code": {"type": "string"}},
                     "required": ["code"]}},
    {"name": "whoami", "description": "The server's uid and working directory.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "crash", "description": "Exit at once with status 3.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def call(name, args):
    if name == "add":
        return str(args["a"] + args["b"])
    if name == "run_python":
        done = subprocess.run([sys.executable, "-c", args["code"]], capture_output=True,
                              text=True, timeout=30)
        return done.stdout + done.stderr
    if name == "whoami":
        return f"uid={os.getuid()} cwd={os.getcwd()}"
    if name == "crash":
        sys.stderr.write("tiny server: crashing as asked\n")
        sys.stderr.flush()
        os._exit(3)
    raise KeyError(name)


def answer(request):
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        try:
            text = call(params.get("name"), params.get("arguments") or {})
        except KeyError:
            return {"content": [{"type": "text", "text": "no such tool"}], "isError": True}
        return {"content": [{"type": "text", "text": text}], "isError": False}
    raise LookupError(method)


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue  # a notification or a response: nothing to answer
        reply = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            reply["result"] = answer(request)
        except LookupError as exc:
            reply["error"] = {"code": -32601, "message": f"method not found: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Quickstart: start a sandbox, run commands with live output, move files, read the result.

Run with `make demo` (it starts an engine and builds the local images first), or
`python examples/quickstart.py` when they exist.
"""

from __future__ import annotations

import asyncio
import sys

from sandbox import IMAGE_PYTHON, Command, Sandbox, SandboxConfig


async def main() -> None:
    config = SandboxConfig(image=IMAGE_PYTHON, environment={"GREETING": "hello"})
    async with Sandbox(config) as sb:
        print(f"sandbox {sb.id} is {sb.status.value}")

        script = "import os\nprint(os.environ['GREETING'], 'from', os.uname().nodename)\n"
        await sb.write_file("hello.py", script)
        result = await sb.execute_command("python3 hello.py")
        print(f"python3 said: {result.stdout.strip()} (exit {result.exit_code}, "
              f"{result.duration.total_seconds() * 1000:.0f} ms)")

        print("streaming a slow command:")
        await sb.execute_command(
            "for i in 1 2 3; do echo tick $i; sleep 0.3; done",
            on_stdout=lambda chunk: sys.stdout.write("  | " + chunk.decode()),
        )

        timed = await sb.execute_command(Command.shell("sleep 60", timeout=1))
        print(f"a command over its timeout: timed_out={timed.timed_out} signal={timed.signal}")

        files = await sb.list_files(".")
        print("files:", ", ".join(f"{f.name} {f.permissions} {f.size}B" for f in files))
        info = await sb.get_info()
        print(f"runtime={info.runtime} image={info.image} hostname={info.hostname}")
    print(f"cleaned up: {sb.status.value}")


if __name__ == "__main__":
    asyncio.run(main())

"""A tiny scripted "agent": write code, run it, read the error, fix it, run it again.

Shows the loop an AI agent drives through the SDK: `write_file` puts the code in the sandbox,
`stream_command` runs it with output printed as it arrives, the failure comes back in the
`CommandResult` (not as an exception), `read_file` gets the code back for the fix. The "model"
here is a stand-in function that patches the line a traceback points at.

    python examples/agent_loop.py
"""

from __future__ import annotations

import asyncio
import re

from sandbox import IMAGE_PYTHON, CommandResult, Sandbox, SandboxConfig

FIRST_DRAFT = '''\
import time

def mean(values):
    return sum(values) / len(value)

for n in (3, 4, 5):
    print(f"step {n}: mean of 1..{n} =", mean(range(1, n + 1)), flush=True)
    time.sleep(0.2)
'''


def propose_fix(source: str, error: str) -> str | None:
    """Stand-in for a model call: fix a NameError by using the closest defined name."""
    missing = re.search(r"NameError: name '(\w+)' is not defined", error)
    line = re.findall(r'File ".*", line (\d+)', error)
    if not missing or not line:
        return None
    lines = source.splitlines(keepends=True)
    n = int(line[-1]) - 1
    known = set(re.findall(r"\b(\w+)\b", "".join(lines[:n])))
    wrong = missing[1]
    candidates = sorted(k for k in known if k.startswith(wrong) and k != wrong)
    if not candidates:
        return None
    lines[n] = re.sub(rf"\b{wrong}\b", candidates[0], lines[n])
    print(f"agent: line {n + 1} uses {wrong!r}; replacing it with {candidates[0]!r}")
    return "".join(lines)


async def run_streaming(sb: Sandbox, argv: list[str]) -> CommandResult:
    """Run a command, echoing its output (both streams, marked) line by line as it comes."""
    async with sb.stream_command(argv) as proc:
        await proc.close_stdin()
        async for chunk in proc:
            for line in chunk.data.decode(errors="replace").splitlines():
                print(f"  {chunk.stream}| {line}", flush=True)
        return await proc.wait()


async def main() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        await sb.write_file("solution.py", FIRST_DRAFT)
        print("agent: wrote solution.py")
        for attempt in range(1, 4):
            print(f"agent: attempt {attempt}: python3 solution.py")
            result = await run_streaming(sb, ["python3", "solution.py"])
            if result.success:
                print(f"agent: success after {attempt} attempt(s)")
                return
            print(f"agent: exit code {result.exit_code}; reading the error")
            source = (await sb.read_file("solution.py")).decode()
            fixed = propose_fix(source, result.stderr)
            if fixed is None:
                break
            await sb.write_file("solution.py", fixed)
        raise SystemExit("agent: gave up")


if __name__ == "__main__":
    asyncio.run(main())

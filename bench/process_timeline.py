"""Where a cold process-sandbox round trip goes, stage by stage, from kernel trace events.

`process_breakdown.py` says how long a round trip takes and how much CPU each side spends;
this says *when* each side runs. For ``execute_command(["true"])`` in one process sandbox,
each right after an idle gap (``--gap``, default 30 ms: this VM's idle vCPUs halt and the
caches go cold) or right after a Docker exec (``--after-docker``), it records the scheduler's
events (switches, wake-ups, exec, exit) and every ``sendmsg`` with ftrace, and prints the
median of each stage:

* ``sdk before send``: ``execute_command`` called, to the SDK's ``sendmsg`` of the request;
* ``zygote waits for a cpu``: that ``sendmsg``, to the zygote running (it is woken on the
  SDK's core, and runs when the SDK sleeps);
* ``zygote to clone``: the zygote's Python (receive, parse, ``posix_spawn``'s arguments);
* ``child to exec``: the vfork child (signal dispositions, stdio, ``setsid``, the ``PATH``
  search) up to the command's ``execve`` done;
* ``command``: the command itself, ``execve`` to ``exit`` (busybox ``true``);
* ``exit to report``: the command's exit, the zygote woken, ``waitpid``, its last ``sendmsg``;
* ``sdk after report``: that ``sendmsg``, to ``execute_command`` returning.

with the number of context switches into or out of the SDK and the zygote per round
trip. Needs root and tracefs (``/sys/kernel/tracing``); it clears the trace buffer (its size
and ``tracing_on`` are put back). It measures; it asserts
nothing. Round 10 (30 ms idle before each, 60 round trips, medians): the SDK ~0.55 ms
(before send, after report, and the zygote waiting for the SDK's core), the zygote's Python
~0.34 ms, the vfork child to ``execve`` ~0.24 ms and busybox ``true`` itself ~0.4 ms (its
~35 page faults), of ~2.0 ms.

    sudo python bench/process_timeline.py [--reps 40] [--gap 0.03] [--after-docker]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from pathlib import Path

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

TRACE = Path("/sys/kernel/tracing")
EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_wakeup_new",
          "sched/sched_process_exec", "sched/sched_process_exit", "raw_syscalls/sys_enter")
_LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+(?P<ts>[\d.]+):\s+"
                   r"(?P<event>\w+):\s+(?P<rest>.*)$")
STAGES = ("sdk before send", "zygote waits for a cpu", "zygote to clone", "child to exec",
          "command", "exit to report", "sdk after report", "total")


def _write(name: str, value: str) -> None:
    (TRACE / name).write_text(value)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def _zygote() -> int:
    server = next(p for p in _children(os.getpid())
                  if b"_forkserver" in Path(f"/proc/{p}/cmdline").read_bytes())
    zygotes = [p for p in _children(server)
               if b"bwrap" not in Path(f"/proc/{p}/cmdline").read_bytes()]
    if len(zygotes) != 1:
        raise SystemExit(f"expected one zygote under the fork server, found {zygotes}")
    return zygotes[0]


Event = tuple[int, float, str, str]  # pid, microseconds, event name, the rest of the line


def _first(events: list[Event], after: float, pid: int | None, name: str,
           text: str = "") -> float | None:
    """The time of the first ``name`` event at or after ``after`` (by ``pid`` when given)
    whose line holds ``text``."""
    return next((ts for p, ts, ev, rest in events if ts >= after and ev == name
                 and (pid is None or p == pid) and text in rest), None)


def _stages(lines: list[str], sdk: int, zygote: int) -> dict[str, float] | None:
    """The stage lengths (µs) of one round trip's trace lines, None when one is missing."""
    events: list[Event] = []
    for line in lines:
        m = _LINE.match(line)
        if m:
            events.append((int(m["pid"]), float(m["ts"]) * 1e6, m["event"], m["rest"]))
    if not events:
        return None
    t0, t_end = events[0][1], events[-1][1]
    send = _first(events, t0, sdk, "sys_enter", "NR 46 ")
    if send is None:
        return None
    run = _first(events, send, None, "sched_switch", f"next_pid={zygote} ")
    born = next(((ts, rest) for p, ts, ev, rest in events
                 if ts >= send and p == zygote and ev == "sched_wakeup_new"), None)
    if born is None:
        return None
    clone, child = born[0], re.search(r" pid=(\d+)", born[1])
    if child is None:
        return None
    execd = _first(events, send, int(child[1]), "sched_process_exec")
    exited = _first(events, send, int(child[1]), "sched_process_exit")
    last = max((ts for p, ts, ev, rest in events
                if p == zygote and ev == "sys_enter" and rest.startswith("NR 46 ")),
               default=None)
    if run is None or clone is None or execd is None or exited is None or last is None \
            or last < exited:
        return None
    switches = sum(1 for _, _, ev, rest in events if ev == "sched_switch"
                   and any(f"_pid={p} " in rest for p in (sdk, zygote)))
    return {"sdk before send": send - t0, "zygote waits for a cpu": run - send,
            "zygote to clone": clone - run, "child to exec": execd - clone,
            "command": exited - execd, "exit to report": last - exited,
            "sdk after report": t_end - last, "total": t_end - t0,
            "context switches (sdk, zygote)": switches}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.03, help="idle seconds before each")
    parser.add_argument("--after-docker", action="store_true",
                        help="a Docker exec before each instead of the idle gap")
    args = parser.parse_args()
    box = Sandbox(SandboxConfig(type="process", image=IMAGE_BUSYBOX))
    docker = (Sandbox(SandboxConfig(type="docker", image=IMAGE_BUSYBOX))
              if args.after_docker else None)
    await box.initialize()
    if docker is not None:
        await docker.initialize()
    marker = (TRACE / "trace_marker").open("w")
    rows: list[dict[str, float]] = []
    try:
        for _ in range(5):
            await box.execute_command(["true"])
        zygote = _zygote()
        was_on = (TRACE / "tracing_on").read_text().strip()
        was_size = (TRACE / "buffer_size_kb").read_text().split()[0]
        _write("buffer_size_kb", "16384")  # per cpu: every process's switches are recorded
        _write("trace", "")
        _write("events/raw_syscalls/sys_enter/filter", "id == 46")
        for event in EVENTS:
            _write(f"events/{event}/enable", "1")
        _write("tracing_on", "1")
        for i in range(args.reps):
            if docker is not None:
                await docker.execute_command(["true"])
            else:
                time.sleep(args.gap)  # noqa: ASYNC251 - the loop is meant to sit idle
            marker.write(f"RT-START {i}\n")
            marker.flush()
            await box.execute_command(["true"])
            marker.write(f"RT-END {i}\n")
            marker.flush()
        _write("tracing_on", "0")
        text = (TRACE / "trace").read_text().splitlines()
        _write("tracing_on", was_on)  # as it was: someone else may be tracing too
        _write("buffer_size_kb", was_size)
    finally:
        for event in EVENTS:
            _write(f"events/{event}/enable", "0")
        _write("events/raw_syscalls/sys_enter/filter", "0")
        marker.close()
        await box.cleanup()
        if docker is not None:
            await docker.cleanup()
    for i in range(args.reps):
        try:
            start = next(n for n, line in enumerate(text) if f"RT-START {i}\n" in line + "\n")
            end = next(n for n, line in enumerate(text) if f"RT-END {i}\n" in line + "\n")
        except StopIteration:
            continue
        stages = _stages(text[start:end + 1], os.getpid(), zygote)
        if stages is not None:
            rows.append(stages)
    print(f"{len(rows)} of {args.reps} round trips traced whole (µs; the means add up)")
    print(f"  {'stage':32s} {'median':>8s} {'mean':>8s}")
    for stage in [*STAGES, "context switches (sdk, zygote)"]:
        values = [r[stage] for r in rows]
        print(f"  {stage:32s} {statistics.median(values):8.1f} {statistics.fmean(values):8.1f}")


if __name__ == "__main__":
    asyncio.run(main())

"""Issue 29's targets against the last `make bench`: one line per target, met or missed.

Reads bench/results/latest.json (bench/run.py) and bench/results/backends.json
(bench/backends.py) and prints a Markdown table: the target, what this run measured (a ratio
to a baseline of the same run where the target is one), and whether it is met. A target whose
rows the run did not produce (a scenario left out with --only, a peer not installed) says so.

    python bench/targets.py            # after `make bench`
    python bench/targets.py --json     # the same as JSON

It reads numbers; it measures nothing and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
RAW = "aiodocker"
SDK = "sandbox SDK"


@dataclass(frozen=True)
class Found:
    """What one target's rows gave: the text to show and whether the target is met."""

    measured: str
    met: bool | None  # None: the run has no such row


Rows = list[dict[str, Any]]


def _row(rows: Rows, scenario: str, impl: str) -> dict[str, Any] | None:
    """The row whose scenario and implementation match the two regular expressions."""
    for row in rows:
        if re.fullmatch(scenario, row["scenario"]) and re.fullmatch(impl, row["impl"]):
            return row
    return None


def ratio(scenario: str, at_most: float, impl: str = re.escape(SDK)) -> Callable[[Rows], Found]:
    """SDK ÷ raw aiodocker in the same run, at most `at_most`: the median of the per-round
    ratios where the row has them (run.py's `paired_ratios`, shown with its 95 % interval),
    else the ratio of the two medians."""
    def check(rows: Rows) -> Found:
        ours, raw = _row(rows, scenario, impl), _row(rows, scenario, RAW)
        if ours is None or raw is None or not raw["value"]:
            return Found("no row in this run", None)
        medians = f"{ours['value']:,.1f} vs {raw['value']:,.1f} {ours['unit']}"
        paired = (ours.get("extra") or {}).get("paired_ratio")
        if paired is None:
            r = ours["value"] / raw["value"]
            return Found(f"{medians}: {r:.2f}x", r <= at_most)
        lo, hi = ours["extra"]["paired_ci95"]
        return Found(f"{medians}; per round {paired:.2f}x (95 % CI {lo:.2f}-{hi:.2f}, "
                     f"n={ours['extra']['pairs']})", paired <= at_most)
    return check


def delta(scenario: str, at_most: float) -> Callable[[Rows], Found]:
    """SDK median minus raw aiodocker median in the same run, at most `at_most`."""
    def check(rows: Rows) -> Found:
        ours, raw = _row(rows, scenario, re.escape(SDK)), _row(rows, scenario, RAW)
        if ours is None or raw is None:
            return Found("no row in this run", None)
        d = ours["value"] - raw["value"]
        return Found(f"{ours['value']:.2f} vs {raw['value']:.2f} {ours['unit']}: {d:+.2f}",
                     d <= at_most)
    return check


def below(scenario: str, impl: str, at_most: float, *, field: str = "value"
          ) -> Callable[[Rows], Found]:
    """One row's median (or p95) at most `at_most`, in the row's unit."""
    def check(rows: Rows) -> Found:
        row = _row(rows, scenario, impl)
        if row is None:
            return Found("no row in this run", None)
        value = row[field]
        return Found(f"{value:,.3g} {row['unit']}" + (" p95" if field == "p95" else ""),
                     value <= at_most)
    return check


def ahead_of(scenario: str, peer: str, impl: str = re.escape(SDK)) -> Callable[[Rows], Found]:
    """The SDK's median below a peer's in the same run."""
    def check(rows: Rows) -> Found:
        ours, theirs = _row(rows, scenario, impl), _row(rows, scenario, peer)
        if ours is None or theirs is None:
            return Found("no row in this run (peer installed? `make bench` has it)", None)
        r = ours["value"] / theirs["value"]
        return Found(f"{ours['value']:,.0f} vs {theirs['value']:,.0f} ms: {r:.2f}x", r < 1)
    return check


def _cycles(rows: Rows) -> Found:
    """N cycles acquire/true/release from a pool with max_uses=1, at most 15 s per 100: a
    full run makes 100; a --quick run's fewer are judged by their rate after the first ten
    (run.py's ``steady_per_100``: the ready stock the pool starts with makes the first
    cycles free, which scaled a short run's total down)."""
    for row in rows:
        match = re.fullmatch(r"(\d+) cycles acquire/true/release", row["scenario"])
        if match and row["impl"].endswith("max_uses=1)"):
            n = int(match.group(1))
            extra = row.get("extra") or {}
            if n >= 100 or "steady_per_100" not in extra:
                per_100 = row["value"] * 100 / n
                return Found(f"{row['value']:.1f} s for {n}: {per_100:.1f} s per 100",
                             per_100 <= 15)
            per_100 = extra["steady_per_100"]
            return Found(f"{row['value']:.1f} s for {n}; after the first "
                         f"{n - extra['steady_cycles']}: {per_100:.1f} "
                         f"± {extra['steady_se_per_100']:.1f} s per 100", per_100 <= 15)
    return Found("no row in this run", None)


def _idle_process(what: str, per_300: float) -> Callable[[Rows], Found]:
    """N idle process sandboxes (300 in a full run, 100 in --quick): the row's value within
    the target given for 300, scaled to N (open, close and CPU grow with the count)."""
    def check(rows: Rows) -> Found:
        for row in rows:
            match = re.fullmatch(rf"(\d+) idle process sandboxes: {what}", row["scenario"])
            if match:
                n = int(match.group(1))
                bound = per_300 * n / 300
                return Found(f"{row['value']:.2f} {row['unit']} for {n} (bound {bound:.2g})",
                             row["value"] <= bound)
        return Found("no row in this run", None)
    return check


def _within_raw_cpu(rows: Rows) -> Found:
    """N idle Docker sandboxes: the CPU they cost (the SDK's own, dockerd's, containerd's)
    within 2 points of a core of what N raw aiodocker containers cost."""
    total = {"sdk": 0.0, RAW: 0.0}
    n = ""
    for row in rows:
        match = re.fullmatch(r"(\d+) idle Docker sandboxes: \w+ CPU", row["scenario"])
        if match and row["impl"] in total:
            total[row["impl"]] += row["value"]
            n = match.group(1)
    if not n:
        return Found("no row in this run", None)
    d = total["sdk"] - total[RAW]
    return Found(f"{n} idle: {total['sdk']:.2f} vs {total[RAW]:.2f} % core (SDK + daemons)",
                 d <= 2)


def _backend(kind: str, scenario: str, at_most_ms: float) -> Callable[[Rows], Found]:
    """A p50 from bench/backends.py, in milliseconds."""
    def check(_: Rows) -> Found:
        path = RESULTS / "backends.json"
        if not path.exists():
            return Found("bench/backends.py not run", None)
        cell = json.loads(path.read_text()).get(scenario, {}).get(kind)
        if cell is None:
            return Found("no row in this run", None)
        ms = cell["p50"] * 1000
        return Found(f"{ms:.1f} ms p50 (n={cell['n']})", ms <= at_most_ms)
    return check


#: (target as issue 29 words it, its check).
TARGETS: list[tuple[str, Callable[[Rows], Found]]] = [
    ("create to ready (busybox) <= 1.1x raw, facts read (a process's first create)",
     ratio("create to ready", 1.1)),
    ("create to ready (busybox) <= 1.1x raw, facts kept (later creates, same daemon)",
     ratio("create to ready, back to back", 1.1)),
    ("create to first command (python image) ahead of llm-sandbox",
     ahead_of(r"create to first command \(python image\)", r"llm-sandbox.*",
              r"sandbox SDK \(execute_command\)")),
    ("exec `true` round trip <= 1.05x raw", ratio("exec `true` round trip", 1.05)),
    ("exec client CPU <= raw + 0.3 ms", delta("exec `true` client CPU", 0.3)),
    ("cleanup <= 1.05x raw", ratio(r"cleanup \(remove\)", 1.05)),
    ("cleanup right after a command <= 1.05x raw",
     ratio("cleanup right after a command", 1.05)),
    ("copy in 1,000 files <= 1.1x raw", ratio(r"copy in 1,000 files \(512 B\)", 1.1)),
    ("copy in 1,000 files as the sandbox user <= 1.1x raw",
     ratio("copy in 1,000 files, sandbox user", 1.1)),
    ("100 cycles acquire/true/release, max_uses=1: <= 15 s", _cycles),
    ("Docker pool warm acquire <= 1 ms p50",
     below("pool warm acquire", r".*\(docker pool\)", 1)),
    ("Docker pool warm acquire <= 3 ms p95",
     below("pool warm acquire", r".*\(docker pool\)", 3, field="p95")),
    ("session round trip `true` <= 1 ms p50, alone (idle)",
     below("command round trip `true`, session alone", r".*session.*", 1)),
    ("session round trip `true` <= 1 ms p50, each right after an exec (under load)",
     below("command round trip `true`", r".*session.*", 1)),
    ("process: create to first command <= 10 ms p50",
     _backend("process", "create-to-first-command", 10)),
    ("process: warm pool acquire + first command <= 3 ms p50",
     below("pool acquire to first command", r".*\(process pool\)", 3)),
    ("process: command round trip <= 1.5 ms p50",
     _backend("process", "command round trip", 1.5)),
    ("fork x10 (100 MiB written): half of round 3's 2.35-3.25 s (<= 1.4 s)",
     below(r"fork x10 \(100 MiB written\)", re.escape(SDK), 1400)),
    ("300 idle process sandboxes: SDK CPU <= 3 % of a core", _idle_process("SDK CPU", 3)),
    ("300 process sandboxes: open <= 8 s", _idle_process("open", 8)),
    ("300 process sandboxes: close <= 2 s", _idle_process("close", 2)),
    ("100 idle Docker sandboxes: CPU within 2 % of a core of raw", _within_raw_cpu),
    ("100 Docker sandboxes in batches of 10 <= 1.2x raw",
     ratio(r"\d+ sandboxes opened in batches of 10", 1.2)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args()
    latest = RESULTS / "latest.json"
    data = json.loads(latest.read_text()) if latest.exists() else {"rows": []}
    found = [(target, check(data["rows"])) for target, check in TARGETS]
    if args.json:
        print(json.dumps([{"target": t, "measured": f.measured, "met": f.met}
                          for t, f in found], indent=2))
        return
    print(f"Issue 29's targets, `make bench` of {data.get('when', 'never')} "
          f"({'quick' if data.get('quick') else 'full'} run)\n")
    print("| target | measured | met |")
    print("|---|---|:-:|")
    for target, f in found:
        mark = {True: "yes", False: "**no**", None: "-"}[f.met]
        print(f"| {target} | {f.measured} | {mark} |")


if __name__ == "__main__":
    main()

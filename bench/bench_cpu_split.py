"""Where a synchronous GRPO step's CPU goes on the embedded default: core-seconds of the client
(cookbook.cli: agent, SDK, HTTP), the backend (sampling + training), the sandbox manager and its sandbox
processes (bwrap per exec, mounts, cgroups, grading), and the fraction of the machine's cores they keep
busy. That fraction bounds what overlapping rollouts with training (--max-steps-off-policy) can gain on
this machine: at most 1 / busy (docs/recipes.md "Async off-policy RL").

Reads /proc/<pid>/stat of the three processes every 0.5 s while one run goes (children = reaped child
processes: the sandbox manager's are its sandboxes). Uses the running config/ like bench_async.py.

With ``--max-steps-off-policy K`` the same accounting for the async loop: core-seconds per step
against the synchronous run's show what overlapping costs in CPU (contention, polling).

    .venv-control/bin/python bench/bench_cpu_split.py [--num-steps 15] [--seed 0] [--warm-start TINKER_PATH]
        [--max-steps-off-policy K]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
PARTS = {"cookbook.cli": "client", "services.backend": "backend", "services.sandbox": "sandbox manager"}


def cpu_of(pid: str) -> tuple[float, float] | None:
    """(own, reaped children) CPU seconds of a process, None when it is gone."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    v = s[s.rindex(")") + 2:].split()
    return (int(v[11]) + int(v[12])) / TICK, (int(v[13]) + int(v[14])) / TICK


def part_of(pid: str) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return next((name for key, name in PARTS.items() if f"-m {key}" in cmd), None)


def totals(last: dict[str, tuple[str, tuple[float, float]]]) -> dict[str, float]:
    """Core-seconds so far per part (the sandbox manager's reaped children: its sandbox processes)."""
    out = {name: 0.0 for name in PARTS.values()} | {"sandbox processes": 0.0}
    for name, (own, children) in last.values():
        out[name] += own
        if name == "sandbox manager":
            out["sandbox processes"] += children  # the client's children are the backend and the manager
    return out


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


def at(timeline: list[tuple[float, dict[str, float], float]], t: float) -> tuple[float, dict[str, float], float]:
    """The sample nearest to time ``t``."""
    return min(timeline, key=lambda row: abs(row[0] - t))


def step_end_times(client_log: Path) -> list[float]:
    """Wall time at which each step's record was logged ("... INFO cookbook.train: step N: {...}")."""
    out = []
    for line in client_log.read_text().splitlines():
        if " INFO cookbook.train: step " in line:
            stamp = line[:23]
            out.append(time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-steps", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm-start", default=None, metavar="TINKER_PATH",
                    help="a quickstart sft checkpoint (default: run sft first, not measured)")
    ap.add_argument("--max-steps-off-policy", type=int, default=0, metavar="K", help="0 = synchronous (default)")
    args = ap.parse_args()
    cli = [sys.executable, "-m", "cookbook.cli"]
    warm = args.warm_start
    if warm is None:
        r = subprocess.run([*cli, "sft", "--preset", "quickstart", "--seed", str(args.seed), "--init-from", "none"],
                           cwd=ROOT, capture_output=True, text=True, check=True)
        run_dir = Path(next(l for l in r.stdout.splitlines() if l.startswith("Run directory: ")).split(": ", 1)[1])
        warm = json.loads((run_dir / "results" / "sft" / "result.json").read_text())["final_checkpoint"]
    log = tempfile.TemporaryFile("w+")   # the run's output (a pipe could fill while nobody reads it)
    p = subprocess.Popen([*cli, "grpo", "--preset", "quickstart", "--seed", str(args.seed), "--init-from", warm,
                          "--num-steps", str(args.num_steps), "--max-steps-off-policy", str(args.max_steps_off_policy)],
                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    last: dict[str, tuple[str, tuple[float, float]]] = {}
    timeline: list[tuple[float, dict[str, float], float]] = []   # (time, core-s per part so far, machine busy s)
    while p.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            name = part_of(pid)
            cpu = cpu_of(pid) if name else None
            if name and cpu:
                last[pid] = (name, cpu)
        timeline.append((time.time(), totals(last), machine_busy()))
        time.sleep(0.5)
    log.seek(0)
    out = log.read()
    if p.returncode != 0:
        raise SystemExit(f"grpo failed (rc {p.returncode}):\n{out[-3000:]}")
    run_dir = Path(next(l for l in out.splitlines() if l.startswith("Run directory: ")).split(": ", 1)[1])
    steps = json.loads((run_dir / "results" / "grpo" / "result.json").read_text())["steps"]
    ends = step_end_times(run_dir / "client.log")
    t0, t1 = ends[0] - steps[0]["time_s"], ends[-1]   # the step loop: first step's start to last step's end
    a, b = at(timeline, t0), at(timeline, t1)
    loop, cores = t1 - t0, os.cpu_count() or 1
    used = {k: b[1][k] - a[1][k] for k in b[1]}
    total = sum(used.values())
    kind = f"K={args.max_steps_off_policy}" if args.max_steps_off_policy else "sync"
    print(f"{len(steps)} {kind} GRPO steps: step loop {loop:.1f} s ({loop / len(steps):.2f} s/step) on {cores} cores")
    for k, v in used.items():
        print(f"  {k:18s} {v:7.1f} core-s")
    machine = (b[2] - a[2]) / (cores * loop)
    print(f"  {'total':18s} {total:7.1f} core-s = {total / len(steps):.2f} per step: the cores "
          f"{total / (cores * loop):.0%} busy (whole machine, /proc/stat: {machine:.0%})"
          + (f" -> overlap gains at most x{cores * loop / total:.2f}" if not args.max_steps_off_policy else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

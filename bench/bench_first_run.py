"""A new user's first run, end to end: a fresh clone, empty pip/uv caches, `bash run.sh quickstart` (set-up
included), timed per phase, then the quickstart's SFT + GRPO again for more seeds in the same clone.

    python3 bench/bench_first_run.py [--seeds 3] [--port P --admin-port A] [--keep] [--repo PATH]

Prints one line per phase as it ends (set-up's own phases from its `[setup] <<` lines, then configure, SFT,
GRPO), the total for seed 0 (what a user waits for), and each seed's GRPO gain (mean reward of the last 5
steps minus the first 5, as tests/integration/test_learning.py). With --port/--admin-port the clone is
configured on those ports before the quickstart (other services on the default ports); without them the
quickstart configures itself. Needs no venv: it runs under any python3 and builds everything in the clone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stream(cmd: list[str], cwd: Path, env: dict[str, str], log, marks: list[tuple[float, str]]) -> int:
    """Runs cmd, echoing its output to the log file and recording (time, line) of every progress line."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1)
    assert p.stdout is not None
    for line in p.stdout:
        log.write(line)
        log.flush()
        if line.startswith(("[setup] <<", "[setup] all done", "[quickstart] step")) or "Run directory" in line:
            marks.append((time.time(), line.rstrip()))
            print(f"  {line.rstrip()}", flush=True)
    return p.wait()


def latest(clone: Path, mode: str) -> Path:
    runs = sorted((clone / "runs").glob(f"{mode}-*"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit(f"no runs/{mode}-* in {clone}: the run failed (see the log)")
    return runs[-1]


def outcome(clone: Path) -> dict:
    sft = json.loads((latest(clone, "sft") / "results" / "sft" / "result.json").read_text())
    grpo = json.loads((latest(clone, "grpo") / "results" / "grpo" / "result.json").read_text())
    curve = [s["mean_reward"] for s in grpo["steps"]]
    first, last = sum(curve[:5]) / 5, sum(curve[-5:]) / 5
    return {"sft_steps": len(sft["steps"]), "grpo_steps": len(curve), "first5": round(first, 3),
            "last5": round(last, 3), "gain": round(last - first, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (seed 0 is the quickstart itself)")
    ap.add_argument("--port", type=int, help="backend port for the clone (default: configure.py's)")
    ap.add_argument("--admin-port", type=int, help="sandbox manager port for the clone")
    ap.add_argument("--repo", default=str(ROOT), help="what to clone (default: this checkout's committed HEAD)")
    ap.add_argument("--keep", action="store_true", help="keep the clone (printed) instead of removing it")
    args = ap.parse_args()
    if (args.port is None) != (args.admin_port is None):
        ap.error("--port and --admin-port go together")

    work = Path(tempfile.mkdtemp(prefix="lts-first-run-"))
    work.chmod(0o755)  # the sandboxes' uid must search the clone's state/ (as in a user's home checkout)
    clone = work / "repo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_CACHE", "UV_", "LTS_", "VIRTUAL_ENV"))}
    env.update(UV_CACHE_DIR=str(work / "uv-cache"), PIP_NO_CACHE_DIR="1")  # empty caches: a fresh machine
    log_path = work / "first-run.log"
    print(f"[first-run] clone {args.repo} -> {clone}; log {log_path}", flush=True)
    subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
    marks: list[tuple[float, str]] = []
    t0 = time.time()
    results = []
    with open(log_path, "w") as log:
        if args.port is not None:
            rc = stream(["bash", "setup.sh", "all"], clone, env, log, marks)
            if rc:
                raise SystemExit(f"setup.sh all failed ({rc}); see {log_path}")
            subprocess.run([str(clone / ".venv-control/bin/python"), "configure.py", "--force", "--port",
                            str(args.port), "--admin-port", str(args.admin_port)], cwd=clone, env=env, check=True,
                           stdout=log, stderr=subprocess.STDOUT)
            marks.append((time.time(), "[first-run] configure.py on the given ports"))
        rc = stream(["bash", "run.sh", "quickstart", "--seed", "0"], clone, env, log, marks)
        marks.append((time.time(), "[first-run] quickstart ended"))
        total = time.time() - t0
        if rc:
            raise SystemExit(f"run.sh quickstart failed ({rc}); see {log_path}")
        results.append({"seed": 0, **outcome(clone)})
        for seed in range(1, args.seeds):
            ts = time.time()
            for mode in ("sft", "grpo"):
                rc = stream(["bash", "run.sh", mode, "--preset", "quickstart", "--seed", str(seed)], clone, env,
                            log, marks)
                if rc:
                    raise SystemExit(f"run.sh {mode} --seed {seed} failed ({rc}); see {log_path}")
            results.append({"seed": seed, **outcome(clone), "sft_grpo_s": round(time.time() - ts)})

    print("\n[first-run] phases of `bash run.sh quickstart` (seed 0), fresh clone, empty pip/uv caches:")
    prev = t0
    for t, line in marks:
        if line.startswith("[setup] <<"):
            print(f"  {line[len('[setup] << '):]}")
        elif line.startswith(("[quickstart] step", "[first-run]")):
            print(f"  {line}: at {t - t0:.0f} s (+{t - prev:.0f} s since the last mark)")
            prev = t
    print(f"[first-run] total (seed 0, set-up included): {total:.0f} s = {total / 60:.1f} min")
    for r in results:
        print(f"[first-run] seed {r['seed']}: SFT {r['sft_steps']} steps, GRPO {r['grpo_steps']} steps, mean reward "
              f"{r['first5']:.3f} -> {r['last5']:.3f} (gain {r['gain']:+.3f})"
              + (f", sft+grpo {r['sft_grpo_s']} s" if "sft_grpo_s" in r else ""))
    gains = [r["gain"] for r in results]
    print(f"[first-run] gains {', '.join(f'{g:+.3f}' for g in gains)}; smallest {min(gains):+.3f}")
    print(json.dumps({"total_s": round(total), "seeds": results, "cores": os.cpu_count(),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
    if args.keep:
        print(f"[first-run] kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning proof on the embedded default: sft, then grpo from its checkpoint, for several seeds.

Prints each seed's GRPO reward curve, the gain (mean of the last 5 steps minus the first 5), and
the wall time, and writes bench/results/learning-<timestamp>.json. Uses the running config/
(bash setup.sh all && python configure.py first); starts and stops the services itself.

    .venv-control/bin/python bench/bench_learning.py --seeds 0 1 2 [--grpo-steps 30] [--sandbox manager]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(mode: str, seed: int, extra: list[str], sandbox: str) -> Path:
    cmd = [sys.executable, "-m", "cookbook.cli", mode, "--preset", "quickstart", "--seed", str(seed), "--sandbox", sandbox, *extra]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return Path(next(l for l in r.stdout.splitlines() if l.startswith("Run directory: ")).split(": ", 1)[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--grpo-steps", type=int, default=30)
    ap.add_argument("--sandbox", default="manager", choices=["manager", "host"])
    args = ap.parse_args()
    out = {"seeds": {}}
    for seed in args.seeds:
        t0 = time.time()
        sft = run("sft", seed, ["--init-from", "none"], args.sandbox)
        sft_ck = json.loads((sft / "results" / "sft" / "result.json").read_text())["final_checkpoint"]
        t1 = time.time()
        grpo = run("grpo", seed, ["--init-from", sft_ck, "--num-steps", str(args.grpo_steps)], args.sandbox)
        res = json.loads((grpo / "results" / "grpo" / "result.json").read_text())
        curve = [s["mean_reward"] for s in res["steps"]]
        k = min(5, len(curve))
        gain = sum(curve[-k:]) / k - sum(curve[:k]) / k
        out["seeds"][seed] = {"curve": curve, "gain_last5_minus_first5": gain, "sft_s": t1 - t0, "grpo_s": time.time() - t1,
                              "sft_run": str(sft), "grpo_run": str(grpo)}
        print(f"seed {seed}: gain {gain:+.3f}  sft {t1 - t0:.0f}s  grpo {time.time() - t1:.0f}s  curve "
              + " ".join(f"{c:.2f}" for c in curve), flush=True)
    d = ROOT / "bench" / "results"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"learning-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning proof on the embedded default: sft, then grpo from its checkpoint, for several seeds.

Prints each seed's GRPO reward curve, the gain (mean of the last 5 steps minus the first 5), and
the wall time of sft + grpo (services started and stopped by each run included), and writes
bench/results/learning-<timestamp>.{json,png} (the curves, with the SFT gate evaluations before
them). Uses the running config/ (bash setup.sh all && python configure.py first).

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
    ap.add_argument("--grpo-steps", type=int, default=None, help="default: the quickstart preset's")
    ap.add_argument("extra", nargs="*", help="more flags for both runs (after --), e.g. -- --lora-rank 0")
    ap.add_argument("--sandbox", default="manager", choices=["manager", "host"])
    args = ap.parse_args()
    out = {"seeds": {}}
    for seed in args.seeds:
        t0 = time.time()
        sft = run("sft", seed, ["--init-from", "none", *args.extra], args.sandbox)
        sres = json.loads((sft / "results" / "sft" / "result.json").read_text())
        t1 = time.time()
        steps = ["--num-steps", str(args.grpo_steps)] if args.grpo_steps else []
        grpo = run("grpo", seed, ["--init-from", sres["final_checkpoint"], *steps, *args.extra], args.sandbox)
        t2 = time.time()
        res = json.loads((grpo / "results" / "grpo" / "result.json").read_text())
        curve = [s["mean_reward"] for s in res["steps"]]
        k = min(5, len(curve))
        gain = sum(curve[-k:]) / k - sum(curve[:k]) / k
        gate = [(s["step"], s["pass_rate"]) for s in sres["steps"] if "pass_rate" in s]
        timing = step_timings(res["steps"])
        total = t2 - t0
        gold_p = sres.get("gold_p_final", {})
        out["seeds"][seed] = {"curve": curve, "sft_gold_p_final": gold_p, "gain_last5_minus_first5": gain, "sft_s": t1 - t0, "grpo_s": t2 - t1,
                              "total_s": total, "sft_steps": len(sres["steps"]), "sft_pass_rates": gate,
                              "median_step_timings_s": timing, "sft_run": str(sft), "grpo_run": str(grpo)}
        print(f"seed {seed}: gain {gain:+.3f} (first 5 {sum(curve[:k]) / k:.2f} -> last 5 {sum(curve[-k:]) / k:.2f})  "
              f"sft {t1 - t0:.0f}s ({len(sres['steps'])} steps, lowest gold chance {min(gold_p.values(), default=float('nan')):.2f})  grpo {t2 - t1:.0f}s  total {total / 60:.1f} min\n"
              f"  median grpo step {timing['step_s']:.1f}s (rollouts {timing['rollout_s']:.1f}s, training {timing['train_s']:.1f}s)\n"
              f"  curve " + " ".join(f"{c:.2f}" for c in curve), flush=True)
    d = ROOT / "bench" / "results"
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"learning-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1))
    plot(out, stem.with_suffix(".png"))
    print(f"wrote {stem}.json and {stem}.png")
    return 0


def step_timings(steps: list[dict]) -> dict[str, float]:
    """Median seconds per GRPO step: the whole step, its rollouts and its training."""
    import statistics

    return {"step_s": statistics.median(s["time_s"] for s in steps),
            **{k: statistics.median(s["timings"][k] for s in steps) for k in ("rollout_s", "train_s")}}


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for seed, r in out["seeds"].items():
        line, = ax.plot(range(len(r["curve"])), r["curve"], marker=".", label=f"seed {seed}: grpo (gain {r['gain_last5_minus_first5']:+.2f})")
        ev = r["sft_pass_rates"]
        if ev:  # the sft gate evaluations, on a compressed axis left of grpo step 0
            n = r["sft_steps"]
            ax.plot([-8 + 8 * s / n for s, _ in ev], [p for _, p in ev], ls=":", color=line.get_color(), alpha=0.7)
    ax.axvline(-0.5, color="grey", lw=0.5)
    ax.set_xlabel("grpo step (dotted, left of 0: sft pass-rate checks, compressed)")
    ax.set_ylabel("mean reward (sampled, T=1)")
    ax.set_ylim(0, 1)
    ax.set_title("embedded default: sft then grpo")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

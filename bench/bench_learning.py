"""Learning proof on the embedded default: sft, then grpo from its checkpoint, for several seeds.

Prints each seed's GRPO reward curve, the gain (mean of the last 5 steps minus the first 5), the
wall time of sft + grpo (services started and stopped by each run included) and the machine's load
average over the seed (os.getloadavg(): 2 cores shared with others explain slow seeds), and writes
bench/results/learning-<timestamp>.{json,png} (the curves, with the SFT gate evaluations before
them). It prints the held-out pass rate before and after GRPO: GRPO's own evaluation (result.json
'heldout', which ``--preset agent`` records before the first step and after the last: part of the
timed run), or with ``--heldout-n N`` N sampled rollouts per held-out task of the SFT checkpoint and
of GRPO's final one (``run.sh rollout --split heldout --model-path ...``, after the timed runs).
Uses the running config/ (bash setup.sh all && python configure.py first).

    .venv-control/bin/python bench/bench_learning.py --seeds 0 1 2 [--preset agent] [--grpo-steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[1]


# the dataset each preset trains on (its held-out split is evaluated before and after GRPO)
DATASETS = {"quickstart": "micro", "agent": "multiturn"}


def run(mode: str, seed: int, extra: list[str], sandbox: str, preset: str = "quickstart") -> Path:
    cmd = [sys.executable, "-m", "cookbook.cli", mode, "--preset", preset, "--seed", str(seed), "--sandbox", sandbox,
           *extra]
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
    ap.add_argument("--preset", default="quickstart", choices=sorted(DATASETS))
    ap.add_argument("--heldout-n", type=int, default=None,
                    help="held-out rollouts per task before/after GRPO, measured after the timed runs (default: "
                         "none; the held-out figures of GRPO's result.json, which --preset agent records)")
    args = ap.parse_args()
    heldout_n = args.heldout_n or 0
    data = ["--dataset", DATASETS[args.preset]]
    out: dict = {"preset": args.preset, "seeds": {}}
    for seed in args.seeds:
        load0 = os.getloadavg()
        t0 = time.time()
        sft = run("sft", seed, ["--init-from", "none", *data, *args.extra], args.sandbox, args.preset)
        sres = json.loads((sft / "results" / "sft" / "result.json").read_text())
        t1 = time.time()
        steps = ["--num-steps", str(args.grpo_steps)] if args.grpo_steps else []
        grpo = run("grpo", seed, ["--init-from", sres["final_checkpoint"], *steps, *data, *args.extra], args.sandbox,
                   args.preset)
        t2 = time.time()
        load1 = os.getloadavg()
        res = json.loads((grpo / "results" / "grpo" / "result.json").read_text())
        curve = [s["mean_reward"] for s in res["steps"]]
        k = min(5, len(curve))
        gain = sum(curve[-k:]) / k - sum(curve[:k]) / k
        gate = [(s["step"], s["pass_rate"]) for s in sres["steps"] if "pass_rate" in s]
        timing = step_timings(res["steps"])
        total = t2 - t0
        gold_p = sres.get("gold_p_final", {})
        held = {k: res["heldout"][k] for k in ("before", "after")} if res.get("heldout") else {}
        if heldout_n:   # measured here, after the timed runs (a preset without --eval-every, or more attempts)
            held = {"before": heldout(sres["final_checkpoint"], seed, heldout_n, data, args),
                    "after": heldout(res["final_checkpoint"], seed, heldout_n, data, args)}
        out["seeds"][seed] = {"curve": curve, "sft_gold_p_final": gold_p, "gain_last5_minus_first5": gain,
                              "first5": sum(curve[:k]) / k, "last5": sum(curve[-k:]) / k, "sft_s": t1 - t0,
                              "grpo_s": t2 - t1, "total_s": total, "sft_steps": len(sres["steps"]),
                              "sft_pass_rates": gate, "median_step_timings_s": timing, "sft_run": str(sft),
                              "grpo_run": str(grpo), "loadavg_start": load0, "loadavg_end": load1, "heldout": held}
        low = min(gold_p.values(), default=float("nan"))
        print(f"seed {seed}: gain {gain:+.3f} (first 5 {sum(curve[:k]) / k:.2f} -> last 5 {sum(curve[-k:]) / k:.2f})  "
              f"sft {t1 - t0:.0f}s ({len(sres['steps'])} steps, lowest gold chance {low:.2f})  grpo {t2 - t1:.0f}s  "
              f"total {total / 60:.1f} min\n"
              f"  load average (1/5/15 min) at start {fmt_load(load0)}, at end {fmt_load(load1)}\n"
              f"  median grpo step {timing['step_s']:.1f}s (rollouts {timing['rollout_s']:.1f}s, "
              f"training {timing['train_s']:.1f}s)\n"
              + (f"  held-out pass rate before {held['before']['pass_rate']:.3f} -> after "
                 f"{held['after']['pass_rate']:.3f} ({held['after']['n']} rollouts each)\n" if held else "")
              + "  curve " + " ".join(f"{c:.2f}" for c in curve), flush=True)
    d = ROOT / "bench" / "results"
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"learning-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1))
    plot(out, stem.with_suffix(".png"))
    print(f"wrote {stem}.json and {stem}.png")
    return 0


def fmt_load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.1f}" for x in load)


def heldout(model_path: str, seed: int, n: int, data: list[str], args) -> dict:
    """Pass rate (reward 1) and mean reward of ``n`` sampled rollouts per held-out task."""
    r = run("rollout", seed, ["--split", "heldout", "--model-path", model_path, "--n", str(n), "--name", "heldout",
                              *data], args.sandbox, args.preset)
    res = json.loads((r / "results" / "heldout" / "result.json").read_text())
    scored = [x["reward"] for x in res["rollouts"] if x.get("reward") is not None]
    return {"pass_rate": sum(x == 1.0 for x in scored) / max(len(scored), 1), "mean_reward": res["mean_reward"],
            "n": len(scored), "model_path": model_path, "run": str(r)}


def step_timings(steps: list[dict]) -> dict[str, float]:
    """Median seconds per GRPO step: the whole step, its rollouts and its training."""
    return {"step_s": statistics.median(s["time_s"] for s in steps),
            **{k: statistics.median(s["timings"][k] for s in steps) for k in ("rollout_s", "train_s")}}


def plot(out: dict, path: Path) -> None:
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for seed, r in out["seeds"].items():
        line, = ax.plot(range(len(r["curve"])), r["curve"], marker=".",
                        label=f"seed {seed}: grpo (gain {r['gain_last5_minus_first5']:+.2f})")
        ev = r["sft_pass_rates"]
        if ev:  # the sft gate evaluations, on a compressed axis left of grpo step 0
            n = r["sft_steps"]
            ax.plot([-8 + 8 * s / n for s, _ in ev], [p for _, p in ev], ls=":", color=line.get_color(), alpha=0.7)
    ax.axvline(-0.5, color="grey", lw=0.5)
    ax.set_xlabel("grpo step (dotted, left of 0: sft pass-rate checks, compressed)")
    ax.set_ylabel("mean reward (sampled, T=1)")
    ax.set_ylim(0, 1)
    ax.set_title(f"embedded default (--preset {out['preset']}): sft then grpo")
    for seed, r in out["seeds"].items():   # held-out pass rate before (at grpo step 0) and after (the last step)
        if r["heldout"]:
            ax.plot([0, len(r["curve"]) - 1], [r["heldout"]["before"]["pass_rate"], r["heldout"]["after"]["pass_rate"]],
                    marker="s", ls="--", lw=1, alpha=0.8, label=f"seed {seed}: held-out pass rate")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())

"""Async off-policy RL on the embedded default: synchronous GRPO vs --max-steps-off-policy 1 vs 2.

Per seed (``--seeds``): one SFT warm start (the quickstart preset), then GRPO from it once per K, with that seed,
tasks and step count (so the same task order per K >= 1 and the same sampling streams per step). Prints,
per K: steps per hour of the step loop (checkpoint saves excluded), the rollout-idle fraction (sync: the
step's weight sync + training, when no rollout runs; async: the time no batch was being sampled), the
trainer-idle fraction (sync: weight sync + rollouts; async: the trainer's waits for the next
batch), the mean reward of the first and last 5 steps, the mean staleness, and the machine's load average
(os.getloadavg(): 2 cores shared with others). Writes bench/results/async-<timestamp>.{json,png} (reward vs
wall clock). Uses the running config/ (bash setup.sh all && python configure.py first).

    .venv-control/bin/python bench/bench_async.py [--ks 0 1 2] [--num-steps 40] [--seeds 0 1 2]
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


def run(mode: str, seed: int, extra: list[str]) -> Path:
    cmd = [sys.executable, "-m", "cookbook.cli", mode, "--preset", "quickstart", "--seed", str(seed), *extra]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return Path(next(l for l in r.stdout.splitlines() if l.startswith("Run directory: ")).split(": ", 1)[1])


def figures(steps: list[dict], k: int) -> dict:
    """Steps per hour, idle fractions, reward first/last 5, staleness of one GRPO run's step records."""
    wall = sum(s["time_s"] for s in steps)
    t = [s["timings"] for s in steps]
    if k == 0:
        rollout_idle = sum(x["weight_sync_s"] + x["train_s"] for x in t)
        trainer_idle = sum(x["weight_sync_s"] + x["rollout_s"] for x in t)
    else:
        rollout_idle = sum(x["rollout_idle_s"] for x in t)
        trainer_idle = sum(x["trainer_wait_s"] for x in t)
    curve = [s["mean_reward"] for s in steps]
    n = min(5, len(curve))
    clock, acc = [], 0.0
    for s in steps:
        acc += s["time_s"]
        clock.append(acc)
    return {"k": k, "steps": len(steps), "wall_s": wall, "steps_per_hour": 3600 * len(steps) / wall,
            "rollout_idle": rollout_idle / wall, "trainer_idle": trainer_idle / wall,
            "reward_first5": sum(curve[:n]) / n, "reward_last5": sum(curve[-n:]) / n,
            "staleness_mean": sum(s.get("group_staleness", [0])[0] if s.get("group_staleness") else 0
                                  for s in steps) / len(steps),
            "groups_stale_dropped": sum(s.get("groups_stale_dropped", 0) for s in steps),
            "curve": curve, "clock_s": clock}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2], help="values of --max-steps-off-policy")
    ap.add_argument("--num-steps", type=int, default=40, help="GRPO steps per run (default 40)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="one SFT warm start and one run per K each")
    ap.add_argument("--warm-start", default=None, metavar="TINKER_PATH",
                    help="an sft checkpoint of the quickstart preset to start from (one seed only; default: run sft)")
    args = ap.parse_args()
    if args.warm_start and len(args.seeds) > 1:
        ap.error("--warm-start is one seed's checkpoint: give one --seeds value with it")
    out: dict = {"seeds": args.seeds, "ks": args.ks, "num_steps": args.num_steps, "runs": [], "warm_starts": {}}
    for seed in args.seeds:
        t0 = time.time()
        if args.warm_start:
            warm = args.warm_start
        else:
            sft = run("sft", seed, ["--init-from", "none"])
            warm = json.loads((sft / "results" / "sft" / "result.json").read_text())["final_checkpoint"]
        out["warm_starts"][seed] = {"path": warm, "sft_s": time.time() - t0}
        print(f"seed {seed}: sft warm start {warm} in {time.time() - t0:.0f} s (load {os.getloadavg()[0]:.2f})",
              flush=True)
        for k in args.ks:
            before = os.getloadavg()
            d = run("grpo", seed, ["--init-from", warm, "--num-steps", str(args.num_steps),
                                   "--max-steps-off-policy", str(k)])
            res = json.loads((d / "results" / "grpo" / "result.json").read_text())
            f = figures(res["steps"], k) | {"seed": seed, "run": str(d), "load_before": before,
                                            "load_after": os.getloadavg()}
            out["runs"].append(f)
            print(f"seed {seed} K={k}: {f['steps_per_hour']:.0f} steps/h, reward {f['reward_first5']:.3f} -> "
                  f"{f['reward_last5']:.3f}, load {before[0]:.2f} -> {f['load_after'][0]:.2f}", flush=True)
    print(f"\n{'seed':>4} {'K':>2} {'steps/h':>8} {'x sync':>7} {'rollout idle':>13} {'trainer idle':>13} "
          f"{'reward first5':>14} {'last5':>6} {'staleness':>9} {'load (1 min)':>13}")
    sync = {f["seed"]: f["steps_per_hour"] for f in out["runs"] if f["k"] == args.ks[0]}
    for f in out["runs"]:
        f["x_sync"] = f["steps_per_hour"] / sync[f["seed"]]
        print(f"{f['seed']:>4} {f['k']:>2} {f['steps_per_hour']:>8.0f} {f['x_sync']:>7.2f} {f['rollout_idle']:>13.2f} "
              f"{f['trainer_idle']:>13.2f} {f['reward_first5']:>14.3f} {f['reward_last5']:>6.3f} "
              f"{f['staleness_mean']:>9.2f} {f['load_before'][0]:>6.2f}->{f['load_after'][0]:<5.2f}")
    out["summary"] = {}
    print(f"\nover seeds {args.seeds} (x = against K={args.ks[0]} of the same seed):")
    for k in args.ks:
        fs = [f for f in out["runs"] if f["k"] == k]
        last = [f["reward_last5"] for f in fs]
        sm = {"steps_per_hour": statistics.mean(f["steps_per_hour"] for f in fs),
              "x_sync": statistics.mean(f["x_sync"] for f in fs),
              "reward_first5": statistics.mean(f["reward_first5"] for f in fs),
              "reward_last5": statistics.mean(last),
              "reward_last5_sd": statistics.stdev(last) if len(last) > 1 else 0.0}
        out["summary"][k] = sm
        print(f"  K={k}: {sm['steps_per_hour']:.0f} steps/h (x{sm['x_sync']:.2f}), reward {sm['reward_first5']:.3f} -> "
              f"{sm['reward_last5']:.3f} (sd over seeds {sm['reward_last5_sd']:.3f})")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    res_dir = ROOT / "bench" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / f"async-{stamp}.json").write_text(json.dumps(out, indent=1))
    fig = Figure(figsize=(5 * len(args.seeds), 4), dpi=100)
    for i, seed in enumerate(args.seeds):
        ax = fig.add_subplot(1, len(args.seeds), i + 1)
        for f in out["runs"]:
            if f["seed"] == seed:
                ax.plot([c / 60 for c in f["clock_s"]], f["curve"], marker="o", ms=2, lw=1, label=f"K={f['k']}")
        ax.set_xlabel("wall clock of the GRPO step loop (min)")
        ax.set_ylabel("mean reward per step")
        ax.set_title(f"quickstart preset, seed {seed}")
        ax.legend()
    fig.suptitle("sync vs async GRPO (--max-steps-off-policy K)")
    fig.tight_layout()
    fig.savefig(res_dir / f"async-{stamp}.png")
    print(f"wrote {res_dir / f'async-{stamp}.json'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

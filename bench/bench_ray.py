"""Ray runtime scaling on CPU (issue 21): forward_backward + optim_step tokens/s with 1 and with 2
data-parallel trainer ranks (services/backend/ray_runtime.py), same batch, same run, next to the
in-process runtime as the baseline. Each rank has one CPU and one torch thread; the scaling
efficiency is tokens/s(2 ranks) / (2 x tokens/s(1 rank)) (the idle sampler replica holds a third
logical CPU). On a 2-core machine the second rank
shares the cores with the driver and Ray's own processes, so read it as a floor.

    .venv-runtime/bin/python bench/bench_ray.py [--steps 6] [--batch 16] [--seq 512] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from services.backend.codec import Datum, FwdBwdRequest  # noqa: E402
from services.backend.ray_runtime import RayRuntime  # noqa: E402
from services.backend.runtime import Runtime, TrainConfig  # noqa: E402
from services.backend.wire import adam_params  # noqa: E402

MODEL = ROOT / "models" / "qwen3-tiny-xs"


def run(rt, steps: int, data: list[Datum]) -> float:
    """tokens/s of forward_backward + optim_step over ``steps`` steps (after one warm-up step)."""
    rt.create_model("m", TrainConfig("tiny", rank=16, seed=0))
    adam = adam_params({"learning_rate": 1e-4})
    ntok = sum(len(d.tokens) for d in data)
    for i in range(steps + 1):
        if i == 1:
            t0 = time.perf_counter()
        rt.forward_backward(FwdBwdRequest("m", i + 1, "cross_entropy", {}, False, data))
        rt.optim_step("m", adam)
    return steps * ntok / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    data = []
    for _ in range(args.batch):
        seq = rng.integers(0, 8000, size=args.seq + 1)
        data.append(Datum(seq[:-1], {"target_tokens": seq[1:], "weights": np.ones(args.seq, np.float32)}))
    models = [{"name": "tiny", "path": str(MODEL)}]
    kw = dict(device="cpu", dtype="float32", threads=1)
    out: dict[str, float] = {"batch": args.batch, "seq": args.seq, "steps": args.steps, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        out["in_process_tok_s"] = run(Runtime(models, Path(tmp) / "p", **kw), args.steps, data)
        print(f"in-process runtime      {out['in_process_tok_s']:9.0f} tokens/s", flush=True)
        for n in (1, 2):
            rr = RayRuntime(models, Path(tmp) / f"r{n}", {"trainers": n, "samplers": 1, "num_cpus": 3,
                            "resources": {"trainer": {"CPU": 1}, "sampler": {"CPU": 1}}}, **kw)
            try:
                out[f"ray_{n}_ranks_tok_s"] = run(rr, args.steps, data)
            finally:
                rr.close()
            print(f"ray, {n} trainer rank(s) {out[f'ray_{n}_ranks_tok_s']:9.0f} tokens/s", flush=True)
    out["scaling_efficiency"] = out["ray_2_ranks_tok_s"] / (2 * out["ray_1_ranks_tok_s"])
    out["speedup_2_vs_1"] = out["ray_2_ranks_tok_s"] / out["ray_1_ranks_tok_s"]
    out["load_avg_1min"] = os.getloadavg()[0]
    print(f"2 ranks vs 1: x{out['speedup_2_vs_1']:.2f} (scaling efficiency {100 * out['scaling_efficiency']:.0f} %); "
          f"load average {out['load_avg_1min']:.1f} on {out['cpus']} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

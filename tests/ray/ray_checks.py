"""The Ray runtime's checks in one private Ray cluster (needs torch, peft and ray: run with .venv-runtime).

    .venv-runtime/bin/python tests/ray/ray_checks.py MODEL_DIR

Prints one JSON line per check ({"check": name, "ok": bool, ...figures}) and ``DONE`` at the end;
tests/ray/test_ray_runtime.py asserts on them. The cluster (``ray.init(num_cpus=2)``) holds 2 trainer
ranks and 2 sampler replicas; the reference is an in-process ``Runtime`` (one rank) in this process.

* ``dp_equal``: the same batch (datums of different lengths, two optimizer steps) through 2 ranks
  and through 1: loss, per-datum logprobs, the summed gradients and the updated weights agree to TOL.
* ``optimizer_checkpoint``: weights + sharded optimizer state saved by the 2 ranks load into the
  one-process runtime, and the next step there equals the next step on the ranks.
* ``samplers_match_trainer``: after ``snapshot_for_sampler`` both replicas serve requests and the
  sampled tokens' logprobs equal the trainer's forward logprobs; they differ from the base model's.
* ``full_ft``: the same for full fine-tuning (LoRA rank 0): weights after a step, sampled logprobs.
* ``release``: a finished session's model and snapshot are unloaded from the ranks and replicas.
* ``failover``: a replica's process is killed (SIGKILL); the next requests all succeed on the other
  one, Ray restarts the dead one (new pid), and it serves again with the weights re-installed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.backend.codec import Datum, FwdBwdRequest  # noqa: E402
from services.backend.errors import NotFound  # noqa: E402
from services.backend.ray_runtime import RayRuntime  # noqa: E402
from services.backend.runtime import Runtime, TrainConfig  # noqa: E402
from services.backend.sampler import SampleSpec  # noqa: E402

TOL = 1e-5         # float32: absolute on loss and logprobs, relative (to the largest entry) on gradients
# Updated weights, relative: Adam divides each gradient entry by its own magnitude, so the float32
# rounding of a different summation order (two shards + all-reduce) on near-zero entries shows up
# amplified in the update (measured ~3e-4 after two steps; no all-reduce gives > 1e-1).
WEIGHT_TOL = 1e-3
SAMPLE_TOL = 1e-4
ADAM = dict(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0)
NAME = "m"


def report(check: str, ok: bool, **kw) -> None:
    print(json.dumps({"check": check, "ok": bool(ok), **kw}), flush=True)


def batch(rng, lens) -> list[Datum]:
    out = []
    for n in lens:
        seq = rng.integers(0, 8000, size=n + 1)
        w = (rng.random(n) > 0.3).astype(np.float32)
        out.append(Datum(seq[:-1], {"target_tokens": seq[1:], "weights": w}))
    return out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-12))


def forward_lps(rt, mid: str, prompt: list[int], toks: list[int]) -> np.ndarray:
    seq = prompt + toks
    d = Datum(np.array(seq[:-1]), {"target_tokens": np.array(seq[1:]), "weights": np.ones(len(seq) - 1, np.float32)})
    out, _ = rt.forward_backward(FwdBwdRequest(mid, 0, "cross_entropy", {}, True, [d]))
    return out[0]["logprobs"][len(prompt) - 1:]


def main(model: str) -> None:
    models = [{"name": NAME, "path": model}]
    tmp = Path(tempfile.mkdtemp(prefix="lts-ray-"))
    kw = dict(device="cpu", dtype="float32", threads=1)
    ref = Runtime(models, tmp / "ref", **kw)
    t0 = time.time()
    rr = RayRuntime(models, tmp / "ray", {"trainers": 2, "samplers": 2, "num_cpus": 2,
                                          "resources": {"trainer": {"CPU": 0.5}, "sampler": {"CPU": 0.5}}}, **kw)
    print(f"# ray runtime up in {time.time() - t0:.1f}s", flush=True)
    try:
        cfg = TrainConfig(NAME, rank=8, seed=3)
        init = [p.detach().clone() for p in ref.create_model("a", cfg).params]
        rr.create_model("a", cfg)
        rng = np.random.default_rng(0)
        worst: dict[str, float] = {"loss": 0.0, "logprobs": 0.0, "grads": 0.0, "grad_norm": 0.0, "weights": 0.0}
        for step in range(2):
            data = batch(rng, [40, 7, 23, 31, 12])
            req = FwdBwdRequest("a", step + 1, "cross_entropy", {}, False, data)
            out1, m1 = ref.forward_backward(req)
            out2, m2 = rr.forward_backward(req)
            worst["loss"] = max(worst["loss"], abs(m1["loss:sum"] - m2["loss:sum"]))
            assert m1["num_tokens:sum"] == m2["num_tokens:sum"]
            worst["logprobs"] = max(worst["logprobs"], max(float(np.abs(a["logprobs"] - b["logprobs"]).max())
                                                           for a, b in zip(out1, out2)))
            g1 = [p.grad for p in ref.trainable("a").params]
            per_rank = rr._all("grads", "a")
            assert all(len(g) > 0 for g in per_rank), "every rank got datums and gradients"
            for i, g in enumerate(g1):
                worst["grads"] = max(worst["grads"], rel(sum(r[i] for r in per_rank), g))
            s1 = ref.optim_step("a", ADAM)
            s2 = rr.optim_step("a", ADAM)
            worst["grad_norm"] = max(worst["grad_norm"],
                                     abs(s1["grad_norm:mean"] - s2["grad_norm:mean"]) / s1["grad_norm:mean"])
            w1 = [p.detach() for p in ref.trainable("a").params]
            for w2 in rr._all("weights", "a"):  # every rank holds the same updated weights
                worst["weights"] = max(worst["weights"], max(rel(a, b) for a, b in zip(w2, w1)))
        moved = max(float((p.detach() - q).abs().max()) for p, q in zip(ref.trainable("a").params, init))
        ok = max(worst["loss"], worst["logprobs"], worst["grads"],
                 worst["grad_norm"]) <= TOL and worst["weights"] <= WEIGHT_TOL
        report("dp_equal", ok and moved > 1e-3, tol=TOL, weight_tol=WEIGHT_TOL, moved=moved, **worst)

        # sharded optimizer state -> one checkpoint -> the one-process runtime
        path = rr.save("a", "ck", "weights", True, False)
        ref.create_model("b", cfg)
        ref.load_into("b", path, True)
        data = batch(rng, [17, 29, 9])
        for mid, rt in (("b", ref), ("a", rr)):
            rt.forward_backward(FwdBwdRequest(mid, 9, "cross_entropy", {}, False, data))
            rt.optim_step(mid, ADAM)
        diff = max(rel(a, b.detach()) for a, b in zip(rr._all("weights", "a")[0], ref.trainable("b").params))
        report("optimizer_checkpoint", diff <= WEIGHT_TOL, diff=diff, tol=WEIGHT_TOL)

        # sampler replicas after a weight sync
        rr.snapshot_for_sampler("a", "snap1")
        prompts = [[int(x) for x in rng.integers(0, 8000, size=int(rng.integers(3, 9)))] for _ in range(12)]
        specs = [SampleSpec(prompt=p, num_samples=2, max_tokens=6, temperature=1.0,
                            seed=i) for i, p in enumerate(prompts)]
        served0 = list(rr.served)
        res = rr.sample(NAME, "snap1", specs)
        served = [a - b for a, b in zip(rr.served, served0)]
        worst_s = 0.0
        for p, r in zip(prompts, res):
            for toks, lps, _ in r.sequences:
                if len(toks) == 0:
                    continue
                tr = forward_lps(rr, "a", p, toks)
                worst_s = max(worst_s, float(np.abs(np.asarray(lps) - tr).max()))
        base = rr.sample(NAME, None, specs[:2])
        base_gap = max(float(np.abs(np.asarray(b.sequences[0][1]) - forward_lps(rr, "a", p, b.sequences[0][0])).max())
                       for p, b in zip(prompts[:2], base))
        report("samplers_match_trainer", worst_s <= SAMPLE_TOL and min(served) > 0 and base_gap > 10 * SAMPLE_TOL,
               max_abs=worst_s, tol=SAMPLE_TOL, served=served, base_gap=base_gap)

        # failover: kill one replica's process
        pid0 = rr._get(rr.samplers[0].pid.remote())
        os.kill(pid0, signal.SIGKILL)
        t1 = time.time()
        res = rr.sample(NAME, "snap1", specs)
        ok_all = all(len(r.sequences) == 2 for r in res)
        failover_s = time.time() - t1
        pid_new, deadline = None, time.time() + 180
        while time.time() < deadline:  # Ray restarts the replica; the runtime sees it back
            if 0 not in rr._down and rr._live() and 0 in rr._live():
                pid_new = rr._get(rr.samplers[0].pid.remote(), timeout=60)
                break
            rr._live()
            time.sleep(0.5)
        served0 = list(rr.served)
        res = rr.sample(NAME, "snap1", specs)
        back = rr.served[0] - served0[0]
        worst_s = 0.0
        for p, r in zip(prompts, res):
            for toks, lps, _ in r.sequences:
                if toks:
                    worst_s = max(worst_s, float(np.abs(np.asarray(lps) - forward_lps(rr, "a", p, toks)).max()))
        report("failover", ok_all and pid_new is not None and pid_new != pid0 and back > 0 and worst_s <= SAMPLE_TOL,
               failover_s=failover_s, old_pid=pid0, new_pid=pid_new, served_after_restart=back, max_abs=worst_s)

        # full fine-tuning: one step on 2 ranks == one process; its snapshot served by the replicas
        full = TrainConfig(NAME, rank=0, seed=0)
        ref.create_model("f", full)
        rr.create_model("f", full)
        data = batch(rng, [21, 13, 30])
        for rt in (ref, rr):
            rt.forward_backward(FwdBwdRequest("f", 1, "cross_entropy", {}, False, data))
            rt.optim_step("f", ADAM)
        wdiff = max(rel(a, b.detach()) for a, b in zip(rr._all("weights", "f")[0], ref.trainable("f").params))
        rr.snapshot_for_sampler("f", "snapf")
        res = rr.sample(NAME, "snapf", specs[:6])
        fdiff = max(float(np.abs(np.asarray(lps) - forward_lps(rr, "f", p, toks)).max())
                    for p, r in zip(prompts, res) for toks, lps, _ in r.sequences if toks)
        report("full_ft", wdiff <= WEIGHT_TOL and fdiff <= SAMPLE_TOL, weights=wdiff, sampled_max_abs=fdiff)

        # a finished session's model and snapshot leave the actors
        rr.release(["a"], ["snap1"])
        gone = []
        for call in (lambda: rr.sample(NAME, "snap1", specs[:1]), lambda: rr.forward_backward(
                FwdBwdRequest("a", 99, "cross_entropy", {}, True, data[:1]))):
            try:
                call()
            except NotFound:
                gone.append(True)
        report("release", len(gone) == 2 and not rr.has_sampler("snap1") and not any(rr._all("has_model", "a")))
    finally:
        rr.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

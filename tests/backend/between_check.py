"""Sampling between a forward_backward's micro-batches leaves its results and gradients unchanged.

Runs in the runtime venv (python tests/backend/between_check.py MODEL_DIR SPILL_DIR). The scheduler
answers waiting samples between micro-batches (``between``); sampling a LoRA snapshot makes that
snapshot's adapter the peft model's active one, so a runtime that did not set the trained model's
adapter again would run the later micro-batches with the snapshot's weights and put their gradients
on the snapshot's parameters. Prints OK."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from services.backend.codec import Datum, FwdBwdRequest
from services.backend.runtime import Runtime, TrainConfig
from services.backend.sampler import SampleSpec

ADAM = {"learning_rate": 0.05, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0.0}


def request(rng: np.random.Generator) -> FwdBwdRequest:
    data = []
    for n in (40, 37, 33, 30, 26, 21):   # 6 sequences, 2 per micro-batch of 96 tokens: 3 micro-batches
        seq = rng.integers(10, 8000, size=n + 1)
        data.append(Datum(seq[:-1], {"target_tokens": seq[1:], "weights": np.ones(n, np.float32)}))
    return FwdBwdRequest("m", 0, "cross_entropy", {}, False, data)


def main() -> int:
    rt = Runtime([{"name": "tiny", "path": sys.argv[1]}], Path(sys.argv[2]), threads=1,
                 max_tokens_per_microbatch=96, merge_lora_sampling=False)
    rt.create_model("m", TrainConfig("tiny", rank=4, seed=0))
    rng = np.random.default_rng(0)
    rt.forward_backward(request(rng))
    rt.optim_step("m", ADAM)
    rt.snapshot_for_sampler("m", "snap:s")   # a snapshot adapter
    rt.forward_backward(request(rng))
    rt.optim_step("m", ADAM)                 # the trained adapter moves on: now it differs from the snapshot
    tm = rt.trainable("m")
    req = request(rng)
    spec = SampleSpec(prompt=[5, 6, 7], max_tokens=4, seed=1)
    calls = []

    def sample_snapshot() -> None:
        calls.append(rt.sample("tiny", "snap:s", [spec]))

    runs = []
    for between in (None, sample_snapshot):
        for p in tm.params:
            p.grad = None
        outs, metrics = rt.forward_backward(req, between=between)
        runs.append(([o["logprobs"] for o in outs], [p.grad.clone() for p in tm.params], metrics["loss:sum"]))
    assert len(calls) == 2, f"between ran {len(calls)} times, expected 2 (3 micro-batches)"
    (lp0, g0, l0), (lp1, g1, l1) = runs
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(lp0, lp1)), "logprobs changed"
    assert abs(l0 - l1) < 1e-4, (l0, l1)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(g0, g1)), "gradients changed"
    assert any(float(g.abs().sum()) > 0 for g in g0)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

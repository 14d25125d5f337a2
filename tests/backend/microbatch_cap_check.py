"""forward_backward sizes its micro-batches from the device's total memory (issue 37 item 3), never from the memory
free at the moment (issue 41: the split, and so the update, must not depend on the machine's state).

Runs in the runtime venv (python tests/backend/microbatch_cap_check.py MODEL_DIR SPILL_DIR): with plenty of memory,
12 sequences of 300 tokens are one micro-batch (max_tokens_per_microbatch 8192); with the memory *available* reported
as 600 tokens' worth, still one micro-batch with bit-identical gradients (reproducibility); with the device's *total*
memory reported as what fits 600 tokens' activations, they run as 2-sequence micro-batches, with the same logprobs,
loss and gradients. Prints OK."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from services.backend import logprobs
from services.backend.codec import Datum, FwdBwdRequest
from services.backend.runtime import Runtime, TrainConfig


def main() -> int:
    rt = Runtime([{"name": "tiny", "path": sys.argv[1]}], Path(sys.argv[2]), threads=1,
                 max_tokens_per_microbatch=8192, merge_lora_sampling=False)
    rt.create_model("m", TrainConfig("tiny", rank=4, seed=0))
    rng = np.random.default_rng(0)
    data = []
    for _ in range(12):
        seq = rng.integers(10, 8000, size=301)
        data.append(Datum(seq[:-1], {"target_tokens": seq[1:], "weights": np.ones(300, np.float32)}))
    req = FwdBwdRequest("m", 0, "cross_entropy", {}, False, data)
    tm = rt.trainable("m")
    hf = rt.bases["tiny"].hf
    per_token = logprobs.activation_bytes_per_token(hf.config, 4, False)
    runs = []
    for what, nbytes in (("plenty", None), ("available", per_token * 600), ("capacity", per_token * 600)):
        if what == "available":   # what a busy host reports as free now: must not change the split
            logprobs.available_bytes = lambda device, a=nbytes: a
        if what == "capacity":    # a machine whose total memory fits 600 tokens' activations
            share = logprobs.memory_share(rt.bases["tiny"].device)
            logprobs.capacity_bytes = lambda device, a=int(nbytes / share): a
        for p in tm.params:
            p.grad = None
        calls: list[int] = []
        outs, metrics = rt.forward_backward(req, between=lambda c=calls: c.append(1))
        runs.append((len(calls) + 1, [o["logprobs"] for o in outs], [p.grad.clone() for p in tm.params],
                     metrics["loss:sum"]))
    (n0, lp0, g0, l0), (na, lpa, ga, la), (n1, lp1, g1, l1) = runs
    assert (n0, na, n1) == (1, 1, 6), (f"micro-batches: {n0} with plenty of memory, {na} with little free now (must "
                                       f"not change), {n1} on a machine with 600 tokens' worth")
    assert la == l0 and all((a == b).all() for a, b in zip(ga, g0)), "the same request, a different update"
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(lp0, lp1)), "logprobs changed"
    assert abs(l0 - l1) < 1e-3 * abs(l0), (l0, l1)
    worst = max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-12)) for a, b in zip(g0, g1))
    assert worst < 1e-4, f"gradients changed: {worst:.2e} of the largest"
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

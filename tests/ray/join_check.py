"""The Ray runtime joining a cluster that is already running (``engine.ray.address: auto``, which
resolves $RAY_ADDRESS first). Run with .venv-runtime, RAY_ADDRESS set to a `ray start --head`:

    RAY_ADDRESS=127.0.0.1:PORT .venv-runtime/bin/python tests/ray/join_check.py MODEL_DIR

Trains one step on 2 ranks, samples from a replica after a weight sync, closes the runtime, and
checks the cluster is still up with all its CPUs free again (actors and placement group gone). Prints OK on success.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.backend.codec import Datum, FwdBwdRequest  # noqa: E402
from services.backend.ray_runtime import RayRuntime  # noqa: E402
from services.backend.runtime import TrainConfig  # noqa: E402
from services.backend.sampler import SampleSpec  # noqa: E402


def main(model: str) -> None:
    rr = RayRuntime([{"name": "m", "path": model}], Path(tempfile.mkdtemp(prefix="lts-ray-join-")),
                    {"address": "auto", "trainers": 2, "samplers": 1,
                     "resources": {"trainer": {"CPU": 0.5}, "sampler": {"CPU": 0.5}}}, threads=1)
    assert not rr._own_cluster
    rr.create_model("a", TrainConfig("m", 4))
    seq = np.arange(1, 40)
    _, m = rr.forward_backward(FwdBwdRequest("a", 1, "cross_entropy", {}, False,
                                             [Datum(seq[:-1], {"target_tokens": seq[1:]})] * 3))
    assert m["num_tokens:sum"] == 3 * 38, m
    rr.optim_step("a", dict(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=0.0))
    rr.snapshot_for_sampler("a", "k")
    assert len(rr.sample("m", "k", [SampleSpec([1, 2, 3], num_samples=2, max_tokens=4)])[0].sequences) == 2
    rr.close()

    ray.init(address="auto")
    free, deadline = {}, time.time() + 60
    while time.time() < deadline:  # the actors' CPUs and the placement group return to the cluster
        free = ray.available_resources()
        if free.get("CPU") == ray.cluster_resources().get("CPU") == 2.0:
            break
        time.sleep(0.5)
    assert free.get("CPU") == 2.0, free
    ray.shutdown()
    print("OK")


if __name__ == "__main__":
    main(sys.argv[1])

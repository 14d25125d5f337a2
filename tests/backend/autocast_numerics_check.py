"""Run by test_bench_numerics: bench_numerics' static-sampler measure with the trainer's forward under bf16 autocast
on the CPU, as gpu/logprobs.bf16_lora runs it on CUDA (a CPU proxy of the GPU trainer). Prints one JSON line per
mode (r32, a32)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
from services.backend import logprobs  # noqa: E402


@contextlib.contextmanager
def cpu_autocast(module):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


logprobs.bf16_lora = cpu_autocast
import bench_numerics  # noqa: E402

for mode in ("r32", "a32"):
    row = bench_numerics.measure(sys.argv[1], "cpu", "bfloat16", "static", 8, 32, 0, mode)
    print(json.dumps({"logits": mode, "mean": row["mismatch/abs_diff_mean"], "p99": row["mismatch/abs_diff_p99"]}))

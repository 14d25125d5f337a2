"""bench/bench_numerics.py on the CPU (issue 41 item 2): the backend's HF and static samplers against its trainer's
forward of the tokens they drew, through the runtime itself. In float32 they agree to ~1e-6 nats (the contract the
RL loop's per-step figures check too); the bench prints tinker-cookbook's kl_sample_train_v1/_v2 beside |diff|.
Planted: the sampler's logprobs shifted by one token -> mean |diff| ~0.3 -> fails."""

from __future__ import annotations

import json
import os
import subprocess

from helpers import REPO, RUNTIME_PY, TINY_PATH


def test_bench_numerics_static_and_hf_agree_with_the_trainer_on_cpu(tmp_path):
    out = tmp_path / "numerics.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    r = subprocess.run([RUNTIME_PY, str(REPO / "bench" / "bench_numerics.py"), "--model", str(TINY_PATH),
                        "--samplers", "hf,static", "--prompts", "6", "--new-tokens", "24", "--json", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    print(r.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["sampler"] for row in rows] == ["hf", "static"]
    for row in rows:
        assert row["mismatch/tokens"] == 6 * 24, row   # every drawn token measured (no stop token at this length)
        assert row["mismatch/abs_diff_mean"] < 1e-4 and row["mismatch/abs_diff_max"] < 1e-3, row
        assert abs(row["optim/kl_sample_train_v1"]) < 1e-5, row
    assert "kl_sample_train_v1" in r.stdout and "abs_diff_p99" in r.stdout

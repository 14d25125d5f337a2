"""``engine.sampler: vllm`` (services/backend/engines/vllm.py) on CPU: CONTRACT tests.

vLLM does not run here (it needs a GPU and a torch build its wheel pins). These tests drive the runtime's
vLLM sampler against tests/gpu/fake_vllm, a stand-in holding to vLLM's offline API where the sampler relies
on it (dummy-initialised weights, ``load_weights`` by HF names, prefix cache reset after a push, raw
logprobs). They prove the sampler's side of the contract, not vLLM: the real engine ran on the H200
(bench/bench_gpu_vllm.py, and runtime_static_check.py with SAMPLER vllm; docs/performance.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import REPO, RUNTIME_PY
from services.backend.engines import SelectedWeights, StaticSampling, make_engine
from services.backend.engines.vllm import VllmSampling, sampling_params, to_result
from services.backend.sampler import SampleSpec

FAKE = REPO / "tests" / "gpu" / "fake_vllm"


@pytest.mark.skipif(not Path(RUNTIME_PY).exists(), reason="runtime venv missing")
def test_runtime_snapshots_through_the_vllm_sampler(tiny_model):
    """LoRA and full-FT snapshots, after optim_step, sampled through Runtime.sample with sampler='vllm': the
    sampled logprobs equal the trainer's forward (so the merged weights were pushed, under the names the
    model takes, and the prefix cache was reset), a snapshot keeps its weights after further training."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{FAKE}{os.pathsep}{REPO}")
    r = subprocess.run([RUNTIME_PY, str(REPO / "tests" / "gpu" / "runtime_static_check.py"), "cpu", "float32", "1e-4",
                        "vllm"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, (r.stdout + r.stderr)[-4000:]
    assert "'fallback_requests': 0" in r.stdout and "'weight_pushes': 0" not in r.stdout


def test_sampling_params_carry_the_spec():
    cls = SimpleNamespace  # records the keyword arguments
    p = sampling_params(SampleSpec(prompt=[1, 2], num_samples=3, max_tokens=9, temperature=0.7, top_k=5, top_p=0.9,
                                   seed=11, stop_token_ids={7, 3}, stop_strings=["\n\n"], prompt_logprobs=True), cls)
    assert (p.n, p.max_tokens, p.temperature, p.top_k, p.top_p, p.seed) == (3, 9, 0.7, 5, 0.9, 11)
    assert p.stop_token_ids == [3, 7] and p.stop == ["\n\n"] and p.ignore_eos and p.logprobs == 0
    assert p.prompt_logprobs == 0
    q = sampling_params(SampleSpec(prompt=[1], top_k=-1, topk_prompt_logprobs=4), cls)
    assert not hasattr(q, "top_k") and q.prompt_logprobs == 4 and q.stop is None
    # a later chunk of a seeded request (row_offset) draws other rows than the first chunk
    first = sampling_params(SampleSpec(prompt=[1], seed=5), cls).seed
    later = sampling_params(SampleSpec(prompt=[1], seed=5, row_offset=8), cls).seed
    assert first == 5 and later != first


def _lp(v, rank=1):
    return SimpleNamespace(logprob=v, rank=rank)


def test_results_and_prompt_logprobs():
    spec = SampleSpec(prompt=[5, 6, 7, 8], num_samples=2, prompt_logprobs=True, topk_prompt_logprobs=2,
                      prompt_logprobs_last_n=2)
    out = SimpleNamespace(
        outputs=[SimpleNamespace(index=1, token_ids=[4], logprobs=[{4: _lp(-0.5)}], finish_reason="stop"),
                 SimpleNamespace(index=0, token_ids=[1, 2], logprobs=[{1: _lp(-1.0)}, {2: _lp(-2.0), 9: _lp(-0.1)}],
                                 finish_reason="length")],
        prompt_logprobs=[None, {6: _lp(-3.0, 5), 1: _lp(-0.2, 1), 2: _lp(-0.3, 2)},
                         {7: _lp(-0.4, 1), 3: _lp(-1.4, 2)}, {8: _lp(-2.5, 3), 3: _lp(-0.6, 1), 4: _lp(-0.7, 2)}])
    r = to_result(spec, out)
    assert r.sequences == [([1, 2], [-1.0, -2.0], "length"), ([4], [-0.5], "stop")]
    pl = r.prompt_logprobs
    assert np.isnan(pl[0]) and np.isnan(pl[1]) and pl[2] == np.float32(-0.4) and pl[3] == np.float32(-2.5)
    tids, tlps = r.topk_prompt
    assert tids[2].tolist() == [7, 3] and tids[3].tolist() == [3, 4] and tids[1].tolist() == [0, 0]
    assert np.allclose(tlps[3], [-0.6, -0.7]) and tlps[1, 0] == -99999.0
    bad = SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[1, 2], logprobs=[{1: _lp(-1.0)}],
                                                   finish_reason="length")], prompt_logprobs=None)
    with pytest.raises(RuntimeError, match="1 logprobs for 2 tokens"):
        to_result(SampleSpec(prompt=[1]), bad)


def test_engine_choice_and_a_clear_error_without_vllm(monkeypatch):
    assert make_engine("hf", "cuda", None, 8).name == "hf"
    assert isinstance(make_engine("static", "cpu", None, 8), StaticSampling)
    assert isinstance(make_engine("VLLM", "cpu", None, 8), VllmSampling)  # vllm not imported yet
    with pytest.raises(ValueError, match="auto, static, hf or vllm"):
        make_engine("sglang", "cuda", None, 8)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as where it is not installed
    with pytest.raises(RuntimeError, match="vllm cannot be imported"):
        VllmSampling({}, 8).params_cls()


def test_long_requests_and_resumed_rows_go_to_the_fallback():
    made = {}

    class LLM:
        def __init__(self, **kw):
            made.update(kw)

        def apply_model(self, fn):
            return [fn(SimpleNamespace(load_weights=lambda w: list(w)))]

        def reset_prefix_cache(self):
            return True

        def generate(self, prompts, params, use_tqdm=True):
            return [SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[3], logprobs=[{3: _lp(-1.0)}],
                                                             finish_reason="length")], prompt_logprobs=None)
                    for _ in prompts]

    hf = torch.nn.Linear(2, 2)
    hf.config = SimpleNamespace(tie_word_embeddings=True)
    base = SimpleNamespace(name="m", path="/models/m", dtype=torch.bfloat16, hf=hf,
                           info=SimpleNamespace(max_context=64))
    vs = VllmSampling({"max_context": 32, "gpu_memory_utilization": 0.5, "enforce_eager": True, "kv_cache_gb": 2,
                       "cuda_graphs": False, "attention": "triton"}, 8, llm_factory=LLM)
    vs._params_cls = SimpleNamespace
    specs = [SampleSpec(prompt=[1] * 10, max_tokens=22), SampleSpec(prompt=[1] * 10, max_tokens=23),
             SampleSpec(prompt=[1, 2], prefix=([2], [-1.0]))]
    seen = []
    res = vs.sample(base, SelectedWeights(None, None), specs, lambda sp: [seen.append(s) or "hf" for s in sp])
    assert res[0].sequences[0][0] == [3] and res[1:] == ["hf", "hf"] and len(seen) == 2
    assert made["max_model_len"] == 32 and made["max_num_seqs"] == 8 and made["enforce_eager"] is True
    assert made["load_format"] == "dummy" and made["dtype"] == "bfloat16" and made["gpu_memory_utilization"] == 0.5
    assert made["hf_overrides"] == {"tie_word_embeddings": False}
    # configure.py's kv_cache_gb is vLLM's KV budget; the static engine's own options are not passed to vLLM
    assert made["kv_cache_memory_bytes"] == 2 * 2**30 and not {"kv_cache_gb", "cuda_graphs", "attention"} & set(made)
    assert vs.stats["weight_pushes"] == 1 and vs.stats["fallback_requests"] == 2
    vs.sample(base, SelectedWeights(None, None), specs[:1], None)
    assert vs.stats["weight_pushes"] == 1  # same weights: no second push

"""The two-launch token choice (services/backend/gpu/sampling.choose_kernel) against its torch
reference ``sampling.choose`` (unfiltered), on CUDA (run on the GPU machine: ``python3 -m pytest
tests/gpu/test_sampling_kernel.py``; skipped without CUDA), and the engine's choice of it. ``choose``
itself is tested on CPU against HF's logprobs in test_static_engine.py."""

from __future__ import annotations

import pytest
import torch

from services.backend.gpu import sampling
from services.backend.gpu.engine import StaticEngine


@pytest.mark.skipif(not (torch.cuda.is_available() and sampling.available()), reason="needs CUDA and Triton")
@pytest.mark.parametrize("V", [151936, 5000, 2048])
def test_kernel_draws_the_reference_tokens(V):
    b = 64
    g = torch.Generator(device="cuda").manual_seed(V)
    temp = torch.rand(b, device="cuda", generator=g) + 0.3
    temp[:8] = 0.0  # greedy rows
    topk = torch.zeros(b, dtype=torch.int64, device="cuda")
    topk[8:12] = 1  # greedy by top_k == 1
    seed = torch.randint(0, 2**62, (b,), device="cuda", generator=g)
    vidx = torch.arange(V, device="cuda")
    same = total = 0
    for step_no in range(10):  # fresh logits and stream counters each time
        logits = (torch.randn(b, V, device="cuda", generator=g) * 4).bfloat16()
        step = torch.full((b,), step_no * 977, dtype=torch.int64, device="cuda")
        want_t, want_lp = sampling.choose(logits, temp, topk, torch.ones(b, device="cuda"), seed, step, vidx, False)
        got_t, got_lp = sampling.choose_kernel(logits, temp, topk, seed, step)
        assert got_t.dtype == torch.int64 and got_lp.dtype == torch.float32
        assert torch.equal(got_t[:12], want_t[:12])  # greedy: the first maximum, exactly
        same += int((got_t == want_t).sum())
        total += b
        lp_of_got = torch.log_softmax(logits.float(), -1).gather(-1, got_t[:, None])[:, 0]
        assert float((got_lp - lp_of_got).abs().max()) < 1e-4
    assert same >= 0.99 * total, (same, total)  # the same noise: only float32 near-ties may differ


def test_token_choice_resolution():
    assert StaticEngine.resolve_token_choice("auto", torch.device("cpu")) == "torch"
    want = "kernel" if sampling.available() else "torch"
    assert StaticEngine.resolve_token_choice("auto", torch.device("cuda")) == want
    with pytest.raises(ValueError):
        StaticEngine.resolve_token_choice("kernel", torch.device("cpu"))
    with pytest.raises(ValueError):
        StaticEngine.resolve_token_choice("fast", torch.device("cuda"))

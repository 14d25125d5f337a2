"""The decode GEMM (services/backend/gpu/skinny_gemm.py) and the bf16 LoRA branches of training
(services/backend/gpu/logprobs.bf16_lora) on CUDA; both skipped without CUDA (run on the GPU machine:
``python3 -m pytest tests/gpu/test_skinny_gemm.py``). The CPU path of the split-GEMM decode layer is
covered by test_static_engine.py::test_split_gemm_decode_matches_hf."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from services.backend.gpu import logprobs as gpu_logprobs
from services.backend.gpu import skinny_gemm as sg

cuda = pytest.mark.skipif(not (torch.cuda.is_available() and sg.available()), reason="needs CUDA and Triton")


@cuda
@pytest.mark.parametrize("M", [1, 3, 17, 64])
@pytest.mark.parametrize("N,K,cfg", [(6144, 2560, (64, 128, 2, 4, 4)), (2560, 4096, (32, 256, 8, 4, 4)),
                                     (2560, 9728, (64, 128, 4, 4, 4)), (19456, 2560, (128, 128, 1, 4, 4)),
                                     (1000, 300, (16, 128, 3, 4, 3))])
def test_skinny_mm_matches_float32(M, N, K, cfg):
    g = torch.Generator(device="cuda").manual_seed(M * N + K)
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = torch.randn(2 * N, K, device="cuda", generator=g).bfloat16()[::2]  # a row stride of 2 K
    ref = x.double() @ w.double().t()
    out = sg.mm(x, w, cfg)
    assert out.dim() == (3 if K > sg.split_len(K, cfg[1], cfg[2]) else 2)
    y = sg.reduce(out, torch.bfloat16).double()
    assert torch.isfinite(y).all()
    assert float((y - ref).norm() / ref.norm()) < 1e-2


@cuda
@pytest.mark.parametrize("M", [1, 3, 16, 64])
@pytest.mark.parametrize("F,K", [(9728, 2560), (3072, 1024), (1000, 300)])
def test_mm_silu_matches_reference(M, F, K):
    """The gate/up GEMM with SiLU * up in its epilogue, against its torch reference and float64."""
    for seed in range(2):  # fresh random inputs each time
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * F + K)
        x = (torch.randn(M, K, device="cuda", generator=g) / K ** 0.5).bfloat16()
        w = torch.randn(2 * F, K, device="cuda", generator=g).bfloat16()
        out = sg.mm_silu(x, w)
        assert out.shape == (M, F) and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
        gu = x.double() @ w.double().t()
        ref = torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
        assert float((out.double() - sg.mm_silu_reference(x, w).double()).norm() / ref.norm()) < 1e-2


@pytest.mark.skipif(not (torch.cuda.is_available() and sg.tma_available(torch.device("cuda"))),
                    reason="needs a Hopper GPU (TMA) and Triton")
@pytest.mark.parametrize("M", [17, 40, 64])
@pytest.mark.parametrize("F,K", [(9728, 2560), (3072, 1024)])
def test_mm_silu_tma_matches_reference(M, F, K):
    for seed in range(2):
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * F + K)
        x = (torch.randn(M, K, device="cuda", generator=g) / K ** 0.5).bfloat16()
        w = torch.randn(2 * F, K, device="cuda", generator=g).bfloat16()
        out = sg.mm_silu_tma(x, w)
        assert out.shape == (M, F) and torch.isfinite(out).all()
        gu = x.double() @ w.double().t()
        ref = torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.skipif(not (torch.cuda.is_available() and sg.tma_available(torch.device("cuda"))),
                    reason="needs a Hopper GPU (TMA) and Triton")
@pytest.mark.parametrize("M", [17, 40, 64])
@pytest.mark.parametrize("N,K,cfg", [(6144, 2560, None), (2560, 4096, None), (2560, 9728, (32, 64, 8, 4, 4)),
                                     (70000, 512, None), (1000, 264, (64, 64, 2, 4, 3))])
def test_mm_tma_matches_float64(M, N, K, cfg):
    """The split-K TMA GEMM of the 17-64-row decode layer: its partials summed equal x @ w^T (float64); every
    output element written (its allocation reuses a freed block of NaNs: NaN never passes)."""
    for seed in range(2):
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * N + K)
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        torch.full((16 * M * N,), float("nan"), device="cuda")  # freed at once: the output's block holds NaNs
        out = sg.mm_tma(x, w, cfg)
        BN, BK, split = (cfg or sg.tma_config(N, K))[:3]
        assert out.dim() == (3 if K > sg.split_len(K, BK, split) else 2)
        y = sg.reduce(out, torch.float32).double()
        ref = x.double() @ w.double().t()
        assert y.shape == (M, N) and torch.isfinite(y).all()
        assert float((y - ref).norm() / ref.norm()) < 1e-2


@cuda
def test_bf16_lora_same_logprobs_and_gradients():
    """The LoRA branches in bf16 give the trainer's logprobs and the adapters' (float32) gradients of
    peft's float32 branches, within bf16 rounding."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    model = Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    lcfg = peft.LoraConfig(r=8, lora_alpha=32, target_modules=targets, init_lora_weights=False)
    pm = peft.get_peft_model(model, lcfg)
    ids = torch.randint(0, 4096, (2, 64), device="cuda")
    tgt = torch.roll(ids, -1, 1)
    runs = []
    for on in (False, True):
        gpu_logprobs.LORA_BF16 = on
        try:
            pm.zero_grad(set_to_none=True)
            with gpu_logprobs.bf16_lora(pm):
                lp = gpu_logprobs.fused_token_logprobs(pm, ids, tgt)
            lp.sum().backward()
        finally:
            gpu_logprobs.LORA_BF16 = True
        grads = [p.grad.clone() for n, p in pm.named_parameters() if "lora_" in n]
        assert all(p.dtype == torch.float32 for n, p in pm.named_parameters() if "lora_" in n)
        runs.append((lp.detach(), grads))
    (lp32, g32), (lp16, g16) = runs
    assert float((lp16 - lp32).abs().mean()) < 0.05
    for a, b in zip(g32, g16):
        assert b.dtype == torch.float32
        assert float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)) > 0.98


@cuda
@pytest.mark.parametrize("M", [1, 16, 64])
def test_f32_outputs_are_the_unrounded_sums(M):
    """A float32 residual stream's GEMMs (``f32``): mm / mm_tma write float32 [M, N] unsplit too (float32 sums,
    not rounded to bf16: within 1e-5 of float64, where bf16 is 4e-3 away), mm_silu's gate and up are not rounded
    first (its reference with f32). Planted: the bf16 outputs fail the 1e-5 bound."""
    g = torch.Generator(device="cuda").manual_seed(M)
    K, N = 1024, 3072
    x = (torch.randn(M, K, device="cuda", generator=g) / K ** 0.5).bfloat16()
    w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
    ref = x.double() @ w.double().t()
    rel = lambda y: float((sg.reduce(y, torch.float32).double() - ref).norm() / ref.norm())  # noqa: E731
    out = sg.mm(x, w, (64, 128, 1, 4, 4), f32=True)     # unsplit: float32 [M, N]
    assert out.dtype == torch.float32 and out.shape == (M, N) and rel(out) < 1e-5
    assert rel(sg.mm(x, w, (64, 128, 1, 4, 4))) > 1e-4  # the bf16 output is rounded
    if sg.tma_available(torch.device("cuda")) and M > 16:
        out = sg.mm_tma(x, w, (64, 64, 1, 4, 3), f32=True)
        assert out.dtype == torch.float32 and out.shape == (M, N) and rel(out) < 1e-5
        out = sg.mm_tma(x, w, (64, 64, 1, 4, 3), pdl=True, f32=True) if sg.pdl_available(torch.device("cuda")) \
            else out
        assert out.dtype == torch.float32 and rel(out) < 1e-5
    wgu = torch.randn(2 * N, K, device="cuda", generator=g).bfloat16()
    want = sg.mm_silu_reference(x, wgu, f32=True).float()
    rounded = sg.mm_silu_reference(x, wgu).float()
    fns = [lambda: sg.mm_silu(x, wgu, f32=True)]
    if sg.tma_available(torch.device("cuda")) and M > 16:
        fns.append(lambda: sg.mm_silu_tma(x, wgu, f32=True))
        if sg.pdl_available(torch.device("cuda")):
            fns.append(lambda: sg.mm_silu_tma(x, wgu, pdl=True, f32=True))
    for f in fns:
        got = f().float()
        assert float((got - want).norm() / want.norm()) < float((rounded - want).norm() / want.norm())

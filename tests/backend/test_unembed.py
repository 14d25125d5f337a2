"""The float32 unembedding both sides of an RL step take their logits from (services/backend/unembed.py, issue 41).

On bf16 operands its logits equal a float64 product of the same bf16 values to float32 precision, where a bf16 linear
rounds them to 2^-9 relative (planted: the default (LTS_LOGITS_F32 unset) path -> the error is thousands of times
larger -> fails); its gradients are the bf16 linear's; a peft LoRA lm_head keeps its adapter's term and gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.backend import unembed
from services.backend.unembed import head_logits, linear_f32


@pytest.fixture(autouse=True)
def _enabled(monkeypatch):
    """LTS_LOGITS_F32=1 (opt-in): the float32 unembedding under test."""
    monkeypatch.setattr(unembed, "ENABLED", True)


def _operands(seed: int = 0, n: int = 16, h: int = 64, v: int = 512):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, h, generator=g) * 2).bfloat16().requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.5).bfloat16().requires_grad_()
    return x, w


def test_bf16_logits_come_out_at_float32_precision():
    x, w = _operands()
    ref = x.double() @ w.double().t()
    y = linear_f32(x, w)
    assert y.dtype == torch.float32
    err = (y.double() - ref).abs().max().item()
    rounded = (F.linear(x, w).double() - ref).abs().max().item()   # the bf16 logits the backend had before
    print(f"max |logit error|: float32 out {err:.2e}, bf16 out {rounded:.2e}")
    assert err < 1e-4 * ref.abs().max().item() and rounded > 100 * err


def test_disabled_gives_the_bf16_logits(monkeypatch):
    x, w = _operands(1)
    monkeypatch.setattr(unembed, "ENABLED", False)
    assert torch.equal(linear_f32(x, w), F.linear(x, w).float())


def test_gradients_match_the_bf16_linear():
    x, w = _operands(2)
    g = torch.randn(x.shape[0], w.shape[0])
    linear_f32(x, w).backward(g)
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    F.linear(x, w).float().backward(g)
    assert gx.dtype == x.dtype and gw.dtype == w.dtype
    torch.testing.assert_close(gx.float(), x.grad.float(), rtol=2e-2, atol=1e-2)
    torch.testing.assert_close(gw.float(), w.grad.float(), rtol=2e-2, atol=1e-2)


def test_float32_models_are_unchanged():
    x, w = _operands(3)
    x32, w32 = x.detach().float(), w.detach().float()
    assert torch.equal(linear_f32(x32, w32), F.linear(x32, w32))


def test_a_lora_lm_head_keeps_its_adapter():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("lm_head", torch.nn.Linear(64, 512, bias=False, dtype=torch.bfloat16))
    lm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["lm_head"]))
    head = lm.base_model.model.lm_head
    torch.nn.init.normal_(head.lora_B["default"].weight, std=0.1)   # a trained adapter (B != 0)
    x, _ = _operands(4)
    x = x.detach()
    y = head_logits(head, x)
    ref = head(x.float().to(torch.bfloat16)).float()
    torch.testing.assert_close(y, ref, rtol=2e-2, atol=5e-2)
    y.sum().backward()
    assert head.lora_B["default"].weight.grad is not None and head.lora_B["default"].weight.grad.abs().sum() > 0


def test_matched_gemm_implies_float32_attention_residual_and_logits():
    """LTS_MATCHED_GEMM=1 (batch-invariant GEMMs, invariant_gemm.py) turns on the float32 stream it serves;
    without CUDA, mm_f32 keeps the CPU path (planted: the flag not implying ATTENTION_F32 -> fails)."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415
    code = ("import torch; from services.backend import unembed as u; "
            "x = torch.randn(3, 8).bfloat16(); w = torch.randn(5, 8).bfloat16(); "
            "print(u.MATCHED_GEMM, u.ATTENTION_F32, u.RESIDUAL_F32, u.ENABLED, "
            "torch.equal(u.mm_f32(x, w), x.float() @ w.float().t()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LTS_MATCHED_GEMM": "1"},
                         cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True"] * 5, out.stdout + out.stderr


def test_float32_logits_survive_autocast():
    """The trainer's CUDA LoRA forward runs under bf16 autocast (gpu/logprobs.bf16_lora); the unembedding's float32
    output must not be rounded to bf16 there (planted: no autocast guard in mm_f32 -> CPU autocast's bf16 linear ->
    fails). A CPU proxy of the whole trainer under autocast: a32 mean 7.0e-4 before both guards, 2.5e-5 after."""
    x, w = _operands()
    plain = unembed.mm_f32(x.detach(), w.detach())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = unembed.mm_f32(x.detach(), w.detach())
    assert under.dtype == torch.float32 and torch.equal(plain, under)

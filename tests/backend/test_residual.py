"""The float32 residual stream of a half-precision HF model (services/backend/residual.py, LTS_RESIDUAL_F32, issue
41 item 3), on the CPU: its linears write the float32 sums of the bf16 products (where a bf16 linear rounds them to
2^-9: planted, the plain nn.Linear -> fails the bound), their gradients are the bf16 linear's, ``apply`` turns every
decoder linear (not the lm_head) and keeps the hidden states float32 between layers, and LoRA still trains through
it. The end-to-end effect (sampler vs trainer) is test_bench_numerics.py's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen3Config, Qwen3ForCausalLM

from services.backend import residual, unembed


@pytest.fixture(autouse=True)
def _enabled(monkeypatch):
    monkeypatch.setattr(unembed, "RESIDUAL_F32", True)
    monkeypatch.setattr(unembed, "ENABLED", True)


def _linear(seed=0, n_in=64, n_out=96):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(n_in, n_out, bias=False, dtype=torch.bfloat16)
    torch.nn.init.normal_(lin.weight, std=0.5)
    return lin


def test_the_output_is_the_float32_sum_of_the_bf16_products():
    lin = _linear()
    x = (torch.randn(8, 64) * 2).bfloat16()
    ref = x.double() @ lin.weight.double().t()
    rounded = (lin(x).double() - ref).abs().max().item()
    lin.__class__ = residual.F32OutLinear
    y = lin(x.float())            # a float32 hidden state: rounded to bf16 once, as the GEMM reads it
    assert y.dtype == torch.float32
    err = (y.double() - ref).abs().max().item()
    assert err < 1e-4 * ref.abs().max().item() and rounded > 100 * err, (err, rounded)


def test_gradients_match_the_bf16_linear():
    lin = _linear(1)
    x = (torch.randn(8, 64)).bfloat16().requires_grad_()
    g = torch.randn(8, 96)
    F.linear(x, lin.weight).float().backward(g)
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad = lin.weight.grad = None
    lin.__class__ = residual.F32OutLinear
    lin(x).backward(g)
    assert x.grad.dtype == torch.bfloat16 and lin.weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x.grad.float(), gx.float(), rtol=2e-2, atol=1e-2)
    torch.testing.assert_close(lin.weight.grad.float(), gw.float(), rtol=2e-2, atol=1e-2)


def _tiny():
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()


def test_apply_keeps_the_stream_float32_and_lora_trains():
    model = _tiny()
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        before = model(ids, output_hidden_states=True)
    assert residual.apply(model) and residual.enabled(model)
    assert type(model.lm_head) is residual.RoundInLinear   # bf16 in (the backend's logits: unembed.head_logits)
    assert all(type(m) is residual.F32OutLinear for m in model.model.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        after = model(ids, output_hidden_states=True)
    assert all(h.dtype == torch.float32 for h in after.hidden_states[1:])
    assert before.hidden_states[-1].dtype == torch.bfloat16
    # the same model up to bf16 roundings of the stream
    torch.testing.assert_close(after.logits.float(), before.logits.float(), rtol=0.05, atol=0.05)
    peft = pytest.importorskip("peft")
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"],
                                                    init_lora_weights=False))
    out = pm(ids).logits.float()
    out.logsumexp(-1).mean().backward()
    grads = [p.grad for n, p in pm.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_off_or_float32_is_left_alone(monkeypatch):
    model = _tiny()
    monkeypatch.setattr(unembed, "RESIDUAL_F32", False)
    assert not residual.apply(model) and not residual.enabled(model)
    monkeypatch.setattr(unembed, "RESIDUAL_F32", True)
    assert not residual.apply(model.float())


def test_float32_attention_survives_autocast():
    """The trainer's CUDA forward of a LoRA model runs under bf16 autocast (gpu/logprobs.bf16_lora); f32_sdpa's
    float32 attention must not be cast back to bf16 there (planted: no ``autocast(enabled=False)`` -> bf16 out, 5e-3
    off -> fails). CPU autocast casts sdpa the same way, so this runs here."""
    from types import SimpleNamespace  # noqa: PLC0415

    from services.backend import hf_decode  # noqa: PLC0415
    m = SimpleNamespace(o_proj=SimpleNamespace(weight=torch.zeros(1, dtype=torch.bfloat16)), num_key_value_groups=1,
                        is_causal=True, training=False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 32, generator=g) for _ in range(3))
    plain = hf_decode.f32_sdpa(m, q, k, v, None, is_causal=True)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = hf_decode.f32_sdpa(m, q, k, v, None, is_causal=True)[0]
    assert under.dtype == torch.float32 and torch.equal(plain, under)

"""The split-GEMM decode layer's Triton pieces (services/backend/gpu/decode_pieces.py) against the torch
pieces of StaticQwen3 they replace, in bf16 on CUDA (run on the GPU machine: ``python3 -m pytest
tests/gpu/test_decode_pieces.py``; skipped without CUDA). The torch pieces are checked against HF on
CPU (test_static_engine.py::test_split_gemm_decode_matches_hf)."""

from __future__ import annotations

import pytest
import torch

from services.backend import unembed
from services.backend.gpu import decode_pieces as dp
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3

cuda = pytest.mark.skipif(not (torch.cuda.is_available() and dp.available()), reason="needs CUDA and Triton")
SHAPE = Qwen3Shape(vocab=64, hidden=2560, layers=1, heads=32, kv_heads=8, head_dim=128, ffn=64, eps=1e-6,
                   rope_theta=1e6)  # the 4B layer's widths


def _close(got, want):
    rel = float((got.float() - want.float()).norm() / want.float().norm())
    assert torch.isfinite(got).all() and rel < 1e-2, rel


@cuda
@pytest.mark.parametrize("M,split", [(1, 2), (16, 1), (5, 4), (64, 4), (40, 1)])
def test_pieces_match_the_torch_pieces(M, split):
    m = StaticQwen3(SHAPE, "cuda", torch.bfloat16, 64, 1024, "bmm", True)
    eager = m._eager
    g = torch.Generator(device="cuda").manual_seed(M * 10 + split)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    n_out = (SHAPE.heads + 2 * SHAPE.kv_heads) * SHAPE.head_dim
    for _ in range(2):  # fresh inputs each time
        p = r(split, M, n_out) if split > 1 else r(M, n_out).bfloat16()
        qn, kn = (r(SHAPE.head_dim) * 0.2 + 1).bfloat16(), (r(SHAPE.head_dim) * 0.2 + 1).bfloat16()
        pos = torch.randint(0, 1024, (M,), device="cuda", generator=g)
        got = dp.qk_rope(p, qn, kn, m.cos[pos], m.sin[pos], SHAPE.heads, SHAPE.kv_heads, SHAPE.eps)
        want = eager["qk_rope"](p, qn, kn, m.cos[pos], m.sin[pos])
        for a, b in zip(got, want):
            assert a.shape == b.shape
            _close(a, b)
        x = r(M, SHAPE.hidden).bfloat16()
        pp = r(split, M, SHAPE.hidden) if split > 1 else r(M, SHAPE.hidden).bfloat16()
        w = (r(SHAPE.hidden) * 0.2 + 1).bfloat16()
        for a, b in zip(dp.add_norm(x, pp, w, SHAPE.eps), eager["add_norm"](x, pp, w)):
            _close(a, b)


LLAMA = Qwen3Shape(vocab=64, hidden=576, layers=1, heads=9, kv_heads=3, head_dim=64, ffn=64, eps=1e-5,
                   rope_theta=1e5, qk_norm=False)  # SmolLM2-135M's attention widths


@cuda
@pytest.mark.parametrize("M,split", [(1, 2), (16, 1), (64, 4)])
def test_qk_rope_without_norm_matches_the_torch_piece(M, split):
    """A Llama's qk_rope (NORM False: rotary only) against the torch piece (CUDA only: not yet run on a GPU)."""
    m = StaticQwen3(LLAMA, "cuda", torch.bfloat16, 64, 1024, "bmm", True)
    g = torch.Generator(device="cuda").manual_seed(M + split)
    n_out = (LLAMA.heads + 2 * LLAMA.kv_heads) * LLAMA.head_dim
    p = torch.randn(split, M, n_out, device="cuda", generator=g) if split > 1 else \
        torch.randn(M, n_out, device="cuda", generator=g).bfloat16()
    qn = kn = torch.zeros(LLAMA.head_dim, device="cuda", dtype=torch.bfloat16)  # unread without the norm
    pos = torch.randint(0, 1024, (M,), device="cuda", generator=g)
    got = dp.qk_rope(p, qn, kn, m.cos[pos], m.sin[pos], LLAMA.heads, LLAMA.kv_heads, LLAMA.eps, norm=False)
    want = m._eager["qk_rope"](p, qn, kn, m.cos[pos], m.sin[pos])
    for a, b in zip(got, want):
        assert a.shape == b.shape
        _close(a, b)


@cuda
@pytest.mark.parametrize("M,split", [(1, 2), (16, 1), (64, 4)])
def test_r32_pieces_match_the_float32_residual_pieces(M, split, monkeypatch):
    """A float32 residual stream (LTS_RESIDUAL_F32): qk_rope with r32 and add_norm of a float32 x against the
    torch pieces of StaticQwen3 in that mode (services/backend/gpu/qwen3.py _residual_f32_pieces): x stays
    float32 (not rounded: planted .to(bf16) fails the 1e-6 bound), h and q, k, v in bf16."""
    monkeypatch.setattr(unembed, "RESIDUAL_F32", True)
    m = StaticQwen3(SHAPE, "cuda", torch.bfloat16, 64, 1024, "bmm", True)
    assert m.f32_residual and m.f32_logits
    eager = m._eager
    g = torch.Generator(device="cuda").manual_seed(M * 10 + split + 1)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    n_out = (SHAPE.heads + 2 * SHAPE.kv_heads) * SHAPE.head_dim
    p = r(split, M, n_out) if split > 1 else r(M, n_out)    # float32 GEMM outputs (f32) or partials
    qn, kn = (r(SHAPE.head_dim) * 0.2 + 1).bfloat16(), (r(SHAPE.head_dim) * 0.2 + 1).bfloat16()
    pos = torch.randint(0, 1024, (M,), device="cuda", generator=g)
    got = dp.qk_rope(p, qn, kn, m.cos[pos], m.sin[pos], SHAPE.heads, SHAPE.kv_heads, SHAPE.eps, r32=True)
    want = eager["qk_rope"](p, qn, kn, m.cos[pos], m.sin[pos])
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.bfloat16
        rel = float((a.float() - b.float()).norm() / b.float().norm())
        assert rel < 4e-3, rel   # bf16 once, at the end (both sides): differences are single roundings
    x = r(M, SHAPE.hidden) * 4
    pp = r(split, M, SHAPE.hidden) if split > 1 else r(M, SHAPE.hidden)
    w = (r(SHAPE.hidden) * 0.2 + 1).bfloat16()
    (xo, ho), (xw, hw) = dp.add_norm(x, pp, w, SHAPE.eps), eager["add_norm"](x, pp, w)
    assert xo.dtype == torch.float32 and ho.dtype == torch.bfloat16 and hw.dtype == torch.bfloat16
    assert float((xo - xw).abs().max() / xw.abs().max()) < 1e-6
    _close(ho, hw)

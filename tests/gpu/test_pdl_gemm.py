"""``pdl_gemm``: the 17-64-row decode layer's TMA GEMMs and the pieces between them, each launched as a
programmatic dependent of the kernel before it (skinny_gemm's ``pdl=True`` Gluon kernels, decode_pieces'
``pdl=True``), on a Hopper GPU (run on the GPU machine: ``python3 -m pytest tests/gpu/test_pdl_gemm.py``;
skipped elsewhere). The pdl kernels issue the same TMA tiles and MMA instructions in the same order as the
plain ones, and the pieces are the same code after their wait, so outputs are compared bit for bit. The CPU
test of the wiring is test_static_engine.py::test_mid_rows_decode_matches_hf[True-True]."""

from __future__ import annotations

import pytest
import torch

from services.backend.gpu import skinny_gemm as sg
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3

pdl = pytest.mark.skipif(not (torch.cuda.is_available() and sg.pdl_available(torch.device("cuda"))),
                         reason="needs a Hopper GPU (TMA), Triton and Gluon")


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.isfinite(got).all()
    d = float((got.float() - want.float()).abs().max())
    assert torch.equal(got, want), f"max |diff| {d} (max |want| {float(want.float().abs().max())})"


@pdl
@pytest.mark.parametrize("M", [17, 40, 64])
@pytest.mark.parametrize("N,K,cfg", [(6144, 2560, None), (2560, 4096, None), (2560, 9728, None), (70000, 512, None),
                                     (2560, 2568, None), (512, 256, None), (1000, 264, (64, 64, 2, 4, 3)),
                                     (2560, 9728, (32, 64, 8, 4, 4))])
def test_mm_tma_pdl_same_as_plain(M, N, K, cfg):
    """The 4B weights (q/k/v, o, down: split K; a vocabulary-sized N: unsplit, bf16 out), a ragged K (the last
    split reads past K), fewer K tiles per split than pipeline slots, other tilings: equal to the plain kernel's
    output, every element written (the output's block reuses a freed block of NaNs)."""
    for seed in range(2):
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * N + K)
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        want = sg.mm_tma(x, w, cfg)
        torch.full((16 * M * N,), float("nan"), device="cuda")  # freed at once: the output's block holds NaNs
        _same(sg.mm_tma(x, w, cfg, pdl=True), want)


@pdl
@pytest.mark.parametrize("M", [17, 64])
@pytest.mark.parametrize("F,K", [(9728, 2560), (3072, 1024), (64, 128), (96, 2568)])
def test_mm_silu_tma_pdl_same_as_plain(M, F, K):
    for seed in range(2):
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + M * F + K)
        x = (torch.randn(M, K, device="cuda", generator=g) / K ** 0.5).bfloat16()
        w = torch.randn(2 * F, K, device="cuda", generator=g).bfloat16()
        want = sg.mm_silu_tma(x, w)
        torch.full((16 * M * F,), float("nan"), device="cuda")
        _same(sg.mm_silu_tma(x, w, pdl=True), want)


@pdl
@pytest.mark.parametrize("b", [64, 24])
def test_decode_with_pdl_gemm_same_as_without(b):
    """Decode steps of a random model of the 4B layer's widths (3 layers), ``pdl_gemm`` on against off: the same
    logits bit for bit, eagerly and in CUDA-graph replays with new tokens each time (a kernel that read its
    input before the kernel that writes it had finished would see the previous replay's values)."""
    shape = Qwen3Shape(vocab=4096, hidden=2560, layers=3, heads=32, kv_heads=8, head_dim=128, ffn=9728, eps=1e-6,
                       rope_theta=1e6)
    m = StaticQwen3(shape, "cuda", torch.bfloat16, 64, 1024, gemm="auto", pdl_gemm=True)
    assert m.pdl_gemm and m.tma_gemm and m.mid_silu is not None
    g = torch.Generator(device="cuda").manual_seed(b)
    with torch.no_grad():
        for t in (m.embed, m.lm_head, m.w_qkv, m.w_o, m.w_gu, m.w_down, m.kc, m.vc):
            t.copy_(torch.randn(t.shape, device="cuda", generator=g) * (1.0 if t is m.kc or t is m.vc else 0.02))
        for t in (m.norm, m.ln1, m.ln2, m.qn, m.kn):
            t.copy_(1 + 0.1 * torch.randn(t.shape, device="cuda", generator=g))
    pos = torch.randint(500, 700, (b,), device="cuda", generator=g)
    toks = [torch.randint(0, shape.vocab, (b,), device="cuda", generator=g) for _ in range(4)]
    ctx = 768

    def step(tok, on):
        m.pdl_gemm = on
        return m.decode(tok, pos, ctx).clone()

    want = [step(t, False) for t in toks]
    assert all(torch.isfinite(w).all() for w in want)
    for t, w in zip(toks, want):
        _same(step(t, True), w)
    m.pdl_gemm = True
    tok = toks[0].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m.decode(tok, pos, ctx)
    for _ in range(2):
        for t, w in zip(toks, want):
            tok.copy_(t)
            graph.replay()
            _same(out, w)

"""The batch-invariant GEMM (services/backend/invariant_gemm.py): a row's float32 result is the same bits
whatever rows share its call, the split path (few rows) equals the one-program-per-tile path (many rows), and both
are close to a float64 reference (run on the GPU machine: ``python3 -m pytest tests/gpu/test_invariant_gemm.py``;
skipped without CUDA and Triton)."""

from __future__ import annotations

import pytest
import torch

from services.backend import invariant_gemm as ig

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and ig.available()), reason="needs CUDA + Triton")

SHAPES = [  # N, K: SmolLM2's qkv / o / gate-up / down / lm_head, the 4B shape's o and down, a ragged one
    (960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576), (2560, 4096), (2560, 9728), (1000, 700),
]


def _xw(N, K, M=3000, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, K, generator=g).to("cuda", torch.bfloat16)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).to("cuda", torch.bfloat16)
    return x, w


@pytest.mark.parametrize("N,K", SHAPES)
def test_rows_do_not_depend_on_the_batch(N, K):
    x, w = _xw(N, K)
    full = ig.mm_f32(x, w)                      # many rows: one program per tile
    for m in (1, 3, 16, 17, 63, 64, 65, 200):   # decode batches (split), a prefill's
        part = ig.mm_f32(x[:m], w)
        assert torch.equal(part, full[:m]), (m, (part - full[:m]).abs().max().item())
    rows = torch.tensor([5, 2999, 17, 1000], device="cuda")
    assert torch.equal(ig.mm_f32(x[rows], w), full[rows])   # the same rows, elsewhere in another batch


@pytest.mark.parametrize("N,K", SHAPES[:4] + SHAPES[6:])
def test_split_equals_the_tile_walk_and_the_reference(N, K):
    x, w = _xw(N, K, M=64)
    a, b = ig.mm_f32(x, w, split=True), ig.mm_f32(x, w, split=False)
    assert torch.equal(a, b), (a - b).abs().max().item()
    ref = ig.mm_reference(x, w)
    assert torch.allclose(a, ref, rtol=1e-4, atol=1e-4), (a - ref).abs().max().item()


def test_a_strided_input_and_an_empty_batch():
    x, w = _xw(576, 576, M=32)
    wide = torch.cat([x, x], 1)[:, :576]        # row stride 1152
    assert torch.equal(ig.mm_f32(wide, w), ig.mm_f32(x, w))
    assert ig.mm_f32(x[:0], w).shape == (0, 576)

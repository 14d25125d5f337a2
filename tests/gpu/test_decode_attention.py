"""The split-K decode attention (services/backend/gpu/decode_attention.py): its torch reference
against a naive per-row softmax on CPU, and the Triton kernel against the reference on CUDA (run on
the GPU machine: ``python3 -m pytest tests/gpu/test_decode_attention.py``; skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from services.backend.gpu import decode_attention as da
from services.backend.gpu import train_kernels as tk
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3

CASES = [  # b, Hq, Hkv, D, slots, T, ctx, positions (None: random below ctx)
    (3, 8, 2, 32, 4, 320, 256, [0, 63, 64]),           # first position, both sides of a chunk edge
    (5, 4, 4, 64, 6, 512, 384, None),                  # no GQA grouping (G = 1)
    (2, 32, 4, 128, 2, 2048, 2048, [2047, 700]),       # G = 8, the longest row at the cache's end
    (64, 32, 8, 128, 64, 1024, 768, None),             # the 4B shape at batch 64 (one chunk: no merge kernel)
]


def _inputs(case, dtype, device, seed):
    b, Hq, Hkv, D, S, T, ctx, positions = case
    g = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    kc, vc = r(S, Hkv, T, D), r(S, Hkv, T, D)
    q, kn, vn = r(b, Hq, D), r(b, Hkv, D), r(b, Hkv, D)
    pos = torch.tensor(positions) if positions else torch.randint(0, ctx, (b,), generator=g)
    return q, kn, vn, kc, vc, pos.to(device), ctx, D ** -0.5


def _naive(q, kn, vn, kc, vc, pos, scale):
    """Per row and head, float64: softmax(q K[:pos+1]^T) V[:pos+1] with the new token at pos."""
    b, Hq, D = q.shape
    G = Hq // kn.shape[1]
    out = torch.empty(b, Hq, D, dtype=torch.float64)
    for i in range(b):
        p = int(pos[i])
        for h in range(Hq):
            K = kc[i, h // G, : p + 1].double().clone()
            V = vc[i, h // G, : p + 1].double().clone()
            K[p], V[p] = kn[i, h // G].double(), vn[i, h // G].double()
            w = torch.softmax(K @ q[i, h].double() * scale, 0)
            out[i, h] = w @ V
    return out


@pytest.mark.parametrize("case", CASES[:3])
def test_reference_matches_naive_and_writes_the_cache(case):
    q, kn, vn, kc, vc, pos, ctx, scale = _inputs(case, torch.float32, "cpu", 0)
    want = _naive(q, kn, vn, kc, vc, pos, scale)
    before_k, before_v = kc.clone(), vc.clone()
    got = da.attend_reference(q, kn, vn, kc, vc, pos, ctx, scale)
    assert float((got.double() - want).norm() / want.norm()) < 1e-5
    ar = torch.arange(q.shape[0])
    assert torch.equal(kc.permute(0, 2, 1, 3)[ar, pos], kn) and torch.equal(vc.permute(0, 2, 1, 3)[ar, pos], vn)
    before_k.permute(0, 2, 1, 3)[ar, pos] = kn
    before_v.permute(0, 2, 1, 3)[ar, pos] = vn
    assert torch.equal(kc, before_k) and torch.equal(vc, before_v)  # nothing else written


def test_chunks_fill_the_gpu_and_cover_the_context():
    for b, h, ctx in [(1, 8, 128), (1, 8, 8192), (64, 8, 768), (256, 8, 2048), (3, 2, 100)]:
        c = da.chunk_for(b, h, ctx)
        assert c % da.BLOCK_N == 0 and c >= da.BLOCK_N
        splits = -(-ctx // c)
        assert (splits - 1) * c < ctx <= splits * c
        assert b * h * splits >= min(da.TARGET_PROGRAMS // 2, b * h * -(-ctx // da.BLOCK_N))


@pytest.mark.skipif(not (torch.cuda.is_available() and da.available()), reason="the Triton kernel needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_reference(case, dtype):
    for seed in range(3):  # fresh random inputs each time
        q, kn, vn, kc, vc, pos, ctx, scale = _inputs(case, dtype, "cuda", seed)
        kc2, vc2 = kc.clone(), vc.clone()
        got = da.attend(q, kn, vn, kc, vc, pos, ctx, scale)
        want = da.attend_reference(q, kn, vn, kc2, vc2, pos, ctx, scale)
        torch.cuda.synchronize()
        assert torch.isfinite(got).all()
        rel = float((got.float() - want.float()).norm() / want.float().norm())
        assert rel < 1e-2, (case, dtype, seed, rel)
        assert torch.equal(kc, kc2) and torch.equal(vc, vc2)  # the fused KV write: at pos only


@pytest.mark.skipif(not (torch.cuda.is_available() and da.available()), reason="the Triton kernel needs CUDA")
def test_kernel_reads_strided_views():
    """q, k, v as the decode step passes them: slices of one fused q/k tensor and of the qkv output."""
    b, Hq, Hkv, D, S, T, ctx = 16, 32, 8, 128, 16, 1024, 768
    for seed in range(3):
        g = torch.Generator(device="cpu").manual_seed(seed)
        r = lambda *s, g=g: torch.randn(*s, generator=g).to(device="cuda", dtype=torch.bfloat16)  # noqa: E731
        qk, qkv = r(b, Hq + Hkv, D), r(b, (Hq + 2 * Hkv) * D)
        q, kn, vn = qk[:, :Hq], qk[:, Hq:], qkv[:, (Hq + Hkv) * D :].reshape(b, Hkv, D)
        assert not (q.is_contiguous() or kn.is_contiguous() or vn.is_contiguous())
        kc, vc = r(S, Hkv, T, D), r(S, Hkv, T, D)
        pos = torch.randint(0, ctx, (b,), generator=g).cuda()
        kc2, vc2 = kc.clone(), vc.clone()
        got = da.attend(q, kn, vn, kc, vc, pos, ctx, D ** -0.5)
        want = da.attend_reference(q.contiguous(), kn.contiguous(), vn.contiguous(), kc2, vc2, pos, ctx, D ** -0.5)
        rel = float((got.float() - want.float()).norm() / want.float().norm())
        assert rel < 1e-2, (seed, rel)
        assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


def test_attention_choice():
    s = Qwen3Shape(vocab=64, hidden=32, layers=1, heads=4, kv_heads=2, head_dim=8, ffn=64, eps=1e-6, rope_theta=1e4)
    assert StaticQwen3.resolve_attention("auto", torch.device("cpu"), s) == "bmm"
    assert StaticQwen3.resolve_attention("auto", torch.device("cuda"), s) == ("triton" if da.available() else "bmm")
    odd = Qwen3Shape(**{**s.__dict__, "head_dim": 12})
    assert StaticQwen3.resolve_attention("auto", torch.device("cuda"), odd) == "bmm"
    with pytest.raises(ValueError):
        StaticQwen3.resolve_attention("triton", torch.device("cuda"), odd)
    with pytest.raises(ValueError):
        StaticQwen3.resolve_attention("flash", torch.device("cpu"), s)


def test_a_float32_model_decodes_through_cublas():
    """Issue 41: --dtype float32 on a GPU stopped at the first sample in the Triton GEMMs (bf16/fp16 operands only).
    A float32 model now resolves 'auto' to the cuBLAS GEMMs and bmm attention (the CPU path's numerics), and an
    explicit 'triton' GEMM with float32 is refused when the engine is built, not at the first sample. Planted: the
    dtype ignored -> 'triton' on CUDA where Triton is installed -> fails."""
    s = Qwen3Shape(vocab=64, hidden=32, layers=1, heads=4, kv_heads=2, head_dim=8, ffn=64, eps=1e-6, rope_theta=1e4)
    cuda = torch.device("cuda")
    assert StaticQwen3.resolve_gemm("auto", cuda, torch.float32) == "torch"
    assert StaticQwen3.resolve_attention("auto", cuda, s, torch.float32) == "bmm"
    if da.available():
        assert StaticQwen3.resolve_gemm("auto", cuda, torch.bfloat16) == "triton"
        assert StaticQwen3.resolve_attention("auto", cuda, s, torch.bfloat16) == "triton"
    with pytest.raises(ValueError, match="bf16/fp16"):
        StaticQwen3.resolve_gemm("triton", cuda, torch.float32)


def test_training_kernels_choice():
    assert tk.resolve(None, "cpu") == "none" and tk.resolve("none", "cuda") == "none"
    assert tk.resolve("auto", "cuda") == ("liger" if tk._liger() is not None else "none")
    with pytest.raises(ValueError):
        tk.resolve("fast", "cuda")
    assert tk.apply(torch.nn.Linear(2, 2), "none", True) is False
    with pytest.raises(ValueError):  # required but not applicable (no Liger here, or no HF config)
        tk.apply(torch.nn.Linear(2, 2), "liger", True)
    assert tk.apply(torch.nn.Linear(2, 2), "liger", False) is False


@pytest.mark.skipif(not (torch.cuda.is_available() and da.available()), reason="the Triton kernel needs CUDA")
@pytest.mark.parametrize("case", CASES)
def test_float32_probabilities_agree_with_a_float32_reference(case):
    """``p32`` (float32 attention, unembed.ATTENTION_F32): the kernel keeps P in float32 for P @ V, as the
    trainer's float32 attention does, so its bf16 outputs equal the float32 reference's far more often than the
    default kernel's (P rounded to bf16). Planted: P32 ignored -> the two mismatch rates are alike -> fails."""
    off = {False: [], True: []}
    for seed in range(3):
        q, kn, vn, kc, vc, pos, ctx, scale = _inputs(case, torch.bfloat16, "cuda", seed)
        want = da.attend_reference(q, kn, vn, kc.clone(), vc.clone(), pos, ctx, scale, p32=True)
        for p32 in (False, True):
            got = da.attend(q, kn, vn, kc.clone(), vc.clone(), pos, ctx, scale, p32=p32)
            off[p32].append(float((got != want).float().mean()))
    print(case[:4], "bf16 P:", off[False], "float32 P:", off[True])
    assert max(off[True]) < 0.05 and sum(off[True]) * 3 < sum(off[False]), off

"""Triton versions of two elementwise pieces of the split-GEMM decode layer (``StaticQwen3._decode_split``).

Inductor compiles ``qk_rope`` (sum a split GEMM's partials, q/k RMSNorm per head, rotary) into four
kernels and ``add_norm`` (sum partials, residual add, RMSNorm) into two; at batch 1 each kernel is a
few microseconds of launch and tail for a few kilobytes of data (docs/performance.md). Here each is one
launch: ``qk_rope`` one program per (row, head), ``add_norm`` one program per row. Same arithmetic as
the torch pieces in ``qwen3`` (float32 within, rounded to the model dtype where those round: the
summed GEMM output, the normed value before its weight, the weighted value; the rotary sum rounded
once, as Inductor does), which remain the reference (CPU path; tests/gpu/test_decode_pieces.py).
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; CPU-only installs have none
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - depends on the install
    triton = None


def available() -> bool:
    return triton is not None


if triton is not None:

    @triton.jit
    def _load_sum(P, off, m, split, s_pz, SP: tl.constexpr, DT: tl.constexpr, ROUND: tl.constexpr = True):
        """A split GEMM's output at ``off`` (where ``m``; 0 elsewhere): its float32 partials summed (SP: split
        rounded up to a power of two; 0 = the model-dtype output of an unsplit GEMM), rounded to the model
        dtype as skinny_gemm.reduce does, returned in float32. The partials are one load (all in flight at
        once), not one per split."""
        if SP > 0:
            sp = tl.arange(0, SP)
            pm = (sp < split)[:, None] & m[None, :]
            acc = tl.sum(tl.load(P + sp[:, None] * s_pz + off[None, :], mask=pm, other=0.0), 0)
        else:
            acc = tl.load(P + off, mask=m, other=0.0).to(tl.float32)
        if ROUND:   # a float32 residual stream (R32) keeps the GEMM's float32 sum
            acc = acc.to(DT).to(tl.float32)
        return acc

    @triton.jit
    def _qk_rope_kernel(P, QN, KN, COS, SIN, QK, V, split, s_pz, n_out, eps, HQ: tl.constexpr, HKV: tl.constexpr,
                        D: tl.constexpr, SP: tl.constexpr, PDL: tl.constexpr = False, NORM: tl.constexpr = True,
                        R32: tl.constexpr = False):
        if PDL:  # launched as the GEMM's programmatic dependent: its partials are complete after this
            gdc_wait()
        r = tl.program_id(0)
        hd = tl.program_id(1)  # q heads, then k heads, then v heads
        DT = QK.dtype.element_ty
        offs = tl.arange(0, D)
        whole = offs < D
        x = _load_sum(P, r * n_out + hd * D + offs, whole, split, s_pz, SP, DT, not R32)
        if hd < HQ + HKV:
            rot_offs = (offs + D // 2) % D
            xr = _load_sum(P, r * n_out + hd * D + rot_offs, whole, split, s_pz, SP, DT, not R32)
            if NORM:  # Qwen3's per-head q/k RMSNorm (a Llama rotates the projection as it is)
                inv = tl.rsqrt(tl.sum(x * x, 0) / D + eps)
                is_q = hd < HQ
                w = tl.where(is_q, tl.load(QN + offs), tl.load(KN + offs)).to(tl.float32)
                wr = tl.where(is_q, tl.load(QN + rot_offs), tl.load(KN + rot_offs)).to(tl.float32)
                if R32:   # float32 throughout (HF's RMSNorm of a float32 input)
                    n = w * (x * inv)
                    nr = wr * (xr * inv)
                else:
                    n = (w * (x * inv).to(DT).to(tl.float32)).to(DT).to(tl.float32)
                    nr = (wr * (xr * inv).to(DT).to(tl.float32)).to(DT).to(tl.float32)
            else:
                n, nr = x, xr
            rot = tl.where(offs < D // 2, -nr, nr)
            c = tl.load(COS + r * D + offs).to(tl.float32)
            s = tl.load(SIN + r * D + offs).to(tl.float32)
            tl.store(QK + (r * (HQ + HKV) + hd) * D + offs, (n * c + rot * s).to(DT))
        else:
            tl.store(V + (r * HKV + hd - HQ - HKV) * D + offs, x.to(DT))

    @triton.jit
    def _add_norm_kernel(X, P, W, XO, HO, N, split, s_pz, eps, BLOCK: tl.constexpr, SP: tl.constexpr,
                         PDL: tl.constexpr = False, R32: tl.constexpr = False):
        if PDL:
            gdc_launch_dependents()  # the next GEMM may start (it waits for this kernel before reading XO/HO)
            gdc_wait()  # launched as the GEMM's programmatic dependent: its partials are complete after this
        r = tl.program_id(0)
        DT = HO.dtype.element_ty   # the model dtype (R32: the residual XO is float32)
        offs = tl.arange(0, BLOCK)
        m = offs < N
        acc = _load_sum(P, r * N + offs, m, split, s_pz, SP, DT, not R32)
        x = tl.load(X + r * N + offs, mask=m, other=0.0).to(tl.float32)
        if R32:   # the residual stays float32; the normed value times the weight in float32, rounded once
            xf = x + acc
            tl.store(XO + r * N + offs, xf, mask=m)
            inv = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
            w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
            tl.store(HO + r * N + offs, (w * (xf * inv)).to(DT), mask=m)
        else:
            xn = (x + acc).to(DT)
            tl.store(XO + r * N + offs, xn, mask=m)
            xf = xn.to(tl.float32)
            inv = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
            w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
            tl.store(HO + r * N + offs, (w * (xf * inv).to(DT).to(tl.float32)).to(DT), mask=m)


def _sp(split: int, p: torch.Tensor) -> int:
    """The kernels' SP: the number of partials rounded up to a power of two, 0 for an unsplit GEMM's output."""
    return triton.next_power_of_2(split) if p.dim() == 3 else 0


def qk_rope(p: torch.Tensor, qn: torch.Tensor, kn: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int,
            kv_heads: int, eps: float, pdl: bool = False, norm: bool = True,
            r32: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """p: the qkv GEMM's output (float32 partials [split, M, (Hq + 2 Hkv) D] or [M, ...] in the model
    dtype); qn, kn [D]; cos, sin [M, D] -> q [M, Hq, D], k [M, Hkv, D] (normed, rotated), v [M, Hkv, D].
    ``pdl``: launched as the programmatic dependent of the GEMM that wrote p; ``norm`` False: no q/k RMSNorm
    (a Llama; qn, kn unread). ``r32`` (a float32 residual stream): the GEMM's float32 sum and the q/k norm in
    float32, rounded to the model dtype once, after the rotary."""
    split = p.shape[0] if p.dim() == 3 else 1
    M, n_out = p.shape[-2:]
    D = qn.shape[0]
    qk = torch.empty(M, heads + kv_heads, D, device=p.device, dtype=qn.dtype)
    v = torch.empty(M, kv_heads, D, device=p.device, dtype=qn.dtype)
    _qk_rope_kernel[(M, heads + 2 * kv_heads)](p, qn, kn, cos, sin, qk, v, split, M * n_out, n_out, eps, HQ=heads,
                                               HKV=kv_heads, D=D, SP=_sp(split, p), PDL=pdl, NORM=norm, R32=r32,
                                               num_warps=1, launch_pdl=pdl)
    return qk[:, :heads], qk[:, heads:], v


def add_norm(x: torch.Tensor, p: torch.Tensor, w: torch.Tensor, eps: float,
             pdl: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, N] (model dtype, or float32: a float32 residual stream, kept float32, the GEMM's sum unrounded),
    p: a GEMM's output for it (float32 partials [split, M, N] or [M, N]), w [N] -> (x + p summed, RMSNorm of
    that times w, in w's dtype). ``pdl``: launched as the programmatic dependent of the GEMM that wrote p, and
    the next kernel may launch as soon as this one starts."""
    M, N = x.shape
    split = p.shape[0] if p.dim() == 3 else 1
    r32 = x.dtype == torch.float32 and w.dtype != torch.float32
    xo, ho = torch.empty_like(x), torch.empty_like(x, dtype=w.dtype)
    _add_norm_kernel[(M,)](x, p, w, xo, ho, N, split, M * N, eps, BLOCK=triton.next_power_of_2(N),
                           SP=_sp(split, p), PDL=pdl, R32=r32, num_warps=8, launch_pdl=pdl)
    return xo, ho

"""A batch-invariant GEMM in Triton (issue 41 item 3, ``LTS_MATCHED_GEMM=1``): ``x [M, K] @ w [N, K]^T`` in float32 from
half-precision operands, each output element summed by the same instructions in the same order whatever ``M`` is.

Why: the trainer multiplies a whole sequence at once (M = thousands of rows), the sampler one token per sequence
(M = the batch); cuBLAS picks a different kernel (tile, split-K) for each M, so the two sides' float32 sums differ
in their last bits, round to different bf16 values now and then, and drift apart through the layers. Here both
sides call this kernel, and a row's result does not depend on the other rows. Measured on an H200 (2026-12-07,
docs/performance.md): it left the gap where the float32 residual stream had (0.0137 nats on the 4B shape), but
that run still had the trainer's attention and logits cast to bf16 by autocast (since fixed in
``hf_decode.f32_sdpa`` and ``unembed.mm_f32``), which hid whatever the GEMMs' order adds. After the fix (H100,
4B shape): 0.0093 with these GEMMs against 0.0109 without them (a32), the issue's bf16 targets met, at a decode
step 31.5 % slower than bf16. A measurement mode.

How: the tile (``BM x BN x BK``, the warps, the MMA instruction) is fixed, never chosen by shape. K is cut into
``CHUNK``-wide ranges (a function of K only); a range's partial sum is accumulated tile by tile in K order, and
the partial sums are added in range order, starting from zero. Many rows (the trainer, a prefill): one program
per output tile walks the ranges in order. Few rows (``SPLIT_ROWS``, a decode step, where one program per output
tile would leave most of the GPU idle while the weights stream): one program per (tile, range) writes its
partial, and ``_reduce`` adds them in the same order. Both give the same bits (tests/gpu/test_invariant_gemm.py).
Cost: fixed 64 x 64 tiles are slower than cuBLAS's and the split-K kernels' choices; the mode is opt-in.
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; CPU-only installs have none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

BM, BN, BK = 64, 64, 64   # the one tile: Hopper's wgmma m64n64k16 with 4 warps, mma.sync elsewhere
CHUNK = 512               # the K range of one partial sum
SPLIT_ROWS = 64           # up to this many rows: a program per (tile, K range) and the ordered reduce
WARPS, STAGES = 4, 3
REDUCE_BLOCK = 1024


def available(device: torch.device | None = None) -> bool:
    return triton is not None and (device is None or device.type == "cuda")


if triton is not None:

    @triton.jit
    def _kernel(X, W, Y, M, N, K, s_xm, s_wn, s_ym, s_yz,
                CHUNK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        pid_z = tl.program_id(2)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        mmask = offs_m < M
        nmask = offs_n < N
        if SPLIT:   # this program: K range pid_z only
            c_lo = pid_z
            c_hi = pid_z + 1
        else:       # this program: every K range, in order
            c_lo = 0
            c_hi = tl.cdiv(K, CHUNK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for c in range(c_lo, c_hi):
            p = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, CHUNK, BK):
                k = c * CHUNK + kk + offs_k
                kmask = k < K
                a = tl.load(X + offs_m[:, None] * s_xm + k[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
                b = tl.load(W + offs_n[:, None] * s_wn + k[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)
                p = tl.dot(a, tl.trans(b), p)
            acc = acc + p   # ranges added in order from zero: what _reduce does with SPLIT's partials
        tl.store(Y + pid_z * s_yz + offs_m[:, None] * s_ym + offs_n[None, :], acc,
                 mask=mmask[:, None] & nmask[None, :])

    @triton.jit
    def _reduce(P, Y, MN, Z, s_pz, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < MN
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for z in range(0, Z):
            acc = acc + tl.load(P + z * s_pz + offs, mask=mask, other=0.0)
        tl.store(Y + offs, acc, mask=mask)


def mm_f32(x: torch.Tensor, w: torch.Tensor, split: bool | None = None) -> torch.Tensor:
    """``x [M, K] @ w [N, K]^T`` -> float32 ``[M, N]``, batch-invariant (module docstring). ``split``: force the
    per-range programs (True) or the one-program-per-tile walk (False); None picks by ``SPLIT_ROWS``. Either gives
    the same bits."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if w.stride(-1) != 1:
        w = w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    ranges = triton.cdiv(K, CHUNK)
    if split is None:
        split = M <= SPLIT_ROWS and ranges > 1
    y = torch.empty(M, N, device=x.device, dtype=torch.float32)
    if M == 0 or N == 0:
        return y
    tiles = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    if not split:
        _kernel[(*tiles, 1)](x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), 0,
                             CHUNK=CHUNK, BM=BM, BN=BN, BK=BK, SPLIT=False, num_warps=WARPS, num_stages=STAGES)
        return y
    p = torch.empty(ranges, M, N, device=x.device, dtype=torch.float32)
    _kernel[(*tiles, ranges)](x, w, p, M, N, K, x.stride(0), w.stride(0), p.stride(1), p.stride(0),
                              CHUNK=CHUNK, BM=BM, BN=BN, BK=BK, SPLIT=True, num_warps=WARPS, num_stages=STAGES)
    _reduce[(triton.cdiv(M * N, REDUCE_BLOCK),)](p, y, M * N, ranges, p.stride(0), BLOCK=REDUCE_BLOCK)
    return y


def mm_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``mm_f32``'s sums in torch (float64 products and sums, then float32): the tests' oracle."""
    return (x.double() @ w.double().t()).float()

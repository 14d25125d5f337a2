"""Skinny GEMM for decode (Triton): ``x [M, K] @ w[N, K]^T`` with few rows, split over K.

A decode step multiplies a handful of rows by each weight matrix once, so the product is bound by
streaming the weight from memory. At one row cuBLAS streams the 4B model's weights at 47-80 % of the
copy bandwidth (o_proj worst: N = 2560 makes few output tiles, so most of the 132 multiprocessors idle);
here program ``(n, s)`` computes output columns ``[n * BN, (n + 1) * BN)`` over the K range of split
``s``, and enough splits give enough programs in flight: 64-88 % (bench_gpu_decode_gemm.py,
docs/performance.md). At 64 rows the kernel is slower than cuBLAS (the tile's tensor-core work no
longer hides under the weight stream), so the engine uses it up to ``MAX_ROWS`` rows. With ``split >
1`` the result is the float32 partial sums ``[split, M, N]`` (the caller sums them in the elementwise
kernel that follows: no separate reduction kernel); with ``split == 1`` it is ``[M, N]`` in x's dtype.

``mm_silu`` is the MLP's gate/up GEMM with SwiGLU in its epilogue: program ``n`` streams gate rows
``[n * BN, (n + 1) * BN)`` and the matching up rows of the fused ``[2 F, K]`` weight and writes
``silu(gate) * up`` (``[M, F]``), so the decode step has no separate SiLU * up kernel.
``mm_silu_tma`` is the same for 17-64 rows on Hopper, where cuBLAS does the other GEMMs: the tiles come
through TMA descriptors (the bulk tensor copy engine) into a pipelined K loop, which streamed the gate/up
weight at 84 % of the copy bandwidth at 64 rows against cuBLAS's 76 % (bench_gpu_decode_gemm.py --tma).
``mm_tma`` is ``mm`` through TMA descriptors for 17-64 rows (the other GEMMs of that decode layer): split-K
as ``mm``, its float32 partials summed by the piece that follows.

``pdl=True`` (``mm_tma``, ``mm_silu_tma``): the same product by a Gluon kernel launched as a programmatic
dependent of the kernel before it (CUDA's programmatic dependent launch: ``launch_pdl``), which lets it start
early with ``griddepcontrol.launch_dependents`` (``decode_pieces.add_norm(pdl=True)`` does at its start). Its
programs let the kernel after them start likewise (the piece that sums their partials, launched with
``pdl=True``), request the weight tiles of their first pipeline stages (which no earlier kernel writes) before
``griddepcontrol.wait``, and x's tiles only after it; the pipeline is otherwise the one Triton makes of the
plain kernels (the same tiles, stages and MMA instructions, so the same sums: bit for bit).

``mm_reference`` and ``mm_silu_reference`` are the same computations in torch (the CPU path and the
tests' oracles).
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; CPU-only installs have none
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - depends on the install
    triton = None
try:  # Gluon (Triton's explicit-layout dialect): the pdl kernels, which order their TMA loads themselves
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
except ImportError:  # pragma: no cover - depends on the install
    gluon = None


MAX_ROWS = 16  # the decode engine's use; above, cuBLAS streams the weights as fast or faster
TMA_ROWS = 64  # mm_silu_tma's tile height: the decode engine uses it for MAX_ROWS < rows <= TMA_ROWS


def available() -> bool:
    return triton is not None


def tma_available(device: torch.device) -> bool:
    """mm_silu_tma runs here: Triton and a CUDA device of compute capability 9.0 or above (TMA)."""
    return triton is not None and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def pdl_available(device: torch.device) -> bool:
    """``pdl=True`` of mm_tma / mm_silu_tma runs here: tma_available and Triton's Gluon."""
    return gluon is not None and tma_available(device)


if triton is not None:

    @triton.jit
    def _kernel(X, W, P, M, N, K, s_xm, s_wn, s_pz, K_ITERS: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OUT_F32: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        offs_m = tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        mmask = offs_m < M
        nmask = offs_n < N
        k0 = pid_s * K_ITERS * BK  # each split: K_ITERS tiles of BK; the last split's tail is masked at K
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for i in range(0, K_ITERS):
            offs_k = k0 + i * BK + tl.arange(0, BK)
            kmask = offs_k < K
            x = tl.load(X + offs_m[:, None] * s_xm + offs_k[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(W + offs_n[:, None] * s_wn + offs_k[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)
            acc = tl.dot(x, tl.trans(w), acc)
        ptr = P + pid_s * s_pz + offs_m[:, None] * N + offs_n[None, :]
        if OUT_F32:
            tl.store(ptr, acc, mask=mmask[:, None] & nmask[None, :])
        else:
            tl.store(ptr, acc.to(P.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


    @triton.jit
    def _silu_kernel(X, W, O, M, F, K, s_xm, s_wn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     ROUND: tl.constexpr = True):
        pid_n = tl.program_id(0)
        offs_m = tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        mmask = offs_m < M
        nmask = offs_n < F
        acc_g = tl.zeros([BM, BN], dtype=tl.float32)
        acc_u = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            kmask = offs_k < K
            x = tl.load(X + offs_m[:, None] * s_xm + offs_k[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
            wmask = nmask[:, None] & kmask[None, :]
            wg = tl.load(W + offs_n[:, None] * s_wn + offs_k[None, :], mask=wmask, other=0.0)
            wu = tl.load(W + (F + offs_n)[:, None] * s_wn + offs_k[None, :], mask=wmask, other=0.0)
            acc_g = tl.dot(x, tl.trans(wg), acc_g)
            acc_u = tl.dot(x, tl.trans(wu), acc_u)
        # gate and up rounded to the model dtype as the unfused GEMM's output is (ROUND; a float32 residual
        # stream's GEMMs write float32: not rounded), SiLU * up in float32
        g, u = acc_g, acc_u
        if ROUND:
            g = acc_g.to(O.dtype.element_ty).to(tl.float32)
            u = acc_u.to(O.dtype.element_ty).to(tl.float32)
        a = g / (1.0 + tl.exp(-g)) * u
        omask = mmask[:, None] & nmask[None, :]
        tl.store(O + offs_m[:, None] * F + offs_n[None, :], a.to(O.dtype.element_ty), mask=omask)


    @triton.jit
    def _silu_tma_kernel(x_desc, g_desc, O, M, F, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         STAGES: tl.constexpr, ROUND: tl.constexpr = True):
        pid_n = tl.program_id(0)
        n0 = pid_n * BN
        acc_g = tl.zeros([BM, BN], dtype=tl.float32)
        acc_u = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            x = x_desc.load([0, k0])
            acc_g = tl.dot(x, g_desc.load([n0, k0]).T, acc_g)
            acc_u = tl.dot(x, g_desc.load([F + n0, k0]).T, acc_u)
        offs_m = tl.arange(0, BM)
        offs_n = n0 + tl.arange(0, BN)
        g, u = acc_g, acc_u
        if ROUND:
            g = acc_g.to(O.dtype.element_ty).to(tl.float32)
            u = acc_u.to(O.dtype.element_ty).to(tl.float32)
        a = g / (1.0 + tl.exp(-g)) * u
        omask = (offs_m < M)[:, None] & (offs_n < F)[None, :]
        tl.store(O + offs_m[:, None] * F + offs_n[None, :], a.to(O.dtype.element_ty), mask=omask)

    @triton.jit
    def _tma_kernel(x_desc, w_desc, P, M, N, k_iters, s_pz, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    STAGES: tl.constexpr, OUT_F32: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        n0 = pid_n * BN
        k0 = pid_s * k_iters * BK  # each split: k_iters tiles of BK; the descriptors read zeros past K
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for i in tl.range(0, k_iters, num_stages=STAGES):
            k = k0 + i * BK
            acc = tl.dot(x_desc.load([0, k]), w_desc.load([n0, k]).T, acc)
        offs_m = tl.arange(0, BM)
        offs_n = n0 + tl.arange(0, BN)
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ptr = P + pid_s * s_pz + offs_m[:, None] * N + offs_n[None, :]
        if OUT_F32:
            tl.store(ptr, acc, mask=mask)
        else:
            tl.store(ptr, acc.to(P.dtype.element_ty), mask=mask)


if gluon is not None:

    @gluon.jit
    def _gdc_wait():
        """``griddepcontrol.wait``: until the kernel this one depends on has completed and its writes are visible
        (at once when it was not launched as a programmatic dependent)."""
        gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _gdc_launch_dependents():
        """``griddepcontrol.launch_dependents``: the kernel launched after this one as its programmatic dependent
        may start once every program of this one has passed here."""
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)

    @gluon.jit
    def _tma_pdl_kernel(x_desc, w_desc, P, M, N, k_iters, s_pz, STAGES: gl.constexpr, OUT_F32: gl.constexpr):
        """_tma_kernel's product with its pipeline written out: STAGES slots, one barrier each for a slot's x and
        weight tiles, STAGES - 1 slots in flight while one feeds the MMA (the Triton pipeliner's schedule). The
        next kernel may launch at once; the weight tiles of the first STAGES - 1 slots are requested before
        griddepcontrol.wait, x's after it."""
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = w_desc.block_type.shape[0]
        _gdc_launch_dependents()  # the piece after this GEMM may launch (it waits for this kernel to complete)
        n0 = gl.program_id(0) * BN
        pid_s = gl.program_id(1)
        k0 = pid_s * k_iters * BK
        xs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
        ws = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
        bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for c in gl.static_range(STAGES):
            mbarrier.init(bar.index(c), count=1)
        nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
        for c in gl.static_range(STAGES - 1):  # the weights: written by no earlier kernel
            mbarrier.expect(bar.index(c), nbytes, pred=c < k_iters)
            tma.async_copy_global_to_shared(w_desc, [n0, k0 + c * BK], bar.index(c), ws.index(c), pred=c < k_iters)
        _gdc_wait()
        for c in gl.static_range(STAGES - 1):  # x: the previous kernel's output
            tma.async_copy_global_to_shared(x_desc, [0, k0 + c * BK], bar.index(c), xs.index(c), pred=c < k_iters)
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
        acc = gl.zeros([BM, BN], gl.float32, mma)
        for i in range(k_iters):
            r = i % STAGES
            mbarrier.wait(bar.index(r), (i // STAGES) & 1)
            acc = warpgroup_mma(xs.index(r), ws.index(r).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, xs.index(r), ws.index(r)))[0]
            j = i + STAGES - 1  # into the slot of iteration i - 1, whose MMA has completed
            t = j % STAGES
            mbarrier.expect(bar.index(t), nbytes, pred=j < k_iters)
            tma.async_copy_global_to_shared(x_desc, [0, k0 + j * BK], bar.index(t), xs.index(t), pred=j < k_iters)
            tma.async_copy_global_to_shared(w_desc, [n0, k0 + j * BK], bar.index(t), ws.index(t), pred=j < k_iters)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        for c in gl.static_range(STAGES):
            mbarrier.invalidate(bar.index(c))
        out: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [2, 2], [1, 0])  # _tma_kernel's store layout
        acc = gl.convert_layout(acc, out)
        offs_m = gl.arange(0, BM, layout=gl.SliceLayout(1, out))
        offs_n = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, out))
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ptr = P + pid_s * s_pz + offs_m[:, None] * N + offs_n[None, :]
        if OUT_F32:
            gl.store(ptr, acc, mask=mask)
        else:
            gl.store(ptr, acc.to(P.dtype.element_ty), mask=mask)

    @gluon.jit
    def _silu_tma_pdl_kernel(x_desc, g_desc, O, M, F, K, STAGES: gl.constexpr, ROUND: gl.constexpr = True):
        """_silu_tma_kernel's product with its pipeline written out as _tma_pdl_kernel's (a slot: x, gate and up
        tiles), the gate and up tiles of the first STAGES - 1 slots requested before griddepcontrol.wait."""
        BM: gl.constexpr = x_desc.block_type.shape[0]
        BK: gl.constexpr = x_desc.block_type.shape[1]
        BN: gl.constexpr = g_desc.block_type.shape[0]
        _gdc_launch_dependents()
        n0 = gl.program_id(0) * BN
        k_iters = gl.cdiv(K, BK)
        xs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
        gs = gl.allocate_shared_memory(g_desc.dtype, [STAGES, BN, BK], g_desc.layout)
        us = gl.allocate_shared_memory(g_desc.dtype, [STAGES, BN, BK], g_desc.layout)
        bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for c in gl.static_range(STAGES):
            mbarrier.init(bar.index(c), count=1)
        nbytes: gl.constexpr = x_desc.block_type.nbytes + 2 * g_desc.block_type.nbytes
        for c in gl.static_range(STAGES - 1):  # the weights: written by no earlier kernel
            mbarrier.expect(bar.index(c), nbytes, pred=c < k_iters)
            tma.async_copy_global_to_shared(g_desc, [n0, c * BK], bar.index(c), gs.index(c), pred=c < k_iters)
            tma.async_copy_global_to_shared(g_desc, [F + n0, c * BK], bar.index(c), us.index(c), pred=c < k_iters)
        _gdc_wait()
        for c in gl.static_range(STAGES - 1):  # x: the previous kernel's output
            tma.async_copy_global_to_shared(x_desc, [0, c * BK], bar.index(c), xs.index(c), pred=c < k_iters)
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
        acc_g = gl.zeros([BM, BN], gl.float32, mma)
        acc_u = gl.zeros([BM, BN], gl.float32, mma)
        for i in range(k_iters):
            r = i % STAGES
            mbarrier.wait(bar.index(r), (i // STAGES) & 1)
            acc_g = warpgroup_mma(xs.index(r), gs.index(r).permute((1, 0)), acc_g, is_async=True)
            acc_u = warpgroup_mma(xs.index(r), us.index(r).permute((1, 0)), acc_u, is_async=True)
            acc_g, acc_u, _, _, _ = warpgroup_mma_wait(num_outstanding=2, deps=(acc_g, acc_u, xs.index(r), gs.index(r),
                                                                                us.index(r)))
            j = i + STAGES - 1  # into the slot of iteration i - 1, whose MMAs have completed
            t = j % STAGES
            mbarrier.expect(bar.index(t), nbytes, pred=j < k_iters)
            tma.async_copy_global_to_shared(x_desc, [0, j * BK], bar.index(t), xs.index(t), pred=j < k_iters)
            tma.async_copy_global_to_shared(g_desc, [n0, j * BK], bar.index(t), gs.index(t), pred=j < k_iters)
            tma.async_copy_global_to_shared(g_desc, [F + n0, j * BK], bar.index(t), us.index(t), pred=j < k_iters)
        acc_g, acc_u = warpgroup_mma_wait(num_outstanding=0, deps=(acc_g, acc_u))
        for c in gl.static_range(STAGES):
            mbarrier.invalidate(bar.index(c))
        g, u = acc_g, acc_u
        if ROUND:
            g = acc_g.to(O.dtype.element_ty).to(gl.float32)
            u = acc_u.to(O.dtype.element_ty).to(gl.float32)
        a = g / (1.0 + gl.exp(-g)) * u
        out: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])  # _silu_tma_kernel's store layout
        a = gl.convert_layout(a.to(O.dtype.element_ty), out)
        offs_m = gl.arange(0, BM, layout=gl.SliceLayout(1, out))
        offs_n = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, out))
        omask = (offs_m < M)[:, None] & (offs_n < F)[None, :]
        gl.store(O + offs_m[:, None] * F + offs_n[None, :], a, mask=omask)

    _GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}

    def _gluon_desc(t: torch.Tensor, block: list[int]):
        if t.dtype not in _GL_DTYPES:
            raise ValueError(f"skinny_gemm pdl kernels: bf16 or fp16 operands only, got {t.dtype}")
        return GluonDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[t.dtype]))


# Measured overrides (rows bucket, N, K) -> (BN, BK, split, warps, stages); bench_gpu_sampling's
# --gemm-configs fills it from bench_gpu_decode_gemm's sweep. Otherwise ``config_for``'s rule, which
# gives the sweep's best configuration for every 4B-shape weight (docs/performance.md).
CONFIGS: dict[tuple[int, int, int], tuple[int, int, int, int, int]] = {}
_PROGRAMS = 256  # ~2 per multiprocessor


def config_for(M: int, N: int, K: int) -> tuple[int, int, int, int, int]:
    """32-column tiles (64 for a vocabulary-sized N), 128-deep K tiles, 4 warps, 4 stages, and K split
    into as many parts (at most 8) as it takes to reach ~256 programs."""
    hit = CONFIGS.get((16 if M <= 16 else 64, N, K))
    if hit is not None:
        return hit
    BN, BK = (64 if N >= 65536 else 32), 128
    split = max(1, min(8, -(-_PROGRAMS // -(-N // BN)), K // BK))
    return (BN, BK, split, 4, 4)


def split_len(K: int, BK: int, split: int) -> int:
    """K positions per split: K / split rounded up to whole BK tiles (so the effective split can be
    smaller than asked)."""
    per = -(-K // split)
    return -(-per // BK) * BK


def mm(x: torch.Tensor, w: torch.Tensor, cfg: tuple[int, int, int, int, int] | None = None,
       f32: bool = False) -> torch.Tensor:
    """x [M, K] (row-major), w [N, K] (row-major, any row stride): float32 partials [split, M, N] when the
    config splits K, else [M, N] in x's dtype (float32 with ``f32``: a float32 residual stream). M <= 64."""
    M, K = x.shape
    N = w.shape[0]
    if M > 64:
        raise ValueError(f"skinny_gemm.mm handles at most 64 rows, got {M}")
    BN, BK, split, warps, stages = cfg or config_for(M, N, K)
    x = x if x.stride(-1) == 1 else x.contiguous()
    if w.stride(-1) != 1:
        raise ValueError("skinny_gemm.mm needs a weight with contiguous rows")
    k_split = split_len(K, BK, split)
    split = -(-K // k_split)
    out = (torch.empty(split, M, N, device=x.device, dtype=torch.float32) if split > 1
           else torch.empty(M, N, device=x.device, dtype=torch.float32 if f32 else x.dtype))
    BM = max(16, triton.next_power_of_2(M))
    _kernel[(triton.cdiv(N, BN), split)](x, w, out, M, N, K, x.stride(0), w.stride(0), M * N, K_ITERS=k_split // BK,
                                         BM=BM, BN=BN, BK=BK, OUT_F32=split > 1 or f32, num_warps=warps,
                                         num_stages=stages)
    return out


def silu_config(M: int, F: int, K: int) -> tuple[int, int, int, int]:
    """(BN, BK, warps, stages) of ``mm_silu``: no K split (the epilogue needs whole sums), so 32-column
    tiles where F gives >= 128 programs (16 below), each streaming a gate and an up tile."""
    return (32 if F // 32 >= 128 else 16), 128, 4, 4


def mm_silu(x: torch.Tensor, w: torch.Tensor, cfg: tuple[int, int, int, int] | None = None,
            f32: bool = False) -> torch.Tensor:
    """x [M, K], w [2 F, K] (gate rows then up rows, contiguous rows) -> silu(x @ gate^T) * (x @ up^T),
    [M, F] in x's dtype. M <= 64. ``f32``: gate and up not rounded to x's dtype first (float32 GEMM outputs)."""
    M, K = x.shape
    F = w.shape[0] // 2
    if M > 64:
        raise ValueError(f"skinny_gemm.mm_silu handles at most 64 rows, got {M}")
    if w.stride(-1) != 1:
        raise ValueError("skinny_gemm.mm_silu needs a weight with contiguous rows")
    BN, BK, warps, stages = cfg or silu_config(M, F, K)
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty(M, F, device=x.device, dtype=x.dtype)
    _silu_kernel[(triton.cdiv(F, BN),)](x, w, out, M, F, K, x.stride(0), w.stride(0),
                                        BM=max(16, triton.next_power_of_2(M)), BN=BN, BK=BK, ROUND=not f32,
                                        num_warps=warps, num_stages=stages)
    return out


def mm_silu_tma(x: torch.Tensor, w: torch.Tensor, cfg: tuple[int, int, int, int] = (32, 64, 4, 4),
                pdl: bool = False, f32: bool = False) -> torch.Tensor:
    """``mm_silu`` through TMA descriptors (Hopper), for up to TMA_ROWS rows: x [M, K] (contiguous), w [2 F, K]
    (contiguous, F a multiple of cfg's BN so that no up tile reaches past the weight), cfg = (BN, BK, warps,
    stages). ``pdl``: launched as a programmatic dependent of the previous kernel (module docstring; 4 warps).
    ``f32``: as ``mm_silu``'s."""
    M, K = x.shape
    F = w.shape[0] // 2
    BN, BK, warps, stages = cfg
    if M > TMA_ROWS or F % BN or not (x.is_contiguous() and w.is_contiguous()):
        raise ValueError(f"skinny_gemm.mm_silu_tma: needs <= {TMA_ROWS} rows, F a multiple of {BN} and contiguous "
                         f"operands (got {M} rows, F {F})")
    out = torch.empty(M, F, device=x.device, dtype=x.dtype)
    if pdl:
        _silu_tma_pdl_kernel[(F // BN,)](_gluon_desc(x, [TMA_ROWS, BK]), _gluon_desc(w, [BN, BK]), out, M, F, K,
                                         STAGES=stages, ROUND=not f32, num_warps=4, launch_pdl=True)
        return out
    xd = TensorDescriptor.from_tensor(x, [TMA_ROWS, BK])  # rows past M read as zeros
    gd = TensorDescriptor.from_tensor(w, [BN, BK])
    _silu_tma_kernel[(F // BN,)](xd, gd, out, M, F, K, BM=TMA_ROWS, BN=BN, BK=BK, STAGES=stages, ROUND=not f32,
                                 num_warps=warps)
    return out


# Measured overrides of ``tma_config``: (N, K) -> (BN, BK, split, warps, stages); bench_gpu_decode_gemm --tma
# --write-configs writes them (bench_gpu_sampling --gemm-configs loads them)
TMA_CONFIGS: dict[tuple[int, int], tuple[int, int, int, int, int]] = {}


def tma_config(N: int, K: int) -> tuple[int, int, int, int, int]:
    """(BN, BK, split, warps, stages) of ``mm_tma``: 64 x 64 tiles 6 stages deep, K split into as many parts (at
    most 4, each >= 2 tiles) as it takes to reach ~160 programs; a vocabulary-sized N 128 x 128 tiles 4 deep,
    unsplit. The 64-row sweep's best for every 4B weight, or within 0.2 us of it (docs/performance.md)."""
    hit = TMA_CONFIGS.get((N, K))
    if hit is not None:
        return hit
    if N >= 65536:
        return (128, 128, 1, 4, 4)
    split = max(1, min(4, -(-160 // -(-N // 64)), K // 128))
    return (64, 64, split, 4, 6)


def mm_tma(x: torch.Tensor, w: torch.Tensor, cfg: tuple[int, int, int, int, int] | None = None,
           pdl: bool = False, f32: bool = False) -> torch.Tensor:
    """``mm`` through TMA descriptors (Hopper), for up to TMA_ROWS rows: x [M, K], w [N, K] (both contiguous,
    K a multiple of 8: 16-byte rows), cfg = (BN, BK, split, warps, stages) (``tma_config``). Float32 partials
    [split, M, N] when the config splits K, else [M, N] in x's dtype. ``pdl``: launched as a programmatic
    dependent of the previous kernel (module docstring; 4 warps). ``f32``: float32 [M, N] unsplit too."""
    M, K = x.shape
    N = w.shape[0]
    if M > TMA_ROWS or K % 8 or not (x.is_contiguous() and w.is_contiguous()):
        raise ValueError(f"skinny_gemm.mm_tma: needs <= {TMA_ROWS} rows, K a multiple of 8 and contiguous operands "
                         f"(got {M} rows, K {K})")
    BN, BK, split, warps, stages = cfg or tma_config(N, K)
    k_split = split_len(K, BK, split)
    split = -(-K // k_split)
    out = (torch.empty(split, M, N, device=x.device, dtype=torch.float32) if split > 1
           else torch.empty(M, N, device=x.device, dtype=torch.float32 if f32 else x.dtype))
    if pdl:
        _tma_pdl_kernel[(triton.cdiv(N, BN), split)](_gluon_desc(x, [TMA_ROWS, BK]), _gluon_desc(w, [BN, BK]), out, M,
                                                     N, k_split // BK, M * N, STAGES=stages, OUT_F32=split > 1 or f32,
                                                     num_warps=4, launch_pdl=True)
        return out
    xd = TensorDescriptor.from_tensor(x, [TMA_ROWS, BK])  # rows past M read as zeros
    wd = TensorDescriptor.from_tensor(w, [BN, BK])
    _tma_kernel[(triton.cdiv(N, BN), split)](xd, wd, out, M, N, k_split // BK, M * N, BM=TMA_ROWS, BN=BN, BK=BK,
                                             STAGES=stages, OUT_F32=split > 1 or f32, num_warps=warps)
    return out


def mm_silu_reference(x: torch.Tensor, w: torch.Tensor, f32: bool = False) -> torch.Tensor:
    """``mm_silu``'s result in torch: gate and up with float32 accumulation, rounded to x's dtype (not with
    ``f32``), then SiLU * up in float32."""
    F = w.shape[0] // 2
    gu = x.float() @ w.float().t()
    gu = gu if f32 else gu.to(x.dtype).float()
    return (torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]).to(x.dtype)


def reduce(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What ``mm`` returned -> [M, N] in ``dtype`` (sums the partials of a split)."""
    return p.sum(0).to(dtype) if p.dim() == 3 else p


def mm_reference(x: torch.Tensor, w: torch.Tensor, split: int = 1, f32: bool = False) -> torch.Tensor:
    """``mm``'s result in torch, float32 accumulation (partials of ``split`` K ranges when ``split > 1``; float32
    [M, N] with ``f32``)."""
    if split == 1:
        y = x.float() @ w.float().t()
        return y if f32 else y.to(x.dtype)
    K = x.shape[1]
    ks = -(-K // split)
    return torch.stack([x[:, i: i + ks].float() @ w[:, i: i + ks].float().t() for i in range(0, K, ks)])

"""Split-K decode attention over the static per-slot KV cache (Triton), with the KV write fused in.

One decode step: row ``i`` (slot ``i``) has a new query ``q[i]`` (``[Hq, D]``) and new key/value
``k[i], v[i]`` (``[Hkv, D]``) for position ``pos[i]``; it attends over cache positions
``[0, pos[i])`` plus the new token. The context is cut into chunks of ``chunk`` positions; program
``(i, h, s)`` handles KV head ``h`` (all ``Hq / Hkv`` query heads of its group share one read of each
K/V tile) over chunk ``s`` and stops at ``pos[i]``, so each row reads only its own length, not the
batch's context bucket. The program whose chunk holds ``pos[i]`` also writes ``k[i], v[i]`` into the
cache and folds the new token in from registers (no program of the launch reads position ``pos[i]``
from memory, so there is no race). A second kernel merges the chunks' partial softmax states
(flash-decoding); where one chunk covers the context (``n_split == 1``) the split kernel writes the
output itself and there is no second launch. Shapes are static for a given (batch, context bucket): graph-capturable.

``attend_reference`` is the same computation in plain torch (the CPU path and the tests' oracle).
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; CPU-only installs have none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

BLOCK_N = 64
TARGET_PROGRAMS = 528  # ~4 per multiprocessor on an H100/H200 (132 SMs)
# rows x KV heads from which each (row, KV head) reads its whole context in one program (no merge launch):
# the attention sweep's best at 64 rows x 8 KV heads (46 vs 52 us; 528 programs split in two), not at 16 x 8
ONE_CHUNK_PAIRS = 264


def available() -> bool:
    return triton is not None


def chunk_for(b: int, kv_heads: int, ctx: int, block: int = BLOCK_N, target: int | None = None) -> int:
    """Context positions per program: small enough that b * kv_heads * splits fills the GPU, a
    multiple of the tile ``block``, at most the whole context (all of it from ONE_CHUNK_PAIRS rows x heads)."""
    target = target or TARGET_PROGRAMS
    splits = 1 if b * kv_heads >= ONE_CHUNK_PAIRS else max(1, -(-target // (b * kv_heads)))
    chunk = -(-ctx // splits)
    return max(block, -(-chunk // block) * block)


if triton is not None:

    @triton.jit
    def _split_kernel(Q, KN, VN, KC, VC, POS, M, L, ACC, O, scale, chunk, n_split,
                      s_qb, s_qh, s_nb, s_nh, s_vb, s_vh, s_cs, s_ch, s_ct, s_ob, s_oh,
                      HQ: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
                      DIRECT: tl.constexpr, P32: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        pos = tl.load(POS + b).to(tl.int32)
        start = s * chunk
        if start <= pos:
            offs_g = tl.arange(0, GP)
            offs_d = tl.arange(0, D)
            gmask = offs_g < G
            q = tl.load(Q + b * s_qb + (h * G + offs_g)[:, None] * s_qh + offs_d[None, :], mask=gmask[:, None],
                        other=0.0)
            kbase = KC + b * s_cs + h * s_ch
            vbase = VC + b * s_cs + h * s_ch
            m_i = tl.full([GP], float("-inf"), tl.float32)
            l_i = tl.zeros([GP], tl.float32)
            acc = tl.zeros([GP, D], tl.float32)
            end = tl.minimum(start + chunk, pos)
            for t0 in range(start, end, BLOCK):
                offs_n = t0 + tl.arange(0, BLOCK)
                nmask = offs_n < end
                k = tl.load(kbase + offs_n[:, None] * s_ct + offs_d[None, :], mask=nmask[:, None], other=0.0)
                qk = tl.dot(q, tl.trans(k)) * scale
                qk = tl.where(nmask[None, :], qk, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(qk, 1))
                alpha = tl.exp(m_i - m_new)
                p = tl.exp(qk - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(vbase + offs_n[:, None] * s_ct + offs_d[None, :], mask=nmask[:, None], other=0.0)
                if P32:  # float32 probabilities times V, in full float32 (no TF32)
                    acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
                else:
                    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
            if pos < start + chunk:  # this chunk holds the new token: write it and fold it in
                kn = tl.load(KN + b * s_nb + h * s_nh + offs_d)
                vn = tl.load(VN + b * s_vb + h * s_vh + offs_d)
                tl.store(kbase + pos * s_ct + offs_d, kn)
                tl.store(vbase + pos * s_ct + offs_d, vn)
                qk1 = tl.sum(q.to(tl.float32) * kn.to(tl.float32)[None, :], 1) * scale
                m_new = tl.maximum(m_i, qk1)
                alpha = tl.exp(m_i - m_new)
                p1 = tl.exp(qk1 - m_new)
                l_i = l_i * alpha + p1
                if not P32:  # the same bf16 rounding of p as the tiles' p @ V
                    p1 = p1.to(vn.dtype).to(tl.float32)
                acc = acc * alpha[:, None] + p1[:, None] * vn.to(tl.float32)[None, :]
                m_i = m_new
            if DIRECT:  # the only chunk: the output itself
                out = acc / l_i[:, None]
                tl.store(O + b * s_ob + (h * G + offs_g)[:, None] * s_oh + offs_d[None, :], out.to(O.dtype.element_ty),
                         mask=gmask[:, None])
            else:
                row = (b * HQ + h * G + offs_g) * n_split + s
                tl.store(M + row, m_i, mask=gmask)
                tl.store(L + row, l_i, mask=gmask)
                tl.store(ACC + row[:, None] * D + offs_d[None, :], acc, mask=gmask[:, None])

    @triton.jit
    def _merge_kernel(M, L, ACC, POS, O, chunk, n_split, s_ob, s_oh,
                      HQ: tl.constexpr, D: tl.constexpr, SP: tl.constexpr):
        b = tl.program_id(0)
        hq = tl.program_id(1)
        pos = tl.load(POS + b).to(tl.int32)
        n_valid = pos // chunk + 1
        offs_s = tl.arange(0, SP)
        offs_d = tl.arange(0, D)
        smask = offs_s < n_valid
        row = (b * HQ + hq) * n_split + offs_s
        m = tl.load(M + row, mask=smask, other=float("-inf"))
        l = tl.load(L + row, mask=smask, other=0.0)
        gm = tl.max(m, 0)
        w = tl.where(smask, tl.exp(m - gm), 0.0)
        acc = tl.load(ACC + row[:, None] * D + offs_d[None, :], mask=smask[:, None], other=0.0)
        out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
        tl.store(O + b * s_ob + hq * s_oh + offs_d, out.to(O.dtype.element_ty))


def attend(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
           pos: torch.Tensor, ctx: int, scale: float, block: int = BLOCK_N, warps: int = 4, stages: int = 2,
           target: int | None = None, p32: bool = False) -> torch.Tensor:
    """q [b, Hq, D], k_new/v_new [b, Hkv, D] (any strides), kc/vc [slots >= b, Hkv, T, D] (one layer; written at
    ``pos``), pos [b] (each < ctx). Returns the attention output [b, Hq, D] in q's dtype.
    ``block`` (K/V tile rows), ``warps``, ``stages``, ``target`` (programs to aim for): launch
    parameters, defaults chosen by bench_gpu_sampling.py's attention sweep (``target``: TARGET_PROGRAMS).
    ``p32``: the probabilities stay float32 in P @ V (float32 attention, ``unembed.ATTENTION_F32``)."""
    b, Hq, D = q.shape
    Hkv = k_new.shape[1]
    G = Hq // Hkv
    chunk = chunk_for(b, Hkv, ctx, block, target)
    n_split = -(-ctx // chunk)
    # q, k_new, v_new may be views (the decode step passes slices of its fused q/k and qkv tensors):
    # read through their strides, copied only if a head's elements are not contiguous
    q, k_new, v_new = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_new, v_new))
    m = torch.empty(b, Hq, n_split, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    acc = torch.empty(b, Hq, n_split, D, device=q.device, dtype=torch.float32)
    out = torch.empty(b, Hq, D, device=q.device, dtype=q.dtype)
    _split_kernel[(b, Hkv, n_split)](
        q, k_new, v_new, kc, vc, pos, m, l, acc, out, scale, chunk, n_split,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        kc.stride(0), kc.stride(1), kc.stride(2), out.stride(0), out.stride(1),
        HQ=Hq, G=G, GP=max(16, triton.next_power_of_2(G)), D=D, BLOCK=block, DIRECT=n_split == 1, P32=p32,
        num_warps=warps, num_stages=stages)
    if n_split == 1:
        return out
    _merge_kernel[(b, Hq)](m, l, acc, pos, out, chunk, n_split, out.stride(0), out.stride(1),
                           HQ=Hq, D=D, SP=max(2, triton.next_power_of_2(n_split)), num_warps=4)
    return out


def attend_reference(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
                     pos: torch.Tensor, ctx: int, scale: float, p32: bool = False) -> torch.Tensor:
    """What ``attend`` computes, in torch: writes k_new/v_new at ``pos``, then masked GQA softmax
    attention over cache positions ``[0, pos]`` in float32 (probabilities rounded to the cache
    dtype before the product with V, as the kernel does, unless ``p32``)."""
    b, Hq, D = q.shape
    Hkv = k_new.shape[1]
    ar = torch.arange(b, device=q.device)
    kc.permute(0, 2, 1, 3)[ar, pos] = k_new
    vc.permute(0, 2, 1, 3)[ar, pos] = v_new
    K = kc[:b, :, :ctx].float()
    V = vc[:b, :, :ctx]
    qg = q.float().view(b, Hkv, Hq // Hkv, D)
    sc = torch.einsum("bhgd,bhtd->bhgt", qg, K) * scale
    valid = torch.arange(ctx, device=q.device)[None, :] <= pos[:, None]
    sc = sc.masked_fill(~valid[:, None, None, :], float("-inf"))
    m = sc.amax(-1, keepdim=True)
    p = torch.exp(sc - m)
    den = p.sum(-1, keepdim=True)
    out = torch.einsum("bhgt,bhtd->bhgd", p if p32 else p.to(V.dtype).float(), V.float()) / den
    return out.reshape(b, Hq, D).to(q.dtype)

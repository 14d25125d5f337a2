"""Batched token choice on the device, graph-capturable (no host synchronisation).

Each row has its own temperature, top-k, top-p, a 63-bit stream id (``seed``) and a counter
(``step``). The random numbers come from a counter-based hash of (stream, step, token id), so
a seeded sequence draws the same tokens whatever else is in the batch and on any device, and
no generator state has to be advanced inside a CUDA graph. Sampling is Gumbel-max over the
temperature-scaled, top-k/top-p-filtered logits, which draws from exactly the filtered softmax.

The returned logprob is log p(token) under the untruncated temperature-1 distribution in float32
(what the trainer's ``forward`` computes), as in ``services.backend.sampler``.

``choose_kernel`` is ``choose`` without top-k/top-p (the decode step's usual case) in two Triton
launches: one pass over each row's vocabulary in chunks (max and sum of exponentials for the
log-softmax, the hash's Gumbel noise, the chunk's best token), then one program per row merges the
chunks. The same hash, so the same draws as ``choose`` up to float32 rounding of the noise.
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; CPU-only installs have none
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - depends on the install
    triton = None

_M64 = 1 << 64


def _s64(x: int) -> int:
    x %= _M64
    return x - _M64 if x >= 1 << 63 else x


_GOLD = _s64(0x9E3779B97F4A7C15)
_C1 = _s64(0xBF58476D1CE4E5B9)
_C2 = _s64(0x94D049BB133111EB)
_C3 = _s64(0xD6E8FEB86659FD93)
_LOW32 = (1 << 32) - 1


def _mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 (wrapping multiply; logical shifts via masks)."""
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _C1
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _C2
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (Wellons) on non-negative values < 2**32 held in int64 (cheap per element)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _LOW32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _LOW32
    return x ^ (x >> 16)


def row_keys(seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """One 32-bit key per (stream, step)."""
    return _mix64(seed * _GOLD + step * _C3) & _LOW32


def uniform(seed: torch.Tensor, step: torch.Tensor, vidx: torch.Tensor) -> torch.Tensor:
    """[b, V] float32 uniforms in (0, 1) from (seed[b], step[b], token id)."""
    key = row_keys(seed, step)
    x = _mix32((key[:, None] ^ (vidx[None, :] * 0x9E3779B1)) & _LOW32)
    return ((x >> 8).float() + 0.5) * (1.0 / 16777216.0)


def choose(logits: torch.Tensor, temp: torch.Tensor, topk: torch.Tensor, topp: torch.Tensor, seed: torch.Tensor,
           step: torch.Tensor, vidx: torch.Tensor, filtered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [b, V] -> (tokens [b] int64, logprobs [b] float32).

    temp <= 0 or top_k == 1: greedy. top_k <= 0: no top-k. top_p >= 1: no top-p. ``filtered``
    (a Python bool: which graph variant) must be True when any row uses top-k > 1 or top-p < 1.
    """
    lg = logits.float()
    logp = torch.log_softmax(lg, dim=-1)
    greedy = (temp <= 0) | (topk == 1)
    t = torch.where(greedy, torch.ones_like(temp), temp)
    scaled = lg / t[:, None]
    if filtered:
        V = lg.shape[-1]
        sv = torch.sort(scaled, dim=-1, descending=True).values
        rank = vidx[None, :]
        k = torch.where(topk > 0, topk, torch.full_like(topk, V)).clamp(max=V)[:, None]
        in_k = rank < k
        ps = torch.softmax(sv.masked_fill(~in_k, float("-inf")), dim=-1)
        before = ps.cumsum(dim=-1) - ps
        keep = in_k & ((before < topp[:, None]) | (topp[:, None] >= 1.0))
        keep = keep | (rank == 0)
        nkeep = keep.sum(dim=-1, keepdim=True)
        thresh = sv.gather(-1, nkeep - 1)
        scaled = scaled.masked_fill(scaled < thresh, float("-inf"))
    u = uniform(seed, step, vidx)
    g = -torch.log(-torch.log(u))
    g = g.masked_fill(greedy[:, None], 0.0)
    tok = torch.argmax(scaled + g, dim=-1)
    lp = logp.gather(-1, tok[:, None])[:, 0]
    return tok, lp


def available() -> bool:
    return triton is not None


CHUNK = 2048  # vocabulary entries per program of choose_kernel's first pass
# the Gumbel noise with the hardware's approximate logarithm and the temperature as one reciprocal per row
# (choose_kernel is bound by its per-entry instructions at 64 rows); False: IEEE logarithm and division
FAST_MATH = True


if triton is not None:

    @triton.jit
    def _chunk_kernel(LG, TEMP, TOPK, SEED, STEP, PM, PS, PV, PI, V, n_chunks, s_lg, GOLD, C1, C2, C3,
                      CH: tl.constexpr, FAST: tl.constexpr):
        r = tl.program_id(0)
        c = tl.program_id(1)
        offs = c * CH + tl.arange(0, CH)
        vmask = offs < V
        lg = tl.load(LG + r * s_lg + offs, mask=vmask, other=float("-inf")).to(tl.float32)
        m = tl.max(lg, 0)
        s = tl.sum(tl.exp(lg - m), 0)
        temp = tl.load(TEMP + r)
        greedy = (temp <= 0) | (tl.load(TOPK + r) == 1)
        t = tl.where(greedy, 1.0, temp)
        # row_keys: splitmix64's finaliser on int64 (wrapping multiplies, logical shifts via masks)
        x = tl.load(SEED + r) * GOLD + tl.load(STEP + r) * C3
        x = x ^ ((x >> 30) & ((1 << 34) - 1))
        x = x * C1
        x = x ^ ((x >> 27) & ((1 << 37) - 1))
        x = x * C2
        x = x ^ ((x >> 31) & ((1 << 33) - 1))
        key = (x & 0xFFFFFFFF).to(tl.uint32)
        # uniform: lowbias32 of key ^ (token id * 0x9E3779B1), all mod 2**32
        h = key ^ (offs.to(tl.uint32) * 0x9E3779B1)
        h = h ^ (h >> 16)
        h = h * 0x7FEB352D
        h = h ^ (h >> 15)
        h = h * 0x846CA68B
        h = h ^ (h >> 16)
        u = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        if FAST:
            g = tl.where(greedy, 0.0, -libdevice.fast_logf(-libdevice.fast_logf(u)))
            val = tl.where(vmask, lg * (1.0 / t) + g, float("-inf"))
        else:
            g = tl.where(greedy, 0.0, -libdevice.log(-libdevice.log(u)))
            val = tl.where(vmask, lg / t + g, float("-inf"))
        best = tl.max(val, 0)
        idx = tl.argmax(val, 0)
        row = r * n_chunks + c
        tl.store(PM + row, m)
        tl.store(PS + row, s)
        tl.store(PV + row, best)
        tl.store(PI + row, c * CH + idx)

    @triton.jit
    def _merge_kernel(LG, PM, PS, PV, PI, TOK, LP, n_chunks, s_lg, NP: tl.constexpr):
        r = tl.program_id(0)
        offs = tl.arange(0, NP)
        cmask = offs < n_chunks
        m = tl.load(PM + r * n_chunks + offs, mask=cmask, other=float("-inf"))
        s = tl.load(PS + r * n_chunks + offs, mask=cmask, other=0.0)
        v = tl.load(PV + r * n_chunks + offs, mask=cmask, other=float("-inf"))
        i = tl.load(PI + r * n_chunks + offs, mask=cmask, other=2147483647)
        gm = tl.max(m, 0)
        lse = gm + libdevice.log(tl.sum(s * tl.exp(m - gm), 0))
        best = tl.max(v, 0)
        tok = tl.min(tl.where(v == best, i, 2147483647), 0)  # the lowest token id among ties, as torch.argmax
        tl.store(TOK + r, tok.to(tl.int64))
        tl.store(LP + r, tl.load(LG + r * s_lg + tok).to(tl.float32) - lse)


def choose_kernel(logits: torch.Tensor, temp: torch.Tensor, topk: torch.Tensor, seed: torch.Tensor,
                  step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``choose(logits, temp, topk, topp, seed, step, vidx, filtered=False)`` on CUDA: logits [b, V]
    (rows contiguous), temp [b] float32, topk [b] int64 (only top_k == 1 matters: greedy), seed and
    step [b] int64 -> (tokens [b] int64, logprobs [b] float32)."""
    b, V = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    n = triton.cdiv(V, CHUNK)
    pm, ps, pv = (torch.empty(b, n, device=logits.device, dtype=torch.float32) for _ in range(3))
    pi = torch.empty(b, n, device=logits.device, dtype=torch.int32)
    tok = torch.empty(b, device=logits.device, dtype=torch.int64)
    lp = torch.empty(b, device=logits.device, dtype=torch.float32)
    _chunk_kernel[(b, n)](logits, temp, topk, seed, step, pm, ps, pv, pi, V, n, logits.stride(0), _GOLD, _C1, _C2,
                          _C3, CH=CHUNK, FAST=FAST_MATH, num_warps=8)
    _merge_kernel[(b,)](logits, pm, ps, pv, pi, tok, lp, n, logits.stride(0), NP=max(2, triton.next_power_of_2(n)),
                        num_warps=4)
    return tok, lp

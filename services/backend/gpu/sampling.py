"""Batched token choice on the device, graph-capturable (no host synchronisation).

Each row has its own temperature, top-k, top-p, a 63-bit stream id (``seed``) and a counter
(``step``). The random numbers come from a counter-based hash of (stream, step, token id), so
a seeded sequence draws the same tokens whatever else is in the batch and on any device, and
no generator state has to be advanced inside a CUDA graph. Sampling is Gumbel-max over the
temperature-scaled, top-k/top-p-filtered logits, which draws from exactly the filtered softmax.

The returned logprob is log p(token) under the untruncated temperature-1 distribution in float32
(what the trainer's ``forward`` computes), as in ``services.backend.sampler``.
"""

from __future__ import annotations

import torch

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

"""Tinker's built-in losses, exactly as documented (sum reduction, real-valued weights).

Every loss gets per-token target logprobs ``lp`` [N] (float32, with gradient) and the datum's
``loss_fn_inputs`` as float tensors, and returns the elementwise loss [N]; the caller sums.
Notation: q = sampling logprobs, A = advantages, w = weights (default 1), r = exp(lp - q), sg = stop-gradient.

This backend's extensions (docs/backend.md "Sampler/trainer mismatch corrections"), config keys of
importance_sampling, ppo, cispo and gspo, each 0 = off (the default, which changes nothing):

* ``tis_threshold`` C > 0: truncated importance sampling. The elementwise loss is multiplied by the detached
  weight min(r, C) / r, r = exp(lp - q) at forward time: for importance_sampling the value becomes -A min(r, C)
  and its gradient -A min(r, C) grad(lp).
* ``mask_ratio_low`` L > 0 / ``mask_ratio_high`` H > 0: tokens whose detached r lies below L / above H get zero
  loss (and no gradient).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

Inputs = dict[str, torch.Tensor]
LossFn = Callable[[torch.Tensor, Inputs, dict[str, float]], torch.Tensor]

CORRECTIONS = {"tis_threshold": 0.0, "mask_ratio_low": 0.0, "mask_ratio_high": 0.0}   # 0 = off
CLIPPED = ("ppo", "cispo", "gspo")   # losses with clip_low_threshold / clip_high_threshold
# GSPO's clip range when the request sets none: the paper's (arXiv 2507.18071: 3e-4 below and 4e-4 above 1, for the
# length-normalised sequence ratio); Tinker's GSPO page shows the clip but, as far as we could read it, no defaults.
GSPO_CLIP = (1.0 - 3e-4, 1.0 + 4e-4)


def _ratio(lp: torch.Tensor, x: Inputs) -> torch.Tensor:
    return torch.exp(lp - x["logprobs"])


def _corrected(el: torch.Tensor, lp: torch.Tensor, x: Inputs, cfg: dict[str, float]) -> torch.Tensor:
    """``el`` with the mismatch corrections of ``cfg`` applied (module docstring); unchanged when all are 0."""
    c, low, high = (cfg.get(k, 0.0) for k in CORRECTIONS)
    if not (c or low or high):
        return el
    d = (lp.detach() - x["logprobs"])          # log r, no gradient
    if c:   # min(r, C) / r = exp(min(0, log C - log r)): no overflow for a large r
        el = el * torch.exp(torch.clamp(math.log(c) - d, max=0.0))
    if low or high:
        r = torch.exp(d)
        keep = torch.ones_like(r, dtype=torch.bool)
        if low:
            keep &= r >= low
        if high:
            keep &= r <= high
        el = torch.where(keep, el, torch.zeros_like(el))
    return el


def cross_entropy(lp, x, cfg):
    return -lp


def importance_sampling(lp, x, cfg):
    return _corrected(-(_ratio(lp, x) * x["advantages"]), lp, x, cfg)


def ppo(lp, x, cfg):
    r, a = _ratio(lp, x), x["advantages"]
    clipped = torch.clamp(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return _corrected(-torch.minimum(r * a, clipped * a), lp, x, cfg)


def cispo(lp, x, cfg):
    r = _ratio(lp, x).detach()
    el = -(torch.clamp(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"]) * lp * x["advantages"])
    return _corrected(el, lp, x, cfg)


def sequence_log_ratio(lp: torch.Tensor, x: Inputs) -> torch.Tensor:
    """GSPO's log s: the mean of sg(lp) - q over the positions ``sequence_ratio_mask`` marks (non-zero)."""
    return (lp.detach() - x["logprobs"])[x["sequence_ratio_mask"] != 0].mean()


def gspo(lp, x, cfg):
    """Token-level GSPO (GSPO-token, arXiv 2507.18071): every token's ratio r_t = sg(s) * exp(lp - sg(lp)) has the
    sequence ratio s's value and its own logprob's gradient; -min(r_t A, clip(r_t, lo, hi) A)."""
    r = torch.exp(sequence_log_ratio(lp, x) + lp - lp.detach())
    a = x["advantages"]
    clipped = torch.clamp(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return _corrected(-torch.minimum(r * a, clipped * a), lp, x, cfg)


def dro(lp, x, cfg):
    return -(lp * x["advantages"] - 0.5 * cfg["beta"] * (lp - x["logprobs"]) ** 2)


def clip_ratio(loss_fn: str, lp: torch.Tensor, x: Inputs) -> torch.Tensor:
    """The (detached) ratio a clipped loss clips at each position: r, or gspo's sequence ratio s at every one."""
    if loss_fn == "gspo":
        return torch.exp(sequence_log_ratio(lp, x)).expand(lp.shape)
    return _ratio(lp.detach(), x)


_RL = ("logprobs", "advantages")
# name -> (function, required inputs beyond target_tokens, config defaults: the keys a request may set)
LOSSES: dict[str, tuple[LossFn, tuple[str, ...], dict[str, float]]] = {
    "cross_entropy": (cross_entropy, (), {}),
    "importance_sampling": (importance_sampling, _RL, {**CORRECTIONS}),
    "ppo": (ppo, _RL, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2, **CORRECTIONS}),
    "cispo": (cispo, _RL, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0, **CORRECTIONS}),
    "gspo": (gspo, (*_RL, "sequence_ratio_mask"),
             {"clip_low_threshold": GSPO_CLIP[0], "clip_high_threshold": GSPO_CLIP[1], **CORRECTIONS}),
    "dro": (dro, _RL, {"beta": 0.05}),
}


def loss(loss_fn: str, config: dict[str, float] | None) -> tuple[LossFn, dict[str, float]]:
    """(fn, config with the defaults filled in) of a loss the API accepted (wire.loss_config checks them)."""
    fn, _, defaults = LOSSES[loss_fn]
    return fn, {**defaults, **(config or {})}

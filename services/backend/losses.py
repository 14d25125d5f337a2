"""Tinker's built-in losses, exactly as documented (sum reduction, real-valued weights).

Every loss gets per-token target logprobs ``lp`` [N] (float32, with gradient) and the datum's
``loss_fn_inputs`` as float tensors, and returns the elementwise loss [N]; the caller sums.
Notation: q = sampling logprobs, A = advantages, w = weights (default 1), r = exp(lp - q).
"""

from __future__ import annotations

from typing import Callable

import torch

Inputs = dict[str, torch.Tensor]
LossFn = Callable[[torch.Tensor, Inputs, dict[str, float]], torch.Tensor]


def _ratio(lp: torch.Tensor, x: Inputs) -> torch.Tensor:
    return torch.exp(lp - x["logprobs"])


def cross_entropy(lp, x, cfg):
    return -lp


def importance_sampling(lp, x, cfg):
    return -(_ratio(lp, x) * x["advantages"])


def ppo(lp, x, cfg):
    r, a = _ratio(lp, x), x["advantages"]
    clipped = torch.clamp(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return -torch.minimum(r * a, clipped * a)


def cispo(lp, x, cfg):
    r = _ratio(lp, x).detach()
    return -(torch.clamp(r, cfg["clip_low_threshold"], cfg["clip_high_threshold"]) * lp * x["advantages"])


def dro(lp, x, cfg):
    return -(lp * x["advantages"] - 0.5 * cfg["beta"] * (lp - x["logprobs"]) ** 2)


# name -> (function, required inputs beyond target_tokens, config defaults)
LOSSES: dict[str, tuple[LossFn, tuple[str, ...], dict[str, float]]] = {
    "cross_entropy": (cross_entropy, (), {}),
    "importance_sampling": (importance_sampling, ("logprobs", "advantages"), {}),
    "ppo": (ppo, ("logprobs", "advantages"), {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    "cispo": (cispo, ("logprobs", "advantages"), {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
    "dro": (dro, ("logprobs", "advantages"), {"beta": 0.05}),
}


def loss(loss_fn: str, config: dict[str, float] | None) -> tuple[LossFn, dict[str, float]]:
    """(fn, config with the defaults filled in) of a loss the API accepted (wire.loss_config checks them)."""
    fn, _, defaults = LOSSES[loss_fn]
    return fn, {**defaults, **(config or {})}

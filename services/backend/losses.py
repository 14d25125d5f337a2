"""Tinker's built-in losses, exactly as documented (sum reduction, real-valued weights).

Every loss gets per-token target logprobs ``lp`` [N] (float32, with gradient) and the datum's
``loss_fn_inputs`` as float tensors, and returns the elementwise loss [N]; the caller sums.
Notation: q = sampling logprobs, A = advantages, w = weights (default 1), r = exp(lp - q).
"""

from __future__ import annotations

from typing import Callable

import torch

from .errors import BadRequest

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
    """(fn, config with the defaults filled in) of a loss ``resolve`` accepted (the runtime's look-up)."""
    fn, _, defaults = LOSSES[loss_fn]
    return fn, {**defaults, **(config or {})}


def resolve(loss_fn: str, config: dict[str, float] | None) -> tuple[LossFn, tuple[str, ...], dict[str, float]]:
    """Validate a loss name + config (the API edge); return (fn, required inputs, full config)."""
    if loss_fn == "stable_reinforce":
        raise BadRequest(f"loss_fn 'stable_reinforce' is not supported by this backend (Tinker's math for it is not "
                         f"public); supported: {', '.join(LOSSES)}. tinker-cookbook's async RL loop takes "
                         "loss_fn='importance_sampling' (its synchronous default) or 'ppo'/'cispo'")
    if loss_fn not in LOSSES:
        raise BadRequest(f"unsupported loss_fn {loss_fn!r}; supported: {', '.join(LOSSES)}")
    fn, required, defaults = LOSSES[loss_fn]
    cfg = dict(defaults)
    for k, v in (config or {}).items():
        if k not in defaults:
            allowed = ", ".join(defaults) or "none"
            raise BadRequest(f"unknown loss_fn_config key {k!r} for {loss_fn} (allowed: {allowed})")
        if not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            raise BadRequest(f"loss_fn_config[{k!r}] must be a finite number, got {v!r}")
        cfg[k] = float(v)
    if loss_fn in ("ppo", "cispo") and cfg["clip_low_threshold"] > cfg["clip_high_threshold"]:
        raise BadRequest("clip_low_threshold must be <= clip_high_threshold")
    return fn, required, cfg

"""Trajectories -> Tinker datums (one datum per token segment; see agent/trajectory.py).

Alignment (Tinker's convention): model_input = tokens[:-1], target_tokens = tokens[1:], and
every per-token input is aligned with the targets. Only tokens the policy sampled carry weight
(SFT) or advantage (RL); prompt and observation tokens get 0.
"""

from __future__ import annotations

import numpy as np
from tinker import types

from .agent.trajectory import Segment, Trajectory


def _td(a, dtype) -> types.TensorData:
    return types.TensorData.from_numpy(np.asarray(a, dtype=dtype))


def sft_datum(seg: Segment) -> types.Datum:
    toks = seg.tokens
    w = np.asarray(seg.sampled[1:], dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                       loss_fn_inputs={"target_tokens": _td(toks[1:], np.int64), "weights": _td(w, np.float32)})


def rl_datum(seg: Segment, advantage: float) -> types.Datum:
    toks = seg.tokens
    mask = np.asarray(seg.sampled[1:], dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                       loss_fn_inputs={"target_tokens": _td(toks[1:], np.int64),
                                       "logprobs": _td(np.asarray(seg.logprobs[1:], dtype=np.float32) * mask, np.float32),
                                       "advantages": _td(mask * advantage, np.float32)})


def sft_datums(trajs: list[Trajectory]) -> list[types.Datum]:
    return [sft_datum(s) for t in trajs for s in t.segments if s.n_sampled]


def rl_segments(trajs: list[Trajectory], advantages: list[float], keep_zero: bool = False) -> list[tuple[Segment, float]]:
    """The trained (segment, advantage) pairs: every sampled segment of every unmasked trajectory
    (with ``keep_zero`` those of zero advantage too: a KL penalty still trains them)."""
    return [(s, a) for t, a in zip(trajs, advantages) if not t.masked and (keep_zero or a != 0.0)
            for s in t.segments if s.n_sampled]


def rl_datums(trajs: list[Trajectory], advantages: list[float]) -> list[types.Datum]:
    return [rl_datum(s, a) for s, a in rl_segments(trajs, advantages)]


def group_advantages(rewards: list[float], normalize_std: bool = False, leave_one_out: bool = False,
                     eps: float = 1e-6) -> list[float]:
    """GRPO advantages: reward - group mean (optionally / std, or leave-one-out baseline)."""
    r = np.asarray(rewards, dtype=np.float64)
    if len(r) == 0:
        return []
    if leave_one_out and len(r) > 1:
        base = (r.sum() - r) / (len(r) - 1)
    else:
        base = np.full_like(r, r.mean())
    adv = r - base
    if normalize_std:
        adv = adv / (r.std() + eps)
    return adv.tolist()

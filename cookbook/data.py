"""Trajectories -> Tinker datums (one datum per token segment; see agent/trajectory.py), and the
advantage estimators of the RL loop (cookbook/rl_loop.py).

Alignment (Tinker's convention): model_input = tokens[:-1], target_tokens = tokens[1:], and
every per-token input is aligned with the targets. Only tokens the policy sampled carry weight
(SFT) or advantage (RL); prompt and observation tokens get 0.
"""

from __future__ import annotations

import numpy as np
from tinker import types

from services.common.trajectory import Segment, Trajectory


def _td(a, dtype) -> types.TensorData:
    return types.TensorData.from_numpy(np.asarray(a, dtype=dtype))


def sft_datum(seg: Segment) -> types.Datum:
    toks = seg.tokens
    w = np.asarray(seg.sampled[1:], dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                       loss_fn_inputs={"target_tokens": _td(toks[1:], np.int64), "weights": _td(w, np.float32)})


def rl_datum(seg: Segment, advantage: float, sequence_ratio_mask: bool = False) -> types.Datum:
    """The RL datum of a segment; with ``sequence_ratio_mask`` (the gspo loss) also the positions its sequence ratio
    averages over: the sampled tokens."""
    toks = seg.tokens
    mask = np.asarray(seg.sampled[1:], dtype=np.float32)
    inputs = {"target_tokens": _td(toks[1:], np.int64),
              "logprobs": _td(np.asarray(seg.logprobs[1:], dtype=np.float32) * mask, np.float32),
              "advantages": _td(mask * advantage, np.float32)}
    if sequence_ratio_mask:
        inputs["sequence_ratio_mask"] = _td(mask, np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]), loss_fn_inputs=inputs)


def sft_datums(trajs: list[Trajectory]) -> list[types.Datum]:
    return [sft_datum(s) for t in trajs for s in t.segments if s.n_sampled]


def rl_segments(trajs: list[Trajectory], advantages: list[float],
                keep_zero: bool = False) -> list[tuple[Segment, float]]:
    """The trained (segment, advantage) pairs: every sampled segment of every unmasked trajectory
    (with ``keep_zero`` those of zero advantage too: a KL penalty still trains them)."""
    return [(s, a) for t, a in zip(trajs, advantages) if not t.masked and (keep_zero or a != 0.0)
            for s in t.segments if s.n_sampled]


def rl_datums(trajs: list[Trajectory], advantages: list[float]) -> list[types.Datum]:
    return [rl_datum(s, a) for s, a in rl_segments(trajs, advantages)]


def scaled_advantages(d: types.Datum, c: float) -> types.Datum:
    """The datum with its advantages times ``c`` (ppo's token mean through the server's summed loss)."""
    return types.Datum(model_input=d.model_input, loss_fn_inputs={
        **d.loss_fn_inputs, "advantages": _td(d.loss_fn_inputs["advantages"].to_numpy() * np.float32(c), np.float32)})


def reweighted(d: types.Datum, w: float) -> types.Datum:
    """The SFT datum with its loss weights times ``w`` (--balance-tasks)."""
    if w == 1.0:
        return d
    return types.Datum(model_input=d.model_input, loss_fn_inputs={
        **d.loss_fn_inputs, "weights": _td(d.loss_fn_inputs["weights"].to_numpy() * np.float32(w), np.float32)})


# ------------------------------------------------------------------------------ advantage estimators
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


def baseline_advantages(rewards: list[float], baseline: float | None) -> tuple[list[float], float]:
    """PPO: reward - a running mean of the batch mean rewards (the first batch's mean, then
    0.9 * old + 0.1 * batch mean), so reward 0 still gets gradient. Returns the advantages and the
    new baseline."""
    batch_mean = float(np.mean(rewards))
    new = batch_mean if baseline is None else 0.9 * baseline + 0.1 * batch_mean
    return [r - new for r in rewards], new

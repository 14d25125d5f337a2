"""The sampler-vs-trainer mismatch of one RL step, from the forward_backward the step already runs (no extra pass).

Each RL datum carries the sampler's logprob of every target token (``loss_fn_inputs["logprobs"]``: the behaviour
logprobs; 0 at prompt and observation positions) and the forward_backward answers the trainer's logprob of the same
tokens (``loss_fn_outputs[i]["logprobs"]``). On the tokens the policy sampled (the segment's ``sampled[1:]`` mask,
cookbook/data.py ``rl_datum``), with diff = sampler - trainer and ratio = exp(trainer - sampler):

* ``optim/kl_sample_train_v1`` = mean(diff), ``optim/kl_sample_train_v2`` = 0.5 * mean(diff ** 2) and
  ``optim/entropy`` = -mean(sampler logprob): tinker-cookbook's names and definitions
  (tinker_cookbook/rl/metrics.py ``compute_kl_sample_train``);
* ``mismatch/abs_diff_mean``, ``mismatch/abs_diff_p99`` (numpy's linear percentile), ``mismatch/abs_diff_max``:
  |diff|; ``mismatch/ratio_abs_dev_mean``: mean |ratio - 1|; ``mismatch/tokens``: how many tokens they cover;
  ``mismatch/staleness``: optimizer steps (RL steps) between the weights that sampled the batch and those the
  trainer scored it with, 0 in the synchronous loop; with --max-steps-off-policy > 0 a batch may be sampled by
  older weights and the figures then include that policy lag, not only numerics.

In the synchronous loop the trainer scores the batch with the very weights that sampled it, so the figures are the
numerical mismatch alone (kernels, batching, precision): on the CPU float32 path they are ~1e-6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

KL_KEYS = ("optim/kl_sample_train_v1", "optim/kl_sample_train_v2", "optim/entropy")
MISMATCH_KEYS = ("mismatch/abs_diff_mean", "mismatch/abs_diff_p99", "mismatch/abs_diff_max",
                 "mismatch/ratio_abs_dev_mean", "mismatch/tokens", "mismatch/staleness")
KEYS = KL_KEYS + MISMATCH_KEYS


def _array(x: Any) -> np.ndarray:
    """A TensorData (``to_numpy``) or anything array-like, as a flat float64 array."""
    return np.asarray(x.to_numpy() if hasattr(x, "to_numpy") else x, dtype=np.float64).reshape(-1)


def mismatch_stats(datums: Sequence[Any], outputs: Sequence[Mapping[str, Any]], masks: Sequence[Any],
                   staleness: int = 0) -> dict[str, float]:
    """The step's mismatch figures (module docstring) over the sampled tokens of ``datums``, whose trainer logprobs
    are ``outputs`` (the forward_backward's ``loss_fn_outputs``, in the same order) and whose sampled positions are
    ``masks`` (nonzero: sampled by the policy). {} when no token was sampled."""
    if not len(datums) == len(outputs) == len(masks):
        raise ValueError(f"{len(datums)} datums, {len(outputs)} outputs and {len(masks)} masks: one each")
    diffs: list[np.ndarray] = []
    sampled: list[np.ndarray] = []
    for i, (d, out, m) in enumerate(zip(datums, outputs, masks)):
        q, lp, keep = _array(d.loss_fn_inputs["logprobs"]), _array(out["logprobs"]), _array(m) > 0
        if not q.shape == lp.shape == keep.shape:
            raise ValueError(f"datum {i}: sampler logprobs {q.shape}, trainer logprobs {lp.shape}, mask {keep.shape}")
        diffs.append(q[keep] - lp[keep])
        sampled.append(q[keep])
    diff = np.concatenate(diffs) if diffs else np.zeros(0)
    if diff.size == 0:
        return {}
    absd = np.abs(diff)
    return {"optim/kl_sample_train_v1": float(diff.mean()),
            "optim/kl_sample_train_v2": float(0.5 * (diff ** 2).mean()),
            "optim/entropy": float(-np.concatenate(sampled).mean()),
            "mismatch/abs_diff_mean": float(absd.mean()),
            "mismatch/abs_diff_p99": float(np.percentile(absd, 99)),
            "mismatch/abs_diff_max": float(absd.max()),
            "mismatch/ratio_abs_dev_mean": float(np.abs(np.expm1(-diff)).mean()),
            "mismatch/tokens": int(diff.size),
            "mismatch/staleness": int(staleness)}

"""ppo and ppo-kl: advantages = reward - a running-mean baseline (or the return itself without a preset, as the seed),
the server's clipped ppo loss over several minibatch epochs (a token mean); ppo-kl adds a k3 KL penalty against a
frozen reference on every sampled token."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tinker import types

from ..config import RLConfig, flag
from ..data import scaled_advantages
from ..mismatch import mismatch_stats
from ..recorder import RunRecorder
from ..rl_loop import adam
from .base import training
from .rl import RLRecipe

log = logging.getLogger("cookbook.train")


@dataclass
class PpoConfig(RLConfig):
    """ppo: advantages = reward - a running-mean baseline; the server's clipped ppo loss over several
    minibatch epochs, token-mean."""

    MODE: ClassVar[str] = "ppo"
    ADVANTAGES: ClassVar[str] = "baseline"
    ppo_epochs: int = flag("epochs over each batch (default 2; 1 without a preset)", 2)
    minibatches: int = flag("minibatches per epoch (default 2; 1 without a preset)", 2)
    baseline: str = flag("advantage = return - a running mean of batch rewards (running-mean; with a preset), or "
                         "the return itself (none; without a preset, as the seed: every sampled transition trains)",
                         "running-mean", choices=["running-mean", "none"])
    clip_low: float | None = flag("lower clip of the importance ratio, sent as the ppo loss config", 0.8)
    clip_high: float | None = flag("upper clip of the importance ratio, sent as the ppo loss config", 1.2)

    @property
    def loss_name(self) -> str:
        return "ppo"

    @property
    def kl_penalty(self) -> bool:
        return False

    @property
    def trains_every_trajectory(self) -> bool:
        # ppo-kl: its KL penalty covers every sampled token; ppo without a baseline: the seed's one episode, one
        # update on its return, whatever the return
        return self.kl_penalty or self.baseline == "none"


@dataclass
class PpoKlConfig(PpoConfig):
    """ppo-kl: ppo plus a k3 KL penalty against a frozen reference on every sampled token."""

    MODE: ClassVar[str] = "ppo-kl"
    kl_beta: float = flag("KL penalty coefficient (default 0.05)", 0.05)
    kl_reference: str = flag("the frozen policy the KL penalty pulls towards: init = the run's starting policy (its "
                             "warm start; default), base = the untrained base model, or a tinker:// checkpoint",
                             "init", metavar="init|base|tinker://...")

    @property
    def kl_penalty(self) -> bool:
        return True


async def kl_reference(cfg: PpoKlConfig, sc, tc, base_model: str, init: str, run_dir: Path) -> dict[str, str]:
    """create_sampling_client arguments for --kl-reference: init = the run's starting policy (the warm
    start's checkpoint, or the fresh adapter saved before the first update), base, or a tinker:// path."""
    if cfg.kl_reference == "base":
        return {"base_model": base_model}
    if cfg.kl_reference.startswith("tinker://"):
        return {"model_path": cfg.kl_reference}
    if cfg.kl_reference != "init":
        raise SystemExit(f"--kl-reference must be init, base or a tinker:// path, not {cfg.kl_reference!r}")
    if init != "none":
        return {"model_path": init}
    return {"model_path": (await tc.save_weights_for_sampler(f"{cfg.MODE}-{run_dir.name}-start")).path}


async def ppo_update(cfg: PpoConfig, tc, datums, masks, reference, rng: random.Random, lr: float,
                     staleness: int = 0) -> dict:
    """Clipped PPO over several minibatch epochs: the server's ppo loss with the config's clip values
    as its loss config and the advantages scaled by 1 / the minibatch's sampled tokens (a token mean).
    ppo-kl adds --kl-beta times a k3 KL estimate against the frozen reference (its logprobs from
    compute_logprobs) on every sampled token (``masks``) through forward_backward_custom, whose gradient
    adds to the ppo loss's before the optimizer step; the KL is reported per token (also at beta 0).
    ``mismatch``: the sampler/trainer figures of the first epoch's first minibatch, the only forward_backward
    at the sampling weights (every later one follows an optimizer step)."""
    import torch  # noqa: PLC0415 (ppo/ppo-kl only: the Python 3.13 control venv of .ci/py313 has no torch)

    beta = cfg.kl_beta if isinstance(cfg, PpoKlConfig) else 0.0
    ref_lps: list[torch.Tensor | None] = [None] * len(datums)
    t_ref = time.time()
    if reference is not None:
        async def ref_of(d):
            toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].to_numpy()[-1])]
            lps = await reference.compute_logprobs(types.ModelInput.from_ints(toks))
            return torch.tensor([0.0 if x is None else x for x in lps[1:]], dtype=torch.float32)

        ref_lps = list(await asyncio.gather(*(ref_of(d) for d in datums)))
    ref_elapsed = time.time() - t_ref if reference is not None else 0.0
    lo, hi = cfg.clip_low, cfg.clip_high
    assert lo is not None and hi is not None, "ppo needs both clip thresholds"
    idx = list(range(len(datums)))
    fb_metrics: dict[str, float] = {}
    opt_metrics: dict[str, float] = {}
    kls: list[float] = []
    clipfracs: list[float] = []
    mismatch: dict[str, float] | None = None
    for _ in range(cfg.ppo_epochs):
        rng.shuffle(idx)
        for mb in np.array_split(np.array(idx), max(1, min(cfg.minibatches, len(idx)))):
            mb_masks = [torch.tensor(masks[i]) for i in mb]
            ntok = max(int(sum(m.sum() for m in mb_masks)), 1)
            f = tc.forward_backward([scaled_advantages(datums[i], 1.0 / ntok) for i in mb], "ppo", cfg.loss_config())
            refs = [ref_lps[i] for i in mb]
            if beta > 0:
                def kl_loss(data, logprobs_list, refs=refs, mb_masks=mb_masks, ntok=ntok):
                    total = torch.zeros(())
                    for lp, rl, mask in zip(logprobs_list, refs, mb_masks):
                        diff = rl - lp
                        total = total + ((torch.exp(diff) - 1 - diff) * mask).sum()
                    return beta * total / ntok, {}

                kf = tc.forward_backward_custom([datums[i] for i in mb], kl_loss)
            o = tc.optim_step(adam(lr))
            fb = await f
            if beta > 0:
                await kf
            log.info("forward_backward done: %s", json.dumps(fb.metrics))
            opt = await o
            log.info("optim_step done: %s", json.dumps(opt.metrics or {}))
            fb_metrics = fb.metrics
            opt_metrics = opt.metrics or {}
            if mismatch is None:   # the first forward_backward: still at the weights that sampled the batch
                mismatch = mismatch_stats([datums[i] for i in mb], fb.loss_fn_outputs, [masks[i] for i in mb],
                                          staleness)
            kl_sum = clip_n = 0.0
            for i, out, rl, mask in zip(mb, fb.loss_fn_outputs, refs, mb_masks):
                lp = torch.tensor(out["logprobs"].to_numpy())
                r = torch.exp(lp - torch.tensor(datums[i].loss_fn_inputs["logprobs"].to_numpy()))
                clip_n += float((((r < lo) | (r > hi)).float() * mask).sum())
                if rl is not None:
                    diff = rl - lp
                    kl_sum += float(((torch.exp(diff) - 1 - diff) * mask).sum())
            kls.append(kl_sum / ntok)
            clipfracs.append(clip_n / ntok)
    return {"fwdbwd_metrics": fb_metrics, "optim_metrics": opt_metrics, "ref_logprobs_elapsed": ref_elapsed,
            "kl_per_token": float(np.mean(kls)) if kls else 0.0,
            "kl_beta": beta, "clipfrac": float(np.mean(clipfracs)) if clipfracs else 0.0, "ppo_epochs": cfg.ppo_epochs,
            "mismatch": mismatch or {}}


class PpoRecipe(RLRecipe):
    """ppo: the RL loop with ``ppo_update``; ppo-kl also the frozen reference its penalty pulls towards."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.reference = None

    async def setup(self, sc, base_model: str, init: str, rec: RunRecorder) -> None:
        await super().setup(sc, base_model, init, rec)
        cfg = self.cfg
        if isinstance(cfg, PpoKlConfig):
            if "kl_reference" not in rec.state:
                rec.state["kl_reference"] = await kl_reference(cfg, sc, self.tc, base_model, init, self.run_dir)
            rec.result["kl_reference"] = rec.state["kl_reference"]
            log.info("ppo-kl: KL penalty against %s", rec.state["kl_reference"])
            self.reference = await sc.create_sampling_client(**rec.state["kl_reference"])

    async def update(self, cfg: RLConfig, tc, datums, masks, rng, lr: float, staleness: int) -> dict:
        assert isinstance(cfg, PpoConfig)
        return await ppo_update(cfg, tc, datums, masks, self.reference, rng, lr, staleness)

    async def finish(self, result: dict[str, Any]) -> None:
        """The seed's result.json fields of ppo / ppo-kl: the last step's episode and update (and trajectory.txt)."""
        await super().finish(result)
        steps = result.get("steps") or []
        if not steps:
            return
        last = steps[-1]
        sd = self.run_dir / f"step_{last['step']:03d}"
        first = sd / "rollout_00.json"
        summ = json.loads(first.read_text()) if first.exists() else {}
        if self.rec is not None:
            self.rec.copy_trajectory_txt(sd / "rollout_00.txt")
        result.update({"task_name": last.get("task_name"), "reward": summ.get("reward"),
                       "turns_used": summ.get("turns_used"), "rollout_elapsed": last.get("rollout_elapsed"),
                       "train_elapsed": last.get("train_elapsed"), "train_transitions": last.get("train_transitions"),
                       "train_tokens": last.get("train_tokens"),
                       "train_total_transitions": sum(s.get("train_transitions", 0) for s in steps),
                       "train_total_tokens": sum(s.get("train_tokens", 0) for s in steps),
                       "fwdbwd_metrics": last.get("fwdbwd_metrics", {}), "optim_metrics": last.get("optim_metrics", {}),
                       "published_sampling_client": last.get("published_sampling_client"),
                       "train_skipped": bool(last.get("train_skipped", False))})
        if isinstance(self.cfg, PpoKlConfig):
            result["ref_logprobs_elapsed"] = last.get("ref_logprobs_elapsed", 0.0)


SPEC = training(PpoConfig, PpoRecipe,
                "clipped PPO (without a preset: one rollout, one update on its return, as the seed)")
KL_SPEC = training(PpoKlConfig, PpoRecipe, "PPO plus a k3 KL penalty against the frozen reference")

"""The RL recipes' shared part: ``RLRecipe`` runs the RL loop (cookbook/rl_loop.py: synchronous, or off-policy with
--max-steps-off-policy K > 0) with the recipe's update, evaluates on --eval-split every --eval-every steps, and writes
the seed's result.json fields. grpo uses it as is; ppo / ppo-kl (cookbook/recipes/ppo.py) override the update."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, ClassVar

from ..config import RLConfig
from ..evaluation import EvalResult, evaluate_sampler, record
from ..recorder import RunRecorder
from ..rl_loop import (
    OffPolicySampler,
    RLState,
    Update,
    off_policy_step,
    publish_weights,
    rl_step,
    sampler_version,
    single_update,
)

log = logging.getLogger("cookbook.train")


class RLRecipe:
    """An RL recipe over the one loop: the update is ``single_update`` (one forward_backward with the config's loss,
    one optimizer step); subclasses override ``update`` (and ``setup`` / ``finish`` for what they add)."""

    WARM_START: ClassVar[str] = "consume"

    @classmethod
    def heldout_split(cls, cfg: RLConfig) -> str | None:
        return cfg.eval_split if cfg.eval_every else None

    def __init__(self, cfg: RLConfig, ctx, tc, eos: int, run_dir: Path, shared: dict[str, Any]):
        self.cfg, self.ctx, self.tc, self.eos, self.run_dir = cfg, ctx, tc, eos, run_dir
        self.rl = RLState.from_json(shared)
        self.sampler: OffPolicySampler | None = None
        self.heldout: list = []
        self.result: dict[str, Any] = {}
        self.rec: RunRecorder | None = None

    async def setup(self, sc, base_model: str, init: str, rec: RunRecorder) -> None:
        self.result, self.rec = rec.result, rec
        if self.cfg.eval_every:
            self.heldout = self.ctx.heldout   # loaded and prepared with the run's context
            if rec.state["step"] == 0:
                await self.evaluate(0, await self.tc.save_weights_and_get_sampling_client())
        if self.cfg.max_steps_off_policy > 0:
            start = rec.state["step"]
            older = {v: await self.tc.create_sampling_client(p) for v, p in self.rl.sampler_paths.items()
                     if sampler_version(self.cfg, start) <= v < start}
            if older:
                log.info("resume: the first batches sample with the saved weights of versions %s", sorted(older))
            self.sampler = OffPolicySampler(self.cfg, self.ctx, self.eos, start,
                                            await publish_weights(self.cfg, self.tc, self.run_dir, self.rl, start),
                                            start, older)

    # The update of one batch (rl_loop.Update): one forward_backward with the config's loss and one optimizer step.
    # A subclass overrides it with a method of the same arguments (cfg, tc, datums, masks, rng, lr, staleness).
    update: Update = staticmethod(single_update)

    async def step(self, step: int) -> dict:
        if self.sampler is None:
            rec = await rl_step(self.cfg, self.ctx, self.tc, step, self.run_dir, self.rl, self.eos, self.update)
        else:
            rec = await off_policy_step(self.cfg, self.ctx, self.tc, step, self.run_dir, self.rl, self.sampler,
                                        self.update)
        every = self.cfg.eval_every
        if every and ((step + 1) % every == 0 or step + 1 == self.cfg.train.num_steps):
            t0 = time.time()
            sampler = (self.sampler.newest[0] if self.sampler is not None
                       else await self.tc.save_weights_and_get_sampling_client())
            rec["heldout_pass_rate"] = (await self.evaluate(step + 1, sampler)).pass_rate
            rec["eval_s"] = time.time() - t0
        return rec

    async def evaluate(self, step: int, sampler) -> EvalResult:
        """--eval-every: the weights after ``step`` updates on --eval-split, into result.json 'heldout'."""
        res = await evaluate_sampler(self.ctx.rollouts, self.heldout, sampler, [self.eos],
                                     temperature=self.cfg.common.temperature,
                                     samples_per_task=self.cfg.eval_samples, seed=self.cfg.common.seed)
        record(self.result, step, res, self.cfg.eval_split)
        log.info("%s after %d steps: pass rate %.3f (%d attempts)", self.cfg.eval_split, step, res.pass_rate, res.n)
        return res

    def state(self) -> dict[str, Any]:
        return self.rl.to_json()

    async def finish(self, result: dict[str, Any]) -> None:
        """result.json's fields under the seed's names (docs/seed-mapping.md), beside ours: the run's shape."""
        cfg = self.cfg
        result.update({"num_steps": cfg.train.num_steps, "group_size": cfg.group_size,
                       "rollout_concurrency": cfg.common.rollout_concurrency,
                       "temperature": cfg.common.temperature, "kl_beta": getattr(cfg, "kl_beta", 0.0)})

    async def aclose(self) -> None:
        if self.sampler is not None:
            await self.sampler.aclose()

"""Training on the official tinker SDK: the driver every training recipe shares.

``run(cfg, run_dir, recipe)`` builds the run (tasks, sandboxes, the training client: resume > --init-from > the
latest sft of this configuration > fresh), then calls the recipe once per step, saves checkpoints and records every
step through ``RunRecorder`` (cookbook/recorder.py: step_result.json, metrics.jsonl, result.json, state.json, the
reward curve and viewer). The recipes (cookbook/recipes/: sft, grpo, ppo, ppo-kl) implement ``recipes.base.Recipe``:
``setup()``, ``step(step) -> record``, ``state() -> dict`` (its part of state.json, ``shared``), ``finish(result)``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import tinker
from tqdm import tqdm

from services.common.paths import RUNS_DIR
from services.common.renderers.qwen3 import eos_id

from .config import flat
from .context import context_of
from .recorder import RunRecorder, write_task_manifest
from .runs import endpoints
from .tasks import task_manifest

log = logging.getLogger("cookbook.train")


def config_key(model: str, cfg: Any) -> str:
    """Identifies 'the same configuration' for sft -> grpo warm starts: model, dataset, preset, LoRA rank and the agent
    (a black-box harness's SFT learns another format: `grpo --preset quickstart` must not start from
    `sft --preset quickstart --agent mini-swe-agent`). The built-in agent keeps the key it always had."""
    c = cfg.common
    parts: list = [model, c.dataset, c.preset, cfg.train.lora_rank]
    agent = getattr(cfg, "agent", "builtin")
    if agent != "builtin":
        parts.append(agent)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def latest_sft_path(key: str) -> Path:
    return RUNS_DIR / f".latest-sft-{key}.json"


# ------------------------------------------------------------------------------ entry
def run(cfg: Any, run_dir: Path, recipe: type) -> int:
    """The whole training run of ``cfg`` (a recipe's config: its ``common`` and ``train`` parts) with ``recipe`` (a
    ``recipes.base.Recipe`` class)."""
    return asyncio.run(_run(cfg, run_dir, recipe))


async def _run(cfg: Any, run_dir: Path, recipe_cls: type) -> int:
    c, t = cfg.common, cfg.train
    ep = endpoints(need_sandbox=c.sandbox == "manager")
    ctx = await context_of(ep, c, training=True, reward_cache=t.reward_cache, agent=getattr(cfg, "agent", "builtin"),
                           heldout_split=recipe_cls.heldout_split(cfg))
    tasks = ctx.tasks
    sc = tinker.ServiceClient(base_url=ep.backend_url, api_key=ep.api_key)
    name = c.name or cfg.MODE
    rec = RunRecorder(run_dir, name, cfg.MODE, ep.model, flat(cfg))
    write_task_manifest(rec.res_dir, task_manifest(tasks, c.dataset, c.split, c.task_id, c.seed))
    state = rec.state
    key = config_key(ep.model, cfg)
    if state.get("checkpoint"):
        log.info("resuming from %s (step %d)", state["checkpoint"], state["step"])
        tc = await sc.create_training_client_from_state_with_optimizer(state["checkpoint"])
        init = state.get("init", "none")
    else:  # a fresh run, or one killed before its first checkpoint: (again) from the same initial weights
        init = state.get("init") if rec.resuming else t.init_from
        if init is None and recipe_cls.WARM_START == "consume" and c.preset and latest_sft_path(key).exists():
            # only the presets chain sft -> RL implicitly (run.sh quickstart); said on the console too
            init = json.loads(latest_sft_path(key).read_text())["path"]
            log.info("warm start from the latest sft checkpoint of this configuration: %s", init)
            print(f"{cfg.MODE}: warm start from the latest sft of --preset {c.preset} (same dataset, model and LoRA "
                  f"rank): {init}; --init-from none starts from the base model", flush=True)
        if init and init != "none":
            tc = await sc.create_training_client_from_state_with_optimizer(init)
        else:
            init = "none"
            tc = await sc.create_lora_training_client(base_model=ep.model, rank=t.lora_rank, seed=c.seed)
        rec.state = state = {"step": 0, "rng": None, "checkpoint": None, "init": init,
                             **{k: state[k] for k in ("kl_reference",) if k in state}}
    if init != "none":
        rec.result["init_from"] = init
    if state.get("rng") is not None:
        ctx.rng.setstate(_rng_from_json(state["rng"]))
    recipe = recipe_cls(cfg, ctx, tc, eos_id(ctx.tokenizer), run_dir, state.get("shared", {}))
    await recipe.setup(sc, ep.model, init, rec)
    if not rec.resuming:
        rec.save_state()  # the initial weights and the reference, for a run killed before its first checkpoint
    bar = tqdm(total=t.num_steps, initial=state["step"], desc=cfg.MODE, unit="step")
    rec.open_loggers(t.log_to)
    try:
        for step in range(state["step"], t.num_steps):
            t0 = time.time()
            r = await recipe.step(step)
            r["step"] = step
            r["step_idx"] = step   # the seed's name
            r["time_s"] = time.time() - t0
            rec.log_step(r)
            log.info("step %d: %s", step, json.dumps({k: v for k, v in r.items() if isinstance(v, (int, float))}))
            bar.update(1)
            bar.set_postfix_str(", ".join(f"{k}={r[k]:.3f}" for k in ("mean_reward", "loss_per_token", "pass_rate")
                                          if isinstance(r.get(k), float)))
            stop = r.get("gate_reached", False)
            saved = (step + 1) % t.save_every == 0 or step + 1 == t.num_steps or stop
            if saved:
                path = (await tc.save_state(f"{cfg.MODE}-{run_dir.name}-step{step + 1:04d}")).path
                rec.checkpoint(step + 1, path, rng=_rng_to_json(ctx.rng.getstate()), shared=recipe.state())
            rec.commit(saved)
            if stop:   # the recipe's gate (sft's pass rate) was reached
                break
    finally:
        bar.close()
        rec.close()
        await recipe.aclose()
        await ctx.rollouts.aclose()
    final = state.get("checkpoint")
    if t.save_state:
        final = (await tc.save_state(t.save_state, overwrite=True)).path
        rec.write_checkpoint_json(t.save_state, final)
    await recipe.finish(rec.result)
    if recipe_cls.WARM_START == "publish" and final:   # outside the run directory: runs/.latest-sft-<key>.json
        latest_sft_path(key).write_text(json.dumps({"path": final, "run_dir": str(run_dir)}))
    rec.result["final_checkpoint"] = final
    rec.write_result()
    print(f"{cfg.MODE}: {len(rec.result['steps'])} steps; final checkpoint {final}; results in {rec.res_dir}")
    return 0


def _rng_to_json(st):
    return [st[0], list(st[1]), st[2]]


def _rng_from_json(j):
    return (j[0], tuple(j[1]), j[2])

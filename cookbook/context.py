"""A run's context, built once by the CLI's mode (cookbook/cli.py rollout, cookbook/train.py): the tasks' sandbox
bases, the tokenizer, the agent's config and the ``Rollouts`` that run it in sandboxes. The data flows one
way from here: recipe -> loop -> rollout -> agent."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from services.common.config import load_config
from services.tasks.task import Task

from .config import Common
from .modelservice.agent_runner import MiniSweAgent
from .modelservice.rock_pull import RockPullMiniSweAgent
from .presets import PRESETS
from .rollout import AgentConfig, Rollouts, agent_config, budget_flags
from .runs import Endpoints
from .sandboxes import sandbox_factory
from .tasks import load_tasks, prepare_bases


@dataclass
class RunContext:
    ep: Endpoints
    tasks: list[Task]
    bases: dict[str, Path]
    tokenizer: Any
    rollouts: Rollouts
    agent_cfg: AgentConfig
    rng: random.Random
    heldout: list[Task] = field(default_factory=list)   # --eval-every's tasks (their bases are in ``bases`` too)


async def context_of(ep: Endpoints, c: Common, *, training: bool, reward_cache: bool = False,
                     agent: str = "builtin", heldout_split: str | None = None) -> RunContext:
    """The context of a run's ``Common`` config, built once: its tasks (a preset trains on its first
    ``max_tasks`` unless --task-id), their and the held-out tasks' bases, the agent's config (harbor.yaml <
    preset < --max-turns/--max-tokens), the sandboxes and the ``Rollouts``."""
    tasks = load_tasks(c.dataset, c.split, c.task_id)
    if training and c.preset and not c.task_id and PRESETS[c.preset].max_tasks:
        tasks = tasks[: PRESETS[c.preset].max_tasks]
    heldout = load_tasks(c.dataset, heldout_split) if heldout_split else []
    return await make_context(ep, tasks, c.sandbox, c.preset, c.rollout_concurrency, c.seed, reward_cache,
                              agent=agent, budgets=budget_flags(c.max_turns, c.max_tokens), heldout=heldout,
                              agent_network=c.agent_network)


async def make_context(ep: Endpoints, tasks: list[Task], sandbox: str, preset: str | None, concurrency: int, seed: int,
                       reward_cache: bool = False, agent: str = "builtin",
                       budgets: dict[str, Any] | None = None, heldout: list[Task] | None = None,
                       agent_network: str = "none") -> RunContext:
    """``agent``: builtin (cookbook.agent.SWEAgent) or mini-swe-agent (unmodified, in the sandbox, through
    the in-process ModelService: cookbook/modelservice/agent_runner.py)."""
    tok = AutoTokenizer.from_pretrained(ep.tokenizer_path)
    bases = await prepare_bases([*tasks, *(heldout or [])], ep.sandbox_backend if sandbox == "manager" else "local")
    acfg = agent_config(preset, budgets)
    grading = (load_config("harbor").get("grading") or {}).get("mode", "clean")  # docs/tasks.md "Grading"
    black_box = None
    if agent == "mini-swe-agent":
        if sandbox != "manager":
            raise SystemExit("--agent mini-swe-agent needs --sandbox manager (its model calls reach the ModelService "
                             "through a socket bound into the sandbox)")
        if ep.sandbox_flavor == "rock":   # no binds into ROCK sandboxes: ROCK's ModelService pull pattern
            black_box = RockPullMiniSweAgent(tok, acfg.budgets)
        else:
            black_box = MiniSweAgent.create(tok, acfg.budgets)
    elif agent != "builtin":
        raise SystemExit(f"unknown agent {agent!r} (builtin | mini-swe-agent)")
    ro = Rollouts(sandbox_factory(ep, sandbox), bases, tok, acfg, concurrency=concurrency, reward_cache=reward_cache,
                  grading=grading, black_box=black_box, agent_network=agent_network)
    return RunContext(ep, tasks, bases, tok, ro, acfg, random.Random(seed), list(heldout or []))

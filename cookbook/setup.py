"""Shared set-up of a run: tasks, their sandbox bases, the sandbox factory, the tokenizer."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.config import load_config
from services.common.paths import DATASETS_DIR, REPO_ROOT
from services.tasks.task import Task, load_dataset

from .agent.scripted import gold_turns, tool_call_text
from .rollout import AgentConfig, Rollouts
from .runs import Endpoints

log = logging.getLogger("cookbook")
PREP_DIR = REPO_ROOT / "sandbox-preparation"
# What the tiny embedded model can learn on 2 CPU cores in minutes (measured; docs/recipes.md):
# fix-by-edit without reading (the fix is memorised per task), on 8 training tasks, in one turn
# with one edit call (the verifier scores the workspace when the turn budget ends). Later turns and
# a submit call only added tokens whose slips cannot change the reward: sampling time and noise.
QUICKSTART = {"tools": ["edit"], "system_prompt": "Fix the bug: edit the wrong line.",
              "max_tasks": 8, "max_turns": 1, "max_output_tokens": 56}


def load_tasks(dataset: str, split: str | None, task_ids: list[str] | None = None) -> list[Task]:
    path = Path(dataset)
    if not path.exists():
        path = DATASETS_DIR / dataset
    if not path.exists():
        raise SystemExit(f"dataset {dataset!r} not found (a folder of Harbor tasks, a manifest, or one of "
                         f"{sorted(p.name for p in DATASETS_DIR.iterdir() if p.is_dir())})")
    ds = load_dataset(path)
    tasks = ds.split(split) if split else ds.tasks
    if task_ids:
        want = set(task_ids)
        tasks = [t for t in ds.tasks if t.name in want or t.name.split("/")[-1] in want or t.slug in want]
        missing = want - {t.name for t in tasks} - {t.name.split("/")[-1] for t in tasks} - {t.slug for t in tasks}
        if missing:
            raise SystemExit(f"unknown task id(s) {sorted(missing)} in {path}")
    if not tasks:
        raise SystemExit(f"no tasks selected from {path} (split {split!r})")
    return tasks


async def prepare_bases(tasks: list[Task]) -> dict[str, Path]:
    """Scrubbed single-commit bases (the sandboxes' lower layers); idempotent and quick."""
    from services.tasks.prepare import prepare_tasks

    manifest = await prepare_tasks(tasks, PREP_DIR, validate=False, progress=False, log=lambda s: log.info(s))
    out = {}
    for t in tasks:
        e = manifest["tasks"].get(t.slug) or manifest["tasks"].get(t.name) or {}
        if e.get("excluded"):
            raise SystemExit(f"task {t.name} cannot be prepared: {e.get('reason')}")
        out[t.name] = Path(e["base"]["dir"])
    return out


def sandbox_factory(ep: Endpoints, kind: str):
    """``manager`` (isolated sandboxes from the sandbox manager) or ``host`` (dev only, NO isolation)."""
    if kind == "host":
        from services.tasks.hostsandbox import HostSandbox

        async def host(base: Path):
            return await HostSandbox.create(base_dir=base)
        return host
    from services.sandbox.client import SandboxManagerClient

    clients: dict[Any, SandboxManagerClient] = {}

    async def manager(base: Path):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = SandboxManagerClient(ep.sandbox_url, ep.sandbox_key, flavor=ep.sandbox_flavor)
        return await clients[loop].create(base_dir=str(base))
    return manager


def agent_config(preset: str | None = None) -> AgentConfig:
    cfg = dict(load_config("harbor").get("agent") or {})
    if preset == "quickstart":  # the embedded default: two tools, short schemas, short budgets (docs/recipes.md)
        cfg = {**cfg, "tools": QUICKSTART["tools"], "compact_schemas": True, "system_prompt": QUICKSTART["system_prompt"],
               "budgets": {**(cfg.get("budgets") or {}), "max_turns": QUICKSTART["max_turns"],
                           "max_output_tokens": QUICKSTART["max_output_tokens"]}}
    return AgentConfig.from_config(cfg)


def gold_turns_for(task: Task, tools: list[str] | None = None, max_turns: int | None = None) -> list[str]:
    """The gold trajectory as tool calls: solution/edit.json (micro tasks) or the gold patch's
    hunks as str-replace edits; read each file first (when ``tools`` has read), then submit (when
    it has submit). One call per assistant turn, or all calls in one message when the agent has
    fewer turns."""
    turns = _gold_calls(task, tools)
    if max_turns is not None and len(turns) > max_turns:
        return ["\n".join(turns)]
    return turns


def _gold_calls(task: Task, tools: list[str] | None) -> list[str]:
    read, submit = (tools is None or name in tools for name in ("read", "submit"))
    edit_json = task.solution_dir / "edit.json"
    if edit_json.exists():
        return gold_turns(json.loads(edit_json.read_text()), read=read, submit=submit)
    patch = next((p for p in (task.solution_dir / "patch.diff", task.solution_dir / "gold.patch") if p.exists()), None)
    if patch is None:
        raise ValueError(f"{task.name}: no solution/edit.json or patch to build a gold trajectory from")
    turns: list[str] = []
    for path, old, new in _hunks(patch.read_text()):
        if read and tool_call_text("read", {"path": path}) not in turns:
            turns.append(tool_call_text("read", {"path": path}))
        turns.append(tool_call_text("edit", {"path": path, "old_str": old, "new_str": new}))
    return turns + ([tool_call_text("submit", {})] if submit else [])


def _hunks(diff: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    path = None
    old: list[str] = []
    new: list[str] = []

    def flush():
        if path and (old or new):
            out.append((path, "\n".join(old), "\n".join(new)))

    for line in diff.splitlines():
        if line.startswith("+++ "):
            flush()
            old, new = [], []
            path = line[4:].strip().removeprefix("b/")
        elif line.startswith("@@"):
            flush()
            old, new = [], []
        elif path and line.startswith(" "):
            old.append(line[1:])
            new.append(line[1:])
        elif path and line.startswith("-") and not line.startswith("---"):
            old.append(line[1:])
        elif path and line.startswith("+"):
            new.append(line[1:])
    flush()
    return out


@dataclass
class RunContext:
    ep: Endpoints
    tasks: list[Task]
    bases: dict[str, Path]
    tokenizer: Any
    rollouts: Rollouts
    agent_cfg: AgentConfig
    rng: random.Random


async def make_context(ep: Endpoints, tasks: list[Task], sandbox: str, preset: str | None, concurrency: int, seed: int,
                       reward_cache: bool = False) -> RunContext:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ep.tokenizer_path)
    bases = await prepare_bases(tasks)
    acfg = agent_config(preset)
    grading = (load_config("harbor").get("grading") or {}).get("mode", "clean")  # docs/tasks.md "Grading"
    ro = Rollouts(sandbox_factory(ep, sandbox), bases, tok, acfg, concurrency=concurrency, reward_cache=reward_cache,
                  grading=grading)
    return RunContext(ep, tasks, bases, tok, ro, acfg, random.Random(seed))

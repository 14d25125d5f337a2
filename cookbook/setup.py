"""Shared set-up of a run: tasks, their sandbox bases, the sandbox factory, the tokenizer."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer
from unidiff import PatchSet

from services.common.config import load_config
from services.common.paths import DATASETS_DIR, REPO_ROOT
from services.sandbox.client import SandboxManagerClient
from services.tasks.hostsandbox import HostSandbox
from services.tasks.prepare import ImageRef, base_of, prepare_tasks
from services.tasks.task import Task, load_dataset

from .agent.chat_format import tool_call_text
from .agent.scripted import gold_turns
from .modelservice.agent_runner import MiniSweAgent
from .modelservice.rock_pull import RockPullMiniSweAgent
from .presets import PRESETS
from .rollout import AgentConfig, Rollouts
from .runs import Endpoints

log = logging.getLogger("cookbook")
PREP_DIR = REPO_ROOT / "sandbox-preparation"


def load_tasks(dataset: str, split: str | None, task_ids: list[str] | None = None) -> list[Task]:
    path = Path(dataset)
    if not path.exists():
        path = DATASETS_DIR / dataset
    if not path.exists():
        raise SystemExit(f"dataset {dataset!r} not found (a folder of Harbor tasks, a manifest, or one of "
                         f"{sorted(p.name for p in DATASETS_DIR.iterdir() if p.is_dir())})")
    ds = load_dataset(path)
    if split and not ds.splits:   # a plain folder of Harbor tasks has no splits: every task is in each
        log.warning("dataset %s has no splits; split %r = all %d tasks", path, split, len(ds.tasks))
        split = None
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


async def prepare_bases(tasks: list[Task], backend: str = "local") -> dict[str, Path]:
    """Scrubbed single-commit bases (the sandboxes' lower layers); idempotent and quick. With the
    docker backend, tasks whose repo lives in their image get their scrubbed image instead (an
    ``ImageRef``; services/sandbox/docker_images.py)."""
    manifest = await prepare_tasks(tasks, PREP_DIR, validate=False, progress=False, log=lambda s: log.info(s),
                                   backend=backend)
    out = {}
    for t in tasks:
        e = manifest["tasks"].get(t.slug) or manifest["tasks"].get(t.name) or {}
        if e.get("excluded"):
            raise SystemExit(f"task {t.name} cannot be prepared: {e.get('reason')}")
        out[t.name] = base_of(e)
    return out


def sandbox_factory(ep: Endpoints, kind: str):
    """``manager`` (isolated sandboxes from the sandbox manager) or ``host`` (dev only, NO isolation)."""
    if kind == "host":
        async def host(base: Path):
            if isinstance(base, ImageRef):
                raise SystemExit(f"image {base}: tasks whose repo lives in their image need the sandbox manager's "
                                 "docker backend (--sandbox manager --sandbox-backend docker)")
            return await HostSandbox.create(base_dir=base)
        return host
    clients: dict[Any, SandboxManagerClient] = {}
    rock = load_config("harbor").get("sandbox") or {}   # a ROCK admin: sandbox.image and default_limits

    async def manager(base: Path, binds: list[dict[str, str]] | None = None):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = SandboxManagerClient(ep.sandbox_url, ep.sandbox_key, flavor=ep.sandbox_flavor)
        if isinstance(base, ImageRef):   # docker backend: the task's scrubbed image
            return await clients[loop].create(image=str(base), limits=base.limits, binds=binds,
                                              network=base.network)
        if ep.sandbox_flavor == "rock":   # the base dir is uploaded into a container of sandbox.image
            return await clients[loop].create(base_dir=str(base), image=rock.get("image"),
                                              limits=rock.get("default_limits"), binds=binds)
        return await clients[loop].create(base_dir=str(base), binds=binds)
    return manager


def agent_config(preset: str | None = None) -> AgentConfig:
    """config/harbor.yaml ``agent:`` with the preset's agent over it (its budgets key by key)."""
    cfg = dict(load_config("harbor").get("agent") or {})
    if preset:
        over = PRESETS[preset].agent
        cfg = {**cfg, **over, "budgets": {**(cfg.get("budgets") or {}), **over.get("budgets", {})}}
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
    read, submit, bash = (tools is None or name in tools for name in ("read", "submit", "bash"))
    edit_json = task.solution_dir / "edit.json"
    if edit_json.exists():
        return gold_turns(json.loads(edit_json.read_text()), read=read, submit=submit)
    diff = gold_patch(task)
    turns: list[str] = []
    for path, old, new in _hunks(diff, lambda rel: _base_text(task, rel)):
        if old is None:   # a new file: only a shell can create it
            if not bash:
                raise ValueError(f"{task.name}: the gold patch creates {path}; its gold trajectory needs the bash tool")
            turns.append(tool_call_text("bash", {"command": f"mkdir -p \"$(dirname {shlex.quote(path)})\" && "
                                                 f"cat > {shlex.quote(path)} <<'LTS_EOF'\n{new}LTS_EOF"}))
            continue
        if read and tool_call_text("read", {"path": path}) not in turns:
            turns.append(tool_call_text("read", {"path": path}))
        turns.append(tool_call_text("edit", {"path": path, "old_str": old, "new_str": new}))
    return turns + ([tool_call_text("submit", {})] if submit else [])


_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n(.*?)^\1$", re.DOTALL | re.MULTILINE)


def gold_patch(task: Task) -> str:
    """The gold patch: solution/patch.diff or gold.patch, else the diff that solution/solve.sh writes
    from a here-document (SWE-bench tasks: ``cat > solution_patch.diff <<'EOF' ... EOF``)."""
    for name in ("patch.diff", "gold.patch"):
        if (task.solution_dir / name).exists():
            return (task.solution_dir / name).read_text()
    solve = task.solution_dir / "solve.sh"
    for m in _HEREDOC.finditer(solve.read_text() if solve.exists() else ""):
        if m.group(2).lstrip().startswith(("diff ", "--- ")):
            return m.group(2)
    raise ValueError(f"{task.name}: no solution/edit.json, patch.diff, gold.patch or patch in solve.sh "
                     "to build a gold trajectory from")


def _base_text(task: Task, rel: str) -> str | None:
    """A file of the task's base on the host (None when the repo only lives in the task's image)."""
    src = task.workspace_source()
    try:
        if "dir" in src:
            return (Path(src["dir"]) / rel).read_text()
        if "git" in src:
            r = subprocess.run(["git", "-C", str(src["git"]), "show", f"{src['commit']}:{rel}"], capture_output=True,
                               text=True)
            return r.stdout if r.returncode == 0 else None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _hunks(diff: str, base_text=lambda rel: None) -> list[tuple[str, str | None, str]]:
    """(path, old text, new text) per hunk of a unified diff (parsed by unidiff); old is None for a
    new file, whose new text is its whole content. A deleted or binary file has no such edit. Each
    edit keeps only as much of the hunk's context as makes old unique in the base file
    (``base_text(path)``; unknown: the changed lines plus an anchor for insertions)."""
    out: list[tuple[str, str | None, str]] = []
    for f in PatchSet(diff):
        if f.is_removed_file or f.is_binary_file:
            raise ValueError(f"the gold patch deletes or changes binary {f.path}: no edit call can replay that")
        if f.is_added_file:
            out.append((f.path, None, "".join(line.value for h in f for line in h if line.is_added)))
            continue
        text = base_text(f.path)
        for h in f:
            old = [line.value for line in h if line.is_context or line.is_removed]
            new = [line.value for line in h if line.is_context or line.is_added]
            o, n = _trim_context(old, new, text)
            out.append((f.path, "".join(o).removesuffix("\n"), "".join(n).removesuffix("\n")))
    return out


def _trim_context(old: list[str], new: list[str], text: str | None = None) -> tuple[list[str], list[str]]:
    """The hunk without the context lines around its change (a shorter edit call): one line of
    context stays as the anchor of a pure insertion, and context grows back, a line on each side at
    a time, until the old text occurs once in ``text`` (when known)."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[-1 - q] == new[-1 - q]:
        q += 1
    lo, hi = p, len(old) - q
    if lo == hi:   # nothing removed: anchor on the line before (else after) the insertion
        lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
    while text is not None and text.count("".join(old[lo:hi]).removesuffix("\n")) != 1 and (lo > 0 or hi < len(old)):
        lo, hi = max(0, lo - 1), min(len(old), hi + 1)
    return old[lo:hi], new[lo:len(new) - (len(old) - hi)]


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
                       reward_cache: bool = False, agent: str = "builtin", agent_network: str = "none") -> RunContext:
    """``agent``: builtin (cookbook.agent.SWEAgent) or mini-swe-agent (unmodified, in the sandbox, through
    the in-process ModelService: cookbook/modelservice/agent_runner.py)."""
    tok = AutoTokenizer.from_pretrained(ep.tokenizer_path)
    bases = await prepare_bases(tasks, ep.sandbox_backend if sandbox == "manager" else "local")
    acfg = agent_config(preset)
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
    return RunContext(ep, tasks, bases, tok, ro, acfg, random.Random(seed))

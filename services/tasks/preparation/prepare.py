"""Preparing tasks for the sandbox backend, validating them, and the preparation manifest.

``prepare_tasks`` builds each task's scrubbed base (the local backend's cached lower layer,
``<out>/bases/<task slug>/``), optionally validates it, and records everything in
``<out>/manifest.json``:

* ``source``: where the task and its workspace come from,
* ``files`` / ``task_hash``: sha256 of every task file (and of all of them together),
* ``base``: base dir, single commit id, tree id,
* ``validation``: gold reward (must be 1), empty reward (must be 0), history problems (must be
  none), ``patches``: the empty patch and a patch deleting the failing test graded in clean
  sandboxes (both must be 0; ``services.tasks.grading.cleangrade.validate_delete_test``), reasons, timings,
* ``excluded`` / ``reason``: tasks that failed to load, build or validate.

Re-runs are idempotent (the manifest is saved as each task finishes, so an interrupted run keeps what it did): a
task whose ``task_hash`` is unchanged, whose base still exists and
(with ``--validate``) that was already validated is skipped (``--force`` redoes it). With ``prune``,
entries of the same dataset that are no longer in it are dropped. A skipped docker task still gets its
upstream files exported again from its unscrubbed environment image when the mirror's raw store lost them
(``docker_images.ensure_upstream_files``), so ``grade`` on a cached image never misses them.

Validation uses any sandbox: ``factory(base) -> Sandbox`` (awaitable), where ``base`` is the base
directory, or an :class:`ImageRef` (the scrubbed task image) for tasks whose repo lives inside their
image (public Harbor layout, ``backend="docker"``: ``base`` in the manifest is then ``{"image",
"commit", "tree", "workdir", "env_image"}``; see services.sandbox.docker_images). The dev default is
``services.tasks.preparation.hostsandbox.host_sandbox_factory``; the sandbox manager's client plugs in here.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from services.common.sandbox_api import Sandbox
from services.sandbox.docker_images import (
    OFFLINE_LABEL,
    SCRUB_VERSION,
    docker_client,
    ensure_upstream_files,
    task_image,
)

from ..grading.bases import ImageRef, SandboxFactory
from ..grading.cleangrade import validate_delete_test
from ..grading.network import verifier_network, with_network
from ..grading.verifier import verify
from ..task import Task, TaskError, combined_hash
from ..task_toml import resolve_env
from .hostsandbox import host_sandbox_factory
from .manifest import load_manifest, save_manifest
from .workspace import build_base, changed_blobs, check_history


def base_of(entry: dict[str, Any]) -> Path | ImageRef:
    """What a sandbox factory gets for a manifest entry: the base dir or the task image."""
    base = entry["base"]
    return ImageRef(base["image"], base.get("commit"), base.get("limits")) if base.get("image") else Path(base["dir"])


@dataclass
class Validation:
    ok: bool
    gold_reward: float | None = None
    empty_reward: float | None = None
    history_problems: list[str] | None = None
    reasons: list[str] | None = None
    seconds: float = 0.0
    gold: dict | None = None
    empty: dict | None = None
    patches: dict | None = None  # clean grading of the empty / delete-the-failing-test patches

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "gold_reward": self.gold_reward, "empty_reward": self.empty_reward,
                "history_problems": self.history_problems or [], "reasons": self.reasons or [],
                "seconds": round(self.seconds, 3), "patches": self.patches or {},
                "gold_failed_tests": (self.gold or {}).get("failed_tests", {}),
                "empty_failed_tests": (self.empty or {}).get("failed_tests", {})}


async def run_gold_solution(sandbox: Sandbox, task: Task, timeout: float = 300) -> tuple[bool, str]:
    """Harbor's oracle agent: upload solution/ to /solution and run solve.sh in /workspace."""
    await sandbox.run("mkdir -p /solution && find /solution -mindepth 1 -delete", timeout=60, cwd="/")
    await sandbox.upload_dir(str(task.solution_dir), "/solution")
    r = await sandbox.run("bash /solution/solve.sh", timeout=timeout, cwd="/workspace",
                          env=resolve_env(task.config.solution.env))
    return r.exit_code == 0 and not r.timed_out, r.output[-1000:]


# Tools a verifier calls that the published Dockerfiles install over the network (astral's `curl … | sh` uv
# installer). Offline that line fails inside `sh` and the build still succeeds (a pipe exits with sh's status), so
# the image simply lacks the tool, and every grading would be an infrastructure failure.
NETWORK_TOOLS = ("uv", "uvx")
_HEREDOC = re.compile(r"(?<!<)<<-?\s*['\"]?(\w+)['\"]?")
_CALL = re.compile(r"^\s*(?:\w+=\S*\s+)*(?:exec\s+|time\s+|command\s+)?([\w.-]+)(?=\s|$)")
_PATH_SET = re.compile(r"^\s*(?:(?:export\s+)?PATH=\S+|(?:source|\.)\s+\S*\.local/bin/env)\s*$")   # uv's env script


def verifier_tool_calls(task: Task) -> tuple[list[str], list[str]]:
    """(the NETWORK_TOOLS tests/test.sh runs as commands and does not install itself, its PATH settings in order),
    heredoc bodies skipped."""
    tools: list[str] = []
    paths: list[str] = []
    installed: set[str] = set()
    end = None
    for line in (task.tests_dir / "test.sh").read_text(errors="replace").splitlines():
        if end is not None:
            end = None if line.strip() == end else end
            continue
        if _PATH_SET.match(line):
            paths.append(line.strip())
        for seg in re.split(r"&&|\|\||[;|(]", line.split("#", 1)[0]):
            m = _CALL.match(seg)
            if m and m.group(1) in NETWORK_TOOLS and m.group(1) not in tools:
                tools.append(m.group(1))
        if "install" in line:   # `curl …/uv/install.sh | sh`, `pip install uv`: test.sh brings it itself
            installed |= {t for t in NETWORK_TOOLS if re.search(rf"\b{t}\b", line)}
        h = _HEREDOC.search(line)
        end = h.group(1) if h else None
    installed |= {"uvx"} if "uv" in installed else set()   # uv's installer brings both
    return [t for t in tools if t not in installed], paths


async def missing_verifier_tools(sandbox: Sandbox, task: Task) -> list[str]:
    """The NETWORK_TOOLS test.sh calls that do not resolve in the sandbox the way the verifier runs it (its cwd,
    [verifier].env and test.sh's own PATH settings)."""
    tools, paths = verifier_tool_calls(task)
    if not tools:
        return []
    script = "; ".join(paths + [f"command -v {shlex.quote(t)} >/dev/null 2>&1 || echo MISSING:{t}" for t in tools])
    r = await sandbox.run(script, timeout=60, cwd="/workspace", env=resolve_env(task.config.verifier.env))
    return [w.split(":", 1)[1] for w in r.output.split() if w.startswith("MISSING:")]


async def validate_task(task: Task, base_dir: Path | ImageRef, factory: SandboxFactory,
                        verifier_timeout: float | None = None) -> Validation:
    """Gold solution must score 1, the untouched workspace 0, and the workspace's git must hold
    no commit but the base and no object of the solution or the hidden tests."""
    t0 = time.monotonic()
    reasons: list[str] = []
    v = Validation(ok=False)
    graded = with_network(base_dir, verifier_network(task))   # these sandboxes run the verifier
    sb = await factory(graded)
    try:
        missing = await missing_verifier_tools(sb, task)
        if missing:   # every grading would be an infrastructure failure: say why, in one line, and stop here
            v.reasons = [f"verifier toolchain: test.sh calls {', '.join(missing)}, which does not resolve in the "
                         "task's environment (PATH as test.sh sets it): its install step did not run (`curl … | "
                         "sh` exits with sh's status, so an offline build passes without it). Fix: prepare with "
                         "--offline-build (uv from its wheel), or install it in environment/Dockerfile"]
            v.seconds = time.monotonic() - t0
            return v
        ok, out = await run_gold_solution(sb, task)
        if not ok:
            reasons.append(f"solve.sh failed: {out.strip()[-300:]}")
        gold = await verify(sb, task, timeout=verifier_timeout)
        v.gold, v.gold_reward = gold.to_dict(), gold.reward
        if gold.infra:
            reasons.append(f"gold run: infrastructure failure: {gold.reason}")
        elif gold.reward != 1.0:
            reasons.append(f"gold solution scored {gold.reward:g}: {gold.reason}")
        forbidden = await changed_blobs(sb)
    finally:
        await sb.close()
    sb = await factory(graded)
    try:
        v.history_problems = await check_history(sb, forbidden)
        reasons += [f"history: {p}" for p in v.history_problems]
        empty = await verify(sb, task, timeout=verifier_timeout)
        v.empty, v.empty_reward = empty.to_dict(), empty.reward
        if empty.infra:
            reasons.append(f"untouched workspace: infrastructure failure: {empty.reason}")
        elif empty.reward != 0.0:
            reasons.append(f"untouched workspace scored {empty.reward:g} (expected 0)")
    finally:
        await sb.close()
    v.patches = {"empty_patch_reward": v.empty_reward,  # = clean grading of the empty patch
                 **await validate_delete_test(task, base_dir, factory, verifier_timeout)}
    if str(v.patches.get("delete_test_error", "")).startswith("infrastructure"):
        reasons.append(f"delete-the-test patch: {v.patches['delete_test_error']}")
    for key in ("empty_patch_reward", "delete_test_reward"):
        if v.patches.get(key, 0.0) != 0.0:
            reasons.append(f"{key.replace('_', ' ')} is {v.patches[key]:g} (expected 0)")
    v.reasons, v.ok, v.seconds = reasons, not reasons, time.monotonic() - t0
    return v


def _source_of(task: Task) -> dict[str, Any]:
    src = task.workspace_source()
    info = {"task_dir": str(task.path), "source": task.config.source}
    info.update({k: str(v) for k, v in src.items() if v is not None})
    return info


def _image_present(docker: Any, base: dict[str, Any]) -> bool:
    """A scrubbed image of the current scrub version is on the Docker host."""
    image = base.get("image")
    if not image or base.get("scrub_version") != SCRUB_VERSION:
        return False
    try:
        docker.images.get(image)
        return True
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        return False


def _build_image_base(task: Task, docker: Any) -> dict[str, Any]:
    env = task.config.environment
    # storage_mb: the sandbox's disk_mb (the /tmp tmpfs, the container's writable layer where the engine's
    # storage driver can cap it; services/sandbox/backends/docker_backend.py), lowered to max_limits there
    base = {**task_image(docker, task), "limits": {"cpus": float(env.cpus), "memory_mb": int(env.memory_mb),
                                                   "disk_mb": int(env.storage_mb)}}
    try:   # an offline build (uv installer line substituted): its record, with the original Dockerfile's sha256
        label = (docker.images.get(base["env_image"]).labels or {}).get(OFFLINE_LABEL)
        if label:
            base["offline_build"] = json.loads(label)
    except Exception:  # noqa: BLE001 - a named [environment].docker_image may carry anything
        pass
    return base


def _progress(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="task", disable=not enabled, dynamic_ncols=True)


async def prepare_tasks(tasks: list[Task], out_dir: Path, *, validate: bool = False,
                        factory: SandboxFactory | None = None, jobs: int = 2, force: bool = False,
                        load_errors: list[tuple[Path, str]] = (), progress: bool = True,
                        verifier_timeout: float | None = None, dataset: str | None = None,
                        prune: bool = False, log: Callable[[str], None] = print,
                        backend: str = "local", docker: Any = None) -> dict[str, Any]:
    """Build (and validate) every task; update and return the manifest. See module docstring.
    ``backend="docker"``: tasks whose repo lives in their image get their scrubbed image built
    (``docker``: a Docker SDK client; default from the environment); the others a base dir."""
    out_dir = Path(out_dir)
    bases = out_dir / "bases"
    bases.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(out_dir)
    entries: dict[str, Any] = manifest["tasks"]
    if validate and factory is None:
        factory = host_sandbox_factory

    if prune and dataset is not None:  # forget tasks that left this dataset
        current = {t.slug for t in tasks}
        for key in [k for k, e in entries.items() if e.get("dataset") == dataset and k not in current]:
            del entries[key]
    for path, reason in load_errors:
        entries[f"invalid:{path}"] = {"path": str(path), "excluded": True, "reason": reason, "dataset": dataset}

    sem = asyncio.Semaphore(max(1, jobs))
    bar = _progress(len(tasks), "validate" if validate else "prepare", progress)
    counts = {"cached": 0, "built": 0, "validated": 0, "excluded": 0}
    if backend == "docker" and docker is None and any(t.in_image for t in tasks):
        docker = docker_client()

    async def one(task: Task) -> None:
        async with sem:
            files = task.file_hashes()
            task_hash = combined_hash(files)
            old = entries.get(task.slug, {})
            base_dir = bases / task.slug
            in_image = task.in_image
            if in_image and backend != "docker":
                entry = {"name": task.name, "path": str(task.path), "dataset": dataset, "files": files,
                         "task_hash": task_hash, "excluded": True,
                         "reason": "the repo lives inside the task's image (environment/Dockerfile or "
                                   "[environment].docker_image): needs --backend docker"}
                entries[task.slug] = entry
                counts["excluded"] += 1
                bar.update(1)
                return
            have_base = (_image_present(docker, old.get("base", {})) if in_image else base_dir.is_dir())
            fresh = (not force and old.get("task_hash") == task_hash and have_base
                     and old.get("backend", "local") == backend
                     and old.get("base", {}).get("commit") and (not validate or old.get("validation")))
            if fresh:
                counts["cached"] += 1
                entry = old
                if in_image:   # the scrubbed image is cached; the mirror's raw store may have lost its files
                    try:
                        await asyncio.to_thread(ensure_upstream_files, docker, task, entry["base"])
                    except Exception as e:  # noqa: BLE001 - grading says which file it missed (an infra failure)
                        log(f"{task.name}: upstream files not exported again: {type(e).__name__}: {e}")
            else:
                entry = {"name": task.name, "path": str(task.path), "dataset": dataset, "backend": backend,
                         "files": files, "task_hash": task_hash, "excluded": False, "reason": None,
                         "warnings": list(task.warnings)}
                try:
                    entry["source"] = _source_of(task)
                    if in_image:
                        entry["base"] = await asyncio.to_thread(_build_image_base, task, docker)
                    else:
                        entry["base"] = await asyncio.to_thread(build_base, task, base_dir)
                    counts["built"] += 1
                except (TaskError, RuntimeError, OSError) as e:
                    entry.update(excluded=True, reason=f"base build failed: {e}")
                if validate and not entry["excluded"]:
                    try:
                        val = await validate_task(task, base_of(entry), factory, verifier_timeout)
                        entry["validation"] = val.to_dict()
                        counts["validated"] += 1
                        if not val.ok:
                            entry.update(excluded=True, reason="; ".join(val.reasons or []))
                    except Exception as e:  # noqa: BLE001 - one broken task never stops the run
                        entry.update(excluded=True, reason=f"validation crashed: {type(e).__name__}: {e}")
                entries[task.slug] = entry
                save_manifest(out_dir, manifest)   # each finished task at once: an interrupted run resumes here
            if entry.get("excluded"):
                counts["excluded"] += 1
            bar.update(1)

    try:
        await asyncio.gather(*(one(t) for t in tasks))
    finally:
        bar.close()
        manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        save_manifest(out_dir, manifest)

    excluded = [(k, e) for k, e in entries.items() if e.get("excluded") and
                (e.get("dataset") == dataset or dataset is None)]
    for key, e in excluded:
        log(f"EXCLUDED {e.get('name', key)}: {e.get('reason')}")
    log(f"{len(tasks)} task(s): {counts['built']} built, {counts['cached']} cached, "
        f"{counts['validated']} validated, {counts['excluded']} excluded -> {out_dir / 'manifest.json'}")
    return manifest

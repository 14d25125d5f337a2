"""Which tasks a run uses: the dataset (built-in or a folder of Harbor tasks), the `--task-id` lookup
(built-in ids first, then ``<task_root>/assets/harbor-tasks/<ID>``, where ``prepare_sandbox.py --task DIR
--task-id ID`` copies a published task, then any task there whose name, slug or SWE-bench instance id
it is; a miss lists close ids), their sandbox bases, and ``task_manifest.json``."""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from services.common.config import load_config
from services.common.paths import DATASETS_DIR, REPO_ROOT
from services.tasks.preparation.prepare import base_of, prepare_tasks
from services.tasks.task import Task, TaskError, load_dataset, load_task, matches_task_id, task_aliases

log = logging.getLogger("cookbook")
PREP_DIR = REPO_ROOT / "sandbox-preparation"
PUBLISHED = Path("assets") / "harbor-tasks"   # <task_root>/assets/harbor-tasks/<ID>/task.toml


def task_root() -> Path:
    """config/harbor.yaml ``tasks.root`` (configure.py --task-root), default the repo root."""
    root = (load_config("harbor").get("tasks") or {}).get("root")
    p = Path(root) if root else REPO_ROOT
    return p if p.is_absolute() else REPO_ROOT / p


def configured_task_id() -> str | None:
    """config/harbor.yaml ``tasks.task_id`` (configure.py --task-id): the task of runs given none."""
    return (load_config("harbor").get("tasks") or {}).get("task_id") or None


def dataset_path(dataset: str) -> Path:
    path = Path(dataset)
    if not path.exists():
        path = DATASETS_DIR / dataset
    if not path.exists():
        raise SystemExit(f"dataset {dataset!r} not found (a folder of Harbor tasks, a manifest, or one of "
                         f"{sorted(p.name for p in DATASETS_DIR.iterdir() if p.is_dir())})")
    return path


def load_tasks(dataset: str, split: str | None, task_ids: list[str] | None = None,
               root: Path | None = None) -> list[Task]:
    """The run's tasks: ``dataset``'s ``split``, or the ``task_ids`` (an id of the dataset first, else a
    published task under ``<root>/assets/harbor-tasks/<ID>``; root: config/harbor.yaml tasks.root)."""
    path = dataset_path(dataset)
    ds = load_dataset(path)
    if split and not ds.splits:   # a plain folder of Harbor tasks has no splits: every task is in each
        log.warning("dataset %s has no splits; split %r = all %d tasks", path, split, len(ds.tasks))
        split = None
    tasks = ds.split(split) if split else ds.tasks
    if task_ids:
        tasks, missing = [], []
        published: list[Task] | None = None
        for tid in dict.fromkeys(task_ids):
            hit = [t for t in ds.tasks if matches_task_id(t, tid)]
            if hit:
                tasks += [t for t in hit if t not in tasks]
                continue
            pub = (root or task_root()) / PUBLISHED / tid
            if (pub / "task.toml").exists():
                log.info("task %s: published task %s", tid, pub)
                tasks.append(load_task(pub))
                continue
            published = published_tasks(root or task_root()) if published is None else published
            hit = [t for t in published if matches_task_id(t, tid)]
            if hit:
                log.info("task %s: published task %s", tid, hit[0].path)
                tasks += [t for t in hit if t not in tasks]
            else:
                missing.append(tid)
        if missing:
            known = sorted({a for t in ds.tasks + (published or []) for a in task_aliases(t)})
            close = {tid: difflib.get_close_matches(tid.split("/")[-1], known, n=5, cutoff=0.6) for tid in missing}
            hint = "; ".join(f"close to {tid!r}: {', '.join(c)}" for tid, c in close.items() if c)
            raise SystemExit(f"unknown task id(s) {missing}: not in {path} and no "
                             f"{(root or task_root()) / PUBLISHED}/<ID>/task.toml (copy a published task there with "
                             "`prepare_sandbox.py --task DIR --task-id ID`; configure.py --task-root sets the root)"
                             + (f"; {hint}" if hint else ""))
    if not tasks:
        raise SystemExit(f"no tasks selected from {path} (split {split!r})")
    return tasks


def published_tasks(root: Path) -> list[Task]:
    """The tasks copied under ``<root>/assets/harbor-tasks/`` (those that load)."""
    out = []
    for toml in sorted((root / PUBLISHED).glob("*/task.toml")):
        try:
            out.append(load_task(toml.parent))
        except TaskError as e:
            log.warning("published task %s does not load: %s", toml.parent, e)
    return out


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


def task_descriptor(t: Task) -> dict[str, Any]:
    return {"task_name": t.name, "task_id": t.name.split("/")[-1], "slug": t.slug, "path": str(t.path),
            "content_hash": t.content_hash()}


def task_manifest(tasks: list[Task], dataset: str, split: str | None, task_ids: list[str] | None,
                  seed: int) -> dict:
    """results/<name>/task_manifest.json (written by the recorder), the seed's layout: {version, dataset, split,
    bench_name, selection, tasks}."""
    return {"version": 1, "dataset": dataset, "split": split,
            "bench_name": "SWE-bench" if any(t.swe for t in tasks) else "harbor",
            "selection": {"task_id": task_ids[0] if task_ids and len(task_ids) == 1 else (task_ids or None),
                          "task_filter": None, "seed": seed},
            "tasks": [task_descriptor(t) for t in tasks]}

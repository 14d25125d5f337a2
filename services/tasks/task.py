"""Loading and checking Harbor task directories, and datasets (folders of tasks or manifests).

A task directory (Harbor format)::

    instruction.md            prompt for the agent
    task.toml                 TaskConfig (services.tasks.task_toml)
    environment/              the workspace source, one of:
                              * environment/repo/ (a snapshot of the repository at the base commit)
                                or environment/repo.json ({"git": "<local checkout>", "commit": "<sha>"}):
                                the project's own layout, for every backend;
                              * environment/Dockerfile, or [environment].docker_image in task.toml:
                                the public Harbor layout (SWE-bench Verified): the repo lives inside
                                the image at its WORKDIR (e.g. /testbed); docker backend only
    tests/test.sh             verifier script, uploaded to /tests only after the agent finished
    tests/config.json         (SWE-style tasks) FAIL_TO_PASS / PASS_TO_PASS (+ test_cmd / test_files
                              in the project's own tasks; a SWE-bench record has neither)
    solution/solve.sh         reference solution (the "oracle"), uploaded to /solution

Every problem is reported as a :class:`TaskError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from services.common.hashing import sha256_file

from .task_toml import TaskConfig, grading_policy, unknown_keys


class TaskError(ValueError):
    """A malformed task: ``file`` is relative to the task dir, ``field`` is dotted (or None)."""

    def __init__(self, task_dir: Path | str, file: str, message: str, field: str | None = None):
        self.task_dir, self.file, self.field, self.message = Path(task_dir), file, field, message
        where = f"{file}: {field}" if field else file
        super().__init__(f"{Path(task_dir).name}/{where}: {message}")


SWE_REQUIRED_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS")


@dataclass
class Task:
    path: Path
    config: TaskConfig
    instruction: str
    warnings: list[str] = field(default_factory=list)
    swe: dict[str, Any] | None = None  # tests/config.json of SWE-style tasks

    @property
    def name(self) -> str:
        """``org/name`` from [task], else the directory name."""
        return self.config.task.name if self.config.task else self.path.name

    @property
    def slug(self) -> str:
        """File-system-safe name (``org__name``)."""
        return self.name.replace("/", "__")

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def verifier_timeout(self) -> float:
        return float(self.config.verifier.timeout_sec)

    def workspace_source(self) -> dict[str, Any]:
        """Where the workspace comes from: {"dir": Path} or {"git": Path, "commit": sha} (a host
        directory: the local backend's lower layer), or {"image": Dockerfile path or image name,
        "workdir": path or None} (the repo inside the task's image; docker backend)."""
        repo_dir = self.path / "environment" / "repo"
        repo_json = self.path / "environment" / "repo.json"
        if repo_dir.is_dir():
            return {"dir": repo_dir}
        if repo_json.is_file():
            spec = _read_json(self.path, "environment/repo.json")
            for key in ("git", "commit"):
                if not isinstance(spec.get(key), str) or not spec[key]:
                    raise TaskError(self.path, "environment/repo.json", "missing or not a string", key)
            git = Path(spec["git"])
            if not git.is_absolute():
                git = (self.path / "environment" / git).resolve()
            return {"git": git, "commit": spec["commit"]}
        dockerfile = self.path / "environment" / "Dockerfile"
        if dockerfile.is_file() or self.config.environment.docker_image:
            return {"image": str(dockerfile) if dockerfile.is_file() else self.config.environment.docker_image,
                    "workdir": self.config.environment.workdir}
        raise TaskError(self.path, "environment/", "no workspace source (expected environment/repo/, "
                        "environment/repo.json, environment/Dockerfile or [environment].docker_image)")

    @property
    def in_image(self) -> bool:
        """The workspace lives inside the task's image (public Harbor layout; docker backend only)."""
        return "image" in self.workspace_source()

    def file_hashes(self) -> dict[str, str]:
        """sha256 of every file of the task (relative path -> hex digest)."""
        return hash_tree(self.path)

    def content_hash(self) -> str:
        return combined_hash(self.file_hashes())


def hash_tree(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def combined_hash(hashes: dict[str, str]) -> str:
    h = hashlib.sha256()
    for k in sorted(hashes):
        h.update(f"{k}\0{hashes[k]}\n".encode())
    return h.hexdigest()


def _read_json(task_dir: Path, rel: str) -> dict[str, Any]:
    try:
        data = json.loads((task_dir / rel).read_text())
    except FileNotFoundError:
        raise TaskError(task_dir, rel, "file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TaskError(task_dir, rel, f"not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise TaskError(task_dir, rel, "expected a JSON object at the top level")
    return data


def _require_file(task_dir: Path, rel: str, non_empty: bool = True) -> Path:
    p = task_dir / rel
    if not p.is_file():
        raise TaskError(task_dir, rel, "file is missing")
    if non_empty and not p.read_bytes().strip():
        raise TaskError(task_dir, rel, "file is empty")
    return p


def load_task(path: str | Path) -> Task:
    """Load and check one task directory; raises :class:`TaskError` naming file and field."""
    d = Path(path)
    if not d.is_dir():
        raise TaskError(d, ".", "task directory does not exist")

    instruction = _require_file(d, "instruction.md").read_text()

    raw_toml = _require_file(d, "task.toml", non_empty=False).read_text()
    try:
        data = tomllib.loads(raw_toml)
    except tomllib.TOMLDecodeError as e:
        raise TaskError(d, "task.toml", f"invalid TOML: {e}") from None
    try:
        config = TaskConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or None
        raise TaskError(d, "task.toml", err["msg"], loc) from None
    warnings = [f"task.toml: unknown key {k!r} (kept, not used)" for k in unknown_keys(data)]
    if config.schema_version not in ("1.0", "1.1", "1.2", "1.3", "1.4"):
        warnings.append(f"task.toml: schema_version {config.schema_version!r} is newer than 1.4")
    try:
        grading_policy(config.metadata)
    except ValueError as e:
        raise TaskError(d, "task.toml", str(e), "metadata.grading") from None

    env_dir = d / "environment"
    if not env_dir.is_dir():
        raise TaskError(d, "environment/", "directory is missing")
    has_env = any((env_dir / n).exists() for n in ("Dockerfile", "docker-compose.yaml", "repo", "repo.json"))
    if not has_env and not config.environment.docker_image:
        raise TaskError(d, "environment/", "needs a Dockerfile, docker-compose.yaml, repo/ or repo.json "
                        "(or [environment].docker_image in task.toml)")

    _require_file(d, "tests/test.sh")
    _require_file(d, "solution/solve.sh")

    swe = None
    if (d / "tests" / "config.json").exists():
        swe = _read_json(d, "tests/config.json")
        for key in SWE_REQUIRED_KEYS:
            if key not in swe:
                raise TaskError(d, "tests/config.json", "missing", key)
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS", "test_files"):
            if isinstance(swe.get(key), str):   # SWE-bench records hold these lists as JSON strings
                try:
                    swe[key] = json.loads(swe[key])
                except json.JSONDecodeError:
                    raise TaskError(d, "tests/config.json", "must be a list of strings", key) from None
            if key in swe and (not isinstance(swe[key], list) or not all(isinstance(t, str) for t in swe[key])):
                raise TaskError(d, "tests/config.json", "must be a list of strings", key)
        if not swe["FAIL_TO_PASS"]:
            raise TaskError(d, "tests/config.json", "must name at least one test", "FAIL_TO_PASS")
        if "test_cmd" in swe and (not isinstance(swe["test_cmd"], list) or not swe["test_cmd"]):
            raise TaskError(d, "tests/config.json", "must be a non-empty list (argv)", "test_cmd")

    task = Task(path=d.resolve(), config=config, instruction=instruction, warnings=warnings, swe=swe)
    task.workspace_source()  # checks environment/repo.json when present
    return task


def task_aliases(task: Task) -> set[str]:
    """The ids a user may type for ``task`` (``--task-id``): its name (``org/name``) and the name's last
    part, its slug, its directory name, and the SWE-bench ``instance_id`` of its record."""
    names = {task.name, task.name.split("/")[-1], task.slug, task.path.name}
    if task.swe and task.swe.get("instance_id"):
        names.add(str(task.swe["instance_id"]))
    return names


def matches_task_id(task: Task, task_id: str) -> bool:
    """``task_id`` is one of the task's aliases, or ``<org>/<alias>`` (the published ``swe-bench/<instance_id>``)."""
    aliases = task_aliases(task)
    return task_id in aliases or task_id.split("/")[-1] in aliases


# --------------------------------------------------------------------------------------------
# datasets


@dataclass
class Dataset:
    """Tasks of a folder or manifest. Tasks that failed to load are in ``errors`` (path, reason)."""

    name: str
    root: Path
    tasks: list[Task] = field(default_factory=list)
    errors: list[tuple[Path, str]] = field(default_factory=list)
    splits: dict[str, list[str]] = field(default_factory=dict)  # split -> task names

    def split(self, name: str) -> list[Task]:
        if name not in self.splits:
            raise KeyError(f"dataset {self.name!r} has no split {name!r} (has: {sorted(self.splits)})")
        wanted = set(self.splits[name])
        return [t for t in self.tasks if t.name in wanted or t.path.name in wanted]


MANIFEST = "manifest.json"


def load_dataset(path: str | Path, split: str | None = None) -> Dataset:
    """A dataset from a task dir, a folder of task dirs, or a manifest (JSON file, or a folder that
    holds ``manifest.json``). Manifest: ``{"name": ..., "tasks": [{"path": "rel/dir", "split": "train"}]}``."""
    p = Path(path)
    if p.is_dir() and (p / "task.toml").exists():
        ds = Dataset(name=p.name, root=p.parent)
        _add(ds, p)
        return ds
    manifest = p if p.is_file() else p / MANIFEST
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{manifest}: not valid JSON: {e}") from None
        entries = data.get("tasks")
        if not isinstance(entries, list):
            raise ValueError(f"{manifest}: 'tasks' must be a list")
        ds = Dataset(name=data.get("name", manifest.parent.name), root=manifest.parent)
        for i, entry in enumerate(entries):
            rel = entry if isinstance(entry, str) else entry.get("path") if isinstance(entry, dict) else None
            if not isinstance(rel, str):
                ds.errors.append((manifest, f"tasks[{i}]: needs a 'path'"))
                continue
            task = _add(ds, manifest.parent / rel)
            if task is not None and isinstance(entry, dict) and entry.get("split"):
                ds.splits.setdefault(entry["split"], []).append(task.name)
    elif p.is_dir():
        ds = Dataset(name=p.name, root=p)
        for toml in sorted(p.rglob("task.toml")):
            _add(ds, toml.parent)
    else:
        raise FileNotFoundError(f"{p}: no task dir, task folder or manifest here")
    if split is not None:
        ds.tasks = ds.split(split)
    return ds


def _add(ds: Dataset, task_dir: Path) -> Task | None:
    try:
        task = load_task(task_dir)
    except TaskError as e:
        ds.errors.append((task_dir, str(e)))
        return None
    ds.tasks.append(task)
    return task

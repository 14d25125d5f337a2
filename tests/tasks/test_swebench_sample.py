"""The committed sample set in the public Harbor / SWE-bench layout (datasets/swebench-sample) is what
services/tasks/sources/swebench_sample.py generates, loads as public-layout tasks, and its repository
bundles hold the whole history: the base commit of tests/config.json and, after it, the fix."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from services.tasks.sources.swebench_sample import SPECS, write_sample
from services.tasks.task import load_dataset

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "swebench-sample"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "testbed.bundle"}


def test_committed_sample_matches_the_generator(tmp_path):
    write_sample(tmp_path)
    assert _files(tmp_path) == _files(SAMPLE)   # bundles are packs (not byte-stable): checked below


def test_sample_tasks_are_public_layout_with_future_history(tmp_path):
    ds = load_dataset(SAMPLE)
    assert not ds.errors and len(ds.tasks) == len(SPECS) >= 3
    for t in ds.tasks:
        assert t.in_image and t.workspace_source()["image"].endswith("environment/Dockerfile")
        base = json.loads((t.tests_dir / "config.json").read_text())["base_commit"]
        clone = tmp_path / t.slug
        subprocess.run(["git", "clone", "-q", str(t.path / "environment" / "testbed.bundle"), str(clone)], check=True)
        log = subprocess.run(["git", "log", "--format=%H %s", "origin/main"], cwd=clone, capture_output=True,
                             text=True, check=True).stdout.splitlines()
        shas = [line.split()[0] for line in log]
        assert len(shas) == 4 and shas[2] == base and log[1].split(" ", 1)[1].startswith("Fix ")
        assert f"git reset -q --hard {base}" in (t.path / "environment" / "Dockerfile").read_text()

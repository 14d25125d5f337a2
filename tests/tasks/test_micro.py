"""The built-in micro set: shape (what the tiny model needs), no drift from its specs, and every
task passes --validate: gold = 1, empty = 0, history scrubbed (acceptance 1)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from taskhelpers import MICRO, REPO, run

from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.sources.micro import SPECS, write_micro_dataset
from services.tasks.task import hash_tree, load_dataset


def test_committed_micro_set_matches_the_specs(tmp_path):
    write_micro_dataset(tmp_path / "micro")
    assert hash_tree(tmp_path / "micro") == hash_tree(MICRO), \
        "datasets/micro is out of date: run `prepare_sandbox.py write-micro`"


def test_micro_dataset_shape():
    ds = load_dataset(MICRO)
    assert not ds.errors
    assert len(ds.tasks) >= 40
    train, heldout = ds.split("train"), ds.split("heldout")
    assert len(train) >= 30 and len(heldout) >= 5
    assert not {t.name for t in train} & {t.name for t in heldout}
    for t in ds.tasks:
        assert not t.warnings, t.warnings
        edit = json.loads((t.solution_dir / "edit.json").read_text())
        repo = t.path / "environment" / "repo"
        src = (repo / edit["path"]).read_text().splitlines()
        assert 2 <= len(src) <= 6
        assert src[edit["line"] - 1] == edit["old"] != edit["new"]
        # the gold patch is exactly that one-line edit
        patch = (t.solution_dir / "patch.diff").read_text()
        changed = [l for l in patch.splitlines() if re.match(r"^[-+](?![-+])", l)]
        assert changed == [f"-{edit['old']}", f"+{edit['new']}"]
        # short instruction naming the file and the failing test; never the fix
        assert edit["path"] in t.instruction and edit["failing_test"] in t.instruction
        assert len(t.instruction) < 160 and edit["new"].strip() not in t.instruction
        assert sorted(p.name for p in repo.iterdir()) == sorted([edit["path"], edit["test_file"]])


def test_hidden_cases_block_constant_returns():
    """For every spec and every expected value of its tests, `return <value>` fails some case."""
    for spec in SPECS:
        values = {e.rsplit("==", 1)[1].strip() for e in spec.visible + spec.hidden}
        header = spec.code.splitlines()[0]
        for v in values:
            ns: dict = {}
            exec(f"{header}\n    return {v}\n", ns)  # noqa: S102
            results = []
            for e in spec.visible + spec.hidden:
                try:
                    results.append(bool(eval(e, ns)))  # noqa: S307
                except Exception:  # noqa: BLE001
                    results.append(False)
            assert not all(results), f"{spec.fn}: `return {v}` passes every test"


@pytest.mark.slow
def test_every_micro_task_validates(tmp_path):
    ds = load_dataset(MICRO)
    t0 = time.monotonic()
    m = run(prepare_tasks(ds.tasks, tmp_path / "prep", validate=True, jobs=2, progress=False, dataset="micro"))
    took = time.monotonic() - t0
    entries = m["tasks"]
    assert len(entries) == len(ds.tasks)
    bad = {k: e["reason"] for k, e in entries.items() if e["excluded"]}
    assert not bad, bad
    for e in entries.values():
        v = e["validation"]
        assert v["gold_reward"] == 1.0 and v["empty_reward"] == 0.0 and v["history_problems"] == []
        assert e["files"] and len(e["task_hash"]) == 64 and len(e["base"]["commit"]) == 40
    print(f"validated {len(entries)} micro tasks in {took:.1f}s")


def test_prepare_cli_is_idempotent(tmp_path):
    cmd = [sys.executable, str(REPO / "prepare_sandbox.py"), str(MICRO / "clamp"), str(MICRO / "fib"),
           "--validate", "--out", str(tmp_path / "prep"), "--no-progress", "--strict"]
    r1 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r1.returncode == 0, r1.stdout + r1.stderr
    assert r1.stdout.count("1 built, 0 cached, 1 validated, 0 excluded") == 2, r1.stdout  # one line per target
    m1 = json.loads((tmp_path / "prep" / "manifest.json").read_text())
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0 and r2.stdout.count("0 built, 1 cached, 0 validated") == 2, r2.stdout + r2.stderr
    m2 = json.loads((tmp_path / "prep" / "manifest.json").read_text())
    assert m1["tasks"] == m2["tasks"]
    entry = m1["tasks"]["lts-micro__clamp"]
    assert set(entry["files"]) >= {"instruction.md", "task.toml", "tests/test.sh", "solution/solve.sh",
                                   "environment/repo/clamp.py"}
    assert (tmp_path / "prep" / "bases" / "lts-micro__clamp" / ".git").is_dir()

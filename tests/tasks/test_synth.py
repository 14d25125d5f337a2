"""`prepare_sandbox.py synth` on a local repository the test creates: seeded, deterministic,
one-line bugs that break existing tests; the tasks validate (gold 1, empty 0)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from taskhelpers import REPO, commit_all, git, run, write

from services.tasks.preparation.hostsandbox import host_sandbox_factory
from services.tasks.preparation.prepare import validate_task
from services.tasks.preparation.workspace import build_base
from services.tasks.sources.synth import Mutation, find_mutations, synthesize
from services.tasks.task import hash_tree, load_dataset

LIB = '''\
"""A small library for the synthesiser test."""


def clip(values, lo, hi):
    out = []
    for v in values:
        if v < lo:
            out.append(lo)
        elif v > hi:
            out.append(hi)
        else:
            out.append(v)
    return out


def window(xs, size):
    return [xs[i:i + size] for i in range(len(xs) - size + 1)]


def is_blank(s):
    return not s or s.isspace()


def total(xs, start=0):
    acc = start
    for x in xs:
        acc = acc + x
    return acc
'''

TESTS = '''\
from smalllib.core import clip, is_blank, total, window


def test_clip():
    assert clip([1, 5, 9], 2, 8) == [2, 5, 8]


def test_clip_inside():
    assert clip([3, 4], 0, 10) == [3, 4]


def test_window():
    assert window([1, 2, 3], 2) == [[1, 2], [2, 3]]


def test_window_full():
    assert window([1, 2], 2) == [[1, 2]]


def test_blank():
    assert is_blank("  ") and is_blank("") and not is_blank("x")


def test_total():
    assert total([1, 2, 3]) == 6
    assert total([1], start=5) == 6
'''


@pytest.fixture(scope="module")
def local_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("smalllib")
    git(repo, "init", "-q", "-b", "main")
    write(repo, {"src/smalllib/__init__.py": "", "src/smalllib/core.py": LIB, "tests/test_core.py": TESTS})
    commit_all(repo, "init")
    return repo


def test_mutations_are_single_line_and_well_formed(local_repo):
    muts = find_mutations(local_repo, ["src/smalllib"])
    kinds = {m.kind for m in muts}
    assert {"compare", "arith", "off_by_one", "return", "boolop"} <= kinds, kinds
    src = (local_repo / "src/smalllib/core.py").read_text()
    for m in muts:
        assert isinstance(m, Mutation) and m.file == "src/smalllib/core.py"
        new = m.apply(src)
        changed = [(a, b) for a, b in zip(src.splitlines(), new.splitlines()) if a != b]
        assert len(changed) == 1 and len(new.splitlines()) == len(src.splitlines())
        compile(new, "core.py", "exec")
    assert not any('"""' in src.splitlines()[m.line - 1] for m in muts)  # never the docstring


def test_synth_on_local_repo(local_repo, tmp_path):
    out = tmp_path / "tasks"
    res = synthesize(local_repo, out, src=["src/smalllib"], tests=["tests"], pythonpath="src", n=2, seed=3,
                     org="t", package="smalllib", log=lambda s: None)
    assert len(res.tasks) == 2
    ds = load_dataset(out)
    assert len(ds.tasks) == 2 and not ds.errors
    for task in ds.tasks:
        cfg = task.swe
        assert cfg["FAIL_TO_PASS"] and set(cfg["FAIL_TO_PASS"]).isdisjoint(cfg["PASS_TO_PASS"])
        patch = (task.solution_dir / "patch.diff").read_text()
        removed = [l[1:] for l in patch.splitlines() if l.startswith("-") and not l.startswith("---")]
        added = [l[1:] for l in patch.splitlines() if l.startswith("+") and not l.startswith("+++")]
        assert len(removed) == len(added) == 1  # one-line bug, one-line fix
        assert removed[0].strip() not in task.instruction and added[0].strip() not in task.instruction
        assert cfg["FAIL_TO_PASS"][0] in task.instruction
        base = tmp_path / "base" / task.slug
        build_base(task, base)
        v = run(validate_task(task, base, host_sandbox_factory))
        assert v.ok, v.reasons
        assert v.gold_reward == 1.0 and v.empty_reward == 0.0

    # deterministic: same seed, same tasks
    again = synthesize(local_repo, tmp_path / "again", src=["src/smalllib"], tests=["tests"], pythonpath="src",
                       n=2, seed=3, org="t", package="smalllib", log=lambda s: None)
    assert [hash_tree(p) for p in again.tasks] == [hash_tree(p) for p in res.tasks]


def test_synth_cli(local_repo, tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "prepare_sandbox.py"), "synth", "--repo", str(local_repo),
                        "--out", str(tmp_path / "t"), "--src", "src/smalllib", "--tests", "tests",
                        "--pythonpath", "src", "--n", "1", "--seed", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 task(s) written" in r.stdout
    (task_dir,) = list((tmp_path / "t").iterdir())
    cfg = json.loads((task_dir / "tests" / "config.json").read_text())
    assert cfg["mutation"]["file"] == "src/smalllib/core.py"

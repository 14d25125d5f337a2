"""The generalise set (services/tasks/sources/generalise.py): large enough (>= 150 train, >= 50 held-out), split by
function, file and repository (no held-out function, name, module path, package or function code is seen in
a train task), no drift from the generator, and its tasks validate (gold = 1, empty = 0)."""

from __future__ import annotations

from pathlib import Path

from taskhelpers import REPO, run

from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.sources.generalise import tasks, write_generalise_dataset
from services.tasks.task import hash_tree, load_dataset

GENERALISE = REPO / "datasets" / "generalise"


def test_committed_generalise_set_matches_the_generator(tmp_path):
    write_generalise_dataset(tmp_path / "generalise")
    assert hash_tree(tmp_path / "generalise") == hash_tree(GENERALISE), \
        "datasets/generalise is out of date: run `prepare_sandbox.py write-generalise`"


def test_splits_are_large_and_disjoint_by_function_file_and_repository():
    ts = tasks()
    train = [t for t in ts if t.split == "train"]
    held = [t for t in ts if t.split == "heldout"]
    assert len(train) >= 150 and len(held) >= 50, (len(train), len(held))
    for attr in ("base_fn", "package", "path", "name"):
        shared = {getattr(t, attr) for t in train} & {getattr(t, attr) for t in held}
        assert not shared, f"{attr} in both splits: {sorted(shared)[:5]}"
    assert not {t.spec.fn for t in train} & {t.spec.fn for t in held}
    assert not {t.path.split("/")[1] for t in train} & {t.path.split("/")[1] for t in held}   # module files
    train_sources = [t.source(buggy=True) for t in train] + [t.source(buggy=False) for t in train]
    for h in held:   # no held-out function (its fixed or its buggy code, any names) inside a train file
        for code in (h.spec.code, h.spec.buggy_code()):
            assert not any(code.strip() in s for s in train_sources), (h.name, code)
    # within a split the same function appears under several names, in several files and repositories
    assert len({t.spec.fn for t in train}) > len({t.base_fn for t in train})
    assert len({t.line for t in held if t.base_fn == held[0].base_fn}) > 1


def test_manifest_splits_and_a_task_of_each_split_validates(tmp_path):
    ds = load_dataset(GENERALISE)
    assert len(ds.tasks) == len(tasks())
    splits = {e["split"] for e in __import__("json").loads((GENERALISE / "manifest.json").read_text())["tasks"]}
    assert splits == {"train", "heldout"}
    by_split = {t.split: t for t in tasks()}
    picked = [t for t in ds.tasks if Path(t.path).name in {by_split["train"].name, by_split["heldout"].name}]
    assert len(picked) == 2
    m = run(prepare_tasks(picked, tmp_path / "prep", validate=True, jobs=2, progress=False, dataset="generalise"))
    for e in m["tasks"].values():
        assert not e["excluded"], e["reason"]
        assert e["validation"]["gold_reward"] == 1.0 and e["validation"]["empty_reward"] == 0.0

"""`prepare_sandbox.py swebench-export` without Docker: a SWE-bench Verified export (JSONL, parquet) becomes the
published Harbor layout for every row, file for file what the stand-in tasks (the adapter's layout) have; rows
that cannot be written are reported, never dropped; re-writing keeps what is done; the summary table classifies
validated / excluded / infra, and a re-run retries only infrastructure failures.
(The docker half, prepare + validate on real containers: tests/dockerhost/test_swebench_export.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from services.tasks import cli
from services.tasks.sources import swebench_export as sx
from services.tasks.task import load_task

REPO = Path(__file__).resolve().parents[2]
LIKE = REPO / "datasets" / "swebench-verified-like"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """30 stand-in rows, plus a line that is not JSON and a row without its patch (32 lines)."""
    d = tmp_path_factory.mktemp("export")
    rows = sx.standin_rows(30)
    broken = dict(rows[0], instance_id="psf__requests-99999")
    del broken["patch"]
    lines = [json.dumps(r) for r in rows[:15]] + ["{not json"] + [json.dumps(r) for r in rows[15:]] + \
        [json.dumps(broken)]
    (d / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return d / "rows.jsonl", rows


def test_every_row_written_in_the_published_layout(export, tmp_path, capsys):
    path, rows = export
    rc = cli.main(["swebench-export", str(path), "--dest", str(tmp_path / "d"), "--write-only", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 1, out   # two rows could not be written
    assert "30 of 32 rows have their task dir" in out and "(30 written, 0 already there), 2 not written" in out
    assert "NOT WRITTEN row 16: line 16: not JSON" in out, out
    assert "NOT WRITTEN psf__requests-99999: missing field(s) patch" in out, out
    dirs = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert dirs == sorted(r["instance_id"] for r in rows)
    for r in rows:
        task = load_task(tmp_path / "d" / r["instance_id"])
        assert task.in_image and task.name == f"swebench-verified/{r['instance_id']}"
        rec = json.loads((task.tests_dir / "config.json").read_text())
        assert rec == r and isinstance(rec["FAIL_TO_PASS"], str)     # the record as the dataset ships it
        assert (tmp_path / "d" / r["instance_id"] / "environment" / "Dockerfile").read_text().startswith(
            f"FROM {sx.image_of(r['instance_id'])}\n")
    for iid in sx.STANDINS:   # the stand-ins themselves: every file but task.toml's names as the committed ones
        for rel in sx.FILES:
            if rel != "task.toml":
                assert (tmp_path / "d" / iid / rel).read_bytes() == (LIKE / iid / rel).read_bytes(), (iid, rel)
        assert ((tmp_path / "d" / iid / "tests" / "test.sh").stat().st_mode & 0o777) == 0o755


def test_parquet_gives_the_same_tasks(export, tmp_path):
    _, rows = export
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    w = sx.write_export(sx.read_export(tmp_path / "rows.parquet"), tmp_path / "p", progress=False)
    assert w.ids == [r["instance_id"] for r in rows] and not w.errors
    j = sx.write_export(rows[:2], tmp_path / "j", progress=False)
    for iid in j.ids:
        for rel in sx.FILES:
            assert (tmp_path / "p" / iid / rel).read_bytes() == (tmp_path / "j" / iid / rel).read_bytes()


def test_rewrite_keeps_what_is_done(export, tmp_path):
    _, rows = export
    dest = tmp_path / "d"
    first = sx.write_export(rows, dest, progress=False)
    assert len(first.written) == 30
    (dest / rows[3]["instance_id"] / "tests" / "test.sh").unlink()          # an interrupted task
    changed = [dict(r) for r in rows]
    changed[7]["problem_statement"] += "\nMore detail."                      # a row that changed
    again = sx.write_export(changed, dest, progress=False)
    assert again.written == [rows[3]["instance_id"], rows[7]["instance_id"]], again.written
    assert len(again.kept) == 28 and again.ids == first.ids
    assert "More detail." in (dest / rows[7]["instance_id"] / "instruction.md").read_text()
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]        # no temporary dir left


def test_summary_table_and_retry_of_infra_failures(capsys):
    m = {"tasks": {
        "s__a-1": {"excluded": False, "validation": {"ok": True, "seconds": 41.5}},
        "s__b-2": {"excluded": True, "reason": "gold solution scored 0: 1 test failed", "validation": {"ok": False}},
        "s__c-3": {"excluded": True, "reason": "base build failed: image swebench/x not found", "task_hash": "h"},
        "s__d-4": {"excluded": True, "reason": "gold run: infrastructure failure: uv: not found",
                   "validation": {"ok": False}, "task_hash": "h"},
    }}
    slugs = {"a-1": "s__a-1", "b-2": "s__b-2", "c-3": "s__c-3", "d-4": "s__d-4", "e-5": "s__e-5"}
    counts = sx.prepare_summary(m, slugs, True, [("row 9", "line 9: not JSON")])
    out = capsys.readouterr().out
    assert counts == {"validated": 1, "excluded": 1, "infra": 2, "not prepared": 1}
    assert "1 validated, 1 excluded, 2 infra, 1 not prepared, 1 not written (5 selected)" in out, out
    assert "gold solution scored 0" in out and "line 9: not JSON" in out
    assert sx.forget_infra(m, slugs.values()) == ["s__c-3", "s__d-4"]
    assert m["tasks"]["s__c-3"]["task_hash"] is None and "validation" not in m["tasks"]["s__d-4"]
    assert m["tasks"]["s__b-2"]["validation"] == {"ok": False}           # a task's own failure stays done
    assert sx.select(list(slugs), ["swe-bench/c-3", "a-1"], None) == ["a-1", "c-3"]
    assert sx.select(list(slugs), None, 2) == ["a-1", "b-2"]
    with pytest.raises(sx.ExportError, match="not in the export: zz-9"):
        sx.select(list(slugs), ["zz-9"], None)

"""`prepare_sandbox.py swebench-export` on real containers: a generated 30-row SWE-bench Verified export over the
stand-in repositories (services/tasks/sources/swebench_export.standin_rows; each variant row's image is its
stand-in's under the row's name) -> 30 task dirs; 20 of them prepared in one run (environment image from the
published Dockerfile with the uv line from its wheel, history scrub), the table printed; then validated (gold 1,
empty 0, delete-the-test 0, history clean) on a subset, through a sandbox manager with the docker backend and its
mirror: one good row, one whose gold patch does not fix (excluded with the reason), one whose image is missing
(infra); a re-run skips what is done and retries only the infra one. Validating all 20 takes far longer than CI
allows on 2 cores (three `uv run parser.py` per task through the mirror): bench/bench_swebench_export.py measures
that; docs/tasks.md has the figures."""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest

from services.sandbox import offline_build
from services.tasks import cli
from services.tasks.sources import swebench_export as sx
from services.tasks.sources import swebench_like as sl

from .conftest import REPO, containers_of

DATASET_LIKE = REPO / "datasets" / "swebench-verified-like"
GOOD = "psf__requests-90004"


@pytest.fixture(scope="module")
def export(docker_client, tmp_path_factory):
    """The 30-row export (+ a row whose gold patch only adds a blank line, + a row of an image nobody built) and
    every row's image tagged; the tags and the task images made here are removed afterwards."""
    absent = []
    for s in sx.STANDINS:
        try:
            docker_client.images.get(sx.image_of(s))
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            absent.append(s)
    if absent:   # cached by content; CI's test_swebench_like builds them
        sl.build_images(docker_client, sl.DEFAULT_CACHE, DATASET_LIKE, absent)
    d = tmp_path_factory.mktemp("swx")
    rows = sx.standin_rows(30)
    bad = dict(rows[1], instance_id="psf__requests-95555")
    bad["patch"] = bad["test_patch"]           # the "fix" is the test patch again: gold must not score 1
    missing = dict(rows[0], instance_id="psf__requests-96666")   # no image of that name anywhere
    made = []
    for r in rows + [bad]:
        name = sx.image_of(r["instance_id"])
        head, num = r["instance_id"].rsplit("-", 1)
        src = sx.image_of(f"{head}-{90000 + int(num) % 1000}") if r is not bad else sx.image_of(rows[1]["instance_id"])
        if name != src:
            docker_client.images.get(src).tag(*name.rsplit(":", 1))
            made.append(name)
    (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [bad, missing]))
    dataset = f"swxtest{os.getpid()}"
    yield d, rows, bad, missing, dataset
    for img in docker_client.images.list():
        for tag in img.tags:
            if tag.startswith((f"lts-ws/{dataset}", f"lts-env/{dataset}")):
                docker_client.images.remove(tag)
    for name in made:
        docker_client.images.remove(name)


def _argv(d, dataset):
    return ["swebench-export", str(d / "rows.jsonl"), "--dest", str(d / "tasks"), "--dataset", dataset,
            "--out", str(d / "prep"), "--jobs", "2", "--offline-build", "--no-progress"]


def test_thirty_written_twenty_prepared_table_printed(export, capsys, monkeypatch):
    d, rows, bad, missing, dataset = export
    monkeypatch.setenv(offline_build.ENV_FLAG, "1")
    rc = cli.main(_argv(d, dataset) + ["--limit", "20"])
    out = capsys.readouterr().out
    print(out)
    assert "32 of 32 rows have their task dir" in out, out
    assert sorted(p.name for p in (d / "tasks").iterdir()) == sorted(r["instance_id"] for r in rows + [bad, missing])
    assert rc == 0 and "20 prepared (20 selected)" in out, out
    table = [ln for ln in out.splitlines() if re.match(r"^\S+__\S+-\d+ +prepared", ln)]
    assert [ln.split()[0] for ln in table] == [r["instance_id"] for r in rows[:20]], out


def test_validate_subset_then_resume(export, net_admin, docker_client, capsys, monkeypatch):
    d, rows, bad, missing, dataset = export
    monkeypatch.setenv(offline_build.ENV_FLAG, "1")
    monkeypatch.setenv("LTS_MIRROR_DIR", str(net_admin.dir / "mirror"))
    monkeypatch.setattr(cli, "_check_manager_backend", lambda backend: None)   # net_admin runs the docker backend
    clients: dict = {}

    async def factory(base):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = net_admin.client()
        return await clients[loop].create(image=str(base), limits=base.limits, network=base.network)
    monkeypatch.setattr(cli, "_factory", lambda spec: factory)
    sel = [a for i in (GOOD, bad["instance_id"], missing["instance_id"]) for a in ("--only", i)]
    rc = cli.main(_argv(d, dataset) + sel + ["--validate"])
    out = capsys.readouterr().out
    print(out)
    assert rc == 1
    status = {m.group(1): m.group(2) for m in re.finditer(r"^(\S+__\S+-\d+) +(\w+)", out, re.M)}
    assert status == {GOOD: "validated", bad["instance_id"]: "excluded", missing["instance_id"]: "infra"}, out
    assert re.search(rf"^{bad['instance_id']} .*gold solution scored 0", out, re.M), out
    assert "1 validated, 1 excluded, 1 infra (3 selected)" in out, out
    good_line = next(ln for ln in out.splitlines() if ln.startswith(GOOD))
    rc = cli.main(_argv(d, dataset) + sel + ["--validate"])
    again = capsys.readouterr().out
    assert good_line in again.splitlines(), again    # not validated again: the same seconds
    assert "retrying 1 task(s) that ended in an infrastructure failure" in again, again
    assert "32 already there" in again and "1 validated, 1 excluded, 1 infra (3 selected)" in again, again
    assert containers_of(docker_client, net_admin.worker) == []

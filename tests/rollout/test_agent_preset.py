"""Issue 19 items 2-3: ``--preset agent``'s task family (datasets/multiturn) and held-out evaluation.

The gold trajectories (read, edit, submit), run through the real agent loop, tools, sandbox manager and
clean grading with the preset's agent (its 8 tools, budgets), solve every training and held-out task with
3 tool calls over 3 turns; the held-out split shares no task id and no file with the training split; a policy that
replays a training task's memorised fix on its held-out twin (right file, right line) fails it;
cookbook.evaluation scores scripted policies right (gold 1.0, empty 0.0) and its result reaches the
viewer and the reward plot."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil

import matplotlib.image as mpimg
import numpy as np
import pytest
from transformers import AutoTokenizer

from cookbook.agent import TOOLS
from cookbook.agent.scripted import ScriptedPolicy
from cookbook.evaluation import evaluate, record
from cookbook.gold import gold_turns_for
from cookbook.report import write_reports
from cookbook.rollout import Rollouts, agent_config
from helpers import REPO
from services.common.renderers.qwen3 import tool_call_text
from services.tasks.preparation.prepare import base_of, prepare_tasks
from services.tasks.sources.multiturn import VARIANTS, write_multiturn_dataset
from services.tasks.task import hash_tree, load_dataset

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")
MULTITURN = REPO / "datasets" / "multiturn"


def test_committed_multiturn_set_matches_the_specs(tmp_path):
    write_multiturn_dataset(tmp_path / "multiturn")
    assert hash_tree(tmp_path / "multiturn") == hash_tree(MULTITURN), \
        "datasets/multiturn is out of date: run `prepare_sandbox.py write-multiturn`"


def _files(task) -> dict[str, str]:
    """sha256 of every file of the task's repository and of the verifier's test files."""
    roots = [task.path / "environment" / "repo", task.path / "tests" / "files"]
    return {f"{r.name}/{p.relative_to(r)}": hashlib.sha256(p.read_bytes()).hexdigest()
            for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


def test_heldout_shares_no_task_id_or_repo_content_with_train():
    ds = load_dataset(MULTITURN)
    train, heldout = ds.split("train"), ds.split("heldout")
    assert not ds.errors and len(train) == len(heldout) == len(VARIANTS) >= 8
    assert not {t.name for t in train} & {t.name for t in heldout}
    train_files = {h for t in train for h in _files(t).values()}
    assert not train_files & {h for t in heldout for h in _files(t).values()}
    for t in ds.tasks:   # the instruction names the file and the failing assertion, never the fix
        edit = json.loads((t.solution_dir / "edit.json").read_text())
        assert edit["path"] in t.instruction and edit["new"].strip() not in t.instruction
        assert "/" in edit["path"]  # the function lives in a package of its own


def test_gold_solves_every_task_in_three_turns_and_evaluation_scores_policies(sandbox_admin, tiny_model, tmp_path):
    ds = load_dataset(MULTITURN)
    train, heldout = ds.split("train"), ds.split("heldout")
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    cfg = agent_config("agent")
    assert cfg.budgets.max_turns >= 3 and sorted(cfg.tools) == sorted(TOOLS)   # the agent's 8 tools

    async def main():
        manifest = await prepare_tasks(ds.tasks, tmp_path / "prep", progress=False, log=lambda s: None)
        bases = {t.name: base_of(manifest["tasks"][t.slug]) for t in ds.tasks}
        client = sandbox_admin.client()

        async def factory(base):
            return await client.create(base_dir=str(base))

        ro = Rollouts(factory, bases, tok, cfg, concurrency=8)

        def gold(task, k):
            return ScriptedPolicy(tok, gold_turns_for(task, cfg.tools, cfg.budgets.max_turns))

        twin = {f"lts-multiturn/{v.heldout_fn}": f"lts-multiturn/{v.fn}" for v in VARIANTS}
        by_name = {t.name: t for t in ds.tasks}

        def memorised(task, k):
            """The training twin's fix (its new line) at the held-out task's own path and line."""
            fix = json.loads((by_name[twin[task.name]].solution_dir / "edit.json").read_text())
            own = json.loads((task.solution_dir / "edit.json").read_text())
            return ScriptedPolicy(tok, [tool_call_text("read", {"path": own["path"]}),
                                        tool_call_text("edit", {"path": own["path"], "line": own["line"],
                                                                "new": fix["new"]})])

        return await asyncio.gather(evaluate(ro, train, gold), evaluate(ro, heldout, gold),
                                    evaluate(ro, train, lambda t, k: ScriptedPolicy(tok, [])),
                                    evaluate(ro, heldout, memorised, samples_per_task=1))

    g_train, g_held, empty, mem = asyncio.run(main())
    for res, tasks in ((g_train, train), (g_held, heldout)):
        assert res.pass_rate == 1.0 and res.mean_reward == 1.0 and res.n == len(tasks) and res.n_failed == 0
        assert res.by_task == {t.name: 1.0 for t in tasks}
        for tr in res.trajectories:
            calls = [c["name"] for turn in tr.turns for c in turn.tool_calls]
            assert calls == ["read", "edit", "submit"] and sum(bool(t.tool_calls) for t in tr.turns) >= 3, tr.to_text()
            assert not any(turn.appended_eos for turn in tr.turns), "a gold turn hit max_output_tokens"
    assert empty.pass_rate == 0.0 and empty.mean_reward == 0.0 and empty.n == len(train)
    assert mem.pass_rate == 0.0 and mem.n == len(heldout), mem.by_task

    # the figures reach result.json's "heldout", the viewer and the reward plot
    run = tmp_path / "grpo-run"
    result = {"mode": "grpo", "model": "tiny", "steps": [{"step": i, "mean_reward": 0.2} for i in range(4)]}
    record(result, 0, empty)
    record(result, 3, g_held)
    assert result["heldout"]["before"]["pass_rate"] == 0.0 and result["heldout"]["after"]["pass_rate"] == 1.0
    assert [p["step"] for p in result["heldout"]["points"]] == [0, 3]
    write_reports(run, result, "grpo")
    html = (run / "viewer.html").read_text()
    assert "held-out evaluation" in html and "pass rate before 0.000 (step 0) &rarr; after 1.000 (step 3)" in html
    img = (mpimg.imread(run / "results" / "grpo" / "reward_curve.png")[..., :3] * 255).round().astype(int)
    red = np.all(np.abs(img - [214, 39, 40]) <= 12, axis=-1).sum()   # the held-out points (tab:red)
    assert red > 100, red

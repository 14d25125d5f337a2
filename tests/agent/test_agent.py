"""Issue 5: the client-side agent with scripted policies through the real parser, tools and
verifier (host dev sandbox here; tests/rollout uses the real sandbox manager)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from cookbook.agent import Budgets, SWEAgent
from cookbook.agent.scripted import ScriptedPolicy, gold_turns, tool_call_text
from cookbook.agent.tools import ToolBox
from cookbook.gold import gold_turns_for
from cookbook.presets import PRESETS
from cookbook.rollout import agent_config
from cookbook.tasks import load_tasks
from helpers import REPO
from services.tasks.grading.verifier import verify
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

MICRO = REPO / "datasets" / "micro"


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model[1]))


@pytest.fixture(scope="module")
def tasks():
    return load_dataset(MICRO).tasks


async def _rollout(task, tmp: Path, policy, tokenizer, budgets=None):
    base = tmp / f"base-{task.name.replace('/', '_')}"
    if not base.exists():
        build_base(task, base)
    sb = await HostSandbox.create(base_dir=base)
    try:
        traj = await SWEAgent(policy, tokenizer, budgets).run(task.instruction, sb, task_id=task.name)
        res = await verify(sb, task)
        traj.reward = res.reward
        return traj, res
    finally:
        await sb.close()


def _edit(task):
    return json.loads((task.solution_dir / "edit.json").read_text())


def test_gold_policy_scores_one_and_nothing_scores_zero_on_every_micro_task(tasks, tokenizer, tmp_path):
    async def one(t):
        gold, _ = await _rollout(t, tmp_path, ScriptedPolicy(tokenizer, gold_turns(_edit(t))), tokenizer)
        empty, _ = await _rollout(t, tmp_path, ScriptedPolicy(tokenizer, [tool_call_text("submit", {})]), tokenizer)
        return (t.name, gold.reward, empty.reward, gold.stop_reason)

    async def go():
        out = []
        for i in range(0, len(tasks), 4):
            out += await asyncio.gather(*(one(t) for t in tasks[i:i + 4]))
        return out

    results = asyncio.run(go())
    bad = [r for r in results if r[1] != 1.0 or r[2] != 0.0 or r[3] != "submitted"]
    assert not bad, f"(task, gold reward, empty reward, stop): {bad}"


def test_prompts_extend_exactly_and_match_the_chat_template(tasks, tokenizer, tmp_path):
    t = tasks[0]
    turns = [tool_call_text("list_dir", {}), tool_call_text("read", {"path": _edit(t)["path"]}),
             "I will look at the tests first.\n" + tool_call_text("run_test", {}), *gold_turns(_edit(t))[1:]]
    policy = ScriptedPolicy(tokenizer, turns)
    traj, _ = asyncio.run(_rollout(t, tmp_path, policy, tokenizer))
    assert traj.reward == 1.0 and len(traj.turns) == 5 and len(traj.segments) == 1
    seg = traj.segments[0]
    agent = SWEAgent(policy, tokenizer)

    schemas = ToolBox(None).schemas()
    n_msgs = 2
    for k, turn in enumerate(traj.turns):
        prompt = seg.tokens[: turn.prompt_len]
        assert policy.prompts[k] == prompt, "the policy saw exactly the stored prompt"
        # the stored prompt equals the chat template's rendering of the conversation so far
        msgs = traj.messages[:n_msgs]
        assert agent.render(msgs, schemas) == prompt, f"turn {k}: incremental tokens drifted from the template"
        if k + 1 < len(traj.turns):
            nxt = traj.turns[k + 1]
            upto = turn.prompt_len + len(turn.sampled_tokens)
            assert seg.tokens[: nxt.prompt_len][:upto] == prompt + turn.sampled_tokens
            n_msgs += 1 + len(turn.observations)
        # stored tokens decode to what the agent saw
        assert tokenizer.decode(turn.sampled_tokens[:-1]) == turn.text
        assert [i for i, s in enumerate(seg.sampled) if s][:1] == [traj.turns[0].prompt_len]
    assert sum(seg.sampled) == sum(len(t.sampled_tokens) for t in traj.turns)


def test_bad_model_output_becomes_error_observations(tasks, tokenizer, tmp_path):
    t = tasks[0]
    huge = "word " * 12_000
    turns = ["<tool_call>\n{not json}\n</tool_call>", tool_call_text("rm_rf", {"path": "/"}),
             "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": huge}}) + "\n</tool_call>",
             tool_call_text("read", {"path": "../../etc/passwd"}),
             tool_call_text("edit", {"path": "/etc/hosts", "line": 1, "new": "x"}),
             tool_call_text("read", {"path": "missing.py"}), "plain text, no tool call",
             "<tool_call>{\"name\": \"read\"", *gold_turns(_edit(t))]
    big = Budgets(max_output_tokens=60_000, max_input_tokens=65_000, max_context=130_000)
    traj, _ = asyncio.run(_rollout(t, tmp_path, ScriptedPolicy(tokenizer, turns), tokenizer, big))
    obs = [o for turn in traj.turns for o in turn.observations]
    assert "not valid JSON" in obs[0]
    assert "unknown tool" in obs[1]
    assert "too large" in obs[2]
    assert "outside the workspace" in obs[3] and "outside the workspace" in obs[4]
    assert "no such file" in obs[5]
    assert "No tool call found" in obs[6]
    assert "not closed" in obs[7]
    assert traj.stop_reason == "submitted" and traj.reward == 1.0, "the rollout continued to the gold fix"


def test_budgets_max_turns_and_context_overflow(tasks, tokenizer, tmp_path):
    t = tasks[0]
    loop = [tool_call_text("list_dir", {})] * 10
    traj, _ = asyncio.run(_rollout(t, tmp_path, ScriptedPolicy(tokenizer, loop), tokenizer, Budgets(max_turns=3)))
    assert traj.stop_reason == "max_turns" and len(traj.turns) == 3 and traj.episode_done
    traj, _ = asyncio.run(_rollout(t, tmp_path, ScriptedPolicy(tokenizer, loop), tokenizer,
                                   Budgets(max_input_tokens=700, max_context=900)))
    assert traj.stop_reason == "context_overflow" and traj.masked
    traj, _ = asyncio.run(_rollout(t, tmp_path, ScriptedPolicy(tokenizer, loop), tokenizer,
                                   Budgets(max_turns=6, keep_last_observations=2)))
    assert len(traj.segments) > 1 and traj.segment_breaks == len(traj.segments) - 1
    assert "[older observation elided]" in json.dumps(traj.messages)


def test_quickstart_gold_is_one_turn_in_the_presets_tool_schema(tasks, tokenizer, tmp_path):
    """The embedded default's agent (cookbook/presets.py quickstart: one turn, the edit tool) solves
    every quickstart task with its gold trajectory; with submit and one turn, both calls share a message."""

    cfg = agent_config("quickstart")
    assert cfg.tools == PRESETS["quickstart"].agent["tools"] and cfg.budgets.max_turns == 1
    t = tasks[0]
    both = gold_turns_for(t, ["edit", "submit"], max_turns=1)
    assert len(both) == 1 and both[0].count("<tool_call>") == 2 and '"submit"' in both[0]
    assert gold_turns_for(t, ["edit", "submit"]) == gold_turns(_edit(t), read=False)

    async def one(task):
        turns = gold_turns_for(task, cfg.tools, cfg.budgets.max_turns)
        agent = SWEAgent(ScriptedPolicy(tokenizer, turns), tokenizer, cfg.budgets, tools=cfg.tools,
                         system_prompt=cfg.system_prompt, compact_schemas=cfg.compact_schemas)
        base = tmp_path / f"qs-{task.name.replace('/', '_')}"
        build_base(task, base)
        sb = await HostSandbox.create(base_dir=base)
        try:
            traj = await agent.run(task.instruction, sb, task_id=task.name)
            return traj, (await verify(sb, task)).reward
        finally:
            await sb.close()

    for task in load_tasks("micro", "train")[: PRESETS["quickstart"].max_tasks]:  # the quickstart's tasks
        traj, reward = asyncio.run(one(task))
        assert len(traj.turns) == 1 and [c["name"] for c in traj.turns[0].tool_calls] == ["edit"], traj.to_text()
        assert len(traj.turns[0].sampled_tokens) <= PRESETS["quickstart"].agent["budgets"]["max_output_tokens"]
        assert reward == 1.0, (task.name, traj.to_text())

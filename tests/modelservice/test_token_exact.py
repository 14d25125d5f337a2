"""Issue 5 acceptance 1 (ModelService half): every turn's stored tokens decode to what the agent
received; turn k+1's prompt starts with turn k's prompt + sampled tokens, else a new segment is
started and counted; stored logprobs equal the backend's compute_logprobs; budgets in one place."""

from __future__ import annotations

import asyncio
import json

import pytest
from tinker import types

from cookbook.agent.agent import SampleOut
from cookbook.data import rl_datums
from services.common.budgets import Budgets
from services.common.renderers import renderer_for
from services.common.renderers.qwen3 import reply_message
from services.common.trajectory import Trajectory
from services.modelservice.budget import BudgetExceeded, BudgetGuard
from services.modelservice.sessions import Recorder, Session

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a bash command",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                        "required": ["command"]}}}
CALL_TEXT = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'


def _render_ids(tokenizer, messages, tools) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _check_logprobs(sampling_client, traj: Trajectory, tol: float = 1e-3) -> int:
    n = 0
    for seg in traj.segments:
        ref = sampling_client.compute_logprobs(types.ModelInput.from_ints(seg.tokens)).result(timeout=120)
        for i, (flag, lp) in enumerate(zip(seg.sampled, seg.logprobs)):
            if flag:
                assert abs(ref[i] - lp) < tol, f"position {i}: stored {lp} vs compute_logprobs {ref[i]}"
                n += 1
    return n


def _check_turns(tokenizer, traj: Trajectory, received: list[dict]) -> None:
    """Stored sampled tokens sit at the turn's place in its segment and decode to what the agent got."""
    stops = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    for t, msg in zip(traj.turns, received, strict=True):
        seg = traj.segments[t.segment]
        assert seg.tokens[t.prompt_len:t.prompt_len + len(t.sampled_tokens)] == t.sampled_tokens
        assert all(seg.sampled[t.prompt_len:t.prompt_len + len(t.sampled_tokens)])
        body = t.sampled_tokens[:-1] if t.sampled_tokens and t.sampled_tokens[-1] in stops else t.sampled_tokens
        text = tokenizer.decode(body, skip_special_tokens=False)
        assert text == t.text
        got, _ = reply_message(text, id_prefix=f"call_{t.index}")
        assert (got.get("content") or "") == (msg.get("content") or "")
        def calls(m: dict) -> list:
            return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []]
        assert calls(got) == calls(msg)
    for i, seg in enumerate(traj.segments):   # trained positions are exactly the turns' samples
        mask = [0] * len(seg.tokens)
        for t in traj.turns:
            if t.segment == i:
                mask[t.prompt_len:t.prompt_len + len(t.sampled_tokens)] = [1] * len(t.sampled_tokens)
        assert seg.sampled == mask


def test_multi_turn_sampled_conversation_is_token_exact(modelservice, tokenizer, sampling_client):
    """A client that echoes the assistant messages back (with the extra keys OpenAI SDKs add)
    stays in one segment; a deliberately rewritten history starts a new, counted segment."""
    with modelservice.client() as c:
        sid = c.post("/sessions", json={"task_id": "exact"}).json()["session_id"]
        msgs = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix clamp.py please."}]
        received, sent = [], []
        for k in range(4):
            body = {"model": "m", "messages": msgs, "tools": [BASH], "max_tokens": 16 + 4 * k, "seed": 100 + k}
            d = c.post(f"/s/{sid}/v1/chat/completions", json=body).json()
            m = d["choices"][0]["message"]
            received.append(m)
            sent.append([dict(x) for x in msgs])
            echo = {**m, "refusal": None, "annotations": [], "function_call": None}
            msgs = msgs + [echo, {"role": "user", "content": f"Observation {k}: nothing changed.\nContinue."}]
        # deliberately rewrite the history (an agent that edits an earlier message)
        edited = [dict(x) for x in msgs]
        edited[1] = {"role": "user", "content": "Fix clamp.py, and be quick."}
        d = c.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": edited, "tools": [BASH],
                                                          "max_tokens": 8, "seed": 5}).json()
        received.append(d["choices"][0]["message"])
        sent.append(edited)
        rec = c.get(f"/sessions/{sid}").json()

    traj = Trajectory.from_json(rec["trajectory"])
    info = rec["turn_info"]
    assert len(traj.turns) == 5
    assert [t.segment for t in traj.turns] == [0, 0, 0, 0, 1]
    assert traj.segment_breaks == 1 and rec["session"]["segment_breaks"] == 1
    assert [i["prompt"] for i in info] == ["template", "spliced", "spliced", "spliced", "template"]
    assert info[4]["new_segment"] and "history rewritten" in info[4]["reason"]
    _check_turns(tokenizer, traj, received)
    stops = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    for k, t in enumerate(traj.turns):
        seg = traj.segments[t.segment]
        prompt = seg.tokens[:t.prompt_len]
        # the prompt is the agent's conversation: as text it is exactly the chat template's rendering
        rendered = tokenizer.apply_chat_template(sent[k], tools=[BASH], add_generation_prompt=True, tokenize=False)
        if all(p.sampled_tokens and p.sampled_tokens[-1] in stops or p.stop_reason == "length"
               for p in traj.turns[:k]):
            assert tokenizer.decode(prompt, skip_special_tokens=False) == rendered
        if k in (1, 2, 3):
            prev = traj.turns[k - 1]
            prev_full = seg.tokens[:prev.prompt_len] + prev.sampled_tokens
            assert prompt[:len(prev_full)] == prev_full, "turn k+1's prompt must start with turn k's prompt + sample"
    # the rewritten turn really did not extend the previous tokens, and it is the template's tokens
    t4, t3 = traj.turns[4], traj.turns[3]
    prev_full = traj.segments[0].tokens[:t3.prompt_len] + t3.sampled_tokens
    new_prompt = traj.segments[1].tokens[:t4.prompt_len]
    assert new_prompt[:len(prev_full)] != prev_full
    assert new_prompt == _render_ids(tokenizer, sent[4], [BASH])
    assert _check_logprobs(sampling_client, traj) == sum(len(t.sampled_tokens) for t in traj.turns)
    # the segments train with the cookbook's own code
    datums = rl_datums([traj], [1.0])
    assert len(datums) == 2


def test_canonical_tool_call_conversation_matches_the_template_exactly(modelservice, tokenizer, sampling_client):
    """Replies in the model's canonical format (tool calls, tool results): every spliced prompt
    is token for token the chat template's rendering of what the agent sent."""
    replies = [CALL_TEXT, '<tool_call>\n{"name": "bash", "arguments": {"command": "cat a.py"}}\n</tool_call>',
               "It is fixed."]
    with modelservice.client() as c:
        sid = c.post("/sessions", json={"replay": replies}).json()["session_id"]
        msgs = [{"role": "user", "content": "Fix a.py"}]
        received, sent = [], []
        for k in range(3):
            d = c.post(f"/s/{sid}/v1/chat/completions", json={"model": "m", "messages": msgs, "tools": [BASH]}).json()
            m = d["choices"][0]["message"]
            received.append(m)
            sent.append(msgs)
            msgs = msgs + [m] + [{"role": "tool", "tool_call_id": tc["id"], "content": f"out {k}\n"}
                                 for tc in m.get("tool_calls") or []]
        rec = c.delete(f"/sessions/{sid}").json()
    traj = Trajectory.from_json(rec["trajectory"])
    assert len(traj.segments) == 1 and [i["prompt"] for i in rec["turn_info"]] == ["template", "spliced", "spliced"]
    assert all(i["template_match"] for i in rec["turn_info"])
    for k, t in enumerate(traj.turns):
        assert traj.segments[0].tokens[:t.prompt_len] == _render_ids(tokenizer, sent[k], [BASH])
    _check_turns(tokenizer, traj, received)
    assert traj.turns[0].tool_calls == [{"name": "bash", "arguments": {"command": "ls -la"}}]
    assert traj.turns[0].observations == ["out 0\n"] and traj.turns[1].observations == ["out 1\n"]
    _check_logprobs(sampling_client, traj)
    # saved on close
    assert (modelservice.traj_dir / sid / "trajectory.json").exists()


# ---- budgets (in process, a fake sampler: no backend needed)

class _Fake:
    def __init__(self, eos: int, tok):
        self.eos, self.tok, self.seen = eos, tok, []

    async def sample(self, prompt, max_tokens, stop, **kw):
        self.seen.append((list(prompt), max_tokens))
        ids = self.tok.encode("ok", add_special_tokens=False)[:max_tokens]
        return SampleOut(ids + [self.eos], [-0.5] * (len(ids) + 1), "stop")


def _recorder(tokenizer, **budgets):
    r = renderer_for(tokenizer)
    fake = _Fake(r.eos_id, tokenizer)
    return Recorder(r, fake, BudgetGuard(Budgets(**budgets))), fake


def test_budgets_are_enforced_in_one_place(tokenizer):
    async def go():
        rec, fake = _recorder(tokenizer, max_turns=2, max_output_tokens=5, max_observation_chars=40,
                              keep_last_observations=1)
        s = Session(id="b")
        msgs = [{"role": "user", "content": "hi"}]
        r1 = await rec.complete(s, {"messages": msgs, "max_tokens": 100})
        assert fake.seen[-1][1] == 5                                   # max_output_tokens caps max_tokens
        msgs += [r1.message, {"role": "tool", "content": "x" * 100}]
        await rec.complete(s, {"messages": msgs})
        assert "characters elided" in s.traj.messages[-2]["content"]   # observation cut to 40 chars
        with pytest.raises(BudgetExceeded) as e:
            await rec.complete(s, {"messages": msgs + [s.traj.messages[-1], {"role": "user", "content": "more"}]})
        assert e.value.code == "max_turns_exceeded" and s.traj.stop_reason == "max_turns"

        rec, _ = _recorder(tokenizer, keep_last_observations=1)
        s = Session(id="e")
        msgs = [{"role": "user", "content": "go"}]
        for k in range(3):
            r = await rec.complete(s, {"messages": msgs})
            msgs = msgs + [r.message, {"role": "tool", "content": f"obs {k}"}]
        # the second observation elided the first: the prompt was rewritten -> a new, counted segment
        assert s.traj.segment_breaks == 1 and s.turn_info[2]["new_segment"]
        assert "[older observation elided]" in [m["content"] for m in s.traj.messages]

        rec, _ = _recorder(tokenizer, max_input_tokens=10)
        s = Session(id="o")
        with pytest.raises(BudgetExceeded) as e:
            await rec.complete(s, {"messages": [{"role": "user", "content": "a long prompt " * 10}]})
        assert e.value.code == "context_length_exceeded"
        assert s.traj.stop_reason == "context_overflow" and s.traj.masked
    asyncio.run(go())

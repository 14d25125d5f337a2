"""Per-session, per-turn token-exact recording of an agent's model calls.

A session (one per sandbox / rollout) holds a ``services.common.trajectory.Trajectory``: turns
(prompt length, sampled ids, logprobs, text, tool calls) and token *segments* that only grow by
appending, so ``cookbook/data.py`` turns a black-box rollout into the same datums as a client-
side one.

Building the prompt of a call (``history`` = ``splice``, the default):
* if the request's messages are the previous call's messages, then the assistant message this
  service returned (compared after normalisation: ids and extra keys do not matter), then new
  messages, the prompt is *the previous prompt + the sampled tokens* followed by the template's
  rendering of the new messages (cut at the ``<|im_end|>`` that closes the assistant turn, whose
  text never depends on how the assistant's own turn was re-serialised). The model sees exactly
  what it sampled: no re-tokenisation drift;
* otherwise (the agent rewrote its history, or ``history: render``) the prompt is the chat
  template's rendering of the messages, tokenised.
Either way the prompt is then checked: if it starts with the previous prompt + sampled tokens,
the turn extends the current segment; otherwise a new segment starts and is counted
(``segment_breaks``, with the reason in ``turn_info``). ``turn_info[k].template_match`` tells
whether the prompt equals the plain template tokenisation (true whenever the model's output is
in canonical form).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from services.common.renderers import Renderer, message_key, normalize_messages, normalize_tools
from services.common.renderers.qwen3 import reply_message
from services.common.trajectory import SampleOut, Segment, Trajectory, Turn

from .budget import BudgetExceeded, BudgetGuard

SESSION_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def new_session_id() -> str:
    return "ms-" + secrets.token_hex(16)


def valid_session_id(sid: str) -> bool:
    return 1 <= len(sid) <= 128 and set(sid) <= SESSION_ID_CHARS


@dataclass
class _Last:
    messages: list[dict[str, Any]]   # normalised request messages (after budgets)
    tools_key: str
    reply: dict[str, Any]            # normalised assistant message we returned
    end: int                         # segment length after the sample (+ an appended <|im_end|>)


@dataclass
class CallResult:
    message: dict[str, Any]          # OpenAI assistant message
    finish_reason: str               # stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    sampled: list[int]
    logprobs: list[float]
    turn: int


@dataclass
class Session:
    id: str
    task_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    traj: Trajectory = field(default_factory=lambda: Trajectory(task_id="", instruction=""))
    turn_info: list[dict[str, Any]] = field(default_factory=list)
    last: _Last | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    requests: int = 0
    rejected: int = 0
    closed: bool = False
    replay: list[str] | None = None  # test double: scripted replies, teacher-forced (real logprobs)
    policy: Any = None               # a cookbook.agent Policy that samples this session (in-process rollouts)

    def stats(self) -> dict[str, Any]:
        return {"session_id": self.id, "task_id": self.task_id, "turns": len(self.traj.turns),
                "requests": self.requests, "rejected": self.rejected, "segments": len(self.traj.segments),
                "segment_breaks": self.traj.segment_breaks,
                "template_mismatches": sum(1 for t in self.turn_info if not t["template_match"]),
                "tokens": self.traj.token_counts(), "stop_reason": self.traj.stop_reason,
                "masked": self.traj.masked, "age_s": round(time.time() - self.created, 3)}

    def record(self) -> dict[str, Any]:
        """Everything recorded: the trajectory (Trajectory.to_json) plus per-turn prompt facts."""
        self.traj.timings["total_s"] = time.time() - self.created
        self.traj.timings["sample_s"] = sum(t.sample_s for t in self.traj.turns)
        return {"session": self.stats(), "metadata": self.metadata, "turn_info": self.turn_info,
                "trajectory": self.traj.to_json()}


class Recorder:
    """Builds prompts, samples, and records turns. One per service; sessions are independent."""

    def __init__(self, renderer: Renderer, sampler, guard: BudgetGuard, history: str = "splice",
                 temperature: float = 1.0, top_p: float = 1.0, record_requests: bool = False):
        if history not in ("splice", "render"):
            raise ValueError("history must be 'splice' or 'render'")
        self.r, self.sampler, self.guard, self.history = renderer, sampler, guard, history
        self.temperature, self.top_p = temperature, top_p
        self.record_requests = record_requests   # keep each call's normalised messages in turn_info (tests)

    # -- prompt construction (pure; runs in a worker thread)
    def _prompt(self, s: Session, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                tools_key: str) -> tuple[list[int], str, bool, list[str]]:
        full = self.r.render(msgs, tools, True)
        template_ids = self.r.encode(full)
        prompt, how, new_obs = template_ids, "template", []
        last = s.last
        n = len(last.messages) if last else 0
        if (self.history == "splice" and last and tools_key == last.tools_key and len(msgs) > n
                and [message_key(m) for m in msgs[:n]] == [message_key(m) for m in last.messages]
                and message_key(msgs[n]) == message_key(last.reply)):
            prefix = self.r.render(msgs[:n + 1], tools, False)
            close = self.r.eos_text + "\n"
            if full.startswith(prefix) and prefix.endswith(close):
                seg = s.traj.segments[-1]
                prompt = seg.tokens[:last.end] + self.r.encode(full[len(prefix) - 1:])
                how = "spliced"
                new_obs = [m.get("content") or "" for m in msgs[n + 1:]]
        return prompt, how, prompt == template_ids, new_obs

    async def _forced(self, s: Session, prompt: list[int], max_tokens: int):
        """The session's next scripted reply (the last one repeats), scored by the backend."""
        assert s.replay
        text = s.replay[min(len(s.traj.turns), len(s.replay) - 1)]
        toks = await asyncio.to_thread(self.r.encode, text)
        toks, reason = toks + [self.r.eos_id], "stop"
        if len(toks) > max_tokens:
            toks, reason = toks[:max_tokens], "length"
        lps = await self.sampler.compute_logprobs(prompt + toks)
        return SampleOut(toks, [float(x) for x in lps[len(prompt):]], reason, source="replay")

    async def complete(self, s: Session, body: dict[str, Any]) -> CallResult:
        """One chat completion for session ``s`` (serialised per session)."""
        async with s.lock:
            s.requests += 1
            try:
                return await self._complete(s, body)
            except BudgetExceeded as e:
                s.rejected += 1
                if not s.traj.stop_reason:
                    s.traj.stop_reason = e.stop_reason
                    s.traj.masked = e.stop_reason == "context_overflow" and self.guard.b.mask_overflow
                raise

    async def _complete(self, s: Session, body: dict[str, Any]) -> CallResult:
        self.guard.check_call(len(s.traj.turns), time.time() - s.created)
        msgs = self.guard.apply_to_messages(normalize_messages(body.get("messages")))
        tools = normalize_tools(body.get("tools"))
        tools_key = json.dumps(tools, sort_keys=True)
        self.guard.check_chars(sum(len(json.dumps(m, ensure_ascii=False)) for m in msgs) + len(tools_key))
        prompt, how, template_match, new_obs = await asyncio.to_thread(self._prompt, s, msgs, tools, tools_key)
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        max_tokens = self.guard.max_tokens(len(prompt), requested)

        traj = s.traj
        if not traj.instruction:
            traj.instruction = next((m["content"] for m in msgs if m["role"] == "user"), "")
        seg = traj.segments[-1] if traj.segments else None
        info: dict[str, Any] = {"turn": len(traj.turns), "prompt": how, "template_match": template_match,
                                "new_segment": False, "reason": ""}
        if self.record_requests:
            info["messages"], info["tools"] = msgs, tools
        if seg is not None and s.last and len(prompt) >= s.last.end and prompt[:s.last.end] == seg.tokens[:s.last.end]:
            seg.extend(prompt[s.last.end:], sampled=False)
            if traj.turns and new_obs:
                traj.turns[-1].observations = new_obs
        else:
            if seg is not None:
                info["new_segment"] = True
                info["reason"] = ("history rewritten (messages differ from the previous call + its reply)"
                                  if how == "template" else "prompt does not extend the previous tokens")
            seg = Segment()
            seg.extend(prompt, sampled=False)
            traj.segments.append(seg)

        temperature = float(body["temperature"]) if body.get("temperature") is not None else self.temperature
        top_p = float(body["top_p"]) if body.get("top_p") is not None else self.top_p
        t0 = time.time()
        if s.replay is not None:
            out = await self._forced(s, prompt, max_tokens)
        elif s.policy is not None:   # the rollout's policy: the current sampling client of the training loop
            out = await s.policy.sample(prompt, max_tokens)
        else:
            out = await self.sampler.sample(prompt, max_tokens, self.r.stop_ids, temperature=temperature, top_p=top_p,
                                            seed=body.get("seed"), session=s.id)
        sample_s = time.time() - t0
        if len(out.logprobs) != len(out.tokens):
            raise RuntimeError(f"sampler returned {len(out.tokens)} tokens but {len(out.logprobs)} logprobs")

        turn = Turn(index=len(traj.turns), segment=len(traj.segments) - 1, prompt_len=len(prompt),
                    sampled_tokens=list(out.tokens), logprobs=list(out.logprobs), stop_reason=out.stop_reason,
                    text="", sample_s=sample_s, sampled_by=out.source)
        seg.extend(out.tokens, sampled=True, logprobs=out.logprobs)
        body_ids = list(out.tokens)
        if body_ids and body_ids[-1] in self.r.stop_ids:
            body_ids = body_ids[:-1]
        if not out.tokens or out.tokens[-1] != self.r.eos_id:
            # the turn as the template closes it: <|im_end|> (not trained on) after a cut-off or <|endoftext|>
            seg.extend([self.r.eos_id], sampled=False)
            turn.appended_eos = True
        turn.text = await asyncio.to_thread(self.r.decode, body_ids)
        msg, errors = reply_message(turn.text, self.guard.b.max_tool_call_chars, id_prefix=f"call_{turn.index}")
        turn.errors = errors
        turn.tool_calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                           for c in msg.get("tool_calls") or []]
        traj.turns.append(turn)
        s.turn_info.append(info)
        reply_norm = normalize_messages([msg])[0]
        traj.messages = msgs + [reply_norm]
        s.last = _Last(messages=msgs, tools_key=tools_key, reply=reply_norm, end=len(seg.tokens))
        finish = "tool_calls" if msg.get("tool_calls") else ("length" if out.stop_reason == "length" else "stop")
        return CallResult(message=msg, finish_reason=finish, prompt_tokens=len(prompt),
                          completion_tokens=len(out.tokens), sampled=list(out.tokens), logprobs=list(out.logprobs),
                          turn=turn.index)

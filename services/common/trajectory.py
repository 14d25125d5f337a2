"""What an agent run leaves behind: turns (for people) and token segments (for training).

A *segment* is one token sequence that only ever grew by appending: the prompt, then each
turn's sampled tokens and the observation tokens after them. Training uses one datum per
segment (weights on sampled tokens only), so a 30-turn rollout costs one forward pass over
its tokens, not 30 re-encoded prompts. A new segment starts only when the prompt had to be
rewritten (old observations elided); ``Trajectory.segment_breaks`` counts that.

Shared by the agent loop (cookbook/agent) and the ModelService (services/modelservice), which both record a
rollout as a ``Trajectory`` of the ``SampleOut`` their samplers drew, and by the recipes that train on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SAMPLED = "sampler"   # SampleOut.source / Turn.sampled_by of a turn a Tinker sampling client drew


@dataclass
class SampleOut:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"
    # "sampler": drawn by a Tinker sampling client (TinkerPolicy, the ModelService's sampler); anything else (a
    # scripted, replayed or teacher-forced policy) is never trained on by RL (rl_loop.train_batch refuses it)
    source: str = ""


@dataclass
class Segment:
    tokens: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)     # 1 where the policy sampled the token
    logprobs: list[float] = field(default_factory=list)  # sampler logprob where sampled, else 0

    def extend(self, toks: list[int], sampled: bool, logprobs: list[float] | None = None) -> None:
        self.tokens.extend(toks)
        self.sampled.extend([1 if sampled else 0] * len(toks))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(toks))

    @property
    def n_sampled(self) -> int:
        return sum(self.sampled)


@dataclass
class Turn:
    index: int
    segment: int
    prompt_len: int                 # tokens of the segment before this turn's sample (= the prompt)
    sampled_tokens: list[int]
    logprobs: list[float]
    stop_reason: str                # the sampler's: stop | length
    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    appended_eos: bool = False      # the sample hit max_tokens: <|im_end|> was appended (not trained on)
    sample_s: float = 0.0
    tools_s: float = 0.0
    sampled_by: str = ""            # SampleOut.source: "sampler" when a Tinker sampling client drew it


@dataclass
class Trajectory:
    task_id: str
    instruction: str
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""           # submitted | max_turns | context_overflow | timeout | error
    episode_done: bool = False
    masked: bool = False            # excluded from training (context overflow by default)
    reward: float | None = None
    verifier: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_status: int | None = None  # the HTTP status of the call that ended the loop in error, if any
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def segment_breaks(self) -> int:
        return max(0, len(self.segments) - 1)

    def token_counts(self) -> dict[str, int]:
        return {"sampled": sum(s.n_sampled for s in self.segments),
                "total": sum(len(s.tokens) for s in self.segments),
                "final_context": len(self.segments[-1].tokens) if self.segments else 0}

    def summary(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "reward": self.reward, "episode_done": self.episode_done,
                "turns_used": len(self.turns), "stop_reason": self.stop_reason, "masked": self.masked,
                "time_seconds": round(self.timings.get("total_s", 0.0), 3), "tokens": self.token_counts(),
                "segment_breaks": self.segment_breaks, "error": self.error, "timings": self.timings}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Trajectory":
        d = {k: v for k, v in d.items() if k != "summary"}
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        d["segments"] = [Segment(**s) for s in d.get("segments", [])]
        return cls(**d)

    def to_text(self) -> str:
        lines = [f"# task {self.task_id}: reward={self.reward} stop={self.stop_reason} turns={len(self.turns)}", "",
                 "## instruction", self.instruction, ""]
        for t in self.turns:
            lines += [f"## turn {t.index} (segment {t.segment}, prompt {t.prompt_len} tokens, sampled "
                      f"{len(t.sampled_tokens)} tokens, "
                      f"stop={t.stop_reason}{', eos appended' if t.appended_eos else ''})",
                      t.text]
            for c in t.tool_calls:
                lines.append(f"-> tool call {c['name']} {json.dumps(c['arguments'], ensure_ascii=False)}")
            for e in t.errors:
                lines.append(f"!! {e}")
            for o in t.observations:
                lines += ["<- observation:", o]
            lines.append("")
        if self.verifier:
            lines += ["## verifier", json.dumps(self.verifier, indent=1)[:20000]]
        return "\n".join(lines)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "trajectory.json").write_text(json.dumps(self.to_json()))
        (directory / "trajectory.txt").write_text(self.to_text())

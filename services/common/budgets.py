"""Agent budgets: one place (config/harbor.yaml `agent.budgets`), enforced by the agent loop (cookbook/agent) and
the ModelService (services/modelservice), with the same observation policy (truncation, elision)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class Budgets:
    max_input_tokens: int = 32768       # prompt tokens per model call
    max_output_tokens: int = 8192       # sampled tokens per model call
    max_context: int = 65536            # prompt + output
    max_observation_chars: int = 12000  # longer tool output: head 75 % + marker + tail 25 %
    keep_last_observations: int = 8     # older observations are elided (starts a new training segment)
    max_tool_call_chars: int = 50000    # a larger tool call is refused with an error observation
    max_turns: int = 32
    command_timeout_s: float = 120.0    # per tool command in the sandbox
    trajectory_timeout_s: float = 1800.0  # whole agent run (verifier excluded)
    mask_overflow: bool = True          # a context overflow is masked from training, not scored 0

    @classmethod
    def from_config(cls, cfg: dict[str, Any] | None) -> "Budgets":
        cfg = dict(cfg or {})
        known = {f.name for f in fields(cls)}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown agent budget(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**cfg)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ELIDED = "[older observation elided]"


def truncate_observation(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.75), limit - int(limit * 0.75)
    return f"{text[:head]}\n[... {len(text) - limit} characters elided ...]\n{text[-tail:]}"


def elide_observations(messages: list[dict[str, Any]], keep: int) -> bool:
    """The elision policy (the agent and the ModelService): all but the last ``keep`` tool observations
    are replaced, in place, by a marker; True if anything changed (the prompt was rewritten)."""
    tool_idx = [i for i, m in enumerate(messages) if m["role"] == "tool" and m["content"] != ELIDED]
    old = tool_idx[:-keep] if keep > 0 else tool_idx
    for i in old:
        messages[i] = {**messages[i], "content": ELIDED}
    return bool(old)

"""Agent budgets: one place (config/harbor.yaml `agent.budgets`), enforced by the agent loop."""

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

"""Agent budgets for black-box agents, enforced in this one place (config/harbor.yaml `agent.budgets`,
the same ``services.common.budgets.Budgets`` the client-side agent uses).

What the ModelService controls is the prompt and the sample, so it enforces:
* observations: each tool message is cut to ``max_observation_chars`` (head 75 % + marker + tail
  25 %), and all but the last ``keep_last_observations`` tool messages are replaced by a marker
  (that rewrites the prompt: a new training segment starts, as in the client-side agent);
* ``max_input_tokens`` and ``max_context`` on the rendered prompt, ``max_output_tokens`` (and the
  room left in the context) as the sampler's max_tokens;
* ``max_turns`` model calls and ``trajectory_timeout_s`` wall clock per session;
* ``max_tool_call_chars``: a larger tool call is not returned as a tool call.
``command_timeout_s`` and the trajectory timeout are also handed to the agent harness by the
runner (agent_runner.py), which executes the commands.
"""

from __future__ import annotations

from typing import Any

from services.common.budgets import Budgets, elide_observations, truncate_observation
from services.common.config import load_config


class BudgetExceeded(Exception):
    """``code``: OpenAI-style error code; ``stop_reason``: the trajectory's stop reason."""

    def __init__(self, message: str, code: str, stop_reason: str):
        super().__init__(message)
        self.code, self.stop_reason = code, stop_reason


def load_budgets(path: str | None = None) -> Budgets:
    """``agent.budgets`` of config/harbor.yaml (or ``path``); defaults where absent."""
    try:
        cfg = load_config("harbor", path)
    except FileNotFoundError:
        cfg = {}
    return Budgets.from_config(((cfg.get("agent") or {}).get("budgets")) or {})


class BudgetGuard:
    CHARS_PER_TOKEN = 16   # default character cap = this x max_input_tokens (no token is longer)

    def __init__(self, budgets: Budgets, max_input_chars: int | None = None):
        self.b = budgets
        self.max_input_chars = max_input_chars or self.CHARS_PER_TOKEN * budgets.max_input_tokens

    def check_chars(self, n_chars: int) -> None:
        """Before tokenising: a prompt this long cannot fit max_input_tokens, and tokenising it
        would cost memory and time (64 MB of text took the service from 1.9 to 12.3 GB)."""
        if n_chars > self.max_input_chars:
            raise BudgetExceeded(f"This model's maximum context length is exceeded: the prompt has {n_chars} "
                                 f"characters (max_input_chars {self.max_input_chars})", "context_length_exceeded",
                                 "context_overflow")

    def apply_to_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The agent's observation policy on a black-box agent's messages (a copy): each tool message cut
        to ``max_observation_chars``, all but the last ``keep_last_observations`` elided."""
        out = [dict(m) for m in messages]
        for m in out:
            if m["role"] == "tool":
                m["content"] = truncate_observation(m.get("content") or "", self.b.max_observation_chars)
        elide_observations(out, self.b.keep_last_observations)
        return out

    def check_call(self, n_turns: int, elapsed_s: float) -> None:
        if n_turns >= self.b.max_turns:
            raise BudgetExceeded(f"turn budget exhausted: {n_turns} model calls (max_turns {self.b.max_turns})",
                                 "max_turns_exceeded", "max_turns")
        if elapsed_s > self.b.trajectory_timeout_s:
            raise BudgetExceeded(f"trajectory time budget exhausted ({elapsed_s:.0f} s > "
                                 f"{self.b.trajectory_timeout_s} s)",
                                 "timeout", "timeout")

    def max_tokens(self, n_prompt: int, requested: int | None) -> int:
        """Tokens the sampler may produce; raises on a prompt over the input/context budget."""
        if n_prompt > self.b.max_input_tokens:
            raise BudgetExceeded(f"This model's maximum context length is exceeded: the prompt has {n_prompt} tokens "
                                 f"(max_input_tokens {self.b.max_input_tokens})", "context_length_exceeded",
                                 "context_overflow")
        room = min(self.b.max_output_tokens, self.b.max_context - n_prompt)
        if room < 1:
            raise BudgetExceeded(f"This model's maximum context length is exceeded: the prompt has {n_prompt} tokens "
                                 f"(max_context {self.b.max_context})", "context_length_exceeded", "context_overflow")
        return room if requested is None else max(1, min(int(requested), room))

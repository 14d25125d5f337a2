"""Test doubles for the policy: replay fixed assistant turns through the real parser and tools."""

from __future__ import annotations

from typing import Any

from services.common.renderers.qwen3 import eos_id, tool_call_text

from .agent import SampleOut

__all__ = ["ScriptedPolicy", "gold_turns", "tool_call_text"]


def gold_turns(edit: dict[str, Any], read: bool = True, submit: bool = True) -> list[str]:
    """The gold trajectory of a micro task (solution/edit.json): read, edit the line, submit (read
    and submit when the agent has those tools)."""
    return ([tool_call_text("read", {"path": edit["path"]})] if read else []) + [
        tool_call_text("edit", {"path": edit["path"], "line": edit["line"], "new": edit["new"]})] + (
        [tool_call_text("submit", {})] if submit else [])


class ScriptedPolicy:
    """Returns the given assistant texts in order (tokenised + <|im_end|>), logprob 0."""

    def __init__(self, tokenizer, turns: list[str]):
        self.tok = tokenizer
        self.turns = list(turns)
        self.eos = eos_id(tokenizer)
        self.prompts: list[list[int]] = []

    async def sample(self, prompt: list[int], max_tokens: int) -> SampleOut:
        self.prompts.append(list(prompt))
        text = self.turns.pop(0) if self.turns else tool_call_text("submit", {})
        toks = list(self.tok.encode(text, add_special_tokens=False))[: max_tokens - 1] + [self.eos]
        return SampleOut(toks, [0.0] * len(toks), "stop", source="scripted")

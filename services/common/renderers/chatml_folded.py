"""ChatML templates that know only ``role`` + ``content`` (SmolLM2-Instruct's: no tools, no tool-call tokens, a
default system prompt when none is given), in the Qwen3 tool-call format folded into text.

:func:`fold_tools` turns the tool specs into system-prompt text, tool calls into ``<tool_call>`` text in the
assistant's content and tool results into one ``<tool_response>`` user turn, exactly the strings the agent
samples and appends (qwen3.py), so the model's own template still renders every turn; the tool-call format is
then taught by SFT rather than known by the model.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from .qwen3 import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Qwen3Renderer, template_renders_tools, tool_call_text

TOOLS_HEADER = "You can call these tools (one JSON description per line):"
TOOLS_FOOTER = ("To call one, write exactly:\n" + TOOL_CALL_OPEN
                + '\n{"name": <tool-name>, "arguments": <args-json-object>}\n' + TOOL_CALL_CLOSE)


def tools_text(tools: list[dict[str, Any]]) -> str:
    """The tool specs as system-prompt text, for a template that does not render tools."""
    lines = [json.dumps(t.get("function", t), ensure_ascii=False) for t in tools]
    return TOOLS_HEADER + "\n" + "\n".join(lines) + "\n\n" + TOOLS_FOOTER


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or call
    args = fn.get("arguments", {})
    if isinstance(args, str):
        name = json.dumps(fn["name"], ensure_ascii=False)
        return f'{TOOL_CALL_OPEN}\n{{"name": {name}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'
    return tool_call_text(fn["name"], args)


def fold_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Messages with only role + string content (see the module doc): what a template without tools renders."""
    out: list[dict[str, Any]] = []
    msgs = list(messages)
    if tools:
        if msgs and msgs[0].get("role") == "system":
            first = msgs.pop(0)
            system = (first.get("content") or "") + "\n\n" + tools_text(tools)
        else:
            system = tools_text(tools)
        out.append({"role": "system", "content": system})
    for m in msgs:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            content = "\n".join(([content] if content else []) + [_call_text(c) for c in m["tool_calls"]])
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": True})
        else:
            out.append({"role": role, "content": content})
    return [{"role": m["role"], "content": m["content"]} for m in out]


class FoldedChatMLRenderer(Qwen3Renderer):
    """A ChatML template without tools: the Qwen3 tool-call format folded into plain turns (:func:`fold_tools`)."""

    name: ClassVar[str] = "chatml_folded"

    @classmethod
    def fits(cls, tokenizer: Any) -> bool:
        return not template_renders_tools(tokenizer)

    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return fold_tools(messages, tools), None

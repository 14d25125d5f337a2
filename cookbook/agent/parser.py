"""Parse Qwen3-format tool calls: ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``
(the format: chat_format.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .chat_format import TOOL_CALL_BLOCK, TOOL_CALL_CLOSE, TOOL_CALL_OPEN


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""


def parse_tool_calls(text: str, known: set[str] | None = None,
                     max_arg_chars: int = 100_000) -> tuple[str, list[ToolCall], list[str]]:
    """Return (content before the first call, calls, errors). Never raises: every problem
    becomes an error message the agent shows the model as an observation."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    first = text.find(TOOL_CALL_OPEN)
    content = (text if first < 0 else text[:first]).strip()
    for i, m in enumerate(TOOL_CALL_BLOCK.finditer(text)):
        body, closed = m.group(1).strip(), m.group(2)
        if not closed:
            errors.append(f"tool call not closed: end it with {TOOL_CALL_CLOSE}")
            continue
        if len(body) > max_arg_chars:
            errors.append(f"tool call too large ({len(body)} characters; limit {max_arg_chars})")
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            errors.append(f"tool call is not valid JSON ({e.msg} at position {e.pos}); expected "
                          '{"name": <tool>, "arguments": {...}}')
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append('tool call must be a JSON object {"name": <tool>, "arguments": {...}}')
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                errors.append(f"arguments of {obj['name']} are a string that is not JSON")
                continue
        if not isinstance(args, dict):
            errors.append(f"arguments of {obj['name']} must be a JSON object")
            continue
        if known is not None and obj["name"] not in known:
            errors.append(f"unknown tool {obj['name']!r}; available: {', '.join(sorted(known))}")
            continue
        calls.append(ToolCall(obj["name"], args, id=f"call_{i}"))
    return content, calls, errors

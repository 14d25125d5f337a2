"""OpenAI chat messages <-> the model's chat template and tokens.

* ``normalize_messages``: OpenAI request messages -> the plain dicts the chat template renders
  (role, content string, tool calls with parsed arguments, tool_call_id); also the form in which
  histories are compared across turns (ids and unknown keys never matter).
* ``ChatRenderer``: ``apply_chat_template`` (with tools) -> text -> token ids, and back.
* ``reply_message``: sampled text -> the OpenAI assistant message (Qwen3 ``<tool_call>`` blocks
  parsed with cookbook/agent/parser.py into ``tool_calls``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from cookbook.agent.chat_format import IM_END, TOOL_CALL_OPEN, eos_id, render_chat, stop_ids
from cookbook.agent.parser import parse_tool_calls

ROLES = {"system", "user", "assistant", "tool"}


class BadRequest(ValueError):
    pass


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):   # OpenAI content parts: only text is supported
        out = []
        for part in content:
            if (isinstance(part, dict) and part.get("type") in ("text", "input_text")
                    and isinstance(part.get("text"), str)):
                out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
            else:
                raise BadRequest(f"{where}: only text content parts are supported, got {str(part)[:100]}")
        return "".join(out)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _arguments(args: Any) -> Any:
    """Tool-call arguments as the template renders them: a JSON object string becomes a dict
    (rendered with ``tojson``, as the model writes it); anything else stays a string."""
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            obj = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args
        return obj if isinstance(obj, dict) else args
    raise BadRequest("tool call arguments must be a JSON string or an object")


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        role = m.get("role")
        role = "system" if role == "developer" else role
        if role not in ROLES:
            raise BadRequest(f"messages[{i}].role {role!r} is not one of {sorted(ROLES)}")
        n: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"messages[{i}]")}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                fn = (c or {}).get("function") or c or {}
                if not isinstance(fn.get("name"), str):
                    raise BadRequest(f"messages[{i}].tool_calls[{j}] has no function name")
                calls.append({"id": c.get("id") or f"call_{j}", "type": "function",
                              "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}))}})
            n["tool_calls"] = calls
        if role == "tool" and m.get("tool_call_id"):
            n["tool_call_id"] = str(m["tool_call_id"])
        out.append(n)
    return out


def normalize_tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{i}] must be an object")
        if t.get("type", "function") != "function":
            raise BadRequest(f"tools[{i}]: only function tools are supported")
        fn = t.get("function") if "function" in t else t
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"tools[{i}] has no function name")
        out.append({"type": "function", "function": fn})
    return out


def message_key(m: dict[str, Any]) -> tuple:
    """What must be equal for two (normalised) messages to render the same; ids do not count."""
    calls = tuple((c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True, ensure_ascii=False))
                  for c in m.get("tool_calls") or [])
    return (m["role"], m.get("content") or "", calls)


class ChatRenderer:
    """The model's chat template and tokenizer (thread-safe; calls may run in worker threads)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.eos_id = eos_id(tokenizer)
        self.eos_text = IM_END
        self.stop_ids = stop_ids(tokenizer)
        self._lock = threading.Lock()

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               generation_prompt: bool) -> str:
        with self._lock:
            return render_chat(self.tok, messages, tools, generation_prompt)

    def encode(self, text: str) -> list[int]:
        with self._lock:
            return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        with self._lock:
            return self.tok.decode(ids, skip_special_tokens=False)


def reply_message(text: str, max_tool_call_chars: int = 50_000,
                  id_prefix: str = "call") -> tuple[dict[str, Any], list[str]]:
    """The assistant message for sampled ``text`` (without the final ``<|im_end|>``), and parse errors.

    All ``<tool_call>`` blocks valid: content = the text before the first block (trailing
    newline removed, as the template puts it back), tool_calls = the blocks. Any block invalid
    (bad JSON, not closed, too large): no tool_calls and the raw text as content, so the agent
    sees exactly what the model wrote. No block: the text as content."""
    content, calls, errors = parse_tool_calls(text, known=None, max_arg_chars=max_tool_call_chars)
    if errors or not calls:
        return {"role": "assistant", "content": text}, errors
    first = text.find(TOOL_CALL_OPEN)
    msg = {"role": "assistant", "content": text[:first].removesuffix("\n") or None,
           "tool_calls": [{"id": f"{id_prefix}_{i}", "type": "function",
                           "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                          for i, c in enumerate(calls)]}
    return msg, []

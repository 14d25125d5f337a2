"""Qwen3 (ChatML) with tools: the project's default format, spelled in this one module. Its special tokens,
the tool-call block the model writes, the tool-response turn that follows it, the tiny model's chat template
(:data:`CHAT_TEMPLATE`), and the two readings of sampled tool calls (:func:`parse_tool_calls` for the agent,
whose errors become observations, and :func:`reply_message` on top of it for the ModelService;
:func:`parse_reply` for the backend's OpenAI-/Anthropic-compatible endpoints).

A template of this format renders ``tools`` and ``tool_calls`` itself (Qwen3's, the tiny model's): it gets
the messages and tools as they are. It is what tinker-cookbook's ``qwen3_instruct`` renderer renders;
tests/renderers/test_qwen3.py checks these strings token for token against that renderer.

:data:`CHAT_TEMPLATE`, the project's chat template (Qwen3 format, non-thinking "Instruct-2507" variant),
saved as the tiny model's ``chat_template.jinja`` (services/models/tokenizer.py). Written for this project
to produce exactly the strings Qwen3-Instruct-2507's template produces (ChatML turns
``<|im_start|>role\\n...<|im_end|>\\n``):

* a first ``system`` message becomes the system turn; with ``tools`` the system turn is
  ``<system text>\\n\\n# Tools ... <tools>\\n{tool json}\\n...</tools> ...`` (or only the
  ``# Tools`` block when there is no system message);
* ``assistant`` turns: content, then every tool call as
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (newline-separated, and
  separated from non-empty content by a newline); ``arguments`` may be a dict or a JSON string;
  OpenAI-style ``{"type": "function", "function": {...}}`` calls are accepted;
* ``tool`` messages become a *user* turn wrapping each result in
  ``<tool_response>\\n...\\n</tool_response>``; consecutive tool messages share one user turn;
* ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``.

Non-thinking: like Qwen3-*-Instruct-2507 the template never writes ``<think>`` blocks.
``enable_thinking`` is accepted and ignored (False and True render the same), and an
assistant message's ``reasoning_content`` is not rendered.  This equals tinker-cookbook's
``qwen3_instruct`` renderer output (except consecutive tool messages, which the cookbook
renders as separate user turns).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .base import Renderer

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"            # ends every turn; the sampler's stop token
END_OF_TEXT = "<|endoftext|>"    # the pad token; a model may also stop on it
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_CALL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(" + re.escape(TOOL_CALL_CLOSE) + r"|$)", re.S)
_CLOSED_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def eos_id(tokenizer: Any) -> int:
    """The id of ``<|im_end|>``; a ValueError for a tokenizer without it (not a Qwen3/ChatML model)."""
    i = tokenizer.convert_tokens_to_ids(IM_END)
    if not isinstance(i, int) or i == getattr(tokenizer, "unk_token_id", None):
        raise ValueError(f"the tokenizer has no {IM_END} token (a Qwen3/ChatML chat template is expected)")
    return i


def stop_ids(tokenizer: Any) -> list[int]:
    """Tokens that end an assistant turn: ``<|im_end|>``, and ``<|endoftext|>`` where it is another token."""
    eos = eos_id(tokenizer)
    pad = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    return [eos] + ([pad] if isinstance(pad, int) and pad != eos else [])


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools`` and ``tool_calls`` itself."""
    t = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(t, str) and "tools" in t and "tool_calls" in t


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """One tool call as the model writes it (and the template renders an assistant's tool call)."""
    return f"{TOOL_CALL_OPEN}\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + \
        f"\n{TOOL_CALL_CLOSE}"


def tool_response_turn(observations: list[str]) -> str:
    """The text after an assistant turn's ``<|im_end|>``: the tool responses (one user turn) and the
    next assistant header, as the template renders them."""
    body = "".join(f"\n<tool_response>\n{o}\n</tool_response>" for o in observations)
    return f"\n{IM_START}user{body}{IM_END}\n{IM_START}assistant\n"


class Qwen3Renderer(Renderer):
    """A ChatML template that renders tools and tool calls itself: messages and tools go to it as they are."""

    name: ClassVar[str] = "qwen3"

    def __init__(self, tokenizer: Any):
        super().__init__(tokenizer)
        self.eos_id = eos_id(tokenizer)
        self.eos_text = IM_END
        self.stop_ids = stop_ids(tokenizer)

    @classmethod
    def fits(cls, tokenizer: Any) -> bool:
        return template_renders_tools(tokenizer)


# ---------------------------------------------------------------------- sampled text -> tool calls
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


@dataclass
class Reply:
    text: str                                   # the whole decoded text (stop strings cut, EOS dropped)
    content: str | None                         # the text without tool-call blocks
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI form


def parse_reply(text: str) -> Reply:
    """The backend endpoints' reading of tool calls in the Qwen/Hermes format: every closed ``<tool_call>``
    block must hold a JSON object with a string ``name`` (and object ``arguments``); otherwise the whole text
    is the content. Unlike :func:`reply_message` (the ModelService's, which must replay an agent's history
    token for token) it ignores a block left open, has no size limit and gives calls random ids."""
    blocks = list(_CLOSED_TOOL_CALL.finditer(text))
    calls = []
    for b in blocks:
        try:
            obj = json.loads(b.group(1).strip())
        except json.JSONDecodeError:
            return Reply(text, text)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return Reply(text, text)
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return Reply(text, text)
        if not isinstance(args, dict):
            return Reply(text, text)
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    if not calls:
        return Reply(text, text)
    content = text[:blocks[0].start()].rstrip("\n")
    return Reply(text, content or None, calls)


CHAT_TEMPLATE = r"""{#- local-tinker Qwen3 (Instruct-2507, non-thinking) chat template -#}
{%- macro text(m) -%}
  {%- if m.content is string -%}{{- m.content -}}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if messages and messages[0].role == 'system' -%}
    {{- text(messages[0]) + '\n\n' -}}
  {%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' + (tool | tojson) -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
  {{- '<|im_start|>system\n' + text(messages[0]) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- set content = text(message) -%}
  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
    {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' + content -}}
    {%- if message.tool_calls -%}
      {%- for call in message.tool_calls -%}
        {%- if not loop.first or content -%}{{- '\n' -}}{%- endif -%}
        {%- set fn = call.function if call.function else call -%}
        {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}
          {{- fn.arguments -}}
        {%- else -%}
          {{- fn.arguments | tojson -}}
        {%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""  # noqa: E501 (the tool-use instructions, byte for byte as in Qwen3's template)

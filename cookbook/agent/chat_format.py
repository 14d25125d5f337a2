"""The model's chat format, spelled in this one place: Qwen3 / ChatML special tokens, the tool-call
block the model writes, the tool-response turn that follows it, and :func:`render_chat`, the one way
whole prompts are rendered.

Two kinds of ChatML template are served. One renders tools itself (Qwen3's, the tiny model's): it gets
the messages and tools as they are. The other knows only ``role`` + ``content`` (SmolLM2-Instruct's:
no tools, no tool-call tokens, a default system prompt when none is given): :func:`fold_tools` turns
the tool specs into system-prompt text, tool calls into ``<tool_call>`` text in the assistant's content
and tool results into one ``<tool_response>`` user turn, exactly the strings the agent samples and
appends, so the model's own template still renders every turn; the tool-call format is then taught by
SFT rather than known by the model.

It is what the tokenizer's own chat template (services/models/chat_template.py) renders and what
tinker-cookbook's ``qwen3_instruct`` renderer renders; tests/agent/test_chat_format.py checks these
strings token for token against that renderer. Whole prompts are rendered with the tokenizer's
``apply_chat_template`` (the model's own template: also right for a model whose template differs in
details the renderer does not cover); this module owns the pieces the agent, the parser, the
scripted policy and the ModelService append, parse or look up themselves.
"""

from __future__ import annotations

import json
import re
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"            # ends every turn; the sampler's stop token
END_OF_TEXT = "<|endoftext|>"    # the pad token; a model may also stop on it
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_CALL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(" + re.escape(TOOL_CALL_CLOSE) + r"|$)", re.S)


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


TOOLS_HEADER = "You can call these tools (one JSON description per line):"
TOOLS_FOOTER = ("To call one, write exactly:\n" + TOOL_CALL_OPEN
                + '\n{"name": <tool-name>, "arguments": <args-json-object>}\n' + TOOL_CALL_CLOSE)


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools`` and ``tool_calls`` itself."""
    t = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(t, str) and "tools" in t and "tool_calls" in t


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


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` (and ``tools``) in the model's own chat template."""
    if not template_renders_tools(tokenizer):
        messages, tools = fold_tools(messages, tools), None
    return tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
                                         tokenize=False)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """One tool call as the model writes it (and the template renders an assistant's tool call)."""
    return f"{TOOL_CALL_OPEN}\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + \
        f"\n{TOOL_CALL_CLOSE}"


def tool_response_turn(observations: list[str]) -> str:
    """The text after an assistant turn's ``<|im_end|>``: the tool responses (one user turn) and the
    next assistant header, as the template renders them."""
    body = "".join(f"\n<tool_response>\n{o}\n</tool_response>" for o in observations)
    return f"\n{IM_START}user{body}{IM_END}\n{IM_START}assistant\n"

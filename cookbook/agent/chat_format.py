"""The model's chat format, spelled in this one place: Qwen3 / ChatML special tokens, the tool-call
block the model writes, the tool-response turn that follows it.

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


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """One tool call as the model writes it (and the template renders an assistant's tool call)."""
    return f"{TOOL_CALL_OPEN}\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + \
        f"\n{TOOL_CALL_CLOSE}"


def tool_response_turn(observations: list[str]) -> str:
    """The text after an assistant turn's ``<|im_end|>``: the tool responses (one user turn) and the
    next assistant header, as the template renders them."""
    body = "".join(f"\n<tool_response>\n{o}\n</tool_response>" for o in observations)
    return f"\n{IM_START}user{body}{IM_END}\n{IM_START}assistant\n"

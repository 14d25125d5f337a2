"""The one renderer package: chat formats and tool calls, imported by the agent (cookbook/agent), the
ModelService (services/modelservice) and the backend's OpenAI-/Anthropic-compatible endpoints
(services/backend). One module per format over a shared base (tinker-cookbook's layout):

* ``base.py``: request messages/tools -> what a template renders (:func:`normalize_messages`), the
  :class:`Renderer` base, sampled tokens -> answer text;
* ``qwen3.py``: Qwen3/ChatML with tools (the default; the tiny model's ``CHAT_TEMPLATE``), its special
  tokens, tool-call text and the parsers of sampled tool calls;
* ``chatml_folded.py``: a ChatML template without tools (SmolLM2), the tool-call format folded into text.

:func:`renderer_for` picks the format that fits a tokenizer's chat template (the first in :data:`FORMATS`).
How to add a format: docs/architecture.md "Chat formats".
"""

from __future__ import annotations

from typing import Any

from .base import (
    BadRequest,
    Renderer,
    completion_text,
    message_key,
    normalize_messages,
    normalize_tools,
    stream_pieces,
    template_prompt_tokens,
)
from .chatml_folded import FoldedChatMLRenderer
from .qwen3 import Qwen3Renderer

FORMATS: list[type[Renderer]] = [Qwen3Renderer, FoldedChatMLRenderer]


def renderer_for(tokenizer: Any) -> Renderer:
    """The renderer of the first format in :data:`FORMATS` that fits ``tokenizer``'s chat template
    (a ValueError for a tokenizer outside every format, e.g. one without ``<|im_end|>``)."""
    for fmt in FORMATS:
        if fmt.fits(tokenizer):
            return fmt(tokenizer)
    raise ValueError(f"no chat format fits this tokenizer (known: {', '.join(f.name for f in FORMATS)})")


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` (and ``tools``) in the model's own chat template."""
    return renderer_for(tokenizer).render(messages, tools, add_generation_prompt)


__all__ = ["BadRequest", "FORMATS", "FoldedChatMLRenderer", "Qwen3Renderer", "Renderer", "completion_text",
           "message_key", "normalize_messages", "normalize_tools", "render_chat", "renderer_for", "stream_pieces",
           "template_prompt_tokens"]

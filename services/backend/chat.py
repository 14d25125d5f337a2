"""The server side's chat format (the OpenAI- and Anthropic-compatible endpoints, oai.py and
anthropic_api.py): messages -> prompt tokens with the model's *own* chat template (its tokenizer's
``chat_template``, applied by transformers' ``apply_chat_template`` with ``tools=``), and sampled
text -> an assistant message, parsing the Qwen/Hermes tool-call format
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` into OpenAI ``tool_calls``.

services/ never imports cookbook/ (whose renderers and agent parser are the client side's owner);
this module is the backend's one owner of the format. Tokenizers are loaded from the served base
model's directory, once per base model, in the API process (no runtime call).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from transformers import AutoTokenizer

from .errors import BadRequest

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_lock = threading.Lock()
_tokenizers: dict[str, Any] = {}


def tokenizer(path: str) -> Any:
    """The tokenizer of the base model in directory ``path`` (cached)."""
    with _lock:
        tok = _tokenizers.get(path)
        if tok is None:
            tok = _tokenizers[path] = AutoTokenizer.from_pretrained(path)
        return tok


# ---------------------------------------------------------------------- messages -> tokens
def _text_content(content: Any, where: str) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text") \
                    and isinstance(p.get("text"), str):
                parts.append(p["text"])
            else:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise BadRequest(f"{where}: only text content parts are supported, got {kind!r}")
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise BadRequest(f"{where}: a tool call must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise BadRequest(f"{where}: function.arguments is not valid JSON: {e}") from e
    if not isinstance(args, dict):
        raise BadRequest(f"{where}: function.arguments must be a JSON object")
    return {"type": "function", "function": {"name": fn["name"], "arguments": args}}


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages as the chat template reads them (text content; tool calls with their
    arguments as objects, the form Qwen's and Hermes-style templates render)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BadRequest(f"{where} must be an object")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise BadRequest(f"{where}.role must be system, developer, user, assistant or tool, got {role!r}")
        msg: dict[str, Any] = {"role": role, "content": _text_content(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise BadRequest(f"{where}.tool_calls must be a list")
            msg["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(m["tool_calls"])]
        if role == "tool":
            if m.get("tool_call_id") is not None:
                msg["tool_call_id"] = str(m["tool_call_id"])
            if m.get("name") is not None:
                msg["name"] = str(m["name"])
        out.append(msg)
    return out


def check_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or t.get("type", "function") != "function" or not isinstance(fn.get("name"), str):
            raise BadRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{'name', 'description', "
                             "'parameters'}}}}")
    return tools


def render(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt token ids: the model's chat template with the generation prompt."""
    if not getattr(tok, "chat_template", None):
        raise BadRequest("this model's tokenizer has no chat template: use /completions with a prompt")
    try:
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # noqa: BLE001 (a template's own error message, e.g. a role order it refuses)
        raise BadRequest(f"the model's chat template refused these messages: {type(e).__name__}: {e}") from e
    return list(tok.encode(text, add_special_tokens=False))


# ---------------------------------------------------------------------- sampled tokens -> message
@dataclass
class Reply:
    text: str                                   # the whole decoded text (stop strings cut, EOS dropped)
    content: str | None                         # the text without tool-call blocks
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI form


def completion_text(tok: Any, tokens: list[int], eos_ids: set[int], stops: list[str]) -> str:
    """The text of sampled tokens as an OpenAI answer shows it: a final EOS token dropped and the text
    cut before the first stop string (the sampler includes the tokens that completed the match)."""
    if tokens and tokens[-1] in eos_ids:
        tokens = tokens[:-1]
    text = tok.decode(tokens, skip_special_tokens=False)
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


def parse_reply(text: str) -> Reply:
    """Tool calls in the Qwen/Hermes format: every ``<tool_call>`` block must hold a JSON object with
    a string ``name`` (and object ``arguments``); otherwise the whole text is the content."""
    blocks = list(_TOOL_CALL.finditer(text))
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


def stream_pieces(tok: Any, tokens: list[int], text: str) -> list[str]:
    """``text`` cut at token boundaries (for streaming): each piece is the decoded text of the next
    tokens where that is a clean prefix of what remains; their concatenation is exactly ``text``."""
    pieces, done, start = [], 0, 0
    for i in range(1, len(tokens) + 1):
        piece = tok.decode(tokens[start:i], skip_special_tokens=False)
        if not piece or piece.endswith("\ufffd"):
            continue
        if not text.startswith(piece, done):
            break
        pieces.append(piece)
        done += len(piece)
        start = i
    if done < len(text):
        pieces.append(text[done:])
    return pieces

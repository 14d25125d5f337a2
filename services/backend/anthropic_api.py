"""Anthropic-compatible endpoints on the backend: ``POST /anthropic/api/v1/messages`` (text and tool
use, ``stream: true`` as server-sent events once the answer is sampled) and
``POST /anthropic/api/v1/messages/count_tokens``.

``anthropic.Anthropic(base_url=<backend>/anthropic/api/v1, api_key=<backend key>)`` (the client sends
``X-API-Key``); ``model`` as for /oai (compat.py). Messages are turned into the chat form that
services/common/renderers renders with the model's own template (``tool_use`` blocks -> assistant tool calls,
``tool_result`` blocks -> tool messages); the answer's ``<tool_call>`` blocks become ``tool_use`` content blocks.
Extension fields as on /oai: ``prompt_token_ids``, ``token_ids``, ``token_logprobs``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from services.common import renderers
from services.common.renderers.qwen3 import parse_reply

from . import compat
from .errors import BadRequest
from .state import BackendState

log = logging.getLogger("backend.anthropic")
router = APIRouter(prefix="/anthropic/api/v1")


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error", 413: "request_too_large"}.get(
        status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}




def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for b in content:
            if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
                raise BadRequest(f"{where}: only text blocks are supported here")
            out.append(b["text"])
        return "".join(out)
    if content is None:
        return ""
    raise BadRequest(f"{where}: content must be a string or a list of blocks")


def to_chat(body: dict) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(OpenAI-form messages, OpenAI-form tools) of an Anthropic request."""
    msgs: list[dict[str, Any]] = []
    if body.get("system") is not None:
        msgs.append({"role": "system", "content": _text(body["system"], "system")})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise BadRequest(f"{where}.role must be user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            msgs.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise BadRequest(f"{where}.content must be a string or a list of content blocks")
        texts, calls = [], []
        for k, b in enumerate(content):
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "text" and isinstance(b.get("text"), str):
                texts.append(b["text"])
            elif kind == "tool_use" and m["role"] == "assistant" and isinstance(b.get("name"), str):
                calls.append({"id": str(b.get("id", "")), "type": "function",
                              "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}})
            elif kind == "tool_result" and m["role"] == "user":
                res = _text(b.get("content"), f"{where}.content[{k}]")
                msgs.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")),
                             "content": ("Error: " + res) if b.get("is_error") else res})
            else:
                raise BadRequest(f"{where}.content[{k}]: unsupported content block {kind!r} for role {m['role']}")
        if texts or calls or not any(x.get("role") == "tool" for x in msgs[-1:]):
            msg: dict[str, Any] = {"role": m["role"], "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            msgs.append(msg)
    tools = body.get("tools")
    otools: list[dict[str, Any]] | None = None
    if tools:
        if not isinstance(tools, list):
            raise BadRequest("tools must be a list")
        otools = []
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise BadRequest(f"tools[{i}] must be {{'name', 'description', 'input_schema'}}")
            otools.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                            "parameters": t.get("input_schema") or {}}})
    choice = body.get("tool_choice")
    ctype = choice.get("type") if isinstance(choice, dict) else choice
    if ctype == "none":
        otools = None
    elif ctype not in (None, "auto"):
        raise BadRequest("tool_choice must be auto or none (forcing a tool call is not supported)")
    return renderers.normalize_messages(msgs, strict=True), renderers.normalize_tools(otools, strict=True)


async def _prompt(B: BackendState, body: dict) -> tuple[compat.Target, Any, list[int]]:
    target = await compat.resolve(B, body.get("model"))
    messages, tools = to_chat(body)
    tok = compat.tokenizer(target.path)
    return target, tok, renderers.template_prompt_tokens(tok, messages, tools)


@router.post("/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    async def handle(B: BackendState, body: dict) -> Response:
        _, _, prompt = await _prompt(B, body)
        return compat.json_response({"input_tokens": len(prompt)})
    return await compat.guard(request, handle, error_body)


@router.post("/messages")
async def messages(request: Request) -> Response:
    return await compat.guard(request, _messages, error_body)


def _sse(event: str, obj: Any) -> bytes:
    return f"event: {event}\ndata: ".encode() + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


async def _messages(B: BackendState, body: dict) -> Response:
    mt = compat.int_field(body, "max_tokens", None, 1)
    if mt is None:
        raise BadRequest("max_tokens is required")
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops)):
        raise BadRequest("stop_sequences must be a list of non-empty strings")
    target, tok, prompt = await _prompt(B, body)
    params = {"max_tokens": mt, "temperature": compat.number_field(body, "temperature"),
              "top_p": compat.number_field(body, "top_p"), "top_k": body.get("top_k"),
              "seed": body.get("seed"),   # an extension (extra_body={"seed": ...}): reproducible samples
              "stop": stops or None}
    s = await compat.sample(B, target, prompt, 1, params, "/anthropic messages")
    tokens, lps, reason = s.sequences[0]
    eos = set(target.info.eos_token_ids)
    raw = renderers.completion_text(tok, tokens, eos, [])
    hit = min(((raw.find(x), x) for x in s.stop_strings if raw.find(x) >= 0), default=None)
    reply = parse_reply(raw[:hit[0]] if hit else raw)
    blocks: list[dict[str, Any]] = []
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for c in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": "toolu_" + c["id"][5:], "name": c["function"]["name"],
                       "input": json.loads(c["function"]["arguments"])})
    stop_reason = ("tool_use" if reply.tool_calls else "stop_sequence" if hit else
                   "max_tokens" if reason == "length" else "end_turn")
    usage = {"input_tokens": len(prompt), "output_tokens": len(tokens)}
    msg: dict[str, Any] = {
        "id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": target.name,
        "content": blocks, "stop_reason": stop_reason, "stop_sequence": hit[1] if hit else None, "usage": usage,
        "prompt_token_ids": prompt, "token_ids": tokens, "token_logprobs": lps}
    if not body.get("stream"):
        return compat.json_response(msg)
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
        **{k: v for k, v in msg.items() if k not in ("token_ids", "token_logprobs")},
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": len(prompt), "output_tokens": 0}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in renderers.stream_pieces(tok, tokens, b["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**b, "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(b["input"], ensure_ascii=False)}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                         "stop_sequence": msg["stop_sequence"]},
                                     "usage": {"output_tokens": len(tokens)},
                                     "token_ids": tokens, "token_logprobs": lps}))
    events.append(("message_stop", {"type": "message_stop"}))

    async def gen() -> AsyncIterator[bytes]:
        for name, obj in events:
            yield _sse(name, obj)
    return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


"""OpenAI-compatible endpoints on the backend (docs/backend.md "OpenAI- and Anthropic-compatible
endpoints"): ``POST /oai/api/v1/chat/completions`` and ``POST /oai/api/v1/completions``, plus
``GET /oai/api/v1/models``.

``base_url=<backend>/oai/api/v1``, the backend's key (``Authorization: Bearer`` or ``X-API-Key``),
``model`` = a base model id, ``tinker://<run>/sampler_weights/<name>`` or ``<base>;<tinker path>``.
Requests are rendered with the model's own chat template (services/common/renderers), sampled through
the scheduler like ``/api/v1/asample`` (compat.py), and answered in OpenAI's shape with two extension fields
for training on exactly what was sampled: ``prompt_token_ids`` (top level) and per choice ``token_ids`` and
``token_logprobs`` (every sampled token, a final EOS included; log p under the model at temperature 1,
as ``SamplingClient.sample`` reports them). Errors: ``{"error": {"message", "type", "param", "code"}}``.
``stream: true`` sends the answer as server-sent events once it is sampled (not token by token).
"""

from __future__ import annotations

import json
import logging
import time
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

log = logging.getLogger("backend.oai")
router = APIRouter(prefix="/oai/api/v1")
MAX_N = 128


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    code = "model_not_found" if status == 404 and message.startswith("model ") else None
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}




def _params(body: dict) -> tuple[int, dict[str, Any]]:
    """(n, asample sampling_params) from an OpenAI request; wire.sample_spec checks the values."""
    if body.get("best_of") not in (None, 1) or body.get("suffix") is not None:
        raise BadRequest("best_of and suffix are not supported by this backend")
    if body.get("echo"):
        raise BadRequest("echo is not supported by this backend (prompt_token_ids are in every answer)")
    n = compat.int_field(body, "n", 1, 1, MAX_N)
    assert n is not None
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    stop = body.get("stop")
    params = {"max_tokens": mt, "temperature": compat.number_field(body, "temperature"),
              "top_p": compat.number_field(body, "top_p"), "seed": body.get("seed"),
              "stop": stop if stop is not None else None}
    if body.get("top_k") is not None:   # vLLM's extension
        params["top_k"] = body["top_k"]
    return n, params


def _usage(s: compat.Sampled) -> dict[str, int]:
    out = sum(len(t) for t, _, _ in s.sequences)
    return {"prompt_tokens": len(s.prompt), "completion_tokens": out, "total_tokens": len(s.prompt) + out}


def _token_logprobs(tok: Any, tokens: list[int], lps: list[float]) -> list[dict[str, Any]]:
    out = []
    for t, lp in zip(tokens, lps):
        s = tok.decode([t], skip_special_tokens=False)
        out.append({"token": s, "logprob": lp, "bytes": list(s.encode("utf-8")), "top_logprobs": []})
    return out


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _stream(chunks: list[Any]) -> StreamingResponse:
    async def gen() -> AsyncIterator[bytes]:
        for c in chunks:
            yield _sse(c)
        yield b"data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _logprobs_wanted(body: dict) -> bool:
    top = compat.int_field(body, "top_logprobs", 0, 0, 20)
    if top:
        raise BadRequest("top_logprobs > 0 is not supported by this backend (the sampled tokens' logprobs are "
                         "returned with logprobs: true)")
    lp = body.get("logprobs")
    if lp is not None and not isinstance(lp, bool):
        raise BadRequest(f"logprobs must be true or false, got {lp!r}")
    return bool(lp)


# ---------------------------------------------------------------------- chat completions
@router.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await compat.guard(request, _chat, error_body)


async def _chat(B: BackendState, body: dict) -> Response:
    target = await compat.resolve(B, body.get("model"))
    messages = renderers.normalize_messages(body.get("messages"), strict=True)
    tools = renderers.normalize_tools(body.get("tools"), strict=True)
    choice = body.get("tool_choice")
    if choice == "none":
        tools = None
    elif choice not in (None, "auto"):
        raise BadRequest("tool_choice must be 'auto' or 'none' (forcing a tool call is not supported)")
    want_lp = _logprobs_wanted(body)
    n, params = _params(body)
    tok = compat.tokenizer(target.path)
    prompt = renderers.template_prompt_tokens(tok, messages, tools)
    s = await compat.sample(B, target, prompt, n, params, "/oai chat/completions")
    eos = set(target.info.eos_token_ids)
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    choices: list[dict[str, Any]] = []
    for i, (tokens, lps, reason) in enumerate(s.sequences):
        reply = parse_reply(renderers.completion_text(tok, tokens, eos, s.stop_strings))
        msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            msg["tool_calls"] = reply.tool_calls
        choices.append({"index": i, "message": msg,
                        "finish_reason": "tool_calls" if reply.tool_calls else reason,
                        "logprobs": {"content": _token_logprobs(tok, tokens, lps)} if want_lp else None,
                        "token_ids": tokens, "token_logprobs": lps, "_reply": reply})
    if not body.get("stream"):
        for c in choices:
            c.pop("_reply")
        return compat.json_response({"id": cid, "object": "chat.completion", "created": created, "model": target.name,
                      "choices": choices, "usage": _usage(s), "prompt_token_ids": prompt})
    head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": target.name}
    chunks: list[Any] = []
    for c in choices:
        i, reply = c["index"], c["_reply"]
        chunks.append({**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None}]})
        for piece in renderers.stream_pieces(tok, c["token_ids"], reply.content or ""):
            chunks.append({**head, "choices": [{"index": i, "delta": {"content": piece}, "finish_reason": None}]})
        if reply.tool_calls:
            calls = [{"index": k, **tc} for k, tc in enumerate(reply.tool_calls)]
            chunks.append({**head, "choices": [{"index": i, "delta": {"tool_calls": calls}, "finish_reason": None}]})
        chunks.append({**head, "choices": [{"index": i, "delta": {}, "finish_reason": c["finish_reason"],
                                            "logprobs": c["logprobs"], "token_ids": c["token_ids"],
                                            "token_logprobs": c["token_logprobs"]}],
                       "prompt_token_ids": prompt})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "choices": [], "usage": _usage(s)})
    return _stream(chunks)


# ---------------------------------------------------------------------- completions
def _prompt_tokens(tok: Any, prompt: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest("prompt is empty")
        return list(tok.encode(prompt, add_special_tokens=False))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise BadRequest("prompt must be a string or a list of token ids (one prompt per request)")


@router.post("/completions")
async def completions(request: Request) -> Response:
    return await compat.guard(request, _complete, error_body)


async def _complete(B: BackendState, body: dict) -> Response:
    target = await compat.resolve(B, body.get("model"))
    lp = body.get("logprobs")
    if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= 1):
        raise BadRequest("logprobs must be 0 or 1 here (the sampled tokens' logprobs; more alternatives are not "
                         "supported)")
    n, params = _params(body)
    tok = compat.tokenizer(target.path)
    prompt = _prompt_tokens(tok, body.get("prompt"))
    s = await compat.sample(B, target, prompt, n, params, "/oai completions")
    eos = set(target.info.eos_token_ids)
    cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    choices: list[dict[str, Any]] = []
    for i, (tokens, lps, reason) in enumerate(s.sequences):
        text = renderers.completion_text(tok, tokens, eos, s.stop_strings)
        logprobs = None
        if lp is not None:
            toks = [tok.decode([t], skip_special_tokens=False) for t in tokens]
            offsets, at = [], 0
            for t in toks:
                offsets.append(at)
                at += len(t)
            logprobs = {"tokens": toks, "token_logprobs": lps, "text_offset": offsets,
                        "top_logprobs": [{t: v} for t, v in zip(toks, lps)] if lp else None}
        choices.append({"index": i, "text": text, "finish_reason": reason, "logprobs": logprobs,
                        "token_ids": tokens, "token_logprobs": lps})
    if not body.get("stream"):
        return compat.json_response({"id": cid, "object": "text_completion", "created": created, "model": target.name,
                      "choices": choices, "usage": _usage(s), "prompt_token_ids": prompt})
    head = {"id": cid, "object": "text_completion", "created": created, "model": target.name}
    chunks: list[Any] = []
    for c in choices:
        for piece in renderers.stream_pieces(tok, c["token_ids"], c["text"]):
            chunks.append({**head, "choices": [{"index": c["index"], "text": piece, "finish_reason": None,
                                                "logprobs": None}]})
        chunks.append({**head, "choices": [{**c, "text": ""}], "prompt_token_ids": prompt})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "choices": [], "usage": _usage(s)})
    return _stream(chunks)


@router.get("/models")
async def models(request: Request) -> Response:
    B: BackendState = request.app.state.backend
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "local"} for n in B.runtime.bases]
    return compat.json_response({"object": "list", "data": data})

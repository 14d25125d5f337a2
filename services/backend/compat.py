"""What the OpenAI- and Anthropic-compatible endpoints (oai.py, anthropic_api.py) share: the API key
from either client's header, the ``model`` names they accept, and one sample request through the
backend's own path (wire.sample_spec's checks, a ``sample`` future, the scheduler's SampleJob: the same
fair sampling rounds as ``/api/v1/asample`` and training traffic, the same sampler-weights cache), and the
served model's tokenizer. The chat format (messages -> prompt tokens, sampled text -> tool calls) is the
renderer package's, services/common/renderers/; its ``BadRequest`` is answered as a 400 here.

``model``: a base model id (``local/qwen3-tiny-xs``), a sampler-loadable checkpoint path
(``tinker://<model_id>/sampler_weights/<name>`` or ``.../weights/<name>``), or ``<base>;<tinker path>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import Response
from tinker.proto import tinker_public_pb2 as pb
from transformers import AutoTokenizer

from services.common import renderers
from services.common.text import reject_constant

from . import checkpoints, wire
from .errors import BadRequest, NotFound, ServerFault, TinkerError
from .runtime_api import ModelInfo
from .scheduler import SampleJob
from .state import BackendState

log = logging.getLogger("backend.compat")
PREFIXES = ("/oai/", "/anthropic/")

ErrorBody = Callable[[str, int], dict[str, Any]]
Handler = Callable[[BackendState, dict], Awaitable[Response]]
_tokenizer_lock = threading.Lock()
_tokenizers: dict[str, Any] = {}


def tokenizer(path: str) -> Any:
    """The tokenizer of the base model in directory ``path`` (cached: loaded once per base model, in the API
    process, no runtime call)."""
    with _tokenizer_lock:
        tok = _tokenizers.get(path)
        if tok is None:
            tok = _tokenizers[path] = AutoTokenizer.from_pretrained(path)
        return tok


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(wire.json_response_body(obj), status_code=status, media_type=wire.JSON)


async def guard(request: Request, handle: Handler, error_body: ErrorBody) -> Response:
    """Parse the JSON body and turn the backend's errors into the caller's API error shape
    (``error_body(message, status)``): a failure is logged and answered, never a bare 500 or a reset."""
    try:
        data = body(await request.body())
        return await handle(request.app.state.backend, data)
    except TinkerError as e:
        status = e.status_code if e.status_code in (400, 401, 404, 413, 500) else 400
        return json_response(error_body(e.message, status), status)
    except renderers.BadRequest as e:     # messages or tools the chat format refuses
        return json_response(error_body(str(e), 400), 400)
    except Exception as e:  # noqa: BLE001 (logged; the client gets its API's error shape)
        log.exception("%s failed", request.url.path)
        return json_response(error_body(f"internal error: {type(e).__name__}", 500), 500)


def api_key(request: Request) -> str | None:
    """The key as the tinker SDK and the anthropic client send it (``X-API-Key``) or as the openai
    client does (``Authorization: Bearer <key>``)."""
    key = request.headers.get("x-api-key")
    if key:
        return key
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def _without_nul(v: Any) -> Any:
    if isinstance(v, str):
        return v.replace("\x00", "")
    if isinstance(v, dict):
        return {k: _without_nul(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_without_nul(x) for x in v]
    return v


def body(raw: bytes) -> dict[str, Any]:
    """A JSON object body, checked like every backend body (wire.parse_json: finite numbers, no lone
    surrogates, bounded nesting) except that NUL characters are text here: an agent's terminal output
    carries them into message contents, and the tokenizer encodes them like any other byte."""
    try:
        data = json.loads(raw or b"{}", parse_constant=reject_constant)
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    except ValueError as e:
        raise BadRequest(f"request body is not valid JSON: {str(e)[:200]}") from e
    wire.check_text(_without_nul(data))
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


@dataclass
class Target:
    """What a ``model`` name samples: a served base model and its sampler weights (None = the base)."""

    name: str              # as the caller wrote it (echoed in responses)
    base: str
    path: str              # the base model's directory (its tokenizer and chat template)
    info: ModelInfo
    weights_key: str | None


def _base(B: BackendState, name: str, model: str):
    base = B.runtime.bases.get(name)
    if base is None:
        raise NotFound(f"model {model!r} not found: this backend serves the base models {', '.join(B.runtime.bases)} "
                       "and their checkpoints (tinker://<run>/sampler_weights/<name>, or '<base>;<tinker path>')")
    return base


async def resolve(B: BackendState, model: Any) -> Target:
    if not isinstance(model, str) or not model:
        raise BadRequest("model must be a base model id, a tinker:// checkpoint path or '<base>;<tinker path>'")
    base_name, path = (model.split(";", 1) if ";" in model else
                       ("", model) if model.startswith("tinker://") else (model, ""))
    if not path:
        base = _base(B, base_name, model)
        return Target(model, base.name, base.path, base.info, None)
    _, ck = B.checkpoint(path)   # 400 for a malformed path, 404 for another tenant's
    if not checkpoints.exists(ck):
        raise NotFound(f"checkpoint {path} does not exist")
    ck_base = checkpoints.train_config(ck)["base_model"]
    if base_name and base_name != ck_base:
        raise BadRequest(f"{path} was trained on {ck_base}, not {base_name}")
    base = _base(B, ck_base, model)
    key = f"ckpt:{ck}"
    if not B.runtime.has_sampler(key):   # load it once; later requests share the runtime's sampler cache
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: B.scheduler.call(lambda rt: rt.has_sampler(key) or rt.sampler_from_checkpoint(key, ck)))
    return Target(model, base.name, base.path, base.info, key)


@dataclass
class Sampled:
    prompt: list[int]
    sequences: list[tuple[list[int], list[float], str]]   # (tokens, logprobs, "stop" | "length")
    stop_strings: list[str]


async def sample(B: BackendState, t: Target, prompt: list[int], n: int, params: dict[str, Any],
                 route: str = "") -> Sampled:
    """``n`` samples of ``prompt``: checked by wire.sample_spec like an asample body, run as a SampleJob."""
    body = {"prompt": {"chunks": [{"type": "encoded_text", "tokens": prompt}]}, "num_samples": n,
            "sampling_params": params}
    spec = wire.sample_spec(body, t.info, B.default_max_tokens, B.limits)
    rid = B.new_future("sample")
    log.info("%s model=%s: %d prompt tokens, n=%d, max_tokens=%d (request %s)", route, t.name, len(prompt), n,
             spec.max_tokens, rid)
    B.submit(SampleJob(rid, (t.base, t.weights_key), spec))
    ev = B.events.get(rid)
    if ev is not None:
        await ev.wait()
    B.events.pop(rid, None)
    row = B.store.future(rid)
    B.store.mark_retrieved(rid)   # deleted after backend.future_ttl_s like a retrieved asample future
    if row is None or row["status"] != "done":
        err = (row or {}).get("error") or "the sample request was lost"
        raise (BadRequest if (row or {}).get("category") == "user" else ServerFault)(err)
    res = pb.SampleResponse()
    res.ParseFromString(row["result"])
    seqs = [(np.frombuffer(s.tokens, np.int32).tolist(), np.frombuffer(s.logprobs, np.float32).tolist(),
             "stop" if s.stop_reason == pb.STOP_REASON_STOP else "length") for s in res.sequences]
    return Sampled(prompt, seqs, list(spec.stop_strings))


def int_field(body: dict, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise BadRequest(f"{key} must be an integer in [{lo}, {hi if hi is not None else '...'}], got {v!r}")
    return v


def number_field(body: dict, key: str) -> float | None:
    v = body.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise BadRequest(f"{key} must be a number, got {v!r}")
    return v

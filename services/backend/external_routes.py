"""Routes for weights leaving the stack, and clean answers for SDK 0.38 routes this backend does not serve.

* ``POST /api/v1/save_weights_external`` (future): the training model's current weights as a Hugging Face
  directory (``tinker://<model_id>/external_weights/<name>``): a PEFT adapter for LoRA models, merged full
  weights for full fine-tuning (export.py writes both; ``bash run.sh export`` can merge a LoRA too);
  with ``age_encryption_recipients`` every file is stored age-encrypted as ``FILE.age``.
* ``GET /api/v1/training_runs/<model_id>/checkpoints/external_weights/<name>/external_weights_urls``:
  one signed URL per file, served by ``GET /files/external_weights/...`` (no API key: the HMAC signature
  authorizes one file until ``expires``; URLs die with the backend process, the SDK re-signs).
* ``PUT /api/v1/training_runs/<model_id>/checkpoints/<kind>/<name>/ttl``: set or clear a checkpoint's
  expiry (3600 s to 10 years; ``ttl_seconds`` of save_weights / save_weights_for_sampler sets the same);
  expired checkpoints are deleted the next time they are listed or read.

Together these are what ``tinker checkpoint download`` (the SDK's CLI) and ``tinker_cookbook.weights.download``
(which encrypts its temporary export to a one-off age key) need. Every other SDK route the
backend lacks answers 400 with a ``detail`` naming the route, so the SDK raises at once (5xx would be retried).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from . import checkpoints, wire
from .errors import BadRequest, NotFound
from .routes import Api, body_json, json_response
from .scheduler import SaveExternalJob
from .state import BackendState

URL_TTL_S = 3600
_SECRET = secrets.token_bytes(32)  # signs download URLs; they die with the backend process
UNSUPPORTED = {  # SDK route (any method) -> what it is for / what to use instead
    "/api/v1/copy_weights": "copying checkpoints between projects (there is one local project)",
    "/api/v1/cancel_future": "cancelling requests (dynamic_config has sample_cancel_enabled=false)",
    "/api/v1/retrieve_futures": "batched future retrieval (client config has sample_use_retrieve_futures=false)",
    "/api/v1/join_sampling_session": "joining sampling sessions (client config has sample_join_sampling_session=false)",
    "/api/v1/create_custom_loss": "server-side custom losses (forward_backward_custom runs the loss in the client)",
    "/api/v1/sessions/search": "session search (list sessions with GET /api/v1/sessions)",
    "/api/v1/audit": "audit logs",
    "/api/v1/auth/apikey/me": "API-key introspection (keys are configured in config/runtime.yaml)",
    "/api/v1/auth/token": "token exchange (this backend authenticates with X-API-Key only)",
    "/api/v1/billing/usage/events": "billing",
    "/api/v1/billing/usage/checkpoints/current": "billing",
    "/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/publish": "publishing checkpoints",
    "/api/v1/sessions/{session_id}/project": "projects (there is one local project)",
    "/api/v1/sessions/{session_id}/trace_export": "session trace export",
}

router = APIRouter()


def _sign(rel: str, expires: int) -> str:
    return hmac.new(_SECRET, f"{rel}\n{expires}".encode(), hashlib.sha256).hexdigest()


def _external_dir(B: BackendState, model_id: str, name: str) -> Path:
    _, ck = B.checkpoint(checkpoints.uri(model_id, "external_weights", name), ("external_weights",))
    if checkpoints.entry(model_id, "external_weights", ck) is None:  # also drops it if it expired
        raise NotFound(f"external weights {checkpoints.uri(model_id, 'external_weights', name)} do not exist")
    return ck


@router.post("/api/v1/save_weights_external")
async def save_weights_external(request: Request, B: Api):
    raw = await request.body()
    req = wire.save_weights_external(await body_json(request))
    row, _ = B.model_info(req.model_id)
    _, dest = B.checkpoint(checkpoints.uri(req.model_id, "external_weights", req.name), ("external_weights",))
    dup = B.dedupe(req.model_id, req.seq_id, raw)
    if dup:
        return {"request_id": dup, "model_id": req.model_id}
    rid = B.new_future("save_weights_external", req.model_id, req.seq_id, raw)
    B.store.touch_model(req.model_id)
    B.submit(SaveExternalJob(rid, req.model_id, req.seq_id, req, dest, row["base_model"]))
    return {"request_id": rid, "model_id": req.model_id}


@router.get("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/external_weights_urls")
async def external_weights_urls(model_id: str, kind: str, name: str, request: Request, B: Api):
    if kind != "external_weights":
        raise BadRequest(f"only external_weights checkpoints have download URLs, not {kind}/{name}: export them "
                         "with TrainingClient.save_weights_external (or `bash run.sh export`)")
    files = _external_dir(B, model_id, name) / "files"
    expires = int(time.time()) + URL_TTL_S
    base = str(request.base_url).rstrip("/")
    urls = {}
    for f in sorted(p for p in files.rglob("*") if p.is_file()):
        rel = f"{model_id}/{name}/{f.relative_to(files).as_posix()}"
        urls[f.relative_to(files).as_posix()] = (f"{base}/files/external_weights/{quote(rel)}"
                                                 f"?expires={expires}&sig={_sign(rel, expires)}")
    return {"urls": urls, "expires": datetime.fromtimestamp(expires, tz=timezone.utc).isoformat()}


@router.get("/files/external_weights/{model_id}/{name}/{rel:path}")
async def external_file(model_id: str, name: str, rel: str, B: Api, expires: int = 0, sig: str = ""):
    full = f"{model_id}/{name}/{rel}"
    if expires < time.time() or not hmac.compare_digest(sig, _sign(full, expires)):
        return json_response({"detail": "invalid or expired download URL: ask external_weights_urls for a new one"},
                             403)
    files = (_external_dir(B, model_id, name) / "files").resolve()
    path = (files / rel).resolve()
    if not path.is_relative_to(files) or not path.is_file():
        raise NotFound(f"no file {rel!r} in external weights {model_id}/{name}")
    return FileResponse(path)


@router.put("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/ttl")
async def set_ttl(model_id: str, kind: str, name: str, request: Request, B: Api):
    body = await body_json(request)
    ttl = wire.check_ttl(body.get("ttl_seconds"))
    _, ck = B.checkpoint(checkpoints.uri(model_id, kind, name), tuple(checkpoints.KINDS))
    if checkpoints.entry(model_id, kind, ck) is None:
        raise NotFound(f"checkpoint {kind}/{name} of {model_id} does not exist")
    checkpoints.set_expiry(ck, ttl)
    return {}


def _unsupported(path: str, what: str):
    async def handler():
        return Response(wire.json_response_body({"detail": f"{path} is not supported by this backend (local-tinker): "
                                                           f"{what}. See docs/backend.md for the routes it serves."}),
                        status_code=400, media_type=wire.JSON, headers={"x-should-retry": "false"})
    return handler


for _path, _what in UNSUPPORTED.items():
    router.add_api_route(_path, _unsupported(_path, _what), methods=["GET", "POST", "PUT", "DELETE"],
                         include_in_schema=False)

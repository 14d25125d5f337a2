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
import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response

from .engine import Job
from .errors import BadRequest, NotFound
from .export import export_checkpoint

URL_TTL_S = 3600
MIN_TTL_S, MAX_TTL_S = 3600, 10 * 365 * 24 * 3600
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


def _json(obj: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json.dumps(obj).encode(), status_code=status, media_type="application/json", headers=headers)


def add_routes(app: FastAPI, B) -> None:
    """Register the routes on ``app`` (before the generic ones, so /sessions/search is not a session id)."""
    secret = secrets.token_bytes(32)

    def sign(rel: str, expires: int) -> str:
        return hmac.new(secret, f"{rel}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def external_dir(model_id: str, name: str) -> Path:
        _, _, _, ck = B.parse_tinker_path(f"tinker://{model_id}/external_weights/{name}", ("external_weights",))
        if B.checkpoint_entry(model_id, "external_weights", ck) is None:  # also drops it if it expired
            raise NotFound(f"external weights tinker://{model_id}/external_weights/{name} do not exist")
        return ck

    @app.post("/api/v1/save_weights_external")
    async def save_weights_external(request: Request):
        raw = await request.body()
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise BadRequest(f"request body is not valid JSON: {e}") from e
        model_id, name, seq_id = body.get("model_id"), body.get("path"), body.get("seq_id")
        if not isinstance(model_id, str):
            raise BadRequest("missing field 'model_id'")
        if not isinstance(name, str):
            raise BadRequest("save_weights_external needs a path (the export's name)")
        if seq_id is not None and (not isinstance(seq_id, int) or isinstance(seq_id, bool)):
            raise BadRequest(f"field 'seq_id' has the wrong type ({type(seq_id).__name__})")
        row, _ = B.model_info(model_id)
        _, _, _, dest = B.parse_tinker_path(f"tinker://{model_id}/external_weights/{name}", ("external_weights",))
        ttl = check_ttl(body.get("ttl_seconds"))
        recipients = _age_recipients(body.get("age_encryption_recipients"))
        dup = B.dedupe(model_id, seq_id, raw)
        if dup:
            return {"request_id": dup, "model_id": model_id}
        rid = B.new_future("save_weights_external", model_id, seq_id, raw)
        B.store.touch_model(model_id)

        def run(rt):
            src = rt.save(model_id, f".src-{name}-{time.time_ns()}", "external_weights", False, True)
            try:
                meta = json.loads((src / "meta.json").read_text())
                if dest.exists():
                    shutil.rmtree(dest)
                info = export_checkpoint(src, dest / "files", rt.base(row["base_model"]).path,
                                         adapter=meta["train_config"]["rank"] > 0, source=f"tinker://{model_id}")
                if recipients:
                    _encrypt_tree(dest / "files", recipients)
            finally:
                shutil.rmtree(src, ignore_errors=True)
            meta.update(name=name, kind="external_weights", format=info["format"],
                        expires_at=time.time() + ttl if ttl else None, user_metadata={})
            (dest / "meta.json").write_text(json.dumps(meta, indent=1))
            size = sum(f.stat().st_size for f in (dest / "files").rglob("*") if f.is_file())
            return "application/json", json.dumps({"path": f"tinker://{model_id}/external_weights/{name}",
                                                   "size_bytes": size, "type": "save_weights_external"}).encode()

        B.submit(Job(rid, "save_weights_external", run=run, model_id=model_id, seq_id=seq_id))
        return {"request_id": rid, "model_id": model_id}

    @app.get("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/external_weights_urls")
    async def external_weights_urls(model_id: str, kind: str, name: str, request: Request):
        if kind != "external_weights":
            raise BadRequest(f"only external_weights checkpoints have download URLs, not {kind}/{name}: export them "
                             "with TrainingClient.save_weights_external (or `bash run.sh export`)")
        files = external_dir(model_id, name) / "files"
        expires = int(time.time()) + URL_TTL_S
        base = str(request.base_url).rstrip("/")
        urls = {}
        for f in sorted(p for p in files.rglob("*") if p.is_file()):
            rel = f"{model_id}/{name}/{f.relative_to(files).as_posix()}"
            urls[f.relative_to(files).as_posix()] = (f"{base}/files/external_weights/{quote(rel)}"
                                                     f"?expires={expires}&sig={sign(rel, expires)}")
        from datetime import datetime, timezone

        return {"urls": urls, "expires": datetime.fromtimestamp(expires, tz=timezone.utc).isoformat()}

    @app.get("/files/external_weights/{model_id}/{name}/{rel:path}")
    async def external_file(model_id: str, name: str, rel: str, expires: int = 0, sig: str = ""):
        full = f"{model_id}/{name}/{rel}"
        if expires < time.time() or not hmac.compare_digest(sig, sign(full, expires)):
            return _json({"detail": "invalid or expired download URL: ask external_weights_urls for a new one"}, 403)
        files = (external_dir(model_id, name) / "files").resolve()
        path = (files / rel).resolve()
        if not path.is_relative_to(files) or not path.is_file():
            raise NotFound(f"no file {rel!r} in external weights {model_id}/{name}")
        return FileResponse(path)

    @app.put("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/ttl")
    async def set_ttl(model_id: str, kind: str, name: str, request: Request):
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as e:
            raise BadRequest(f"request body is not valid JSON: {e}") from e
        ttl = check_ttl(body.get("ttl_seconds") if isinstance(body, dict) else None)
        _, _, _, ck = B.parse_tinker_path(f"tinker://{model_id}/{kind}/{name}", ("weights", "sampler_weights", "external_weights"))
        if B.checkpoint_entry(model_id, kind, ck) is None:
            raise NotFound(f"checkpoint {kind}/{name} of {model_id} does not exist")
        set_expiry(ck, ttl)
        return {}

    for path, what in UNSUPPORTED.items():
        app.add_api_route(path, _unsupported(path, what), methods=["GET", "POST", "PUT", "DELETE"], include_in_schema=False)


def _unsupported(path: str, what: str):
    async def handler():
        return _json({"detail": f"{path} is not supported by this backend (local-tinker): {what}. "
                                "See docs/backend.md for the routes it serves."}, 400, {"x-should-retry": "false"})
    return handler


def _age_recipients(value: Any) -> list:
    """``age_encryption_recipients``: native "age1..." keys or SSH public keys (pyrage)."""
    if value is None:
        return []
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
        raise BadRequest("age_encryption_recipients must be a non-empty list of age (age1...) or SSH public keys")
    import pyrage

    out = []
    for r in value:
        try:
            out.append(pyrage.x25519.Recipient.from_str(r) if r.startswith("age1") else pyrage.ssh.Recipient.from_str(r))
        except pyrage.RecipientError as e:
            raise BadRequest(f"age_encryption_recipients: {r[:40]!r} is not an age or SSH public key ({e})") from e
    return out


def _encrypt_tree(root: Path, recipients: list) -> None:
    """Encrypt every file under ``root`` to ``recipients`` as FILE.age (the plaintext is removed)."""
    import pyrage

    for f in [p for p in root.rglob("*") if p.is_file()]:
        pyrage.encrypt_file(str(f), f"{f}.age", recipients)
        f.unlink()


def set_expiry(ck: Path, ttl: int | None) -> None:
    """Expire checkpoint directory ``ck`` ``ttl`` seconds from now (None: never)."""
    meta = json.loads((ck / "meta.json").read_text())
    meta["expires_at"] = time.time() + ttl if ttl else None
    tmp = ck / f".meta.json.tmp{time.time_ns()}"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(ck / "meta.json")


def check_ttl(ttl: Any) -> int | None:
    if ttl is None:
        return None
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not MIN_TTL_S <= ttl <= MAX_TTL_S:
        raise BadRequest(f"ttl_seconds must be an integer from {MIN_TTL_S} (1 hour) to {MAX_TTL_S} (10 years), or null; got {ttl!r}")
    return ttl

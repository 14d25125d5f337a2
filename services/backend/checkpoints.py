"""The one owner of ``tinker://`` paths and checkpoint metadata (``meta.json``).

A checkpoint is the directory ``<checkpoint_dir>/<model_id>/<kind>/<name>``, addressed as
``tinker://<model_id>/<kind>/<name>``; kind is ``weights`` (training state), ``sampler_weights`` or
``external_weights`` (a Hugging Face export). Its ``meta.json`` holds the train config, steps, the
caller's ``user_metadata``, whether optimizer state was saved and an optional ``expires_at``; a
directory without one is not a checkpoint (yet: writers rename a finished temporary directory into
place). Everything that reads or writes those files goes through this module.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import BadRequest, NotFound

log = logging.getLogger("backend.checkpoints")

SCHEME = "tinker://"
META = "meta.json"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,199}$")   # "<session>:train:<seq>"
MAX_PATH = len(SCHEME) + 200 + 1 + len("external_weights") + 1 + 128
KINDS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}  # dir -> SDK type
LOADABLE = ("weights", "sampler_weights")


@dataclass(frozen=True)
class CheckpointPath:
    """A parsed ``tinker://<model_id>/<kind>/<name>``."""

    model_id: str
    kind: str
    name: str

    def directory(self, root: Path) -> Path:
        return root / self.model_id / self.kind / self.name


def uri(model_id: str, kind: str, name: str) -> str:
    return f"{SCHEME}{model_id}/{kind}/{name}"


def parse(path: Any, kinds: tuple[str, ...] = LOADABLE, what: str = "path") -> CheckpointPath:
    """``path`` (the request field ``what``) as a CheckpointPath of one of ``kinds``; BadRequest (400)
    for anything else, before any file-system access: at most ``MAX_PATH`` characters, a model id of
    [A-Za-z0-9:._-] (no '..', no separators) and a checkpoint name of ``NAME_RE``."""
    shown = repr(path)[:120]
    if not isinstance(path, str) or not path.startswith(SCHEME):
        raise BadRequest(f"{what}: not a tinker:// path: {shown}")
    if len(path) > MAX_PATH:
        raise BadRequest(f"{what}: checkpoint path longer than {MAX_PATH} characters: {shown}...")
    parts = path[len(SCHEME):].split("/")
    if (len(parts) != 3 or parts[1] not in kinds or not NAME_RE.match(parts[2]) or not MODEL_ID_RE.match(parts[0])
            or ".." in parts[0]):
        raise BadRequest(f"{what}: malformed checkpoint path {shown}: expected "
                         f"tinker://<model_id>/{'|'.join(kinds)}/<name>")
    return CheckpointPath(*parts)


def check_name(name: Any) -> str:
    """A checkpoint name as the caller gives it to save_weights / save_weights_for_sampler."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadRequest(f"invalid checkpoint name {name!r}: use 1-128 characters from [A-Za-z0-9._-], no '/'")
    return name


# ---------------------------------------------------------------------- meta.json
def exists(d: Path) -> bool:
    return (d / META).exists()


def read_meta(d: Path) -> dict[str, Any]:
    """The metadata of checkpoint directory ``d``; NotFound (404) if it is not a checkpoint."""
    if not exists(d):
        raise NotFound(f"checkpoint not found: {d.name}")
    return json.loads((d / META).read_text())


def train_config(d: Path) -> dict[str, Any]:
    """The ``train_config`` a checkpoint was saved with (base_model, rank, train_* flags, seed)."""
    return read_meta(d)["train_config"]


def new_meta(model_id: str, kind: str, name: str, train_config: dict[str, Any], steps: int,
             user_metadata: dict[str, Any] | None, has_optimizer: bool) -> dict[str, Any]:
    return {"model_id": model_id, "kind": kind, "name": name, "created": time.time(), "train_config": train_config,
            "steps": steps, "user_metadata": user_metadata or {}, "has_optimizer": has_optimizer}


def write_meta(d: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` of ``d`` atomically (a reader sees the old or the new file, never half)."""
    tmp = d / f".{META}.tmp{time.time_ns()}"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(d / META)


def set_expiry(d: Path, ttl: int | None) -> None:
    """Expire checkpoint directory ``d`` ``ttl`` seconds from now (None: never)."""
    meta = read_meta(d)
    meta["expires_at"] = time.time() + ttl if ttl else None
    write_meta(d, meta)


def spill_meta(train_config: dict[str, Any]) -> dict[str, Any]:
    """Metadata of an evicted sampler snapshot spilled to disk (loadable like a sampler checkpoint)."""
    return {"kind": "sampler_spill", "train_config": train_config}


# ---------------------------------------------------------------------- listings (the SDK's Checkpoint)
def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def metadata_of(stored: Any) -> dict[str, str]:
    """A stored ``user_metadata`` as the SDK shows it ({str: str}); {} for a malformed old row."""
    return {str(k): str(v) for k, v in stored.items()} if isinstance(stored, dict) else {}


def entry(model_id: str, kind: str, d: Path) -> dict[str, Any] | None:
    """The SDK's Checkpoint for directory ``d``; None if absent (or past its TTL, which deletes it)."""
    if not exists(d):
        return None
    meta = read_meta(d)
    if meta.get("expires_at") and meta["expires_at"] < time.time():
        log.info("checkpoint %s/%s of %s expired: deleting it", kind, d.name, model_id)
        shutil.rmtree(d, ignore_errors=True)
        return None
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    return {"checkpoint_id": f"{kind}/{d.name}", "checkpoint_type": KINDS[kind],
            "time": _iso(meta.get("created", 0)), "tinker_path": uri(model_id, kind, d.name),
            "size_bytes": size, "public": False, "user_metadata": metadata_of(meta.get("user_metadata")),
            "expires_at": _iso(meta["expires_at"]) if meta.get("expires_at") else None}


def listing(root: Path, model_id: str) -> list[dict[str, Any]]:
    """Every live checkpoint of ``model_id``, oldest first."""
    out = []
    for kind in KINDS:
        kind_dir = root / model_id / kind
        if kind_dir.is_dir():
            for d in sorted(kind_dir.iterdir()):
                if d.is_dir() and not d.name.startswith("."):
                    e = entry(model_id, kind, d)
                    if e:
                        out.append(e)
    out.sort(key=lambda e: e["time"])
    return out

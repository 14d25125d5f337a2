"""Validation at the backend's API edge (issue 17): bounded, well-typed input before anything
is stored or queued, so a bad request gets a 4xx and can never break a later listing.

* JSON bodies: finite numbers only (no NaN/Infinity), strings without NUL bytes or lone
  surrogates, nesting at most ``MAX_DEPTH`` levels.
* ``user_metadata``: an object of at most 64 keys, string keys, scalar values, 16 KB as JSON;
  ``tags``: at most 64 strings. Both are stored, so both are checked before they are.
* Limits (``backend:`` config): ``max_body_mb`` (every request body, zstd-decompressed ones too),
  ``max_lora_rank``, ``max_sample_tokens`` (num_samples x max_tokens of one sample request),
  ``max_batch_tokens`` (tokens of one forward_backward request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, field_validator

from services.common.text import MAX_DEPTH, reject_constant, text_problem

from .errors import BadRequest

MAX_METADATA_BYTES = 16 * 1024


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 64 * 1024 * 1024
    max_lora_rank: int = 256
    max_sample_tokens: int = 1 << 20
    max_batch_tokens: int = 1 << 21

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "Limits":
        d = cls()
        return cls(max_body_bytes=int(float(cfg.get("max_body_mb", d.max_body_bytes / 2**20)) * 2**20),
                   max_lora_rank=int(cfg.get("max_lora_rank", d.max_lora_rank)),
                   max_sample_tokens=int(cfg.get("max_sample_tokens", d.max_sample_tokens)),
                   max_batch_tokens=int(cfg.get("max_batch_tokens", d.max_batch_tokens)))


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON, or BadRequest (400) for anything that is not plain, finite, valid text."""
    try:
        data = json.loads(raw, parse_constant=reject_constant)
    except RecursionError:
        raise BadRequest(f"request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as e:
        raise BadRequest(f"request body is not valid JSON: {str(e)[:200]}") from e
    check_text(data)
    return data


def check_text(value: Any, where: str = "body") -> None:
    bad = text_problem(value, where)
    if bad:
        raise BadRequest(bad)


class _Stored(BaseModel):
    """What create_session / create_model / save_weights store about a caller."""
    model_config = ConfigDict(extra="ignore")
    tags: list[StrictStr] | None = None
    user_metadata: dict[StrictStr, StrictStr | StrictInt | StrictFloat | StrictBool | None] | None = None

    @field_validator("tags")
    @classmethod
    def _few_tags(cls, v):
        if v is not None and (len(v) > 64 or any(len(t) > 256 for t in v)):
            raise ValueError("at most 64 tags of at most 256 characters")
        return v

    @field_validator("user_metadata")
    @classmethod
    def _small(cls, v):
        if v is not None and (len(v) > 64 or len(json.dumps(v)) > MAX_METADATA_BYTES):
            raise ValueError(f"at most 64 keys and {MAX_METADATA_BYTES} bytes as JSON")
        return v


def stored_fields(body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(tags, user_metadata) of a request, validated; 400 otherwise."""
    try:
        m = _Stored.model_validate({k: body.get(k) for k in ("tags", "user_metadata")})
    except ValidationError as e:
        raise BadRequest("; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in e.errors())[:1000]) from None
    return list(m.tags or []), dict(m.user_metadata or {})


def metadata_of(stored: Any) -> dict[str, str]:
    """A stored ``user_metadata`` as the SDK shows it ({str: str}); {} for a malformed old row."""
    return {str(k): str(v) for k, v in stored.items()} if isinstance(stored, dict) else {}


def check_lora_rank(rank: int, limits: Limits) -> None:
    if rank > limits.max_lora_rank:
        raise BadRequest(f"lora_config.rank {rank} is above this backend's max_lora_rank {limits.max_lora_rank}")


def check_sample_tokens(num_samples: int, max_tokens: int, limits: Limits) -> None:
    if num_samples * max_tokens > limits.max_sample_tokens:
        raise BadRequest(f"num_samples x max_tokens = {num_samples * max_tokens} is above this backend's "
                         f"max_sample_tokens {limits.max_sample_tokens}: split the request")


def check_batch_tokens(n_tokens: int, limits: Limits) -> None:
    if n_tokens > limits.max_batch_tokens:
        raise BadRequest(f"forward_backward request has {n_tokens} tokens, above this backend's max_batch_tokens "
                         f"{limits.max_batch_tokens}: split the batch")


def decompress_zstd(raw: bytes, limits: Limits) -> bytes:
    """A zstd body, decompressed to at most ``max_body_bytes`` (a small bomb cannot allocate more)."""
    import zstandard

    try:
        size = zstandard.frame_content_size(raw)
        if size > limits.max_body_bytes:
            raise BadRequest(f"decompressed body larger than {limits.max_body_bytes} bytes")
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=limits.max_body_bytes)
    except zstandard.ZstdError as e:
        raise BadRequest(f"body is not valid zstd (or decompresses to more than {limits.max_body_bytes} bytes): {e}") from e

"""The wire layer: every request the API accepts, as a typed value, and every check on it before
anything is stored or queued (a bad request gets a 4xx with a clear ``detail`` and loses nothing);
and the encoding of every response body (JSON here, protobuf in codec.py).

* JSON bodies: finite numbers only (no NaN/Infinity), strings without NUL bytes or lone
  surrogates, nesting at most ``MAX_DEPTH`` levels.
* ``user_metadata``: an object of at most 64 keys, string keys, scalar values, 16 KB as JSON;
  ``tags``: at most 64 strings. Both are stored, so both are checked before they are.
* Limits (``backend:`` config): ``max_body_mb`` (every request body, zstd-decompressed ones too),
  ``max_lora_rank``, ``max_sample_tokens`` (num_samples x max_tokens of one sample request),
  ``max_batch_tokens`` (tokens of one forward_backward request).

Checks that need the backend's state (is the session known, does the checkpoint exist) are the
API layer's (routes.py); these functions look only at the request and the served model's facts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyrage
import zstandard
from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from services.common.text import MAX_DEPTH, reject_constant, text_problem

from . import checkpoints, codec, losses
from .checkpoints import CheckpointPath
from .codec import FwdBwdRequest
from .errors import BadRequest
from .runtime_api import ModelInfo, TrainConfig
from .sampler import SampleSpec

PROTO = "application/x-protobuf"
JSON = "application/json"
Result = tuple[str, bytes]  # (content type, body) of a finished job
MAX_NUM_SAMPLES = 1024
MIN_TTL_S, MAX_TTL_S = 3600, 10 * 365 * 24 * 3600
MAX_METADATA_BYTES = 16 * 1024
MAX_INT = 1 << 63            # integers are stored in SQLite (64-bit)
MAX_ID_CHARS = 512           # ids and names the caller sends back (tinker:// paths: checkpoints.MAX_PATH)
ID_FIELDS = ("session_id", "model_id", "sampling_session_id", "request_id", "base_model")


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
    def _few_tags(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (len(v) > 64 or any(len(t) > 256 for t in v)):
            raise ValueError("at most 64 tags of at most 256 characters")
        return v

    @field_validator("user_metadata")
    @classmethod
    def _small(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and (len(v) > 64 or len(json.dumps(v)) > MAX_METADATA_BYTES):
            raise ValueError(f"at most 64 keys and {MAX_METADATA_BYTES} bytes as JSON")
        return v


def stored_fields(body: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(tags, user_metadata) of a request, validated; 400 otherwise."""
    try:
        m = _Stored.model_validate({k: body.get(k) for k in ("tags", "user_metadata")})
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in e.errors())
        raise BadRequest(msg[:1000]) from None
    return list(m.tags or []), dict(m.user_metadata or {})


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
    try:
        size = zstandard.frame_content_size(raw)
        if size > limits.max_body_bytes:
            raise BadRequest(f"decompressed body larger than {limits.max_body_bytes} bytes")
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=limits.max_body_bytes)
    except zstandard.ZstdError as e:
        raise BadRequest(f"body is not valid zstd (or decompresses to more than {limits.max_body_bytes} bytes): "
                         f"{e}") from e


# ---------------------------------------------------------------------- fields
def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON request body (empty: {}); 400 unless it is an object."""
    data = parse_json(raw or b"{}")
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def field(body: dict, key: str, typ: type | tuple, required: bool = True, default: Any = None) -> Any:
    if key not in body or body[key] is None:
        if required:
            raise BadRequest(f"missing field {key!r}")
        return default
    v = body[key]
    if typ is int and isinstance(v, bool) or not isinstance(v, typ):
        raise BadRequest(f"field {key!r} has the wrong type ({type(v).__name__})")
    if isinstance(v, int) and not isinstance(v, bool) and not -MAX_INT <= v < MAX_INT:
        raise BadRequest(f"field {key!r} is out of range (a 64-bit integer)")
    if isinstance(v, str) and len(v) > MAX_ID_CHARS and key in ID_FIELDS:
        raise BadRequest(f"field {key!r} is longer than {MAX_ID_CHARS} characters")
    return v


def _int_or_none(body: dict, key: str, what: str) -> int | None:
    v = body.get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise BadRequest(f"{what} must be an integer, got {v!r}")
    return v


ADAM_TYPES = ("adamw", "adam")
OPTIMIZER_HELP = ("this backend supports the adamw optimizer family only (torch.optim.AdamW, the SDK's "
                  "AdamOptimizerConfig / AdamParams): Dimuon's update rule is not public (SDK 0.38 documents only its "
                  "hyperparameters), so it cannot be reproduced here")


def check_optimizer(oc: Any) -> None:
    """create_model's / create-from-state's ``optimizer_config``: absent or the adamw family."""
    if oc is None:
        return
    if not isinstance(oc, dict):
        raise BadRequest(f"optimizer_config must be an object like {{'type': 'adamw'}}, got {oc!r}")
    if oc.get("type", "adamw") not in ADAM_TYPES:
        raise BadRequest(f"unsupported optimizer_config type {oc.get('type')!r}: {OPTIMIZER_HELP}. Create the "
                         "training client without optimizer= (or with types.AdamOptimizerConfig())")


def check_ttl(ttl: Any) -> int | None:
    if ttl is None:
        return None
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not MIN_TTL_S <= ttl <= MAX_TTL_S:
        raise BadRequest(f"ttl_seconds must be an integer from {MIN_TTL_S} (1 hour) to {MAX_TTL_S} (10 years), "
                         f"or null; got {ttl!r}")
    return ttl


# ---------------------------------------------------------------------- responses
def json_response_body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def json_result(obj: Any) -> Result:
    """A finished job's JSON result (what retrieve_future returns)."""
    return JSON, json_response_body(obj)


def forward_backward_result(outs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> Result:
    return PROTO, codec.encode_forward_backward_output(outs, metrics)


def sample_result(sequences: list[tuple], prompt_logprobs: Any, topk_prompt: Any, cache_hit_tokens: int) -> Result:
    seqs = [codec.SampledSeq(t, lp, sr) for t, lp, sr in sequences]
    return PROTO, codec.encode_sample_response(seqs, prompt_logprobs, topk_prompt, cache_hit_tokens)


# ---------------------------------------------------------------------- training requests
class WireModel(BaseModel):
    """A checked request, as the layers below receive it (built by the parse function after its checks;
    strict: a wrong type here is a bug in the parse function, not the caller's)."""

    model_config = ConfigDict(frozen=True, strict=True, arbitrary_types_allowed=True)


class CreateModel(WireModel):
    session_id: str
    model_seq_id: int
    config: TrainConfig
    user_metadata: dict[str, Any]


def train_config(base_model: str, lora: Any, limits: Limits) -> TrainConfig:
    if lora is None:
        return TrainConfig(base_model=base_model, rank=0)
    if not isinstance(lora, dict):
        raise BadRequest("lora_config must be an object")
    rank = lora.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise BadRequest(f"lora_config.rank must be an integer >= 0 (0 = full fine-tuning), got {rank!r}")
    check_lora_rank(rank, limits)
    seed = _int_or_none(lora, "seed", "lora_config.seed")
    return TrainConfig(base_model=base_model, rank=rank, seed=seed, train_mlp=bool(lora.get("train_mlp", True)),
                       train_attn=bool(lora.get("train_attn", True)),
                       train_unembed=bool(lora.get("train_unembed", True)))


def create_model(body: dict, limits: Limits) -> CreateModel:
    sid = field(body, "session_id", str)
    seq = field(body, "model_seq_id", int)
    base_model = field(body, "base_model", str)
    check_optimizer(body.get("optimizer_config"))
    cfg = train_config(base_model, body.get("lora_config"), limits)
    _, meta = stored_fields(body)
    return CreateModel(session_id=sid, model_seq_id=seq, config=cfg, user_metadata=meta)


class ModelRequest(WireModel):
    """A request on one training model, ordered by ``seq_id`` among that model's requests."""

    model_id: str
    seq_id: int | None


def model_request(body: dict) -> ModelRequest:
    return ModelRequest(model_id=field(body, "model_id", str), seq_id=field(body, "seq_id", int, required=False))


def forward_backward(raw: bytes, content_type: str, content_encoding: str, limits: Limits,
                     info_of: Callable[[str], ModelInfo]) -> FwdBwdRequest:
    """A forward_backward body (protobuf, optionally zstd), checked against the model's facts
    (``info_of(model_id)``: 404 for a model that is not loaded); the loss config comes back complete."""
    if content_encoding.lower() == "zstd":
        raw = decompress_zstd(raw, limits)
    if "protobuf" not in content_type:
        raise BadRequest("forward_backward expects an application/x-protobuf ForwardBackwardRequest body")
    req = codec.decode_forward_backward(raw)
    info = info_of(req.model_id)
    check_batch_tokens(sum(len(d.tokens) for d in req.data), limits)
    required, req.loss_fn_config = loss_config(req.loss_fn, req.loss_fn_config)
    if not req.data:
        raise BadRequest("forward_backward needs at least one datum")
    for i, d in enumerate(req.data):
        n = len(d.tokens)
        if n == 0:
            raise BadRequest(f"datum {i}: model_input is empty")
        if n > info.max_context:
            raise BadRequest(f"datum {i}: {n} tokens exceed the context length {info.max_context}")
        _check_ids(d.tokens, info, f"datum {i}: model_input")
        if "target_tokens" not in d.inputs:
            raise BadRequest(f"datum {i}: loss_fn_inputs lacks 'target_tokens'")
        for name in required:
            if name not in d.inputs:
                raise BadRequest(f"datum {i}: loss_fn {req.loss_fn!r} needs loss_fn_inputs[{name!r}]")
        _check_ids(d.inputs["target_tokens"], info, f"datum {i}: target_tokens")
        if req.loss_fn == "gspo" and not np.any(d.inputs["sequence_ratio_mask"] != 0):
            raise BadRequest(f"datum {i}: sequence_ratio_mask marks no position (gspo's sequence ratio is the mean "
                             "log-ratio over the positions it marks non-zero: mark the sampled tokens)")
        for name, arr in d.inputs.items():
            if len(arr) != n:
                raise BadRequest(f"datum {i}: loss_fn_inputs[{name!r}] has length {len(arr)} but model_input has "
                                 f"{n} tokens")
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise BadRequest(f"datum {i}: loss_fn_inputs[{name!r}] contains non-finite values")
    return req


def loss_config(loss_fn: str, config: dict[str, float] | None) -> tuple[tuple[str, ...], dict[str, float]]:
    """A loss name + config checked against losses.LOSSES: (required inputs, full config). The mismatch
    corrections (losses.CORRECTIONS: this backend's extension keys) must be >= 0 (0 = off), and a mask band
    mask_ratio_low <= mask_ratio_high when both are set."""
    names = ", ".join(losses.LOSSES)
    if loss_fn == "stable_reinforce":
        raise BadRequest(f"loss_fn 'stable_reinforce' is not supported by this backend (Tinker's math for it is not "
                         f"public); supported: {names}. tinker-cookbook's async RL loop takes "
                         "loss_fn='importance_sampling' (its synchronous default) or 'ppo'/'cispo'/'gspo'")
    if loss_fn not in losses.LOSSES:
        raise BadRequest(f"unsupported loss_fn {loss_fn!r}; supported: {names}")
    _, required, defaults = losses.LOSSES[loss_fn]
    cfg = dict(defaults)
    for k, v in (config or {}).items():
        if k not in defaults:
            allowed = ", ".join(defaults) or "none"
            raise BadRequest(f"unknown loss_fn_config key {k!r} for {loss_fn} (allowed: {allowed})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise BadRequest(f"loss_fn_config[{k!r}] must be a finite number, got {v!r}")
        cfg[k] = float(v)
    if loss_fn in losses.CLIPPED and cfg["clip_low_threshold"] > cfg["clip_high_threshold"]:
        raise BadRequest("clip_low_threshold must be <= clip_high_threshold")
    for k in losses.CORRECTIONS:
        if cfg.get(k, 0.0) < 0:
            raise BadRequest(f"loss_fn_config[{k!r}] must be >= 0 (0 = off), got {cfg[k]}")
    if cfg.get("mask_ratio_low") and cfg.get("mask_ratio_high") and cfg["mask_ratio_low"] > cfg["mask_ratio_high"]:
        raise BadRequest(f"loss_fn_config mask_ratio_low {cfg['mask_ratio_low']} must be <= mask_ratio_high "
                         f"{cfg['mask_ratio_high']} (the band of sampler/trainer ratios kept)")
    return required, cfg


def _check_ids(ids: np.ndarray, info: ModelInfo, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= info.vocab_size):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise BadRequest(f"{what} contains token id {bad} outside the vocabulary [0, {info.vocab_size})")


def adam_params(adam: dict[str, Any]) -> dict[str, float]:
    out = {"learning_rate": adam.get("learning_rate", 1e-4), "beta1": adam.get("beta1", 0.9),
           "beta2": adam.get("beta2", 0.95), "eps": adam.get("eps", 1e-12),
           "weight_decay": adam.get("weight_decay", 0.0), "grad_clip_norm": adam.get("grad_clip_norm", 0.0)}
    for k, v in out.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise BadRequest(f"adam_params.{k} must be a finite number, got {v!r}")
        out[k] = float(v)
    if out["learning_rate"] < 0:
        raise BadRequest(f"adam_params.learning_rate must be >= 0, got {out['learning_rate']}")
    for b in ("beta1", "beta2"):
        if not 0.0 <= out[b] < 1.0:
            raise BadRequest(f"adam_params.{b} must be in [0, 1), got {out[b]}")
    if out["eps"] <= 0:
        raise BadRequest(f"adam_params.eps must be > 0, got {out['eps']}")
    if out["weight_decay"] < 0 or out["grad_clip_norm"] < 0:
        raise BadRequest("adam_params.weight_decay and grad_clip_norm must be >= 0")
    return out


def optim_step(body: dict) -> dict[str, float]:
    """The Adam parameters of an optim_step body (``adam_params``; SDK 0.38 sends any other family's as
    ``optimizer_params`` with its ``type``)."""
    op = body.get("optimizer_params")
    if op is not None:
        if not isinstance(op, dict):
            raise BadRequest(f"optimizer_params must be an object with a 'type', got {op!r}")
        if op.get("type") not in (None, *ADAM_TYPES):
            raise BadRequest(f"unsupported optimizer_params type {op.get('type')!r}: {OPTIMIZER_HELP}. Step with "
                             "types.AdamParams(...)")
    return adam_params(body.get("adam_params") or {k: v for k, v in (op or {}).items() if k != "type"})


class SaveWeights(WireModel):
    name: str
    overwrite: bool
    user_metadata: dict[str, Any]
    ttl: int | None


def save_weights(body: dict) -> SaveWeights:
    name = checkpoints.check_name(body.get("path"))
    _, meta = stored_fields(body)
    return SaveWeights(name=name, overwrite=bool(body.get("overwrite", False)), user_metadata=meta,
                       ttl=check_ttl(body.get("ttl_seconds")))


class SaveForSampler(WireModel):
    name: str | None                     # a sampler checkpoint on disk ...
    sampling_session_seq_id: int | None  # ... and/or an in-memory snapshot for a sampling session
    user_metadata: dict[str, Any]
    ttl: int | None


def save_weights_for_sampler(body: dict) -> SaveForSampler:
    name = body.get("path")
    sseq = body.get("sampling_session_seq_id")
    if name is None and sseq is None:
        raise BadRequest("save_weights_for_sampler needs a path (name) or a sampling_session_seq_id")
    if name is not None:
        checkpoints.check_name(name)
    _int_or_none(body, "sampling_session_seq_id", "sampling_session_seq_id")
    _, meta = stored_fields(body)
    return SaveForSampler(name=name, sampling_session_seq_id=sseq, user_metadata=meta,
                          ttl=check_ttl(body.get("ttl_seconds")))


class LoadWeights(WireModel):
    path: str
    checkpoint: CheckpointPath
    with_optimizer: bool
    model_id: str | None = None   # into this loaded model, or (None) into a new one:
    seq_id: int | None = None
    session_id: str | None = None  # ... of this session
    model_seq_id: int | None = None
    base_model: str | None = None
    user_metadata: dict[str, Any] = {}


def load_weights(body: dict) -> LoadWeights:
    path = field(body, "path", str)
    ck = checkpoints.parse(path, ("weights",))
    with_opt = bool(body.get("optimizer", False))
    if body.get("model_id"):
        return LoadWeights(path=path, checkpoint=ck, with_optimizer=with_opt, model_id=field(body, "model_id", str),
                           seq_id=field(body, "seq_id", int, required=False))
    sid = field(body, "session_id", str)
    mseq = field(body, "model_seq_id", int)
    check_optimizer(body.get("optimizer_config"))
    _, meta = stored_fields(body)
    return LoadWeights(path=path, checkpoint=ck, with_optimizer=with_opt, session_id=sid, model_seq_id=mseq,
                       base_model=field(body, "base_model", str, required=False) or None, user_metadata=meta)


class SaveExternal(WireModel):
    model_id: str
    seq_id: int | None
    name: str
    ttl: int | None
    recipients: list[Any]         # pyrage recipients (empty: files stay plain)


def save_weights_external(body: dict) -> SaveExternal:
    model_id, name = body.get("model_id"), body.get("path")
    if not isinstance(model_id, str):
        raise BadRequest("missing field 'model_id'")
    if not isinstance(name, str):
        raise BadRequest("save_weights_external needs a path (the export's name)")
    seq_id = field(body, "seq_id", int, required=False)
    checkpoints.parse(checkpoints.uri(model_id, "external_weights", name), ("external_weights",))
    return SaveExternal(model_id=model_id, seq_id=seq_id, name=name, ttl=check_ttl(body.get("ttl_seconds")),
                        recipients=age_recipients(body.get("age_encryption_recipients")))


def age_recipients(value: Any) -> list[Any]:
    """``age_encryption_recipients``: native "age1..." keys or SSH public keys (pyrage)."""
    if value is None:
        return []
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
        raise BadRequest("age_encryption_recipients must be a non-empty list of age (age1...) or SSH public keys")
    out = []
    for r in value:
        try:
            kind = pyrage.x25519 if r.startswith("age1") else pyrage.ssh
            out.append(kind.Recipient.from_str(r))
        except pyrage.RecipientError as e:
            raise BadRequest(f"age_encryption_recipients: {r[:40]!r} is not an age or SSH public key ({e})") from e
    return out


# ---------------------------------------------------------------------- sampling
class CreateSamplingSession(WireModel):
    session_id: str
    sampling_session_seq_id: int
    base_model: str | None
    model_path: str | None


def create_sampling_session(body: dict) -> CreateSamplingSession:
    return CreateSamplingSession(session_id=field(body, "session_id", str),
                                 sampling_session_seq_id=field(body, "sampling_session_seq_id", int),
                                 base_model=field(body, "base_model", str, required=False) or None,
                                 model_path=field(body, "model_path", str, required=False) or None)


def sample_spec(body: dict, info: ModelInfo, default_max_tokens: int, limits: Limits) -> SampleSpec:
    """An asample body as a SampleSpec for the served model ``info``."""
    prompt = body.get("prompt") or {}
    chunks = prompt.get("chunks") if isinstance(prompt, dict) else None
    if not isinstance(chunks, list) or not all(isinstance(ch, dict) for ch in chunks):
        raise BadRequest("prompt must be an object with a list of chunks")
    tokens: list[int] = []
    for ch in chunks:
        if ch.get("type", "encoded_text") != "encoded_text":
            raise BadRequest(f"only encoded_text prompt chunks are supported, got {ch.get('type')!r}")
        if not isinstance(ch.get("tokens") or [], list):
            raise BadRequest("prompt chunk tokens must be a list of token ids")
        tokens.extend(ch.get("tokens") or [])
    if not tokens:
        raise BadRequest("prompt is empty")
    bad = next((t for t in tokens if not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= info.vocab_size),
               None)
    if bad is not None:
        raise BadRequest(f"prompt contains token id {bad} outside the vocabulary [0, {info.vocab_size})")
    n = body.get("num_samples", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n > MAX_NUM_SAMPLES:
        raise BadRequest(f"num_samples must be an integer in [1, {MAX_NUM_SAMPLES}], got {n!r}")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    for key, kinds in (("temperature", (int, float)), ("top_p", (int, float)), ("top_k", (int,)), ("seed", (int,))):
        v = sp.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kinds)):
            raise BadRequest(f"sampling_params.{key} must be a number, got {v!r}")
    mt = sp.get("max_tokens")
    if mt is None:
        mt = min(default_max_tokens, info.max_context - len(tokens))
    if not isinstance(mt, int) or isinstance(mt, bool) or mt <= 0:
        raise BadRequest(f"max_tokens must be a positive integer, got {mt!r}")
    check_sample_tokens(n, mt, limits)
    if len(tokens) + mt > info.max_context:
        raise BadRequest(f"prompt ({len(tokens)} tokens) + max_tokens ({mt}) exceeds the context length "
                         f"{info.max_context}")
    temp = float(sp["temperature"] if sp.get("temperature") is not None else 1.0)
    top_p = float(sp["top_p"] if sp.get("top_p") is not None else 1.0)
    top_k = int(sp["top_k"] if sp.get("top_k") is not None else -1)
    if temp < 0 or not temp == temp:
        raise BadRequest(f"temperature must be >= 0, got {temp}")
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}")
    stop_ids, stop_strs = _stops(sp.get("stop", None), info)
    for k in ("topk_sample_logprobs", "prompt_alt_tokens_k"):
        if body.get(k):
            raise BadRequest(f"{k} is not supported by this backend")
    if body.get("target_prompt_logprobs") is not None:
        raise BadRequest("target_prompt_logprobs is not supported by this backend")
    # record_stability_info (tinker-cookbook 0.6.1 sets it) is accepted and records nothing: the samples are the
    # same, and the only consumer, the stable_reinforce loss, is refused with the list of supported losses
    pl = bool(body.get("prompt_logprobs"))
    topk = body.get("topk_prompt_logprobs") or 0
    if not isinstance(topk, int) or isinstance(topk, bool):
        raise BadRequest(f"topk_prompt_logprobs must be an integer, got {topk!r}")
    if topk < 0 or topk > 1000:
        raise BadRequest("topk_prompt_logprobs must be in [0, 1000]")
    last_n = body.get("prompt_logprobs_last_n")
    if last_n is not None:
        if not (pl or topk):
            raise BadRequest("prompt_logprobs_last_n requires prompt_logprobs")
        if not isinstance(last_n, int) or not 1 <= last_n <= len(tokens) - 1:
            raise BadRequest(f"prompt_logprobs_last_n must be in [1, {len(tokens) - 1}]")
    return SampleSpec(prompt=tokens, num_samples=n, max_tokens=mt, temperature=temp, top_k=top_k, top_p=top_p,
                      seed=sp.get("seed"), stop_token_ids=stop_ids, stop_strings=stop_strs, prompt_logprobs=pl,
                      topk_prompt_logprobs=topk, prompt_logprobs_last_n=last_n)


def _stops(stop: Any, info: ModelInfo) -> tuple[set[int], list[str]]:
    """(stop token ids, stop strings): the model's EOS ids plus what the caller asked for."""
    if stop is None:
        return set(info.eos_token_ids), []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list):
        raise BadRequest("stop must be a string, a list of strings or a list of token ids")
    if not stop:
        return set(), []
    if all(isinstance(s, str) for s in stop):
        return set(info.eos_token_ids), [s for s in stop if s]
    if all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
        return set(stop) | set(info.eos_token_ids), []
    raise BadRequest("stop must not mix strings and token ids")

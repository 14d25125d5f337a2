"""One loader for every base model the backend serves: the tiny model or a real Qwen3 checkout.

``load_model(path, dtype, device)`` is the one place a base model's weights are read: the backend's base models,
full fine-tuning copies, full-weights sampler snapshots (in process and on Ray replicas) and exports call it, and so
does ``load_model_and_tokenizer(path_or_id, device, dtype)``, which takes either a local HF directory or an id that
is present in the HF hub cache (registered with ``python -m services.models register`` or downloaded earlier); it
never touches the network. The backend imports this module (a public module of ``services.models``:
tests/test_imports.py PUBLIC).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .hf_cache import hub_cache_dir, registered_path

_DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "bfloat16": "bfloat16",
           "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}


def resolve_model_path(path_or_id: str | os.PathLike, hf_home: str | os.PathLike | None = None) -> Path:
    """A local directory as is; otherwise the cached snapshot of the HF id (offline only)."""
    p = Path(path_or_id).expanduser()
    if p.is_dir():
        return p.resolve()
    name = str(path_or_id)
    snap = registered_path(name, hf_home)
    if snap is not None:
        return snap
    try:  # a model downloaded earlier by huggingface_hub (refs for other revisions, etc.)
        return Path(snapshot_download(name, local_files_only=True, cache_dir=str(hub_cache_dir(hf_home))))
    except Exception as e:  # noqa: BLE001 - report one clear error below
        raise FileNotFoundError(
            f"model {name!r}: not a directory and not in the HF cache {hub_cache_dir(hf_home)} "
            f"({type(e).__name__}). Create it with `python -m services.models make-tiny` or register a "
            "local checkout with `python -m services.models register --path DIR --name ORG/NAME`."
        ) from None


def resolve_dtype(dtype: Any, config_dtype: Any = None):
    """torch dtype from a torch.dtype, a name ('bfloat16', 'fp32', ...) or 'auto' (the checkpoint's)."""

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        if config_dtype is None:
            return torch.float32
        return config_dtype if isinstance(config_dtype, torch.dtype) else getattr(torch, str(config_dtype))
    name = _DTYPES.get(str(dtype).lower().removeprefix("torch."))
    if name is None:
        raise ValueError(f"unknown dtype {dtype!r} (float32, bfloat16, float16 or auto)")
    return getattr(torch, name)


@dataclass
class ModelFacts:
    """What the backend needs to know about a loaded base model."""

    path: Path
    model_type: str
    vocab_size: int                   # embedding rows (logit width)
    tokenizer_size: int               # len(tokenizer): valid token ids are < this
    eos_token_id: int                 # the tokenizer's eos (<|im_end|> for Qwen3 instruct)
    stop_token_ids: list[int] = field(default_factory=list)  # generation_config eos ids (all)
    pad_token_id: int | None = None
    bos_token_id: int | None = None   # the tokenizer's (None: nothing is prepended)
    meta: dict = field(default_factory=dict)  # local_tinker.json for our tiny models


def model_facts(model, tokenizer, path: Path) -> ModelFacts:
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    stops = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in stops:
        stops.insert(0, tokenizer.eos_token_id)
    meta_p = Path(path) / "local_tinker.json"
    return ModelFacts(
        path=Path(path),
        model_type=model.config.model_type,
        vocab_size=model.get_input_embeddings().weight.shape[0],
        tokenizer_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        stop_token_ids=stops,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        meta=json.loads(meta_p.read_text()) if meta_p.exists() else {},
    )


def load_tokenizer(path_or_id: str | os.PathLike, hf_home: str | os.PathLike | None = None):
    path = resolve_model_path(path_or_id, hf_home)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str | os.PathLike, dtype: torch.dtype, device: Any = "cpu", **from_pretrained: Any):
    """The base model's weights from the local HF directory ``path``: ``AutoModelForCausalLM.from_pretrained``
    in ``dtype`` (a ``torch.dtype``; :func:`resolve_dtype` reads names), moved to ``device``, in eval mode.
    ``from_pretrained``: further keyword arguments for transformers (``local_files_only``, ``attn_implementation``)."""

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **from_pretrained)
    model.to(device)
    model.eval()
    return model


def load_model_and_tokenizer(path_or_id: str | os.PathLike, device: Any = "cpu", dtype: Any = "auto",
                             hf_home: str | os.PathLike | None = None, attn_implementation: str | None = "sdpa"):
    """Load ``(model, tokenizer)``: model in eval mode on ``device`` with ``dtype``.

    ``path_or_id``: a local HF directory (``models/qwen3-tiny-xs``, a Qwen3 checkout) or an id in the
    HF cache (``local/qwen3-tiny-xs``, ``Qwen/Qwen3-4B-Instruct-2507`` if downloaded before).
    ``dtype``: ``'auto'`` (the checkpoint's: float32 for the tiny model, bfloat16 for Qwen3),
    a name, or a ``torch.dtype``.  Use :func:`model_facts` for eos/stop ids and vocab sizes.
    """

    path = resolve_model_path(path_or_id, hf_home)
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    torch_dtype = resolve_dtype(dtype, getattr(config, "dtype", None) or getattr(config, "torch_dtype", None))
    kwargs: dict[str, Any] = {"local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = load_model(path, torch_dtype, device, **kwargs)
    tokenizer = load_tokenizer(path)
    return model, tokenizer

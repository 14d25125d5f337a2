"""Checkpoint I/O of the in-process runtime: a training model's weights (+ optimizer state) into a
checkpoint directory and back, and sampler weights from one (directory layout and meta.json:
checkpoints.py). Files: ``adapter_model.safetensors`` + ``adapter_config.json`` (LoRA) or
``model.safetensors`` (full fine-tuning), ``optimizer.pt`` (training checkpoints), ``meta.json``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from . import checkpoints
from .errors import BadRequest
from .models import BaseModel, TrainableModel
from .runtime_api import TrainConfig

ADAPTER_FILE = "adapter_model.safetensors"
FULL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"


def write(base: BaseModel, tm: TrainableModel, dest: Path, kind: str, with_optimizer: bool, overwrite: bool,
          user_metadata: dict | None) -> Path:
    """Checkpoint ``dest`` (``<model_id>/<kind>/<name>``) of ``tm``, written to a temporary directory
    and renamed into place (a crash leaves no half checkpoint)."""
    if dest.exists() and not overwrite:
        raise BadRequest(f"checkpoint {kind}/{dest.name} already exists for {tm.model_id} (pass overwrite=True to "
                         "replace it)")
    tmp = dest.with_name(f".{dest.name}.tmp{time.time_ns()}")
    tmp.mkdir(parents=True, exist_ok=True)
    if tm.adapter:
        save_adapter(base, tm.adapter, tmp)
        pcfg = base.peft.peft_config[tm.adapter].to_dict()
        pcfg["base_model_name_or_path"] = base.path
        (tmp / "adapter_config.json").write_text(json.dumps(_jsonable(pcfg), indent=1))
    else:
        save_full(tm.module, tmp)
    if with_optimizer:
        torch.save({"optimizer": tm.optimizer.state_dict(), "steps": tm.steps}, tmp / OPTIMIZER_FILE)
    checkpoints.write_meta(tmp, checkpoints.new_meta(tm.model_id, kind, dest.name, tm.config.to_json(), tm.steps,
                                                     user_metadata, with_optimizer))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def check_compatible(tm: TrainableModel, path: Path) -> None:
    ck = TrainConfig(**checkpoints.train_config(path))
    if ck.base_model != tm.config.base_model or ck.rank != tm.config.rank:
        raise BadRequest(f"checkpoint was trained on {ck.base_model} with rank {ck.rank}; this model is "
                         f"{tm.config.base_model} with rank {tm.config.rank}")


def load_weights(base: BaseModel, tm: TrainableModel, path: Path) -> None:
    if tm.adapter:
        base.load_adapter_state(tm.adapter, load_file(str(path / ADAPTER_FILE)))
    else:
        tm.module.load_state_dict(load_full(path), strict=False)


def load_optimizer(tm: TrainableModel, path: Path, device: torch.device) -> None:
    if not (path / OPTIMIZER_FILE).exists():
        raise BadRequest("checkpoint has no optimizer state (it was saved for sampling only)")
    st = torch.load(path / OPTIMIZER_FILE, map_location=device, weights_only=False)
    tm.optimizer.load_state_dict(st["optimizer"])
    tm.steps = int(st.get("steps", 0))


def save_adapter(base: BaseModel, adapter: str, d: Path) -> None:
    state = base.adapter_state(adapter)
    save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(d / ADAPTER_FILE))


def load_adapter(d: Path) -> dict[str, torch.Tensor]:
    return load_file(str(d / ADAPTER_FILE))


def save_full(module: torch.nn.Module, d: Path) -> None:
    seen: dict[int, str] = {}
    out = {}
    for k, v in module.state_dict().items():  # tied weights share storage; safetensors refuses duplicates
        v = v.detach().contiguous().cpu()
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = k
        out[k] = v
    save_file(out, str(d / FULL_FILE))


def load_full(d: Path) -> dict[str, torch.Tensor]:
    return load_file(str(d / FULL_FILE))


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)

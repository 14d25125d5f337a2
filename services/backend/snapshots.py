"""Sampler weights of the in-process runtime: snapshots of training models (LoRA: an extra peft
adapter; full fine-tuning: the trainer's module, copy-on-write) and weights loaded from sampler
checkpoints, bounded by count and bytes in memory (least recently used out first), evicted
snapshots spilled to disk within ``max_spill_bytes`` and reloaded when asked for again."""

from __future__ import annotations

import hashlib
import logging
import shutil
from abc import abstractmethod
from collections import OrderedDict
from pathlib import Path

import torch

from services.models.loading import load_model

from . import checkpoint_io, checkpoints
from .models import BaseModel, SamplerWeights, TrainableModel, frozen_copy
from .runtime_api import RuntimeAPI, TrainConfig

log = logging.getLogger("backend.runtime")


class SamplerSnapshots(RuntimeAPI):
    """The sampler-weights part of ``runtime.Runtime`` (its base class), whose ``__init__`` sets the
    attributes below and which implements ``trainable`` and ``new_adapter_name``."""

    samplers: OrderedDict[str, SamplerWeights]
    spilled: dict[str, Path]             # evicted in-memory snapshots, on disk until asked for again
    _spill_sizes: dict[str, int]
    max_sampler_snapshots: int
    max_sampler_bytes: int | None        # bound on the snapshots' weights in memory (None: count only)
    max_spill_bytes: int | None          # bound on the disk the spilled copies take (None: no bound)
    bases: dict[str, BaseModel]
    trainables: dict[str, TrainableModel]
    dtype: torch.dtype
    checkpoint_dir: Path

    @abstractmethod
    def trainable(self, model_id: str) -> TrainableModel: ...

    @abstractmethod
    def new_adapter_name(self, prefix: str) -> str: ...

    def snapshot_for_sampler(self, model_id: str, key: str) -> SamplerWeights:
        """Copy a training model's current weights into sampler weights (in memory)."""
        tm = self.trainable(model_id)
        base = self.bases[tm.config.base_model]
        if tm.adapter:
            adapter = self.new_adapter_name("s")
            with torch.device(base.device):  # peft builds (and initialises) the new layers on the GPU, not the CPU
                base.add_lora(adapter, tm.config)
            base.load_adapter_state(adapter, base.adapter_state(tm.adapter))
            for p in base.adapter_params(adapter):
                p.requires_grad_(False)
            sw = SamplerWeights(key, base.name, adapter=adapter, config=tm.config)
        else:  # shared with the trainer until it changes the weights (_unshare_snapshots)
            sw = SamplerWeights(key, base.name, module=tm.module, config=tm.config)
        self._register_sampler(sw)
        return sw

    def _unshare_snapshots(self, tm: TrainableModel) -> None:
        """Before the trainer changes a full-FT module in place: give each sampler snapshot still
        sharing it a frozen copy of its parameters (one copy, however many snapshots share it)."""
        if tm.module is None:
            return
        frozen = None
        for sw in self.samplers.values():
            if sw.module is tm.module:
                frozen = frozen or frozen_copy(tm.module)
                sw.module = frozen

    def sampler_from_checkpoint(self, key: str, path: Path) -> SamplerWeights:
        cfg = TrainConfig(**checkpoints.train_config(path))
        base = self.base(cfg.base_model)
        if cfg.is_lora:
            adapter = self.new_adapter_name("s")
            base.add_lora(adapter, cfg)
            base.load_adapter_state(adapter, checkpoint_io.load_adapter(path))
            sw = SamplerWeights(key, base.name, adapter=adapter, config=cfg)
        else:
            mod = load_model(base.path, self.dtype, base.device)
            mod.load_state_dict(checkpoint_io.load_full(path), strict=False)
            sw = SamplerWeights(key, base.name, module=mod, config=cfg)
        self._register_sampler(sw)
        return sw

    def _register_sampler(self, sw: SamplerWeights) -> None:
        """Keep at most max_sampler_snapshots snapshots and max_sampler_bytes of their weights in memory,
        least recently used out first (the newest always stays). An evicted one reloads from disk when
        asked for: a checkpoint from its path, an in-memory snapshot from the copy spilled on eviction."""
        self.samplers[sw.key] = sw
        self.samplers.move_to_end(sw.key)
        self._drop_spill(sw.key)
        while len(self.samplers) > 1 and (len(self.samplers) > self.max_sampler_snapshots or (
                self.max_sampler_bytes is not None and self.sampler_bytes() > self.max_sampler_bytes)):
            _, old = self.samplers.popitem(last=False)
            if old.key.startswith("snap:"):
                self._spill_within_bound(old)
            self._unload_sampler(old)

    def sampler_bytes(self) -> int:
        """Memory held by the sampler snapshots' own weights (a full-FT snapshot still sharing its
        trainer's module costs nothing)."""
        shared = {id(tm.module) for tm in self.trainables.values() if tm.module is not None}
        n = 0
        for sw in self.samplers.values():
            if sw.adapter:
                params = self.bases[sw.base_model].adapter_params(sw.adapter)
            elif sw.module is not None and id(sw.module) not in shared:
                params = list(sw.module.parameters())
            else:
                params = []
            n += sum(p.numel() * p.element_size() for p in params)
        return n

    def _snapshot_bytes(self, sw: SamplerWeights) -> int:
        if sw.adapter:
            params = self.bases[sw.base_model].adapter_params(sw.adapter)
        else:
            params = list(sw.module.parameters()) if sw.module is not None else []
        return sum(p.numel() * p.element_size() for p in params)

    def _spill_within_bound(self, sw: SamplerWeights) -> None:
        """Spill an evicted snapshot unless it alone exceeds ``max_spill_bytes`` (a 4B full-FT copy:
        8.8 GB and ~10 s of disk writes per GRPO step for weights nobody asks for again); then drop
        the oldest spilled copies until the bound holds. A dropped key answers a clear 404."""
        size = self._snapshot_bytes(sw)
        if self.max_spill_bytes is not None and size > self.max_spill_bytes:
            log.info("sampler weights %s evicted and dropped (%.1f GB > max_spill_gb)", sw.key, size / 2**30)
            return
        self._spill(sw)
        self._spill_sizes[sw.key] = size
        while self.max_spill_bytes is not None and sum(self._spill_sizes.values()) > self.max_spill_bytes:
            oldest = next(iter(self._spill_sizes))
            log.info("spilled sampler weights %s dropped (max_spill_gb)", oldest)
            self._drop_spill(oldest)

    def _spill(self, sw: SamplerWeights) -> None:
        d = self.checkpoint_dir / ".sampler-spill" / hashlib.sha256(sw.key.encode()).hexdigest()[:24]
        d.mkdir(parents=True, exist_ok=True)
        if sw.adapter:
            checkpoint_io.save_adapter(self.bases[sw.base_model], sw.adapter, d)
        else:
            checkpoint_io.save_full(sw.module, d)
        checkpoints.write_meta(d, checkpoints.spill_meta(sw.config.to_json()))
        self.spilled[sw.key] = d
        log.info("sampler weights %s evicted to %s", sw.key, d)

    def _unload_sampler(self, sw: SamplerWeights) -> None:
        if sw.adapter:
            self.bases[sw.base_model].delete_adapter(sw.adapter)
        sw.module = None

    def _drop_spill(self, key: str) -> None:
        self._spill_sizes.pop(key, None)
        d = self.spilled.pop(key, None)
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)

    def _loaded_sampler(self, key: str) -> SamplerWeights | None:
        """The sampler weights of ``key``, reloaded from disk if they were evicted; None if gone."""
        sw = self.samplers.get(key)
        if sw is None:
            path = self.spilled.get(key) or (Path(key[len("ckpt:"):]) if key.startswith("ckpt:") else None)
            if path is None or not checkpoints.exists(path):
                return None
            log.info("reloading evicted sampler weights %s from %s", key, path)
            sw = self.sampler_from_checkpoint(key, path)
        return sw


    def has_sampler(self, key: str) -> bool:
        return key in self.samplers or key in self.spilled


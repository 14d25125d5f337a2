"""The torch runtime: base models, trainable models (LoRA via peft, or full fine-tuning),
optimizers, checkpoints, forward/backward with Tinker's losses, and sampler weights.

Everything here runs on the engine's single worker thread (see engine.py); nothing in this
module is thread-safe by itself. The API layer only reads ``BaseModel.info`` and validates
input with ``validate_fwdbwd`` / ``validate_sample`` before work is queued.

Weights for sampling ("sampler weights") are one of:
  * ``base``: the base model with adapters disabled;
  * a LoRA snapshot: an extra peft adapter holding a copy of a training adapter (no disk
    round trip) or loaded from a sampler checkpoint on disk;
  * a full-weights snapshot (full fine-tuning): the training module itself, shared with the trainer
    until the trainer next changes its weights (optim_step, load): then the snapshot gets its own
    copy of the parameters (copy-on-write, no gradients or optimizer state copied; a snapshot that
    is evicted or replaced before that never costs a copy).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import losses, sampler
from .codec import FwdBwdRequest
from .errors import BadRequest, NotFound

log = logging.getLogger("backend.runtime")

ATTN_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_MODULES = ["gate_proj", "up_proj", "down_proj"]
UNEMBED_MODULES = ["lm_head"]
LORA_ALPHA = 32  # Tinker's default (SkyRL hard-codes the same)


@dataclass
class ModelInfo:
    """Facts the API layer needs for synchronous validation."""

    name: str
    vocab_size: int            # rows of the embedding (valid token ids are [0, vocab_size))
    max_context: int
    eos_token_ids: list[int]
    arch: str = "qwen3"


@dataclass
class TrainConfig:
    base_model: str
    rank: int                  # 0 = full fine-tuning
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    @property
    def is_lora(self) -> bool:
        return self.rank > 0

    def to_json(self) -> dict[str, Any]:
        return dict(base_model=self.base_model, rank=self.rank, seed=self.seed, train_mlp=self.train_mlp,
                    train_attn=self.train_attn, train_unembed=self.train_unembed)


@dataclass
class TrainableModel:
    model_id: str
    config: TrainConfig
    adapter: str | None                 # peft adapter name (LoRA) ...
    module: torch.nn.Module | None      # ... or a private full copy (full fine-tuning)
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    steps: int = 0
    version: int = 0                    # bumped by every optim_step / load
    has_grads: bool = False


@dataclass
class SamplerWeights:
    key: str                            # "base" or a snapshot id
    base_model: str
    adapter: str | None = None          # LoRA snapshot adapter name
    module: torch.nn.Module | None = None  # full-weights snapshot
    last_used: float = field(default_factory=time.time)
    config: TrainConfig | None = None   # what it was trained as (to spill it to disk and reload it)


def _set_threads(n: int | None) -> None:
    if n:
        torch.set_num_threads(n)


class BaseModel:
    """One loaded base model (frozen), shared by every LoRA client trained on top of it."""

    def __init__(self, name: str, path: str, device: str, dtype: torch.dtype, max_context: int | None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name, self.path, self.device, self.dtype = name, path, torch.device(device), dtype
        t0 = time.time()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device)
        self.hf.eval()
        for p in self.hf.parameters():
            p.requires_grad_(False)
        self.peft = None  # PeftModel wrapper, created with the first LoRA adapter
        cfg = self.hf.config
        eos = set()
        gen_eos = getattr(getattr(self.hf, "generation_config", None), "eos_token_id", None)
        for e in (gen_eos if isinstance(gen_eos, list) else [gen_eos]):
            if e is not None:
                eos.add(int(e))
        if self.tokenizer.eos_token_id is not None:
            eos.add(int(self.tokenizer.eos_token_id))
        ctx = int(getattr(cfg, "max_position_embeddings", 32768) or 32768)
        self.info = ModelInfo(name=name, vocab_size=int(self.hf.get_input_embeddings().weight.shape[0]),
                              max_context=min(ctx, max_context or ctx), eos_token_ids=sorted(eos),
                              arch=str(getattr(cfg, "model_type", "qwen3")))
        self.active_adapter: str | None = None
        self._merged: torch.nn.Module | None = None  # see merged_module
        self._merged_key: str | None = None
        log.info("loaded base model %s from %s in %.2fs (%s params, vocab %d, device %s, %s)", name, path,
                 time.time() - t0, f"{sum(p.numel() for p in self.hf.parameters()):,}", self.info.vocab_size,
                 device, dtype)

    # ---- adapters
    def add_lora(self, adapter: str, cfg: TrainConfig) -> list[torch.nn.Parameter]:
        from peft import LoraConfig, get_peft_model

        targets = (ATTN_MODULES if cfg.train_attn else []) + (MLP_MODULES if cfg.train_mlp else []) + (
            UNEMBED_MODULES if cfg.train_unembed else [])
        if not targets:
            raise BadRequest("LoRA config trains nothing: enable at least one of train_attn/train_mlp/train_unembed")
        lcfg = LoraConfig(r=cfg.rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets, bias="none")
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(cfg.seed if cfg.seed is not None else 0)
            if self.peft is None:
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.peft = get_peft_model(self.hf, lcfg, adapter_name=adapter)
            else:
                self.peft.add_adapter(adapter, lcfg)
        self.peft.to(self.device)
        self.activate(adapter)
        return self.adapter_params(adapter)

    def adapter_params(self, adapter: str) -> list[torch.nn.Parameter]:
        params = [p for n, p in self.peft.named_parameters() if f".{adapter}." in n]
        for p in params:
            if p.dtype != torch.float32 and self.device.type == "cpu":
                p.data = p.data.float()
        return params

    def delete_adapter(self, adapter: str) -> None:
        if self._merged_key == adapter:
            self._merged_key = None
        if self.peft is not None and adapter in self.peft.peft_config:
            if self.active_adapter == adapter:
                self.active_adapter = None
            self.peft.delete_adapter(adapter)

    def activate(self, adapter: str | None) -> None:
        """Make ``adapter`` the one used by forward passes (None = plain base model)."""
        if adapter is None or self.peft is None:
            return
        if self.active_adapter != adapter:
            self.peft.set_adapter(adapter)
            self.active_adapter = adapter
            # set_adapter re-enables requires_grad on the adapter; base weights stay frozen.

    def adapter_state(self, adapter: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.peft, adapter_name=adapter).items()}

    def load_adapter_state(self, adapter: str, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        res = set_peft_model_state_dict(self.peft, {k: v.to(self.device) for k, v in state.items()}, adapter_name=adapter)
        missing = [k for k in getattr(res, "unexpected_keys", []) if "lora" in k]
        if missing:
            raise BadRequest(f"checkpoint does not match the adapter layout: unexpected keys {missing[:3]}")

    def merged_module(self, adapter: str) -> torch.nn.Module:
        """A plain (peft-free) module with ``adapter`` folded into its weights, for sampling.

        peft's per-layer LoRA branches cost ~40 % of a small model's decode step on CPU; a
        folded copy decodes at the base model's speed. One copy is kept and refilled when a
        different snapshot is sampled (RL samples one snapshot many times per step); lm_head
        is untied so a LoRA on the unembedding leaves the input embedding alone."""
        from .gpu.weights import linear_weight  # W + scale * B @ A, the static engine's merge too

        if self._merged is None:
            from transformers import AutoModelForCausalLM

            cfg = copy.deepcopy(self.hf.config)
            cfg.tie_word_embeddings = False
            self._merged = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype).to(self.device).eval()
            for p in self._merged.parameters():
                p.requires_grad_(False)
            self._merged_key = None
        if self._merged_key != adapter:
            with torch.no_grad():
                src = dict(self.hf.named_modules())
                for name, mod in self._merged.named_modules():
                    if not any(True for _ in mod.parameters(recurse=False)):
                        continue
                    s = src[name]
                    base = getattr(s, "base_layer", s)
                    for pname, p in mod.named_parameters(recurse=False):
                        p.copy_(linear_weight(s, adapter) if pname == "weight" else getattr(base, pname))
            self._merged_key = adapter
        return self._merged

    def forward_module(self, adapter: str | None):
        """Return a callable module computing logits with the given adapter (None = base)."""
        if adapter is None:
            if self.peft is None:
                return self.hf, None
            return self.peft, self.peft.disable_adapter
        self.activate(adapter)
        return self.peft, None


class Runtime:
    """All models of this backend process. Runs on the engine thread only."""

    def __init__(self, models: list[dict[str, Any]], checkpoint_dir: Path, device: str = "cpu",
                 dtype: str = "float32", threads: int | None = None, max_tokens_per_microbatch: int = 8192,
                 max_sampler_snapshots: int = 16, max_batch_sequences: int = 256, sampler: str = "auto",
                 sampler_options: dict[str, Any] | None = None, gradient_checkpointing: bool = False,
                 merge_lora_sampling: bool | str = "auto", training_kernels: str = "auto",
                 max_sampler_bytes: int | None = None, max_spill_bytes: int | None = 8 * 2**30):
        _set_threads(threads)
        self.device = device
        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.checkpoint_dir = Path(checkpoint_dir)
        self.max_tokens_per_microbatch = max_tokens_per_microbatch
        self.max_sampler_snapshots = max_sampler_snapshots
        self.max_sampler_bytes = max_sampler_bytes  # bound on the snapshots' weights in memory (None: count only)
        self.spilled: dict[str, Path] = {}          # evicted in-memory snapshots, on disk until asked for again
        self.max_spill_bytes = max_spill_bytes      # bound on the disk those spilled copies take (None: no bound)
        self._spill_sizes: dict[str, int] = {}
        self.max_batch_sequences = max_batch_sequences
        self.bases: dict[str, BaseModel] = {}
        for m in models:
            b = BaseModel(m["name"], m["path"], device, self.dtype, m.get("max_context"))
            self.bases[b.name] = b
        self.trainables: dict[str, TrainableModel] = {}
        self.samplers: OrderedDict[str, SamplerWeights] = OrderedDict()
        self._adapter_seq = 0
        # Sample LoRA snapshots from a folded plain copy (BaseModel.merged_module): "auto" = on CPU for
        # models up to 500M parameters (the copy costs one model's memory).
        if merge_lora_sampling == "auto":
            merge_lora_sampling = self.device == "cpu" and all(
                sum(p.numel() for p in b.hf.parameters()) <= 500_000_000 for b in self.bases.values())
        self.merge_lora_sampling = bool(merge_lora_sampling)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        # Fused RMSNorm/rotary/SwiGLU kernels (Liger) in the trained modules: gpu/train_kernels.py.
        from .gpu import train_kernels

        self.training_kernels = train_kernels.resolve(training_kernels, device)
        self._kernels_strict = (training_kernels or "auto").lower() == "liger"
        for b in self.bases.values():
            train_kernels.apply(b.hf, self.training_kernels, self._kernels_strict)
        # Sampling engine: the static-KV-cache engine (services/backend/gpu) on CUDA, or where
        # engine.sampler is 'static'; the HF DynamicCache sampler otherwise.
        from .gpu.glue import StaticSampling, wanted

        self.static = StaticSampling(sampler_options, max_batch_sequences) if wanted(sampler, device) else None
        if self.gradient_checkpointing:
            for b in self.bases.values():
                _enable_grad_ckpt(b.hf)

    # ------------------------------------------------------------------ helpers
    def base(self, name: str) -> BaseModel:
        if name not in self.bases:
            raise BadRequest(f"unknown base model {name!r}; this backend serves: {', '.join(self.bases)}")
        return self.bases[name]

    def trainable(self, model_id: str) -> TrainableModel:
        tm = self.trainables.get(model_id)
        if tm is None:
            raise NotFound(f"training model {model_id!r} is not loaded (unknown id, or the backend restarted: "
                           "create a new training client from a saved checkpoint)")
        return tm

    def _new_adapter_name(self, prefix: str) -> str:
        self._adapter_seq += 1
        return f"{prefix}{self._adapter_seq}"

    def _make_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        kw: dict[str, Any] = {}
        if self.device.startswith("cuda"):
            kw["fused"] = True
        return torch.optim.AdamW(params, lr=0.0, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **kw)

    # ------------------------------------------------------------------ models
    def create_model(self, model_id: str, cfg: TrainConfig) -> TrainableModel:
        base = self.base(cfg.base_model)
        if model_id in self.trainables:
            return self.trainables[model_id]
        if cfg.is_lora:
            adapter = self._new_adapter_name("t")
            params = base.add_lora(adapter, cfg)
            tm = TrainableModel(model_id, cfg, adapter, None, self._make_optimizer(params), params)
        else:
            from transformers import AutoModelForCausalLM

            from .gpu import train_kernels

            module = AutoModelForCausalLM.from_pretrained(base.path, dtype=self.dtype).to(base.device)
            train_kernels.apply(module, self.training_kernels, self._kernels_strict)
            module.train(False)
            params = [p for p in module.parameters()]
            for p in params:
                p.requires_grad_(True)
            if self.gradient_checkpointing:
                _enable_grad_ckpt(module)
            tm = TrainableModel(model_id, cfg, None, module, self._make_optimizer(params), params)
        self.trainables[model_id] = tm
        log.info("created %s model %s on %s (rank %d, %s trainable params)", "LoRA" if cfg.is_lora else "full",
                 model_id, cfg.base_model, cfg.rank, f"{sum(p.numel() for p in tm.params):,}")
        return tm

    def unload_model(self, model_id: str) -> None:
        tm = self.trainables.pop(model_id, None)
        if tm and tm.adapter:
            self.base(tm.config.base_model).delete_adapter(tm.adapter)

    def _module_for(self, tm: TrainableModel) -> torch.nn.Module:
        if tm.module is not None:
            return tm.module
        base = self.base(tm.config.base_model)
        base.activate(tm.adapter)
        return base.peft

    # ------------------------------------------------------------------ forward / backward
    def forward_backward(self, req: FwdBwdRequest) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        tm = self.trainable(req.model_id)
        fn, required, cfg = losses.resolve(req.loss_fn, req.loss_fn_config)
        module = self._module_for(tm)
        dev = self.bases[tm.config.base_model].device
        order = sorted(range(len(req.data)), key=lambda i: -len(req.data[i].tokens))
        results: list[dict[str, np.ndarray] | None] = [None] * len(req.data)
        total_loss = 0.0
        n_tokens = 0
        extra: dict[str, float] = {}
        for mb in _microbatches(order, [len(d.tokens) for d in req.data], self.max_tokens_per_microbatch):
            batch = [req.data[i] for i in mb]
            ctx = torch.no_grad() if req.forward_only else torch.enable_grad()
            # HF checkpoints layers only in train mode (Qwen3 has no dropout: no other effect)
            module.train(self.gradient_checkpointing and not req.forward_only)
            with ctx:
                act = None if req.forward_only else [_active_positions(req.loss_fn, d.inputs) for d in batch]
                lps = token_logprobs(module, [d.tokens for d in batch], [d.inputs["target_tokens"] for d in batch], dev, act)
                loss = torch.zeros((), device=dev, dtype=torch.float32)
                for i, d, lp in zip(mb, batch, lps):
                    x = {k: torch.as_tensor(np.asarray(v, dtype=np.float32), device=dev)
                         for k, v in d.inputs.items() if k != "target_tokens"}
                    w = x.get("weights")
                    el = fn(lp, x, cfg)
                    if w is not None:
                        el = el * w
                    loss = loss + el.sum()
                    results[i] = {"logprobs": lp.detach().float().cpu().numpy(),
                                  "elementwise_loss": el.detach().float().cpu().numpy()}
                    if req.loss_fn in ("ppo", "cispo"):
                        r = torch.exp(lp.detach() - x["logprobs"])
                        clipped = ((r < cfg["clip_low_threshold"]) | (r > cfg["clip_high_threshold"])).float()
                        extra["clip_fraction"] = extra.get("clip_fraction", 0.0) + float(clipped.sum())
                if not req.forward_only and loss.requires_grad:
                    loss.backward()
                    tm.has_grads = True
            module.train(False)
            total_loss += float(loss.detach())
            n_tokens += sum(len(d.tokens) for d in batch)
        metrics = {"loss:sum": total_loss, "num_tokens:sum": float(n_tokens)}
        if "clip_fraction" in extra:
            metrics["clip_fraction:mean"] = extra["clip_fraction"] / max(n_tokens, 1)
        return results, metrics  # type: ignore[return-value]

    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]:
        tm = self.trainable(model_id)
        lr, b1, b2 = adam["learning_rate"], adam["beta1"], adam["beta2"]
        for g in tm.optimizer.param_groups:
            g["lr"], g["betas"], g["eps"], g["weight_decay"] = lr, (b1, b2), adam["eps"], adam["weight_decay"]
        grads = [p.grad for p in tm.params if p.grad is not None]
        gnorm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))) if grads else 0.0
        if adam["grad_clip_norm"] > 0 and grads:
            torch.nn.utils.clip_grad_norm_(tm.params, adam["grad_clip_norm"])
        for p in tm.params:  # parameters without gradient still take a (zero-gradient) Adam step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self._unshare_snapshots(tm)
        tm.optimizer.step()
        tm.optimizer.zero_grad(set_to_none=True)
        tm.steps += 1
        tm.version += 1
        tm.has_grads = False
        return {"grad_norm:mean": gnorm, "lr:mean": lr, "step:max": float(tm.steps)}

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_path(self, model_id: str, kind: str, name: str) -> Path:
        return self.checkpoint_dir / model_id / kind / name

    def save(self, model_id: str, name: str, kind: str, with_optimizer: bool, overwrite: bool,
             user_metadata: dict | None = None) -> Path:
        """kind: 'weights' (training state: weights + optimizer) or 'sampler_weights'."""
        tm = self.trainable(model_id)
        dest = self.checkpoint_path(model_id, kind, name)
        if dest.exists() and not overwrite:
            raise BadRequest(f"checkpoint {kind}/{name} already exists for {model_id} (pass overwrite=True to replace it)")
        tmp = dest.with_name(f".{name}.tmp{time.time_ns()}")
        tmp.mkdir(parents=True, exist_ok=True)
        from safetensors.torch import save_file

        base = self.base(tm.config.base_model)
        if tm.adapter:
            state = base.adapter_state(tm.adapter)
            save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(tmp / "adapter_model.safetensors"))
            pcfg = base.peft.peft_config[tm.adapter].to_dict()
            pcfg["base_model_name_or_path"] = base.path
            (tmp / "adapter_config.json").write_text(json.dumps(_jsonable(pcfg), indent=1))
        else:
            state = {k: v.detach().contiguous().cpu() for k, v in tm.module.state_dict().items()}
            _save_full(state, tmp / "model.safetensors")
        if with_optimizer:
            torch.save({"optimizer": tm.optimizer.state_dict(), "steps": tm.steps}, tmp / "optimizer.pt")
        meta = {"model_id": model_id, "kind": kind, "name": name, "created": time.time(), "train_config": tm.config.to_json(),
                "steps": tm.steps, "user_metadata": user_metadata or {}, "has_optimizer": with_optimizer}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
        return dest

    @staticmethod
    def read_meta(path: Path) -> dict[str, Any]:
        mp = path / "meta.json"
        if not mp.exists():
            raise NotFound(f"checkpoint not found: {path.name}")
        return json.loads(mp.read_text())

    def load_into(self, model_id: str, path: Path, with_optimizer: bool) -> None:
        tm = self.trainable(model_id)
        meta = self.read_meta(path)
        ck = TrainConfig(**meta["train_config"])
        if ck.base_model != tm.config.base_model or ck.rank != tm.config.rank:
            raise BadRequest(f"checkpoint was trained on {ck.base_model} with rank {ck.rank}; this model is "
                             f"{tm.config.base_model} with rank {tm.config.rank}")
        self._unshare_snapshots(tm)
        self._load_weights_from(tm, path)
        if with_optimizer:
            if not (path / "optimizer.pt").exists():
                raise BadRequest("checkpoint has no optimizer state (it was saved for sampling only)")
            st = torch.load(path / "optimizer.pt", map_location=self.bases[tm.config.base_model].device, weights_only=False)
            tm.optimizer.load_state_dict(st["optimizer"])
            tm.steps = int(st.get("steps", 0))
        tm.version += 1

    def _load_weights_from(self, tm: TrainableModel, path: Path) -> None:
        from safetensors.torch import load_file

        if tm.adapter:
            self.base(tm.config.base_model).load_adapter_state(tm.adapter, load_file(str(path / "adapter_model.safetensors")))
        else:
            tm.module.load_state_dict(_load_full(path / "model.safetensors"), strict=False)

    # ------------------------------------------------------------------ sampler weights
    def snapshot_for_sampler(self, model_id: str, key: str) -> SamplerWeights:
        """Copy a training model's current weights into sampler weights (in memory)."""
        tm = self.trainable(model_id)
        base = self.base(tm.config.base_model)
        if tm.adapter:
            adapter = self._new_adapter_name("s")
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
                frozen = frozen or _frozen_copy(tm.module)
                sw.module = frozen

    def sampler_from_checkpoint(self, key: str, path: Path) -> SamplerWeights:
        from safetensors.torch import load_file

        meta = self.read_meta(path)
        cfg = TrainConfig(**meta["train_config"])
        base = self.base(cfg.base_model)
        if cfg.is_lora:
            adapter = self._new_adapter_name("s")
            base.add_lora(adapter, cfg)
            base.load_adapter_state(adapter, load_file(str(path / "adapter_model.safetensors")))
            sw = SamplerWeights(key, base.name, adapter=adapter, config=cfg)
        else:
            from transformers import AutoModelForCausalLM

            mod = AutoModelForCausalLM.from_pretrained(base.path, dtype=self.dtype).to(base.device).eval()
            mod.load_state_dict(_load_full(path / "model.safetensors"), strict=False)
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
                params = self.base(sw.base_model).adapter_params(sw.adapter)
            elif sw.module is not None and id(sw.module) not in shared:
                params = list(sw.module.parameters())
            else:
                params = []
            n += sum(p.numel() * p.element_size() for p in params)
        return n

    def _snapshot_bytes(self, sw: SamplerWeights) -> int:
        if sw.adapter:
            params = self.base(sw.base_model).adapter_params(sw.adapter)
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
        from safetensors.torch import save_file

        d = self.checkpoint_dir / ".sampler-spill" / hashlib.sha256(sw.key.encode()).hexdigest()[:24]
        d.mkdir(parents=True, exist_ok=True)
        if sw.adapter:
            state = self.base(sw.base_model).adapter_state(sw.adapter)
            save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(d / "adapter_model.safetensors"))
        else:
            _save_full({k: v.detach().contiguous().cpu() for k, v in sw.module.state_dict().items()}, d / "model.safetensors")
        (d / "meta.json").write_text(json.dumps({"kind": "sampler_spill", "train_config": sw.config.to_json()}))
        self.spilled[sw.key] = d
        log.info("sampler weights %s evicted to %s", sw.key, d)

    def _unload_sampler(self, sw: SamplerWeights) -> None:
        if sw.adapter:
            self.base(sw.base_model).delete_adapter(sw.adapter)
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
            if path is None or not (path / "meta.json").exists():
                return None
            log.info("reloading evicted sampler weights %s from %s", key, path)
            sw = self.sampler_from_checkpoint(key, path)
        return sw

    def release(self, model_ids: list[str], sampler_keys: list[str]) -> None:
        """A finished or expired session's training models and sampler snapshots leave memory (and
        their spilled copies the disk); its saved checkpoints stay."""
        for key in sampler_keys:
            sw = self.samplers.pop(key, None)
            if sw is not None:
                self._unload_sampler(sw)
            self._drop_spill(key)
        for mid in model_ids:
            self.unload_model(mid)

    def has_sampler(self, key: str) -> bool:
        return key in self.samplers or key in self.spilled

    def sample(self, base_model: str, weights_key: str | None, specs: list[sampler.SampleSpec],
               poll=None) -> list[sampler.SampleResult]:
        """``poll()`` (static engine only) returns further (spec, callback) pairs with the same weights
        to admit into the running decode loop (continuous batching); their results go to the callbacks."""
        base = self.base(base_model)
        if weights_key is None:
            module, ctx = base.forward_module(None)
        else:
            sw = self._loaded_sampler(weights_key)
            if sw is None:
                raise NotFound(f"sampler weights {weights_key!r} are no longer loaded")
            self.samplers.move_to_end(weights_key)
            if sw.module is not None:
                module, ctx = sw.module, None
            elif self.merge_lora_sampling and self.static is None:
                module, ctx = base.merged_module(sw.adapter), None
            else:
                module, ctx = base.forward_module(sw.adapter)
        def hf_generate(sp: list[sampler.SampleSpec]) -> list[sampler.SampleResult]:
            with torch.no_grad():
                if ctx is not None:
                    with ctx():
                        return sampler.generate(module, base.tokenizer, sp, base.device, self.max_batch_sequences)
                return sampler.generate(module, base.tokenizer, sp, base.device, self.max_batch_sequences)

        if self.static is not None:  # specs longer than the static cache fall back to hf_generate
            return self.static.sample(base, weights_key, None if weights_key is None else sw, specs, hf_generate, poll=poll)
        return hf_generate(specs)


# ---------------------------------------------------------------------- math helpers
def token_logprobs(module: torch.nn.Module, inputs: list[np.ndarray], targets: list[np.ndarray],
                   device: torch.device, active: list[np.ndarray] | None = None) -> list[torch.Tensor]:
    """Per-token log p(target_i | input_<=i) for a batch of sequences (right-padded; causal
    attention makes the padding invisible to real tokens). Float32 log-softmax."""
    lens = [len(x) for x in inputs]
    T = max(lens)
    ids = torch.zeros((len(inputs), T), dtype=torch.long)
    tgt = torch.zeros((len(inputs), T), dtype=torch.long)
    for i, (x, y) in enumerate(zip(inputs, targets)):
        ids[i, : len(x)] = torch.as_tensor(np.asarray(x, dtype=np.int64))
        tgt[i, : len(y)] = torch.as_tensor(np.asarray(y, dtype=np.int64))
    ids, tgt = ids.to(device), tgt.to(device)
    if active is not None and torch.is_grad_enabled() and sum(int(np.count_nonzero(a)) for a in active) <= 0.5 * sum(lens):
        act = torch.zeros((len(inputs), T), dtype=torch.bool)
        for i, a in enumerate(active):
            act[i, : len(a)] = torch.as_tensor(np.asarray(a, dtype=bool))
        lp = _active_logprobs(module, ids, tgt, act.to(device), lens)
    elif device.type == "cuda":  # lm_head + log-softmax per token chunk: memory bounded whatever the vocab
        from .gpu.logprobs import fused_token_logprobs

        lp = fused_token_logprobs(module, ids, tgt)
    else:
        logits = module(input_ids=ids, use_cache=False).logits
        lp = _gather_logprobs(logits, tgt)
    return [lp[i, :n] for i, n in enumerate(lens)]


def _gather_logprobs(logits: torch.Tensor, tgt: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """log_softmax(logits)[tgt] in float32, chunked over the sequence to bound memory."""
    outs = []
    for s in range(0, logits.shape[1], chunk):
        lg = logits[:, s : s + chunk].float()
        outs.append(lg.gather(-1, tgt[:, s : s + chunk, None])[..., 0] - torch.logsumexp(lg, dim=-1))
    return torch.cat(outs, dim=1)


def _active_logprobs(module: torch.nn.Module, ids: torch.Tensor, tgt: torch.Tensor, act: torch.Tensor,
                     lens: list[int], chunk_tokens: int = 2048) -> torch.Tensor:
    """Logprobs of every position, with gradient only where ``act`` is set.

    Positions whose loss has zero gradient (prompt/observation tokens: weight 0 or advantage 0)
    need their logprob as an output but not its backward. The unembedding + log-softmax over
    the vocabulary dominates small models (and the memory of large-vocabulary ones), so it runs
    without autograd, once per distinct position: a prefix that every row shares (same tokens and
    targets: the agent's system prompt and tool schemas) once for the batch, padding never; and
    with autograd only for the active positions. Values are the same computation either way."""
    hf = module.get_base_model() if hasattr(module, "get_base_model") else module
    hidden, shared = _hidden_states(hf, ids)
    B, T, H = hidden.shape
    h, t, a = hidden.reshape(B * T, H), tgt.reshape(B * T), act.reshape(B * T)
    head = hf.lm_head
    if shared:  # the rows' hidden states agree on [0, shared); their targets may part earlier
        same_t = (tgt[:, :shared] == tgt[:1, :shared]).all(dim=0)
        shared = int(same_t.long().cumprod(0).sum())

    def chunk(hs: torch.Tensor, ts: torch.Tensor) -> torch.Tensor:
        lg = head(hs).float()
        return lg.gather(-1, ts[:, None])[:, 0] - torch.logsumexp(lg, dim=-1)

    with torch.no_grad():
        w, bias = _merged_linear(head)  # LoRA folded into one matrix: one matmul, no [N, V] adds

        def nograd(idx: torch.Tensor) -> torch.Tensor:
            out = []
            for s in range(0, len(idx), chunk_tokens):
                i = idx[s: s + chunk_tokens]
                lg = torch.nn.functional.linear(h.index_select(0, i), w, bias).float()
                out.append(lg.gather(-1, t.index_select(0, i)[:, None])[:, 0] - torch.logsumexp(lg, dim=-1))
            return torch.cat(out) if out else h.new_zeros(0, dtype=torch.float32)

        pos = torch.arange(T, device=ids.device)
        own = (pos[None, :] >= shared) & (pos[None, :] < torch.as_tensor(lens, device=ids.device)[:, None])
        lp = torch.zeros(B, T, dtype=torch.float32, device=ids.device)
        lp[:, :shared] = nograd(pos[:shared])  # row 0's positions stand for every row's
        lp = lp.reshape(B * T)
        own_idx = own.reshape(-1).nonzero()[:, 0]
        lp = lp.index_put((own_idx,), nograd(own_idx))
    idx = a.nonzero()[:, 0]
    if idx.numel():
        ha, ta = h.index_select(0, idx), t.index_select(0, idx)
        if ha.is_cuda:  # keep only the chunk's hidden states; its [chunk, V] float32 logits are recomputed in backward
            from torch.utils.checkpoint import checkpoint

            grad_chunk = lambda hs, ts: checkpoint(chunk, hs, ts, use_reentrant=False)  # noqa: E731
        else:
            grad_chunk = chunk
        lpa = torch.cat([grad_chunk(ha[s: s + chunk_tokens], ta[s: s + chunk_tokens]) for s in range(0, len(idx), chunk_tokens)])
        lp = lp.index_put((idx,), lpa)
    return lp.view(B, T)


def _hidden_states(hf: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Final hidden states [B, T, H] and the length of the prefix all rows share. When every row
    starts with the same tokens (agent prompts share the system prompt and tool schemas), that
    prefix runs once and its key/value cache is broadcast to all rows; autograd sums the rows'
    gradients through the broadcast, so values and gradients equal the plain batched pass."""
    B, T = ids.shape
    P = 0
    if B > 1 and not (hf.training and getattr(hf, "is_gradient_checkpointing", False)):
        same = (ids == ids[:1]).all(dim=0)
        P = int(same.long().cumprod(0).sum())
        P = min(P, T - 1)
    if P < sampler.MIN_SHARED_PREFIX:
        return hf.model(input_ids=ids, use_cache=False).last_hidden_state, 0
    from transformers import DynamicCache

    cache = DynamicCache()
    pre = hf.model(input_ids=ids[:1, :P], past_key_values=cache, use_cache=True).last_hidden_state
    sampler.broadcast_cache(cache, B)
    rest = hf.model(input_ids=ids[:, P:], past_key_values=cache, use_cache=True).last_hidden_state
    return torch.cat([pre.expand(B, -1, -1), rest], dim=1), P


def _merged_linear(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a Linear, with the active peft LoRA adapters added in (no grad)."""
    base = getattr(layer, "base_layer", None)
    if base is None:
        return layer.weight, layer.bias
    w = base.weight
    if not getattr(layer, "disable_adapters", False) and not getattr(layer, "merged", False):
        for name in getattr(layer, "active_adapters", []):
            if name in getattr(layer, "lora_A", {}):
                w = w + layer.get_delta_weight(name).to(w.dtype)
    return w, base.bias


def _frozen_copy(module: torch.nn.Module) -> torch.nn.Module:
    """An eval-mode copy of ``module`` whose parameters are detached clones (ties kept); unlike
    ``copy.deepcopy`` it copies no ``.grad``."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(p.detach().clone(), requires_grad=False)
    return copy.deepcopy(module, memo).eval()


def _enable_grad_ckpt(module: torch.nn.Module) -> None:
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _active_positions(loss_fn: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Where the loss can have a non-zero gradient: weight != 0, and for the advantage-weighted
    losses (everything but cross_entropy and dro's quadratic term) advantage != 0 as well."""
    n = len(inputs["target_tokens"])
    act = np.ones(n, dtype=bool) if "weights" not in inputs else np.asarray(inputs["weights"]) != 0
    if loss_fn in ("importance_sampling", "ppo", "cispo"):
        act &= np.asarray(inputs["advantages"]) != 0
    return act


def _microbatches(order: list[int], lens: list[int], max_tokens: int) -> list[list[int]]:
    """Group datums (longest first) so that batch_size * max_len <= max_tokens."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = max([lens[j] for j in cur] + [lens[i]])
        if cur and width * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _save_full(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    seen: dict[int, str] = {}
    out = {}
    for k, v in state.items():  # tied weights share storage; safetensors refuses duplicates
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = k
        out[k] = v
    save_file(out, str(path))


def _load_full(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


# ---------------------------------------------------------------------- validation
def validate_fwdbwd(req: FwdBwdRequest, info: ModelInfo) -> None:
    """Synchronous checks: everything that would otherwise crash a job (or the GPU)."""
    _, required, _ = losses.resolve(req.loss_fn, req.loss_fn_config)
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
        for name, arr in d.inputs.items():
            if len(arr) != n:
                raise BadRequest(f"datum {i}: loss_fn_inputs[{name!r}] has length {len(arr)} but model_input has {n} tokens")
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise BadRequest(f"datum {i}: loss_fn_inputs[{name!r}] contains non-finite values")


def _check_ids(ids: np.ndarray, info: ModelInfo, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= info.vocab_size):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise BadRequest(f"{what} contains token id {bad} outside the vocabulary [0, {info.vocab_size})")


def validate_adam(adam: dict[str, Any]) -> dict[str, float]:
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

"""The in-process torch runtime (``runtime_api.RuntimeAPI``): base models, training models (LoRA
via peft, or full fine-tuning), optimizers, forward/backward with Tinker's losses, checkpoints
and sampler weights.

Everything here runs on the scheduler's single worker thread (scheduler.py); nothing in this
module is thread-safe by itself. The pieces, by concern:

* models.py         base models and their adapters, training models, sampler weights;
* logprobs.py       per-token logprobs, microbatches, a loss over one microbatch (losses.py: the losses);
* checkpoint_io.py  weights and optimizer state to and from checkpoint directories;
* snapshots.py      sampler weights: snapshots, bounds, eviction, spill and reload.

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

import logging
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.models.loading import load_model

from . import checkpoint_io, losses, residual, sampler
from .codec import FwdBwdRequest
from .engines import HFSampling, SelectedWeights, make_engine
from .errors import NotFound
from .gpu import train_kernels
from .logprobs import (
    capacity_bytes,
    memory_share,
    microbatch_loss,
    microbatch_token_cap,
    microbatches,
    shared_prefix_order,
)
from .models import BaseModel, SamplerWeights, TrainableModel, enable_grad_ckpt, set_threads
from .runtime_api import Poll, RuntimeAPI, TrainConfig
from .snapshots import SamplerSnapshots

log = logging.getLogger("backend.runtime")


class Runtime(SamplerSnapshots, RuntimeAPI):
    """All models of this backend process. Runs on the scheduler thread only."""

    def __init__(self, models: list[dict[str, Any]], checkpoint_dir: Path, device: str = "cpu",
                 dtype: str = "float32", threads: int | None = None, max_tokens_per_microbatch: int = 8192,
                 max_sampler_snapshots: int = 16, max_batch_sequences: int = 256, sampler: str = "auto",
                 sampler_options: dict[str, Any] | None = None, gradient_checkpointing: bool = False,
                 merge_lora_sampling: bool | str = "auto", training_kernels: str = "auto",
                 max_sampler_bytes: int | None = None, max_spill_bytes: int | None = 8 * 2**30):
        set_threads(threads)
        self.device = device
        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.checkpoint_dir = Path(checkpoint_dir)
        self.max_tokens_per_microbatch = max_tokens_per_microbatch   # lowered per call to what memory fits
        self._last_cap = max_tokens_per_microbatch
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
        self.training_kernels = train_kernels.resolve(training_kernels, device)
        self._kernels_strict = (training_kernels or "auto").lower() == "liger"
        for b in self.bases.values():
            train_kernels.apply(b.hf, self.training_kernels, self._kernels_strict)
        # Sampling engine: the one engine.sampler names (engines/: hf, static, vllm; auto = static on CUDA, hf
        # elsewhere); the HF sampler serves what the engine does not (longer than its context, resumed rows).
        self.engine = make_engine(sampler, device, sampler_options, max_batch_sequences)
        self.hf_sampling = HFSampling(None, max_batch_sequences)
        if self.gradient_checkpointing:
            for b in self.bases.values():
                enable_grad_ckpt(b.hf)

    # ------------------------------------------------------------------ helpers
    def trainable(self, model_id: str) -> TrainableModel:
        tm = self.trainables.get(model_id)
        if tm is None:
            raise NotFound(f"training model {model_id!r} is not loaded (unknown id, or the backend restarted: "
                           "create a new training client from a saved checkpoint)")
        return tm

    def new_adapter_name(self, prefix: str) -> str:
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
            adapter = self.new_adapter_name("t")
            params = base.add_lora(adapter, cfg)
            tm = TrainableModel(model_id, cfg, adapter, None, self._make_optimizer(params), params)
        else:
            module = load_model(base.path, self.dtype, base.device)
            residual.apply(module)
            train_kernels.apply(module, self.training_kernels, self._kernels_strict)
            module.train(False)
            params = [p for p in module.parameters()]
            for p in params:
                p.requires_grad_(True)
            if self.gradient_checkpointing:
                enable_grad_ckpt(module)
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
    def forward_backward(self, req: FwdBwdRequest, between: Callable[[], None] | None = None
                         ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        tm = self.trainable(req.model_id)
        fn, cfg = losses.loss(req.loss_fn, req.loss_fn_config)
        module = self._module_for(tm)
        dev = self.bases[tm.config.base_model].device
        order = shared_prefix_order([np.asarray(d.tokens).tolist() for d in req.data])
        results: list[dict[str, np.ndarray] | None] = [None] * len(req.data)
        total_loss, n_tokens, clipped, counted = 0.0, 0, 0.0, 0
        hf = self.bases[tm.config.base_model].hf
        # a float32 residual stream (residual.py) keeps float32 activations: sized as a float32 model's
        elem = 4 if residual.enabled(hf) else next(hf.parameters()).element_size()
        cap = microbatch_token_cap(hf.config, elem, dev,
                                   self.max_tokens_per_microbatch, self.gradient_checkpointing)
        if cap < self.max_tokens_per_microbatch and cap != self._last_cap:
            log.warning("forward_backward: micro-batches of at most %d tokens (max_tokens_per_microbatch %d): %.1f GB "
                        "of the device's %.1f GB fit no more (the split depends on the machine only, so runs "
                        "reproduce; set LTS_MEMORY_BYTES where a container's limit is lower)", cap,
                        self.max_tokens_per_microbatch, memory_share(dev) * capacity_bytes(dev) / 1e9,
                        capacity_bytes(dev) / 1e9)
        self._last_cap = cap
        for n, mb in enumerate(microbatches(order, [len(d.tokens) for d in req.data], cap)):
            if n and between is not None:
                # No autograd graph is alive here (each micro-batch ran its backward); the sampling that
                # may run can switch the peft model's active adapter, so this model's is set again.
                between()
                module = self._module_for(tm)
            batch = [req.data[i] for i in mb]
            # HF checkpoints layers only in train mode (Qwen3 has no dropout: no other effect)
            module.train(self.gradient_checkpointing and not req.forward_only)
            with torch.no_grad() if req.forward_only else torch.enable_grad():
                loss, outs, (n_clipped, n_counted) = microbatch_loss(module, batch, req.loss_fn, fn, cfg, dev,
                                                                     req.forward_only)
                if not req.forward_only and loss.requires_grad:
                    loss.backward()
            module.train(False)
            for i, out in zip(mb, outs):
                results[i] = out
            total_loss += float(loss.detach())
            clipped += n_clipped
            counted += n_counted
            n_tokens += sum(len(d.tokens) for d in batch)
        metrics = {"loss:sum": total_loss, "num_tokens:sum": float(n_tokens)}
        if req.loss_fn in losses.CLIPPED:
            metrics["clip_fraction:mean"] = clipped / max(counted, 1)
        return results, metrics  # type: ignore[return-value]

    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]:
        tm = self.trainable(model_id)
        lr, b1, b2 = adam["learning_rate"], adam["beta1"], adam["beta2"]
        for g in tm.optimizer.param_groups:
            g["lr"], g["betas"], g["eps"], g["weight_decay"] = lr, (b1, b2), adam["eps"], adam["weight_decay"]
        grads = [p.grad for p in tm.params if p.grad is not None]
        norms = [torch.linalg.vector_norm(g.float()) for g in grads]
        gnorm = float(torch.linalg.vector_norm(torch.stack(norms))) if grads else 0.0
        if adam["grad_clip_norm"] > 0 and grads:
            torch.nn.utils.clip_grad_norm_(tm.params, adam["grad_clip_norm"])
        for p in tm.params:  # parameters without gradient still take a (zero-gradient) Adam step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self._unshare_snapshots(tm)
        tm.optimizer.step()
        tm.optimizer.zero_grad(set_to_none=True)
        tm.steps += 1
        return {"grad_norm:mean": gnorm, "lr:mean": lr, "step:max": float(tm.steps)}


    # ------------------------------------------------------------------ checkpoints
    def save(self, model_id: str, name: str, kind: str, with_optimizer: bool, overwrite: bool,
             user_metadata: dict | None = None) -> Path:
        """kind: 'weights' (training state: weights + optimizer), 'sampler_weights' or 'external_weights'."""
        tm = self.trainable(model_id)
        dest = self.checkpoint_dir / model_id / kind / name
        return checkpoint_io.write(self.base(tm.config.base_model), tm, dest, kind, with_optimizer, overwrite,
                                   user_metadata)

    def load_into(self, model_id: str, path: Path, with_optimizer: bool) -> None:
        tm = self.trainable(model_id)
        checkpoint_io.check_compatible(tm, path)
        self._unshare_snapshots(tm)
        base = self.base(tm.config.base_model)
        checkpoint_io.load_weights(base, tm, path)
        if with_optimizer:
            checkpoint_io.load_optimizer(tm, path, base.device)

    # ------------------------------------------------------------------ sampler weights (snapshots.py)
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

    def close(self) -> None:
        """Nothing of this runtime outlives the process."""

    def pauses_sampling(self) -> bool:
        return self.engine.yields  # the HF sampler pauses chunks; the static engine and vLLM batch themselves

    def sample(self, base_model: str, weights_key: str | None, specs: list[sampler.SampleSpec],
               poll: Poll | None = None) -> list[sampler.SampleResult]:
        """``poll()`` (static engine only) returns further (spec, callback) pairs with the same weights
        to admit into the running decode loop (continuous batching); their results go to the callbacks."""
        base = self.base(base_model)
        weights = self._sampling_weights(base, weights_key)

        def fallback(sp: list[sampler.SampleSpec]) -> list[sampler.SampleResult]:
            return self.hf_sampling.sample(base, weights, sp, None)

        return self.engine.sample(base, weights, specs, fallback, poll=poll)

    def _sampling_weights(self, base: BaseModel, weights_key: str | None) -> SelectedWeights:
        """The weights ``weights_key`` names (None: the base model) and the module a torch forward samples them
        with: peft's with the adapter active (the base: adapters disabled), a full-weights copy, or (engines that
        fold LoRA, engine.merge_lora_sampling) a plain copy with the snapshot's adapter folded in."""
        if weights_key is None:
            module, ctx = base.forward_module(None)
            return SelectedWeights(None, None, module, ctx)
        sw = self._loaded_sampler(weights_key)
        if sw is None:
            raise NotFound(f"sampler weights {weights_key!r} are no longer loaded")
        self.samplers.move_to_end(weights_key)
        if sw.module is not None:
            module, ctx = sw.module, None
        elif self.merge_lora_sampling and self.engine.folds_lora:
            module, ctx = base.merged_module(sw.adapter), None  # type: ignore[arg-type] # no module: an adapter
        else:
            module, ctx = base.forward_module(sw.adapter)
        return SelectedWeights(weights_key, sw, module, ctx)


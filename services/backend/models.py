"""Models held by the in-process runtime: frozen base models (with their peft LoRA adapters),
training models and sampler weights. Used on the scheduler's worker thread only (runtime.py)."""

from __future__ import annotations

import copy
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from services.models.loading import load_model

from . import residual
from .errors import BadRequest
from .gpu.weights import linear_weight  # W + scale * B @ A, the static engine's merge too
from .runtime_api import ModelInfo, TrainConfig

log = logging.getLogger("backend.runtime")

ATTN_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_MODULES = ["gate_proj", "up_proj", "down_proj"]
UNEMBED_MODULES = ["lm_head"]
LORA_ALPHA = 32  # Tinker's default (SkyRL hard-codes the same)


@dataclass
class TrainableModel:
    model_id: str
    config: TrainConfig
    adapter: str | None                 # peft adapter name (LoRA) ...
    module: torch.nn.Module | None      # ... or a private full copy (full fine-tuning)
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    steps: int = 0


@dataclass
class SamplerWeights:
    key: str                            # a snapshot id ("snap:...") or a checkpoint ("ckpt:<dir>")
    base_model: str
    config: TrainConfig                 # what it was trained as (to spill it to disk and reload it)
    adapter: str | None = None          # LoRA snapshot adapter name
    module: torch.nn.Module | None = None  # full-weights snapshot


def set_threads(n: int | None) -> None:
    if n:
        torch.set_num_threads(n)


class BaseModel:
    """One loaded base model (frozen), shared by every LoRA client trained on top of it."""

    def __init__(self, name: str, path: str, device: str, dtype: torch.dtype, max_context: int | None):
        self.name, self.path, self.device, self.dtype = name, path, torch.device(device), dtype
        t0 = time.time()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.hf = load_model(path, dtype, self.device)
        residual.apply(self.hf)   # a float32 residual stream where LTS_RESIDUAL_F32=1 (half-precision models)
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
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415 (.venv-control, where tests import this, lacks peft)

        targets = (ATTN_MODULES if cfg.train_attn else []) + (MLP_MODULES if cfg.train_mlp else []) + (
            UNEMBED_MODULES if cfg.train_unembed else [])
        if not targets:
            raise BadRequest("LoRA config trains nothing: enable at least one of train_attn/train_mlp/train_unembed")
        lcfg = LoraConfig(r=cfg.rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets, bias="none")
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(cfg.seed if cfg.seed is not None else 0)
            if self.peft is None:
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
        from peft import get_peft_model_state_dict  # noqa: PLC0415 (.venv-control lacks peft)

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.peft, adapter_name=adapter).items()}

    def load_adapter_state(self, adapter: str, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict  # noqa: PLC0415 (.venv-control lacks peft)

        on_device = {k: v.to(self.device) for k, v in state.items()}
        res = set_peft_model_state_dict(self.peft, on_device, adapter_name=adapter)
        missing = [k for k in getattr(res, "unexpected_keys", []) if "lora" in k]
        if missing:
            raise BadRequest(f"checkpoint does not match the adapter layout: unexpected keys {missing[:3]}")

    def merged_module(self, adapter: str) -> torch.nn.Module:
        """A plain (peft-free) module with ``adapter`` folded into its weights, for sampling.

        peft's per-layer LoRA branches cost ~40 % of a small model's decode step on CPU; a
        folded copy decodes at the base model's speed. One copy is kept and refilled when a
        different snapshot is sampled (RL samples one snapshot many times per step); lm_head
        is untied so a LoRA on the unembedding leaves the input embedding alone."""
        if self._merged is None:
            cfg = copy.deepcopy(self.hf.config)
            cfg.tie_word_embeddings = False
            self._merged = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype).to(self.device).eval()
            residual.apply(self._merged)
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
            if self.peft is None or not self.peft.peft_config:  # no adapter left: peft's disable_adapter would
                return self.hf, None                              # look up the deleted active one (KeyError)
            return self.peft, self.peft.disable_adapter
        self.activate(adapter)
        return self.peft, None



def frozen_copy(module: torch.nn.Module) -> torch.nn.Module:
    """An eval-mode copy of ``module`` whose parameters are detached clones (ties kept); unlike
    ``copy.deepcopy`` it copies no ``.grad``."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(p.detach().clone(), requires_grad=False)
    return copy.deepcopy(module, memo).eval()


def enable_grad_ckpt(module: torch.nn.Module) -> None:
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


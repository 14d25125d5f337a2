"""The runtime interface: what the scheduler and the API layer ask of a runtime.

Two runtimes implement it: ``runtime.Runtime`` (models in this process, torch) and
``ray_runtime.RayRuntime`` (trainer ranks and sampler replicas as Ray actors, each holding a
``Runtime``). Every method runs on the scheduler's worker thread (scheduler.py); the API layer
reads only ``bases`` / ``base(name).info`` and ``trainables`` (membership) synchronously.
It also holds the plain types both sides share (ModelInfo, TrainConfig).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .codec import FwdBwdRequest
from .errors import BadRequest
from .sampler import SampleResult, SampleSpec

# (spec, callback) pairs that join a running decode loop (continuous batching, Runtime.sample)
Poll = Callable[[], list[tuple[SampleSpec, Callable[[SampleResult], None]]]]


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


class BaseInfo(Protocol):
    """A served base model as the API layer sees it."""

    name: str
    path: str
    info: ModelInfo


class RuntimeAPI(ABC):
    """Models, training, checkpoints and sampler weights of one backend (see the module docstring)."""

    bases: Mapping[str, BaseInfo]    # served base models by name
    trainables: Mapping[str, Any]    # loaded training models by model id

    def base(self, name: str) -> Any:
        """The base model ``name``; BadRequest naming the served ones otherwise."""
        if name not in self.bases:
            raise BadRequest(f"unknown base model {name!r}; this backend serves: {', '.join(self.bases)}")
        return self.bases[name]

    @abstractmethod
    def create_model(self, model_id: str, cfg: TrainConfig) -> Any:
        """Load a training model (LoRA adapter or full copy) with a fresh AdamW."""

    @abstractmethod
    def unload_model(self, model_id: str) -> None: ...

    @abstractmethod
    def forward_backward(self, req: FwdBwdRequest, between: Callable[[], None] | None = None
                         ) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """Per-datum ``logprobs`` / ``elementwise_loss`` and the metrics; gradients accumulate unless
        ``req.forward_only``. ``req`` is validated (wire.validate_forward_backward). ``between()``, where
        the runtime can, runs between two micro-batches (the scheduler answers waiting samples there)."""

    @abstractmethod
    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]: ...

    @abstractmethod
    def save(self, model_id: str, name: str, kind: str, with_optimizer: bool, overwrite: bool,
             user_metadata: dict | None = None) -> Path:
        """Write checkpoint ``<kind>/<name>`` of ``model_id``; its directory."""

    @abstractmethod
    def load_into(self, model_id: str, path: Path, with_optimizer: bool) -> None: ...

    @abstractmethod
    def snapshot_for_sampler(self, model_id: str, key: str) -> Any:
        """Sampler weights ``key``: a copy of the model's current weights (in memory)."""

    @abstractmethod
    def sampler_from_checkpoint(self, key: str, path: Path) -> Any: ...

    @abstractmethod
    def has_sampler(self, key: str) -> bool: ...

    @abstractmethod
    def release(self, model_ids: list[str], sampler_keys: list[str]) -> None:
        """A finished or expired session's models and sampler weights leave memory."""

    @abstractmethod
    def sample(self, base_model: str, weights_key: str | None, specs: list[SampleSpec],
               poll: Poll | None = None) -> list[SampleResult]: ...

    def pauses_sampling(self) -> bool:
        """Whether a running sample chunk can yield to small requests (``SampleSpec.should_yield``)."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release what would outlive the process otherwise (the Ray runtime's actors)."""

"""What a recipe is: its typed config (a dataclass of config.py's parts whose fields are its flags), the object the
driver (cookbook/train.py ``run``) calls once per step, and its entry in the registry (``RecipeSpec``,
cookbook/recipes/__init__.py: ``run.sh MODE`` and ``python -m cookbook.cli MODE`` read it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from .. import train


class Recipe(Protocol):
    """A training recipe, driven by ``train.run``: constructed with (cfg, ctx, tc, eos, run_dir, shared), where
    ``shared`` is its part of state.json after a --resume (what ``state()`` returned at the last checkpoint)."""

    WARM_START: ClassVar[str]   # "publish": its final checkpoint is the latest of its configuration (sft);
    #                             "consume": with a --preset it starts from that (the RL recipes); "": neither

    @classmethod
    def heldout_split(cls, cfg: Any) -> str | None: ...   # the split the run's context loads for evaluation
    async def setup(self, sc, base_model: str, init: str, rec) -> None: ...
    async def step(self, step: int) -> dict: ...          # the step's record (result.json steps, metrics.jsonl)
    def state(self) -> dict[str, Any]: ...                # its part of state.json (written with each checkpoint)
    async def finish(self, result: dict[str, Any]) -> None: ...   # last words into result.json
    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class RecipeSpec:
    """One ``run.sh`` mode: its name, typed config class, one-line help and the whole run (``main(cfg, run_dir) ->
    exit code``). ``recipe``: the Recipe class the shared driver runs (a training recipe), else None; ``trains``: it
    changes weights (refused by a rollout-only configuration)."""

    mode: str
    config: type
    help: str
    main: Callable[[Any, Path], int]
    recipe: type | None = None
    trains: bool = True


def training(config: Any, recipe: type, help_: str) -> RecipeSpec:
    """The spec of a training recipe: the shared driver runs ``recipe`` with ``config``."""
    return RecipeSpec(config.MODE, config, help_, lambda cfg, run_dir: train.run(cfg, run_dir, recipe), recipe)

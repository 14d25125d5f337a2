"""The recipe registry: every ``run.sh`` mode (``python -m cookbook.cli MODE``), one module each.

Adding a recipe = one module (its config class + its Recipe + a ``SPEC``) and its name in the line below
(docs/recipes.md "Adding a recipe")."""

from __future__ import annotations

from typing import Any

from ..config import build
from . import grpo, ppo, reinforce, rollout, sft
from .base import RecipeSpec

RECIPES: dict[str, RecipeSpec] = {s.mode: s for s in (rollout.SPEC, sft.SPEC, grpo.SPEC, ppo.SPEC, ppo.KL_SPEC,
                                                       reinforce.SPEC)}


def config_of(mode: str, given: dict[str, Any]) -> Any:
    """The typed config of ``run.sh MODE`` from the flags ``given`` (by field name), the preset and the defaults."""
    return build(RECIPES[mode].config, given)

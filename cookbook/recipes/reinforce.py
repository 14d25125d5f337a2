"""reinforce: REINFORCE with a running-mean baseline (Williams 1992): advantage = return - the running mean of the
batches' rewards (the RL loop's ``baseline`` estimator), one forward_backward with the importance_sampling loss (the
REINFORCE gradient, weighted by the sampler/trainer ratio: 1 on-policy) and one optimizer step a batch.

The worked example of docs/recipes.md "Adding a recipe": this file and one name in the registry line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import RLConfig
from .base import training
from .rl import RLRecipe


@dataclass
class ReinforceConfig(RLConfig):
    """reinforce: every sampled rollout trains, weighted by its return minus the running-mean baseline."""

    MODE: ClassVar[str] = "reinforce"
    ADVANTAGES: ClassVar[str] = "baseline"

    @property
    def loss_name(self) -> str:
        return "importance_sampling"


SPEC = training(ReinforceConfig, RLRecipe, "REINFORCE with a running-mean baseline")

"""grpo: group-relative policy optimisation: ``group_size`` rollouts per task, advantages relative to the group's
mean (optionally / its std, or leave-one-out), one forward_backward with the loss (importance_sampling, or ppo /
cispo / gspo) and one optimizer step per batch: the RL loop's ``single_update``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import RLConfig, flag
from .base import training
from .rl import RLRecipe


@dataclass
class GrpoConfig(RLConfig):
    """grpo: group-relative advantages, one forward_backward + optim_step per step."""

    MODE: ClassVar[str] = "grpo"
    ADVANTAGES: ClassVar[str] = "group"
    loss: str | None = flag("loss (default importance_sampling; ppo with --max-steps-off-policy > 0: its ratio is "
                            "clipped; gspo: the sequence-level ratio over each datum's sampled tokens)",
                            choices=["importance_sampling", "ppo", "cispo", "gspo"])
    normalize_std: bool = flag("divide advantages by the group std (default: on with --preset quickstart)", False,
                               switch=True)
    leave_one_out: bool = flag("leave-one-out baseline", False)

    @property
    def loss_name(self) -> str:
        return self.loss or ("ppo" if self.max_steps_off_policy > 0 else "importance_sampling")


SPEC = training(GrpoConfig, RLRecipe, "group-relative policy optimisation")

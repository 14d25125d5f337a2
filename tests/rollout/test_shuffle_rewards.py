"""--shuffle-rewards (issue 32's control run): each group's rewards go to the wrong rollouts (a seeded permutation)
before the advantages, for group (grpo) and baseline (ppo) estimators; what is logged as the group's returns stays
what the rollouts earned. Planted: no permutation -> the advantages follow the rewards -> fails."""

from __future__ import annotations

from cookbook import rl_loop
from cookbook.cli import parse
from services.common.trajectory import Trajectory


def _groups(rewards: list[list[float]]) -> list[list[Trajectory]]:
    return [[Trajectory(task_id=f"t{g}", instruction="", reward=r) for r in rs] for g, rs in enumerate(rewards)]


def test_shuffled_rewards_are_a_seeded_permutation_to_other_rollouts():
    rewards = [[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
    for mode in ("grpo", "ppo"):
        plain = parse([mode, "--group-size", "8"])
        ctrl = parse([mode, "--group-size", "8", "--shuffle-rewards"])
        assert ctrl.shuffle_rewards and not plain.shuffle_rewards
        moved = 0
        for step in range(6):
            _, a0, ret0, _, _ = rl_loop._advantages(plain, _groups(rewards), rl_loop.RLState(), step)
            _, a1, ret1, _, _ = rl_loop._advantages(ctrl, _groups(rewards), rl_loop.RLState(), step)
            _, a2, _, _, _ = rl_loop._advantages(ctrl, _groups(rewards), rl_loop.RLState(), step)
            assert ret0 == ret1 == rewards          # the logged returns are the earned ones
            assert a1 == a2                         # seeded: the same step shuffles the same way
            assert sorted(a0) == sorted(a1)         # the same advantages ...
            moved += a0 != a1                       # ... given to other rollouts
        assert moved >= 5, (mode, moved)

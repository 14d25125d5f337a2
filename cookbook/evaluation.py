"""Evaluation on a task list (e.g. a dataset's held-out split): run the agent, score every attempt with
the task's verifier, report the pass rate (reward 1), the mean reward and how many attempts counted.

``evaluate`` takes any policy (a tinker sampler through ``TinkerPolicy``, or a scripted one in tests);
``evaluate_sampler`` builds the seeded ``TinkerPolicy`` per attempt from a tinker ``SamplingClient``, so
two evaluations of the same weights with the same seed sample the same rollouts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from services.common.trajectory import Trajectory
from services.tasks.task import Task

from .agent.agent import Policy, TinkerPolicy
from .rollout import Failures, Rollouts


@dataclass
class EvalResult:
    pass_rate: float                 # attempts with reward 1 / scored attempts
    mean_reward: float               # over scored attempts
    n: int                           # scored attempts
    n_failed: int = 0                # attempts without a score (infrastructure failed after the retries)
    by_task: dict[str, float] = field(default_factory=dict)   # pass rate per task
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("trajectories")
        return d


def score(tasks: list[Task], trajs: list[Trajectory | None]) -> EvalResult:
    """The figures of attempts ``trajs`` (None: no score) of ``tasks`` (the same order)."""
    done = [(t, tr) for t, tr in zip(tasks, trajs) if tr is not None]
    passed = [float(tr.reward == 1.0) for _, tr in done]
    per: dict[str, list[float]] = {}
    for (t, _), p in zip(done, passed):
        per.setdefault(t.name, []).append(p)
    n = len(done)
    return EvalResult(pass_rate=sum(passed) / n if n else 0.0,
                      mean_reward=sum(float(tr.reward or 0.0) for _, tr in done) / n if n else 0.0,
                      n=n, n_failed=len(trajs) - n, by_task={k: sum(v) / len(v) for k, v in sorted(per.items())},
                      trajectories=[tr for _, tr in done])


async def evaluate(rollouts: Rollouts, tasks: list[Task], policy: Callable[[Task, int], Policy],
                   samples_per_task: int = 1, failures: Failures | None = None) -> EvalResult:
    """``samples_per_task`` attempts at every task; ``policy(task, k)`` gives attempt k's policy."""
    if not tasks or samples_per_task < 1:
        raise ValueError("evaluate needs at least one task and samples_per_task >= 1")
    items = [(t, policy(t, k)) for t in tasks for k in range(samples_per_task)]
    trajs = await rollouts.run_many(items, failures)
    return score([t for t, _ in items], trajs)


async def evaluate_sampler(rollouts: Rollouts, tasks: list[Task], sampling_client, stop_ids: list[int], *,
                           temperature: float = 1.0, samples_per_task: int = 1, seed: int = 0,
                           failures: Failures | None = None) -> EvalResult:
    """``evaluate`` with a tinker SamplingClient; attempt k of task i samples with its own seed."""
    base = TinkerPolicy(sampling_client, stop_ids, temperature=temperature)
    index = {t.name: i for i, t in enumerate(tasks)}

    def policy(task: Task, k: int) -> Policy:
        return base.fork((seed * 1_000_003 + index[task.name] * 1_009 + k) % (2**31))

    return await evaluate(rollouts, tasks, policy, samples_per_task, failures)


def record(result: dict[str, Any], step: int, res: EvalResult, split: str = "heldout") -> dict[str, Any]:
    """Add evaluation ``res`` at ``step`` to a run's result.json dict: ``result["heldout"]`` holds the split,
    every point (step, pass_rate, mean_reward, n, ...), ``before`` (the first point: the starting weights)
    and ``after`` (the latest). What cookbook/report.py plots and the viewer shows."""
    h = result.setdefault("heldout", {"split": split, "points": []})
    h["points"] = [p for p in h["points"] if p["step"] != step] + [{"step": step, **res.to_dict()}]
    h["points"].sort(key=lambda p: p["step"])
    h["before"], h["after"] = h["points"][0], h["points"][-1]
    return h

"""run.sh on a folder of public Harbor tasks with the docker backend: SFT from the gold patches
(to a gold chance near 0.5, so GRPO groups have reward variance), then a rollout of all 3 tasks and
a 2-step GRPO warm-started from it: every documented result file written, rewards nonzero,
transitions trained, no infrastructure failure, no container left."""

from __future__ import annotations

from helpers import read_json as _json
from helpers import run_sh as _run

from .conftest import SAMPLE, containers_of

DOCKER = ["--dataset", str(SAMPLE), "--sandbox-backend", "docker"]
TWO = ["--task-id", "sample__stats-202", "--task-id", "sample__textkit-101"]   # one-edit fixes


def test_sft_rollout_grpo_on_the_docker_backend(docker_client, running_docker):
    tmp, env, worker = running_docker
    sft = _run(env, "sft", *DOCKER, *TWO, "--num-steps", "50", "--batch-size", "8", "--eval-every", "0",
               "--learning-rate", "5e-3")
    res = _json(sft / "results" / "sft" / "result.json")
    assert res["final_checkpoint"].startswith("tinker://") and len(res["steps"]) == 50

    ro = _run(env, "rollout", *DOCKER, "--n", "2", "--temperature", "0.7", "--model-path", res["final_checkpoint"])
    rr = _json(ro / "results" / "rollout" / "result.json")
    assert rr["n_rollouts"] == 6 and rr["failures"]["infra"] == 0 and rr["mean_reward"] is not None, rr["failures"]
    assert len(list((ro / "results" / "rollout").glob("*/summary.json"))) == 6

    grpo = _run(env, "grpo", *DOCKER, *TWO, "--num-steps", "2", "--group-size", "4", "--groups-per-step", "2",
                "--temperature", "0.7",
                "--init-from", res["final_checkpoint"], "--save-state", "final", "--learning-rate", "1e-3")
    out = _json(grpo / "results" / "grpo" / "result.json")
    print("gold p", res.get("gold_p_final"), "rollout mean reward", rr["mean_reward"],
          "grpo mean rewards", [s["mean_reward"] for s in out["steps"]],
          "transitions", [s.get("train_transitions") for s in out["steps"]])
    assert len(out["steps"]) == 2
    for s in out["steps"]:
        assert s["n_rollouts"] == 8 and s["failures"]["infra"] == 0, s["failures"]
    assert sum(s["train_transitions"] for s in out["steps"]) > 0, "no group had reward variance: nothing trained"
    assert max(s["mean_reward"] for s in out["steps"]) > 0, ([s["mean_reward"] for s in out["steps"]],
                                                             rr["mean_reward"],
                                                             res.get("gold_p_final"))
    step = _json(grpo / "step_000" / "step_result.json")
    assert len(step["group_returns"]) == 2
    assert {"rollout_idx", "return", "advantage", "task_id",
            "trajectory"} <= set(_json(grpo / "step_000" / "rollout_00.json"))
    assert _json(grpo / "checkpoint.json")["name"] == "final"
    assert len((grpo / "metrics.jsonl").read_text().splitlines()) == 2
    assert (grpo / "results" / "grpo" / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert containers_of(docker_client, worker) == []

"""Issue 6 machinery, end to end on the embedded default with tiny budgets: sft -> grpo (warm
started from the sft checkpoint), ppo and ppo-kl, with every documented result file."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from helpers import REPO, read_json as _json, run_sh as _run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")
TASKS = ["--task-id", "absolute", "--task-id", "clamp"]


def test_sft_then_grpo_ppo_ppokl_write_documented_results(running):
    tmp, env = running
    sft = _run(env, "sft", "--preset", "quickstart", *TASKS, "--num-steps", "2", "--batch-size", "2", "--eval-every", "2",
               "--eval-n", "2", "--eval-from", "1", "--save-every", "1",
               "--gate-min-gold-p", "0")  # the preset's 0.15 would skip the sampled check this early
    res = _json(sft / "results" / "sft" / "result.json")
    assert [s["step"] for s in res["steps"]] == [0, 1] and res["final_checkpoint"].startswith("tinker://")
    assert "loss_per_token" in res["steps"][0] and "pass_rate" in res["steps"][1]
    assert 0.0 <= res["steps"][1]["task_coverage"] <= 1.0  # share of the checked tasks solved at least once
    # --balance-tasks (on in the preset): step 1 weights each task's loss by its gold NLL at step 0 / the mean
    s0, s1 = res["steps"]
    assert s0["loss_weight_min"] == s0["loss_weight_max"] == 1.0  # nothing measured yet
    nll0 = s0["gold_nll_by_task"]
    assert sorted(nll0) == ["lts-micro/absolute", "lts-micro/clamp"] and all(v > 0 for v in nll0.values())
    mean0 = sum(nll0.values()) / 2
    assert s1["loss_weight_max"] == pytest.approx(max(nll0.values()) / mean0, rel=1e-3)
    assert s1["loss_weight_min"] == pytest.approx(min(nll0.values()) / mean0, rel=1e-3) and s1["loss_weight_min"] < 1.0
    # the gate's per-task gold chance (exp(-NLL) after the step's update), and the same at the end
    assert sorted(s1["gold_p_by_task"]) == sorted(nll0) and s1["gold_p_min"] == min(s1["gold_p_by_task"].values())
    assert all(0.0 <= p < 1.0 for p in s1["gold_p_by_task"].values()) and not s1["gate_reached"]  # pass rate 0 < 0.3
    assert res["gold_p_final"] == s1["gold_p_by_task"]  # no step after the last check
    assert _json(sft / "exit-status.json")["exit_code"] == 0

    grpo = _run(env, "grpo", "--preset", "quickstart", *TASKS, "--num-steps", "2", "--group-size", "2",
                "--groups-per-step", "2", "--save-state", "final", "--learning-rate", "1e-3")
    res = _json(grpo / "results" / "grpo" / "result.json")
    assert res["init_from"] == _json(sft / "results" / "sft" / "result.json")["final_checkpoint"], "grpo warm-starts from sft"
    assert len(res["steps"]) == 2
    for s in res["steps"]:
        for k in ("step", "mean_reward", "n_rollouts", "failures", "group_returns", "group_advantages", "timings"):
            assert k in s, k
        assert s["n_rollouts"] == 4 and set(s["failures"]) == {"infra", "agent", "verifier", "retries"}
        assert set(s["timings"]) >= {"rollout_s", "train_s", "weight_sync_s", "sandbox_s", "sampling_s", "verifier_s"}
    step = _json(grpo / "step_000" / "step_result.json")
    assert len(step["group_returns"]) == 2 and all(len(g) == 2 for g in step["group_returns"])
    r0 = _json(grpo / "step_000" / "rollout_00.json")
    assert {"rollout_idx", "return", "advantage", "task_id", "turns_used", "trajectory"} <= set(r0)
    assert (grpo / "step_000" / "rollout_00.txt").read_text().startswith("# task ")
    ck = _json(grpo / "checkpoint.json")
    assert ck["name"] == "final" and ck["path"].endswith("/weights/final")
    metrics = [json.loads(l) for l in (grpo / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and "mean_reward" in metrics[0]
    png = grpo / "results" / "grpo" / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (grpo / "viewer.html").read_text()
    assert "<details>" in html and "reward_curve.png" in html

    kls = {}
    for beta in ("0", "0.5"):
        d = _run(env, "ppo-kl", "--preset", "quickstart", *TASKS, "--num-steps", "2", "--group-size", "2",
                 "--groups-per-step", "2", "--kl-beta", beta, "--init-from", "none", "--learning-rate", "3e-3")
        steps = _json(d / "results" / "ppo-kl" / "result.json")["steps"]
        assert all("kl_per_token" in s and s["kl_beta"] == float(beta) for s in steps if s["train_transitions"])
        kls[beta] = [s.get("kl_per_token", 0.0) for s in steps]
    assert all(k >= 0 and k < 10 for v in kls.values() for k in v), kls
    # same seeds, same first rollouts: the penalty can only pull the policy towards the reference
    assert sum(kls["0.5"]) <= sum(kls["0"]) + 1e-6, kls
    ppo = _run(env, "ppo", "--preset", "quickstart", *TASKS, "--num-steps", "1", "--group-size", "2", "--groups-per-step", "2",
               "--init-from", "none")
    assert _json(ppo / "results" / "ppo" / "result.json")["steps"][0]["n_rollouts"] == 4


def _final_logprobs(env, path: str) -> list[float]:
    import numpy as np
    import tinker
    from tinker import types

    rt = yaml.safe_load((Path(env["LTS_CONFIG_DIR"]) / "runtime.yaml").read_text())
    sc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{rt['backend']['port']}", api_key=rt["backend"]["api_keys"][0])
    tc = sc.create_training_client_from_state(path).result(timeout=120)
    ids = list(range(100, 140))
    d = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64))})
    return tc.forward([d], "cross_entropy").result(timeout=120).loss_fn_outputs[0]["logprobs"].to_numpy().tolist()


def test_kill9_client_then_resume_matches_uninterrupted_run(running):
    import numpy as np

    tmp, env = running
    args = ["grpo", "--preset", "quickstart", *TASKS, "--num-steps", "3", "--group-size", "2", "--groups-per-step", "2",
            "--init-from", "none", "--save-every", "1", "--seed", "3", "--learning-rate", "3e-3"]
    full = _run(env, *args)
    full_ck = _json(full / "results" / "grpo" / "result.json")["final_checkpoint"]

    run_dir = tmp / "runs" / "killed"
    p = subprocess.Popen([str(REPO / ".venv-control/bin/python"), "-m", "cookbook.cli", *args, "--run-dir", str(run_dir)],
                         cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        st = run_dir / "state.json"
        if st.exists() and json.loads(st.read_text()).get("step", 0) >= 2:
            break
        assert p.poll() is None, "the run ended before it could be killed"
        time.sleep(0.2)
    p.kill()  # kill -9, mid-run (step 3 is under way or about to start)
    p.wait()
    resumed = _run(env, *args, "--resume", str(run_dir))
    assert resumed == run_dir
    res = _json(run_dir / "results" / "grpo" / "result.json")
    assert [s["step"] for s in res["steps"]] == [0, 1, 2], [s["step"] for s in res["steps"]]
    a, b = np.array(_final_logprobs(env, full_ck)), np.array(_final_logprobs(env, res["final_checkpoint"]))
    assert np.abs(a - b).max() < 1e-3, f"resumed run differs from the uninterrupted one by {np.abs(a - b).max()}"

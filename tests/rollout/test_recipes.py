"""The recipes end to end on the embedded default with tiny budgets: sft -> grpo (warm started from
the sft checkpoint) and ppo with every documented result file; then, from one short SFT warm start
whose rewards are nonzero, kill -9 + --resume equals the uninterrupted run, and ppo-kl's penalty
holds the policy nearer its starting point."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tinker
import yaml
from safetensors.numpy import load_file
from tinker import types

from cookbook import mismatch
from cookbook.agent.trajectory import Trajectory
from helpers import REPO
from helpers import read_json as _json
from helpers import run_sh as _run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")
TASKS = ["--task-id", "absolute", "--task-id", "clamp"]


def test_sft_then_grpo_ppo_write_documented_results(running_module):
    tmp, env = running_module
    sft = _run(env, "sft", "--preset", "quickstart", *TASKS, "--num-steps", "2", "--batch-size", "2",
               "--eval-every", "2",
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
    sft_final = _json(sft / "results" / "sft" / "result.json")["final_checkpoint"]
    assert res["init_from"] == sft_final, "grpo warm-starts from sft"
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

    ppo = _run(env, "ppo", "--preset", "quickstart", *TASKS, "--num-steps", "1", "--group-size", "2",
               "--groups-per-step", "2",
               "--init-from", "none")
    assert _json(ppo / "results" / "ppo" / "result.json")["steps"][0]["n_rollouts"] == 4


def _final_logprobs(env, path: str, ids: list[int] | None = None) -> list[float]:
    """The logprob of each next token of ``ids`` (default: a fixed 40-token sequence) under checkpoint ``path``."""
    rt = yaml.safe_load((Path(env["LTS_CONFIG_DIR"]) / "runtime.yaml").read_text())
    sc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{rt['backend']['port']}",
                              api_key=rt["backend"]["api_keys"][0])
    tc = sc.create_training_client_from_state(path).result(timeout=120)
    ids = ids or list(range(100, 140))
    d = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64))})
    return tc.forward([d], "cross_entropy").result(timeout=120).loss_fn_outputs[0]["logprobs"].to_numpy().tolist()


def _adapter(env, path: str) -> dict:
    """The LoRA weights of checkpoint ``path``, read from the backend's state directory."""
    rt = yaml.safe_load((Path(env["LTS_CONFIG_DIR"]) / "runtime.yaml").read_text())
    model_id, kind, name = path.removeprefix("tinker://").split("/")
    ck = Path(rt["backend"]["state_dir"]) / "checkpoints" / model_id / kind / name
    return load_file(str(ck / "adapter_model.safetensors"))


def _kl_from_start(env, start: str, final: str, rollouts: list[Path]) -> float:
    """KL(start || final) estimated on trajectories sampled from the start policy: the mean over their
    sampled tokens of log p_start - log p_final (one forward pass per trajectory and checkpoint)."""
    diffs = []
    for r in rollouts:
        seg = _json(r)["trajectory"]["segments"][0]
        mask = np.array(seg["sampled"][1:], dtype=bool)
        a, b = (np.array(_final_logprobs(env, p, seg["tokens"])) for p in (start, final))
        diffs += list((a - b)[mask])
    return float(np.mean(diffs))


def _assert_cpu_mismatch(run_dir: Path, res: dict) -> None:
    """Issue 41: every trained step's sampler/trainer mismatch (cookbook/mismatch.py, from the step's own
    forward_backward) in metrics.jsonl, result.json and the viewer; on the CPU float32 path, where the synchronous loop
    scores each batch with the weights that sampled it, the mismatch is numerics alone: tiny (the CPU contract).
    Planted: the trainer logprobs of the next datum (or shifted by one token) -> mean |diff| ~1-3 -> fails."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [s["step"] for s in res["steps"]]
    trained = [m for m in metrics if m["train_transitions"] > 0]
    assert trained and all(m.get("train_skipped") for m in metrics if m["train_transitions"] == 0)
    for m, s in zip(metrics, res["steps"]):
        if m["train_transitions"] > 0:
            assert set(mismatch.KEYS) <= set(m) and set(mismatch.KEYS) <= set(s["metrics"]), (m["step"], sorted(m))
    figs = {k: [m[k] for m in trained] for k in mismatch.KEYS}
    print(f"CPU float32 sampler/trainer mismatch, {len(trained)} of {len(metrics)} steps trained, per step min-max: "
          + "; ".join(f"{k} {min(v):.3g}-{max(v):.3g}" for k, v in figs.items()))
    assert all(k == 0 for k in figs["mismatch/staleness"])   # the synchronous loop: the sampling weights
    assert all(t > 0 for t in figs["mismatch/tokens"])
    assert max(figs["mismatch/abs_diff_mean"]) < 1e-3 and max(figs["mismatch/ratio_abs_dev_mean"]) < 1e-3, figs
    assert max(abs(v) for v in figs["optim/kl_sample_train_v1"]) < 1e-3, figs
    assert max(figs["mismatch/abs_diff_max"]) < 1e-2, figs
    assert "sampler/trainer: mean |&Delta;|" in (run_dir / "viewer.html").read_text()


@pytest.fixture(scope="module")
def warm(running_module):
    """A short SFT on the two tasks (about 20 s): after it the sampled policy solves them about half the
    time, so GRPO/PPO groups have nonzero rewards and variance: training really happens."""
    tmp, env = running_module
    sft = _run(env, "sft", "--preset", "quickstart", *TASKS, "--num-steps", "50", "--batch-size", "8",
               "--eval-every", "0",
               "--seed", "0")
    res = _json(sft / "results" / "sft" / "result.json")
    assert min(res["gold_p_final"].values()) > 0.02, res["gold_p_final"]
    return tmp, env, res["final_checkpoint"]


def test_kill9_client_then_resume_matches_uninterrupted_run(warm):
    """Default --save-every (5), 8 steps: killed after step 5 is logged (the last checkpoint is after step 4),
    --resume reruns steps 5.. from that checkpoint with its rng/order state; nothing lost, nothing doubled."""
    tmp, env, ck = warm
    args = ["grpo", "--preset", "quickstart", *TASKS, "--num-steps", "8", "--group-size", "4", "--groups-per-step", "2",
            "--init-from", ck, "--seed", "3", "--learning-rate", "3e-3"]
    full = _run(env, *args)
    fres = _json(full / "results" / "grpo" / "result.json")
    assert sum(s["train_transitions"] for s in fres["steps"]) > 0 and any(s["mean_reward"] > 0 for s in fres["steps"])
    _assert_cpu_mismatch(full, fres)

    run_dir = tmp / "runs" / "killed"
    p = subprocess.Popen([str(REPO / ".venv-control/bin/python"), "-m", "cookbook.cli", *args,
                          "--run-dir", str(run_dir)],
                         cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res_path = run_dir / "results" / "grpo" / "result.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if len(_json(res_path)["steps"]) >= 6:
                break
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        assert p.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    p.kill()  # kill -9 between the checkpoints after steps 4 and 7
    p.wait()
    killed = _json(res_path)
    assert 6 <= len(killed["steps"]) < 8 and [c["step"] for c in killed["checkpoints"]] == [5], killed["checkpoints"]
    resumed = _run(env, *args, "--resume", str(run_dir))
    assert resumed == run_dir
    res = _json(res_path)
    assert [s["step"] for s in res["steps"]] == list(range(8)), [s["step"] for s in res["steps"]]
    assert [json.loads(l)["step"] for l in (run_dir / "metrics.jsonl").read_text().splitlines()] == list(range(8))
    assert [c["step"] for c in res["checkpoints"]] == [5, 8]
    for a, b in zip(fres["steps"], res["steps"]):  # the same data, lr schedule and rewards, step by step
        assert ((a["learning_rate"], a["group_returns"], a["tasks"])
                == (b["learning_rate"], b["group_returns"], b["tasks"]))
    start, a, b = (_adapter(env, p) for p in (ck, fres["final_checkpoint"], res["final_checkpoint"]))
    moved = max(float(np.abs(a[k] - start[k]).max()) for k in a)
    diff = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    print(f"resume: weights moved {moved:.4g} from the warm start; resumed - uninterrupted {diff:.3g}")
    assert moved > 1e-3, "training did not move the weights"
    assert sorted(a) == sorted(b) and diff < 1e-5, f"resumed run differs from the uninterrupted one by {diff}"


def test_ppo_kl_penalty_holds_the_policy_near_its_warm_start(warm):
    """The KL reference is the run's starting policy (the SFT warm start); every trajectory trains. Over
    the same seeds, beta 4 ends nearer the warm start than beta 0 (less than half its KL(start || final),
    measured afresh on the first step's rollouts, sampled from the start policy). Planted: the penalty's
    gradient dropped (no forward_backward_custom) -> the two runs end equally far -> fails."""
    tmp, env, ck = warm
    kls, measured, refs = {}, {}, {}
    for beta in ("0", "4"):
        d = _run(env, "ppo-kl", "--preset", "quickstart", *TASKS, "--num-steps", "3", "--group-size", "4",
                 "--groups-per-step", "2", "--kl-beta", beta, "--init-from", ck, "--seed", "3",
                 "--learning-rate", "3e-3")
        res = _json(d / "results" / "ppo-kl" / "result.json")
        refs[beta] = res.get("kl_reference")
        steps = res["steps"]
        assert all(s["train_transitions"] == s["n_rollouts"] > 0 for s in steps), [
            (s["train_transitions"], s["n_rollouts"]) for s in steps]
        assert any(s["mean_reward"] > 0 for s in steps)
        assert all(s["kl_beta"] == float(beta) and 0 <= s["kl_per_token"] < 10 for s in steps)
        kls[beta] = sum(s["kl_per_token"] for s in steps)
        # the sampler/trainer mismatch of ppo's first minibatch of the first epoch (the sampling weights): tiny on CPU
        mm = [s["metrics"] for s in steps]
        assert all(m["mismatch/staleness"] == 0 and 0 < m["mismatch/tokens"] and m["mismatch/abs_diff_mean"] < 1e-3
                   for m in mm), mm
        print(f"ppo-kl beta {beta}: first-minibatch mismatch mean |diff| "
              f"{[round(m['mismatch/abs_diff_mean'], 9) for m in mm]}, tokens {[m['mismatch/tokens'] for m in mm]}")
        first = sorted((d / "step_000").glob("rollout_0[0-3].json"))
        measured[beta] = _kl_from_start(env, ck, res["final_checkpoint"], first)
    print(f"ppo-kl: sum of the per-step KL the runs report {kls}; KL(start || final) measured {measured}")
    assert kls["0"] > 0 and measured["0"] > 0, (kls, measured)  # unpenalised, the policy moves away from its start
    # The controlled comparison: KL(start || final) on the same rollouts. The KL the runs report is each step's
    # own batch, sampled by a policy that differs between the runs, so it is not compared (at seed 3 it read
    # 0.68 at beta 0 and 0.80 at beta 4 while the measured KL was 0.121 vs 0.040; at beta 0.5 the measured
    # ones were within 1 % at seed 4: too weak a penalty for 3 steps to show).
    assert measured["4"] < 0.5 * measured["0"], measured
    assert refs == {"0": {"model_path": ck}, "4": {"model_path": ck}}, refs


def test_grpo_with_mini_swe_agent_learns_from_its_own_samples(running_module):
    """Issue 32 item 4 on the embedded default: `run.sh sft --agent mini-swe-agent` (the gold trajectories are the
    harness's own turns: one bash call that applies the fix and submits, captured token-exactly through the
    ModelService) and then `run.sh grpo --agent mini-swe-agent` from it, two steps: the unmodified harness in each
    sandbox, every turn drawn by the step's sampler (no scripted or forced policy: rl_loop.refuse_unsampled and each
    turn's sampled_by), rewards the model earned, groups with variance, transitions trained, every rollout graded
    and captured token-exactly. (A forced policy in this loop is refused:
    tests/modelservice/test_black_box_rollouts.py.)"""
    tmp, env = running_module
    bb = ["--agent", "mini-swe-agent", *TASKS, "--max-tokens", "128", "--max-turns", "2"]
    sft = _run(env, "sft", "--preset", "quickstart", *bb, "--num-steps", "60", "--batch-size", "8", "--eval-every", "0",
               "--seed", "0")
    sres = _json(sft / "results" / "sft" / "result.json")
    assert sres["config"]["agent"] == "mini-swe-agent", sres["config"]
    assert min(sres["gold_p_final"].values()) > 0.02, sres["gold_p_final"]
    init = sres["final_checkpoint"]
    run = _run(env, "grpo", "--preset", "quickstart", *bb, "--num-steps", "2", "--group-size", "4",
               "--groups-per-step", "2", "--init-from", init, "--seed", "0")
    res = _json(run / "results" / "grpo" / "result.json")
    assert res["init_from"] == init and res["config"]["agent"] == "mini-swe-agent" and len(res["steps"]) == 2
    for s in res["steps"]:
        assert s["n_rollouts"] == 8 and s["failures"]["infra"] == 0 and s["failures"]["retries"] == 0, s["failures"]
    returns = [r for s in res["steps"] for g in s["group_returns"] for r in g]
    assert 0 < sum(returns) < len(returns), returns                       # the model's own samples: some solve
    assert sum(s["train_transitions"] for s in res["steps"]) > 0, [s["group_returns"] for s in res["steps"]]
    rollouts = sorted(run.glob("step_*/rollout_*.json"))
    assert len(rollouts) == 16
    for f in rollouts:
        t = Trajectory.from_json(_json(f)["trajectory"])
        assert t.turns and {x.sampled_by for x in t.turns} == {"sampler"}, [x.sampled_by for x in t.turns]
        # a new segment where mini-swe-agent dropped a turn without a valid call (a FormatError rewrites the prompt)
        assert t.segments and t.reward in (0.0, 1.0) and not t.verifier.get("error"), t.summary()
        assert sum(s.n_sampled for s in t.segments) == sum(len(x.sampled_tokens) for x in t.turns)   # token-exact
        seg = t.segments[t.turns[0].segment]
        assert seg.tokens[t.turns[0].prompt_len:][:len(t.turns[0].sampled_tokens)] == t.turns[0].sampled_tokens
    assert not list((REPO / "state" / "modelservice" / "rollouts").glob("*/model.sock"))   # the service stopped

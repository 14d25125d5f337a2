"""--max-steps-off-policy K (issue 19, item 1): from a short SFT warm start (nonzero rewards), GRPO with K=1
samples the next step's batch while the current one trains, trains every step (nonzero transitions, the
weights move), moves probability towards the rewarded rollouts, and never trains on a group sampled more
than K optimizer steps before the step that uses it (asserted from the staleness step_result.json records);
its --eval-every evaluations of the held-out split land in result.json."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tinker
import yaml
from safetensors.numpy import load_file
from tinker import types

from cookbook.recipes import config_of
from cookbook.rl_loop import keeps_sampler, sampler_version
from helpers import read_json, run_sh

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")
TASKS = ["--task-id", "absolute", "--task-id", "clamp"]
K = 1


def _client(env):
    rt = yaml.safe_load((Path(env["LTS_CONFIG_DIR"]) / "runtime.yaml").read_text())
    return rt, tinker.ServiceClient(base_url=f"http://127.0.0.1:{rt['backend']['port']}",
                                    api_key=rt["backend"]["api_keys"][0])


def _adapter(env, path: str) -> dict:
    rt, _ = _client(env)
    model_id, kind, name = path.removeprefix("tinker://").split("/")
    ck = Path(rt["backend"]["state_dir"]) / "checkpoints" / model_id / kind / name / "adapter_model.safetensors"
    return load_file(str(ck))


def _sampled_logprob(env, path: str, rollouts: list[dict]) -> list[float]:
    """Per rollout, the mean logprob of its sampled tokens under checkpoint ``path`` (one forward pass each)."""
    _, sc = _client(env)
    tc = sc.create_training_client_from_state(path).result(timeout=120)
    out = []
    for r in rollouts:
        seg = r["trajectory"]["segments"][0]
        toks, mask = seg["tokens"], np.array(seg["sampled"][1:], dtype=bool)
        target = types.TensorData.from_numpy(np.array(toks[1:], dtype=np.int64))
        d = types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]), loss_fn_inputs={"target_tokens": target})
        lp = tc.forward([d], "cross_entropy").result(timeout=120).loss_fn_outputs[0]["logprobs"].to_numpy()
        out.append(float(lp[mask].mean()))
    return out


def test_k1_trains_and_never_uses_a_group_older_than_k(running_module):
    tmp, env = running_module
    sft = run_sh(env, "sft", "--preset", "quickstart", *TASKS, "--num-steps", "50", "--batch-size", "8",
                 "--eval-every", "0", "--seed", "0")
    warm = read_json(sft / "results" / "sft" / "result.json")["final_checkpoint"]
    run = run_sh(env, "grpo", "--preset", "quickstart", *TASKS, "--num-steps", "6", "--group-size", "4",
                 "--groups-per-step", "2", "--init-from", warm, "--seed", "3", "--learning-rate", "3e-3",
                 "--max-steps-off-policy", str(K), "--eval-every", "3")
    res = read_json(run / "results" / "grpo" / "result.json")
    steps = res["steps"]
    assert [s["step"] for s in steps] == list(range(6)) and res["config"]["max_steps_off_policy"] == K
    for s in steps:   # the staleness record, per step, also in step_result.json
        rec = read_json(run / f"step_{s['step']:03d}" / "step_result.json")
        assert rec["group_staleness"] == s["group_staleness"] and rec["sampler_version"] == s["sampler_version"]
        assert all(0 <= st <= K for st in s["group_staleness"]), (s["step"], s["group_staleness"])
        assert s["groups_stale_dropped"] == 0, s   # the sampler kept its bound: nothing sampled too early
        assert len(s["group_staleness"]) == 2 and s["step"] - s["sampler_version"] == s["group_staleness"][0]
    # the sampler/trainer mismatch (cookbook/mismatch.py) is labelled with the batch's staleness: with K >= 1 the
    # figure includes the policy lag, not numerics alone; at staleness 0 (step 0: nothing trained yet) it is tiny
    for s in steps:
        m = s["metrics"]
        if s["train_transitions"]:
            assert m["mismatch/staleness"] == s["group_staleness"][0] and m["mismatch/tokens"] > 0, m
            if m["mismatch/staleness"] == 0:
                assert m["mismatch/abs_diff_mean"] < 1e-3, m
    trained = [s["metrics"] for s in steps if s["train_transitions"]]
    print("async mismatch (staleness: mean |diff|, max |diff|, kl_sample_train_v1) per trained step: "
          + "; ".join(f"{m['mismatch/staleness']}: {m['mismatch/abs_diff_mean']:.3g}, "
                      f"{m['mismatch/abs_diff_max']:.3g}, {m['optim/kl_sample_train_v1']:.3g}" for m in trained))
    staleness = [s["group_staleness"][0] for s in steps]
    print(f"async K={K}: staleness per step {staleness}; rewards {[round(s['mean_reward'], 3) for s in steps]}")
    assert max(staleness) == K, staleness   # it did run ahead: a step trained on weights one update old
    assert sum(s["train_transitions"] for s in steps) > 0 and any(s["mean_reward"] > 0 for s in steps)
    start, final = _adapter(env, warm), _adapter(env, res["final_checkpoint"])
    moved = max(float(np.abs(final[k] - start[k]).max()) for k in final)
    assert moved > 1e-3, f"training did not move the weights ({moved})"
    # Reward proxy (6 steps of 8 rollouts are too few for a reward curve to rise reliably): the update moved
    # probability towards the rewarded rollouts: their sampled tokens' logprob rose more than the failed ones'.
    rollouts = [read_json(p) for p in sorted(run.glob("step_00[0-2]/rollout_*.json"))]
    good = [r for r in rollouts if r["return"] == 1.0]
    bad = [r for r in rollouts if r["return"] == 0.0]
    assert good and bad, "the warm start should give both solved and failed rollouts"
    gain = {k: float(np.mean(np.array(_sampled_logprob(env, res["final_checkpoint"], rs))
                             - np.array(_sampled_logprob(env, warm, rs)))) for k, rs in (("good", good), ("bad", bad))}
    print(f"mean sampled-token logprob change, warm start -> final: {gain}")
    assert gain["good"] > gain["bad"], gain
    # --eval-every 3: micro's 10 held-out tasks before the first step, after step 3 and after the last
    held = res["heldout"]
    assert held["split"] == "heldout" and [p["step"] for p in held["points"]] == [0, 3, 6], held
    assert all(p["n"] == 10 and 0.0 <= p["pass_rate"] <= 1.0 for p in held["points"]), held["points"]
    assert held["before"]["step"] == 0 and held["after"]["step"] == 6
    assert [s["step"] for s in steps if "heldout_pass_rate" in s] == [2, 5]


@pytest.mark.parametrize("k,every,steps,kept", [
    (1, 5, 8, [4]),             # the checkpoint after 5 steps resumes with batch 5, sampled with version 4
    (2, 5, 12, [3, 4, 8, 9]),   # ... batches 5, 6 with versions 3, 4; after 10: 8, 9
    (1, 5, 5, []),              # the last step's checkpoint resumes nothing
    (1, 1, 4, [0, 1, 2]),       # a checkpoint every step: the version before each (the start's too)
    (0, 5, 8, []),              # synchronous: no sampler runs ahead
])
def test_off_policy_keeps_the_sampler_weights_a_resume_samples_with(k, every, steps, kept):
    """Which published versions are saved as sampler weights (cookbook/rl_loop.py keeps_sampler): exactly those
    that the K batches after a --save-every checkpoint are sampled with (sampler_version). Planted: d in range(K)
    instead of 1..K -> keeps versions 5 / 5, 9, ... -> fails."""
    cfg = config_of("grpo", {"max_steps_off_policy": k, "save_every": every, "num_steps": steps})
    assert [v for v in range(steps) if keeps_sampler(cfg, v)] == kept
    needed = sorted({sampler_version(cfg, j) for s in range(every, steps, every) for j in range(s, min(s + k, steps))
                     if sampler_version(cfg, j) < s})
    assert needed == kept

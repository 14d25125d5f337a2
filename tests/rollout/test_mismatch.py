"""Issue 41 item 2: the sampler/trainer mismatch figures of an RL step (cookbook/mismatch.py) on hand-made numbers,
the same as tinker-cookbook's compute_kl_sample_train on its keys; the step's wiring (grpo's one forward_backward,
ppo's first minibatch, the async staleness label) against a recording client, and what that client is sent with
the mismatch corrections (--tis-threshold, --mask-ratio-*: tests/rollout/test_configs.py) and gspo. The real
backend's CPU float32 figures: tests/rollout/test_recipes.py (sync grpo, ppo-kl) and test_async_rl.py (K=1)."""

from __future__ import annotations

import asyncio
import json
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import tinker
from tinker import types

from cookbook.agent.agent import SAMPLED
from cookbook.data import rl_datum
from cookbook.mismatch import KEYS, mismatch_stats
from cookbook.recipes import RECIPES, config_of
from cookbook.recorder import metrics_line
from cookbook.report import mismatch_cell
from cookbook.rl_loop import Batch, RLState, train_batch
from cookbook.rollout import Failures
from services.common.trajectory import Segment, Trajectory, Turn


def _datum(sampler: list[float], mask: list[int]) -> types.Datum:
    """An RL datum as cookbook/data.py rl_datum builds it: the sampler's logprobs, 0 where not sampled."""
    q = np.asarray(sampler, dtype=np.float32) * np.asarray(mask, dtype=np.float32)
    n = len(sampler)
    return types.Datum(model_input=types.ModelInput.from_ints(list(range(1, n + 1))), loss_fn_inputs={
        "target_tokens": types.TensorData.from_numpy(np.arange(2, n + 2, dtype=np.int64)),
        "logprobs": types.TensorData.from_numpy(q),
        "advantages": types.TensorData.from_numpy(np.asarray(mask, dtype=np.float32) * 0.5)})


def _out(trainer: list[float]) -> dict:
    return {"logprobs": types.TensorData.from_numpy(np.asarray(trainer, dtype=np.float32))}


# two datums; prompt positions (mask 0) carry sampler logprob 0 and a trainer logprob that must be ignored
MASKS = [[0, 1, 1], [0, 0, 1, 1]]
SAMPLER = [[0.0, -1.0, -2.0], [0.0, 0.0, -0.5, -3.0]]
TRAINER = [[-7.0, -1.5, -2.0], [-9.0, -4.0, -0.25, -2.0]]
# diff = sampler - trainer on the sampled tokens: 0.5, 0.0, -0.25, -1.0
DIFF = np.array([0.5, 0.0, -0.25, -1.0])


def test_mismatch_stats_on_hand_made_numbers():
    datums = [_datum(s, m) for s, m in zip(SAMPLER, MASKS)]
    st = mismatch_stats(datums, [_out(t) for t in TRAINER], [np.array(m) for m in MASKS], staleness=2)
    assert set(st) == set(KEYS)
    assert st["optim/kl_sample_train_v1"] == pytest.approx(-0.75 / 4)
    assert st["optim/kl_sample_train_v2"] == pytest.approx(0.5 * (0.25 + 0 + 0.0625 + 1.0) / 4)
    assert st["optim/entropy"] == pytest.approx((1.0 + 2.0 + 0.5 + 3.0) / 4)
    assert st["mismatch/abs_diff_mean"] == pytest.approx(1.75 / 4)
    assert st["mismatch/abs_diff_max"] == pytest.approx(1.0)
    # numpy's linear percentile of |diff| = (0, .25, .5, 1): rank 0.99 * 3 = 2.97 -> 0.5 + 0.97 * 0.5
    assert st["mismatch/abs_diff_p99"] == pytest.approx(0.985)
    ratio = np.exp(-DIFF)   # exp(trainer - sampler)
    assert st["mismatch/ratio_abs_dev_mean"] == pytest.approx(float(np.abs(ratio - 1).mean()))
    assert st["mismatch/ratio_abs_dev_mean"] == pytest.approx(
        (abs(math.exp(-0.5) - 1) + 0 + abs(math.exp(0.25) - 1) + abs(math.exp(1.0) - 1)) / 4)
    assert st["mismatch/tokens"] == 4 and st["mismatch/staleness"] == 2


def test_the_cookbook_names_mean_what_tinker_cookbook_computes():
    """The same datums through tinker-cookbook's own compute_kl_sample_train (it reads a ``mask`` input)."""
    torch = pytest.importorskip("torch")
    metrics = pytest.importorskip("tinker_cookbook.rl.metrics")
    datums = []
    for s, m in zip(SAMPLER, MASKS):
        d = _datum(s, m)
        datums.append(types.Datum(model_input=d.model_input, loss_fn_inputs={
            **d.loss_fn_inputs, "mask": types.TensorData.from_numpy(np.asarray(m, dtype=np.float32))}))
    theirs = metrics.compute_kl_sample_train(datums, [torch.tensor(t) for t in TRAINER])
    ours = mismatch_stats(datums, [_out(t) for t in TRAINER], MASKS)
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v, abs=1e-7), k


def test_mismatch_stats_refuses_misaligned_inputs_and_is_empty_without_sampled_tokens():
    d = _datum(SAMPLER[0], MASKS[0])
    with pytest.raises(ValueError, match="datum 0"):   # the trainer's logprobs of another (longer) datum
        mismatch_stats([d], [_out(TRAINER[1])], [MASKS[0]])
    with pytest.raises(ValueError, match="one each"):
        mismatch_stats([d, d], [_out(TRAINER[0])], [MASKS[0], MASKS[0]])
    assert mismatch_stats([d], [_out(TRAINER[0])], [[0, 0, 0]]) == {}
    assert mismatch_stats([], [], []) == {}


def test_viewer_cell_says_when_the_figures_include_staleness():
    datums = [_datum(s, m) for s, m in zip(SAMPLER, MASKS)]
    outs = [_out(t) for t in TRAINER]
    assert mismatch_cell({"metrics": mismatch_stats(datums, outs, MASKS)}).startswith("0.4375 / 1 / -0.1875")
    assert "stale" not in mismatch_cell({"metrics": mismatch_stats(datums, outs, MASKS)})
    assert "1 step stale" in mismatch_cell({"metrics": mismatch_stats(datums, outs, MASKS, staleness=1)})
    assert mismatch_cell({"metrics": {}}) == ""


# ------------------------------------------------------------------ the step's wiring, against a recording client
class RecordingClient:
    """A training client whose forward_backward answers each datum's sampler logprobs minus ``offsets[call]`` on the
    sampled tokens (-5 elsewhere: the prompt, which the figures must leave out) and records what it was sent."""

    def __init__(self, offsets: list[float]):
        self.offsets, self.calls = offsets, []

    def forward_backward(self, datums, loss_fn, loss_fn_config):
        off = self.offsets[min(len(self.calls), len(self.offsets) - 1)]
        self.calls.append((datums, loss_fn, loss_fn_config))
        outs = []
        for d in datums:
            q, adv = d.loss_fn_inputs["logprobs"].to_numpy(), d.loss_fn_inputs["advantages"].to_numpy()
            outs.append({"logprobs": types.TensorData.from_numpy(np.where(adv != 0, q - off, -5.0).astype(np.float32))})
        return self._done(SimpleNamespace(metrics={"loss:sum": 1.0}, loss_fn_outputs=outs))

    def optim_step(self, adam):
        return self._done(SimpleNamespace(metrics={}))

    @staticmethod
    async def _done(x):
        return x


def _traj(reward: float, lps: list[float]) -> Trajectory:
    """A one-turn rollout: 3 prompt tokens, then the sampled tokens with the sampler's logprobs ``lps``."""
    seg = Segment()
    seg.extend([1, 2, 3], sampled=False)
    seg.extend(list(range(10, 10 + len(lps))), sampled=True, logprobs=lps)
    turn = Turn(index=0, segment=0, prompt_len=3, sampled_tokens=seg.tokens[3:], logprobs=lps, stop_reason="stop",
                text="", sampled_by=SAMPLED)
    return Trajectory(task_id="t", instruction="", turns=[turn], segments=[seg], reward=reward)


def _step(cfg, tc, tmp_path, version: int = 2) -> dict:   # step 2; version 2: the synchronous loop
    batch = Batch(step=2, tasks=[SimpleNamespace(name="t")], version=version, rollout_s=0.0, failures=Failures(),
                  groups=[[_traj(1.0, [-0.5, -1.0]), _traj(0.0, [-2.0, -0.25, -1.5])]])
    ctx = SimpleNamespace(rollouts=SimpleNamespace(cache_hits=0), rng=random.Random(0))
    recipe = RECIPES[cfg.MODE].recipe(cfg, ctx, tc, 0, tmp_path, {})   # its update (ppo's: minibatch epochs)
    return asyncio.run(train_batch(cfg, ctx, tc, 2, tmp_path, RLState(), batch, recipe.update))


def test_grpo_step_records_the_mismatch_of_its_own_forward_backward(tmp_path):
    tc = RecordingClient([0.001])
    rec = _step(config_of("grpo", {}), tc, tmp_path)
    (datums, loss, config), = tc.calls
    assert (loss, config) == ("importance_sampling", None)   # what the default always sent
    assert all("sequence_ratio_mask" not in d.loss_fn_inputs for d in datums)
    m = rec["metrics"]
    assert m["mismatch/tokens"] == 5 and m["mismatch/staleness"] == 0   # the sampled tokens only, not the prompt
    assert m["mismatch/abs_diff_mean"] == pytest.approx(0.001, rel=1e-3)
    assert m["optim/kl_sample_train_v1"] == pytest.approx(0.001, rel=1e-3)
    assert m["mismatch/abs_diff_max"] == pytest.approx(0.001, rel=1e-3)
    line = metrics_line(rec)   # metrics.jsonl's line of the step
    assert set(KEYS) <= set(line)
    assert json.loads((tmp_path / "step_002" / "step_result.json").read_text())["metrics"] == m
    # async: a batch sampled two steps back is labelled so
    assert _step(config_of("grpo", {"max_steps_off_policy": 2}), RecordingClient([0.1]), tmp_path, version=0)[
        "metrics"]["mismatch/staleness"] == 2


def test_gspo_datums_carry_their_sequence_mask_and_corrections_reach_the_request(tmp_path):
    tc = RecordingClient([0.0])
    _step(config_of("grpo", {"loss": "gspo", "tis_threshold": 2.0, "mask_ratio_low": 0.5}), tc, tmp_path)
    (datums, loss, config), = tc.calls
    assert (loss, config) == ("gspo", {"tis_threshold": 2.0, "mask_ratio_low": 0.5})
    for d in datums:   # gspo's sequence ratio averages over the sampled tokens
        seq = d.loss_fn_inputs["sequence_ratio_mask"].to_numpy()
        assert seq.tolist() == (d.loss_fn_inputs["advantages"].to_numpy() != 0).astype(np.float32).tolist()


def test_ppo_measures_only_its_first_minibatch_at_the_sampling_weights(tmp_path):
    """Epoch 1's first minibatch is scored before any optimizer step; later ones (offset 0.5 here) are not."""
    tc = RecordingClient([0.002, 0.5])
    rec = _step(config_of("ppo", {"ppo_epochs": 2, "minibatches": 2, "tis_threshold": 3.0}), tc, tmp_path)
    assert len(tc.calls) == 4 and all(c[1:] == ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2,
                                                        "tis_threshold": 3.0}) for c in tc.calls)
    m = rec["metrics"]
    first = tc.calls[0][0]
    assert m["mismatch/tokens"] == sum(int((d.loss_fn_inputs["advantages"].to_numpy() != 0).sum()) for d in first)
    assert m["mismatch/abs_diff_mean"] == pytest.approx(0.002, rel=1e-3) and "mismatch" not in rec


def test_the_backend_takes_every_loss_and_correction_and_agrees_with_its_sampler(backend):
    """Through the real backend (CPU float32): two samples of the step's sampler, their datums as the RL loop builds
    them, and a forward_backward per loss config the recipes can send (no optimizer step, so the weights stay the
    sampling ones): every one is accepted (gspo with its sequence_ratio_mask; the corrections as loss config keys) and
    its trainer logprobs agree with the sampler's to float32 rounding (the CPU contract)."""
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4)
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = list(range(100, 124))
    segs = []
    for seed in (1, 2):
        s = sampler.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(
            max_tokens=24, temperature=1.0, seed=seed)).result(timeout=120).sequences[0]
        seg = Segment()
        seg.extend(prompt, sampled=False)
        seg.extend(list(s.tokens), sampled=True, logprobs=list(s.logprobs))
        segs.append((seg, 1.0 if seed == 1 else -1.0))
    figures = {}
    for given in ({}, {"loss": "ppo"}, {"loss": "cispo"}, {"loss": "gspo"},
                  {"loss": "gspo", "tis_threshold": 2.0, "mask_ratio_low": 0.5, "mask_ratio_high": 2.0},
                  {"tis_threshold": 2.0, "mask_ratio_high": 1.5}):
        cfg = config_of("grpo", given)
        datums = [rl_datum(s, a, sequence_ratio_mask=cfg.loss_name == "gspo") for s, a in segs]
        out = tc.forward_backward(datums, cfg.loss_name, cfg.loss_config()).result(timeout=120)
        st = mismatch_stats(datums, out.loss_fn_outputs, [np.asarray(s.sampled[1:]) for s, _ in segs])
        assert st["mismatch/tokens"] == sum(s.n_sampled for s, _ in segs)
        assert st["mismatch/abs_diff_mean"] < 1e-3 and st["mismatch/abs_diff_max"] < 1e-2, (given, st)
        figures[json.dumps(given)] = st["mismatch/abs_diff_mean"]
    print(f"backend sampler vs trainer, mean |diff| per loss config: {figures}")

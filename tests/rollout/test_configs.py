"""Recipes as typed configs (issue 14 item 2): each mode's --help lists only its own flags, and a value comes
from the field default < the mode's defaults < the --preset entry < the command line."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from cookbook.cli import build_parser, parse
from cookbook.config import PARTS, flat
from cookbook.presets import MODE_DEFAULTS, PRESETS, SEED_DEFAULTS
from cookbook.recipes import RECIPES, config_of
from cookbook.recipes.ppo import PpoKlConfig
from cookbook.recipes.sft import SftConfig
from cookbook.train import config_key


def _help(mode: str, capsys) -> str:
    """What `run.sh MODE --help` prints."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([mode, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("mode,has,lacks", [
    ("grpo", ["--group-size", "--max-steps-off-policy", "--loss", "--eval-every", "--agent", "--shuffle-rewards"],
     ["--gate", "--balance-tasks", "--kl-beta", "--ppo-epochs", "--batch-size"]),
    ("sft", ["--gate", "--balance-tasks", "--batch-size", "--learning-rate", "--agent"],
     ["--group-size", "--kl-beta", "--max-steps-off-policy", "--loss", "--shuffle-rewards"]),
    ("ppo-kl", ["--kl-beta", "--kl-reference", "--ppo-epochs", "--clip-low"], ["--gate", "--loss", "--normalize-std"]),
    ("rollout", ["--n", "--model-path", "--agent"], ["--learning-rate", "--num-steps", "--gate", "--group-size"]),
])
def test_help_lists_only_the_modes_flags(mode, has, lacks, capsys):
    text = _help(mode, capsys)
    flags = {w.strip("[],") for w in text.split() if w.startswith(("--", "[--"))}
    assert set(has) <= flags, set(has) - flags
    assert not set(lacks) & flags, set(lacks) & flags


def test_defaults_preset_and_command_line_in_that_order():
    assert parse(["sft"]).train.learning_rate == 1e-4 and parse(["grpo"]).train.learning_rate == 3e-6
    q = parse(["grpo", "--preset", "quickstart"])
    assert (q.train.learning_rate, q.train.num_steps, q.train.lr_schedule, q.group_size, q.groups_per_step) == (
        1e-3, 90, "linear", 8, 8)
    assert q.normalize_std and q.train.reward_cache and q.common.rollout_concurrency == 64 and q.common.split == "train"
    over = parse(["grpo", "--preset", "quickstart", "--learning-rate", "3e-3", "--no-normalize-std"])
    assert over.train.learning_rate == 3e-3 and not over.normalize_std and over.train.num_steps == 90
    s = parse(["sft", "--preset", "quickstart"])
    assert isinstance(s, SftConfig) and (s.train.learning_rate, s.batch_size, s.gate_min_gold_p) == (5e-3, 16, 0.15)
    kl = parse(["ppo-kl", "--task-id", "a", "--task-id", "b"])
    assert isinstance(kl, PpoKlConfig) and kl.kl_beta == 0.05 and kl.common.task_id == ["a", "b"]
    assert kl.loss_config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}   # sent to the server's ppo
    assert parse(["grpo"]).loss_config() is None and parse(["grpo", "--max-steps-off-policy", "1"]).loss_name == "ppo"
    assert parse(["rollout"]).common.split is None   # rollout: every task unless --split
    assert flat(q)["mode"] == "grpo" and flat(q)["learning_rate"] == 1e-3 and flat(q)["agent"] == "builtin"


def test_without_a_preset_the_rl_modes_take_the_seeds_defaults():
    """The seed's quick-start lines mean what the seed does (docs/seed-mapping.md)."""
    ppo = parse(["ppo", "--learning-rate", "1e-6", "--lora-rank", "0", "--max-train-transitions", "1"])
    assert (ppo.train.num_steps, ppo.group_size, ppo.groups_per_step, ppo.ppo_epochs, ppo.minibatches,
            ppo.baseline, ppo.max_train_transitions, ppo.train.learning_rate, ppo.train.lora_rank) == (
        1, 1, 1, 1, 1, "none", 1, 1e-6, 0)
    grpo = parse(["grpo", "--num-steps", "1", "--group-size", "2", "--rollout-concurrency", "1"])
    assert (grpo.train.num_steps, grpo.group_size, grpo.groups_per_step, grpo.common.rollout_concurrency) == (
        1, 2, 1, 1)
    g = parse(["grpo"])   # the seed's cookbook defaults: 8 rollouts, all at once, lr 3e-6, std-normalised
    assert (g.group_size, g.common.rollout_concurrency, g.train.num_steps, g.train.learning_rate, g.normalize_std) == (
        8, 8, 1, 3e-6, True)
    assert parse(["ppo", "--preset", "quickstart"]).baseline == "running-mean"   # presets keep their own
    assert parse(["rollout", "--max-turns", "3", "--max-tokens", "64"]).common.max_turns == 3


def test_every_preset_and_mode_default_names_a_field():
    """A misspelt key in a preset would be ignored silently; every key must be a field of some config."""
    configs = [*(r.config for r in RECIPES.values()), *PARTS.values()]
    fields = {f.name for cls in configs for f in dataclasses.fields(cls)}
    tables = [MODE_DEFAULTS, SEED_DEFAULTS, *(p.defaults for p in PRESETS.values())]
    unknown = {k for t in tables for section in t.values() for k in section} - fields
    assert not unknown, unknown
    sections = {s for t in tables for s in t}
    assert sections <= {"all", "train", "rl", *RECIPES}, sections


def test_warm_start_key_tells_agents_apart():
    """sft -> grpo warm starts pair runs of the same configuration (cookbook/train.config_key): the built-in agent's
    SFT and GRPO share a key (and keep the one they always had), a black-box harness's SFT does not hand its
    checkpoint to the built-in agent's GRPO (seen: `grpo --preset quickstart` started from the mini-swe-agent SFT at
    reward 0)."""
    def key(mode, **given):
        return config_key("m", config_of(mode, {"preset": "quickstart", **given}))

    assert key("sft") == key("grpo") == key("grpo", agent="builtin")
    assert key("sft", agent="mini-swe-agent") == key("grpo", agent="mini-swe-agent") != key("grpo")
    rank = config_of("sft", {"preset": "quickstart"}).train.lora_rank
    old = hashlib.sha256(json.dumps(["m", config_of("sft", {"preset": "quickstart"}).common.dataset, "quickstart",
                                     rank]).encode()).hexdigest()[:12]
    assert key("grpo") == old, "the built-in agent's key changed: users' runs/.latest-sft-* pointers would be lost"


CORRECTIONS = {"tis_threshold", "mask_ratio_low", "mask_ratio_high"}


@pytest.mark.parametrize("mode,given,loss", [
    ("grpo", {}, "importance_sampling"), ("grpo", {"loss": "cispo"}, "cispo"), ("grpo", {"loss": "gspo"}, "gspo"),
    ("grpo", {"max_steps_off_policy": 1}, "ppo"), ("ppo", {}, "ppo"), ("ppo-kl", {}, "ppo")])
def test_mismatch_corrections_reach_the_loss_config_only_when_set(mode, given, loss):
    cfg = config_of(mode, given)
    assert cfg.loss_name == loss
    plain = cfg.loss_config()
    assert not CORRECTIONS & set(plain or {}), plain   # the default sends exactly what it always sent
    if mode == "grpo" and loss in ("importance_sampling", "cispo", "gspo"):
        assert plain is None, plain
    if mode != "grpo":
        assert plain == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    tis = config_of(mode, {**given, "tis_threshold": 2.0}).loss_config()
    assert tis == {**(plain or {}), "tis_threshold": 2.0}
    band = config_of(mode, {**given, "mask_ratio_low": 0.5, "mask_ratio_high": 2.0}).loss_config()
    assert band == {**(plain or {}), "mask_ratio_low": 0.5, "mask_ratio_high": 2.0}
    low = config_of(mode, {**given, "mask_ratio_low": 0.5, "tis_threshold": 0.0}).loss_config()
    assert low == {**(plain or {}), "mask_ratio_low": 0.5}


def test_mismatch_corrections_from_the_command_line_and_their_checks():
    """Issue 41: --tis-threshold, --mask-ratio-low/-high for any RL loss that takes them (gspo too)."""
    cfg = parse(["grpo", "--loss", "gspo", "--tis-threshold", "2", "--mask-ratio-low", "0.5",
                 "--mask-ratio-high", "2", "--clip-low", "0.9997", "--clip-high", "1.0004"])
    assert cfg.loss_config() == {"clip_low_threshold": 0.9997, "clip_high_threshold": 1.0004, "tis_threshold": 2.0,
                                 "mask_ratio_low": 0.5, "mask_ratio_high": 2.0}
    assert parse(["ppo", "--tis-threshold", "3"]).loss_config() == {
        "clip_low_threshold": 0.8, "clip_high_threshold": 1.2, "tis_threshold": 3.0}
    for bad in (["--tis-threshold", "-1"], ["--mask-ratio-low", "2", "--mask-ratio-high", "1.5"]):
        with pytest.raises(SystemExit):
            config_of("grpo", {k.lstrip("-").replace("-", "_"): float(v) for k, v in zip(bad[::2], bad[1::2])})

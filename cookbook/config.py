"""Typed recipe configs: one dataclass per `run.sh` mode, composed of the parts modes share.

Each field is one command-line flag (``--field-name``; its help text, choices and metavar sit in the
field's metadata), so ``run.sh MODE --help`` lists exactly that mode's config. A value is resolved as:
the field's default < ``presets.MODE_DEFAULTS`` < the ``--preset`` entry (``presets.PRESETS``) < the
command line. ``result.json``'s ``config`` is ``flat(cfg)``: every field by name, plus ``mode``.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .presets import MODE_DEFAULTS, PRESETS, RL_MODES, SEED_DEFAULTS


def flag(help_: str, default: Any = None, *, choices: list[str] | None = None, metavar: str | None = None,
         repeat: bool = False, switch: bool = False) -> Any:
    """A config field that is also a flag. ``repeat``: the flag may be given several times (a list);
    ``switch``: --x / --no-x."""
    meta = {"help": help_, "choices": choices, "metavar": metavar, "repeat": repeat, "switch": switch}
    if repeat:
        return field(default_factory=lambda: list(default or []), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Common:
    """Every mode: which tasks, where the run goes, the sandboxes, sampling."""

    dataset: str = flag("dataset: a name under datasets/ or a path (default: micro)", "micro")
    split: str | None = flag("split of the dataset (default: train for training, all for rollout)")
    task_id: list[str] = flag("run only this task (repeatable)", repeat=True)
    run_dir: str | None = flag("run directory (default: runs/<mode>-<timestamp>)")
    name: str | None = flag("results/<name>/ inside the run dir (default: the mode)")
    sandbox: str = flag("manager: isolated sandboxes (default); host: dev only, NO isolation", "manager",
                        choices=["manager", "host"])
    sandbox_backend: str | None = flag("the sandbox manager's backend (default: config/harbor.yaml sandbox.backend, "
                                       "else local); docker runs public Harbor tasks (repo inside their image) in "
                                       "containers", choices=["local", "docker"])
    agent_network: str = flag("the agent sandbox's network: none (default: none during RL, whatever task.toml "
                              "says; the override is logged) or task (follow [agent] network_mode; docker "
                              "backend; docs/sandbox.md \"Network per phase\")", "none", choices=["none", "task"])
    preset: str | None = flag("settings for the embedded tiny default (cookbook/presets.py)", choices=sorted(PRESETS))
    seed: int = flag("seed of the run's rng and sampling streams (default 0)", 0)
    temperature: float = flag("sampling temperature (default 1.0)", 1.0)
    max_turns: int | None = flag("model calls per episode (default: config/harbor.yaml agent.budgets.max_turns, 32; "
                                 "a preset's own)", metavar="N")
    max_tokens: int | None = flag("sampled tokens per model call (default: config/harbor.yaml agent.budgets."
                                  "max_output_tokens, 8192; a preset's own)", metavar="N")
    rollout_concurrency: int = flag("sandboxes at once (default 16; RL without a preset: group size x groups per "
                                    "step; 64 with a preset, whose sandboxes are tiny)", 16)
    no_services: bool = flag("do not start the backend / sandbox manager", False, switch=False)


@dataclass
class Training:
    """The optimiser, checkpoints and logging of every training mode."""

    learning_rate: float = flag("Adam learning rate (default 1e-4 sft, 1e-5 RL; quickstart 5e-3 / 1e-3)", 1e-5)
    lr_schedule: str = flag("learning-rate schedule over --num-steps (default constant; linear for RL with "
                            "--preset quickstart)", "constant", choices=["constant", "linear", "cosine"])
    lora_rank: int = flag("LoRA rank; 0 = full fine-tuning (default 16)", 16)
    num_steps: int = flag("optimizer steps (default 100 sft, 20 RL; quickstart 200 / 60)", 20)
    save_state: str | None = flag("save the final training state under this name (checkpoint.json)")
    save_every: int = flag("save a resumable checkpoint every N steps (--resume continues from the last one)", 5)
    init_from: str | None = flag("tinker:// checkpoint to start from, or 'none' (default: the base model; with "
                                 "--preset, the latest sft of that preset and config, printed)")
    resume: str | None = flag("continue a killed run from its last checkpoint", metavar="RUN_DIR")
    reward_cache: bool = flag("reuse the verifier's result for an identical final workspace (default: on with "
                              "--preset quickstart, whose agent has no bash tool)", False, switch=True)
    log_to: list[str] = flag("also log the metrics.jsonl keys to TensorBoard (RUN_DIR/tensorboard) or an offline "
                             "W&B run (RUN_DIR/wandb); repeatable", repeat=True, choices=["tensorboard", "wandb"])


AGENT_HELP = ("builtin: cookbook's SWE agent (default); mini-swe-agent: the unmodified harness in each sandbox, "
              "its model calls through the ModelService (docs/modelservice.md)")


@dataclass
class RolloutConfig:
    MODE: ClassVar[str] = "rollout"
    common: Common = field(default_factory=Common)
    agent: str = flag(AGENT_HELP, "builtin", choices=["builtin", "mini-swe-agent"])
    n: int = flag("attempts per task", 1)
    model_path: str | None = flag("tinker:// sampler/training checkpoint to sample from (default: base model)")


@dataclass
class SftConfig:
    """sft: cross-entropy on gold trajectories, stopped by the pass-rate gate."""

    MODE: ClassVar[str] = "sft"
    common: Common = field(default_factory=Common)
    train: Training = field(default_factory=Training)
    agent: str = flag(AGENT_HELP + "; with mini-swe-agent the gold trajectories are its own turns (one bash call "
                      "that applies the fix and submits), captured token-exactly", "builtin",
                      choices=["builtin", "mini-swe-agent"])
    batch_size: int = flag("datums per step (default 32; 16 with --preset quickstart)", 32)
    gate: float = flag("stop once the sampled pass rate reaches this", 0.3)
    gate_coverage: float = flag("and once this fraction of the evaluated tasks was solved at least once (RL gets no "
                                "gradient from a task it never solves; default 0)", 0.0)
    gate_min_gold_p: float = flag("and once every task's gold trajectory has at least this chance to be sampled at "
                                  "T=1 (exp(-its NLL), one forward pass; default 0.15 with --preset quickstart, "
                                  "else 0)", 0.0, metavar="P")
    balance_tasks: float = flag("weight each gold datum's loss by (its NLL / the batch mean) ** POWER, so hard tasks "
                                "catch up with easy ones (0 = plain SFT; default 1 with --preset quickstart, else 0)",
                                0.0, metavar="POWER")
    eval_every: int = flag("check the pass rate every N steps (default 10; 2 with --preset quickstart)", 10)
    eval_from: int = flag("first step to check the pass rate at (default 10; 40 with --preset quickstart)", 10)
    eval_n: int = flag("rollouts per pass-rate check (default 16; 32 with --preset quickstart)", 16)


CLIPPED_LOSSES = ("ppo", "cispo", "gspo")   # take clip_low_threshold / clip_high_threshold
CORRECTED_LOSSES = ("importance_sampling", "ppo", "cispo", "gspo")   # take tis_threshold, mask_ratio_low/high


@dataclass
class RLConfig:
    """What grpo, ppo and ppo-kl share: the rollout batch, the agent, async off-policy sampling."""

    MODE: ClassVar[str] = ""
    ADVANTAGES: ClassVar[str] = ""      # the estimator (data.ADVANTAGE_ESTIMATORS)
    common: Common = field(default_factory=Common)
    train: Training = field(default_factory=Training)
    agent: str = flag(AGENT_HELP, "builtin", choices=["builtin", "mini-swe-agent"])
    group_size: int = flag("rollouts per task and step (default 10; 8 with --preset quickstart)", 10)
    groups_per_step: int = flag("tasks per step (default 4; 8 with --preset quickstart)", 4)
    max_train_transitions: int | None = flag("cap on training datums per step")
    max_steps_off_policy: int = flag(
        "async RL: sample the next steps' groups while the current step trains, from the newest published "
        "weights; a group sampled more than K optimizer steps before the step that trains on it is dropped "
        "(0 = synchronous, default)", 0, metavar="K")
    clip_low: float | None = flag("lower clip of the importance ratio, sent as the loss config (ppo/cispo/gspo)")
    clip_high: float | None = flag("upper clip of the importance ratio, sent as the loss config (ppo/cispo/gspo)")
    tis_threshold: float = flag("truncated importance sampling: each token's sampler/trainer ratio "
                                "exp(trainer - sampler logprob) is capped at C in the loss (loss config "
                                "tis_threshold; 0 = off, default; docs/recipes.md \"Sampler/trainer mismatch\")",
                                0.0, metavar="C")
    mask_ratio_low: float = flag("mask (drop from the loss) tokens whose sampler/trainer ratio is below L (loss "
                                 "config mask_ratio_low; 0 = off, default)", 0.0, metavar="L")
    mask_ratio_high: float = flag("mask tokens whose sampler/trainer ratio is above H (loss config mask_ratio_high; "
                                  "0 = off, default)", 0.0, metavar="H")
    eval_every: int = flag("evaluate on --eval-split before the first step, every N steps and after the last "
                           "(result.json 'heldout'; 0 = off, default)", 0, metavar="N")
    eval_split: str = flag("the dataset split --eval-every evaluates (default heldout)", "heldout")
    eval_samples: int = flag("sampled attempts per task in each --eval-every evaluation (default 1)", 1)
    shuffle_rewards: bool = flag("control run: each group's rewards are permuted (seeded) before the advantages, so "
                                 "the update carries no information about which rollout earned what (what a real "
                                 "run's held-out gain is compared against)", False)

    @property
    def loss_name(self) -> str:
        raise NotImplementedError

    def loss_config(self) -> dict[str, float] | None:
        """The loss config sent with every forward_backward (None: the loss's own defaults): the clip thresholds of
        the server's ppo/cispo/gspo loss when set, and the mismatch corrections (--tis-threshold, --mask-ratio-low/
        -high) only when set (nonzero), so a run without them sends what it always sent."""
        cfg: dict[str, float | None] = {}
        if self.loss_name in CLIPPED_LOSSES:
            cfg |= {"clip_low_threshold": self.clip_low, "clip_high_threshold": self.clip_high}
        if self.loss_name in CORRECTED_LOSSES:
            cfg |= {"tis_threshold": self.tis_threshold or None, "mask_ratio_low": self.mask_ratio_low or None,
                    "mask_ratio_high": self.mask_ratio_high or None}
        return {k: v for k, v in cfg.items() if v is not None} or None


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


@dataclass
class PpoConfig(RLConfig):
    """ppo: advantages = reward - a running-mean baseline; the server's clipped ppo loss over several
    minibatch epochs, token-mean."""

    MODE: ClassVar[str] = "ppo"
    ADVANTAGES: ClassVar[str] = "baseline"
    ppo_epochs: int = flag("epochs over each batch (default 2; 1 without a preset)", 2)
    minibatches: int = flag("minibatches per epoch (default 2; 1 without a preset)", 2)
    baseline: str = flag("advantage = return - a running mean of batch rewards (running-mean; with a preset), or "
                         "the return itself (none; without a preset, as the seed: every sampled transition trains)",
                         "running-mean", choices=["running-mean", "none"])
    clip_low: float | None = flag("lower clip of the importance ratio, sent as the ppo loss config", 0.8)
    clip_high: float | None = flag("upper clip of the importance ratio, sent as the ppo loss config", 1.2)

    @property
    def loss_name(self) -> str:
        return "ppo"

    @property
    def kl_penalty(self) -> bool:
        return False


@dataclass
class PpoKlConfig(PpoConfig):
    """ppo-kl: ppo plus a k3 KL penalty against a frozen reference on every sampled token."""

    MODE: ClassVar[str] = "ppo-kl"
    kl_beta: float = flag("KL penalty coefficient (default 0.05)", 0.05)
    kl_reference: str = flag("the frozen policy the KL penalty pulls towards: init = the run's starting policy (its "
                             "warm start; default), base = the untrained base model, or a tinker:// checkpoint",
                             "init", metavar="init|base|tinker://...")

    @property
    def kl_penalty(self) -> bool:
        return True


AnyTrain = SftConfig | GrpoConfig | PpoConfig | PpoKlConfig
AnyConfig = RolloutConfig | AnyTrain
CONFIGS: dict[str, type] = {c.MODE: c for c in (RolloutConfig, SftConfig, GrpoConfig, PpoConfig, PpoKlConfig)}
HELP = {"rollout": "evaluate the agent on tasks (no training)", "sft": "supervised warm start on gold trajectories",
        "grpo": "group-relative policy optimisation",
        "ppo": "clipped PPO (without a preset: one rollout, one update on its return, as the seed)",
        "ppo-kl": "PPO plus a k3 KL penalty against the frozen reference"}


# ------------------------------------------------------------------------------ flags <-> configs
PARTS: dict[str, type] = {"common": Common, "train": Training}   # the composed parts, by field name


def _leaves(cls: type) -> list[tuple[str | None, dataclasses.Field]]:
    """(part, field) for every flag of a config class; part is the composed part it sits in."""
    out: list[tuple[str | None, dataclasses.Field]] = []
    for f in dataclasses.fields(cls):
        out += [(f.name, g) for g in dataclasses.fields(PARTS[f.name])] if f.name in PARTS else [(None, f)]
    return out


def add_flags(ap: argparse.ArgumentParser, cls: type) -> None:
    """One flag per field; defaults are SUPPRESSed so that the namespace holds only what was given."""
    for _, f in _leaves(cls):
        m = f.metadata
        kw: dict[str, Any] = {"help": m["help"], "default": argparse.SUPPRESS, "dest": f.name}
        if m["choices"]:
            kw["choices"] = m["choices"]
        if m["metavar"]:
            kw["metavar"] = m["metavar"]
        typ = _scalar_type(f)
        if m["repeat"]:
            kw["action"] = "append"
        elif m["switch"]:
            kw["action"] = argparse.BooleanOptionalAction
        elif typ is bool:
            kw["action"] = "store_true"
        else:
            kw["type"] = typ
        ap.add_argument("--" + f.name.replace("_", "-"), **kw)


def _scalar_type(f: dataclasses.Field) -> type:
    t = str(f.type)
    for name, typ in (("bool", bool), ("int", int), ("float", float)):
        if t.startswith(name):
            return typ
    return str


def build(mode: str, given: dict[str, Any]) -> AnyConfig:
    """The config of ``mode`` from the flags given on the command line (``given``), the preset and
    the mode's defaults."""
    cls = CONFIGS[mode]
    sections = ["all", *(["train"] if mode != "rollout" else []), *(["rl"] if mode in RL_MODES else []), mode]
    values: dict[str, Any] = {}
    for table in (MODE_DEFAULTS, PRESETS[given["preset"]].defaults if given.get("preset") else SEED_DEFAULTS):
        for section in sections:
            values.update(table.get(section, {}))
    values.update(given)
    if mode in RL_MODES and "rollout_concurrency" not in values:   # the seed: a whole step's rollouts at once
        values["rollout_concurrency"] = values.get("group_size", 10) * values.get("groups_per_step", 4)
    kwargs: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {name: {} for name in PARTS if name in {f.name for f in dataclasses.fields(cls)}}
    for part, f in _leaves(cls):
        if f.name in values:
            (parts[part] if part else kwargs)[f.name] = values[f.name]
    kwargs.update({name: PARTS[name](**v) for name, v in parts.items()})
    cfg = cls(**kwargs)
    if isinstance(cfg, RLConfig):
        if cfg.max_steps_off_policy < 0:
            raise SystemExit("--max-steps-off-policy must be >= 0")
        for name in ("tis_threshold", "mask_ratio_low", "mask_ratio_high"):
            if getattr(cfg, name) < 0:
                raise SystemExit(f"--{name.replace('_', '-')} must be >= 0 (0 = off)")
        if cfg.mask_ratio_low and cfg.mask_ratio_high and cfg.mask_ratio_low > cfg.mask_ratio_high:
            raise SystemExit("--mask-ratio-low must be <= --mask-ratio-high (the band of ratios kept)")
    return cfg


def flat(cfg: AnyConfig) -> dict[str, Any]:
    """Every field by name (the composed parts flattened), plus mode: result.json's ``config``."""
    out: dict[str, Any] = {"mode": cfg.MODE}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out.update(dataclasses.asdict(v) if f.name in PARTS else {f.name: v})
    return out

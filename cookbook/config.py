"""The recipes' shared config vocabulary: the parts every recipe's typed config is composed of (``Common``,
``Training``), the base of the RL recipes' configs (``RLConfig``, the RL loop's settings), and flags <-> configs.
Each recipe's own config class sits in its module (cookbook/recipes/).

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

from .presets import MODE_DEFAULTS, PRESETS, SEED_DEFAULTS


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
    num_steps: int = flag("optimizer steps (default 100 sft, 20 RL; quickstart 200 / 90)", 20)
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

    @property
    def trains_every_trajectory(self) -> bool:
        """Train on every sampled trajectory, zero advantage too (ppo-kl: its penalty covers every sampled token;
        ppo without a baseline: the seed's one update on its return), not only those with a nonzero advantage."""
        return False

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


def build(cls: Any, given: dict[str, Any]) -> Any:
    """The config (of recipe config class ``cls``) from the flags given on the command line (``given``), the preset
    and the mode's defaults: the sections ``all``, ``train`` (a config with the Training part), ``rl`` (an
    ``RLConfig``) and the mode's own."""
    names = {f.name for f in dataclasses.fields(cls)}
    rl = issubclass(cls, RLConfig)
    sections = ["all", *(["train"] if "train" in names else []), *(["rl"] if rl else []), cls.MODE]
    values: dict[str, Any] = {}
    for table in (MODE_DEFAULTS, PRESETS[given["preset"]].defaults if given.get("preset") else SEED_DEFAULTS):
        for section in sections:
            values.update(table.get(section, {}))
    values.update(given)
    if rl and "rollout_concurrency" not in values:   # the seed: a whole step's rollouts at once
        values["rollout_concurrency"] = values.get("group_size", 10) * values.get("groups_per_step", 4)
    kwargs: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {name: {} for name in PARTS if name in names}
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


def flat(cfg: Any) -> dict[str, Any]:
    """Every field by name (the composed parts flattened), plus mode: result.json's ``config``."""
    out: dict[str, Any] = {"mode": cfg.MODE}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out.update(dataclasses.asdict(v) if f.name in PARTS else {f.name: v})
    return out

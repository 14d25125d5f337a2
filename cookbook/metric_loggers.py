"""Optional metric loggers next to ``metrics.jsonl``: TensorBoard and Weights & Biases (offline).

``--log-to tensorboard`` writes event files to ``RUN_DIR/tensorboard/`` (view: ``tensorboard --logdir RUN_DIR``);
``--log-to wandb`` writes an offline W&B run to ``RUN_DIR/wandb/`` (nothing leaves the machine; upload later
with ``wandb sync RUN_DIR/wandb/offline-run-*``). Both get every numeric key of each metrics.jsonl line,
with the same names, at the line's ``step``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

CHOICES = ("tensorboard", "wandb")


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k] = float(v)
    return out


class MetricLoggers:
    """Fan one metrics line out to the chosen loggers (none: does nothing)."""

    def __init__(self, run_dir: Path, log_to: list[str] | None, config: dict[str, Any] | None = None):
        self.tb = self.wandb_run = None
        for kind in log_to or []:
            if kind == "tensorboard":
                from tensorboardX import SummaryWriter  # noqa: PLC0415 (only when chosen: its import is slow)

                self.tb = SummaryWriter(logdir=str(run_dir / "tensorboard"))
            elif kind == "wandb":
                os.environ.setdefault("WANDB_SILENT", "true")
                import wandb  # noqa: PLC0415 (only when chosen: its import takes seconds)

                self.wandb_run = wandb.init(mode="offline", dir=str(run_dir), project="local-tinker-swe",
                                            name=run_dir.name,
                                            id=run_dir.name.replace(":", "-"), resume="allow", config=config or {},
                                            settings=wandb.Settings(console="off", x_disable_stats=True))
            else:
                raise ValueError(f"unknown logger {kind!r} (choose from {', '.join(CHOICES)})")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        vals = _scalars(metrics)
        if self.tb is not None:
            for k, v in vals.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(vals, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        if self.wandb_run is not None:
            import wandb  # noqa: PLC0415 (imported in __init__ already: a lookup, not a load)

            self.wandb_run.finish()
            self.wandb_run = None
            wandb.teardown()  # stops the wandb-core service process

"""The one writer of a run directory's files (docs/recipes.md "Result files").

``results/<name>/result.json`` (config, steps, checkpoints, final checkpoint), ``metrics.jsonl`` (one line
per step), ``step_XXX/step_result.json`` and its rollouts (``save_rollout``), ``state.json`` (what --resume needs,
written only together with a checkpoint, so that everything in it describes that checkpoint), the metric loggers
(TensorBoard, W&B), the reward curve and viewer, ``task_manifest.json``, ``checkpoint.json``, the seed's
``trajectory.txt``, a rollout run's result.json and per-rollout summaries, and ``exit-status.json``. (The services'
logs in the run directory are written by the logging set up in cookbook/runs.py.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .metric_loggers import MetricLoggers
from .report import write_reports


def write_exit_status(run_dir: Path, code: int, started: float, **extra: Any) -> None:
    (run_dir / "exit-status.json").write_text(json.dumps({
        "exit_code": code, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "duration_s": round(time.time() - started, 3), **extra},
        indent=1))


def metrics_line(rec: dict[str, Any]) -> dict[str, Any]:
    """A step record's scalars plus its ``metrics`` dict: one metrics.jsonl line."""
    return {k: v for k, v in rec.items() if not isinstance(v, (list, dict))} | rec.get("metrics", {})


def save_rollout(traj: Any, directory: Path, name: str, extra: dict[str, Any] | None = None) -> None:
    """``name``.json (summary + extra + the full trajectory) and ``name``.txt (readable)."""
    directory.mkdir(parents=True, exist_ok=True)
    summ = {**traj.summary(), **(extra or {})}
    (directory / f"{name}.json").write_text(json.dumps({**summ, "trajectory": traj.to_json()}))
    (directory / f"{name}.txt").write_text(traj.to_text())


def write_task_manifest(res_dir: Path, manifest: dict[str, Any]) -> None:
    """results/<name>/task_manifest.json (cookbook/tasks.py ``task_manifest``: the seed's layout)."""
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "task_manifest.json").write_text(json.dumps(manifest, indent=1))


def write_rollout_results(res_dir: Path, tasks: list, trajs: list, summaries: list[dict[str, Any]],
                          overall: dict[str, Any]) -> None:
    """A rollout run's files: per rollout its summary.json and trajectory (results/<name>/ itself when there is one
    rollout, else results/<name>/<task slug>-<i>/; nothing for an infrastructure failure), and result.json."""
    single = len(tasks) == 1
    for i, (task, tr, s) in enumerate(zip(tasks, trajs, summaries)):
        if tr is None:
            continue
        sub = res_dir if single else res_dir / f"{task.slug}-{i:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / "trajectory.json").write_text(json.dumps(tr.to_json()))
        (sub / "trajectory.txt").write_text(tr.to_text())
        (sub / "summary.json").write_text(json.dumps(s, indent=1))
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "result.json").write_text(json.dumps(overall, indent=1))


def write_step_result(run_dir: Path, step: int, rec: dict[str, Any]) -> None:
    sd = run_dir / f"step_{step:03d}"
    sd.mkdir(parents=True, exist_ok=True)
    (sd / "step_result.json").write_text(json.dumps(rec, indent=1))


REDRAW_S = 15.0


class RunRecorder:
    """A training run's result.json, metrics.jsonl, state.json and loggers. On --resume (a state.json
    exists) the steps logged after the last checkpoint are forgotten: they run again."""

    def __init__(self, run_dir: Path, name: str, mode: str, model: str, config: dict[str, Any]):
        self.run_dir = run_dir
        self.name = name
        self.res_dir = run_dir / "results" / name
        self.res_dir.mkdir(parents=True, exist_ok=True)
        self.state_path = run_dir / "state.json"
        self.state: dict[str, Any] = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.resuming = bool(self.state)
        path = self.res_dir / "result.json"
        if self.resuming and path.exists():
            self.result: dict[str, Any] = json.loads(path.read_text())
            done = self.state["step"]
            self.result["steps"] = [x for x in self.result["steps"] if x["step"] < done]
            self.result["checkpoints"] = [c for c in self.result["checkpoints"] if c["step"] <= done]
            with open(run_dir / "metrics.jsonl", "w") as f:
                for x in self.result["steps"]:
                    f.write(json.dumps(metrics_line(x)) + "\n")
        else:
            self.result = {"mode": mode, "model": model, "config": config, "steps": [], "checkpoints": []}
        self.loggers: MetricLoggers | None = None
        self._drawn = 0.0   # when the reward curve and viewer were last drawn

    def open_loggers(self, log_to: list[str]) -> None:
        self.loggers = MetricLoggers(self.run_dir, log_to, self.result["config"])

    def save_state(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.state_path)

    def log_step(self, rec: dict[str, Any]) -> None:
        self.result["steps"].append(rec)
        line = metrics_line(rec)
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
        if self.loggers:
            self.loggers.log(line, rec["step"])

    def checkpoint(self, step: int, path: str, **state: Any) -> None:
        """A checkpoint after ``step`` steps: listed in result.json; state.json follows in ``commit``."""
        self.result["checkpoints"].append({"step": step, "path": path})
        self.state.update(step=step, checkpoint=path, **state)

    def commit(self, saved: bool) -> None:
        """result.json first, then (with a checkpoint) state.json: a kill between the two reruns the steps."""
        self.write_result(final=saved)
        if saved:
            self.save_state()

    def write_result(self, final: bool = True) -> None:
        """result.json; the reward curve and viewer too when ``final`` (a checkpoint, the run's end) or REDRAW_S after
        they were last drawn (matplotlib takes ~0.1-0.2 s a figure on 2 cores: every step of a 3.8 s quickstart step
        would be ~4 % of the run)."""
        (self.res_dir / "result.json").write_text(json.dumps(self.result, indent=1))
        if final or time.monotonic() - self._drawn >= REDRAW_S:
            write_reports(self.run_dir, self.result, self.name)
            self._drawn = time.monotonic()

    def write_checkpoint_json(self, name: str, path: str) -> None:
        """checkpoint.json: the --save-state checkpoint's name and tinker:// path."""
        (self.run_dir / "checkpoint.json").write_text(json.dumps({"name": name, "path": path}, indent=1))

    def copy_trajectory_txt(self, source: Path) -> None:
        """results/<name>/trajectory.txt: the seed's copy of the last step's first rollout (ppo, ppo-kl)."""
        if source.exists():
            (self.res_dir / "trajectory.txt").write_text(source.read_text())

    def close(self) -> None:
        if self.loggers:
            self.loggers.close()

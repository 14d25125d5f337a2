"""Issue 6, acceptance 4: the run's viewer.html and reward_curve.png open in a browser. A headless
Chromium screenshot of the viewer must show the embedded reward curve (matplotlib's line colours)
and the step table. Skipped where Chromium is not installed (apt-get install chromium)."""

from __future__ import annotations

import json
import shutil
import subprocess

import matplotlib.image as mpimg
import numpy as np
import pytest

from cookbook.report import write_reports

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
def test_viewer_and_reward_curve_render_in_headless_chromium(tmp_path):
    run = tmp_path / "grpo-render"
    steps = [{"step": i, "mean_reward": 0.3 + 0.05 * i, "n_rollouts": 64, "time_s": 6.0,
              "failures": {"infra": 0, "agent": 0, "verifier": 0, "retries": 0}} for i in range(10)]
    (run / "step_000").mkdir(parents=True)
    (run / "step_000" / "rollout_00.json").write_text(json.dumps({"task_id": "lts-micro/absolute", "reward": 1.0,
                                                                  "turns_used": 1, "stop_reason": "max_turns"}))
    (run / "step_000" / "rollout_00.txt").write_text("# task lts-micro/absolute: reward=1.0\n")
    write_reports(run, {"mode": "grpo", "model": "local/qwen3-tiny-xs", "steps": steps}, "grpo")
    shot = tmp_path / "shot.png"
    r = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1000,1000", f"--screenshot={shot}", (run / "viewer.html").as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    img = (mpimg.imread(shot)[..., :3] * 255).round().astype(int)
    blue = np.all(np.abs(img - [31, 119, 180]) <= 12, axis=-1).sum()     # the mean-reward line (C0)
    orange = np.all(np.abs(img - [255, 127, 14]) <= 12, axis=-1).sum()   # the moving average (C1)
    dark = (img.sum(axis=-1) < 150).sum()                                # text: title, table
    assert blue > 200 and orange > 200, (blue, orange)
    assert dark > 2000, dark

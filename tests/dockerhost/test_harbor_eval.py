"""Harbor evaluates a trained checkpoint (issue 34): ``run.sh eval`` (cookbook/harbor_eval.py) runs
Harbor's own runner (harbor==0.26.0) with its off-the-shelf ``terminus-2`` agent, whose model calls go
through litellm to the backend's ``/oai/api/v1`` with ``model=tinker://…/sampler_weights/…``, on our
sandboxes (``LtsSandboxEnvironment``, docker backend); the task's own verifier scores it.

The tiny random model scores ~0: the test asserts the wiring — the agent's requests reached /oai with
the tinker:// model (backend log), the verifier ran and its reward was recorded in eval.json, no
exception, no container left. terminus-2 drives tmux in the sandbox: the base image has it
(``bash setup.sh docker``); ``LTS_TEST_TMUX_BASE=<image>`` substitutes another base with tmux.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import tinker
from tinker import types

from .conftest import BASE_IMAGE, REPO, SAMPLE, containers_of

HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


def _need(ok: bool, msg: str) -> None:
    if not ok:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {msg}")
        pytest.skip(msg)


def _has_tmux(client, image: str) -> bool:
    try:
        client.containers.run(image, "tmux -V", network_mode="none", remove=True)
        return True
    except Exception:  # noqa: BLE001
        return False


def test_harbor_terminus2_scores_a_checkpoint_through_oai(docker_admin, docker_client, backend, tmp_path):
    _need(HARBOR.exists(), "Harbor is not installed: run `bash setup.sh harbor`")
    base = os.environ.get("LTS_TEST_TMUX_BASE", BASE_IMAGE)
    _need(_has_tmux(docker_client, base), f"{base} has no tmux (terminus-2 needs it): run `sudo bash setup.sh docker`")
    task = tmp_path / "tasks" / "sample__stats-202"
    shutil.copytree(SAMPLE / "sample__stats-202", task)
    df = task / "environment" / "Dockerfile"
    df.write_text(df.read_text().replace(f"FROM {BASE_IMAGE}", f"FROM {base}", 1))

    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=0)
    toks = [5, 6, 7, 8, 9, 10]
    tc.forward_backward([types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                                     loss_fn_inputs={"target_tokens": toks[1:], "weights": [1.0] * 5})],
                        "cross_entropy").result(timeout=120)
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=120)
    ckpt = tc.save_weights_for_sampler("harbor-eval").result(timeout=120).path

    out = tmp_path / "eval"
    env = {**os.environ, "TINKER_BASE_URL": backend.url, "TINKER_API_KEY": backend.key,
           "LTS_SANDBOX_URL": docker_admin.url, "LTS_SANDBOX_KEY": docker_admin.key}
    r = subprocess.run([sys.executable, "-m", "cookbook.harbor_eval", ckpt, "--tasks", str(task.parent),
                        "--max-turns", "2", "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900)
    log = (out / "harbor.log").read_text() if (out / "harbor.log").exists() else ""
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:] + log[-3000:]
    summary = json.loads((out / "eval.json").read_text())
    assert summary["model"] == ckpt and summary["n_trials"] == 1, summary
    trial = summary["trials"][0]
    assert trial["exception"] is None and trial["reward"] in (0.0, 1.0), trial
    assert trial["task"].endswith("sample__stats-202") and trial["output_tokens"] > 0, trial
    verifier = list((out / "harbor").glob("*/*/verifier/reward.txt"))
    assert len(verifier) == 1 and float(verifier[0].read_text().strip()) == trial["reward"]
    backend_log = (backend.state_dir / "backend.log").read_text()
    hits = [line for line in backend_log.splitlines() if f"/oai chat/completions model={ckpt}:" in line]
    assert len(hits) >= 1, "terminus-2's requests must reach /oai with the tinker:// model"
    assert containers_of(docker_client, docker_admin.worker) == []

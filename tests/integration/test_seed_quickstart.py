"""Issue 35: the seed's quick start (ROCK Tinker Quick Start, docs/seed-mapping.md), its command lines verbatim and
in order, on CPU with the tiny model and local sandboxes, against a built-in task and a published-layout task
copied into <task_root>/assets/harbor-tasks/<ID>; every file, field and log line the seed tells users to inspect.

    python configure.py --roll-root R --task-root T --task-id ID --model M --outer-image I --node-ip IP --rollout-only
    bash serve.sh worker / bash serve.sh admin / (the backend: serve.sh backend)
    bash run.sh rollout --task-id ID
    bash run.sh ppo --learning-rate 1e-6 --lora-rank 0 --max-train-transitions 1
    bash run.sh grpo --num-steps 1 --group-size 2 --rollout-concurrency 1

The only change to the seed's settings is the agent budget in config/harbor.yaml (the one source of truth; a
user edits it the same way): 2 turns of at most 48 tokens, so that the tiny model's episodes take seconds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from helpers import REPO, free_port, read_json, serve_sh
from services.common.procs import stop, wait_healthy

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI") != "true",
                                reason="bubblewrap missing (bash setup.sh system)")
PY = str(REPO / ".venv-control" / "bin" / "python")
PUBLISHED = "demo__demo-101"   # owner__name-NNN, as SWE-bench ids
PROGRESS = ("Results dir:", "TINKER_SERVER_JOB {", "Rollout done")
TRAINING = ("forward_backward done: {", "optim_step done: {", "Weights published to sampler")


def _configure(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "configure.py", "--out", str(tmp / "config"), "--port", str(free_port()),
                           "--admin-port", str(free_port()), "--worker-port", str(free_port()), *extra],
                          cwd=REPO, capture_output=True, text=True)


def _run(env: dict, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    r = subprocess.run(["bash", "run.sh", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"run.sh {' '.join(args)}:\n" + r.stdout[-3000:] + r.stderr[-5000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("Run directory: "))
    return Path(line.split(": ", 1)[1]), r


def _job_marker(log: str) -> dict:
    m = re.search(r"TINKER_SERVER_JOB (\{.*\})", log)
    assert m, log[-2000:]
    return json.loads(m.group(1))


@pytest.fixture()
def seed_env(tiny_model):
    tmp = Path(tempfile.mkdtemp(prefix="lts-seed-"))
    tmp.chmod(0o755)
    task_root, roll_root = tmp / "task-root", tmp / "ROLL"
    roll_root.mkdir()
    # a local Harbor dataset holding a published-layout task, fetched by the seed's own command line:
    # `prepare_sandbox.py --task ROOT --task-id ID` (--source: the dataset folder; --rock-root/--wheel recorded)
    source = tmp / "harbor-dataset"
    shutil.copytree(REPO / "datasets" / "micro" / "clamp", source / PUBLISHED)
    toml = source / PUBLISHED / "task.toml"
    toml.write_text(toml.read_text().replace('name = "lts-micro/clamp"', f'name = "demo/{PUBLISHED}"'))
    rock_root, wheel = tmp / "ROCK", tmp / "rl_rock-1.11.0-py3-none-any.whl"
    rock_root.mkdir()
    wheel.write_bytes(b"")
    py = str(REPO / ".venv-control" / "bin" / "python")
    r = subprocess.run([py, "prepare_sandbox.py", "--rock-root", str(rock_root), "--task", str(task_root),
                        "--task-id", PUBLISHED, "--source", str(source), "--wheel", str(wheel)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    dest = task_root / "assets" / "harbor-tasks" / PUBLISHED
    assert (dest / "task.toml").read_bytes() == toml.read_bytes()
    man = json.loads((task_root / "sandbox-preparation" / "manifest.json").read_text())
    assert PUBLISHED in json.dumps(man["fetched"]) and str(rock_root) in json.dumps(man), man
    try:
        yield tmp, task_root, roll_root
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_seed_quick_start_verbatim(seed_env):
    tmp, task_root, roll_root = seed_env
    cfg = tmp / "config"
    # --- configure.py with every seed flag; --rollout-only changes what it writes, and training then refuses
    r = _configure(tmp, "--roll-root", str(roll_root), "--task-root", str(task_root), "--task-id", PUBLISHED,
                   "--model", str(REPO / "models" / "qwen3-tiny-xs"), "--outer-image", "rock-outer:latest",
                   "--node-ip", "127.0.0.1", "--rollout-only")
    assert r.returncode == 0, r.stderr
    assert "note: --roll-root" in r.stdout and "note: --node-ip" in r.stdout and "note: --outer-image" in r.stdout
    harbor = yaml.safe_load((cfg / "harbor.yaml").read_text())
    assert harbor["run"]["rollout_only"] is True and harbor["tasks"] == {"root": str(task_root), "task_id": PUBLISHED}
    assert harbor["sandbox"]["image"] == "rock-outer:latest"
    assert harbor["agent"]["temperature"] == 1.0 and {k: harbor["agent"]["budgets"][k] for k in (
        "max_input_tokens", "max_output_tokens", "max_context", "max_observation_chars", "keep_last_observations",
        "max_turns")} == {"max_input_tokens": 32768, "max_output_tokens": 8192, "max_context": 65536,
                          "max_observation_chars": 12000, "keep_last_observations": 8, "max_turns": 32}
    man = read_json(cfg / "manifest.json")
    assert man["task_id"] == PUBLISHED and man["roll_root"] == str(roll_root) and man["rollout_only"] is True
    assert man["node_ip"] == "127.0.0.1" and man["outer_image"] == "rock-outer:latest"
    assert man["ports"]["modelservice"] == 28080 and set(man["ports"]) == {"admin", "backend", "worker", "modelservice"}
    assert _configure(tmp, "--task-id", PUBLISHED, "--task-root", str(task_root)).returncode == 0  # unedited: rewritten
    (cfg / "harbor.yaml").write_text((cfg / "harbor.yaml").read_text() + "# my edit\n")
    refused = _configure(tmp, "--task-id", PUBLISHED, "--task-root", str(task_root))
    assert refused.returncode == 3 and "refusing to overwrite" in refused.stderr
    bad = _configure(tmp, "--force", "--task-id", "nosuch__task-1", "--task-root", str(task_root))
    assert bad.returncode == 2 and "assets/harbor-tasks/nosuch__task-1" in bad.stderr
    r = _configure(tmp, "--force", "--roll-root", str(roll_root), "--task-root", str(task_root), "--task-id",
                   PUBLISHED, "--model", str(REPO / "models" / "qwen3-tiny-xs"), "--node-ip", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    # private state, and the tiny episode budget (the one source of truth for the agent)
    rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
    rt["backend"].update(state_dir=str(tmp / "backend"), log_file=str(tmp / "backend.log"))
    rt["engine_config"] = str(cfg / "engine.yaml")
    (cfg / "runtime.yaml").write_text(yaml.safe_dump(rt))
    adm = yaml.safe_load((cfg / "admin.yaml").read_text())
    adm["state_dir"] = str(tmp / "sandboxes")
    adm["admin"]["log_file"] = str(tmp / "admin.log")
    adm["worker"]["log_file"] = str(tmp / "worker.log")
    (cfg / "admin.yaml").write_text(yaml.safe_dump(adm))
    harbor = yaml.safe_load((cfg / "harbor.yaml").read_text())
    assert harbor["run"]["rollout_only"] is False
    harbor["agent"]["budgets"].update(max_turns=2, max_output_tokens=48)
    (cfg / "harbor.yaml").write_text(yaml.safe_dump(harbor))

    env = dict(os.environ, LTS_CONFIG_DIR=str(cfg), LTS_RUNS_DIR=str(tmp / "runs"))
    for k in ("TINKER_API_KEY", "TINKER_BASE_URL"):
        env.pop(k, None)
    procs = []
    try:
        # --- serve.sh worker: answers on its port (the seed's host rocklet). With admin.backend local (the
        # default) the admin runs sandboxes itself on the same state dir, so the worker stops before it starts.
        out = tmp / "worker.out"
        worker = subprocess.Popen(["bash", "serve.sh", "worker"], cwd=REPO, env=env, stdout=open(out, "w"),
                                  stderr=subprocess.STDOUT)
        try:
            wait_healthy(worker, f"http://127.0.0.1:{adm['worker']['port']}/health", 180, out, "worker")
        finally:
            stop(worker)
        # --- serve.sh admin / backend in the foreground (here: background processes), as the seed
        for svc, url in (("admin", f"http://127.0.0.1:{adm['admin']['port']}/health"),
                         ("backend", f"http://127.0.0.1:{rt['backend']['port']}/api/v1/healthz")):
            serve_sh(svc, url, env, tmp, 180, procs)

        # --- run.sh rollout --task-id: a built-in task, then the published one
        for tid, name in (("absolute", "lts-micro/absolute"), (PUBLISHED, f"demo/{PUBLISHED}")):
            run, _ = _run(env, "rollout", "--task-id", tid)
            res = run / "results" / "rollout"
            assert read_json(run / "exit-status.json")["exit_code"] == 0
            summ = read_json(res / "summary.json")
            for k in ("mode", "runtime_id", "runtime_type", "runtime_ready", "runtime_status", "env_id", "task_name",
                      "task_id", "dataset", "split", "bench_name", "turns_used", "reward", "episode_done",
                      "time_seconds", "sample_tokens"):
                assert k in summ, k
            assert summ["mode"] == "rollout" and summ["task_name"] == name and summ["episode_done"] is True
            assert summ["reward"] in (0.0, 1.0) and 1 <= summ["turns_used"] <= 2 and 0 < summ["sample_tokens"] <= 48
            tm = read_json(res / "task_manifest.json")
            assert tm["version"] == 1 and tm["selection"]["task_id"] == tid
            assert [t["task_name"] for t in tm["tasks"]] == [name]
            assert (res / "trajectory.txt").read_text().startswith(f"# task {name}")
            log = (run / "client.log").read_text()
            assert all(p in log for p in PROGRESS), log[-3000:]
            job = _job_marker(log)
            assert job["base_url"] == f"http://127.0.0.1:{rt['backend']['port']}" and job["platform"] == "local"
            assert job["log_dir"] == str(tmp) and job["job_id"] == run.name   # the running backend's log dir

        # --- run.sh ppo with the seed's flags: one episode of the configured task, one transition, one update
        run, out = _run(env, "ppo", "--learning-rate", "1e-6", "--lora-rank", "0", "--max-train-transitions", "1")
        res = read_json(run / "results" / "ppo" / "result.json")
        for k in ("task_name", "reward", "turns_used", "rollout_elapsed", "train_elapsed", "train_transitions",
                  "train_tokens", "train_total_transitions", "train_total_tokens", "fwdbwd_metrics", "optim_metrics",
                  "published_sampling_client"):
            assert k in res, k
        assert res["task_name"] == f"demo/{PUBLISHED}"
        assert res["train_transitions"] == 1 == res["train_total_transitions"]
        assert len(res["steps"]) == 1 and res["steps"][0]["rollouts_total"] == 1 and res["train_skipped"] is False
        assert res["fwdbwd_metrics"] and res["published_sampling_client"] and res["train_tokens"] > 0
        assert res["config"]["learning_rate"] == 1e-6 and res["config"]["lora_rank"] == 0
        assert "init_from" not in res and "warm start" not in out.stdout   # never silently from an earlier sft
        assert (run / "results" / "ppo" / "trajectory.txt").read_text().startswith(f"# task demo/{PUBLISHED}")
        log = (run / "client.log").read_text()
        assert all(p in log for p in PROGRESS + TRAINING), log[-3000:]
        assert log.count("Rollout done") == 1 and log.count("optim_step done") == 1
        assert read_json(run / "exit-status.json")["exit_code"] == 0

        # --- run.sh grpo with the seed's flags: one step, a group of 2 rollouts, one at a time
        run, _ = _run(env, "grpo", "--num-steps", "1", "--group-size", "2", "--rollout-concurrency", "1")
        res = read_json(run / "results" / "grpo" / "result.json")
        assert {k: res[k] for k in ("num_steps", "group_size", "rollout_concurrency", "temperature", "kl_beta")} == {
            "num_steps": 1, "group_size": 2, "rollout_concurrency": 1, "temperature": 1.0, "kl_beta": 0.0}
        assert [s["step_idx"] for s in res["steps"]] == [0]
        step = read_json(run / "step_000" / "step_result.json")
        for k in ("task_name", "rollouts_total", "rollouts_succeeded", "rollouts_failed", "group_returns",
                  "group_mean", "group_std", "group_advantages", "total_transitions", "rollout_elapsed",
                  "ref_logprobs_elapsed", "train_elapsed", "fwdbwd_metrics", "optim_metrics"):
            assert k in step, k
        assert step["task_name"] == f"demo/{PUBLISHED}" and step["rollouts_total"] == 2
        assert step["rollouts_succeeded"] + step["rollouts_failed"] == 2 and len(step["group_returns"][0]) == 2
        assert sorted(p.name for p in (run / "step_000").glob("rollout_*")) == [
            "rollout_00.json", "rollout_00.txt", "rollout_01.json", "rollout_01.txt"]
        log = (run / "client.log").read_text()
        assert log.count("Rollout done") == 2 and all(p in log for p in PROGRESS), log[-3000:]
        if step.get("skipped"):   # both rollouts got the same reward: no gradient, as the seed says
            assert "skipping step" in log and step["total_transitions"] == 0
        else:
            assert all(p in log for p in TRAINING) and step["total_transitions"] > 0

        # --- ppo-kl with --save-state: checkpoint.json and the reference's time
        run, _ = _run(env, "ppo-kl", "--learning-rate", "1e-6", "--lora-rank", "0", "--max-train-transitions", "1",
                      "--save-state", "seed-final")
        res = read_json(run / "results" / "ppo-kl" / "result.json")
        assert res["ref_logprobs_elapsed"] > 0 and res["train_transitions"] == 1 and res["kl_beta"] == 0.05
        ck = read_json(run / "checkpoint.json")
        assert ck["name"] == "seed-final" and re.fullmatch(r"tinker://[^/]+/weights/seed-final", ck["path"]), ck
    finally:
        for p in reversed(procs):
            stop(p)

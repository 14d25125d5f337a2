"""Run an unmodified mini-swe-agent on a task inside a sandbox, through the ModelService.

The ``mini-swe-agent`` agent kind of the rollout driver (``MiniSweAgent``; ``run.sh rollout|grpo --agent
mini-swe-agent``) serves the ModelService in the rollout process (``InProcessModelService``) and samples
each session with the rollout's policy; one run against a separately served ModelService:

    python -m cookbook.modelservice mini-swe-agent --task-id micro/clamp [--dataset datasets/micro]
        [--modelservice-url http://127.0.0.1:28080 --modelservice-key K --socket state/modelservice/sock/model.sock]
        [--out DIR] [--step-limit 4] [--max-tokens 256]

Flow: a ModelService session is opened for the rollout; the sandbox is created with the
ModelService's socket directory bound read-only at /run/lts-model (SandboxSpec.binds: no
network); inside, shim.py listens on 127.0.0.1:18990 of the sandbox's own network namespace and
forwards to the socket, and wraps ``mini`` from .venv-agent (bound read-only through the admin's
``local.runtime_paths``), configured through litellm's ``openai/`` provider with
``api_base=http://127.0.0.1:18990/s/<session>/v1``, offline (LITELLM_LOCAL_MODEL_COST_MAP,
no retries, no cost tracking). After it exits the workspace is graded (the rollout driver's grading,
or the verifier in place for the subcommand), and the session's token-exact trajectory (cookbook
Trajectory: segments, turns) gets the reward.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from services.common.budgets import Budgets
from services.common.paths import REPO_ROOT, STATE_DIR
from services.common.renderers import renderer_for
from services.common.server import SignalServer
from services.common.trajectory import Trajectory
from services.modelservice import config as mconfig
from services.modelservice import shim
from services.modelservice.app import ModelServiceState, build_app
from services.modelservice.budget import BudgetGuard, load_budgets
from services.modelservice.listeners import unix_listener
from services.modelservice.sessions import Recorder
from services.sandbox.client import SandboxManagerClient
from services.sandbox.docker_images import docker_client, task_image
from services.tasks.grading.bases import ImageRef
from services.tasks.grading.verifier import verify
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset, matches_task_id

AGENT_VENV = REPO_ROOT / ".venv-agent"
AGENT_REQUIREMENTS = REPO_ROOT / "requirements" / "agent.txt"
SOCKET_TARGET = "/run/lts-model"
SHIM_PORT = 18990
SHIM_PATH = "/tmp/lts-model-shim.py"
EXIT_TO_STOP = {"Submitted": "submitted", "LimitsExceeded": "max_turns", "TimeExceeded": "timeout",
                "RepeatedFormatError": "format_errors"}


@dataclass
class MiniRun:
    trajectory: Trajectory               # token-exact, with reward
    record: dict[str, Any]               # the ModelService session record (turn_info, stats)
    exit_code: int                       # of the agent command inside the sandbox
    output: str                          # its output (tail)
    agent_traj: dict[str, Any] = field(default_factory=dict)   # mini-swe-agent's own trajectory file
    verifier: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        s = self.trajectory.summary()
        info = self.agent_traj.get("info", {})
        s.update(agent="mini-swe-agent", agent_exit_status=info.get("exit_status"),
                 agent_api_calls=(info.get("model_stats") or {}).get("api_calls"), agent_exit_code=self.exit_code,
                 session=self.record.get("session"))
        return s


def mini_config(model_name: str, session: str, step_limit: int, max_tokens: int | None, command_timeout_s: float,
                temperature: float | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"api_base": f"http://127.0.0.1:{SHIM_PORT}/s/{session}/v1", "api_key": "in-sandbox",
                              "timeout": 600}
    if max_tokens:
        kwargs["max_tokens"] = int(max_tokens)
    if temperature is not None:
        kwargs["temperature"] = temperature
    return {"model": {"model_name": f"openai/{model_name}", "model_kwargs": kwargs, "cost_tracking": "ignore_errors"},
            "agent": {"step_limit": int(step_limit), "cost_limit": 0, "mode": "yolo", "confirm_exit": False},
            "environment": {"cwd": "/workspace", "timeout": int(command_timeout_s)}}


def agent_env() -> dict[str, str]:
    return {"MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1", "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "NO_PROXY": "*", "no_proxy": "*"}


async def _run_in_sandbox(sb, task, session_id: str, socket_name: str, *, step_limit: int, max_tokens: int | None,
                          command_timeout_s: float, timeout_s: float, agent_venv: Path, model_name: str,
                          temperature: float | None):
    """mini-swe-agent (behind the shim) on ``task`` in ``sb``, its model calls going to ``session_id``:
    (the command's result, mini-swe-agent's own trajectory file or {})."""
    await sb.write_file(SHIM_PATH, Path(shim.__file__).read_text())
    await sb.write_file("/tmp/lts-task.md", task.instruction)
    cfg = mini_config(model_name, session_id, step_limit, max_tokens, command_timeout_s, temperature)
    await sb.write_file("/tmp/lts-mini.yaml", yaml.safe_dump(cfg))
    py, mini = agent_venv / "bin" / "python", agent_venv / "bin" / "mini"
    cmd = (f"{shlex.quote(str(py))} {SHIM_PATH} --listen 127.0.0.1:{SHIM_PORT} "
           f"--socket {SOCKET_TARGET}/{socket_name} -- "
           f"{shlex.quote(str(mini))} -y --exit-immediately -c mini.yaml -c /tmp/lts-mini.yaml "
           f"-t \"$(cat /tmp/lts-task.md)\" -o /tmp/lts-mini.traj.json < /dev/null")
    res = await sb.run(cmd, timeout=timeout_s, max_output=200_000, env=agent_env())
    try:
        agent_traj = json.loads(await sb.read_file("/tmp/lts-mini.traj.json"))
    except Exception:  # noqa: BLE001  (the agent may have died before writing it)
        agent_traj = {}
    return res, agent_traj


def _finish(traj: Trajectory, res, agent_traj: dict[str, Any]) -> None:
    """The stop reason of a trajectory the harness ended (the ModelService sets it when a budget did)."""
    exit_status = (agent_traj.get("info") or {}).get("exit_status") or ""
    if not traj.stop_reason:
        traj.stop_reason = ("timeout" if res.timed_out else EXIT_TO_STOP.get(exit_status, "error"))
    traj.episode_done = not res.timed_out and bool(exit_status)
    if traj.stop_reason == "error":
        traj.error = f"mini-swe-agent: {exit_status or 'no trajectory'} (exit {res.exit_code})"


class InProcessModelService:
    """The ModelService inside the rollout process, on a Unix socket only (no TCP, no key: the session
    id is the capability). Sessions are opened in-process with the rollout's policy, so every model
    call of a black-box agent samples from the training loop's current sampling client (per-step weight
    sync). Started on first use in the running event loop; stopped by ``aclose`` (or with the loop)."""

    def __init__(self, tokenizer, budgets: Budgets, socket_path: Path):
        self.tokenizer, self.budgets, self.socket_path = tokenizer, budgets, Path(socket_path)
        self.state: Any = None
        self._server: Any = None
        self._task: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None

    async def start(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._task is not None:
                return
            recorder = Recorder(renderer_for(self.tokenizer), _NoSampler(), BudgetGuard(self.budgets))
            self.state = ModelServiceState(recorder, "local", key=None)
            listener = unix_listener(self.socket_path)
            # SignalServer leaves the signals to the recipe
            self._server = SignalServer(uvicorn.Config(build_app(self.state), log_config=None, access_log=False,
                                                  lifespan="off"))
            self._task = asyncio.create_task(self._serve(listener))
            while not self._server.started:
                if self._task.done():
                    await self._task
                    raise RuntimeError("the in-process ModelService did not start")
                await asyncio.sleep(0.01)

    async def _serve(self, listener) -> None:
        try:
            await self._server.serve(sockets=[listener])
        finally:
            listener.close()
            if self.socket_path.exists():
                self.socket_path.unlink()

    async def aclose(self) -> None:
        if self._task is not None:
            self._server.should_exit = True
            await self._task
            self._task = None


class _NoSampler:
    """Sessions of the in-process service always carry their policy."""

    async def sample(self, *a, **kw):
        raise RuntimeError("in-process ModelService session without a policy")

    compute_logprobs = sample


class MiniSweAgent:
    """The ``mini-swe-agent`` agent kind of ``cookbook.rollout.Rollouts``: an unmodified mini-swe-agent
    (.venv-agent) runs inside the rollout's sandbox; its model calls reach the in-process ModelService
    through the socket bound at /run/lts-model, which samples with the rollout's policy and records the
    token-exact trajectory the recipes train on (scored by the Rollouts' grading like the builtin agent)."""

    name = "mini-swe-agent"

    def __init__(self, service: InProcessModelService, step_limit: int | None = None, max_tokens: int | None = None,
                 agent_venv: Path = AGENT_VENV):
        b = service.budgets
        self.service = service
        self.step_limit = min(step_limit or b.max_turns, b.max_turns)
        self.max_tokens = max_tokens
        self.agent_venv = agent_venv

    @classmethod
    def create(cls, tokenizer, budgets: Budgets, socket_dir: Path | None = None, **kw: Any) -> "MiniSweAgent":
        """With its socket in a fresh directory under ``socket_dir`` (default state/modelservice/rollouts:
        under the sandbox admin's default ``local.bind_sources``)."""
        root = Path(socket_dir or STATE_DIR / "modelservice" / "rollouts")
        root.mkdir(parents=True, exist_ok=True)
        d = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        os.chmod(d, 0o755)   # the sandbox uid must traverse to the socket
        return cls(InProcessModelService(tokenizer, budgets, d / "model.sock"), **kw)

    def binds(self) -> list[dict[str, str]]:
        return [{"source": str(self.service.socket_path.parent), "target": SOCKET_TARGET}]

    async def run(self, task, sb, policy) -> Trajectory:
        await self.service.start()
        b = self.service.budgets
        state = self.service.state
        s = state.create(task_id=task.name, metadata={"agent": self.name}, policy=policy)
        t0 = time.time()
        try:
            res, agent_traj = await _run_in_sandbox(
                sb, task, s.id, self.service.socket_path.name, step_limit=self.step_limit, max_tokens=self.max_tokens,
                command_timeout_s=b.command_timeout_s, timeout_s=b.trajectory_timeout_s, agent_venv=self.agent_venv,
                model_name="local", temperature=None)
        finally:
            rec = state.close(s.id)
        traj = Trajectory.from_json(rec["trajectory"])
        _finish(traj, res, agent_traj)
        traj.timings["agent_s"] = time.time() - t0
        return traj

    async def aclose(self) -> None:
        await self.service.aclose()
        with contextlib.suppress(OSError):
            self.service.socket_path.parent.rmdir()


async def run_mini_swe_agent(task, sandboxes, modelservice_url: str, modelservice_key: str, socket_path: Path,
                             base_dir: Path, *, step_limit: int = 4, max_tokens: int | None = 256,
                             command_timeout_s: float | None = None, timeout_s: float | None = None,
                             limits: dict[str, Any] | None = None, agent_venv: Path = AGENT_VENV,
                             model_name: str = "local", temperature: float | None = None,
                             replay: list[str] | None = None) -> MiniRun:
    """One run against a separately served ModelService (``python -m cookbook.modelservice``; its own
    sampler): the ``mini-swe-agent`` subcommand. ``sandboxes``: a SandboxManagerClient. The ModelService
    at ``modelservice_url`` must listen on ``socket_path`` (under the admin's ``local.bind_sources``)."""
    b = load_budgets()
    command_timeout_s = command_timeout_s or b.command_timeout_s
    timeout_s = timeout_s or b.trajectory_timeout_s
    step_limit = min(step_limit, b.max_turns)
    t0 = time.time()
    headers = {"Authorization": f"Bearer {modelservice_key}"}
    async with httpx.AsyncClient(base_url=modelservice_url, headers=headers, timeout=60) as ms:
        body: dict[str, Any] = {"task_id": task.name, "metadata": {"agent": "mini-swe-agent"}}
        if replay is not None:
            body["replay"] = replay
        r = await ms.post("/sessions", json=body)
        r.raise_for_status()
        sid = r.json()["session_id"]
        binds = [{"source": str(Path(socket_path).parent), "target": SOCKET_TARGET}]
        if isinstance(base_dir, ImageRef):   # docker backend: the task's scrubbed image
            sb = await sandboxes.create(image=str(base_dir), limits={**(base_dir.limits or {}), **(limits or {})},
                                        binds=binds)
        else:
            sb = await sandboxes.create(base_dir=str(base_dir), limits=limits, binds=binds)
        try:
            t1 = time.time()
            res, agent_traj = await _run_in_sandbox(
                sb, task, sid, Path(socket_path).name, step_limit=step_limit, max_tokens=max_tokens,
                command_timeout_s=command_timeout_s, timeout_s=timeout_s, agent_venv=agent_venv,
                model_name=model_name, temperature=temperature)
            agent_s = time.time() - t1
            t2 = time.time()
            vr = await verify(sb, task)
            verify_s = time.time() - t2
        finally:
            await sb.close()
        rec = (await ms.delete(f"/sessions/{sid}")).json()
    traj = Trajectory.from_json(rec["trajectory"])
    _finish(traj, res, agent_traj)
    traj.reward = vr.reward
    traj.verifier = vr.to_dict()
    traj.timings.update(agent_s=agent_s, verify_s=verify_s, total_s=time.time() - t0)
    return MiniRun(traj, rec, res.exit_code, res.output[-20000:], agent_traj, vr.to_dict(),
                   {"agent_s": agent_s, "verify_s": verify_s, "total_s": time.time() - t0})


def install_agent(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m cookbook.modelservice install-agent",
                                description="Create .venv-agent with the pinned agent harness "
                                            "(requirements/agent.txt).")
    p.add_argument("--venv", default=str(AGENT_VENV))
    p.add_argument("--python", default=sys.executable, help="interpreter the venv is made from (default: this one)")
    args = p.parse_args(argv)
    venv = Path(args.venv)
    if not (venv / "bin" / "python").exists():
        base = subprocess.run([args.python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run([str(Path(base) / "bin" / "python3"), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(AGENT_REQUIREMENTS)],
                   check=True)
    probe = "import minisweagent, litellm; print(minisweagent.__version__)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe],
                         capture_output=True, text=True, env={"MSWEA_SILENT_STARTUP": "1", "PATH": "/usr/bin:/bin",
                                                              "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                                              "HOME": str(Path.home())})
    print(json.dumps({"venv": str(venv), "mini-swe-agent": out.stdout.strip() or out.stderr.strip()[-500:],
                      "ok": out.returncode == 0}))
    return out.returncode


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m cookbook.modelservice mini-swe-agent",
                                description="Run mini-swe-agent on one task in a sandbox through the ModelService.")
    p.add_argument("--task-id", required=True, help="task name (org/name) or directory name in the dataset")
    p.add_argument("--dataset", default=str(REPO_ROOT / "datasets" / "micro"))
    p.add_argument("--modelservice-url", default=None, help="default http://127.0.0.1:<modelservice.port>")
    p.add_argument("--modelservice-key", default=None)
    p.add_argument("--socket", default=None, help="the ModelService's Unix socket (default from its config)")
    p.add_argument("--sandbox-config", default=None, help="YAML with a sandbox: section (default config/harbor.yaml)")
    p.add_argument("--step-limit", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--out", default=None, help="directory for trajectory.json/.txt, summary.json, mini.traj.json")
    args = p.parse_args(argv)
    cfg = mconfig.load()
    ms = cfg.modelservice
    url = args.modelservice_url or f"http://127.0.0.1:{ms.port}"
    key = args.modelservice_key or ms.key
    sock = Path(args.socket) if args.socket else mconfig.resolve(ms.socket)
    ds = load_dataset(args.dataset)
    tasks = [t for t in ds.tasks if matches_task_id(t, args.task_id)]
    if not tasks:
        print(f"no task {args.task_id!r} in {args.dataset}", file=sys.stderr)
        return 2
    task = tasks[0]
    if task.in_image:   # public Harbor layout: the sandbox manager must run its docker backend
        img = task_image(docker_client(), task)
        env = task.config.environment
        base = ImageRef(img["image"], img["commit"], {"cpus": float(env.cpus), "memory_mb": int(env.memory_mb)})
    else:
        base = STATE_DIR / "modelservice" / "bases" / task.slug
        if not base.exists():
            build_base(task, base)

    async def go() -> MiniRun:
        async with SandboxManagerClient.from_config(args.sandbox_config) as mgr:
            return await run_mini_swe_agent(task, mgr, url, key, sock, base, step_limit=args.step_limit,
                                            max_tokens=args.max_tokens)

    run = asyncio.run(go())
    summary = run.summary()
    if args.out:
        out = Path(args.out)
        run.trajectory.save(out)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        (out / "mini.traj.json").write_text(json.dumps(run.agent_traj))
    print(json.dumps(summary, indent=1))
    return 0

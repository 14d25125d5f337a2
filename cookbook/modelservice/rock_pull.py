"""mini-swe-agent in a ROCK sandbox, its model calls served by ROCK's ModelService pull pattern.

A ROCK sandbox (a real ROCK admin, ``flavor="rock"``) takes no binds and is not assumed to reach
anything outside itself, so the Unix-socket transport of agent_runner.py cannot work there. ROCK's
own answer is its ModelService (docs: ../shared/docs/sandboxes-and-tasks.md §2.6), which we use
unchanged: inside the sandbox ``rock model-service start --type local`` listens on the sandbox's
loopback and appends each chat request the agent POSTs to ``$ROCK_MODEL_SERVICE_DATA_DIR/LLMService.log``
(index N = 1, 2, ...), then waits for a response with the same index in that file. The trainer side
(this module, in the rollout process) pulls through the sandbox API only:

    rock model-service anti-call-llm --index 0                          -> request 1 (blocks until it comes)
    rock model-service anti-call-llm --index N --response-file F        -> writes response N, then request N+1
    rock model-service watch-agent --pid P                              -> SESSION_END once the agent exits

Each request is answered by the same Recorder as the HTTP ModelService (``app.answer``: prompt
splicing, budgets, token-exact turns), sampling with the rollout's policy (the training loop's
current sampling client). ROCK's log carries no token ids; the token-exact trajectory is the
Recorder's, keyed by the rollout's session (one per sandbox). Strictly sequential, as ROCK's
ModelService is. Each pull command runs under ``timeout`` (ROCK's rocklet caps a request at 85 s)
and is repeated while the agent lives: pushing response N again is a no-op in ROCK's client.

mini-swe-agent (.venv-agent) and rl-rock (.venv-rock, for the ``rock`` CLI) must exist at the same
paths inside the sandbox image: the local ROCK (services/sandbox/rock_local) bind-mounts both
read-only; on a ROCK cluster bake them into the task images (docs/modelservice.md "ROCK sandboxes").
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import yaml

from services.common.budgets import Budgets
from services.common.paths import REPO_ROOT
from services.common.renderers import renderer_for
from services.common.sandbox_api import ExecResult
from services.common.trajectory import Trajectory
from services.modelservice.app import ModelServiceState, answer
from services.modelservice.budget import BudgetGuard
from services.modelservice.sessions import Recorder

from .agent_runner import AGENT_VENV, _finish, _NoSampler, agent_env, mini_config

ROCK_VENV = REPO_ROOT / ".venv-rock"
SESSION_END = "SESSION_END"
DATA_DIR = "/tmp/lts-rock-ms"          # ROCK_MODEL_SERVICE_DATA_DIR inside the sandbox
PULL_TIMEOUT_S = 60                    # per pull command, under the rocklet's 85 s cap
FREE_PORT = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"


class RockPullMiniSweAgent:
    """The ``mini-swe-agent`` agent kind for ROCK sandboxes (``cookbook.rollout.Rollouts(black_box=...)``):
    same contract as agent_runner.MiniSweAgent (``binds()``, ``run(task, sandbox, policy)``), transport
    ROCK's ModelService log instead of a bound socket. No listener is opened on the host."""

    name = "mini-swe-agent"

    def __init__(self, tokenizer, budgets: Budgets, step_limit: int | None = None, max_tokens: int | None = None,
                 agent_venv: Path = AGENT_VENV, rock_venv: Path = ROCK_VENV):
        self.budgets = budgets
        self.step_limit = min(step_limit or budgets.max_turns, budgets.max_turns)
        self.max_tokens = max_tokens
        self.agent_venv, self.rock_venv = Path(agent_venv).resolve(), Path(rock_venv).resolve()
        recorder = Recorder(renderer_for(tokenizer), _NoSampler(), BudgetGuard(budgets))
        self.state = ModelServiceState(recorder, "local", key=None)
        self.last_run: dict[str, Any] = {}   # pull facts + turn_info of the run that finished last (tests, logs)

    def binds(self) -> list[dict[str, str]]:
        return []   # everything the agent needs is in the image; nothing of the host is reachable

    def _env(self) -> dict[str, str]:
        return {**agent_env(), "ROCK_MODEL_SERVICE_DATA_DIR": DATA_DIR, "PYTHONWARNINGS": "ignore",
                "HOME": "/tmp/lts-agent-home"}

    async def _sh(self, sb, cmd: str, timeout: float = 30) -> ExecResult:
        return await sb.run(cmd, timeout=timeout, max_output=16 << 20, cwd="/", env=self._env())

    async def _checked(self, sb, cmd: str, what: str, timeout: float = 30) -> str:
        r = await self._sh(sb, cmd, timeout)
        if r.exit_code != 0:
            raise RuntimeError(f"ROCK sandbox {sb.sandbox_id}: {what} failed (exit {r.exit_code}): {r.output[-2000:]}")
        return r.output

    async def run(self, task, sb, policy) -> Trajectory:
        s = self.state.create(task_id=task.name, metadata={"agent": self.name, "transport": "rock-pull"},
                              policy=policy)
        t0 = time.time()
        facts: dict[str, Any] = {}
        try:
            res, agent_traj = await self._episode(task, sb, s, facts)
        finally:
            rec = self.state.close(s.id)
        self.last_run = {**facts, "turn_info": rec["turn_info"]}
        traj = Trajectory.from_json(rec["trajectory"])
        _finish(traj, res, agent_traj)
        traj.timings["agent_s"] = time.time() - t0
        return traj

    async def _episode(self, task, sb, session, facts: dict[str, Any]) -> tuple[ExecResult, dict[str, Any]]:
        rock = shlex.quote(str(self.rock_venv / "bin" / "rock"))
        py = shlex.quote(str(self.rock_venv / "bin" / "python"))
        port = int((await self._checked(sb, f"{py} -c {shlex.quote(FREE_PORT)}", "picking a port")).split()[-1])
        await self._checked(sb, f"mkdir -p {DATA_DIR} /tmp/lts-agent-home && {rock} model-service start --type local "
                                f"--host 127.0.0.1 --port {port} > {DATA_DIR}/start.log 2>&1 < /dev/null",
                            "rock model-service start", timeout=60)
        cfg = mini_config("local", "-", self.step_limit, self.max_tokens, self.budgets.command_timeout_s)
        cfg["model"]["model_kwargs"]["api_base"] = f"http://127.0.0.1:{port}/v1"
        await sb.write_file("/tmp/lts-mini.yaml", yaml.safe_dump(cfg))
        await sb.write_file("/tmp/lts-task.md", task.instruction)
        mini = shlex.quote(str(self.agent_venv / "bin" / "mini"))
        agent = (f"cd /workspace && {mini} -y --exit-immediately -c mini.yaml -c /tmp/lts-mini.yaml "
                 f"-t \"$(cat /tmp/lts-task.md)\" -o /tmp/lts-mini.traj.json; echo $? > /tmp/lts-mini.rc")
        out = await self._checked(sb, f"setsid nohup sh -c {shlex.quote(agent)} > /tmp/lts-mini.log 2>&1 "
                                      f"< /dev/null & echo $!", "starting mini-swe-agent")
        pid = int(out.split()[-1])
        await self._checked(sb, f"{rock} model-service watch-agent --pid {pid} --host 127.0.0.1 --port {port} "
                                f"> {DATA_DIR}/watch.log 2>&1 < /dev/null", "rock model-service watch-agent")
        deadline = time.monotonic() + self.budgets.trajectory_timeout_s
        index, response, timed_out, pulls = 0, None, False, 0
        while True:
            if time.monotonic() > deadline:
                timed_out = True
                await self._sh(sb, f"kill -9 -- -{pid} 2>/dev/null")
                break
            cmd = f"timeout {PULL_TIMEOUT_S} {rock} model-service anti-call-llm --index {index}"
            if response is not None:   # ROCK's CLI removes the file after reading it
                resp_file = f"{DATA_DIR}/response-{index}.json"
                await sb.write_file(resp_file, response)
                cmd += f" --response-file {resp_file}"
            r = await sb.execute(cmd, timeout=PULL_TIMEOUT_S + 15, max_output=64 << 20, cwd="/", env=self._env())
            pulls += 1
            if r.get("exit_code") == 124:   # no request yet: go on pulling while the agent lives
                if (await self._sh(sb, f"kill -0 {pid}")).exit_code != 0:
                    break
                continue
            if r.get("exit_code") != 0:
                said = (r.get("stdout", "") + r.get("stderr", ""))[-2000:]
                raise RuntimeError(f"ROCK sandbox {sb.sandbox_id}: anti-call-llm --index {index} failed "
                                   f"(exit {r.get('exit_code')}): {said}")
            request = _last_line(r.get("stdout", ""))
            if request == SESSION_END:
                break
            index += 1
            try:
                body = json.loads(request)
            except ValueError:
                body = None   # answered as a 400 by answer()
            status, reply = await answer(self.state, session, body)
            response = json.dumps(reply, ensure_ascii=False)
            if status != 200:   # ROCK returns our JSON with HTTP 200; the error object still ends the agent
                session.metadata.setdefault("errors", []).append({"index": index, "status": status})
        rc = await self._sh(sb, "cat /tmp/lts-mini.rc 2>/dev/null")
        log_tail = await self._sh(sb, "tail -c 20000 /tmp/lts-mini.log")
        requests = await self._sh(sb, f"grep -c LLM_REQUEST_START {DATA_DIR}/LLMService.log")
        facts.update(requests=int(requests.output.split()[-1]) if requests.exit_code in (0, 1) else None,
                     answered=index, pulls=pulls, port=port)
        try:
            agent_traj = json.loads(await sb.read_file("/tmp/lts-mini.traj.json"))
        except Exception:  # noqa: BLE001  (the agent may have died before writing it)
            agent_traj = {}
        code = int(rc.output.split()[-1]) if rc.exit_code == 0 and rc.output.split() else -1
        return ExecResult(exit_code=code, output=log_tail.output, timed_out=timed_out), agent_traj

    async def aclose(self) -> None:
        self.state.close_all()


def _last_line(output: str) -> str:
    """The request ROCK's CLI printed (its last stdout line; its logging goes elsewhere)."""
    lines = [x for x in output.splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""

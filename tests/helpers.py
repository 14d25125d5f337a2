"""Test helpers: start/stop project services as real subprocesses (as users run them)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from services.common.procs import stop, wait_healthy
from services.sandbox.client import SandboxManagerClient

REPO = Path(__file__).resolve().parents[1]
RUNTIME_PY = os.environ.get("LTS_RUNTIME_PYTHON", str(REPO / ".venv-runtime" / "bin" / "python"))
TINY_NAME = "local/qwen3-tiny-xs"
TINY_PATH = REPO / "models" / "qwen3-tiny-xs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_tiny_model() -> tuple[str, Path]:
    """The embedded default model (setup.sh runtime creates it; tests create it if missing)."""
    registered = REPO / "hf-home" / "hub" / "models--local--qwen3-tiny-xs"
    if not (TINY_PATH / "config.json").exists() or not registered.exists():
        subprocess.run([RUNTIME_PY, "-m", "services.models", "make-tiny", "--register"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
    return TINY_NAME, TINY_PATH


@dataclass
class BackendProc:
    state_dir: Path
    port: int = field(default_factory=free_port)
    key: str = "tml-test-key"
    model: str = TINY_NAME
    model_path: Path = TINY_PATH
    extra: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self) -> Path:
        cfg = {
            "backend": {"host": "127.0.0.1", "port": self.port, "api_keys": [self.key],
                        "state_dir": str(self.state_dir), "log_file": str(self.state_dir / "backend.log")},
            "runtime": {"device": "cpu", "dtype": "float32", "threads": 1,
                        "models": [{"name": self.model, "path": str(self.model_path), "tokenizer_id": self.model}]},
        }
        for k, v in self.extra.items():
            cfg.setdefault(k, {}).update(v)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        p = self.state_dir / "runtime.yaml"
        p.write_text(yaml.safe_dump(cfg))
        return p

    def start(self, timeout: float = 120.0) -> "BackendProc":
        cfg = self.write_config()
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
        self.proc = subprocess.Popen([RUNTIME_PY, "-m", "services.backend", "--config", str(cfg)], cwd=REPO, env=env,
                                     stdout=open(self.state_dir / "stdout.log", "ab"), stderr=subprocess.STDOUT)
        wait_healthy(self.proc, self.url + "/api/v1/healthz", timeout, self.state_dir / "stdout.log", "backend")
        return self

    def stop(self) -> None:
        stop(self.proc)

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def env(self) -> dict[str, str]:
        return {"TINKER_BASE_URL": self.url, "TINKER_API_KEY": self.key}


@dataclass
class SandboxAdminProc:
    """The sandbox manager (`serve.sh admin`) as a subprocess with its own state dir and key."""

    state_dir: Path
    port: int = field(default_factory=free_port)
    key: str = "sbx-test-key"
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "SandboxAdminProc":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cfg = {"auth": {"key": self.key},
               "admin": {"host": "127.0.0.1", "port": self.port, "log_file": str(self.state_dir / "admin.log")},
               "worker": {"name": f"t{self.port}", "log_file": str(self.state_dir / "worker.log")},
               "state_dir": str(self.state_dir / "state"),
               "base_sources": [tempfile.gettempdir(), str(REPO / "sandbox-preparation"), str(REPO / "datasets")]}
        path = self.state_dir / "admin.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", "admin", "--config", str(path)],
                                     cwd=REPO,
                                     stdout=open(self.state_dir / "stdout.log", "ab"), stderr=subprocess.STDOUT)
        wait_healthy(self.proc, self.url + "/health", timeout, self.state_dir / "stdout.log", "sandbox admin")
        return self

    def client(self):

        return SandboxManagerClient(self.url, self.key)

    def stop(self) -> None:
        stop(self.proc)


def run_sh(env: dict, *args: str, timeout: float = 600) -> Path:
    """``bash run.sh ARGS`` with ``env``; asserts success; returns the run directory it printed."""
    r = subprocess.run(["bash", "run.sh", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return Path(next(l for l in r.stdout.splitlines() if l.startswith("Run directory: ")).split(": ", 1)[1])


def read_json(p: Path):
    return json.loads(p.read_text())


class ForcedPolicy:
    """The GRPO step's policy (``rl_loop.TinkerPolicy``) replaced by teacher forcing, for the tests that check RL
    refuses turns its sampler did not sample: replies with fixed texts (then the last one again), scored by the
    step's sampling client (real logprobs of the current weights). The step makes one per step and forks one per
    rollout: fork k replays ``scripts[k % len(scripts)]``. Tests set ``scripts`` and ``tok`` (monkeypatch)."""

    scripts: list[list[str]] = []
    tok = None

    def __init__(self, sampler, stop_token_ids, temperature: float = 1.0, top_p: float = 1.0, seed=None,
                 texts: list[str] | None = None):
        self.sampler, self.texts, self.calls, self.forks = sampler, texts, 0, 0

    def fork(self, seed) -> "ForcedPolicy":
        p = type(self)(self.sampler, None, texts=self.scripts[self.forks % len(self.scripts)])
        self.forks += 1
        return p

    async def sample(self, prompt: list[int], max_tokens: int):
        from tinker import types  # noqa: PLC0415 - only the tests that use it import the SDK and the agent

        from cookbook.agent.agent import SampleOut  # noqa: PLC0415

        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        toks = (list(self.tok.encode(text, add_special_tokens=False))
                + [self.tok.convert_tokens_to_ids("<|im_end|>")])[:max_tokens]
        lps = await self.sampler.compute_logprobs_async(types.ModelInput.from_ints(prompt + toks))
        return SampleOut(toks, [float(x) for x in lps[len(prompt):]], "stop")


def serve_sh(svc: str, url: str, env: dict, out_dir: Path, timeout: float, procs: list) -> subprocess.Popen:
    """``bash serve.sh SVC`` in the background as a user's terminal would, its output in OUT_DIR/SVC.out, appended
    to ``procs`` (the caller stops them, by PID, also when this wait fails) and waited for until URL is healthy."""
    out = out_dir / f"{svc}.out"
    procs.append(subprocess.Popen(["bash", "serve.sh", svc], cwd=REPO, env=env, stdout=open(out, "w"),
                                  stderr=subprocess.STDOUT))
    wait_healthy(procs[-1], url, timeout, out, svc)
    return procs[-1]


def serve_worker_then_admin(worker_port: int, admin_port: int, env: dict, out_dir: Path, procs: list,
                            timeout: float = 180) -> None:
    """The seed's two terminals: ``bash serve.sh worker`` (on WORKER_PORT), then ``bash serve.sh admin``, each waited
    healthy (appended to ``procs``); the admin must have found the worker and run its sandboxes there (its /health
    backend ``worker`` and its log, OUT_DIR/admin.log, saying so)."""
    for svc, port in (("worker", worker_port), ("admin", admin_port)):
        serve_sh(svc, f"http://127.0.0.1:{port}/health", env, out_dir, timeout, procs)
    health = httpx.get(f"http://127.0.0.1:{admin_port}/health", timeout=10).json()["result"]
    assert health["backend"] == "worker", health
    assert "sandboxes run there" in (out_dir / "admin.log").read_text()

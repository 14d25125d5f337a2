"""python -m services.modelservice [serve] [options] — see docs/modelservice.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
from typing import Any

import uvicorn

from services.common.config import ConfigError
from services.common.logs import rate_limit_errors, setup_logging
from services.common.paths import HF_HOME
from services.common.renderers import renderer_for
from services.common.server import SignalServer

from . import config as mconfig
from .app import ModelServiceState, build_app
from .budget import BudgetGuard, load_budgets
from .config import resolve
from .listeners import tcp_listener, unix_listener
from .sampler import TinkerSampler
from .sessions import Recorder

DESCRIPTION = """OpenAI-compatible ModelService for black-box agents (e.g. mini-swe-agent) in sandboxes.

  serve (default)   serve /v1/chat/completions on 127.0.0.1:PORT (key required) and on a Unix
                    socket (bind its directory into a sandbox: no network needed); sample through
                    the tinker SDK against our backend; record every turn token-exactly per session.
  (the agent drivers, `python -m cookbook.modelservice`: serve as here, and
  mini-swe-agent    run mini-swe-agent (unmodified, from .venv-agent) on a task in a sandbox through
                    a running ModelService; print the summary (cookbook/modelservice/agent_runner.py).
  install-agent     create .venv-agent with the pinned mini-swe-agent (requirements/agent.txt).)

Config: config/modelservice.yaml (or --config) over built-in defaults; backend URL/key/model
default to config/runtime.yaml (or TINKER_BASE_URL / TINKER_API_KEY); budgets from
config/harbor.yaml agent.budgets. SIGINT/SIGTERM stop it cleanly (open sessions are saved)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.modelservice [serve]", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help="YAML config (default: config/modelservice.yaml if present)")
    p.add_argument("--host", default=None, help="TCP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="TCP port (default 28080; 0 = no TCP listener)")
    p.add_argument("--socket", default=None,
                   help="Unix socket path (default state/modelservice/sock/model.sock; '' = none)")
    p.add_argument("--key", default=None, help="key for TCP and session admin (default: env LTS_MODELSERVICE_KEY, "
                                               "config, else the backend's key)")
    p.add_argument("--backend-url", default=None, help="tinker backend URL (default from config/runtime.yaml)")
    p.add_argument("--backend-key", default=None, help="tinker backend key (default from config/runtime.yaml)")
    p.add_argument("--base-model", default=None, help="base model name served by the backend")
    p.add_argument("--model-path", default=None, help="tinker://.../sampler_weights/... to sample from instead")
    p.add_argument("--tokenizer", default=None, help="tokenizer path or HF id (default: the base model's)")
    p.add_argument("--harbor-config", default=None, help="YAML with agent.budgets (default config/harbor.yaml)")
    p.add_argument("--trajectories-dir", default=None, help="where closed sessions are saved ('' = nowhere)")
    p.add_argument("--history", choices=["splice", "render"], default=None, help="prompt construction (default splice)")
    p.add_argument("--record-requests", action="store_true", default=None,
                   help="keep every call's (normalised) messages in the session record (tests, debugging)")
    p.add_argument("--log-file", default=None, help="log file (default state/logs/modelservice.log)")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    args = parse_args(argv)
    os.environ.setdefault("HF_HOME", str(HF_HOME))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        cfg = mconfig.load(args.config)
    except ConfigError as e:   # a typo in modelservice.yaml / runtime.yaml: refused before anything starts
        print(f"error: {e}", file=sys.stderr)
        return 2
    ms, tk = cfg.modelservice, cfg.tinker
    for name, section, key in (("host", ms, "host"), ("port", ms, "port"), ("socket", ms, "socket"), ("key", ms, "key"),
                               ("backend_url", tk, "base_url"), ("backend_key", tk, "api_key"),
                               ("base_model", tk, "base_model"), ("model_path", tk, "model_path"),
                               ("tokenizer", tk, "tokenizer"), ("trajectories_dir", ms, "trajectories_dir"),
                               ("history", ms, "history"), ("record_requests", ms, "record_requests"),
                               ("log_file", ms, "log_file")):
        v = getattr(args, name)
        if v is not None:
            setattr(section, key, v)
    log = setup_logging("modelservice", mconfig.resolve(ms.log_file), args.log_level)
    rate_limit_errors()
    try:
        asyncio.run(serve(cfg, args.harbor_config))
    except Exception as e:
        log.exception("modelservice failed: %s", e)
        return 1
    return 0


async def build_state(cfg: mconfig.ModelServiceFile, harbor_config: str | None = None):
    """Sampler, tokenizer/renderer, budgets, recorder -> ModelServiceState (also used by tests)."""
    ms, tk = cfg.modelservice, cfg.tinker
    sampler: Any = TinkerSampler(tk.base_url, tk.api_key, tk.base_model, tk.model_path)
    await sampler.start()
    tok_name = tk.tokenizer
    if tok_name:
        from transformers import AutoTokenizer  # noqa: PLC0415 (after main() set the HF_* offline env)
        tok_path = resolve(tok_name)
        tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained,
                                            str(tok_path) if tok_path and tok_path.exists() else tok_name)
    else:
        tokenizer = await asyncio.to_thread(sampler.tokenizer)
    renderer = renderer_for(tokenizer)
    budgets = load_budgets(harbor_config)
    recorder = Recorder(renderer, sampler, BudgetGuard(budgets, ms.max_input_chars or None), history=ms.history,
                        temperature=ms.temperature, top_p=ms.top_p, record_requests=ms.record_requests)
    tdir = resolve(ms.trajectories_dir)
    state = ModelServiceState(recorder, sampler.model_name, ms.key, tdir, ms.max_sessions,
                              max_body_bytes=int(ms.max_body_mb * 1024 * 1024))
    return state, sampler, budgets


async def serve(cfg: mconfig.ModelServiceFile, harbor_config: str | None = None) -> None:
    log = logging.getLogger("modelservice")
    ms = cfg.modelservice
    port = ms.port or 0
    sock_path = resolve(ms.socket)
    if not port and not sock_path:
        raise ValueError("neither a TCP port nor a Unix socket is configured")
    if port and not ms.key:
        raise ValueError("a key is required when serving on TCP (modelservice.key or LTS_MODELSERVICE_KEY)")
    state, sampler, budgets = await build_state(cfg, harbor_config)
    listeners = []
    if port:
        listeners.append(tcp_listener(ms.host, port))
    if sock_path:
        listeners.append(unix_listener(sock_path))
    app = build_app(state)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        log.info("modelservice serving %s on %s (budgets %s)", state.model_name,
                 ", ".join(filter(None, [f"http://{ms.host}:{port}" if port else "",
                                         f"unix:{sock_path}" if sock_path else ""])), budgets.to_dict())
        try:
            yield
        finally:
            log.info("modelservice stopping: saving %d open session(s)", len(state.sessions))
            state.close_all()
            await sampler.close()
            if sock_path and sock_path.exists():
                sock_path.unlink()
            log.info("modelservice stopped")

    app.router.lifespan_context = lifespan
    # at stop, requests still running get shutdown_grace_s, then are cancelled (a sandbox can leave thousands of
    # connections waiting for bodies that never come); at most limit_concurrency connections are served at once
    # (more get 503 at once instead of becoming tasks)
    server = SignalServer(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                         timeout_graceful_shutdown=ms.shutdown_grace_s,
                                         limit_concurrency=ms.max_connections))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_exit)
    try:
        await server.serve(sockets=listeners)
    finally:
        for s in listeners:
            s.close()
        if sock_path and sock_path.exists() and stat.S_ISSOCK(sock_path.lstat().st_mode):
            sock_path.unlink()
    if not server.started:
        raise RuntimeError("modelservice did not start (see the log above)")


if __name__ == "__main__":
    sys.exit(main())

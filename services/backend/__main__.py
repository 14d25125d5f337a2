"""Entry point: ``python -m services.backend [--config config/runtime.yaml] [--port N]``.

Starts the Tinker-compatible backend in the foreground (``bash serve.sh backend`` wraps it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path

import uvicorn

from services.common.config import ConfigError, check_config, load_typed
from services.common.logs import setup_logging
from services.common.preflight import Refused, StateLock, check_port
from services.common.service_configs import EngineFile, RuntimeFile, RuntimeSection

from .paths import repo_path
from .preflight import check_resources


def _gb(value: float | None) -> int | None:
    """A size in GB from the config as bytes (None: unbounded)."""
    return None if value is None else int(float(value) * 2**30)


def model_dir(path: str) -> Path:
    """A model's directory: ``path`` (relative to the repo), or the HF-cache snapshot of an ``org/name`` id
    (``configure.py --model HuggingFaceTB/SmolLM2-135M-Instruct`` writes the id as the path)."""
    p = repo_path(path)
    if not p.exists() and path.count("/") == 1 and not path.startswith((".", "/")):
        from huggingface_hub import snapshot_download  # noqa: PLC0415 (only for ids)

        try:
            return Path(snapshot_download(path, local_files_only=True))
        except Exception:  # noqa: BLE001 - not in the cache: the caller reports the missing directory
            return p
    return p


def load(path: str | Path | None = None) -> RuntimeFile:
    """runtime.yaml (or ``path``) with engine.yaml (its ``engine_config``) laid over its ``runtime:`` section, key
    by key; ConfigError naming the file and key on an unknown key or a wrong type."""
    cfg = load_typed("runtime", RuntimeFile, path)
    eng_path = repo_path(cfg.engine_config) if cfg.engine_config else None
    if eng_path is not None and eng_path.exists():   # device/dtype/batching live in engine.yaml
        eng = load_typed("engine", EngineFile, eng_path).engine
        merged = {**cfg.runtime.model_dump(exclude_unset=True), **eng.model_dump(exclude_unset=True)}
        cfg.runtime = check_config(merged, RuntimeSection, f"{path or 'runtime.yaml'} + {eng_path}")
    return cfg


def ray_settings(rt: RuntimeSection) -> dict | None:
    """engine.ray as written (ray_runtime.py holds the defaults of the keys left out); None or {}: in process."""
    return rt.ray.model_dump(exclude_unset=True) if rt.ray is not None else None


def build(cfg: RuntimeFile | dict, state_dir: Path):
    """Construct store, scheduler (with its runtime) and the FastAPI app from the config."""
    # imported here, after main's preflight checks: torch/transformers take many seconds to import on a busy machine
    from .app import create_app  # noqa: PLC0415
    from .runtime import Runtime  # noqa: PLC0415
    from .scheduler import Scheduler  # noqa: PLC0415
    from .state import BackendState  # noqa: PLC0415
    from .store import Store  # noqa: PLC0415

    if isinstance(cfg, dict):
        cfg = check_config(cfg, RuntimeFile, "runtime config")
    rt = cfg.runtime
    models = [m.model_dump(exclude_none=True) | {"path": str(model_dir(m.path))} for m in rt.models]
    if not models:
        raise SystemExit("runtime.models is empty: configure at least one base model (python configure.py)")
    for m in models:
        if not Path(m["path"]).exists():
            raise SystemExit(f"model directory {m['path']} for {m['name']} does not exist (bash setup.sh runtime "
                             "creates the tiny default)")
    ckdir = state_dir / "checkpoints"
    store = Store(state_dir / "backend.sqlite3")

    runtime_cls = Runtime
    if ray_settings(rt):  # engine.ray: trainer ranks and sampler replicas as Ray actors (docs/ray.md)
        from .ray_runtime import RayRuntime  # noqa: PLC0415 (importing ray costs ~2 s of every backend's start)

        runtime_cls = partial(RayRuntime, ray_cfg=ray_settings(rt))

    def factory():
        return runtime_cls(models, ckdir, device=rt.device, dtype=rt.dtype, threads=rt.threads,
                           max_tokens_per_microbatch=rt.max_tokens_per_microbatch,
                           max_sampler_snapshots=rt.max_sampler_snapshots,
                           max_sampler_bytes=_gb(rt.max_sampler_gb), max_spill_bytes=_gb(rt.max_spill_gb),
                           max_batch_sequences=rt.max_batch_sequences,
                           sampler=rt.sampler, sampler_options=rt.sampler_options,
                           gradient_checkpointing=rt.gradient_checkpointing,
                           merge_lora_sampling=rt.merge_lora_sampling, training_kernels=rt.training_kernels)

    b = cfg.backend
    # BackendState reads the rest of backend: (its own defaults for the keys left unset)
    bcfg = b.model_dump(exclude_none=True, exclude={"api_keys"})
    bcfg["api_keys"] = [k if isinstance(k, str) else k.model_dump(exclude_unset=True) for k in b.api_keys]
    bcfg["tokenizer_ids"] = {m.name: m.tokenizer_id or m.name for m in rt.models}
    holder: dict = {}
    scheduler = Scheduler(factory, store, on_done=lambda rid: holder["state"].on_done(rid),
                          batch_window_s=b.batch_window_s, sample_round_tokens=b.sample_round_tokens,
                          batch_window_max_s=b.batch_window_max_s)
    state = BackendState(bcfg, store, scheduler, ckdir)
    holder["state"] = state
    return state, create_app(state)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.backend",
                                 description="Tinker-compatible training/sampling backend (official tinker SDK 0.38 "
                                             "drives it).")
    ap.add_argument("--config", default=None,
                    help="runtime config (default: config/runtime.yaml, else templates/runtime.yaml)")
    ap.add_argument("--host", default=None, help="bind address (default from config: 127.0.0.1)")
    ap.add_argument("--port", type=int, default=None, help="port (default from config: 19210)")
    ap.add_argument("--state-dir", default=None, help="database + checkpoints directory (default: state/backend)")
    ap.add_argument("--log-file", default=None, help="log file (default: state/logs/backend.log)")
    ap.add_argument("--api-key", action="append", default=None,
                    help="accepted API key (repeatable; default from config or $TINKER_API_KEY)")
    args = ap.parse_args(argv)

    try:
        cfg = load(args.config)
    except ConfigError as e:   # a typo in runtime.yaml / engine.yaml: refused before anything starts
        print(f"error: {e}", file=sys.stderr)
        return 2
    b = cfg.backend
    host = args.host or b.host
    port = args.port or b.port
    state_dir = repo_path(args.state_dir or b.state_dir)
    log_file = repo_path(args.log_file or b.log_file)
    env_key = [os.environ["TINKER_API_KEY"]] if os.environ.get("TINKER_API_KEY") else []
    keys = args.api_key or b.api_keys or env_key
    if not keys:
        print("error: no API key configured: set backend.api_keys in config/runtime.yaml, pass --api-key, or export "
              "TINKER_API_KEY (keys must start with 'tml-')", file=sys.stderr)
        return 2
    b.api_keys = list(keys)
    log = setup_logging("backend", log_file, b.log_level)
    log.info("starting backend on http://%s:%d (state %s, log %s)", host, port, state_dir, log_file)
    try:   # refused in seconds, before the model loads: a second backend on this state dir, a busy port
        lock = StateLock(state_dir, "backend").acquire(port)
        check_port(host, port, "backend port")
        check_resources({"device": cfg.runtime.device, "ray": ray_settings(cfg.runtime)})
    except Refused as e:
        log.error("refusing to start: %s", e.message)
        print(f"error: {e.message}", file=sys.stderr)
        return 2

    state, app = build(cfg, state_dir)
    state.scheduler.start()
    state.scheduler.ready.wait()
    if state.scheduler.startup_error:
        log.error("runtime failed to start: %s", state.scheduler.startup_error)
        return 1

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=5))
    # uvicorn re-raises the SIGTERM it handled once it has stopped: with the default action that would
    # end the process here, before the engine (and a Ray runtime's actors) is stopped below
    signal.signal(signal.SIGTERM, lambda *_: None)
    t0 = time.time()
    try:
        server.run()
    finally:
        log.info("stopping the scheduler (served %.0fs)", time.time() - t0)
        state.scheduler.stop()
        state.runtime.close()  # the Ray runtime stops its actors (and private cluster)
        state.store.close()
        lock.release()
        log.info("backend stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

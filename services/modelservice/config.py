"""ModelService configuration: ``config/modelservice.yaml`` (or --config) over the defaults below
(``ModelServiceFile``: an unknown key or a wrong type is refused at start, naming the file and the key);
the backend's URL, key and model default to config/runtime.yaml; budgets come from
config/harbor.yaml ``agent.budgets``. Relative paths are relative to the repository root."""

from __future__ import annotations

import os
from pathlib import Path

from services.common.config import ConfigModel, load_typed
from services.common.defaults import TINY_MODEL_NAME
from services.common.paths import CONFIG_DIR, REPO_ROOT, STATE_DIR
from services.common.service_configs import RuntimeFile


class ModelServiceSection(ConfigModel):
    host: str = "127.0.0.1"
    port: int | None = 28080                # 0 (or null): no TCP listener
    socket: str | None = str(STATE_DIR / "modelservice" / "sock" / "model.sock")   # "": no Unix socket
    key: str | None = None                  # env LTS_MODELSERVICE_KEY; default: the backend's key
    log_file: str = "state/logs/modelservice.log"
    trajectories_dir: str | None = str(STATE_DIR / "modelservice" / "trajectories")   # closed sessions saved here
    history: str = "splice"                 # splice | render (see sessions.py)
    temperature: float = 1.0
    top_p: float = 1.0
    max_sessions: int = 1024
    max_body_mb: float = 8                  # larger request bodies get 413 before they are read
    max_connections: int = 2048             # connections served at once; more get 503 at once
    shutdown_grace_s: float = 2             # at stop, running requests get this long, then are cancelled
    max_input_chars: int | None = None      # prompt characters checked before tokenising (None: 16 x max_input_tokens)
    record_requests: bool = False           # keep each call's messages in the session record (tests)


class TinkerSection(ConfigModel):
    """The backend (None: env TINKER_BASE_URL / TINKER_API_KEY, else config/runtime.yaml)."""

    base_url: str | None = None
    api_key: str | None = None
    base_model: str | None = None
    model_path: str | None = None
    tokenizer: str | None = None


class ModelServiceFile(ConfigModel):
    modelservice: ModelServiceSection = ModelServiceSection()
    tinker: TinkerSection = TinkerSection()


def resolve(path: str | os.PathLike | None) -> Path | None:
    if path in (None, ""):
        return None
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def load(path: str | None = None) -> ModelServiceFile:
    p = Path(path) if path else CONFIG_DIR / "modelservice.yaml"
    if path and not p.exists():
        raise FileNotFoundError(f"no config {p}")
    cfg = load_typed("modelservice", ModelServiceFile, p) if p.exists() else ModelServiceFile()
    return fill_from_runtime(cfg)


def fill_from_runtime(cfg: ModelServiceFile) -> ModelServiceFile:
    """Backend URL/key/model from env (TINKER_BASE_URL, TINKER_API_KEY) or config/runtime.yaml."""
    cfg = cfg.model_copy(deep=True)
    t = cfg.tinker
    rt = RuntimeFile()   # no runtime.yaml: its defaults (port 19210, no key, no model)
    if not (t.base_url and t.api_key and (t.base_model or t.model_path)):
        try:
            rt = load_typed("runtime", RuntimeFile)
        except FileNotFoundError:
            pass
    t.base_url = t.base_url or os.environ.get("TINKER_BASE_URL") or f"http://127.0.0.1:{rt.backend.port}"
    keys = [k if isinstance(k, str) else k.key for k in rt.backend.api_keys]
    t.api_key = t.api_key or os.environ.get("TINKER_API_KEY") or (keys[0] if keys else None)
    if not t.base_model and not t.model_path:
        t.base_model = rt.runtime.models[0].name if rt.runtime.models else TINY_MODEL_NAME
    ms = cfg.modelservice
    ms.key = os.environ.get("LTS_MODELSERVICE_KEY") or ms.key or t.api_key
    return cfg

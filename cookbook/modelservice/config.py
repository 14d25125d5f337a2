"""ModelService configuration: ``config/modelservice.yaml`` (or --config) over built-in defaults;
the backend's URL, key and model default to config/runtime.yaml; budgets come from
config/harbor.yaml ``agent.budgets``. Relative paths are relative to the repository root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from services.common.config import load_config
from services.common.paths import CONFIG_DIR, REPO_ROOT, STATE_DIR

DEFAULTS: dict[str, Any] = {
    "modelservice": {
        "host": "127.0.0.1",
        "port": 28080,                       # 0: no TCP listener
        "socket": str(STATE_DIR / "modelservice" / "sock" / "model.sock"),   # "": no Unix socket
        "key": None,                         # env LTS_MODELSERVICE_KEY; default: the backend's key
        "log_file": "state/logs/modelservice.log",
        "trajectories_dir": str(STATE_DIR / "modelservice" / "trajectories"),   # closed sessions saved here
        "history": "splice",                 # splice | render (see sessions.py)
        "temperature": 1.0,
        "top_p": 1.0,
        "max_sessions": 1024,
        "max_body_mb": 8,                    # larger request bodies get 413 before they are read
        "max_connections": 2048,             # connections served at once; more get 503 at once
        "shutdown_grace_s": 2,               # at stop, running requests get this long, then are cancelled
        "max_input_chars": None,             # prompt characters checked before tokenising (None: 16 x max_input_tokens)
        "record_requests": False,            # keep each call's messages in the session record (tests)
    },
    "tinker": {"base_url": None, "api_key": None, "base_model": None, "model_path": None, "tokenizer": None},
}


def resolve(path: str | os.PathLike | None) -> Path | None:
    if path in (None, ""):
        return None
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load(path: str | None = None) -> dict[str, Any]:
    cfg = DEFAULTS
    p = Path(path) if path else CONFIG_DIR / "modelservice.yaml"
    if path and not p.exists():
        raise FileNotFoundError(f"no config {p}")
    if p.exists():
        cfg = _merge(cfg, yaml.safe_load(p.read_text()) or {})
    return fill_from_runtime(cfg)


def fill_from_runtime(cfg: dict[str, Any]) -> dict[str, Any]:
    """Backend URL/key/model from env (TINKER_BASE_URL, TINKER_API_KEY) or config/runtime.yaml."""
    cfg = _merge(cfg, {})
    t = dict(cfg.get("tinker") or {})
    rt: dict[str, Any] = {}
    if not (t.get("base_url") and t.get("api_key") and (t.get("base_model") or t.get("model_path"))):
        try:
            rt = load_config("runtime")
        except (FileNotFoundError, ValueError):
            rt = {}
    be = rt.get("backend") or {}
    t["base_url"] = (t.get("base_url") or os.environ.get("TINKER_BASE_URL")
                     or f"http://127.0.0.1:{be.get('port', 19210)}")
    keys = be.get("api_keys") or []
    t["api_key"] = t.get("api_key") or os.environ.get("TINKER_API_KEY") or (keys[0] if keys else None)
    models = (rt.get("runtime") or {}).get("models") or []
    if not t.get("base_model") and not t.get("model_path"):
        t["base_model"] = models[0]["name"] if models else "local/qwen3-tiny-xs"
    cfg["tinker"] = t
    ms = dict(cfg["modelservice"])
    ms["key"] = os.environ.get("LTS_MODELSERVICE_KEY") or ms.get("key") or t["api_key"]
    cfg["modelservice"] = ms
    return cfg

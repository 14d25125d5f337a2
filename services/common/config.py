"""Loading the YAML configs that configure.py writes into config/ (templates/ hold defaults).

runtime.yaml, engine.yaml and harbor.yaml are checked against their typed models (``service_configs.py``) as
they are read: an unknown key or a wrong type is refused (``ConfigError``: one line naming the file and the key).
``load_typed`` returns the model itself (typed attribute access, the defaults filled in)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .config_schema import ConfigError, ConfigModel, M, check_config
from .defaults import TINY_MODEL_NAME, TINY_MODEL_PATH
from .paths import CONFIG_DIR, TEMPLATES_DIR
from .service_configs import SCHEMAS

__all__ = ["ConfigError", "ConfigModel", "check_config", "load_config", "load_typed", "read_config",
           "render_template"]

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
# Values a template gets when it is read directly (no config/ yet): the embedded default.
# configure.py renders the same placeholders with the user's choices and generated keys.
TEMPLATE_DEFAULTS = {
    "model_name": TINY_MODEL_NAME, "model_path": TINY_MODEL_PATH, "tokenizer_id": TINY_MODEL_NAME,
    "device": "cpu", "dtype": "float32", "threads": "1", "microbatch_tokens": "8192", "backend_port": "19210",
    "admin_port": "18080", "api_key": "tml-change-me", "sandbox_key": "change-me-sandbox-key",
    "sandbox_flavor": "local", "sandbox_base_url": "http://127.0.0.1:18080", "admin_backend": "local",
    "rock_cluster": "null", "rock_headers": "{}", "rollout_only": "false",
    "task_root": ".", "task_id": "null", "worker_port": "22555",
    "grad_ckpt": "false", "sampler": "auto", "sampler_options": "{}", "ray": "null",
}


def render_template(text: str, values: dict[str, str] | None = None) -> str:
    vals = {**TEMPLATE_DEFAULTS, **(values or {})}
    return PLACEHOLDER.sub(lambda m: vals.get(m.group(1), m.group(0)), text)


def read_config(name: str, path: str | Path | None = None) -> tuple[dict[str, Any], Path]:
    """(the mapping, its file): config/<name>.yaml (or ``path``), else templates/<name>.yaml rendered with the
    defaults. Not checked: ``load_config`` / ``load_typed`` check it."""
    candidates = [Path(path)] if path else [CONFIG_DIR / f"{name}.yaml", TEMPLATES_DIR / f"{name}.yaml"]
    for p in candidates:
        if p.exists():
            text = p.read_text()
            if PLACEHOLDER.search(text):
                text = render_template(text)
            data = yaml.safe_load(text) or {}
            if not isinstance(data, dict):
                raise ConfigError(f"{p}: expected a mapping at the top level")
            return data, p
    raise FileNotFoundError(f"no config {name!r}: looked in {', '.join(map(str, candidates))}; run `python "
                            "configure.py`")


def load_config(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """config/<name>.yaml (or ``path``) as written, else templates/<name>.yaml (rendered with defaults); a file
    with a typed model (runtime, engine, harbor) is checked first: ConfigError (a ValueError) on an unknown key."""
    data, p = read_config(name, path)
    if name in SCHEMAS:
        check_config(data, SCHEMAS[name], p)
    return data


def load_typed(name: str, model: type[M], path: str | Path | None = None) -> M:
    """config/<name>.yaml (or ``path``) as ``model``: defaults filled in; ConfigError naming the file and key."""
    data, p = read_config(name, path)
    return check_config(data, model, p)

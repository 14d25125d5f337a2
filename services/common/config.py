"""Loading the YAML configs that configure.py writes into config/ (templates/ hold defaults)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .paths import CONFIG_DIR, TEMPLATES_DIR

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
# Values a template gets when it is read directly (no config/ yet): the embedded default.
# configure.py renders the same placeholders with the user's choices and generated keys.
TEMPLATE_DEFAULTS = {
    "model_name": "local/qwen3-tiny-xs", "model_path": "models/qwen3-tiny-xs", "tokenizer_id": "local/qwen3-tiny-xs",
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


def load_config(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """Load config/<name>.yaml (or ``path``); fall back to templates/<name>.yaml (rendered with defaults)."""
    candidates = [Path(path)] if path else [CONFIG_DIR / f"{name}.yaml", TEMPLATES_DIR / f"{name}.yaml"]
    for p in candidates:
        if p.exists():
            text = p.read_text()
            if PLACEHOLDER.search(text):
                text = render_template(text)
            data = yaml.safe_load(text) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{p}: expected a mapping at the top level")
            return data
    raise FileNotFoundError(f"no config {name!r}: looked in {', '.join(map(str, candidates))}; run `python "
                            "configure.py`")

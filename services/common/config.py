"""Loading the YAML configs that configure.py writes into config/ (templates/ hold defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .paths import CONFIG_DIR, TEMPLATES_DIR


def load_config(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """Load config/<name>.yaml (or ``path``); fall back to templates/<name>.yaml."""
    candidates = [Path(path)] if path else [CONFIG_DIR / f"{name}.yaml", TEMPLATES_DIR / f"{name}.yaml"]
    for p in candidates:
        if p.exists():
            with open(p) as f:
                data = yaml.safe_load(f) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{p}: expected a mapping at the top level")
            return data
    raise FileNotFoundError(f"no config {name!r}: looked in {', '.join(map(str, candidates))}; run `python configure.py`")

"""The preparation manifest, ``<out>/manifest.json`` (``prepare.py`` keeps ``"tasks"``, ``sources/fetch.py``
records ``"fetched"``); see prepare.py's docstring for what an entry holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1


def load_manifest(out_dir: Path) -> dict[str, Any]:
    p = out_dir / "manifest.json"
    if p.exists():
        try:
            data = json.loads(p.read_text())
            if data.get("version") == MANIFEST_VERSION:
                return data
        except (json.JSONDecodeError, AttributeError):
            pass
    return {"version": MANIFEST_VERSION, "tasks": {}}


def save_manifest(out_dir: Path, manifest: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    p = out_dir / "manifest.json"
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp.replace(p)
    return p

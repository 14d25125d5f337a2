"""Install a local model directory into a HuggingFace hub cache, so it resolves *by name* offline.

The official ``tinker`` SDK (``TrainingClient.get_tokenizer``) and tinker-cookbook
(``tokenizer_utils.get_tokenizer``) both end in ``AutoTokenizer.from_pretrained(<model name>)``.
With ``HF_HUB_OFFLINE=1`` and ``HF_HOME`` pointing at a cache that holds

    <HF_HOME>/hub/models--<org>--<name>/refs/main            (text: <rev>)
    <HF_HOME>/hub/models--<org>--<name>/snapshots/<rev>/...  (the model directory's files)

that call resolves ``<org>/<name>`` without any network, exactly as for a model downloaded
earlier.  ``<rev>`` is a 40-hex content hash (same files -> same revision).  We register
the tiny model under ``local/...``: ``local`` is not a Hub organisation we impersonate.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from services.common.paths import HF_HOME

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
LINK_THRESHOLD_BYTES = 256 * 2**20   # "auto" mode: copy below this total size, symlink above


def hub_cache_dir(hf_home: str | Path | None = None) -> Path:
    """The hub cache that ``HF_HOME=<hf_home>`` implies (``$HF_HUB_CACHE`` wins when hf_home is None)."""
    if hf_home is not None:
        return Path(hf_home).expanduser().resolve() / "hub"
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser().resolve()

    return Path(HF_HOME).expanduser().resolve() / "hub"


def check_model_id(name: str) -> str:
    """An id the SDK and the cookbook can use: exactly ``org/name`` (one slash), HF repo-id charset."""
    if not _NAME_RE.match(name) or "--" in name or ".." in name or len(name) > 96 or name.endswith(".git"):
        raise ValueError(
            f"model id {name!r} must look like 'org/name' (one slash; letters, digits, '-', '_', '.'; "
            "no '--' or '..'): the SDK turns 'a/b/c' into the tokenizer id 'a/b' and the cookbook needs an org"
        )
    return name


def repo_dir(name: str, hf_home: str | Path | None = None) -> Path:
    return hub_cache_dir(hf_home) / ("models--" + check_model_id(name).replace("/", "--"))


def _files(src: Path) -> list[Path]:
    out = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if any(part.startswith(".") for part in rel.parts):   # .git, .cache, ...
            continue
        if p.is_file():
            out.append(p)
    return out


def content_revision(src: str | Path) -> str:
    """A 40-hex revision id derived from the files' names and contents."""
    src = Path(src)
    h = hashlib.sha1()
    for p in _files(src):
        h.update(str(p.relative_to(src)).encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def register(path: str | Path, name: str, hf_home: str | Path | None = None, mode: str = "auto") -> Path:
    """Install the model directory ``path`` as ``name`` into the hub cache; return the snapshot dir.

    mode: ``copy`` (self-contained cache), ``link`` (symlinks to the source files: for big
    checkpoints; the source must stay), or ``auto`` (copy below 256 MiB, link above).
    Idempotent; re-registering changed files moves ``refs/main`` to the new snapshot and
    removes the old snapshots of this name.
    """
    src = Path(path).expanduser().resolve()
    check_model_id(name)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    if not (src / "config.json").exists() and not (src / "tokenizer_config.json").exists():
        raise FileNotFoundError(f"{src} has neither config.json nor tokenizer_config.json: not a HF model directory")
    if mode not in ("auto", "copy", "link"):
        raise ValueError(f"mode must be auto, copy or link, not {mode!r}")
    files = _files(src)
    if mode == "auto":
        mode = "copy" if sum(p.stat().st_size for p in files) < LINK_THRESHOLD_BYTES else "link"

    rev = content_revision(src)
    rdir = repo_dir(name, hf_home)
    snap = rdir / "snapshots" / rev
    if not snap.exists():
        tmp = rdir / "snapshots" / f".tmp-{rev}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for p in files:
            dst = tmp / p.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if mode == "copy":
                shutil.copy2(p, dst)
            else:
                dst.symlink_to(p)
        try:
            os.replace(tmp, snap)
        except OSError:          # a concurrent register won the race with identical content
            shutil.rmtree(tmp, ignore_errors=True)
    (rdir / "refs").mkdir(parents=True, exist_ok=True)
    ref_tmp = rdir / "refs" / f".main.{os.getpid()}"
    ref_tmp.write_text(rev)
    os.replace(ref_tmp, rdir / "refs" / "main")
    for old in (rdir / "snapshots").iterdir():
        if old.name != rev and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    # A stale negative cache ("file does not exist") from an earlier revision must not hide files.
    shutil.rmtree(rdir / ".no_exist", ignore_errors=True)
    return snap


def registered_path(name: str, hf_home: str | Path | None = None) -> Path | None:
    """The snapshot directory ``refs/main`` points at, or None when ``name`` is not in the cache."""
    try:
        rdir = repo_dir(name, hf_home)
    except ValueError:
        return None
    ref = rdir / "refs" / "main"
    if not ref.exists():
        return None
    snap = rdir / "snapshots" / ref.read_text().strip()
    return snap if snap.is_dir() else None

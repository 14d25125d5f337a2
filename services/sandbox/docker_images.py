"""Images for Harbor tasks on the Docker backend: build, then scrub the repository's history.

``task_image(client, task)`` returns the image a task's sandboxes start from:

1. **Environment image**: ``[environment].docker_image`` when the task names one and has no
   ``environment/Dockerfile`` (it must already be on the Docker host: there is no registry here),
   else ``environment/Dockerfile`` built with context ``environment/`` (the classic builder, no
   network, ``[environment].build_timeout_sec``), tagged ``lts-env/<task>:<hash of the context>``
   so an unchanged context is never rebuilt.
2. **Scrubbed workspace image** ``lts-ws/<task>:<hash>``: one throw-away container of the
   environment image replaces the repository's ``.git`` in the workspace (the image's WORKDIR,
   ``/testbed`` for SWE-bench images, or ``[environment].workdir``) by a depth-1 copy of its HEAD:
   exactly one commit, the base, **with its original id** (so a SWE-bench ``test.sh`` that runs
   ``git checkout <base_commit> -- <test files>`` still works), loose objects of that commit only,
   one ref ``refs/heads/main``, no reflog, no packs, no remotes, no tags. The working tree is not
   touched. ``/workspace`` becomes a symlink to the workspace and ``/logs`` exists. The result is
   committed; sandboxes and the verifier start from it, so both see the same tree, and the future
   commits that SWE-bench images carry (``git log --all`` shows the fix) are gone before the agent's
   first command.

Errors name the task: :class:`ImageBuildError` carries the tail of the build log (and the failing
``Step``). With ``LTS_OFFLINE_BUILD=1`` the Dockerfile's uv installer line is substituted from the
uv wheel (services/sandbox/offline_build.py; tag suffix ``-offline``, label ``lts.offline_build``).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import docker
from docker.errors import BuildError, ImageNotFound

from services.common.paths import REPO_ROOT

from . import offline_build

OFFLINE_CACHE = REPO_ROOT / "sandbox-preparation" / "offline-build"   # uv wheels for offline builds
OFFLINE_LABEL = offline_build.LABEL
OFFLINE_ENV_FLAG = offline_build.ENV_FLAG

WORKSPACE = "/workspace"
SCRUB_VERSION = "2"   # bump when SCRUB_SCRIPT changes: every scrubbed image is rebuilt

# $1 = workspace dir. Prints "base=<sha> tree=<sha>" (or "nogit") on success.
SCRUB_SCRIPT = r"""
set -eu
ws="$1"
mkdir -p /logs
if [ "$ws" != /workspace ] && [ ! -e /workspace ]; then ln -s "$ws" /workspace; fi
cd "$ws"
if ! git rev-parse --git-dir >/dev/null 2>&1 || [ ! -d .git ]; then echo nogit; exit 0; fi
git config --global --add safe.directory "$ws" 2>/dev/null || true
base=$(git rev-parse HEAD)
old=/tmp/.lts-old-git
rm -rf "$old"; mv .git "$old"
git --git-dir="$old" update-ref refs/lts/base "$base"
git init -q
git symbolic-ref HEAD refs/heads/main
git -c fetch.unpackLimit=100000000 -c transfer.unpackLimit=100000000 fetch -q --no-tags --depth 1 --update-head-ok \
    "file://$old" refs/lts/base:refs/heads/main
if [ -f "$old/info/exclude" ]; then cp "$old/info/exclude" .git/info/exclude; fi
git reset -q
git update-index -q --refresh >/dev/null || true
rm -rf "$old" .git/logs .git/FETCH_HEAD .git/ORIG_HEAD .git/hooks/*
echo "base=$base tree=$(git rev-parse HEAD^{tree})"
"""


class ImageBuildError(RuntimeError):
    """A task's image could not be built or scrubbed; ``log_tail`` is the end of the build log."""

    def __init__(self, task_name: str, message: str, log_tail: str = ""):
        self.task_name, self.log_tail = task_name, log_tail
        super().__init__(f"{task_name}: {message}" + (f"\n--- build log (tail) ---\n{log_tail}" if log_tail else ""))


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def docker_client(base_url: str | None = None, timeout: float = 600) -> Any:
    return docker.DockerClient(base_url=base_url,
                               timeout=int(timeout)) if base_url else docker.from_env(timeout=int(timeout))


def repo_name(task: Any) -> str:
    """A Docker repository name component for the task (lower case, [a-z0-9._-])."""
    return re.sub(r"[^a-z0-9._-]+", "-", task.slug.lower()).strip("._-")[:100] or "task"


def context_hash(env_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(env_dir.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(env_dir).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _exists(client: Any, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def environment_image(client: Any, task: Any) -> str:
    """The task's environment image (built when needed); see the module docstring."""
    env = task.path / "environment"
    dockerfile = env / "Dockerfile"
    named = task.config.environment.docker_image
    if named and not dockerfile.is_file():
        if not _exists(client, named):
            raise ImageBuildError(task.name, f"[environment].docker_image {named!r} is not on the Docker host "
                                  "(no registry is reachable: build, load or tag it first)")
        return named
    if not dockerfile.is_file():
        raise ImageBuildError(task.name, "environment/Dockerfile is missing (and no [environment].docker_image)")
    offline = offline_build.enabled()
    tag = f"lts-env/{repo_name(task)}:{context_hash(env)[:16]}" + ("-offline" if offline else "")
    with _lock(tag):
        if _exists(client, tag):
            return tag
        timeout = float(task.config.environment.build_timeout_sec)
        if not offline:
            _build(client, task, env, tag, timeout)
            return tag
        with tempfile.TemporaryDirectory(prefix="lts-offline-build-") as tmp:  # uv line from the uv wheel
            try:
                record = offline_build.offline_context(env, Path(tmp) / "ctx", OFFLINE_CACHE)
            except offline_build.OfflineBuildError as e:
                raise ImageBuildError(task.name, str(e)) from None
            _build(client, task, Path(tmp) / "ctx", tag, timeout, {offline_build.LABEL: offline_build.label_of(record)})
    return tag


def _build(client: Any, task: Any, env: Path, tag: str, timeout: float, labels: dict[str, str] | None = None) -> None:
    """Classic-builder build through the API (no BuildKit, no network), under ``timeout``."""
    lines: list[str] = []
    err: list[BaseException] = []

    def run() -> None:
        try:
            for chunk in client.api.build(path=str(env), tag=tag, rm=True, forcerm=True, network_mode="none",
                                   decode=True, labels={"lts.task": task.name, **(labels or {})}):
                if "stream" in chunk:
                    lines.extend(chunk["stream"].splitlines())
                if "error" in chunk:
                    lines.append(chunk["error"])
                    raise BuildError(chunk["error"], [])
        except Exception as e:  # noqa: BLE001 - reported below with the log tail
            err.append(e)

    t = threading.Thread(target=run, daemon=True, name=f"build-{tag}")
    t.start()
    t.join(timeout)
    tail = "\n".join(lines[-30:])
    if t.is_alive():
        raise ImageBuildError(task.name, f"environment/Dockerfile did not build within {timeout:g}s "
                              "([environment].build_timeout_sec)", tail)
    if err:
        step = next((ln for ln in reversed(lines) if ln.startswith("Step ")), "")
        at = f" at {step.strip()} (builds have no network)" if step else ""
        raise ImageBuildError(task.name, f"environment/Dockerfile failed to build{at}: {err[0]}", tail)


def scrubbed_image(client: Any, task: Any, env_image: str) -> dict[str, Any]:
    """Build (or find) the scrubbed workspace image; returns {"image", "commit", "tree", "workdir",
    "env_image", "scrub_version"}."""
    src = client.images.get(env_image)
    workdir = (task.config.environment.workdir or (src.attrs.get("Config") or {}).get("WorkingDir") or WORKSPACE)
    workdir = workdir.rstrip("/") or WORKSPACE
    key = hashlib.sha256(f"{src.id}\0{workdir}\0{SCRUB_VERSION}".encode()).hexdigest()[:16]
    tag = f"lts-ws/{repo_name(task)}:{key}"
    with _lock(tag):
        try:
            labels = client.images.get(tag).labels or {}
            return {"image": tag, "commit": labels.get("lts.base.commit"), "tree": labels.get("lts.base.tree"),
                    "workdir": workdir, "env_image": env_image, "scrub_version": SCRUB_VERSION}
        except Exception:  # noqa: BLE001 - ImageNotFound: build it
            pass
        c = client.containers.run(env_image, command=["sleep", "infinity"], entrypoint=[], detach=True,
                                  network_mode="none", user="0:0", working_dir="/",
                                  labels={"lts.scrub": task.name})
        try:
            rc, out = c.exec_run(["/bin/sh", "-c", SCRUB_SCRIPT, "scrub", workdir], user="0:0")
            text = out.decode(errors="replace")
            if rc != 0:
                raise ImageBuildError(task.name, f"history scrub of {workdir} failed (exit {rc})", text[-2000:])
            fields = dict(kv.split("=", 1) for kv in text.split() if "=" in kv)
            c.stop(timeout=1)
            conf_changes = [f"WORKDIR {workdir}", f"LABEL lts.base.commit={fields.get('base', 'none')}",
                            f"LABEL lts.base.tree={fields.get('tree', 'none')}"]
            repo, _, version = tag.partition(":")
            c.commit(repository=repo, tag=version, changes=conf_changes)
        finally:
            c.remove(force=True)
    return {"image": tag, "commit": fields.get("base"), "tree": fields.get("tree"), "workdir": workdir,
            "env_image": env_image, "scrub_version": SCRUB_VERSION}


def task_image(client: Any, task: Any) -> dict[str, Any]:
    """Environment image, then the scrubbed workspace image (both cached)."""
    return scrubbed_image(client, task, environment_image(client, task))

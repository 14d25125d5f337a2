"""Images for Harbor tasks on the Docker backend: build, then scrub the repository's history.

``task_image(client, task)`` returns the image a task's sandboxes start from:

1. **Environment image**: ``[environment].docker_image`` when the task names one and has no
   ``environment/Dockerfile`` (it must already be on the Docker host: there is no registry here),
   else ``environment/Dockerfile`` built with context ``environment/`` (the classic builder, no
   network, ``[environment].build_timeout_sec``), tagged ``lts-env/<task>:<hash>`` of the context and
   of the ids of the images its FROM lines name, so an unchanged context on unchanged bases is never
   rebuilt, and a base rebuilt under the same tag rebuilds the tasks on it.
2. **Scrubbed workspace image** ``lts-ws/<task>:<hash>``: one throw-away container of the
   environment image replaces the repository's ``.git`` in the workspace (the image's WORKDIR,
   ``/testbed`` for SWE-bench images, or ``[environment].workdir``; a ``.git`` file's git dir, the
   object stores of its ``alternates`` are removed too) by a depth-1 fetch of its HEAD into a fresh
   repository made on the container's own layer and renamed into place (nothing of the old pack is
   copied or rewritten: 4 s for a 163 MB / 20k-commit history, bench/bench_swebench_scale.py):
   exactly one commit, the base, **with its original id** (so a SWE-bench ``test.sh`` that runs
   ``git checkout <base_commit> -- <test files>`` still works), loose objects of that commit only,
   one ref ``refs/heads/main``, no reflog, no packs, no remotes, no tags. The working tree is not
   touched. ``/workspace`` becomes a symlink to the workspace and ``/logs`` exists. The result is
   committed; sandboxes and the verifier start from it, so both see the same tree, and the future
   commits that SWE-bench images carry (``git log --all`` shows the fix) are gone before the agent's
   first command.

Before the scrub, the upstream files a SWE-bench verifier fetches at grading time
(``raw.githubusercontent.com/<repo>/<commit>/<path>``: swebench's ``make_test_spec`` reads the
requirements / environment files of the record's ``environment_setup_commit``, usually a commit
*after* the base) are exported from the image's own full history into the mirror's raw store
(services.sandbox.mirror, ``<mirror dir>/raw/<repo>/<commit>/``): requirement, environment and
packaging files of ``environment_setup_commit`` and ``base_commit`` of ``tests/config.json``, when
the history holds them. That is how an offline host serves them; a host that reaches GitHub
records them on first use instead. A raw store that lost them later (a cleaned or moved mirror dir; a commit's
marker lists its files) gets them again from the unscrubbed environment image: on every use of a cached
scrubbed image, and ``ensure_upstream_files`` for a task whose prepared manifest entry is reused.

Errors name the task: :class:`ImageBuildError` carries the tail of the build log (and the failing
``Step``). With ``LTS_OFFLINE_BUILD=1`` the Dockerfile's uv installer line is substituted from the
uv wheel (services/sandbox/offline_build.py; tag suffix ``-offline``, label ``lts.offline_build``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any

import docker
from docker.errors import BuildError, ImageNotFound

from services.common.paths import REPO_ROOT

from . import offline_build
from .mirror import default_dir as default_mirror_dir
from .mirror import store_raw

log = logging.getLogger(__name__)

OFFLINE_CACHE = REPO_ROOT / "sandbox-preparation" / "offline-build"   # uv wheels for offline builds
OFFLINE_LABEL = offline_build.LABEL
OFFLINE_ENV_FLAG = offline_build.ENV_FLAG

WORKSPACE = "/workspace"
SCRUB_VERSION = "3"   # bump when SCRUB_SCRIPT changes: every scrubbed image is rebuilt

# $1 = workspace dir. Prints "base=<sha> tree=<sha>" (or "nogit") on success.
SCRUB_SCRIPT = r"""
set -eu
ws="$1"
mkdir -p /logs
if [ "$ws" != /workspace ] && [ ! -e /workspace ]; then ln -s "$ws" /workspace; fi
cd "$ws"
# whoever owns the repo (safe.directory), whatever the system config says
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
[ -e .git ] || { echo nogit; exit 0; }
old=$(git rev-parse --absolute-git-dir)             # .git, or where a .git file points
common=$(cd "$(git rev-parse --git-common-dir)" && pwd -P)
case "$common" in /|/usr|/opt|/root|"$ws") echo "odd git dir $common"; exit 3;; esac
base=$(git rev-parse HEAD)
alts=""
if [ -f "$common/objects/info/alternates" ]; then
  alts=$(cd "$common/objects" && while IFS= read -r a; do [ -n "$a" ] && [ -d "$a" ] && (cd "$a" && pwd -P); done \
         < info/alternates || true)
fi
git update-ref refs/lts/base "$base"
new=$(mktemp -d /.lts-scrub.XXXXXX)                 # same filesystem as $ws: the final mv is a rename
git -C "$new" init -q
git -C "$new" symbolic-ref HEAD refs/heads/main
git -C "$new" -c fetch.unpackLimit=100000000 -c transfer.unpackLimit=100000000 \
    fetch -q --no-tags --depth 1 --update-head-ok \
    "file://$common" refs/lts/base:refs/heads/main
if [ -f "$common/info/exclude" ]; then cp "$common/info/exclude" "$new/.git/info/exclude"; fi
rm -rf .git "$old" "$common"                        # the full history, wherever it was kept
for a in $alts; do rm -rf "$a"; done                # object stores it borrowed from
mv "$new/.git" .git
rmdir "$new"
git config --global --add safe.directory "$ws" 2>/dev/null || true
git reset -q
git update-index -q --refresh >/dev/null || true
rm -rf .git/logs .git/FETCH_HEAD .git/ORIG_HEAD .git/hooks/*
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
    key = hashlib.sha256((context_hash(env) + _from_ids(client, dockerfile)).encode()).hexdigest()
    tag = f"lts-env/{repo_name(task)}:{key[:16]}" + ("-offline" if offline else "")
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


def _from_ids(client: Any, dockerfile: Path) -> str:
    """The ids of the images the Dockerfile's FROM lines name, as the host has them now: a base image
    rebuilt under the same tag (setup.sh docker after a package was added) rebuilds the tasks on it."""
    ids = []
    for line in dockerfile.read_text(errors="replace").splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) >= 2 and words[0].upper() == "FROM":
            try:
                ids.append(client.images.get(words[1]).id)
            except ImageNotFound:
                ids.append(f"{words[1]}:absent")   # a build stage's name, or an image the build will miss
    return ",".join(ids)


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


# files swebench's make_test_spec may fetch from raw.githubusercontent.com (requirements files, also
# inside a requirements*/ directory as flask's requirements/dev.txt or django's tests/requirements/py3.txt;
# conda environments) and packaging files; depth <= 3, at most UPSTREAM_MAX_BYTES each
UPSTREAM_FILES = re.compile(r"^(?:[^/]+/){0,2}(?:[^/]*requirements[^/]*\.(?:txt|in|pip)"
                            r"|requirements[^/]*/[^/]+\.(?:txt|in|pip)|[^/]*environment[^/]*\.ya?ml"
                            r"|[^/]*\.ya?ml|setup\.cfg|setup\.py|pyproject\.toml|tox\.ini)$")
UPSTREAM_MAX_BYTES = 1 << 20
UPSTREAM_MARKER = ".lts-exported-v2"   # per exported commit; versioned: a changed UPSTREAM_FILES re-exports


def _record(task: Any) -> dict[str, Any]:
    cfg = task.tests_dir / "config.json"
    try:
        data = json.loads(cfg.read_text()) if cfg.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _upstream_wanted(task: Any, raw_dir: Path) -> tuple[str, list[str]]:
    """The SWE-bench record's repo and the commits whose upstream files are not exported yet."""
    rec = _record(task)
    repo = rec.get("repo")
    if not isinstance(repo, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        return "", []
    commits = [c for c in dict.fromkeys((rec.get("environment_setup_commit"), rec.get("base_commit")))
               if isinstance(c, str) and re.fullmatch(r"[0-9a-f]{40}", c)]
    return repo, [c for c in commits if not _exported(raw_dir / repo / c)]


def _exported(commit_dir: Path) -> bool:
    """The commit's upstream files are in the raw store: its marker, and every file the marker lists (a raw
    store that lost files since, e.g. a cleaned mirror dir, is exported again)."""
    try:
        listed = json.loads((commit_dir / UPSTREAM_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if isinstance(listed, dict):   # {"not_in_history": true}: nothing to export from this image
        return True
    return isinstance(listed, list) and all(isinstance(f, str) and (commit_dir / f).is_file() for f in listed)


def _export_upstream(container: Any, workdir: str, repo: str, commits: list[str], raw_dir: Path) -> dict[str, int]:
    """Files of ``commits`` (those the history holds) into the raw store; returns {commit: n files}."""
    git = ["git", "-c", "safe.directory=*", "-C", workdir]
    out: dict[str, int] = {}
    for commit in commits:
        marker = raw_dir / repo / commit / UPSTREAM_MARKER
        rc, listing = container.exec_run([*git, "ls-tree", "-r", "-z", "-l", commit], user="0:0")
        if rc != 0:   # not in this image's history: an online host records its files on first use
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"not_in_history": True}))
            out[commit] = 0
            continue
        paths = []
        for rec in listing.split(b"\0"):
            meta, _, path = rec.partition(b"\t")
            fields = meta.split()
            if len(fields) == 4 and fields[1] == b"blob" and fields[3].isdigit() \
                    and int(fields[3]) <= UPSTREAM_MAX_BYTES and UPSTREAM_FILES.match(path.decode(errors="replace")):
                paths.append(path.decode(errors="replace"))
        files: dict[str, bytes] = {}
        if paths:
            rc, data = container.exec_run([*git, "archive", "--format=tar", commit, "--", *paths[:500]], user="0:0")
            if rc == 0:
                with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                    for m in tf.getmembers():
                        f = tf.extractfile(m) if m.isfile() else None
                        if f is not None:
                            files[m.name] = f.read()
        store_raw(raw_dir, repo, commit, files)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(sorted(files)))
        out[commit] = len(files)
    return out


def upstream_files(client: Any, task: Any, env_image: str, workdir: str, raw_dir: Path | None = None,
                   container: Any = None) -> dict[str, int]:
    """Export the task's upstream files from ``env_image``'s full history (see module docstring)."""
    raw_dir = Path(raw_dir or default_mirror_dir() / "raw")
    repo, commits = _upstream_wanted(task, raw_dir)
    if not commits:
        return {}
    if container is not None:
        return _export_upstream(container, workdir, repo, commits, raw_dir)
    c = client.containers.run(env_image, command=["sleep", "infinity"], entrypoint=[], detach=True,
                              network_mode="none", user="0:0", working_dir="/", labels={"lts.scrub": task.name})
    try:
        return _export_upstream(c, workdir, repo, commits, raw_dir)
    finally:
        c.remove(force=True)


def ensure_upstream_files(client: Any, task: Any, base: dict[str, Any], raw_dir: Path | None = None) -> dict[str, int]:
    """A prepared task's upstream files back in the raw store when it lost them (a scrubbed image and its
    manifest entry cached, the mirror dir cleaned or moved): exported again from the unscrubbed environment image
    ``base["env_image"]`` (rebuilt from the task's environment/ when it is gone, cached by its context hash).
    Nothing runs when every file is there. Returns {commit: n files} of what was exported."""
    raw_dir = Path(raw_dir or default_mirror_dir() / "raw")
    if not _upstream_wanted(task, raw_dir)[1]:
        return {}
    env_image = base.get("env_image") or ""
    try:
        client.images.get(env_image)
    except (ImageNotFound, docker.errors.NullResource):
        env_image = environment_image(client, task)
    workdir = base.get("workdir") or WORKSPACE
    with _lock(f"upstream:{repo_name(task)}"):
        exported = upstream_files(client, task, env_image, workdir, raw_dir)
    if exported:
        log.info("%s: upstream files exported again from %s (the raw store had lost them): %s", task.name,
                 env_image, exported)
    return exported


def scrubbed_image(client: Any, task: Any, env_image: str, raw_dir: Path | None = None) -> dict[str, Any]:
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
        except ImageNotFound:
            labels = None
        if labels is not None:   # cached; the raw store may have been emptied since
            upstream_files(client, task, env_image, workdir, raw_dir)
            return {"image": tag, "commit": labels.get("lts.base.commit"), "tree": labels.get("lts.base.tree"),
                    "workdir": workdir, "env_image": env_image, "scrub_version": SCRUB_VERSION}
        c = client.containers.run(env_image, command=["sleep", "infinity"], entrypoint=[], detach=True,
                                  network_mode="none", user="0:0", working_dir="/",
                                  labels={"lts.scrub": task.name})
        try:
            exported = upstream_files(client, task, env_image, workdir, raw_dir, container=c)
            if exported:
                log.info("%s: upstream files exported from the image's history before the scrub: %s", task.name,
                         exported)
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


def task_image(client: Any, task: Any, raw_dir: Path | None = None) -> dict[str, Any]:
    """Environment image, then the scrubbed workspace image (both cached); upstream files exported
    into the mirror's raw store ``raw_dir`` (default: ``<mirror dir>/raw``) on the way."""
    return scrubbed_image(client, task, environment_image(client, task), raw_dir)

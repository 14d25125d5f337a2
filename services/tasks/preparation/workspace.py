"""Building a task's workspace base (the sandbox's read-only lower layer) and proving that it
holds no history an agent could mine for the answer.

The base is the repository at the base commit, re-committed as the **only** commit of a fresh
repository: a new ``git init``, every file added, one commit with a fixed author and date (so the
same tree always gives the same commit id), no reflog, no other refs, no packs, no alternates.
``git log --all``, ``git reflog``, ``git show <future sha>`` and reading ``.git/objects`` can
therefore find nothing but the base.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from services.common.sandbox_api import Sandbox

from ..task import Task, TaskError

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "lts", "GIT_AUTHOR_EMAIL": "lts@localhost",
    "GIT_COMMITTER_NAME": "lts", "GIT_COMMITTER_EMAIL": "lts@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
BASE_MESSAGE = "base"


def git(args: list[str], cwd: Path | str, check: bool = True, env: dict[str, str] | None = None,
        input: bytes | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    r = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
                       cwd=cwd, env=full_env, capture_output=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {r.stderr.decode(errors='replace').strip()}")
    return r


def export_source(task: Task, dest: Path) -> None:
    """Write the workspace files (no .git) of ``task`` at its base commit into ``dest``."""
    src = task.workspace_source()
    dest.mkdir(parents=True, exist_ok=True)
    if "dir" in src:
        shutil.copytree(src["dir"], dest, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
        return
    repo, commit = src["git"], src["commit"]
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        raise TaskError(task.path, "environment/repo.json", f"{repo} is not a git repository", "git")
    _export_commit(task, repo, commit, dest)


def _export_commit(task: Task, repo: Path, commit: str, dest: Path) -> None:
    """The files of ``commit`` into ``dest`` through plumbing that never runs the repo's filters
    (``git archive`` would run a ``filter.*.smudge`` from the task repo's own .git/config on the
    host): ``ls-tree`` for paths and modes, ``cat-file --batch`` for the blobs, as stored."""
    r = git(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo, check=False)
    if r.returncode != 0:
        raise TaskError(task.path, "environment/repo.json",
                        f"git ls-tree {commit} failed: {r.stderr.decode(errors='replace').strip()}", "commit")
    entries = []
    for rec in filter(None, r.stdout.split(b"\0")):
        meta, _, path = rec.partition(b"\t")
        mode, kind, sha = meta.split()
        parts = path.decode("utf-8", "surrogateescape").split("/")
        if kind != b"blob":
            continue   # submodules are not part of the workspace
        if path.startswith(b"/") or any(p in ("", ".", "..", ".git") for p in parts):
            raise TaskError(task.path, "environment/repo.json", f"unsafe path {path!r} in {commit}", "commit")
        entries.append((mode, sha, parts))
    out = git(["cat-file", "--batch"], cwd=repo, input=b"".join(sha + b"\n" for _, sha, _ in entries)).stdout
    pos = 0
    for mode, _sha, parts in entries:
        end = out.index(b"\n", pos)
        size = int(out[pos:end].split()[2])
        data = out[end + 1: end + 1 + size]
        pos = end + 1 + size + 1
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == b"120000":
            os.symlink(data.decode("utf-8", "surrogateescape"), target)
        else:
            target.write_bytes(data)
            target.chmod(0o755 if mode == b"100755" else 0o644)


def make_single_commit_repo(root: Path) -> str:
    """Turn ``root`` (files only) into a git repo with exactly one commit; returns its id."""
    shutil.rmtree(root / ".git", ignore_errors=True)
    git(["init", "-q", "-b", "main"], cwd=root)
    git(["add", "-A", "-f", "."], cwd=root)
    git(["commit", "-q", "--allow-empty", "--no-verify", "-m", BASE_MESSAGE], cwd=root, env=GIT_IDENTITY)
    commit = git(["rev-parse", "HEAD"], cwd=root).stdout.decode().strip()
    dot = root / ".git"
    for extra in ("logs", "hooks", "COMMIT_EDITMSG", "description", "ORIG_HEAD", "FETCH_HEAD"):
        p = dot / extra
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    (dot / "hooks").mkdir()
    return commit


def build_base(task: Task, dest: Path) -> dict[str, Any]:
    """Build the scrubbed base of ``task`` at ``dest`` (atomically replaced)."""
    dest = Path(dest)
    tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        export_source(task, tmp)
        commit = make_single_commit_repo(tmp)
        tree = git(["rev-parse", "HEAD^{tree}"], cwd=tmp).stdout.decode().strip()
        n_files = len(git(["ls-files", "-z"], cwd=tmp).stdout.split(b"\0")) - 1
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {"dir": str(dest), "commit": commit, "tree": tree, "files": n_files}


# ------------------------------------------------------------------------------------------
# leak checks, run *inside* a sandbox, so they test exactly what an agent can see

_HISTORY_SCRIPT = r"""
cd /workspace || exit 3
[ -d .git ] || { echo "problem=.git is not a directory"; exit 0; }
echo "commits=$(git rev-list --all --reflog 2>/dev/null | sort -u | wc -l)"
echo "refs=$(git for-each-ref --format='%(refname)' | tr '\n' ' ')"
echo "reflog=$(git reflog 2>/dev/null | wc -l)"
echo "packs=$(ls .git/objects/pack 2>/dev/null | grep -c '\.pack$')"
[ -e .git/objects/info/alternates ] && echo "problem=objects/info/alternates points at another object store"
for f in ORIG_HEAD FETCH_HEAD MERGE_HEAD packed-refs logs; do [ -e .git/$f ] && echo "problem=.git/$f exists"; done
echo "objects=$(git cat-file --batch-check --batch-all-objects | wc -l)"
echo "reachable=$(git rev-list --objects --all | wc -l)"
"""


async def check_history(sandbox: Sandbox, forbidden_blobs: list[str] = ()) -> list[str]:
    """Problems an agent could exploit in the sandbox's workspace git repo ([] = clean):
    more than one commit, extra refs/reflog, packs, alternates, unreachable objects, or any of
    ``forbidden_blobs`` (hashes of the gold-fixed files and hidden tests) present in .git."""
    script = _HISTORY_SCRIPT
    for b in forbidden_blobs:
        script += f"git cat-file -e {shlex.quote(b)} 2>/dev/null && echo leak={b}\n"
    script += "exit 0\n"
    r = await sandbox.run(script, timeout=120, cwd="/workspace")
    if r.exit_code != 0:
        return [f"history check failed (exit {r.exit_code}): {r.output[-300:]}"]
    vals: dict[str, str] = {}
    problems = []
    for line in r.output.splitlines():
        key, _, val = line.partition("=")
        if key == "problem":
            problems.append(val)
        elif key == "leak":
            problems.append(f"object {val} of the solution / hidden tests is present in .git")
        elif key:
            vals[key] = val.strip()
    if vals.get("commits") != "1":
        problems.append(f"{vals.get('commits')} commits reachable (git log --all / reflog), expected 1")
    refs = vals.get("refs", "").split()
    if refs != ["refs/heads/main"]:
        problems.append(f"unexpected refs: {refs}")
    if vals.get("reflog", "0") != "0":
        problems.append(f"reflog has {vals['reflog']} entries")
    if vals.get("packs", "0") != "0":
        problems.append(f"{vals['packs']} pack file(s) in .git/objects/pack")
    if vals.get("objects") != vals.get("reachable"):
        problems.append(f"{vals.get('objects')} objects stored but only {vals.get('reachable')} reachable "
                        "(unreachable objects can hold future code)")
    return problems


_CHANGED_BLOBS = r"""
cd /workspace || exit 3
git status --porcelain=v1 -z --untracked-files=all | tr '\0' '\n' | while IFS= read -r line; do
  st="${line:0:2}"; f="${line:3}"
  case "$st" in *D*|"") continue;; esac
  case "$f" in *__pycache__*|*.pyc|"") continue;; esac
  [ -f "$f" ] && git hash-object -- "$f"
done
"""


async def changed_blobs(sandbox: Sandbox) -> list[str]:
    """Blob ids of files that differ from the base commit (e.g. after the gold solution)."""
    r = await sandbox.run(_CHANGED_BLOBS, timeout=120, cwd="/workspace")
    return sorted({line.strip() for line in r.output.splitlines() if len(line.strip()) == 40})

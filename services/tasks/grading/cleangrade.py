"""Grading an agent's change in a clean sandbox (SWE-bench harness style, Harbor's
``verifier.environment_mode = "separate"``).

After the agent stopped:

1. :func:`extract_patch` takes its change out of its sandbox: ``git diff --binary`` of the whole
   workspace (new, deleted, binary files, modes, symlinks) against the task's base commit, made with
   a throw-away git dir and index (no repo config, hooks, filters or attributes of the workspace;
   ``.gitignore`` only hides untracked files, ``__pycache__`` is left out), base64 over the wire
   (binary-safe). The same command reports files or symlinks the agent left in ``/logs/verifier``,
   ``/tests`` or ``/solution`` (``hack:outside-workspace``).
2. :func:`grade_patch` classifies the patch (``services.tasks.grading.hacks``); a flag whose task policy is
   ``zero`` (the default) ends grading there with reward 0. Otherwise a **fresh** sandbox from the
   task's base gets the patch (``git apply``, else ``patch -p1``), and the task's verifier runs
   there (SWE-style tasks restore their test files first). No agent process, file outside the
   patch or environment change reaches grading.

The reward cache (``cookbook.rollout``) keys on the patch bytes (or on the write log of agents whose
tools only write files): the key is exactly what is graded.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import shlex
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.sandbox_api import Sandbox

from ..task import Task
from ..task_toml import grading_policy
from .bases import ImageRef, SandboxFactory
from .hacks import classify_patch, file_of_test, swe_test_ids, task_test_files, zeroing
from .network import verifier_network, with_network
from .verifier import VerifyResult, verify

MAX_PATCH_BYTES = 16 * 1024 * 1024
_BEGIN = "LTS-PATCH-BEGIN"
WATCHED = ("/logs/verifier", "/tests", "/solution")

_EXTRACT = r"""
for d in {watched}; do
  if [ -L "$d" ]; then echo "LTS-OUTSIDE symlink $d"
  elif [ -d "$d" ]; then find "$d" -mindepth 1 -maxdepth 2 2>/dev/null | head -n 5 | sed 's/^/LTS-OUTSIDE file /'; fi
done
g=$(mktemp -d /tmp/lts-patch.XXXXXX) || exit 3
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$g" GIT_OPTIONAL_LOCKS=0 GIT_TERMINAL_PROMPT=0
git init -q --bare "$g/git" 2>"$g/err" || {{ cat "$g/err"; rm -rf "$g"; exit 4; }}
export GIT_DIR="$g/git" GIT_WORK_TREE=/workspace GIT_INDEX_FILE="$g/index"
echo /workspace/.git/objects > "$g/git/objects/info/alternates"
printf '* -text -filter -ident -eol -working-tree-encoding !diff\n' > "$g/git/info/attributes"
if git read-tree {commit} 2>"$g/err" && git add -A -- . ':(exclude,glob)**/__pycache__/**' 2>>"$g/err" \
   && git diff --cached --binary --full-index --no-renames --no-ext-diff --no-textconv --no-color {commit} \
      > "$g/patch" 2>>"$g/err"
then echo {begin}; base64 -w0 "$g/patch"; rc=0
else cat "$g/err"; rc=5; fi
rm -rf "$g"; exit $rc
"""


@dataclass
class Extracted:
    patch: bytes = b""
    outside: list[str] = field(default_factory=list)  # files / symlinks the agent left in WATCHED
    error: str | None = None
    seconds: float = 0.0

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.patch).hexdigest()


@functools.lru_cache(maxsize=None)
def base_commit(base_dir: Path | ImageRef) -> str:
    """The commit of a scrubbed base (``services.tasks.preparation.workspace.build_base``), or of the repo in a
    scrubbed task image (docker backend: the ImageRef carries it)."""
    if isinstance(base_dir, ImageRef):
        return base_dir.commit
    return subprocess.run(["git", "-C", str(base_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True, env={"GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}).stdout.strip()


@functools.lru_cache(maxsize=None)
def base_files(base_dir: Path) -> frozenset[str]:
    out = subprocess.run(["git", "-C", str(base_dir), "ls-files", "-z"], capture_output=True, check=True,
                         env={"GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}).stdout
    return frozenset(p.decode("utf-8", "replace") for p in out.split(b"\0") if p)


@functools.lru_cache(maxsize=None)
def _test_files(tests_dir: Path) -> frozenset[str]:
    cfg = tests_dir / "config.json"
    try:
        return frozenset(task_test_files(json.loads(cfg.read_text()))) if cfg.is_file() else frozenset()
    except (OSError, ValueError):
        return frozenset()


async def extract_patch(sb: Sandbox, commit: str, timeout: float = 120) -> Extracted:
    """The agent's change to /workspace against ``commit`` (see module docstring)."""
    t0 = time.monotonic()
    script = _EXTRACT.format(watched=" ".join(WATCHED), commit=shlex.quote(commit), begin=_BEGIN)
    r = await sb.run(script, timeout=timeout, max_output=MAX_PATCH_BYTES * 4 // 3 + 65536, cwd="/workspace",
                     env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"})
    ex = Extracted(seconds=0.0)
    head, sep, body = r.output.rpartition(_BEGIN + "\n")  # the last one: file names above are the agent's
    ex.outside = [l.removeprefix("LTS-OUTSIDE ") for l in head.splitlines() if l.startswith("LTS-OUTSIDE ")]
    if r.timed_out or r.truncated or r.exit_code != 0 or not sep:
        why = "timed out" if r.timed_out else "patch too large" if r.truncated else f"exit {r.exit_code}"
        ex.error = f"could not take the workspace diff ({why}): {r.output[-500:].strip()}"
    else:
        try:
            ex.patch = base64.b64decode(body.strip(), validate=True)
        except (binascii.Error, ValueError) as e:
            ex.error = f"workspace diff is not valid base64: {e}"
    ex.seconds = time.monotonic() - t0
    return ex


def patch_flags(task: Task, base_dir: Path | None, patch: bytes) -> dict[str, list[str]]:
    files = base_files(Path(base_dir)) if base_dir is not None and (Path(base_dir) / ".git").exists() else None
    return classify_patch(patch.decode("utf-8", "replace"), set(_test_files(task.tests_dir)),
                          set(files) if files else None)


async def apply_patch(sb: Sandbox, patch: bytes, timeout: float = 120) -> str | None:
    """Apply ``patch`` to /workspace; None on success, else the reason."""
    if not patch.strip():
        return None
    tmp = f"/tmp/lts-grade-{uuid.uuid4().hex}"
    await sb.write_file(f"{tmp}.b64", base64.b64encode(patch).decode())
    q = shlex.quote(tmp)
    r = await sb.run(f"base64 -d {q}.b64 > {q}.diff && {{ git apply --binary --whitespace=nowarn {q}.diff 2>{q}.err || "
                     f"patch -p1 --forward --batch --no-backup-if-mismatch < {q}.diff; }}; rc=$?; "
                     f"[ $rc = 0 ] || cat {q}.err; rm -f {q}.b64 {q}.diff {q}.err; exit $rc",
                     timeout=timeout, cwd="/workspace",
                     env={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                          "PATH": "/usr/local/bin:/usr/bin:/bin"})
    if r.exit_code != 0 or r.timed_out:
        return f"the patch does not apply to the task's base: {r.output.strip()[-800:]}"
    return None


async def grade_patch(task: Task, base_dir: Path, factory: SandboxFactory, patch: bytes, *,
                      timeout: float | None = None, flags: dict[str, list[str]] | None = None,
                      policy: dict[str, str] | None = None) -> VerifyResult:
    """Reward of ``patch`` on the task's base, graded in a fresh sandbox (see module docstring).
    ``flags``: flags found before (e.g. ``hack:outside-workspace`` from :func:`extract_patch`);
    ``policy``: per-flag policies over the task's own (validation uses it to run flagged patches)."""
    t0 = time.monotonic()
    flags = {**(flags or {}), **patch_flags(task, base_dir, patch)}
    try:
        _, policies = grading_policy(task.config.metadata)
    except ValueError as e:
        return VerifyResult(0.0, error="TaskConfigError", reason=str(e), flags=flags)
    policies = {**policies, **(policy or {})}
    zero = zeroing(flags, policies)
    if zero:
        return VerifyResult(0.0, flags=flags, duration_s=time.monotonic() - t0,
                            reason=f"reward 0: the patch is flagged {', '.join(zero)} "
                                   f"({'; '.join(flags[zero[0]][:3])})")
    sb = await factory(with_network(base_dir, verifier_network(task)) if isinstance(base_dir, ImageRef)
                       else Path(base_dir))
    try:
        err = await apply_patch(sb, patch)
        if err:
            return VerifyResult(0.0, error="PatchApplyError", reason=err, flags=flags, duration_s=time.monotonic() - t0)
        res = await verify(sb, task, timeout=timeout)
    finally:
        try:
            await sb.close()
        except Exception:  # noqa: BLE001 - the result stands; the manager reaps what is left
            pass
    res = with_flags(res, flags, policies)
    res.duration_s = time.monotonic() - t0
    return res


def with_flags(res: VerifyResult, flags: dict[str, list[str]], policies: dict[str, str]) -> VerifyResult:
    """``res`` with ``flags`` added; reward 0 when any flag's policy is ``zero``."""
    res.flags = {**flags, **res.flags}
    zero = zeroing(res.flags, policies)
    if zero and res.reward:
        res.reward = 0.0
        res.reason = f"reward 0: {', '.join(zero)} ({'; '.join(res.flags[zero[0]][:3])})"
    return res


async def validate_delete_test(task: Task, base_dir: Path, factory: SandboxFactory,
                               timeout: float | None = None) -> dict[str, Any]:
    """``prepare_sandbox.py --validate``: a patch deleting the first FAIL_TO_PASS test's file must
    score 0 through clean grading. It is graded with its ``hack:test-file`` flag only recorded, so
    the tests really run (the task must restore its tests). (The empty patch's clean grading is a
    fresh sandbox from the base plus the verifier: validation's untouched-workspace run.)"""
    out: dict[str, Any] = {}
    cfg_path = task.tests_dir / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    f2p = swe_test_ids(cfg, "FAIL_TO_PASS")
    target = file_of_test(f2p[0], cfg) if f2p else None
    out["delete_test_file"] = target
    if not target:
        out["delete_test_error"] = (f"probe not run: FAIL_TO_PASS test {f2p[0]!r} has no path and the test patch "
                                    "does not name one file for it") if f2p else "probe not run: no FAIL_TO_PASS test"
        return out
    sb = await factory(base_dir)
    try:
        r = await sb.run(f"rm -f -- {shlex.quote(target)}", timeout=60, cwd="/workspace")
        ex = await extract_patch(sb, base_commit(base_dir)) if r.exit_code == 0 else Extracted(error=r.output[-300:])
    finally:
        await sb.close()
    if ex.error or not ex.patch:
        out["delete_test_error"] = ex.error or f"{target} is not in the base"
        return out
    res = await grade_patch(task, base_dir, factory, ex.patch, timeout=timeout, policy={"hack:test-file": "flag"})
    out.update(delete_test_reward=res.reward, delete_test_flags=sorted(res.flags))
    if res.infra:
        out["delete_test_error"] = f"infrastructure failure: {res.reason}"
    return out

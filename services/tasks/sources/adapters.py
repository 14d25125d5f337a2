"""Adapters: SWE-bench-style and R2E-Gym instances -> Harbor task dirs, given a local checkout.

SWE-bench instance (``swebench_to_task``): ``instance_id, repo, base_commit, problem_statement,
patch`` (gold), ``test_patch, FAIL_TO_PASS, PASS_TO_PASS`` (lists or JSON-encoded lists, as in the
HF dataset), optional ``version``. The workspace is the checkout at ``base_commit``; the verifier
writes the test files as the test patch leaves them, runs them and grades with SWE-bench's rule.

R2E-Gym instance (``r2egym_to_task``): ``instance_id`` (or ``repo_name``+``commit_hash``),
``repo``/``repo_name``, ``commit_hash`` (the fixing commit), ``problem_statement``, the tests as
``test_files`` ({path: code}) or ``test_file_names`` + ``test_file_codes``, optional ``gold_patch``
(default: the commit's non-test diff), optional ``base_commit`` (default: ``commit_hash^``),
``expected_output_json`` ({test: "PASSED"|"FAILED"}, as in R2E-Gym) or explicit
``FAIL_TO_PASS``/``PASS_TO_PASS``. R2E-Gym's rule "every test expected to pass after the fix passes"
is what the grader checks (the FAIL_TO_PASS / PASS_TO_PASS split is nominal when not given).

Both write ``environment/repo.json`` pointing at the checkout (``inline=True`` copies a snapshot
into ``environment/repo/`` instead, making the task self-contained).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from ..preparation.workspace import git
from .swe import write_swe_task

DEFAULT_TEST_CMD = ["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider"]
_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        v = json.loads(v) if v.strip() else []
    if not isinstance(v, list):
        raise ValueError(f"expected a list of test ids, got {type(v).__name__}")
    return [str(x) for x in v]


def patch_files(patch: str) -> list[tuple[str, str, bool]]:
    """(old path, new path, deleted) for each file of a git diff."""
    out = []
    for block in re.split(r"(?=^diff --git )", patch, flags=re.M):
        m = _DIFF_HEADER.search(block)
        if m:
            out.append((m.group(1), m.group(2), "\ndeleted file mode" in block or "+++ /dev/null" in block))
    return out


def export_commit(repo: Path, commit: str, dest: Path) -> None:
    r = git(["archive", "--format=tar", commit], cwd=repo, check=False)
    if r.returncode != 0:
        raise ValueError(f"{repo}: cannot read commit {commit}: {r.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
        tf.extractall(dest, filter="data")


def apply_patch(tree: Path, patch: str, what: str) -> None:
    if not patch.strip():
        return
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=tree, input=patch.encode(),
                       capture_output=True)
    if r.returncode != 0:
        raise ValueError(f"{what} does not apply: {r.stderr.decode(errors='replace').strip()}")


def _resolve(repo: Path, rev: str) -> str:
    r = git(["rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=repo, check=False)
    if r.returncode != 0:
        raise ValueError(f"{repo}: unknown revision {rev!r}")
    return r.stdout.decode().strip()


def _workspace(dest_tmp: Path, repo: Path, commit: str) -> Path:
    tree = dest_tmp / "tree"
    tree.mkdir()
    export_commit(repo, commit, tree)
    return tree


def swebench_to_task(instance: dict[str, Any], repo_path: str | Path, dest: str | Path, *,
                     test_cmd: list[str] | None = None, test_env: dict[str, str] | None = None,
                     inline: bool = False, org: str = "swebench", verifier_timeout: float = 600) -> Path:
    """Write the Harbor task of one SWE-bench-style instance (see module docstring)."""
    repo = Path(repo_path).resolve()
    for key in ("instance_id", "base_commit", "problem_statement", "patch", "test_patch"):
        if not instance.get(key) and key != "problem_statement":
            raise ValueError(f"SWE-bench instance lacks {key!r}")
    base = _resolve(repo, instance["base_commit"])
    f2p, p2p = _as_list(instance.get("FAIL_TO_PASS")), _as_list(instance.get("PASS_TO_PASS"))
    touched = patch_files(instance["test_patch"])
    with tempfile.TemporaryDirectory() as tmp:
        tree = _workspace(Path(tmp), repo, base)
        apply_patch(tree, instance["test_patch"], "test_patch")
        test_files = {new: (tree / new).read_text() for _, new, deleted in touched if not deleted}
        removed = [old for old, _, deleted in touched if deleted]
        # the gold patch must apply to the base as well
        check = Path(tmp) / "check"
        check.mkdir()
        export_commit(repo, base, check)
        apply_patch(check, instance["patch"], "gold patch")
        snapshot = None
        if inline:
            snapshot = Path(tmp) / "snapshot"
            snapshot.mkdir()
            export_commit(repo, base, snapshot)
        iid = instance["instance_id"]
        statement = instance.get("problem_statement") or ""
        instruction = (f"{statement.rstrip()}\n\n---\nRepository: {instance.get('repo', repo.name)}"
                       f"{'  version ' + str(instance['version']) if instance.get('version') else ''}\n"
                       f"Base commit: {base}\nInstance: {iid}\n"
                       "Fix the issue by editing the repository in /workspace (not the tests).\n")
        name = f"{org}/{_slug(iid)}"
        return write_swe_task(
            Path(dest), name=name, instruction=instruction, gold_patch=instance["patch"],
            test_files=test_files, remove_files=removed, fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=(test_cmd or DEFAULT_TEST_CMD) + sorted(test_files),
            test_env=test_env, repo_dir=snapshot, repo_git=None if inline else (repo, base),
            record={**{k: v for k, v in instance.items()}, "base_commit": base},
            description=f"SWE-bench-style instance {iid}", source=f"swebench:{iid}",
            tags=["adapter"], verifier_timeout=verifier_timeout)


def _is_test_path(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return (any(p in ("tests", "test", "testing", "r2e_tests") for p in parts[:-1])
            or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py")


def _normalise_test_id(name: str, test_paths: list[str]) -> str:
    if "::" in name or len(test_paths) != 1:
        return name
    return f"{test_paths[0]}::{name.replace('.', '::')}"  # R2E-Gym style "Class.test" keys


def r2egym_to_task(instance: dict[str, Any], repo_path: str | Path, dest: str | Path, *,
                   test_cmd: list[str] | None = None, test_env: dict[str, str] | None = None,
                   inline: bool = False, org: str = "r2egym", verifier_timeout: float = 600) -> Path:
    """Write the Harbor task of one R2E-Gym instance (see module docstring)."""
    repo = Path(repo_path).resolve()
    repo_name = instance.get("repo") or instance.get("repo_name") or repo.name
    if not instance.get("commit_hash"):
        raise ValueError("R2E-Gym instance lacks 'commit_hash'")
    fix = _resolve(repo, instance["commit_hash"])
    base = _resolve(repo, instance.get("base_commit") or f"{fix}^")
    iid = instance.get("instance_id") or f"{repo_name.replace('/', '__')}-{fix[:12]}"

    if isinstance(instance.get("test_files"), dict):
        tests = {str(k): str(v) for k, v in instance["test_files"].items()}
    elif instance.get("test_file_names"):
        names, codes = instance["test_file_names"], instance.get("test_file_codes") or []
        if len(names) != len(codes):
            raise ValueError("test_file_names and test_file_codes differ in length")
        tests = {n if "/" in n else f"r2e_tests/{n}": c for n, c in zip(names, codes)}
    else:
        raise ValueError("R2E-Gym instance has no tests (test_files or test_file_names/test_file_codes)")

    gold = instance.get("gold_patch")
    if not gold:
        changed = git(["diff", "--name-only", base, fix], cwd=repo).stdout.decode().split()
        src = [p for p in changed if not _is_test_path(p)]
        if not src:
            raise ValueError(f"commit {fix} changes no non-test file: no gold patch")
        gold = git(["diff", "--binary", base, fix, "--", *src], cwd=repo).stdout.decode()

    paths = sorted(tests)
    if instance.get("FAIL_TO_PASS"):
        f2p = _as_list(instance["FAIL_TO_PASS"])
        p2p = _as_list(instance.get("PASS_TO_PASS"))
    else:
        expected = instance.get("expected_output_json") or {}
        if isinstance(expected, str):
            expected = json.loads(expected)
        if not expected:
            raise ValueError("R2E-Gym instance needs expected_output_json or FAIL_TO_PASS")
        f2p = [_normalise_test_id(t, paths) for t, st in expected.items() if str(st).upper() == "PASSED"]
        p2p = []

    with tempfile.TemporaryDirectory() as tmp:
        check = Path(tmp) / "check"
        check.mkdir()
        export_commit(repo, base, check)
        apply_patch(check, gold, "gold patch")
        snapshot = None
        if inline:
            snapshot = Path(tmp) / "snapshot"
            snapshot.mkdir()
            export_commit(repo, base, snapshot)
        instruction = (f"{(instance.get('problem_statement') or '').rstrip()}\n\n---\nRepository: {repo_name}\n"
                       "Fix the issue by editing the repository in /workspace (not the tests).\n")
        return write_swe_task(
            Path(dest), name=f"{org}/{_slug(iid)}", instruction=instruction, gold_patch=gold,
            test_files=tests, fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=(test_cmd or DEFAULT_TEST_CMD) + paths, test_env=test_env,
            repo_dir=snapshot, repo_git=None if inline else (repo, base),
            record={"instance_id": iid, "repo": repo_name, "commit_hash": fix, "base_commit": base,
                    "problem_statement": instance.get("problem_statement")},
            description=f"R2E-Gym instance {iid}", source=f"r2egym:{iid}", tags=["adapter", "r2e-gym"],
            verifier_timeout=verifier_timeout)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-.") or "task"

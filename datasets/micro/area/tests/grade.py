#!/usr/bin/env python3
"""SWE-bench-style grading: run the task's tests, parse per-test results, reward = 1 iff every
FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.

This module is standard-library only on purpose: task writers copy it verbatim into each
SWE-style task as ``tests/grade.py``, and ``tests/test.sh`` runs it *inside the sandbox* after the
agent finished::

    python3 /tests/grade.py --config /tests/config.json --files /tests/files \
        --workspace /workspace --out /logs/verifier

It (1) restores the task's copies of the test files over the workspace (so edits the agent made
to tests do not count), (2) runs ``test_cmd`` with a timeout, logging to ``test-output.log``,
(3) parses pytest's ``-rA`` summary (or ``-v`` lines), (4) writes ``report.json`` (which tests
failed and why) and ``reward.txt`` (``1`` or ``0``).

Grading rule (SWE-bench's, slightly stricter): a test passes iff its status is PASSED or XFAIL;
FAILED, ERROR, SKIPPED and *missing from the log* (e.g. a collection error) all count as failing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PASS_STATUSES = ("PASSED", "XFAIL")
FAIL_STATUSES = ("FAILED", "ERROR")
_ALL = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_RANK = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "XPASS": 2, "FAILED": 3, "ERROR": 3}

_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (.+?)\s*$")
_VERBOSE = re.compile(r"^(\S+::.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_pytest_log(text: str) -> dict[str, str]:
    """Map test node id -> status from pytest output (``-rA`` short summary and/or ``-v`` lines).
    When a test has several statuses (e.g. PASSED and an ERROR at teardown) the worst wins."""
    status: dict[str, str] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        m = _SUMMARY.match(line)
        if m:
            st, rest = m.group(1), m.group(2)
            if st in ("FAILED", "ERROR", "XFAIL", "XPASS") and " - " in rest:
                rest = rest.split(" - ", 1)[0]
            nodeid = rest.strip()
        else:
            m = _VERBOSE.match(line)
            if not m:
                continue
            nodeid, st = m.group(1).strip(), m.group(2)
        if not nodeid or nodeid.startswith("["):
            continue
        if nodeid not in status or _RANK[st] > _RANK[status[nodeid]]:
            status[nodeid] = st
    return status


def grade(status: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str]) -> dict:
    """SWE-bench's FAIL_TO_PASS / PASS_TO_PASS report and the resolution."""

    def split(tests: list[str]) -> dict[str, list[str]]:
        ok = [t for t in tests if status.get(t) in PASS_STATUSES]
        bad = [t for t in tests if status.get(t) not in PASS_STATUSES]
        return {"success": ok, "failure": bad}

    f2p, p2p = split(fail_to_pass), split(pass_to_pass)
    failed = f2p["failure"] + p2p["failure"]
    return {
        "resolved": not failed,
        "tests_status": {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p},
        "failed_tests": {t: status.get(t, "MISSING") for t in failed},
    }


def restore_test_files(config: dict, files_dir: Path, workspace: Path) -> None:
    """Overwrite the workspace's test files with the task's copies; delete ``remove_files``."""
    for rel in config.get("remove_files", []):
        target = workspace / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    for rel in config["test_files"]:
        src = files_dir / rel
        if not src.is_file():
            continue  # the test file exists unchanged in the workspace
        dst = workspace / rel
        if dst.is_symlink() or dst.is_dir():
            shutil.rmtree(dst) if dst.is_dir() and not dst.is_symlink() else dst.unlink()
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def run_tests(config: dict, workspace: Path, log_path: Path) -> tuple[str, int | None, bool, float]:
    """Run ``test_cmd`` in ``workspace``; returns (output, exit code, timed out, seconds)."""
    cmd = list(config["test_cmd"])
    if cmd[0] in ("python", "python3"):
        cmd[0] = sys.executable  # the interpreter test.sh chose (it has pytest)
    env = dict(os.environ)
    # fixed hash seed: some suites build parametrize ids from sets, and ids must match the task's
    env.update({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"})
    env.update({k: str(v) for k, v in config.get("test_env", {}).items()})
    timeout = float(config.get("timeout_sec", 300))
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=workspace, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, timed_out = None, True
    return log_path.read_text(errors="replace"), code, timed_out, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="/tests/config.json")
    ap.add_argument("--files", default="/tests/files")
    ap.add_argument("--workspace", default="/workspace")
    ap.add_argument("--out", default="/logs/verifier")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads(Path(a.config).read_text())
    workspace = Path(a.workspace)

    restore_test_files(config, Path(a.files), workspace)
    text, code, timed_out, secs = run_tests(config, workspace, out / "test-output.log")
    report = grade(parse_pytest_log(text), config["FAIL_TO_PASS"], config["PASS_TO_PASS"])
    report.update({"instance_id": config.get("instance_id"), "test_exit_code": code,
                   "timed_out": timed_out, "test_seconds": round(secs, 3)})
    if timed_out:
        report["resolved"] = False
        report["reason"] = f"tests timed out after {config.get('timeout_sec', 300)}s"
    elif report["failed_tests"]:
        report["reason"] = f"{len(report['failed_tests'])} required test(s) did not pass"
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "reward.txt").write_text("1\n" if report["resolved"] else "0\n")
    return 0 if report["resolved"] else 1


if __name__ == "__main__":
    sys.exit(main())

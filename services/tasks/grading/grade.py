#!/usr/bin/env python3
"""SWE-bench-style grading: run the task's tests, read per-test outcomes from the JUnit XML report
the test runner writes, reward = 1 iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test
still passes.

This module is standard-library only on purpose: task writers copy it verbatim into each
SWE-style task as ``tests/grade.py``, and ``tests/test.sh`` runs it *inside the sandbox* after the
agent finished (normally a fresh sandbox holding the base plus the agent's patch, see
``services.tasks.cleangrade``)::

    python3 /tests/grade.py --config /tests/config.json --files /tests/files \
        --workspace /workspace --out /logs/verifier

It (1) restores the task's copies of the test files over the workspace (so edits the agent made
to tests do not count), (2) runs ``test_cmd`` with a timeout, logging to ``test-output.log``:
pytest is started by this grader's own interpreter (``-s -P``: no user site, the workspace not on
``sys.path`` before pytest is imported), with ``--rootdir`` the workspace, no cache provider, no
plugin autoload, and ``--junitxml`` in a fresh directory outside the workspace, (3) reads the
per-test outcomes from that JUnit XML (not from stdout), (4) checks that nothing but the grader
wrote into the output directory while the tests ran (a reward file written by the code under
test is reported as ``hack:reward-file``), (5) writes ``report.json`` (which tests failed and why,
``hacks``) and ``reward.txt`` (``1`` or ``0``).

Grading rule (SWE-bench's, slightly stricter): a test passes iff its status is PASSED or XFAIL;
FAILED, ERROR, SKIPPED and *missing from the report* (e.g. a collection error) all count as failing.
``parse_pytest_log`` (pytest's ``-rA`` / ``-v`` lines) is kept for the task synthesiser's baseline
runs on the host; grading never reads stdout.
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
import tempfile
import time
import xml.etree.ElementTree as ET
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


def junit_nodeid(nodeid: str) -> tuple[str, str]:
    """(classname, name) that pytest's JUnit XML writes for a test node id (``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def parse_junit(xml_text: str) -> dict[tuple[str, str], str]:
    """(classname, name) -> status from a JUnit XML report; the worst status of a test wins."""
    root = ET.fromstring(xml_text)
    status: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        st = "PASSED"
        for child in case:
            if child.tag == "failure":
                st = "FAILED"
            elif child.tag == "error":
                st = "ERROR"
            elif child.tag == "skipped":
                st = "XFAIL" if child.get("type") == "pytest.xfail" else "SKIPPED"
            else:
                continue
            break
        if key not in status or _RANK[st] > _RANK[status[key]]:
            status[key] = st
    return status


def statuses_by_nodeid(junit: dict[tuple[str, str], str], nodeids: list[str]) -> dict[str, str]:
    return {t: junit[junit_nodeid(t)] for t in nodeids if junit_nodeid(t) in junit}


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


TEST_LOG = "test-output.log"  # the only file that may appear in --out while the tests run


def runner_cmd(test_cmd: list[str], workspace: Path, junit: Path) -> list[str]:
    """``test_cmd`` started by this interpreter, and for pytest with the hardening options."""
    cmd = list(test_cmd)
    isolate = ["-s", "-P"] if sys.version_info >= (3, 11) else ["-s"]
    if cmd[0] in ("python", "python3"):
        cmd = [sys.executable, *isolate, *cmd[1:]]  # the interpreter test.sh chose (it has pytest)
    elif cmd[0] in ("pytest", "py.test"):
        cmd = [sys.executable, *isolate, "-m", "pytest", *cmd[1:]]
    if "pytest" in cmd[:6]:
        cmd += [f"--rootdir={workspace}", "-p", "no:cacheprovider", f"--junitxml={junit}",
                "-o", "junit_family=xunit2", "-o", "junit_logging=no"]
    return cmd


def run_tests(config: dict, workspace: Path, log_path: Path, junit: Path) -> tuple[int | None, bool, float]:
    """Run ``test_cmd`` in ``workspace``; returns (exit code, timed out, seconds)."""
    cmd = runner_cmd(config["test_cmd"], workspace, junit)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
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
            code, timed_out = None, True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the tests left running
        except ProcessLookupError:
            pass
        proc.wait()
    return code, timed_out, time.monotonic() - t0


def foreign_outputs(out: Path, before: set[str]) -> list[str]:
    """Files that appeared in the output dir while the tests ran (other than the test log)."""
    found = []
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if rel not in before and rel != TEST_LOG:
            found.append(rel)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="/tests/config.json")
    ap.add_argument("--files", default="/tests/files")
    ap.add_argument("--workspace", default="/workspace")
    ap.add_argument("--out", default="/logs/verifier")
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads(Path(a.config).read_text())
    workspace = Path(a.workspace).resolve()

    restore_test_files(config, Path(a.files), workspace)
    before = {p.relative_to(out).as_posix() for p in out.rglob("*")}
    junit_dir = Path(tempfile.mkdtemp(prefix="lts-junit-"))  # outside the workspace and --out
    junit = junit_dir / "junit.xml"
    code, timed_out, secs = run_tests(config, workspace, out / TEST_LOG, junit)
    hacks, junit_error = [], None
    foreign = foreign_outputs(out, before)
    if foreign:
        hacks.append("hack:reward-file")
        for rel in foreign:  # the grader's reward.txt is the only reward the verifier may read
            target = out / rel
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
    try:
        junit_text = junit.read_text(errors="replace") if junit.is_file() and not junit.is_symlink() else ""
        status = parse_junit(junit_text) if junit_text else {}
        if junit_text:
            (out / "junit.xml").write_text(junit_text)
    except ET.ParseError as e:
        status, junit_error = {}, f"the test runner's JUnit XML is not valid XML: {e}"
    shutil.rmtree(junit_dir, ignore_errors=True)
    wanted = list(config["FAIL_TO_PASS"]) + list(config["PASS_TO_PASS"])
    report = grade(statuses_by_nodeid(status, wanted), config["FAIL_TO_PASS"], config["PASS_TO_PASS"])
    report.update({"instance_id": config.get("instance_id"), "test_exit_code": code,
                   "timed_out": timed_out, "test_seconds": round(secs, 3), "hacks": hacks,
                   "foreign_outputs": foreign, "junit": bool(status)})
    if hacks:
        report["resolved"] = False
        report["reason"] = f"the code under test wrote into {out}: {', '.join(foreign[:5])} ({hacks[0]})"
    elif timed_out:
        report["resolved"] = False
        report["reason"] = f"tests timed out after {config.get('timeout_sec', 300)}s"
    elif junit_error:
        report["resolved"] = False
        report["reason"] = junit_error
    elif report["failed_tests"]:
        report["reason"] = f"{len(report['failed_tests'])} required test(s) did not pass"
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "reward.txt").write_text("1\n" if report["resolved"] else "0\n")
    return 0 if report["resolved"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The verifier: Harbor's flow, against any ``services.common.sandbox_api.Sandbox``.

Call :func:`verify` only after the agent finished. It

1. deletes ``/logs/verifier`` and ``/tests`` (so nothing the agent wrote there counts),
2. uploads the task's ``tests/`` to ``/tests``,
3. runs ``bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1`` in ``/workspace`` with the
   task's ``[verifier].env`` under the verifier timeout (``[verifier].timeout_sec``),
4. reads ``/logs/verifier/reward.json`` (flat ``{"name": number}``, preferred) or ``reward.txt``
   (one number). **The exit code of test.sh is not the reward.**
5. reads ``/logs/verifier/report.json`` when the task wrote one (SWE-style tasks, see
   ``services.tasks.grading``) to say which tests failed and which ``hack:<kind>`` flags it raised,
6. validates the reward: finite and within the task's ``[metadata.grading] reward_range``
   ([0, 1] by default), else reward 0 with ``RewardOutOfRangeError``; a flag whose policy is
   ``zero`` (the default, ``services.tasks.grading.hacks``) makes the reward 0.

This grades the sandbox it is given. Rollouts grade the agent's *patch* in a fresh sandbox
(``services.tasks.grading.cleangrade``); calling this on the agent's own sandbox is the explicit
``in-place`` grading mode.

Nothing here raises for a bad task or a bad sandbox: every failure becomes reward 0 with an
``error`` class (Harbor's names where Harbor has one) and a human ``reason``.

A verifier whose network is the manager's mirror (``network="registry"``, services.sandbox.mirror)
may not get what it needs (an upstream file not in the mirror, the registry down): the mirror
lists each such request in ``/.lts-net/misses.log``. Then the run is an **infrastructure
failure**: ``infra=True``, ``error="VerifierInfraError"``, whatever test.sh wrote; callers retry
it or drop it (cookbook.rollout), never train on it as a reward of 0. So is a verifier that could not
run its own toolchain: test.sh exiting 126 / 127 (a command not found or not executable: ``uv run
parser.py`` without uv, a missing interpreter), or a test.sh whose task files promise
``report.json`` (its parser writes one) ending without it (the parser never ran or crashed).
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from services.common.sandbox_api import Sandbox

from ..task import Task
from ..task_toml import grading_policy, resolve_env
from .hacks import zeroing

VERIFIER_DIR = "/logs/verifier"
MIRROR_MISSES = "/.lts-net/misses.log"   # services.sandbox.mirror (registry sandboxes only)
TESTS_DIR = "/tests"
SANDBOX_GRACE_S = 30.0  # extra time we give the sandbox itself before calling it hung
TOOL_MISSING_EXIT = {126: "not executable", 127: "not found"}   # bash's codes for a command that cannot run


@dataclass
class VerifyResult:
    reward: float
    rewards: dict[str, float] = field(default_factory=dict)
    error: str | None = None          # e.g. RewardFileNotFoundError, VerifierTimeoutError
    reason: str | None = None         # why the reward is what it is (always set when reward < 1)
    failed_tests: dict[str, str] = field(default_factory=dict)  # test id -> status (report.json)
    report: dict[str, Any] | None = None
    exit_code: int | None = None      # of test.sh (informational only)
    timed_out: bool = False
    duration_s: float = 0.0
    output_tail: str = ""             # end of test-stdout.txt
    flags: dict[str, list[str]] = field(default_factory=dict)  # hack:<kind> -> evidence
    infra: bool = False               # the verifier could not reach what it needed: not a reward

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RewardError(ValueError):
    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


def parse_reward_json(text: str) -> dict[str, float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RewardError("VerifierOutputParseError", f"reward.json is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not data:
        raise RewardError("VerifierOutputParseError", "reward.json must be a non-empty flat object {name: number}")
    out = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RewardError("VerifierOutputParseError", f"reward.json: value of {k!r} is not a finite number: {v!r}")
        out[str(k)] = float(v)
    return out


def parse_reward_txt(text: str) -> dict[str, float]:
    s = text.strip()
    if not s:
        raise RewardError("RewardFileEmptyError", "reward.txt is empty")
    try:
        v = float(s)
    except ValueError:
        raise RewardError("VerifierOutputParseError", f"reward.txt is not a number: {s[:80]!r}") from None
    if not math.isfinite(v):
        raise RewardError("VerifierOutputParseError", f"reward.txt is not finite: {s!r}")
    return {"reward": v}


def scalar_reward(rewards: dict[str, float]) -> float:
    """The training reward: ``reward`` when present, else the mean of all values."""
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def failed_tests_of(report: Any) -> dict[str, str]:
    if not isinstance(report, dict):
        return {}
    ft = report.get("failed_tests")
    if isinstance(ft, dict):
        return {str(k): str(v) for k, v in ft.items()}
    if isinstance(ft, list):
        return {str(t): "FAILED" for t in ft}
    out = {}
    for group in (report.get("tests_status") or {}).values():
        if isinstance(group, dict):
            for t in group.get("failure", []) or []:
                out[str(t)] = "FAILED"
    return out


def promises_report(task: Task) -> bool:
    """test.sh or a script beside it that test.sh runs (a parser, grade.py) writes ``report.json``: its
    absence means the grading toolchain did not run, not that the patch failed."""
    test_sh = (task.tests_dir / "test.sh").read_text(errors="replace")
    for p in task.tests_dir.iterdir():
        if p.is_file() and (p.name == "test.sh" or p.suffix in (".sh", ".py") and p.name in test_sh) \
                and "report.json" in p.read_text(errors="replace"):
            return True
    return False


def _tool_line(output: str) -> str:
    """The shell's complaint about the command that could not run (last such line of the log)."""
    lines = [ln.strip() for ln in output.splitlines()
             if "not found" in ln or "No such file" in ln or "Permission denied" in ln]
    return f": {lines[-1][-300:]}" if lines else ""


async def _exists(sandbox: Sandbox, path: str) -> bool:
    r = await sandbox.run(f"test -f {shlex.quote(path)}", timeout=30, cwd="/")
    return r.exit_code == 0


async def _read(sandbox: Sandbox, path: str, limit: int = 1_000_000) -> str:
    text = await sandbox.read_file(path)
    return text[:limit]


async def verify(sandbox: Sandbox, task: Task, timeout: float | None = None,
                 host_env: dict[str, str] | None = None) -> VerifyResult:
    """Grade the sandbox's current workspace with the task's tests (see module docstring)."""
    t_limit = float(timeout if timeout is not None else task.verifier_timeout)
    try:
        return await asyncio.wait_for(_verify(sandbox, task, t_limit, host_env), t_limit + 2 * SANDBOX_GRACE_S)
    except asyncio.TimeoutError:
        return VerifyResult(0.0, error="VerifierTimeoutError", timed_out=True,
                            reason=f"the sandbox did not return within {t_limit + 2 * SANDBOX_GRACE_S:.0f}s")
    except Exception as e:  # noqa: BLE001 - a verifier never crashes the caller
        return VerifyResult(0.0, error="SandboxError", reason=f"{type(e).__name__}: {e}")


async def _verify(sandbox: Sandbox, task: Task, t_limit: float, host_env: dict[str, str] | None) -> VerifyResult:
    # Empty the directories rather than removing them: in a sandbox they may be mount points.
    prep = await sandbox.run(f"mkdir -p {TESTS_DIR} {VERIFIER_DIR} && find {TESTS_DIR} {VERIFIER_DIR} -mindepth 1 "
                             "-delete",
                             timeout=60, cwd="/")
    if prep.exit_code != 0:
        return VerifyResult(0.0, error="SandboxError", reason=f"could not reset {VERIFIER_DIR}: {prep.output[-500:]}")
    await sandbox.upload_dir(str(task.tests_dir), TESTS_DIR)

    env = resolve_env(task.config.verifier.env, host_env)
    res = await sandbox.run(f"chmod +x {TESTS_DIR}/test.sh; bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt "
                            "2>&1",
                            timeout=t_limit, cwd="/workspace", env=env)
    result = VerifyResult(0.0, exit_code=None if res.timed_out else res.exit_code,
                          timed_out=res.timed_out, duration_s=res.duration_s)
    stdout_path = f"{VERIFIER_DIR}/test-stdout.txt"
    try:
        if await _exists(sandbox, stdout_path):
            result.output_tail = (await _read(sandbox, stdout_path))[-4000:]
    except Exception:  # noqa: BLE001 - the log is informational
        pass

    misses = await sandbox.run(f"cat {MIRROR_MISSES} 2>/dev/null; true", timeout=30, cwd="/")
    if misses.output.strip():
        urls = []
        for line in misses.output.strip().splitlines()[:5]:
            try:
                entry = json.loads(line)
                urls.append(f"{entry.get('url')} ({entry.get('why')})")
            except (json.JSONDecodeError, AttributeError):
                urls.append(line[:300])
        result.error, result.infra = "VerifierInfraError", True
        result.reason = "the verifier could not reach what it needed through the mirror: " + "; ".join(urls)
        return result

    if res.timed_out:
        result.error = "VerifierTimeoutError"
        result.reason = f"test.sh did not finish within {t_limit:g}s (verifier timeout)"
        return result

    if res.exit_code in TOOL_MISSING_EXIT:   # the grading toolchain could not run: not a reward
        result.error, result.infra = "VerifierInfraError", True
        result.reason = (f"test.sh exited {res.exit_code}: a command of the grading toolchain was "
                         f"{TOOL_MISSING_EXIT[res.exit_code]}{_tool_line(result.output_tail)}")
        return result

    report_path = f"{VERIFIER_DIR}/report.json"
    if await _exists(sandbox, report_path):
        try:
            result.report = json.loads(await _read(sandbox, report_path))
            result.failed_tests = failed_tests_of(result.report)
        except (json.JSONDecodeError, ValueError):
            result.report = None
    elif promises_report(task):
        result.error, result.infra = "VerifierInfraError", True
        result.reason = (f"test.sh exited {res.exit_code} without the {report_path} its parser writes: the "
                         f"grading toolchain did not run{_tool_line(result.output_tail)}")
        return result

    has_json = await _exists(sandbox, f"{VERIFIER_DIR}/reward.json")
    has_txt = await _exists(sandbox, f"{VERIFIER_DIR}/reward.txt")
    if has_json and has_txt:  # a test.sh writes one of them; the other came from somewhere else
        result.flags["hack:reward-file"] = [f"both {VERIFIER_DIR}/reward.json and reward.txt were written"]
    try:
        if has_json:
            rewards = parse_reward_json(await _read(sandbox, f"{VERIFIER_DIR}/reward.json"))
        elif has_txt:
            rewards = parse_reward_txt(await _read(sandbox, f"{VERIFIER_DIR}/reward.txt"))
        else:
            raise RewardError("RewardFileNotFoundError",
                              f"test.sh exited {res.exit_code} without writing {VERIFIER_DIR}/reward.json or "
                              "reward.txt")
    except RewardError as e:
        result.error, result.reason = e.kind, str(e)
        return result

    (lo, hi), policies = grading_policy(task.config.metadata)
    for name in (result.report or {}).get("hacks", []) if isinstance(result.report, dict) else []:
        result.flags.setdefault(str(name), list((result.report or {}).get("foreign_outputs", []))[:10])
    out_of_range = {k: v for k, v in rewards.items() if not lo <= v <= hi}
    if out_of_range:
        result.error = "RewardOutOfRangeError"
        result.reason = f"reward(s) {out_of_range} outside the task's range [{lo:g}, {hi:g}]"
        return result
    result.rewards = rewards
    result.reward = scalar_reward(rewards)
    zero = zeroing(result.flags, policies)
    if zero:
        result.reward = 0.0
        result.reason = f"reward 0: {', '.join(zero)} ({'; '.join(result.flags[zero[0]][:3])})"
    elif result.reward < 1.0:
        if isinstance(result.report, dict) and result.report.get("reason"):
            result.reason = str(result.report["reason"])
        elif result.failed_tests:
            result.reason = f"failing tests: {', '.join(list(result.failed_tests)[:10])}"
        else:
            result.reason = f"test.sh wrote reward {result.reward:g} (exit code {res.exit_code})"
    return result

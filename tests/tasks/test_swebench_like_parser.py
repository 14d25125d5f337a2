"""parser.py of the stand-in SWE-bench tasks (services/tasks/sources/swebench_like.py) grades like SWE-bench:
resolved iff every FAIL_TO_PASS test passed and every PASS_TO_PASS test passed; a test missing from
the log is a failure (not a silent success); a crash is exit 2 (no reward), never 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from services.tasks.sources import swebench_like as sl

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "datasets" / "swebench-verified-like" / "psf__requests-90003"


def _grade(tmp_path: Path, lines: list[str], record: Path = TASK / "tests" / "config.json") -> tuple[int, dict]:
    log = tmp_path / "log"
    rec = json.loads(record.read_text())
    log.write_text(f"+ : '>>>>> Start Test Output'\n{chr(10).join(lines)}\n+ : '>>>>> End Test Output'\n")
    code = sl.PARSER_PY.replace('REPORT = "/logs/verifier/report.json"', f'REPORT = "{tmp_path}/report.json"')
    (tmp_path / "parser.py").write_text(code)
    r = subprocess.run([sys.executable, str(tmp_path / "parser.py"), str(log)], capture_output=True, text=True,
                       env={**os.environ, "SWEBENCH_RECORD": str(record)})
    report = json.loads((tmp_path / "report.json").read_text()) if (tmp_path / "report.json").exists() else {}
    return r.returncode, report.get(rec["instance_id"], {})


def test_parser_resolution(tmp_path):
    rec = json.loads((TASK / "tests" / "config.json").read_text())
    f2p, p2p = json.loads(rec["FAIL_TO_PASS"]), json.loads(rec["PASS_TO_PASS"])
    rc, rep = _grade(tmp_path, [f"PASSED {t}" for t in f2p + p2p])
    assert rc == 0 and rep["resolved"] is True
    rc, rep = _grade(tmp_path, [f"FAILED {t}" for t in f2p] + [f"PASSED {t}" for t in p2p])
    assert rc == 1 and rep["resolved"] is False
    rc, rep = _grade(tmp_path, [f"PASSED {t}" for t in f2p + p2p[1:]])     # a PASS_TO_PASS test did not run
    assert rc == 1 and rep["tests_status"]["PASS_TO_PASS"]["failure"] == p2p[:1]
    rc, rep = _grade(tmp_path, [f"PASSED {t}" for t in p2p])                # the failing test was deleted
    assert rc == 1 and rep["resolved"] is False


def test_parser_crash_is_exit_2(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"instance_id": "x__y-1", "repo": "no/such-repo"}))
    rc, rep = _grade(tmp_path, ["PASSED a"], bad)
    assert rc == 2 and rep == {}

# /// script
# requires-python = ">=3.9"
# dependencies = [
#   "swebench==4.1.0",
#   "datasets==2.16.1",
# ]
# ///
"""Grade the test log with swebench's own code (Harbor SWE-bench adapter contract).

Reads the SWE-bench record from /tests/config.json and the log of the eval script, grades
FAIL_TO_PASS / PASS_TO_PASS with swebench's get_logs_eval / get_eval_tests_report and writes
/logs/verifier/report.json. Exit 0: resolved; 1: not resolved; 2: could not grade (for example
swebench could not fetch what make_test_spec needs): test.sh then writes no reward, an infra error.
"""
import json
import os
import sys
import traceback

LOG = sys.argv[1] if len(sys.argv) > 1 else "/logs/verifier/test-output.log"
CONFIG = os.environ.get("SWEBENCH_RECORD", "/tests/config.json")
REPORT = "/logs/verifier/report.json"


def main() -> int:
    from swebench.harness.constants import FAIL_ONLY_REPOS, FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.test_spec.test_spec import make_test_spec

    with open(CONFIG) as f:
        record = json.load(f)
    spec = make_test_spec(record)
    status, found = get_logs_eval(spec, LOG)
    iid = record["instance_id"]
    report = {iid: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": found,
                    "resolved": False}}
    if found:
        gold = {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS}
        mode = EvalType.FAIL_ONLY if record["repo"] in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
        tests = get_eval_tests_report(status, gold, eval_type=mode)
        report[iid]["tests_status"] = tests
        report[iid]["resolved"] = get_resolution_status(tests) == ResolvedStatus.FULL.value
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        json.dump(report, f, indent=2)
    print(("RESOLVED" if report[iid]["resolved"] else "NOT RESOLVED") + f" {iid}")
    return 0 if report[iid]["resolved"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - anything here means "could not grade", never "wrong fix"
        traceback.print_exc()
        print("GRADING ERROR: the log could not be graded (see above)", file=sys.stderr)
        sys.exit(2)

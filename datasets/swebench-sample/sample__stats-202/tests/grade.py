"""Grade a pytest -rA log against the SWE-bench record (SWE-bench's get_eval_tests_report):
resolved iff every FAIL_TO_PASS test passed and every PASS_TO_PASS test still passed."""
import json
import re
import sys

log_path, config_path, report_path = sys.argv[1:4]
config = json.load(open(config_path))
status = {}
for line in open(log_path, errors="replace"):
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line.strip())
    if m:
        status[m.group(2)] = m.group(1)
report = {}
for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
    tests = config[group]
    ok = [t for t in tests if status.get(t) in ("PASSED", "XFAIL")]
    report[group] = {"success": ok, "failure": [t for t in tests if t not in ok]}
resolved = not report["FAIL_TO_PASS"]["failure"] and not report["PASS_TO_PASS"]["failure"]
out = {config["instance_id"]: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True,
                               "resolved": resolved, "tests_status": report}}
json.dump(out, open(report_path, "w"), indent=2)
print("resolved" if resolved else "not resolved", json.dumps(report))
sys.exit(0 if resolved else 1)

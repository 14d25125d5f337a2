#!/bin/bash
# Verifier of an SWE-style task: restore the task's test files over /workspace, run them, and
# grade FAIL_TO_PASS / PASS_TO_PASS (reward 1 only if all pass). Writes /logs/verifier/reward.txt
# and report.json. Needs a Python with pytest: $LTS_PYTHON, else python3 on PATH.
mkdir -p /logs/verifier
cd /workspace
"${LTS_PYTHON:-python3}" /tests/grade.py --config /tests/config.json --files /tests/files --workspace /workspace --out /logs/verifier

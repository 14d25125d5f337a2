#!/bin/bash
# Verifier of an SWE-style task: restore the task's test files over /workspace, run them, and
# grade FAIL_TO_PASS / PASS_TO_PASS (reward 1 only if all pass). Writes /logs/verifier/reward.txt
# and report.json. Needs python3 with pytest on PATH.
mkdir -p /logs/verifier
cd /workspace
python3 /tests/grade.py --config /tests/config.json --files /tests/files --workspace /workspace --out /logs/verifier

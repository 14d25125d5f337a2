"""Harbor task library (docs/tasks.md).

task.py        load_task / load_dataset, TaskError (file + field)
config.py      task.toml schema (Harbor TaskConfig 1.4)
verifier.py    verify(sandbox, task) -> VerifyResult (reward files, timeouts, report.json)
grading.py     SWE-bench-style FAIL_TO_PASS / PASS_TO_PASS grader from JUnit XML (copied into tasks as tests/grade.py)
cleangrade.py  the agent's patch out of its sandbox, graded in a fresh sandbox from the task's base
hacks.py       hack:<kind> flags of a patch, per-task grading policy (reward range, flag policies)
workspace.py   scrubbed single-commit workspace bases, history leak checks
prepare.py     validate_task (gold = 1, empty = 0, no leak), prepare_tasks + manifest
swe.py         writer of SWE-style task dirs
adapters.py    SWE-bench / R2E-Gym instance -> task dir
synth.py       seeded bug injection into any local Python repo
micro.py       the built-in micro set (specs + generator); real.py: the real set recipe runner
hostsandbox.py dev/test Sandbox over a temp dir (NO isolation)
cli.py         prepare_sandbox.py
"""

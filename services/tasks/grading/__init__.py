"""Grading: a task's reward in a sandbox (docs/tasks.md "Verifier", "Grading rollouts").

verifier.py    verify(sandbox, task) -> VerifyResult (test.sh, reward files, timeouts, report.json, flags)
grade.py       SWE-bench-style FAIL_TO_PASS / PASS_TO_PASS grader from JUnit XML, standard library only: copied
               verbatim into SWE-style tasks as tests/grade.py and run inside the sandbox
cleangrade.py  the agent's patch out of its sandbox, graded in a fresh sandbox from the task's base
hacks.py       hack:<kind> flags of a patch (the per-task policy is the schema's: task_toml.grading_policy)
network.py     the network each phase of a task gets (agent, verifier)
bases.py       what a sandbox is made from: a base dir or an ImageRef (the scrubbed task image); SandboxFactory

Imports only the schema (task.py, task_toml.py) and services/common; preparation and the CLI import it.
"""

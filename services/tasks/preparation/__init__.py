"""Preparation: task dirs -> sandbox bases, validated (docs/tasks.md "Workspace bases and integrity").

workspace.py   scrubbed single-commit workspace bases, history leak checks
prepare.py     validate_task (gold = 1, empty = 0, no leak, the delete-the-test probe), prepare_tasks, base_of
manifest.py    <out>/manifest.json (load / save)
hostsandbox.py dev/test Sandbox over a temp dir (NO isolation)

Imports grading (validation runs the verifier and clean grading), the schema, services/common and the sandbox
manager's public docker_images; sources and the CLI import it.
"""

"""Harbor task library (docs/tasks.md "Layout"). Imports point one way, down this list:

cli.py, __main__.py  prepare_sandbox.py / python -m services.tasks: a table of commands (name -> handler)
harbor_env.py        the sandbox manager as a Harbor environment (harbor run -e services.tasks.harbor_env:...)
sources/             what writes task dirs: the built-in sets' generators (TaskSource), synth, real, adapters, fetch
preparation/         task dirs -> scrubbed bases, validated (gold = 1, empty = 0, no history leak), manifest
grading/             a task's reward in a sandbox: verifier, in-sandbox grader, clean grading, hack flags, network
task.py, task_toml.py  the schema: load_task / load_dataset / Task / TaskError (task.py: the public module other
                     services import), the task.toml model and its [metadata.grading] policy

The task library uses the sandbox manager only through its public modules (services.sandbox.client,
services.sandbox.docker_images); services/sandbox imports nothing of it.
"""

"""The client side of the ModelService (services/modelservice): the drivers that run a black-box agent
(mini-swe-agent) on a task in a sandbox against it (agent_runner.py; rock_pull.py for ROCK's pull transport),
serving it inside the recipe's process for ``run.sh rollout|grpo --agent mini-swe-agent``. See docs/modelservice.md.
"""

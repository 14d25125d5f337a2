"""ModelService: an OpenAI-compatible chat endpoint for black-box agents running in sandboxes.

Requests are rendered with the model's chat template, sampled through the official tinker SDK
against our backend, and recorded per session and turn token-exactly (prompt ids, sampled ids,
logprobs) as ``cookbook.agent.trajectory`` segments, so black-box rollouts train with the same
code as the client-side agent. A client of the backend and the sandbox manager, so it lives on the
client side; ``run.sh rollout|grpo --agent mini-swe-agent`` serves it inside the recipe's process
(agent_runner.py). See docs/modelservice.md.
"""

"""ModelService: an OpenAI-compatible chat endpoint for black-box agents running in sandboxes.

Requests are rendered with the model's chat template, sampled through the official tinker SDK
against our backend, and recorded per session and turn token-exactly (prompt ids, sampled ids,
logprobs) as ``services.common.trajectory`` segments, so black-box rollouts train with the same
code as the client-side agent. A service of its own (process, port, config/modelservice.yaml:
``python -m services.modelservice``, ``serve.sh modelservice``); the drivers that run an agent against
it (``cookbook/modelservice``: mini-swe-agent in a sandbox, ROCK's pull transport) are clients of it
and serve it inside a recipe's process. See docs/modelservice.md.
"""

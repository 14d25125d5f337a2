"""The three consumers of services/common/renderers render one conversation to the same prompt tokens: the agent
(``SWEAgent.render``), the ModelService (a session's first call through its ``Recorder``: its lenient reading,
budgets and renderer) and the backend (``/oai/api/v1/chat/completions``: its strict reading and the model's
template, ``prompt_token_ids`` of the answer), with the tiny model's tokenizer; and the agent and the
ModelService also agree for a ChatML template without tools (the folded format)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from transformers import AutoTokenizer

from cookbook.agent.agent import SampleOut, SWEAgent
from services.common.budgets import Budgets
from services.common.renderers import FoldedChatMLRenderer, Qwen3Renderer, normalize_messages, renderer_for
from services.models.tokenizer import build_hf_tokenizer
from services.modelservice.budget import BudgetGuard
from services.modelservice.sessions import Recorder, Session

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a bash command",
                                           "parameters": {"type": "object", "required": ["command"],
                                                          "properties": {"command": {"type": "string"}}}}}]
# arguments as compact JSON text: a reader that passed the string through would render it unlike the template's
# ``tojson`` of the object (the divergence this test exists to catch)
RAW = [{"role": "developer", "content": "You fix bugs."},
       {"role": "user", "content": [{"type": "text", "text": "Fix clamp.py "}, {"type": "text", "text": "(é)."}]},
       {"role": "assistant", "content": "Let me look.", "tool_calls": [
           {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"cat clamp.py"}'}},
           {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}]},
       {"role": "tool", "tool_call_id": "c1", "content": "def clamp(x):\n    return x"},
       {"role": "tool", "tool_call_id": "c2", "content": "clamp.py"},
       {"role": "user", "content": "Continue."}]
PLAIN_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                "{% endif %}")


class _Recording:
    """The ModelService's sampler: keeps the prompt it is given."""

    def __init__(self, eos: int):
        self.eos, self.prompts = eos, []

    async def sample(self, prompt, max_tokens, stop, **kw):
        self.prompts.append(list(prompt))
        return SampleOut([self.eos], [-0.1], "stop")


def _agent_tokens(tok) -> list[int]:
    agent = SWEAgent(policy=None, tokenizer=tok)    # only its rendering is used
    return agent.render(normalize_messages(RAW), TOOLS)


def _modelservice_tokens(tok) -> list[int]:
    sampler = _Recording(renderer_for(tok).eos_id)
    rec = Recorder(renderer_for(tok), sampler, BudgetGuard(Budgets()))
    asyncio.run(rec.complete(Session(id="same"), {"messages": RAW, "tools": TOOLS}))
    return sampler.prompts[0]


def _backend_tokens(backend) -> list[int]:
    r = httpx.post(backend.url + "/oai/api/v1/chat/completions", headers={"Authorization": f"Bearer {backend.key}"},
                   json={"model": backend.model, "messages": RAW, "tools": TOOLS, "max_tokens": 1, "seed": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["prompt_token_ids"]


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model[1]))


def test_agent_modelservice_and_backend_render_the_same_tokens(backend, tok):
    assert isinstance(renderer_for(tok), Qwen3Renderer)
    agent, ms, be = _agent_tokens(tok), _modelservice_tokens(tok), _backend_tokens(backend)
    text = tok.decode(agent, skip_special_tokens=False)
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "cat clamp.py"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\ndef clamp(x):\n    return x\n</tool_response>\n<tool_response>" in text
    assert agent == ms, "the agent and the ModelService render the conversation differently"
    assert agent == be, "the agent and the backend render the conversation differently"


def test_agent_and_modelservice_agree_on_a_template_without_tools():
    tok = build_hf_tokenizer(chat_template=PLAIN_CHATML)
    assert isinstance(renderer_for(tok), FoldedChatMLRenderer)
    agent, ms = _agent_tokens(tok), _modelservice_tokens(tok)
    text = tok.decode(agent, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\nYou can call these tools")
    assert json.dumps({"name": "bash", "arguments": {"command": "cat clamp.py"}}) in text
    assert agent == ms

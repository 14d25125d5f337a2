"""Tenant rules on the OpenAI- and Anthropic-compatible endpoints (docs/security.md): the same keys as the
SDK routes (``Authorization: Bearer`` or ``X-API-Key``); a tenant samples its own checkpoints, another
tenant's answer 404 (as on /api/v1), base models are everyone's."""

from __future__ import annotations

import anthropic
import openai
import pytest
import tinker
from tinker import types

from helpers import BackendProc

ALICE, BOB = "tml-alice-oai", "tml-bob-oai"
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tenants(tmp_path_factory, tiny_model):
    b = BackendProc(tmp_path_factory.mktemp("oai-tenants"))
    b.extra = {"backend": {"api_keys": [{"key": ALICE, "owner": "alice"}, {"key": BOB, "owner": "bob"}]}}
    b.start()
    yield b
    b.stop()


def test_a_tenant_samples_only_its_own_checkpoints(tenants):
    b = tenants
    tc = tinker.ServiceClient(base_url=b.url, api_key=ALICE).create_lora_training_client(base_model=b.model, rank=4)
    path = tc.save_weights_for_sampler("mine").result(timeout=120).path
    alice = openai.OpenAI(base_url=b.url + "/oai/api/v1", api_key=ALICE, max_retries=0)
    bob = openai.OpenAI(base_url=b.url + "/oai/api/v1", api_key=BOB, max_retries=0)
    assert alice.chat.completions.create(model=path, messages=MSG, max_tokens=2).usage.completion_tokens > 0
    for model in (path, f"{b.model};{path}"):
        with pytest.raises(openai.NotFoundError):
            bob.chat.completions.create(model=model, messages=MSG, max_tokens=2)
        with pytest.raises(openai.NotFoundError):
            bob.completions.create(model=model, prompt="x", max_tokens=2)
    claude_bob = anthropic.Anthropic(base_url=b.url + "/anthropic/api", api_key=BOB, max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        claude_bob.messages.create(model=path, max_tokens=2, messages=MSG)
    assert bob.chat.completions.create(model=b.model, messages=MSG, max_tokens=2).choices   # base models: everyone
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=b.url + "/oai/api/v1", api_key="tml-nobody", max_retries=0).chat.completions.create(
            model=b.model, messages=MSG, max_tokens=2)
    sc = tinker.ServiceClient(base_url=b.url, api_key=ALICE).create_sampling_client(model_path=path)
    ref = sc.sample(types.ModelInput.from_ints([5, 6, 7]), 1,
                    types.SamplingParams(max_tokens=3, seed=1, stop=[])).result(timeout=60).sequences[0].tokens
    got = alice.completions.create(model=path, prompt=[5, 6, 7], max_tokens=3, seed=1, stop=[])
    assert got.model_dump()["choices"][0]["token_ids"] == ref

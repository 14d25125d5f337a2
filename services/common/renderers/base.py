"""What every chat format shares: OpenAI request messages and tools -> the plain dicts a chat template
renders, the :class:`Renderer` base (one subclass per format module), and sampled tokens -> answer text.

* :func:`normalize_messages` / :func:`normalize_tools`: one reader, two readings (``strict``). The backend's
  OpenAI-/Anthropic-compatible endpoints read a request strictly (tool calls a list of
  ``{"function": {"name", "arguments"}}``, arguments a JSON object, else a 400; a tool message keeps its
  ``tool_call_id`` and ``name``). The ModelService reads a session's history leniently, as the agent sent it
  (arguments that are not a JSON object stay the string sent; every call keeps its id or gets ``call_<j>``;
  a tool message keeps only a non-empty ``tool_call_id``): the form its budgets count and its trajectories
  record, and in which histories are compared across turns (:func:`message_key`: ids never matter).
* :class:`Renderer`: the model's own chat template (``apply_chat_template``) -> text -> token ids and back,
  thread-safe; a format module says what the template is given (:meth:`Renderer.prepare`).
* :func:`completion_text`, :func:`stream_pieces`: sampled tokens -> the text an answer shows, and that text
  cut at token boundaries for streaming.
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar

ROLES = ("system", "user", "assistant", "tool")
TEXT_PARTS = ("text", "input_text", "output_text")


class BadRequest(ValueError):
    """Messages or tools the chat format refuses (each service answers it as an HTTP 400)."""


# ---------------------------------------------------------------------- messages -> what a template renders
def text_content(content: Any, where: str) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
                parts.append(p["text"])
            else:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise BadRequest(f"{where}: only text content parts are supported, got {kind!r}")
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _arguments(args: Any, where: str, strict: bool) -> Any:
    """Tool-call arguments as the template renders them: a JSON object string becomes a dict (rendered with
    ``tojson``, as the model writes it). Not a JSON object: strict refuses it, lenient keeps the string."""
    if isinstance(args, dict):
        return args
    if not isinstance(args, str):
        raise BadRequest(f"{where}: function.arguments must be a JSON object" if strict
                         else "tool call arguments must be a JSON string or an object")
    try:
        obj = json.loads(args) if args.strip() else {}
    except json.JSONDecodeError as e:
        if strict:
            raise BadRequest(f"{where}: function.arguments is not valid JSON: {e}") from e
        return args
    if isinstance(obj, dict):
        return obj
    if strict:
        raise BadRequest(f"{where}: function.arguments must be a JSON object")
    return args


def _tool_calls(calls: Any, where: str, strict: bool) -> list[dict[str, Any]]:
    if strict and not isinstance(calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list")
    out = []
    for j, c in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if strict:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise BadRequest(f"{at}: a tool call must be {{'type': 'function', 'function': {{'name', "
                                 "'arguments'}}")
            out.append({"type": "function",
                        "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", "{}"), at, True)}})
        else:
            fn = (c or {}).get("function") or c or {}
            if not isinstance(fn.get("name"), str):
                raise BadRequest(f"{at} has no function name")
            out.append({"id": c.get("id") or f"call_{j}", "type": "function",
                        "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}), at, False)}})
    return out


def normalize_messages(messages: Any, *, strict: bool = False) -> list[dict[str, Any]]:
    """OpenAI chat messages as the chat template reads them (the two readings: the module doc)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BadRequest(f"{where} must be an object")
        role = m.get("role")
        role = "system" if role == "developer" else role
        if role not in ROLES:
            raise BadRequest(f"{where}.role must be system, developer, user, assistant or tool, got {role!r}")
        msg: dict[str, Any] = {"role": role, "content": text_content(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], where, strict)
        if role == "tool":
            call_id = m.get("tool_call_id")
            if (call_id is not None) if strict else call_id:
                msg["tool_call_id"] = str(call_id)
            if strict and m.get("name") is not None:
                msg["name"] = str(m["name"])
        out.append(msg)
    return out


def normalize_tools(tools: Any, *, strict: bool = False) -> list[dict[str, Any]] | None:
    """Function tools (None for none). Strict: each ``{"type": "function", "function": {...}}``, returned as
    sent; lenient: a bare function spec is accepted too, each returned as ``{"type": "function", "function"}``."""
    if tools is None or tools == [] or (not strict and not tools):
        return None
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list")
    out = []
    for i, t in enumerate(tools):
        if strict:
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(fn, dict) or t.get("type", "function") != "function" or not isinstance(fn.get("name"),
                                                                                                      str):
                raise BadRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{'name', 'description', "
                                 "'parameters'}}}}")
            continue
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{i}] must be an object")
        if t.get("type", "function") != "function":
            raise BadRequest(f"tools[{i}]: only function tools are supported")
        fn = t.get("function") if "function" in t else t
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"tools[{i}] has no function name")
        out.append({"type": "function", "function": fn})
    return tools if strict else out


def message_key(m: dict[str, Any]) -> tuple:
    """What must be equal for two (normalised) messages to render the same; ids do not count."""
    calls = tuple((c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True, ensure_ascii=False))
                  for c in m.get("tool_calls") or [])
    return (m["role"], m.get("content") or "", calls)


# ---------------------------------------------------------------------- the renderer base
class Renderer:
    """A chat format over a tokenizer: the model's own chat template renders whole prompts (also right for
    a template that differs in details a format module does not spell out); a format module says what the
    template gets (:meth:`prepare`) and owns the special tokens and the tool-call text of its format.
    Thread-safe (the ModelService renders in worker threads)."""

    name: ClassVar[str] = ""
    eos_id: int             # the token that ends an assistant turn (set by each format's __init__)
    eos_text: str           # its text
    stop_ids: list[int]     # the tokens the sampler stops on

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self._lock = threading.Lock()

    @classmethod
    def fits(cls, tokenizer: Any) -> bool:
        """Whether this format is the one for ``tokenizer``'s chat template."""
        raise NotImplementedError

    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and tools the template is given (the format's own rewriting)."""
        return messages, tools

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (and ``tools``) in the model's own chat template."""
        messages, tools = self.prepare(messages, tools)
        with self._lock:
            return self.tok.apply_chat_template(messages, tools=tools or None,
                                                add_generation_prompt=add_generation_prompt, tokenize=False)

    def encode(self, text: str) -> list[int]:
        with self._lock:
            return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        with self._lock:
            return self.tok.decode(ids, skip_special_tokens=False)


def template_prompt_tokens(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt token ids with the tokenizer's chat template exactly as given (no format's rewriting: the
    backend's endpoints serve any model's template) and the generation prompt."""
    if not getattr(tok, "chat_template", None):
        raise BadRequest("this model's tokenizer has no chat template: use /completions with a prompt")
    try:
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # noqa: BLE001 (a template's own error message, e.g. a role order it refuses)
        raise BadRequest(f"the model's chat template refused these messages: {type(e).__name__}: {e}") from e
    return list(tok.encode(text, add_special_tokens=False))


# ---------------------------------------------------------------------- sampled tokens -> text
def completion_text(tok: Any, tokens: list[int], eos_ids: set[int], stops: list[str]) -> str:
    """The text of sampled tokens as an OpenAI answer shows it: a final EOS token dropped and the text
    cut before the first stop string (the sampler includes the tokens that completed the match)."""
    if tokens and tokens[-1] in eos_ids:
        tokens = tokens[:-1]
    text = tok.decode(tokens, skip_special_tokens=False)
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


def stream_pieces(tok: Any, tokens: list[int], text: str) -> list[str]:
    """``text`` cut at token boundaries (for streaming): each piece is the decoded text of the next
    tokens where that is a clean prefix of what remains; their concatenation is exactly ``text``."""
    pieces: list[str] = []
    done, start = 0, 0
    for i in range(1, len(tokens) + 1):
        piece = tok.decode(tokens[start:i], skip_special_tokens=False)
        if not piece or piece.endswith("\ufffd"):
            continue
        if not text.startswith(piece, done):
            break
        pieces.append(piece)
        done += len(piece)
        start = i
    if done < len(text):
        pieces.append(text[done:])
    return pieces

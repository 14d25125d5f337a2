"""The agent's tools. Each runs inside the rollout's sandbox through the Sandbox protocol
(services/common/sandbox_api.py); bad arguments come back as an error observation."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from services.common.sandbox_api import Sandbox

WORKSPACE = "/workspace"


class ToolError(Exception):
    """A problem the model caused (bad path, missing argument...): shown to it, never raised further."""


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[["ToolBox", dict[str, Any]], Awaitable[str]]

    def schema(self, compact: bool = False) -> dict[str, Any]:
        """OpenAI function schema. ``compact`` drops parameter descriptions and keeps the first
        sentence of the description: about a third of the tokens, for small models."""
        if not compact:
            return {"type": "function",
                    "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}
        props = {k: {"type": v["type"]} for k, v in self.parameters["properties"].items()}
        return {"type": "function",
                "function": {"name": self.name, "description": self.description.split(":")[0].split(".")[0],
                                                 "parameters": {"type": "object", "properties": props}}}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


def _s(desc: str) -> dict[str, str]:
    return {"type": "string", "description": desc}


def _i(desc: str) -> dict[str, str]:
    return {"type": "integer", "description": desc}


def resolve_path(path: Any, must_be_file: bool = False) -> str:
    """Map a tool path argument to an absolute path inside /workspace, or raise ToolError."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty string")
    p = path.strip()
    full = posixpath.normpath(p if p.startswith("/") else posixpath.join(WORKSPACE, p))
    if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
        raise ToolError(f"path {path!r} is outside the workspace ({WORKSPACE})")
    return full


def _int(args: dict[str, Any], key: str, default: int | None = None) -> int:
    v = args.get(key, default)
    if v is None:
        raise ToolError(f"missing argument {key!r}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ToolError(f"argument {key!r} must be an integer, got {v!r}") from None


class ToolBox:
    """The tools of one rollout, bound to its sandbox."""

    def __init__(self, sandbox: Sandbox, names: list[str] | None = None, command_timeout_s: float = 120.0,
                 max_output_chars: int = 12000, test_command: str = "python -m pytest -q -x -p no:cacheprovider",
                 compact_schemas: bool = False):
        self.sandbox = sandbox
        self.compact = compact_schemas
        self.tools = {n: TOOLS[n] for n in (names or list(TOOLS))}
        unknown = set(names or []) - set(TOOLS)
        if unknown:
            raise ValueError(f"unknown tool(s) {sorted(unknown)}; available: {sorted(TOOLS)}")
        self.command_timeout_s = command_timeout_s
        self.max_output_chars = max_output_chars
        self.test_command = test_command
        self.submitted = False

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema(self.compact) for t in self.tools.values()]

    async def call(self, name: str, args: dict[str, Any]) -> str:
        tool = self.tools.get(name)
        if tool is None:
            return f"Error: unknown tool {name!r}; available: {', '.join(self.tools)}"
        try:
            return await tool.run(self, args)
        except ToolError as e:
            return f"Error: {e}"

    async def sh(self, cmd: str, timeout: float | None = None) -> str:
        r = await self.sandbox.run(cmd, timeout=timeout or self.command_timeout_s, max_output=self.max_output_chars * 2)
        out = r.output
        if r.timed_out:
            out += f"\n[command timed out after {timeout or self.command_timeout_s:.0f}s and was killed]"
        elif r.exit_code != 0:
            out += f"\n[exit code {r.exit_code}]"
        return out if out.strip() else "(no output)"


# ------------------------------------------------------------------------------ tools
async def _bash(tb: ToolBox, a: dict[str, Any]) -> str:
    cmd = a.get("command")
    if not isinstance(cmd, str) or not cmd.strip():
        raise ToolError("missing argument 'command'")
    return await tb.sh(cmd)


async def _read(tb: ToolBox, a: dict[str, Any]) -> str:
    path = resolve_path(a.get("path"))
    start = _int(a, "start_line", 1)
    end = _int(a, "end_line", start + 199)
    if start < 1 or end < start:
        raise ToolError("need 1 <= start_line <= end_line")
    q = shlex.quote(path)
    return await tb.sh(f"test -f {q} || {{ echo 'no such file: {path}'; exit 1; }}; "
                       f"awk 'NR>={start} && NR<={end} {{printf \"%d: %s\\n\", NR, $0}}' {q}")


async def _search(tb: ToolBox, a: dict[str, Any]) -> str:
    pattern = a.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("missing argument 'pattern'")
    path = resolve_path(a.get("path", "."))
    return await tb.sh(f"grep -rn --exclude-dir=.git -- {shlex.quote(pattern)} {shlex.quote(path)} | head -n 100")


async def _find_file(tb: ToolBox, a: dict[str, Any]) -> str:
    name = a.get("name")
    if not isinstance(name, str) or not name:
        raise ToolError("missing argument 'name'")
    path = resolve_path(a.get("path", "."))
    return await tb.sh(f"find {shlex.quote(path)} -name {shlex.quote(name)} -not -path '*/.git/*' | head -n 100")


async def _list_dir(tb: ToolBox, a: dict[str, Any]) -> str:
    path = resolve_path(a.get("path", "."))
    return await tb.sh(f"ls -1ap {shlex.quote(path)} | grep -v -x -e './' -e '../' -e '.git/'")


async def _edit(tb: ToolBox, a: dict[str, Any]) -> str:
    """str-replace mode (old_str/new_str) or line mode (line [, end_line], new)."""
    path = resolve_path(a.get("path"))
    try:
        text = await tb.sandbox.read_file(path)
    except Exception as e:  # noqa: BLE001  (missing file, directory, binary...)
        raise ToolError(f"cannot read {path}: {e}") from None
    if "old_str" in a:
        old, new = a.get("old_str"), a.get("new_str", "")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ToolError("old_str must be a non-empty string and new_str a string")
        n = text.count(old)
        if n != 1:
            raise ToolError(f"old_str occurs {n} times in {path}; it must occur exactly once")
        text = text.replace(old, new, 1)
        first = text[: text.index(new)].count("\n") + 1 if new else 1
    elif "line" in a:
        line = _int(a, "line")
        end = _int(a, "end_line", line)
        new = a.get("new", a.get("new_str"))
        if not isinstance(new, str):
            raise ToolError("line mode needs 'new' (the replacement text)")
        lines = text.split("\n")
        if not 1 <= line <= end <= len(lines):
            raise ToolError(f"line range {line}-{end} is outside the file (1-{len(lines)})")
        lines[line - 1: end] = new.split("\n")
        text = "\n".join(lines)
        first = line
    else:
        raise ToolError("edit needs either old_str/new_str or line/new")
    await tb.sandbox.write_file(path, text)
    lines = text.split("\n")
    lo, hi = max(1, first - 2), min(len(lines), first + 2)
    snippet = "\n".join(f"{i}: {lines[i - 1]}" for i in range(lo, hi + 1))
    return f"Edited {path}. Lines {lo}-{hi} now:\n{snippet}"


async def _run_test(tb: ToolBox, a: dict[str, Any]) -> str:
    target = a.get("test", "")
    if target and not isinstance(target, str):
        raise ToolError("test must be a string (a pytest node id or file)")
    if target:
        resolve_path(target.split("::")[0])
    return await tb.sh(f"{tb.test_command} {shlex.quote(target) if target else ''}".strip())


async def _submit(tb: ToolBox, a: dict[str, Any]) -> str:
    tb.submitted = True
    return "Submitted."


TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("bash", "Run a bash command in the repository.", _obj({"command": _s("the command")}, ["command"]), _bash),
    Tool("read", "Show lines of a file with line numbers.",
         _obj({"path": _s("file path"), "start_line": _i("first line (default 1)"), "end_line": _i("last line")},
              ["path"]), _read),
    Tool("search", "grep -rn a pattern.", _obj({"pattern": _s("regex"), "path": _s("where (default .)")}, ["pattern"]),
         _search),
    Tool("find_file", "Find files by name.", _obj({"name": _s("glob, e.g. *.py"), "path": _s("where")}, ["name"]),
         _find_file),
    Tool("list_dir", "List a directory.", _obj({"path": _s("directory (default .)")}, []), _list_dir),
    Tool("edit", "Edit a file: replace old_str by new_str, or replace line (to end_line) by new.",
         _obj({"path": _s("file path"), "old_str": _s("exact text to replace"), "new_str": _s("replacement"),
               "line": _i("line number"), "end_line": _i("last line replaced"), "new": _s("new line text")}, ["path"]),
         _edit),
    Tool("run_test", "Run the tests (or one test).", _obj({"test": _s("pytest node id or file (optional)")}, []),
         _run_test),
    Tool("submit", "Submit your fix (ends the episode).", _obj({}, []), _submit),
]}

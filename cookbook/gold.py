"""Gold trajectories: a task's known fix as the agent's tool calls (solution/edit.json of micro tasks, or the
gold patch's hunks as str-replace edits, their context trimmed to what makes each edit unique), replayed by
``ScriptedPolicy`` through the real agent for SFT (cookbook/train.py) and tests."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

from unidiff import PatchSet

from services.common.renderers.qwen3 import tool_call_text
from services.tasks.task import Task

from .agent.scripted import gold_turns


def gold_turns_for(task: Task, tools: list[str] | None = None, max_turns: int | None = None) -> list[str]:
    """The gold trajectory as tool calls: solution/edit.json (micro tasks) or the gold patch's
    hunks as str-replace edits; read each file first (when ``tools`` has read), then submit (when
    it has submit). One call per assistant turn, or all calls in one message when the agent has
    fewer turns."""
    turns = _gold_calls(task, tools)
    if max_turns is not None and len(turns) > max_turns:
        return ["\n".join(turns)]
    return turns


def _gold_calls(task: Task, tools: list[str] | None) -> list[str]:
    read, submit, bash = (tools is None or name in tools for name in ("read", "submit", "bash"))
    edit_json = task.solution_dir / "edit.json"
    if edit_json.exists():
        return gold_turns(json.loads(edit_json.read_text()), read=read, submit=submit)
    diff = gold_patch(task)
    turns: list[str] = []
    for path, old, new in _hunks(diff, lambda rel: _base_text(task, rel)):
        if old is None:   # a new file: only a shell can create it
            if not bash:
                raise ValueError(f"{task.name}: the gold patch creates {path}; its gold trajectory needs the bash tool")
            turns.append(tool_call_text("bash", {"command": f"mkdir -p \"$(dirname {shlex.quote(path)})\" && "
                                                 f"cat > {shlex.quote(path)} <<'LTS_EOF'\n{new}LTS_EOF"}))
            continue
        if read and tool_call_text("read", {"path": path}) not in turns:
            turns.append(tool_call_text("read", {"path": path}))
        turns.append(tool_call_text("edit", {"path": path, "old_str": old, "new_str": new}))
    return turns + ([tool_call_text("submit", {})] if submit else [])


# mini-swe-agent ends a run when a command's output starts with this line (its submit convention)
MINI_SWE_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def shell_gold_turns(task: Task) -> list[str]:
    """The gold trajectory of a harness whose only tool is a shell (mini-swe-agent, black-box): one bash call that
    makes every edit of the task's fix (each a python3 one-liner replacing its old text once; a new file through a
    here-document) and then submits. Its tokens are captured as mini-swe-agent's own turn by the ModelService
    (SFT of the black-box agent: cookbook/train.py gold_datums)."""
    edit_json = task.solution_dir / "edit.json"
    if edit_json.exists():
        e = json.loads(edit_json.read_text())
        edits: list[tuple[str, str | None, str]] = [(e["path"], e["old"], e["new"])]
    else:
        edits = _hunks(gold_patch(task), lambda rel: _base_text(task, rel))
    cmds = []
    for path, old, new in edits:
        if old is None:
            cmds.append(f"mkdir -p \"$(dirname {shlex.quote(path)})\" && cat > {shlex.quote(path)} <<'LTS_EOF'\n"
                        f"{new}LTS_EOF")
            continue
        # python reads its program from a here-document: no shell quoting inside (the model copies plain reprs)
        cmds.append(f"python3 - <<'LTS_EOF'\nimport pathlib\np = pathlib.Path({path!r})\n"
                    f"p.write_text(p.read_text().replace({old!r}, {new!r}, 1))\nLTS_EOF")
    return [tool_call_text("bash", {"command": "\n".join([*cmds, MINI_SWE_SUBMIT])})]


_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n(.*?)^\1$", re.DOTALL | re.MULTILINE)


def gold_patch(task: Task) -> str:
    """The gold patch: solution/patch.diff or gold.patch, else the diff that solution/solve.sh writes
    from a here-document (SWE-bench tasks: ``cat > solution_patch.diff <<'EOF' ... EOF``)."""
    for name in ("patch.diff", "gold.patch"):
        if (task.solution_dir / name).exists():
            return (task.solution_dir / name).read_text()
    solve = task.solution_dir / "solve.sh"
    for m in _HEREDOC.finditer(solve.read_text() if solve.exists() else ""):
        if m.group(2).lstrip().startswith(("diff ", "--- ")):
            return m.group(2)
    raise ValueError(f"{task.name}: no solution/edit.json, patch.diff, gold.patch or patch in solve.sh "
                     "to build a gold trajectory from")


def _base_text(task: Task, rel: str) -> str | None:
    """A file of the task's base on the host (None when the repo only lives in the task's image)."""
    src = task.workspace_source()
    try:
        if "dir" in src:
            return (Path(src["dir"]) / rel).read_text()
        if "git" in src:
            r = subprocess.run(["git", "-C", str(src["git"]), "show", f"{src['commit']}:{rel}"], capture_output=True,
                               text=True)
            return r.stdout if r.returncode == 0 else None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _hunks(diff: str, base_text=lambda rel: None) -> list[tuple[str, str | None, str]]:
    """(path, old text, new text) per hunk of a unified diff (parsed by unidiff); old is None for a
    new file, whose new text is its whole content. A deleted or binary file has no such edit. Each
    edit keeps only as much of the hunk's context as makes old unique in the base file
    (``base_text(path)``; unknown: the changed lines plus an anchor for insertions)."""
    out: list[tuple[str, str | None, str]] = []
    for f in PatchSet(diff):
        if f.is_removed_file or f.is_binary_file:
            raise ValueError(f"the gold patch deletes or changes binary {f.path}: no edit call can replay that")
        if f.is_added_file:
            out.append((f.path, None, "".join(line.value for h in f for line in h if line.is_added)))
            continue
        text = base_text(f.path)
        for h in f:
            old = [line.value for line in h if line.is_context or line.is_removed]
            new = [line.value for line in h if line.is_context or line.is_added]
            o, n = _trim_context(old, new, text)
            out.append((f.path, "".join(o).removesuffix("\n"), "".join(n).removesuffix("\n")))
    return out


def _trim_context(old: list[str], new: list[str], text: str | None = None) -> tuple[list[str], list[str]]:
    """The hunk without the context lines around its change (a shorter edit call): one line of
    context stays as the anchor of a pure insertion, and context grows back, a line on each side at
    a time, until the old text occurs once in ``text`` (when known)."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[-1 - q] == new[-1 - q]:
        q += 1
    lo, hi = p, len(old) - q
    if lo == hi:   # nothing removed: anchor on the line before (else after) the insertion
        lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
    while text is not None and text.count("".join(old[lo:hi]).removesuffix("\n")) != 1 and (lo > 0 or hi < len(old)):
        lo, hi = max(0, lo - 1), min(len(old), hi + 1)
    return old[lo:hi], new[lo:len(new) - (len(old) - hi)]

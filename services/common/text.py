"""What every service's API edge refuses in JSON text (one owner): NUL bytes, lone surrogates (they
fail later, deep inside, as a 500), nesting deeper than ``MAX_DEPTH``, and NaN/Infinity."""

from __future__ import annotations

from typing import Any, NoReturn

MAX_DEPTH = 64


def reject_constant(name: str) -> NoReturn:
    """``json.loads(..., parse_constant=reject_constant)``: NaN, Infinity, -Infinity are errors."""
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


def text_problem(value: Any, where: str = "body", *, allow_nul: bool = False, max_depth: int = MAX_DEPTH,
                 _depth: int = 0) -> str | None:
    """Why ``value`` (parsed JSON) is not acceptable text, or None. Each service raises its own error."""
    if _depth > max_depth:
        return f"{where}: nested too deeply (at most {max_depth} levels)"
    if isinstance(value, str):
        if not allow_nul and "\x00" in value:
            return f"{where}: NUL bytes are not allowed in strings"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where}: lone surrogates are not valid text"
        return None
    if isinstance(value, dict):
        items = ((f"{where}.{k}", k, v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", None, v) for i, v in enumerate(value))
    else:
        return None
    for path, key, v in items:
        bad = (text_problem(key, where, allow_nul=allow_nul, max_depth=max_depth, _depth=_depth + 1)
               if isinstance(key, str) else None)
        bad = bad or text_problem(v, path, allow_nul=allow_nul, max_depth=max_depth, _depth=_depth + 1)
        if bad:
            return bad
    return None

"""Typed service configs: the base of every config file's pydantic model, and the one readable refusal.

Every YAML file a service reads at start (runtime.yaml, engine.yaml, harbor.yaml: ``service_configs.py``;
admin.yaml: ``services/sandbox/config.py``; modelservice.yaml: ``services/modelservice/config.py``) is checked
against a ``ConfigModel`` mirroring it: an unknown key (a typo) or a value of the wrong type is refused with one
line naming the file, the dotted key and, for a typo, the closest known key::

    config/runtime.yaml: unknown key 'backend.prot' (did you mean 'port'?)
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigModel(BaseModel):
    """A section of a service config: unknown keys are refused (``extra="forbid"``); defaults live here."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)   # a key or id YAML read as a number


M = TypeVar("M", bound=ConfigModel)


class ConfigError(ValueError):
    """A config file the service refuses to start with (the message is one line: file, key, the fix)."""


def check_config(data: Any, model: type[M], source: str | Path) -> M:
    """``data`` (a parsed YAML file) as ``model``, or ConfigError naming ``source`` and the offending key."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e, model, source)) from None


def describe(err: ValidationError, model: type[ConfigModel], source: str | Path) -> str:
    """One line per problem (the first few), each naming the file and the dotted key."""
    found = [([p for p in e["loc"] if not _is_union_tag(p)], e) for e in err.errors()]
    # a union's other members fail at the key's parent ('not a string'): the deepest problem is the one to name
    found = [(loc, e) for loc, e in found
             if not any(len(o) > len(loc) and o[:len(loc)] == loc for o, _ in found)]
    lines: list[str] = []
    for loc, e in found[:5]:
        key = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            known = _fields_at(model, loc[:-1])
            near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}?" if near else f"known: {', '.join(known) or 'none'}"
            lines.append(f"{source}: unknown key {key!r} ({hint})")
        else:
            line = f"{source}: {key or 'top level'}: {e['msg']} (got {_short(e.get('input'))})"
            if line not in lines:
                lines.append(line)
    more = len(found) - 5
    return "; ".join(lines) + (f"; and {more} more" if more > 0 else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_union_tag(part: Any) -> bool:
    """pydantic's loc names the union member it tried (``str``, ``ApiKey``, ``list[...]``): not a key."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or part in {"str", "int", "float", "bool"})


def _fields_at(model: type[ConfigModel], path: list[Any]) -> list[str]:
    """The known keys of the section at ``path`` (list indices and dict keys stepped through)."""
    target: Any = model
    for part in path:
        if isinstance(target, type) and issubclass(target, BaseModel):
            field = target.model_fields.get(str(part))
            target = field.annotation if field is not None else None
        else:   # a list element or a dict value
            target = _element(target)
        target = _section(target)
    target = _section(target)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return list(target.model_fields)
    return []


def _section(annotation: Any) -> Any:
    """The model inside ``X | None`` / a union of a plain value and a model; else the annotation as is."""
    if isinstance(annotation, (types.UnionType,)) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            inner = _section(arg)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
            if typing.get_origin(arg) in (list, dict):
                return arg
    return annotation


def _element(annotation: Any) -> Any:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args:
        return args[0]
    if typing.get_origin(annotation) is dict and len(args) == 2:
        return args[1]
    return None

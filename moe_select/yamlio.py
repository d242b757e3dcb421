"""YAML loading that keeps PyYAML's node marks, and pydantic errors mapped back to file:line.

Every mapping is loaded as :class:`MarkedDict` (a ``dict`` that remembers the file, its own line and the
line of each key) and every sequence as :class:`MarkedList` (a ``list`` with the line of each item).
Duplicate keys are an error (PyYAML silently keeps the last one). JSON files (Hugging Face configs) go
through the same loader, so their errors carry lines too.
"""
from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError

from .errors import InputError, Issue


class MarkedDict(dict):
    """A mapping from a YAML file. ``file``, ``line`` (1-based) and ``key_lines`` (key -> line)."""

    file: str = "<input>"
    line: int = 0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.key_lines: dict[Any, int] = {}
        self.key_sources: dict[Any, str] = {}  # keys given elsewhere than the file (e.g. CLI flags)


class MarkedList(list):
    """A sequence from a YAML file. ``file``, ``line`` and ``item_lines`` (index -> line)."""

    file: str = "<input>"
    line: int = 0

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.item_lines: list[int] = []


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when built in; marks are kept either way


class _MarkedLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader that builds MarkedDict/MarkedList and refuses duplicate keys."""

    filename = "<input>"


def _construct_mapping(loader: _MarkedLoader, node: yaml.MappingNode) -> MarkedDict:
    loader.flatten_mapping(node)
    out = MarkedDict()
    out.file, out.line = loader.filename, node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise InputError(Issue(loader.filename, key_node.start_mark.line + 1, "", "a mapping key must be a scalar")) from None
        if key in out:
            raise InputError(
                Issue(loader.filename, key_node.start_mark.line + 1, str(key),
                      f"duplicate key (first given on line {out.key_lines[key]})")
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _MarkedLoader, node: yaml.SequenceNode) -> MarkedList:
    out = MarkedList(loader.construct_object(child, deep=True) for child in node.value)
    out.file, out.line = loader.filename, node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


# YAML 1.1 reads `yes`/`on` as true and `0x8`, `1_000`, `1:30` as integers; YAML 1.2 (and JSON) do not.
# Keep only the 1.2 forms, so such values stay strings and the models refuse them instead of coercing.
_MarkedLoader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first, _resolvers in _MarkedLoader.yaml_implicit_resolvers.items():
    _MarkedLoader.yaml_implicit_resolvers[_first] = [
        (tag, regexp) for tag, regexp in _resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")]
_MarkedLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_MarkedLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_text(text: str, file: str) -> Any:
    """Parse YAML (or JSON) ``text``; ``file`` is the name used in marks and errors.

    Raises :class:`InputError` with the line of a syntax error or a duplicate key.
    """
    loader = _MarkedLoader(text)
    loader.filename = file
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(Issue(file, (mark.line + 1) if mark else 0, "", f"not valid YAML: {exc.problem or exc}")) from None
    finally:
        loader.dispose()


def load_file(path: str | Path, display: str | None = None) -> Any:
    """Load a YAML/JSON file with marks. ``display`` is the name errors use (default: the path)."""
    p = Path(path)
    name = display or str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(Issue(name, 0, "", "file not found")) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(Issue(name, 0, "", f"cannot read: {exc}")) from None
    return load_text(text, name)


def line_of(data: Any, loc: Iterable[Any]) -> int:
    """Line of the deepest node of ``data`` reached along a pydantic ``loc``; 0 when unknown."""
    line = getattr(data, "line", 0)
    cur = data
    for part in loc:
        if isinstance(cur, MarkedDict) and part in cur:
            line = cur.key_lines.get(part, line)
            cur = cur[part]
        elif isinstance(cur, MarkedList) and isinstance(part, int) and 0 <= part < len(cur):
            line = cur.item_lines[part]
            cur = cur[part]
        # other parts are pydantic's union/validator tags: they name no node, skip them
    return line


def _unwrap(tp: Any) -> list[Any]:
    """The concrete types inside Optional/Union/Annotated/list/dict of a field annotation."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return [t for a in typing.get_args(tp) for t in _unwrap(a)]
    return [tp]


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names (by alias) accepted at ``loc`` inside ``model``; [] when it cannot tell."""
    current: list[Any] = [model]
    for part in loc:
        nxt: list[Any] = []
        for tp in current:
            for t in _unwrap(tp):
                origin = typing.get_origin(t)
                if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                    for name, f in t.model_fields.items():
                        if (f.alias or name) == part:
                            nxt.append(f.annotation)
                elif origin in (list, tuple) and isinstance(part, int):
                    nxt.extend(typing.get_args(t)[:1])
                elif origin is dict and isinstance(part, str):
                    nxt.extend(typing.get_args(t)[1:2])
        if nxt:
            current = nxt
    keys: list[str] = []
    for tp in current:
        for t in _unwrap(tp):
            if isinstance(t, type) and issubclass(t, BaseModel):
                keys += [f.alias or n for n, f in t.model_fields.items()]
    return keys


def _field_path(loc: tuple[Any, ...], data: Any, kind: str = "missing") -> str:
    """Dotted field path of ``loc`` in ``data``, without pydantic's union/validator tags."""
    parts: list[str] = []
    cur = data
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and part in cur:
            parts.append(str(part))
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int):
            parts.append(f"[{part}]")
            cur = cur[part] if 0 <= part < len(cur) else None
        elif i == len(loc) - 1 and isinstance(cur, dict) and kind in ("missing", "extra_forbidden"):
            parts.append(str(part))  # a missing or unknown key
        # anything else is a union/validator tag (e.g. "literal['a','b']", "IntRange"): not a field
    return ".".join(parts).replace(".[", "[")


def _choices(expected: str) -> list[str]:
    return [c.strip().strip("'") for c in str(expected).replace(" or ", ", ").split(",") if c.strip()]


def validation_issues(exc: ValidationError, data: Any, file: str, model: type[BaseModel]) -> list[Issue]:
    """Turn a pydantic ``ValidationError`` on ``data`` (loaded with marks) into located issues.

    Unknown keys get a did-you-mean suggestion from the model's own field names; the branches of a
    union (``quant: <format> | auto``) are merged into one message per field.
    """
    grouped: dict[tuple[int, str], list[dict]] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        line = line_of(data, loc) or getattr(data, "line", 0)
        field = _field_path(loc, data, str(err.get("type"))) or ".".join(str(p) for p in loc if isinstance(p, (str, int)))
        grouped.setdefault((line, field), []).append(err)
    # A union such as `list[int] | {min, max, multiple_of}` reports one error per branch; when the value
    # went into one branch (an error deeper inside it), the other branch's "not a list" is noise.
    for key in list(grouped):
        deeper = any(f.startswith(key[1] + ".") or f.startswith(key[1] + "[") for _, f in grouped if f != key[1])
        if deeper and all(str(e.get("type", "")).endswith("_type") for e in grouped[key]):
            del grouped[key]
    issues: list[Issue] = []
    where = getattr(data, "file", file) or file
    for (line, field), errs in grouped.items():
        literal = [e for e in errs if e.get("type") == "literal_error"]
        err = errs[0]
        loc = tuple(err.get("loc", ()))
        if literal:
            choices: list[str] = []
            for e in literal:
                choices += [c for c in _choices((e.get("ctx") or {}).get("expected", "")) if c not in choices]
            got = literal[0].get("input")
            close = difflib.get_close_matches(str(got), choices, n=1, cutoff=0.6)
            msg = f"{got!r} is not one of {', '.join(choices)}" + (f" (did you mean {close[0]!r}?)" if close else "")
        elif err.get("type") == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
            msg = f"unknown key {loc[-1]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            if allowed:
                msg += f"; allowed here: {', '.join(sorted(allowed))}"
        else:
            msgs = []
            for e in errs:
                m = e.get("msg", "invalid")
                if e.get("type") == "string_type" and isinstance(e.get("input"), float):
                    m += f" (got the number {e['input']!r}: quote versions, e.g. \"12.8\", so 12.10 does not read as 12.1)"
                if m not in msgs:
                    msgs.append(m)
            msg = "; or ".join(msgs)
        issues.append(Issue(where, line, field, msg))
    return issues


def validate(model: type[BaseModel], data: Any, file: str) -> Any:
    """Validate marked ``data`` against ``model``; raise :class:`InputError` naming file, line, field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_issues(exc, data, file, model)) from None

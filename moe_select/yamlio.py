"""The one read path of every input file, YAML loading that keeps PyYAML's node marks, and pydantic
errors mapped back to file:line.

Every file the product reads (deployment, rule and capability files, model ``config.json`` and
``hf_quant_config.json``, plan) goes through :func:`read_input` (regular files only, checked before
opening; at most :data:`MAX_INPUT_BYTES`; read once, with its sha256), :func:`decode_text` (UTF-8, the
first bad byte located) and :func:`load_text` (bounded while composing: :data:`MAX_NODES` after alias
expansion, :data:`MAX_ALIASES`, :data:`MAX_DEPTH`, :data:`MAX_KEYS`, :data:`MAX_SCALAR_CHARS`,
:data:`MAX_INT_DIGITS`; YAML 1.2 core scalars). :func:`load_file` chains the three.

Every mapping is loaded as :class:`MarkedDict` (a ``dict`` that remembers the file, its own line and the
line of each key) and every sequence as :class:`MarkedList` (a ``list`` with the line of each item).
Duplicate keys are an error (PyYAML silently keeps the last one). JSON files (Hugging Face configs,
plans) go through the same loader, so their errors carry lines too. Error messages echo input values
cut to :data:`ECHO_CHARS` characters (:func:`shorten`).
"""
from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
import reprlib
import stat
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import ComposerError
from yaml.events import AliasEvent, MappingEndEvent, ScalarEvent, SequenceEndEvent, SequenceStartEvent, StreamEndEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

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


# --- Bounds ---------------------------------------------------------------------------------------------
# Every file the product reads is small and hand-written (the largest real one, a compressed-tensors
# config.json, is 26 KB with 566 nodes, 6 levels deep; the longest scalar is 605 characters). The bounds
# sit one to three orders of magnitude above that, and low enough that the worst file a bound admits is
# read, composed, validated and reported in well under a second and 300 MB (benchmarks/fuzz_inputs.py).

#: Largest input file read, in bytes (4 MiB). Checked with ``os.stat`` before opening, and again while
#: reading (a file that grows is cut off), so /dev/zero-like files and 100 MB files never load.
MAX_INPUT_BYTES = 4 * 1024 * 1024
#: Most nodes (scalars, sequences, mappings; keys count) a document may hold *after alias expansion*.
#: An alias counts as the whole of what it repeats, so ten lines of nested aliases (a "billion laughs")
#: are refused as they are composed, before anything is built from them. 90 times the largest real
#: file; the worst file it admits (50,000 wrong items, each an error) is answered in about 0.5 s.
MAX_NODES = 50_000
#: Most aliases (``*name``) in one document.
MAX_ALIASES = 1_000
#: Deepest nesting of sequences and mappings, counted after alias expansion (the constructor, pydantic
#: and the error formatter recurse: a bound far below Python's recursion limit keeps them safe).
MAX_DEPTH = 64
#: Longest scalar (a string, a key or a number as written), in characters.
MAX_SCALAR_CHARS = 65_536
#: Most keys in one mapping.
MAX_KEYS = 10_000
#: Most digits in an integer (Python refuses to parse more than 4300; no count in a file needs 20).
MAX_INT_DIGITS = 100
#: Longest echo of an input value in an error message; longer values are cut with an ellipsis.
ECHO_CHARS = 80
#: Most issues :func:`validation_issues` lists for one file (a list of 50,000 wrong items is one mistake
#: repeated, not 50,000 lines to read); the rest are counted in a last issue.
MAX_ISSUES = 50


def _fmt_bytes(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"


def _special_kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a regular file"


def read_input(path: str | Path, display: str | None = None, kind: str = "input file", *,
               max_bytes: int = MAX_INPUT_BYTES) -> tuple[bytes, str]:
    """Read one input file (deployment, rule or capability file, model config, plan) safely.

    Returns ``(the bytes, their sha256 hex digest)``: the file is read once, so a caller that hashes
    what it parsed (plans record the sha256 of every file read) hashes exactly those bytes.

    ``display`` is the name used in errors (default: the path); ``kind`` names the file in messages
    (``"deployment file"``, ``"model config"``, ...).

    Raises :class:`InputError` (``display``, line 0) when the file is missing (or a link to a missing
    file), is a folder, is not a regular file (a FIFO, a character or block device such as
    ``/dev/zero``, a socket: refused from ``os.stat`` *before* opening, because reading one can block
    forever or never end), cannot be read, or is larger than ``max_bytes`` (default
    :data:`MAX_INPUT_BYTES`, 4 MiB; checked before opening and again while reading, so a file that
    grows, or a ``/proc`` file whose size reads as 0, is cut off at the bound). The file is opened with
    ``O_NONBLOCK``: a file swapped for a FIFO between the check and the open cannot block either, and
    is refused by ``fstat``.
    """
    name = display or str(path)
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        broken = os.path.islink(p)
        raise InputError(Issue(name, 0, "", f"{kind} not found" + (" (a link to a missing file)" if broken else ""))) from None
    except NotADirectoryError:
        raise InputError(Issue(name, 0, "", f"{kind} not found (a parent of the path is not a folder)")) from None
    except (OSError, ValueError) as exc:  # permission, too many links, name too long, NUL in the path
        raise InputError(Issue(name, 0, "", f"cannot read the {kind}: {getattr(exc, 'strerror', None) or exc}")) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(Issue(name, 0, "", f"the {kind} is a folder, not a file"))
    if not stat.S_ISREG(st.st_mode):
        raise InputError(Issue(name, 0, "", f"the {kind} is {_special_kind(st.st_mode)}, not a regular file: refused "
                               "(reading it could block or never end)"))
    if st.st_size > max_bytes:
        raise InputError(Issue(name, 0, "", f"the {kind} is {st.st_size} bytes: larger than the {_fmt_bytes(max_bytes)} "
                               f"bound on input files"))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise InputError(Issue(name, 0, "", f"cannot read the {kind}: {exc.strerror or exc}")) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(Issue(name, 0, "", f"the {kind} is {_special_kind(st.st_mode)}, not a regular file: refused "
                                   "(reading it could block or never end)"))
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            except OSError as exc:
                raise InputError(Issue(name, 0, "", f"cannot read the {kind}: {exc.strerror or exc}")) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise InputError(Issue(name, 0, "", f"the {kind} is larger than the {_fmt_bytes(max_bytes)} bound on "
                                       "input files (it grew while read)"))
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    return raw, hashlib.sha256(raw).hexdigest()


def decode_text(raw: bytes, display: str) -> str:
    """``raw`` as UTF-8 text. Raises :class:`InputError` naming the line and column of the first byte
    that is not UTF-8 (``display:line: not UTF-8 text: byte 0xff at column 7``)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(Issue(display, line, "", f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {col}")) from None


class _Echo(reprlib.Repr):
    """``reprlib`` that also shortens the marked containers (plain ``repr`` would expand them whole)."""

    def __init__(self, limit: int):
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = limit
        self.maxlist = self.maxdict = self.maxtuple = self.maxset = 8
        self.maxlevel = 3

    def repr_MarkedDict(self, x: Any, level: int) -> str:  # noqa: N802 - reprlib's naming
        return self.repr_dict(x, level)

    def repr_MarkedList(self, x: Any, level: int) -> str:  # noqa: N802
        return self.repr_list(x, level)


def shorten(value: Any, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters with an ellipsis: what error messages echo of an
    input value (a 64 KiB string or an alias-expanded list is never copied into a message whole).
    Never raises, and never walks more than a few items of a container."""
    try:
        if isinstance(value, str):
            if len(value) <= limit:
                return repr(value)
            text = repr(value[:limit])
            return text[:-1] + "…" + text[-1]
        text = _Echo(limit).repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails must not turn an error message into a traceback
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit + 2 else text[:limit] + "…"


def _cut(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` (a key, as a field name) cut to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "…"


def _shorten_text(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# YAML 1.2's JSON schema (what JSON means too), with .inf/.nan: null, true/false, decimal integers, floats with an
# optional exponent. YAML 1.1's yes/on, 1_000, 1:30, 2001-12-14 (a date) and `=`, and the core schema's 0x8 and
# 0o10, stay strings, and the models refuse them where a boolean or number is due. A leading zero (010: octal 8 in
# YAML 1.1, decimal 10 in 1.2) is refused rather than guessed.
_TAG = "tag:yaml.org,2002:"
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_FLOAT_RE = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
#: Tags a file may carry, explicitly (``!!str 8``) or resolved, per node kind: the YAML 1.2 core schema
#: and merge keys (``<<``).
_CORE_TAGS = {ScalarNode: {_TAG + t for t in ("null", "bool", "int", "float", "str", "merge")},
              SequenceNode: {_TAG + "seq"}, MappingNode: {_TAG + "map"}}
_KIND_NAMES = {ScalarNode: "a scalar", SequenceNode: "a list", MappingNode: "a mapping"}


class _BoundedComposer(yaml.composer.Composer if TYPE_CHECKING else object):  # type: ignore[misc]
    """PyYAML's composer, in Python over the (C) parser's events, counting as it composes.

    Aliases share nodes in the composed graph, so composing is linear in the file; what explodes is
    everything after (construction, validation, error messages walk the expanded tree). Each node's
    expanded size and height are computed as it completes (an alias weighs what it repeats), and the
    document is refused at the first node that passes a bound: :data:`MAX_NODES`, :data:`MAX_ALIASES`,
    :data:`MAX_DEPTH`, :data:`MAX_KEYS`, :data:`MAX_SCALAR_CHARS`. An alias inside its own anchor
    (a recursive structure) and tags outside the YAML 1.2 core schema are refused too.
    """

    filename = "<input>"

    def _start_counts(self) -> None:
        self.anchors: dict[str, Any] = {}
        self._measure: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, expanded height)
        self._open: set[int] = set()                      # ids of collections being composed
        self._aliases = 0
        self._depth = 0
        self._path: list[str] = []

    def _refuse(self, mark: Any, msg: str) -> InputError:
        field = ".".join(self._path).replace(".[", "[")
        if len(field) > 2 * ECHO_CHARS:
            field = field[:ECHO_CHARS // 2] + "…" + field[-ECHO_CHARS:]
        return InputError(Issue(self.filename, (mark.line + 1) if mark is not None else 0, field, msg))

    def get_single_node(self) -> Any:
        """The root node of the only document (None for an empty stream). Raises ComposerError for a
        second document, InputError for a passed bound."""
        self._start_counts()
        self.get_event()  # stream start
        document = None
        if not self.check_event(StreamEndEvent):
            document = self.compose_document()
        if not self.check_event(StreamEndEvent):
            event = self.get_event()
            raise ComposerError("expected a single document in the stream", getattr(document, "start_mark", None),
                                "but found another document", event.start_mark)
        self.get_event()
        return document

    def compose_document(self) -> Any:
        """The root node of the next document; anchors do not cross documents."""
        self.get_event()  # document start
        node = self.compose_node(None, None)
        self.get_event()  # document end
        self.anchors = {}
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        """The next node: an alias returns its anchor's node (counted, never copied); scalars and
        collections are composed and measured. Sets ``self._mark`` to where the node is written."""
        if self.check_event(AliasEvent):
            event = self.get_event()
            if event.anchor not in self.anchors:
                raise ComposerError(None, None, f"found undefined alias {shorten(event.anchor)}", event.start_mark)
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise self._refuse(event.start_mark, f"more than {MAX_ALIASES} aliases in one file: refused")
            node = self.anchors[event.anchor]
            self._mark = event.start_mark  # where the alias is written (the node is the anchor's)
            if id(node) in self._open:
                raise self._refuse(event.start_mark, f"alias *{shorten(event.anchor)[1:-1]} is inside its own anchor "
                                   "(a recursive structure): refused")
            return node
        event = self.peek_event()
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            raise ComposerError(f"found duplicate anchor {shorten(anchor)}; first occurrence",
                                self.anchors[anchor].start_mark, "second occurrence", event.start_mark)
        self._mark = event.start_mark
        self.descend_resolver(parent, index)
        if self.check_event(ScalarEvent):
            node = self._compose_scalar(anchor)
        elif self.check_event(SequenceStartEvent):
            node = self._compose_collection(anchor, SequenceNode, SequenceEndEvent)
        else:
            node = self._compose_collection(anchor, MappingNode, MappingEndEvent)
        self.ascend_resolver()
        return node

    def _tag(self, event: Any, kind: type, value: Any) -> str:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, value, event.implicit)
        if tag not in _CORE_TAGS[kind]:
            if any(tag in tags for tags in _CORE_TAGS.values()):
                raise self._refuse(event.start_mark, f"tag {shorten(tag)} does not fit {_KIND_NAMES[kind]}")
            raise self._refuse(event.start_mark, f"tag {shorten(tag)} is not supported: only the YAML 1.2 core schema "
                               "(strings, numbers, true/false, null, lists, mappings)")
        return tag

    def _compose_scalar(self, anchor: Any) -> ScalarNode:
        event = self.get_event()
        if len(event.value) > MAX_SCALAR_CHARS:
            raise self._refuse(event.start_mark, f"a scalar of {len(event.value)} characters: longer than the "
                               f"{MAX_SCALAR_CHARS}-character bound")
        node = ScalarNode(self._tag(event, ScalarNode, event.value), event.value, event.start_mark, event.end_mark,
                          style=event.style)
        if anchor is not None:
            self.anchors[anchor] = node
        self._measure[id(node)] = (1, 0)
        return node

    def _compose_collection(self, anchor: Any, kind: type, end: type) -> Any:
        start = self.get_event()
        node = kind(self._tag(start, kind, None), [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self._refuse(start.start_mark, f"nested deeper than {MAX_DEPTH} levels: refused")
        self._open.add(id(node))
        size, height, index = 1, 1, 0
        while not self.check_event(end):
            if kind is SequenceNode:
                self._path.append(f"[{index}]")
                child = self.compose_node(node, index)
                node.value.append(child)
                children: tuple[tuple[Any, Any], ...] = ((child, self._mark),)
            else:
                if len(node.value) >= MAX_KEYS:
                    raise self._refuse(self.peek_event().start_mark, f"more than {MAX_KEYS} keys in one mapping: refused")
                key = self.compose_node(node, None)
                key_mark = self._mark
                self._path.append(_cut(key.value) if isinstance(key, ScalarNode) else "?")
                value = self.compose_node(node, key)
                node.value.append((key, value))
                children = ((key, key_mark), (value, self._mark))
            for child, mark in children:
                c_size, c_height = self._measure[id(child)]
                size += c_size
                height = max(height, c_height + 1)
                if size > MAX_NODES:
                    raise self._refuse(mark, f"the file expands to more than {MAX_NODES} nodes (aliases repeat "
                                       "what their anchor holds): refused")
                if self._depth - 1 + height > MAX_DEPTH:
                    raise self._refuse(mark, f"nested deeper than {MAX_DEPTH} levels once aliases are "
                                       "expanded: refused")
            self._path.pop()
            index += 1
        node.end_mark = self.get_event().end_mark
        self._open.discard(id(node))
        self._depth -= 1
        self._measure[id(node)] = (size, height)
        return node


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when built in; marks are kept either way


class _MarkedLoader(_BoundedComposer, _Base):  # type: ignore[misc, valid-type]
    """SafeLoader with the bounded composer, YAML 1.2 core scalars, MarkedDict/MarkedList, and duplicate
    keys refused."""

    filename = "<input>"


def _scalar_error(loader: _MarkedLoader, node: yaml.Node, msg: str) -> InputError:
    return InputError(Issue(loader.filename, node.start_mark.line + 1, "", msg))


def _construct_int(loader: _MarkedLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_scalar(node)
    if not _INT_RE.match(value):
        raise _scalar_error(loader, node, f"{shorten(value)} is not a decimal integer")
    digits = value.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise _scalar_error(loader, node, f"an integer of {len(digits)} digits: longer than the {MAX_INT_DIGITS}-digit bound")
    if len(digits) > 1 and digits[0] == "0":
        raise _scalar_error(loader, node, f"leading zero in {value}: write {int(value, 10)} (YAML 1.1 reads a leading "
                            "zero as octal, YAML 1.2 as decimal: refused rather than guessed)")
    return int(value, 10)


def _construct_float(loader: _MarkedLoader, node: yaml.ScalarNode) -> float:
    value = loader.construct_scalar(node)
    if not (_FLOAT_RE.match(value) or _INT_RE.match(value)):
        raise _scalar_error(loader, node, f"{shorten(value)} is not a number")
    low = value.lower()
    if low.endswith(".inf"):
        return -math.inf if low.startswith("-") else math.inf
    if low.endswith(".nan"):
        return math.nan
    return float(value)


def _construct_bool(loader: _MarkedLoader, node: yaml.ScalarNode) -> bool:
    value = loader.construct_scalar(node)
    if not _BOOL_RE.match(value):
        raise _scalar_error(loader, node, f"{shorten(value)} is not true or false")
    return value.lower() == "true"


def _within(exc: InputError, part: str) -> InputError:
    """``exc`` (one issue, raised while constructing a value) with ``part`` prefixed to its field."""
    issue = exc.issues[0]
    field = part + ("" if not issue.field else issue.field if issue.field.startswith("[") else "." + issue.field)
    return InputError(Issue(issue.file, issue.line, field, issue.message))


def _construct_mapping(loader: _MarkedLoader, node: yaml.MappingNode) -> MarkedDict:
    explicit = sum(1 for k, _ in node.value if k.tag != _TAG + "merge")
    loader.flatten_mapping(node)
    merged = len(node.value) - explicit   # flatten_mapping puts the merged pairs (``<<: *anchor``) first
    out = MarkedDict()
    out.file, out.line = loader.filename, node.start_mark.line + 1
    from_merge: set[Any] = set()
    for n, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise InputError(Issue(loader.filename, key_node.start_mark.line + 1, "", "a mapping key must be a scalar")) from None
        name = _cut(key) if isinstance(key, str) else shorten(key)
        if n < merged or key in from_merge:
            # YAML's merge key: a key written beside ``<<`` overrides the merged one, and of several merged mappings
            # the first listed wins (flatten_mapping lists them last first)
            out.pop(key, None)
            if n < merged:
                from_merge.add(key)
            else:
                from_merge.discard(key)
        if key in out:
            raise InputError(
                Issue(loader.filename, key_node.start_mark.line + 1, name,
                      f"duplicate key (first given on line {out.key_lines[key]})")
            )
        try:
            out[key] = loader.construct_object(value_node, deep=True)
        except InputError as exc:
            if len(exc.issues) != 1:
                raise
            raise _within(exc, name) from None
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _MarkedLoader, node: yaml.SequenceNode) -> MarkedList:
    out = MarkedList()
    for i, child in enumerate(node.value):
        try:
            out.append(loader.construct_object(child, deep=True))
        except InputError as exc:
            if len(exc.issues) != 1:
                raise
            raise _within(exc, f"[{i}]") from None
    out.file, out.line = loader.filename, node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_MarkedLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (("bool", _BOOL_RE, "tTfF"), ("int", _INT_RE, "-+0123456789"),
                              ("float", _FLOAT_RE, "-+0123456789."), ("null", _NULL_RE, ["~", "n", "N", ""]),
                              ("merge", re.compile(r"^(?:<<)$"), "<")):
    _MarkedLoader.add_implicit_resolver(_TAG + _tag, _regexp, list(_first))
_MarkedLoader.yaml_constructors = dict(_MarkedLoader.yaml_constructors)
_MarkedLoader.add_constructor(_TAG + "int", _construct_int)
_MarkedLoader.add_constructor(_TAG + "float", _construct_float)
_MarkedLoader.add_constructor(_TAG + "bool", _construct_bool)
_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


class _EngineLoader(_BoundedComposer, _Base):  # type: ignore[misc, valid-type]
    """The bounded, marked loader with PyYAML's own YAML 1.1 scalars (``yes``/``on`` are true, ``010`` is octal):
    how the engines read their config files (vLLM's ``--config``: FlexibleArgumentParser._load_config_file, and
    TensorRT-LLM's ``--extra_llm_api_options``: tensorrt_llm/commands/serve.py, both ``yaml.safe_load``)."""

    filename = "<input>"


_EngineLoader.yaml_constructors = dict(_EngineLoader.yaml_constructors)
_EngineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_EngineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_text(text: str, file: str, *, engine_yaml: bool = False) -> Any:
    """Parse YAML (or JSON) ``text``; ``file`` is the name used in marks and errors.

    Scalars follow YAML 1.2's JSON schema (see README): ``yes``/``on``/``0x8``/``0o10``/dates stay strings, an
    integer with a leading zero (``08``, ``010``) is refused. The document is bounded while it is
    composed (:data:`MAX_NODES` after alias expansion, :data:`MAX_ALIASES`, :data:`MAX_DEPTH`,
    :data:`MAX_KEYS`, :data:`MAX_SCALAR_CHARS`, :data:`MAX_INT_DIGITS`), so a ten-line alias bomb is
    refused in milliseconds.

    ``engine_yaml``: an engine's own config file, read with PyYAML's YAML 1.1 scalars as the engine reads it
    (``yes`` is true there), still bounded and marked.

    Raises :class:`InputError` with the line (and, where known, the key) of a syntax error, a control
    character, a duplicate key, a passed bound, a leading zero or an unsupported tag.
    """
    loader = None
    try:
        loader = (_EngineLoader if engine_yaml else _MarkedLoader)(text)  # (the pure-Python reader checks characters)
        loader.filename = file
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = str(exc.problem or exc)
        if exc.context and exc.problem:  # e.g. "while parsing a flow sequence (line 3), did not find expected ','"
            what = f"{exc.context}" + (f" (line {exc.context_mark.line + 1})" if exc.context_mark else "") + f", {what}"
        raise InputError(Issue(file, (mark.line + 1) if mark else 0, "", f"not valid YAML: {_shorten_text(what)}")) from None
    except yaml.reader.ReaderError as exc:  # a control character or an invalid code point
        # libyaml's position is a byte offset into the UTF-8 text, the pure-Python reader's a character index: the
        # reader stops at the first character it refuses, so that character's first occurrence is where it stands
        bad = chr(exc.character) if isinstance(exc.character, int) else exc.character   # libyaml: a code point
        found = text.find(bad) if isinstance(bad, str) and bad else -1
        pos = found if found >= 0 else (exc.position if isinstance(exc.position, int) and 0 <= exc.position <= len(text)
                                        else 0)
        line = text.count("\n", 0, pos) + 1 if exc.position is not None else 0
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character) if isinstance(exc.character, str) and exc.character else 0
        raise InputError(Issue(file, line, "", f"not valid YAML: control character U+{char:04X} at column {col} "
                               "(only printable characters are allowed)")) from None
    except yaml.YAMLError as exc:
        raise InputError(Issue(file, 0, "", f"not valid YAML: {_shorten_text(str(exc))}")) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: str | Path, display: str | None = None, *, kind: str = "input file",
              hashes: dict[str, str] | None = None, engine_yaml: bool = False) -> Any:
    """Load a YAML/JSON file with marks, through :func:`read_input` (regular files of at most
    :data:`MAX_INPUT_BYTES`, read once), :func:`decode_text` and :func:`load_text` (bounded).

    ``display`` is the name errors use (default: the path); ``kind`` names the file in messages. When
    ``hashes`` is given, the sha256 of the bytes parsed is stored in it under ``display``. ``engine_yaml``: see
    :func:`load_text`. Raises :class:`InputError` (see those three functions)."""
    name = display or str(path)
    raw, digest = read_input(path, name, kind)
    if hashes is not None:
        hashes[name] = digest
    return load_text(decode_text(raw, name), name, engine_yaml=engine_yaml)


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
            parts.append(_cut(str(part)))
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int):
            parts.append(f"[{part}]")
            cur = cur[part] if 0 <= part < len(cur) else None
        elif i == len(loc) - 1 and isinstance(cur, dict) and kind in ("missing", "extra_forbidden"):
            parts.append(_cut(str(part)))  # a missing or unknown key
        # anything else is a union/validator tag (e.g. "literal['a','b']", "IntRange"): not a field
    return ".".join(parts).replace(".[", "[")


def _choices(expected: str) -> list[str]:
    return [c.strip().strip("'") for c in str(expected).replace(" or ", ", ").split(",") if c.strip()]


def validation_issues(exc: ValidationError, data: Any, file: str, model: type[BaseModel]) -> list[Issue]:
    """Turn a pydantic ``ValidationError`` on ``data`` (loaded with marks) into located issues.

    Unknown keys get a did-you-mean suggestion from the model's own field names; the branches of a
    union (``quant: <format> | auto``) are merged into one message per field. Echoed input values and
    keys are cut to :data:`ECHO_CHARS` characters (:func:`shorten`), a validator's message to 300, and
    at most :data:`MAX_ISSUES` issues are listed (then a count of the rest). Never raises.
    """
    grouped: dict[tuple[int, str], list[Any]] = {}
    errors = exc.errors(include_url=False)
    unread = max(0, len(errors) - 20 * MAX_ISSUES)  # enough to fill MAX_ISSUES after merging union branches
    for err in errors[:20 * MAX_ISSUES]:
        loc = tuple(err.get("loc", ()))
        line = line_of(data, loc) or getattr(data, "line", 0)
        field = _field_path(loc, data, str(err.get("type"))) or ".".join(_cut(str(p)) for p in loc if isinstance(p, (str, int)))
        grouped.setdefault((line, field), []).append(err)
    # A union such as `list[int] | {min, max, multiple_of}` reports one error per branch; when the value
    # went into one branch (an error deeper inside it), the other branch's "not a list" is noise.
    parents = {f[:i] for _, f in grouped for i, ch in enumerate(f) if ch in ".["}  # linear, not pairwise
    for key in list(grouped):
        deeper = key[1] in parents
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
            close = difflib.get_close_matches(got, choices, n=1, cutoff=0.6) if isinstance(got, str) and len(got) <= 200 else []
            msg = f"{shorten(got)} is not one of {', '.join(choices)}" + (f" (did you mean {close[0]!r}?)" if close else "")
            if isinstance(got, str) and got.strip().lstrip("-").isdigit() \
                    and any(str(e.get("type", "")).startswith("int") for e in errs):
                # a number in quotes where the field takes an integer or a name (an eighth new user's trial)
                msg = f"{shorten(got)} is a string: write the integer {got.strip()} without quotes, or one of {', '.join(choices)}"
        elif err.get("type") == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            unknown = loc[-1]
            close = (difflib.get_close_matches(unknown, allowed, n=1, cutoff=0.6)
                     if isinstance(unknown, str) and len(unknown) <= 200 else [])
            msg = f"unknown key {shorten(unknown)}" + (f" (did you mean {close[0]!r}?)" if close else "")
            if allowed:
                msg += f"; allowed here: {', '.join(sorted(allowed))}"
        else:
            msgs = []
            for e in errs:
                m = str(e.get("msg", "invalid")).removeprefix("Value error, ")
                if e.get("type") == "string_type" and isinstance(e.get("input"), float):
                    m += f" (got the number {e['input']!r}: quote versions, e.g. \"12.8\", so 12.10 does not read as 12.1)"
                m = _shorten_text(m, 300)  # a validator's message may quote the value
                if m not in msgs:
                    msgs.append(m)
            msg = "; or ".join(msgs)
        issues.append(Issue(where, line, field, msg))
    if len(issues) > MAX_ISSUES or unread:
        more = len(issues) - MAX_ISSUES
        issues = issues[:MAX_ISSUES] + [Issue(where, 0, "", (f"... and {more} more issue{'s' if more > 1 else ''}"
                                                             if not unread else f"... and about {more + unread} more issues")
                                              + f" (only the first {MAX_ISSUES} are listed)")]
    return issues


def validate(model: type[BaseModel], data: Any, file: str) -> Any:
    """Validate marked ``data`` against ``model``; raise :class:`InputError` naming file, line, field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_issues(exc, data, file, model)) from None

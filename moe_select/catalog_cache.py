"""An on-disk cache of validated catalogs: a new process (``moe-select explain``, an engine starting) reads
the catalog a previous one validated instead of parsing and validating every capability and rule file.

**Never stale.** A cached catalog is stored under a key (sha256) over everything :func:`load_catalog` reads:

- the entries of every folder it lists (bundled ``backends/``, ``backends/a2a/``, ``rules/``; each installed
  plugin's folder with its ``a2a/`` and ``rules/``; each operator capability folder with its ``a2a/``;
  each operator rules folder) and the sha256 of every ``.yaml``/``.yml``/``.json`` file in them (a
  superset of the files read); operator rule files given as files, hashed the same way;
- the arguments as given and made absolute (``--rules``, ``--backends``, ``$MOE_SELECT_RULES``,
  ``$MOE_SELECT_BACKENDS``), the installed plugins (entry points: package folders, origins, adapter
  modules);
- the moe_select version and the sha256 of every module of the package (a code change invalidates), the
  Python, pydantic and pydantic-core versions (the models' fields) and packaging's (the catalog's specifier
  verdicts were computed with it).

Any edit, addition, removal or rename of an input file, a different operator folder or plugin, or another
version of moe-select gives another key. The key is computed again after a miss's load, and the catalog is
stored only when the inputs did not change while it loaded. Errors are never cached: a catalog that does not
load raises :func:`load_catalog`'s own :class:`~moe_select.errors.InputError` (file:line, field), every time.

**Data, authenticated: never code, never an answer the files do not give.** An entry (``catalog-<key>.json``)
is :data:`MAGIC`, an HMAC-SHA256 in hex, a newline and a JSON document: the catalog's models (only
moe_select's own :class:`~moe_select.located.Located` classes, each rebuilt with exactly its fields, the
fields that were set and its file:line marks, as pickle would, running none of the class's code), dicts,
lists, tuples, paths and JSON scalars. Reading one runs no code. The MAC is computed over the whole document
(which names the key) with a 32-byte random key this module creates once, mode 0600, **outside** the cache
folder (:func:`key_path`: ``$XDG_STATE_HOME/moe-select/cache-key``, else
``~/.local/state/moe-select/cache-key``). An entry is used only when its MAC verifies and its document
decodes exactly into those classes; anything else is a miss and the catalog is loaded from the files: a
damaged entry, one another program wrote (another container running as root that shares a mounted cache
folder passes the ownership checks below, but does not hold this key), one edited after it was written
(a rule's line changed), a FIFO or link planted under an entry's name. Why a key and not a digest: any check
computed from the entry and the files' hashes can be computed by whoever writes the entry, and checking the
entry against the files' contents means parsing them (about 60 ms of the 150 ms a cold load takes on a
2-core VM), which is what the cache saves. What this relies on: whoever can write the cache folder cannot
read the key (keep ``$XDG_STATE_HOME`` off shared mounts); a cache folder that is the key's folder, or
holds it, or lies inside it, is not used.

**Where.** ``$MOE_SELECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/moe-select``, else ``~/.cache/moe-select``;
``MOE_SELECT_CACHE_DIR=off`` turns the cache off, and an empty ``MOE_SELECT_CACHE_DIR`` is an
:class:`~moe_select.errors.InputError` naming the variable (it used to mean the default folder silently).
The cache only makes loading faster, never different: a folder that cannot be created or written, an
entry that cannot be read, verified or decoded, and any other failure fall back to :func:`load_catalog`
silently. The cache folder and the key's folder are created with mode 0700 and used only while this user
owns them and no one else can write them; an entry or key file is read only when it is a regular file this
user owns. The newest :data:`KEEP` entries are kept.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Callable, TypeVar

from .errors import InputError, Issue

T = TypeVar("T")

CACHE_ENV = "MOE_SELECT_CACHE_DIR"
#: Cache entries kept (the newest by modification time); older ones are removed when one is written.
KEEP = 16
#: Suffixes of the files hashed in every folder the catalog lists (it reads ``*.yaml``, and ``*.yml``
#: and ``*.json`` in operator rules folders).
SUFFIXES = (".yaml", ".yml", ".json")
_FORMAT = 2  # of the entry (1: a pickle, never read again)
#: First line of every entry; the MAC (64 hex digits) and a newline follow, then the JSON document.
MAGIC = b"moe-select catalog cache 2\n"
#: Largest entry read, in bytes (the bundled catalog's entry is about 0.3 MB).
MAX_ENTRY_BYTES = 32 * 1024 * 1024
#: Name of the key file in the key's folder (:func:`key_path`).
KEY_FILE = "cache-key"
_KEY_BYTES = 32
#: Opening flags of every file this module reads: a link is not followed, a FIFO does not block.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def cache_dir() -> Path | None:
    """The cache folder (see the module doc), or None when the cache is off. Raises :class:`InputError`
    naming ``$MOE_SELECT_CACHE_DIR`` when it is set but empty (or only blanks)."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        if not given.strip():
            raise InputError(Issue(f"${CACHE_ENV}", 0, "", "is set but empty: unset it (the default folder, "
                                   "$XDG_CACHE_HOME/moe-select), or name a folder, or set it to off"))
        return None if given.strip().lower() == "off" else Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "moe-select"


def key_path() -> Path:
    """Where the entries' HMAC key is kept: ``$XDG_STATE_HOME/moe-select/cache-key`` (an absolute
    ``$XDG_STATE_HOME``, as the XDG spec says), else ``~/.local/state/moe-select/cache-key``."""
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "moe-select" / KEY_FILE


def _digest(path: str | Path) -> str:
    """sha256 of a file as the catalog would read it, or why it cannot be read (then loading fails too)."""
    from .yamlio import read_input

    try:
        return read_input(path, str(path), "rule or capability file")[1]
    except InputError as exc:
        return "unreadable: " + "; ".join(i.message for i in exc.issues)


def _tree(folder: Path) -> list[Any]:
    """The sorted entries of ``folder``, with the sha256 of each file the catalog may read."""
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return ["missing"]
    except NotADirectoryError:
        return ["not a folder"]
    return [(n, _digest(folder / n)) if n.endswith(SUFFIXES) else (n,) for n in names]


def _code_stamp() -> list[tuple[str, str]]:
    """(name, sha256) of every module of the package: an entry stored by other code is never read."""
    here = Path(__file__).parent
    return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(here.glob("*.py"))]


def _rule_path(given: Path) -> list[Any]:
    d = given.absolute()
    try:
        if d.is_file():
            return [str(given), str(d), "file", _digest(d)]
        if d.is_dir():
            return [str(given), str(d), "folder", _tree(d)]
        return [str(given), str(d), "exists" if d.exists() else "missing"]
    except OSError as exc:
        return [str(given), "unreadable", str(exc)]


@dataclass
class Inputs:
    """What :func:`~moe_select.catalog.load_catalog` reads besides the files' contents (the catalog module
    states them; this module does not import it)."""

    backends_dir: Path  # the bundled capability folder
    rules_dir: Path  # the bundled rules folder
    plugins: list[tuple[Path, str]]  # (folder, origin) of every plugin that ships capability files
    adapters: dict[str, str]  # runner -> adapter module of installed plugins
    backends: list[Path]  # operator capability folders as given (arguments, then the environment variable)
    rules: list[Path]  # operator rules folders and files as given (arguments, then the environment variable)
    env: tuple[str, str]  # the raw values of $MOE_SELECT_RULES and $MOE_SELECT_BACKENDS


def catalog_key(inputs: Inputs) -> str:
    """The cache key of the catalog ``inputs`` describe, as the files are now (module doc). Raises
    OSError when a folder cannot be listed."""
    import pydantic
    import packaging
    import pydantic_core

    from . import __version__

    # packaging: the catalog carries specifier verdicts computed with it (Catalog.version_verdicts)
    parts: list[Any] = [_FORMAT, __version__, sys.version, pydantic.VERSION, pydantic_core.__version__,
                        packaging.__version__, _code_stamp(), inputs.env]
    # engines/: names.yaml is read by the cross-check of engines.options, and an operator folder's tables are compared
    parts += [str(inputs.backends_dir), _tree(inputs.backends_dir), _tree(inputs.backends_dir / "a2a"),
              _tree(inputs.backends_dir / "engines"),
              str(inputs.rules_dir), _tree(inputs.rules_dir)]
    for folder, origin in inputs.plugins:
        parts += ["plugin", str(folder), origin, _tree(folder), _tree(folder / "a2a"), _tree(folder / "rules")]
    parts.append(sorted(inputs.adapters.items()))
    for given in inputs.backends:
        folder = given.absolute()
        parts += ["backends", str(given), str(folder), _tree(folder), _tree(folder / "a2a"), _tree(folder / "engines")]
    for given in inputs.rules:
        parts += ["rules", *_rule_path(given)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _owned(st: os.stat_result) -> bool:
    """True when ``st`` is of something this user owns and no one else can write (POSIX; elsewhere True)."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - not POSIX
        return True
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _private(path: Path) -> bool:
    """True when ``path`` (a folder, links followed) is owned by this user and no one else can write it."""
    return _owned(os.stat(path))


def _separate(folder: Path) -> bool:
    """True when the cache ``folder`` and the key's folder are apart (neither is, or holds, the other):
    whoever writes entries must not be able to read the key."""
    a, b = Path(os.path.realpath(folder)), Path(os.path.realpath(key_path().parent))
    return a != b and a not in b.parents and b not in a.parents


def _read_key(path: Path) -> bytes | None:
    """The key in ``path``, or None unless it is a regular file of exactly :data:`_KEY_BYTES` bytes that
    only this user can read and write. Raises OSError (FileNotFoundError when there is none)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _owned(st) or st.st_mode & 0o077 or st.st_size != _KEY_BYTES:
            return None
        data = os.read(fd, _KEY_BYTES + 1)
    finally:
        os.close(fd)
    return data if len(data) == _KEY_BYTES else None


def _secret(create: bool) -> bytes | None:
    """The HMAC key (module doc), made when missing and ``create``; None when there is none or it is not
    private. Raises OSError when its folder cannot be made or read."""
    import secrets

    path = key_path()
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _private(path.parent):
        return None
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    try:  # O_EXCL: two processes never both write a key; a reader may see it half written: no key this time
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return _read_key(path)
    try:
        os.write(fd, secrets.token_bytes(_KEY_BYTES))
    finally:
        os.close(fd)
    return _read_key(path)


def _mac(secret: bytes, document: bytes, magic: bytes = MAGIC) -> bytes:
    return hmac.new(secret, magic + document, hashlib.sha256).hexdigest().encode()


# --- The entry's JSON form --------------------------------------------------------------------------------
# A JSON object is a tagged value when it has the key "\0" (TAG), else a dict with string keys; decoding is one
# json.loads with an object hook. {TAG: "d", "v": [k1, v1, ...]} is a dict with other keys (tuples, ints,
# or the key TAG), {TAG: "t", "v": [...]} a tuple, {TAG: "p", "v": "..."} a path, {TAG: "c", "c": class,
# "f": {field: value}} the catalog itself (a dataclass), and a model is
# {TAG: "m", "c": class, "i": n, "f": [its fields' values, in its fields' order], "s": which fields were set
# (bit i: field i), "w": [file, line, [key, line, ...], [key, source, ...]] (its marks: MARKS)}; n numbers
# it, and {TAG: "r", "v": n} is the same object again (rules shared by ``rules`` and ``bundled_rules`` stay
# shared). One JSON object per model: the entry decodes in about 2 ms more than a pickle would.
TAG = "\0"
#: The private attributes of every cached model (:class:`~moe_select.located.Located`'s marks).
MARKS = ("_file", "_line", "_lines", "_sources")


def _encode(obj: Any, memo: dict[int, int]) -> Any:
    """The JSON form of ``obj`` (above). Raises TypeError for anything the form does not hold."""
    from pydantic import BaseModel

    t = type(obj)
    if obj is None or t is str or t is int or t is float or t is bool:
        return obj
    if t is list:
        return [_encode(v, memo) for v in obj]
    if t is dict:
        if all(type(k) is str for k in obj) and TAG not in obj:
            return {k: _encode(v, memo) for k, v in obj.items()}
        return {TAG: "d", "v": [_encode(x, memo) for kv in obj.items() for x in kv]}
    if t is tuple:
        return {TAG: "t", "v": [_encode(v, memo) for v in obj]}
    if isinstance(obj, PurePath):
        return {TAG: "p", "v": str(obj)}
    if isinstance(obj, BaseModel):
        if id(obj) in memo:
            return {TAG: "r", "v": memo[id(obj)]}
        memo[id(obj)] = n = len(memo)
        names, values, marks = list(t.model_fields), obj.__dict__, obj.__pydantic_private__
        if obj.__pydantic_extra__ or len(values) != len(names) or marks is None or list(marks) != list(MARKS):
            raise TypeError(f"{t.__name__}: only fields and file:line marks can be cached")
        return {TAG: "m", "c": f"{t.__module__}.{t.__qualname__}", "i": n,
                "f": [_encode(values[k], memo) for k in names],
                "s": sum(1 << i for i, k in enumerate(names) if k in obj.model_fields_set),
                "w": [_encode(marks["_file"], memo), _encode(marks["_line"], memo),
                      [_encode(x, memo) for kv in marks["_lines"].items() for x in kv],
                      [_encode(x, memo) for kv in marks["_sources"].items() for x in kv]]}
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return {TAG: "c", "c": f"{t.__module__}.{t.__qualname__}",
                "f": {f.name: _encode(getattr(obj, f.name), memo) for f in dataclasses.fields(obj)}}
    raise TypeError(f"a {t.__name__} cannot be cached")


def _model_classes() -> dict[str, type[Any]]:
    """Every :class:`~moe_select.located.Located` subclass defined in moe_select, by ``module.qualname``:
    the only model classes an entry may name."""
    from .located import Located

    out: dict[str, type[Any]] = {}
    stack: list[type[Any]] = [Located]
    while stack:
        subclasses: list[type[Any]] = stack.pop().__subclasses__()
        for sub in subclasses:
            if sub.__module__.startswith("moe_select."):
                out[f"{sub.__module__}.{sub.__qualname__}"] = sub
            stack.append(sub)
    return out


def _pairs(flat: Any) -> dict[Any, Any]:
    """``[k1, v1, k2, v2, ...]`` as a dict; raises ValueError (TypeError: an unhashable key) otherwise."""
    if type(flat) is not list or len(flat) % 2:
        raise ValueError("not a list of pairs")
    return dict(zip(flat[::2], flat[1::2]))


def _decoder(kind: type) -> Callable[[dict[str, Any]], Any]:
    """The ``object_hook`` that rebuilds a catalog of ``kind`` from its JSON form (above): only
    :func:`_model_classes` with exactly their fields and marks, and ``kind``. Raises ValueError (or
    TypeError, KeyError) at anything else."""
    import dataclasses

    classes = {name: (cls, tuple(cls.model_fields)) for name, cls in _model_classes().items()
               if tuple(getattr(cls, "__private_attributes__", ())) == MARKS}
    kind_name = f"{kind.__module__}.{kind.__qualname__}"
    kind_fields = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else None
    objects: dict[int, Any] = {}
    set_fields: dict[tuple[str, int], frozenset[str]] = {}

    def hook(d: dict[str, Any]) -> Any:
        tag = d.get(TAG)
        if tag is None:
            return d
        if tag == "m" and len(d) == 6:
            cls, names = classes[d["c"]]
            values, given, marks, n = d["f"], d["s"], d["w"], d["i"]
            if (type(values) is not list or len(values) != len(names) or type(given) is not int or given < 0
                    or given >> len(names) or type(marks) is not list or len(marks) != 4 or type(marks[0]) is not str
                    or type(marks[1]) is not int or type(n) is not int or n in objects):
                raise ValueError(f"{d['c']}: not this class's fields and marks")
            fields_set = set_fields.get((d["c"], given))
            if fields_set is None:
                fields_set = set_fields[d["c"], given] = frozenset(k for i, k in enumerate(names) if given >> i & 1)
            obj = object.__new__(cls)  # as pickle makes it: no __init__, no validator
            obj.__setstate__({"__dict__": dict(zip(names, values)), "__pydantic_extra__": None,
                              "__pydantic_fields_set__": set(fields_set),
                              "__pydantic_private__": {"_file": marks[0], "_line": marks[1], "_lines": _pairs(marks[2]),
                                                       "_sources": {} if marks[3] == [] else _pairs(marks[3])}})
            objects[n] = obj
            return obj
        if len(d) == 2:
            v = d["v"]
            if tag == "d":
                return _pairs(v)
            if tag == "t" and type(v) is list:
                return tuple(v)
            if tag == "p" and type(v) is str:
                return Path(v)
            if tag == "r":
                return objects[v]
        if tag == "c" and d.keys() == {TAG, "c", "f"} and d["c"] == kind_name and kind_fields is not None:
            values = d["f"]
            if type(values) is not dict or list(values) != kind_fields:
                raise ValueError(f"{kind_name}: not its fields")
            obj = object.__new__(kind)
            for name, value in values.items():
                object.__setattr__(obj, name, value)
            return obj
        raise ValueError("not a value of a cached catalog")

    return hook


def _read_document(folder: Path, name: str, magic: bytes) -> bytes | None:
    """The document of entry ``name`` in ``folder`` when it is a regular file this user owns, starts with
    ``magic`` and its MAC verifies (module doc), else None. Raises OSError (and others) for a file that
    cannot be read: the callers count any exception as a miss."""
    if not _separate(folder) or not _private(folder):
        return None
    secret = _secret(create=False)
    if secret is None:
        return None
    fd = os.open(folder / name, _READ_FLAGS)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _owned(st) or st.st_size > MAX_ENTRY_BYTES:
            return None
        data = f.read(MAX_ENTRY_BYTES + 1)
    if not data.startswith(magic):
        return None
    mac, _, document = data[len(magic):].partition(b"\n")
    if not hmac.compare_digest(mac, _mac(secret, document, magic)):
        return None
    return document


def _read(folder: Path, key: str, kind: type[T]) -> T | None:
    """The catalog of entry ``key`` in ``folder`` when it verifies and decodes (module doc), else None."""
    try:
        document = _read_document(folder, f"catalog-{key}.json", MAGIC)
        if document is None:
            return None
        entry = json.loads(document, object_hook=_decoder(kind))
    except Exception:  # missing, unreadable, not ours, edited, truncated, written by other code: a miss
        return None
    if type(entry) is list and entry[:2] == [_FORMAT, key] and len(entry) == 3 and type(entry[2]) is kind:
        return entry[2]
    return None


def _write_document(folder: Path, name: str, magic: bytes, document: bytes) -> None:
    """Store ``document`` as the entry ``name`` of ``folder`` under ``magic`` and its MAC (module doc), then
    keep the newest :data:`KEEP` entries of its kind (the names that share its prefix up to the first ``-``).
    Raises what writing raises (the callers ignore it: the cache is optional)."""
    import tempfile

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _separate(folder) or not _private(folder):
        return
    secret = _secret(create=True)
    if secret is None:
        return
    prefix = name.split("-", 1)[0]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{prefix}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(magic + _mac(secret, document, magic) + b"\n" + document)
        os.replace(tmp, folder / name)
    except BaseException:
        os.unlink(tmp)
        raise
    entries = sorted(folder.glob(f"{prefix}-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[KEEP:]:
        old.unlink()


def _write(folder: Path, key: str, catalog: object) -> None:
    """Store ``catalog`` as the entry ``key`` of ``folder`` (module doc); any failure leaves it unstored."""
    try:
        document = json.dumps([_FORMAT, key, _encode(catalog, {})], ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode()
        _write_document(folder, f"catalog-{key}.json", MAGIC, document)
    except Exception:  # read-only, full, removed meanwhile, a value the form does not hold: the cache is optional
        return


def _key(inputs: Callable[[], Inputs]) -> str | None:
    try:
        return catalog_key(inputs())
    except (OSError, ValueError):  # a folder that cannot be listed: loading reports it
        return None


def load_cached(inputs: Callable[[], Inputs], load: Callable[[], T], kind: type[T]) -> T:
    """``load()`` (a catalog of what ``inputs()`` describes), or the catalog of exactly these inputs that
    an earlier ``load()`` validated (module doc). Raises what ``load`` raises."""
    folder = cache_dir()
    key = _key(inputs) if folder is not None else None
    if folder is not None and key is not None:
        hit = _read(folder, key, kind)
        if hit is not None:
            return hit
    catalog = load()
    if folder is not None and key is not None and _key(inputs) == key:  # unchanged while it loaded
        _write(folder, key, catalog)
    return catalog


# --- Values computed from a catalog (moe_select.cells: the selector's verdict in every cell) -------------------
# Same folder, same key file, same checks: an entry ``<kind>-<key>.json`` is ``moe-select <kind> cache 1``, a
# newline, the MAC (over that first line and the document) and a newline, then the JSON document
# ``[1, kind, key, value]``; ``decode`` rebuilds the value and refuses anything else (a miss).
_VALUE_FORMAT = 1
#: Code stamps (:func:`_code_stamp`) seen by this process: the first is the code it runs (its modules are read
#: once). Entries are read and written only while the files still are that code.
_stamps: list[Any] = []


def _value_magic(kind: str) -> bytes:
    return f"moe-select {kind} cache {_VALUE_FORMAT}\n".encode()


def content_key(catalog: object, kind: str) -> str | None:
    """The key of a value computed from ``catalog`` (a value of kind ``kind``: a name without ``-``): the
    sha256 over the catalog itself (its entry's JSON form, above: every model, field and file:line mark, every
    table and path it holds, so any edit, addition or removal of a capability, rule or operator file that
    changes the catalog changes it), ``kind``, the moe_select version and the sha256 of every module of the
    package (a code change invalidates), and the Python, pydantic, pydantic-core and packaging versions. None
    when the catalog holds something the form cannot (then nothing is cached)."""
    import pydantic
    import packaging
    import pydantic_core

    from . import __version__

    try:
        document = json.dumps(_encode(catalog, {}), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return None
    stamp = _code_stamp()
    if not _stamps:
        _stamps.append(stamp)
    parts: list[Any] = [_VALUE_FORMAT, kind, __version__, sys.version, pydantic.VERSION, pydantic_core.__version__,
                        packaging.__version__, stamp, hashlib.sha256(document).hexdigest()]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _same_code() -> bool:
    """True when the package's modules on disk are still those this process first stamped."""
    return bool(_stamps) and _code_stamp() == _stamps[0]


def read_value(kind: str, key: str, decode: Callable[[Any], T]) -> T | None:
    """The value stored as entry ``key`` of ``kind`` in the cache folder (:func:`cache_dir`) when the cache is on,
    the entry verifies (MAC, ownership: module doc) and ``decode`` accepts its JSON value; else None. Reads
    nothing once the package's code on disk differs from the code this process runs."""
    try:
        folder = cache_dir()  # an empty $MOE_SELECT_CACHE_DIR (InputError) reads nothing either
        if folder is None or not _same_code():
            return None
        document = _read_document(folder, f"{kind}-{key}.json", _value_magic(kind))
        if document is None:
            return None
        entry = json.loads(document)
        if type(entry) is list and len(entry) == 4 and entry[:3] == [_VALUE_FORMAT, kind, key]:
            return decode(entry[3])
    except Exception:  # missing, unreadable, not ours, edited, truncated, refused by decode: a miss
        return None
    return None


def write_value(kind: str, key: str, value: Any) -> None:
    """Store the JSON ``value`` as entry ``key`` of ``kind`` (module doc; the newest :data:`KEEP` of the kind are
    kept). Any failure leaves it unstored; nothing is written when the cache is off or the package's code on
    disk is no longer the code this process runs (its value may be another code's answer)."""
    try:
        folder = cache_dir()
        if folder is None or not _same_code():
            return
        document = json.dumps([_VALUE_FORMAT, kind, key, value], ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode()
        _write_document(folder, f"{kind}-{key}.json", _value_magic(kind), document)
    except Exception:  # read-only, full, removed meanwhile: the cache is optional
        return

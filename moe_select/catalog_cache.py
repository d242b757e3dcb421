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
  Python, pydantic and pydantic-core versions (the pickle format) and packaging's (the catalog's specifier
  verdicts were computed with it).

Any edit, addition, removal or rename of an input file, a different operator folder or plugin, or another
version of moe-select gives another key. The key is computed again after a miss's load, and the catalog is
stored only when the inputs did not change while it loaded. Errors are never cached: a catalog that does not
load raises :func:`load_catalog`'s own :class:`~moe_select.errors.InputError` (file:line, field), every time.

**Where.** ``$MOE_SELECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/moe-select``, else ``~/.cache/moe-select``;
``MOE_SELECT_CACHE_DIR=off`` turns the cache off. The cache only makes loading faster, never different: a
folder that cannot be created or written, a file that cannot be read or unpickled, and any other failure
fall back to :func:`load_catalog` silently. A cache file is a pickle, so it is read only from a folder that
this user owns and that no one else can write (the folder is created with mode 0700); other folders are
not used. The newest :data:`KEEP` entries are kept.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from .errors import InputError

T = TypeVar("T")

CACHE_ENV = "MOE_SELECT_CACHE_DIR"
#: Cache entries kept (the newest by modification time); older ones are removed when one is written.
KEEP = 16
#: Suffixes of the files hashed in every folder the catalog lists (it reads ``*.yaml``, and ``*.yml``
#: and ``*.json`` in operator rules folders).
SUFFIXES = (".yaml", ".yml", ".json")
_FORMAT = 1  # of the pickled payload


def cache_dir() -> Path | None:
    """The cache folder (see the module doc), or None when the cache is off."""
    given = os.environ.get(CACHE_ENV)
    if given is not None and given != "":
        return None if given.strip().lower() == "off" else Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "moe-select"


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
    """(name, sha256) of every module of the package: a catalog pickled by other code is never read."""
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
    parts += [str(inputs.backends_dir), _tree(inputs.backends_dir), _tree(inputs.backends_dir / "a2a"),
              str(inputs.rules_dir), _tree(inputs.rules_dir)]
    for folder, origin in inputs.plugins:
        parts += ["plugin", str(folder), origin, _tree(folder), _tree(folder / "a2a"), _tree(folder / "rules")]
    parts.append(sorted(inputs.adapters.items()))
    for given in inputs.backends:
        folder = given.absolute()
        parts += ["backends", str(given), str(folder), _tree(folder), _tree(folder / "a2a")]
    for given in inputs.rules:
        parts += ["rules", *_rule_path(given)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _private(path: Path) -> bool:
    """True when ``path`` is owned by this user and no one else can write it (POSIX; elsewhere True)."""
    if not hasattr(os, "getuid"):  # pragma: no cover - not POSIX
        return True
    st = os.stat(path)
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(folder: Path, key: str, kind: type[T]) -> T | None:
    path = folder / f"catalog-{key}.pickle"
    try:
        if not _private(folder) or not _private(path):
            return None
        with open(path, "rb") as f:
            payload = pickle.load(f)
    except Exception:  # missing, unreadable, truncated, written by other code: a miss
        return None
    if isinstance(payload, dict) and payload.get("key") == key and isinstance(payload.get("catalog"), kind):
        return payload["catalog"]
    return None


def _write(folder: Path, key: str, catalog: object) -> None:
    import tempfile

    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder):
            return
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".catalog-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump({"key": key, "catalog": catalog}, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, folder / f"catalog-{key}.pickle")
        except BaseException:
            os.unlink(tmp)
            raise
        entries = sorted(folder.glob("catalog-*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink()
    except Exception:  # read-only, full, removed meanwhile, pickling refused: the cache is optional
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

"""Entry points of installed plugins, found without reading every distribution's metadata when none has any.

``importlib.metadata.entry_points(group=...)`` imports ``importlib.metadata`` (with ``email``, ``zipfile``,
``csv``, ...) and parses every installed distribution's ``entry_points.txt``: several milliseconds on a
machine with ~100 distributions, paid by every ``moe-select`` command. :func:`entry_points` first looks at
the raw bytes of each ``*.dist-info`` / ``*.egg-info`` ``entry_points.txt`` on ``sys.path`` (where
``importlib.metadata`` finds them) for the group's name; only when one mentions it, or when distributions
may come from elsewhere (a zip or egg on ``sys.path``, another metadata finder on ``sys.meta_path``, an
unreadable file), does it ask ``importlib.metadata``, whose answer it returns. So the answer is always
``importlib.metadata``'s, and the common case (no plugin of that group installed) costs a folder listing.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import importlib.metadata as md

_INFO_SUFFIXES = (".dist-info", ".egg-info")


def may_declare(group: str) -> bool:
    """False only when no distribution that ``importlib.metadata`` can find declares entry points in
    ``group``; True when one may (then ask ``importlib.metadata``)."""
    from importlib.machinery import PathFinder

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return True  # another finder of distributions: not looked into here
    needle = group.encode()
    for entry in sys.path:
        if not isinstance(entry, str):
            return True
        root = entry or "."
        try:
            names = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                return True  # a zip file: importlib.metadata looks inside
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            return True  # an unpacked egg: its EGG-INFO
        for name in names:
            if not name.lower().endswith(_INFO_SUFFIXES):
                continue
            try:
                with open(os.path.join(root, name, "entry_points.txt"), "rb") as f:
                    if needle in f.read():
                        return True
            except (FileNotFoundError, NotADirectoryError):
                continue  # no entry points (or an egg-info file): importlib.metadata finds none either
            except OSError:
                return True
    return False


def entry_points(group: str) -> list[md.EntryPoint]:
    """``importlib.metadata.entry_points(group=group)`` as a list (see the module doc)."""
    if not may_declare(group):
        return []
    import importlib.metadata as md

    try:
        return list(md.entry_points(group=group))
    except TypeError:  # pragma: no cover - Python < 3.10 API
        return list(md.entry_points().get(group, []))  # type: ignore[attr-defined,unused-ignore]

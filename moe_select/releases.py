"""``backends/engines/`` files read without the condition language: the tables' loader and the engines' release dates
(``releases.yaml``). Kept apart from :mod:`moe_select.engine_tables` so that the deployment reader
(:mod:`moe_select.deployment`) can check a declared engine version against the releases without importing the
conditions (which import the deployment's bounds)."""
from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, field_validator

from .errors import InputError, Issue
from .located import Located


def _pep440_version(v: str) -> str:
    """``v`` itself when it is a PEP 440 version; raises ValueError otherwise (a table's release field)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(v)
    except InvalidVersion:
        raise ValueError(f"{v!r} is not a PEP 440 version") from None
    return v


def engines_dir() -> Path:
    """``backends/engines`` of the installed package."""
    return Path(importlib.import_module("moe_select.backends.engines").__file__ or ".").parent


T = TypeVar("T", bound=Located)


def _load(path: Path, model: type[T]) -> T:
    """The engine table at ``path`` validated as ``model``. Raises :class:`InputError` (file:line) for one that is not
    a mapping or does not validate."""
    from .yamlio import MarkedDict, load_file, validate

    shown = f"backends/engines/{path.name}"
    data = load_file(path, shown, kind="engine table")
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(shown, getattr(data, "line", 0), "", "an engine table holds a mapping"))
    t = validate(model, data, shown)
    assert isinstance(t, model)
    return t


class Releases(Located):
    """``backends/engines/releases.yaml``: each engine's release dates (PEP 440 version -> ``YYYY-MM-DD``, the day its
    first file reached PyPI)."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    engines: dict[Literal["sglang", "vllm", "trtllm"], dict[str, str]]

    @field_validator("engines")
    @classmethod
    def _dated(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for dates in v.values():
            for version, day in dates.items():
                _pep440_version(version)
                if not re.match(r"^\d{4}-\d{2}-\d{2}$", day):
                    raise ValueError(f"{version}: {day!r} is not a YYYY-MM-DD date")
        return v


@functools.lru_cache(maxsize=None)
def releases() -> Releases:
    """The validated ``releases.yaml``."""
    return _load(engines_dir() / "releases.yaml", Releases)


@functools.lru_cache(maxsize=None)
def release_date(engine: str, version: str | None) -> str | None:
    """The date ``engine`` ``version`` was released (``releases.yaml``): its own, or for a version the table lacks the
    newest listed release below it (a lower bound); None for no version, an invalid one, one older than every listed
    release, or an engine without dates."""
    from packaging.version import InvalidVersion, Version

    if version is None:
        return None
    try:
        want = Version(version)
    except InvalidVersion:
        return None
    dated = releases().engines.get(engine, {})  # type: ignore[call-overload]
    if version in dated:
        return dated[version]
    below = [(Version(v), d) for v, d in dated.items() if Version(v) <= want]
    return max(below)[1] if below else None


class Pins(Located):
    """``backends/engines/pins.yaml``: the exact versions each engine release's PyPI wheel requires of the kernel
    packages ``backends/packages.yaml`` names (engine -> release -> distribution -> version)."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    engines: dict[Literal["sglang", "vllm", "trtllm"], dict[str, dict[str, str]]]

    @field_validator("engines")
    @classmethod
    def _versions(cls, v: dict[str, dict[str, dict[str, str]]]) -> dict[str, dict[str, dict[str, str]]]:
        for rels in v.values():
            for release, pins in rels.items():
                _pep440_version(release)
                for version in pins.values():
                    _pep440_version(version)
        return v


@functools.lru_cache(maxsize=None)
def pins() -> Pins:
    """The validated ``pins.yaml``."""
    return _load(engines_dir() / "pins.yaml", Pins)


def pinned(engine: str, release: str | None, package: str) -> str | None:
    """The version of ``package`` that ``engine`` ``release``'s wheel requires exactly (``pins.yaml``), or None (no
    release, one not listed, or a package it does not pin). A release is looked up as written, then by its public
    version (``0.5.15+cu130`` is ``0.5.15``)."""
    if release is None:
        return None
    table = pins().engines.get(engine, {})  # type: ignore[call-overload]
    row = table.get(release) or table.get(release.split("+")[0])
    return row.get(package) if row else None


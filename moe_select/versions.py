"""Version comparisons with PEP 440 semantics (:mod:`packaging`): package facts, ``requires`` conditions
and toolchain minimums. ``0.6.4rc1`` is older than ``0.6.4`` (it does not meet ``>=0.6.4``); a local
version such as ``2.13.0+cpu`` meets ``>=2.4``; ``~=0.6.4`` means ``>=0.6.4, ==0.6.*``."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: planning a deployment without version facts never loads packaging
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version


def parse_specifier(spec: str) -> SpecifierSet:
    """A PEP 440 specifier set such as ``'>=0.6.4,<0.7'``. Raises ValueError naming what is not understood."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"version specifier {spec[:60]!r} is not a PEP 440 specifier (e.g. \">=0.6.4,<0.7\")") from None


def parse_version(version: str) -> Version:
    """A PEP 440 version. Raises ValueError for text that is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        raise ValueError(f"not a version: {version[:60]!r}") from None


#: ``satisfies`` verdicts already computed in this process, ``(version, spec) -> bool``: a memo of a pure
#: function of two strings (and of the installed packaging). :func:`remember` adds the verdicts a catalog
#: computed when it was validated, so a process planning from a cached catalog decides its specifiers
#: without importing :mod:`packaging.specifiers` (10 ms: it compiles PEP 440's regular expressions).
_verdicts: dict[tuple[str, str], bool] = {}


def satisfies(version: str, spec: str | None) -> bool:
    """True when ``version`` meets ``spec`` (None: any version). Pre-releases count as the versions they
    are (older than their release); raises ValueError for an unparsable version or specifier."""
    if spec is None:
        return True
    verdict = _verdicts.get((version, spec))
    if verdict is None:
        verdict = _verdicts[version, spec] = parse_specifier(spec).contains(parse_version(version), prereleases=True)
    return verdict


def known_specifier(spec: str) -> bool:
    """True when ``spec`` is the specifier of a verdict already computed (or taken from the catalog cache by
    :func:`remember`): ``packaging`` parsed it then, so it is a valid PEP 440 specifier."""
    return any(s == spec for _, s in _verdicts)


def remember(known: dict[tuple[str, str], bool]) -> None:
    """Take ``known`` (``(version, spec) -> satisfies(version, spec)``, computed by a process that ran the same
    ``packaging``: the catalog cache's key names its version) as computed: :func:`satisfies` answers these
    pairs from it."""
    _verdicts.update(known)


def at_least(version: str, minimum: str) -> bool:
    """True when ``version`` >= ``minimum``."""
    return parse_version(version) >= parse_version(minimum)


def newer(version: str, than: str) -> bool:
    """True when ``version`` is newer than ``than`` under PEP 440 ordering, local parts ignored (``0.6.18+cu128`` is
    not newer than ``0.6.18``; ``2.6.1.0`` is ``2.6.1``: releases are padded with zeros; ``0.6.18.post1`` and
    ``0.6.19rc1`` are newer, ``0.6.18rc7`` older)."""
    return parse_version(parse_version(version).public) > parse_version(parse_version(than).public)

"""Minimal version specifiers for package and toolchain checks (numeric release segments only).

Supports comma-joined clauses of ``>=, >, <=, <, ==, !=`` with versions like ``0.6.4``; pre/post/local
parts of an installed version (``2.13.0+cpu``, ``0.6.4rc1``) are ignored for the comparison. This
covers every specifier in the bundled capability files; anything else is refused with an error rather
than guessed. (PEP 440's full grammar lives in ``packaging``, which is not a runtime dependency.)
"""
from __future__ import annotations

import operator
import re

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def release(version: str) -> tuple[int, ...]:
    """Numeric release tuple of ``version``: '2.13.0+cpu' -> (2, 13, 0); trailing zeros dropped."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def parse_specifier(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """Parse ``'>=0.6.4,<0.7'``; raise ValueError naming the clause that is not understood."""
    out = []
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"version specifier clause {clause.strip()!r} not understood (use >=, >, <=, <, ==, != with numbers)")
        out.append((m.group(1), release(m.group(2))))
    return out


def satisfies(version: str, spec: str | None) -> bool:
    """True when ``version`` meets every clause of ``spec`` (None: any version)."""
    if spec is None:
        return True
    v = release(version)
    return all(_OPS[op](v, ref) for op, ref in parse_specifier(spec))


def at_least(version: str, minimum: str) -> bool:
    """True when ``version`` >= ``minimum`` (numeric segments)."""
    return release(version) >= release(minimum)

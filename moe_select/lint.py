"""``moe-select check``: lint rule and capability files beyond their schema.

Findings (each ``file:line: message``): rules whose ``when`` can never match; rules shadowed by an
earlier rule that matches everything they match and already lists all their runners; prefer/disable
rules naming a runner that the capability files exclude for every (arch, quant) the rule can match.
Schema errors, unknown runner names and duplicate ids are load errors (:class:`InputError`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .capability import A2ACapability, CommonFacts, RunnerCapability
from .catalog import Catalog, load_catalog
from .conditions import IntRange, When
from .errors import InputError, Issue
from .policy import Rule, RuleFile
from .vocab import ARCHS, QUANTS
from .yamlio import MarkedDict, load_file, validate


@dataclass(frozen=True)
class Finding:
    """One lint finding: where, and what."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def _covers(a: When, b: When) -> bool:
    """True when every deployment matching ``b`` also matches ``a``."""
    for key in a.keys():
        ca, cb = getattr(a, key), getattr(b, key)
        if cb is None:
            return False
        if isinstance(ca, IntRange) or isinstance(cb, IntRange):
            if isinstance(ca, IntRange) and isinstance(cb, list):
                if not all(ca.contains(v) for v in cb):
                    return False
            elif isinstance(ca, IntRange) and isinstance(cb, IntRange):
                if ca.multiple_of and (not cb.multiple_of or cb.multiple_of % ca.multiple_of):
                    return False
                if ca.min is not None and (cb.min is None or cb.min < ca.min):
                    return False
                if ca.max is not None and (cb.max is None or cb.max > ca.max):
                    return False
            else:
                return False
        elif isinstance(ca, bool):
            if ca != cb:
                return False
        elif not set(cb) <= set(ca):
            return False
    return True


def _domain(rule: Rule) -> list[tuple[str, str]]:
    archs = rule.when.arch or list(ARCHS)
    quants = rule.when.quant or list(QUANTS)
    return [(a, q) for a in archs for q in quants]


def lint_catalog(catalog: Catalog) -> list[Finding]:
    """Every finding in the catalog's rules (see module doc)."""
    out: list[Finding] = []
    for i, rule in enumerate(catalog.rules):
        why = rule.when.unsatisfiable()
        if why:
            out.append(Finding(rule.where(), f"rule {rule.id} never fires: {why}"))
            continue
        domain = _domain(rule)
        runnable = {n for n in rule.runners if any(q in catalog.runners[n].formats_on(a) for a, q in domain)}
        for name in rule.runners:
            if name not in runnable:
                out.append(Finding(rule.where(rule.action), f"rule {rule.id} {rule.action}s {name}, which the capability "
                                   f"files exclude for every arch/quant it matches ({rule.when.describe()})"))
        if not runnable:
            out.append(Finding(rule.where(), f"rule {rule.id} never fires: none of its runners can run where it matches"))
            continue
        if rule.action == "prefer":
            for earlier in catalog.rules[:i]:
                if earlier.action == "prefer" and _covers(earlier.when, rule.when) and runnable <= set(earlier.runners):
                    out.append(Finding(rule.where(), f"rule {rule.id} never fires: rule {earlier.id} ({earlier.where()}) "
                                       "matches everything it matches and already prefers all its runners"))
                    break
    return out


def _check_file(path: Path) -> None:
    data = load_file(path)
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(str(path), 0, "", "the file must hold a mapping"))
    model = (RuleFile if "rules" in data else RunnerCapability if "runner" in data else A2ACapability if "a2a" in data
             else CommonFacts if "constraints" in data else None)
    if model is None:
        raise InputError(Issue(str(path), getattr(data, "line", 0), "", "not a rule file (rules:) or capability file "
                               "(runner:, a2a:, constraints:)"))
    validate(model, data, str(path))


def check(paths: Iterable[str | Path] = ()) -> tuple[list[Finding], Catalog]:
    """Validate ``paths`` (rule files or directories; capability files are validated alone) together with
    the bundled files, then lint. Raises :class:`InputError` for files that do not load."""
    rule_paths: list[Path] = []
    issues: list[Issue] = []
    for p in map(Path, paths):
        if p.is_file():
            try:
                _check_file(p)
            except InputError as exc:
                issues += exc.issues
                continue
            if "rules" in load_file(p):
                rule_paths.append(p)
        else:
            rule_paths.append(p)
    if issues:
        raise InputError(issues)
    catalog = load_catalog(rule_paths, use_env=False)
    return lint_catalog(catalog), catalog

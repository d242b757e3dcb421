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


def _kind(path: Path) -> str:
    """``rules``, ``capability`` (validated, returns nothing) for one file; raises InputError."""
    data = load_file(path)
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(str(path), getattr(data, "line", 0), "", "the file must hold a mapping"))
    model = (RuleFile if "rules" in data else RunnerCapability if "runner" in data else A2ACapability if "a2a" in data
             else CommonFacts if "constraints" in data else None)
    if model is None:
        raise InputError(Issue(str(path), getattr(data, "line", 0), "", "not a rule file (rules:) or capability file "
                               "(runner:, a2a:, constraints:)"))
    validate(model, data, str(path))
    return "rules" if model is RuleFile else "capability"


def check(paths: Iterable[str | Path] = (), *, use_env: bool = True) -> tuple[list[Finding], Catalog]:
    """Validate ``paths`` (files, or directories of ``*.yaml``/``*.yml``/``*.json``) with the bundled files,
    then lint. Rule files join the catalog (as ``--rules`` would); capability files are validated on
    their own. ``$MOE_SELECT_RULES`` is included when ``use_env``, as ``explain`` does. Raises
    :class:`InputError` for files that do not load."""
    from .catalog import RULE_GLOBS

    rule_paths: list[Path] = []
    issues: list[Issue] = []
    for p in map(Path, paths):
        if not p.exists():
            issues.append(Issue(str(p), 0, "", "no such file or directory"))
            continue
        files = sorted(f for g in RULE_GLOBS for f in p.glob(g)) if p.is_dir() else [p]
        if not files:
            issues.append(Issue(str(p), 0, "", f"no {', '.join(RULE_GLOBS)} files in this directory"))
        for f in files:
            try:
                if _kind(f) == "rules":
                    rule_paths.append(f)
            except InputError as exc:
                issues += exc.issues
    if issues:
        raise InputError(issues)
    catalog = load_catalog(rule_paths, use_env=use_env)
    return lint_catalog(catalog), catalog

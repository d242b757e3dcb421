"""``moe-select check``: lint rule and capability files beyond their schema.

Findings (each ``file:line: message``) have a severity: ``error`` (``check`` exits 1), ``warning`` and
``note`` (shown; the exit code stays 0). Errors:
- rules whose ``when`` can never match (empty lists or ranges, no multiple in a range, sizes <= 0);
- prefer rules shadowed by an earlier rule that matches everything they match and already lists all
  their runners, or left with no runner by disable rules that match wherever they do (a disable that
  removes some of a prefer rule's runners, leaving it others to choose, is a note);
- prefer/disable rules naming a runner that the capability files exclude for every (arch, quant, a2a)
  the rule can match; disable rules that leave no runner for some (arch, quant) they match;
- a2a backends (capability files) that no runner accepts;
- runner and a2a files of schema 3 whose ``lists:`` lacks a decision for a list kind, and exhaustive
  decisions whose source is not upstream code at a commit (a schema-2 file, read as all open, is a warning);
- facts whose ``source`` is not in a checkable form (``owner/repo@version:path[:symbol]``,
  ``owner/repo#N``, ``(reported) owner/repo#N``, ``this project: <path>``);
- negative activation and routing facts (``supported: false``) that never match (:func:`negative_fact_findings`;
  a version bound of one engine's package without that engine in ``when``, and a contradiction with an unconditional
  positive fact, are warnings);
- warnings: an operator override of a bundled rule that changes the chosen runner for (arch, quant) pairs
  outside the new rule's own conditions (the same runner chosen by another rule is no finding); comments
  in rule files that recommend ``when`` keys the schema refuses.
Schema errors, unknown runner names, duplicate ids and arch/family/activation/routing names no vocabulary
declares (``vocabulary.yaml``; a did-you-mean) are load errors (:class:`InputError`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from .capability import A2ACapability, CommonFacts, PackageTable, RunnerCapability
from .catalog import Catalog, load_catalog, same_as_bundled
from .conditions import NEGATED, IntRange, When
from .errors import InputError, Issue
from .policy import Rule, RuleFile, duplicate_rule_ids
from .vocab import ENGINES, INSTALL_ENGINE, QUANTS, arch_in, declared_archs
from .yamlio import MarkedDict, load_file, shorten, validate


@dataclass(frozen=True)
class Finding:
    """One lint finding: where (``file:line``), what, and ``severity``: ``error`` fails ``check``; ``warning``
    (something may not do what its author meant) and ``note`` (worth knowing, nothing is lost) are shown."""

    where: str
    message: str
    severity: Literal["error", "warning", "note"] = "error"

    def __str__(self) -> str:
        mark = "" if self.severity == "error" else f"{self.severity}: "
        return f"{self.where}: {mark}{self.message}"


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
                if ca.not_multiple_of and (not cb.not_multiple_of or ca.not_multiple_of % cb.not_multiple_of):
                    return False  # b excludes the multiples of a divisor of a's: then it excludes a's too
                if ca.not_one_of and any(cb.contains(v) for v in ca.not_one_of):
                    return False  # a excludes values b may hold
                if ca.min is not None and (cb.min is None or cb.min < ca.min):
                    return False
                if ca.max is not None and (cb.max is None or cb.max > ca.max):
                    return False
            else:
                return False
        elif isinstance(ca, bool):
            if ca != cb:
                return False
        elif key in NEGATED:   # every value but those listed: b must exclude at least what a excludes
            if not set(ca) <= set(cb):
                return False
        elif not set(cb) <= set(ca):
            return False
    return True


def _domain(rule: Rule) -> list[tuple[str, str]]:
    """The (declared arch, format) pairs ``rule`` can match (its arch names, families and ranges expanded
    over the declared archs of the active vocabulary)."""
    archs = [a for a in declared_archs() if rule.when.arch is None or arch_in(a, rule.when.arch)]
    quants: list[str] = list(rule.when.quant or QUANTS)
    return [(a, q) for a in archs for q in quants]


def _accepts_a2a(cap: RunnerCapability, a2a: str, formats: set[Any]) -> bool:
    """True when some fact of ``cap`` lets it take ``a2a``'s dispatch (any engine, any conditions)."""
    consumed = {f for d in cap.dispatch for f in d.formats}
    restricted = bool(cap.a2a) and all(a2a not in fact.values for fact in cap.a2a)
    return bool(consumed & formats) and not restricted


def _runnable(catalog: Catalog, name: str, rule: Rule) -> bool:
    """True when ``name`` can run some (arch, quant, a2a) that ``rule`` can match."""
    cap = catalog.runners[name]
    if rule.when.a2a is not None:
        ok = False
        for a in rule.when.a2a:
            acap = catalog.a2a.get(a)
            if acap is not None:
                formats = set(acap.formats_used(tuple(acap.modes))) if acap.modes else {acap.format}
                ok = ok or _accepts_a2a(cap, a, formats)
        if not ok:
            return False
    engines: list[str | None] = list(rule.when.engine) if rule.when.engine else [None, *ENGINES, INSTALL_ENGINE]
    formats = {f for r in cap.support if r.supported for f in r.formats}

    def open_gap(a: str, q: str) -> bool:
        # the selector's gaps for a cell no support row names (selector._support_reasons): an arch no row names
        # ("archs"), a format none names ("formats"), else the cell ("support"); each unverified, so eligible, where
        # the runner's list of that kind is open under some engine the rule can match
        kinds = [k for k, missing in (("archs", not cap.has_arch(a)), ("formats", q not in formats)) if missing]
        return all(any(cap.decision(k, e) is None for e in engines) for k in kinds or ["support"])

    return any(q in cap.formats_on(a) or open_gap(a, q) for a, q in _domain(rule))


def _only_arch_quant(rule: Rule) -> bool:
    return set(rule.when.keys()) <= {"arch", "quant"}


def choice(catalog: Catalog, rules: list[Rule], arch: str, quant: str) -> tuple[str, str] | None:
    """(runner, rule id) that ``runner: auto`` would pick for ``arch``/``quant`` considering only the rules
    whose ``when`` names nothing but arch and quant, and the capability files' arch x format support
    (other facts are not looked at); None when no such rule picks one."""
    disabled = {n for r in rules if r.action == "disable" and _only_arch_quant(r)
                and (r.when.arch is None or arch_in(arch, r.when.arch)) and (r.when.quant is None or quant in r.when.quant)
                for n in r.runners}
    for r in rules:
        if r.action != "prefer" or not _only_arch_quant(r):
            continue
        if (r.when.arch is None or arch_in(arch, r.when.arch)) and (r.when.quant is None or quant in r.when.quant):
            for n in r.runners:
                if n not in disabled and quant in catalog.runners[n].formats_on(arch):
                    return n, r.id
    return None


def _override_findings(catalog: Catalog) -> list[Finding]:
    out = []
    for rid, old in catalog.replaced.items():
        new = next(r for r in catalog.rules if r.id == rid)
        mine = set(_domain(new))
        moved: dict[tuple, list[str]] = {}
        for arch, quant in _domain(old):
            if (arch, quant) in mine:
                continue  # inside the new rule's own conditions: what the operator asked for
            before, after = choice(catalog, catalog.bundled_rules, arch, quant), choice(catalog, catalog.rules, arch, quant)
            if (before and before[0]) != (after and after[0]):  # the same runner through another rule: no change
                key = (arch, before, after)
                moved.setdefault(key, []).append(quant)
        for (arch, before, after), quants in sorted(moved.items(), key=lambda kv: str(kv[0])):
            was = f"{before[0]} (rule {before[1]})" if before else "no rule's choice"
            now = f"{after[0]} (rule {after[1]})" if after else "no rule's choice (refused unless another rule matches)"
            out.append(Finding(new.where(), f"overriding rule {rid} (bundled at {old.where()}) also changes {arch} "
                               f"{', '.join(quants)}, outside the new rule's conditions: {was} -> {now}", "warning"))
        # the cells above are arch x format only: an override that narrows another condition (an engine, an activation)
        # moves the deployments outside it without a cell to show it (a new user's trial, break52: an engine or
        # activation narrowed, check clean, SGLang's gpt-oss plan moved to another runner)
        narrowed = [k for k in new.when.keys() if k not in ("arch", "quant") and getattr(new.when, k) != getattr(old.when, k)]
        if narrowed and new.prefer is not None:
            said = ", ".join(f"{k}: {_cond(getattr(new.when, k))} (bundled: {_cond(getattr(old.when, k))})" for k in narrowed)
            out.append(Finding(new.where(), f"overriding rule {rid} (bundled at {old.where()}) changes {said}: deployments "
                               f"the bundled rule matched outside that now miss it (check compares arch x format cells "
                               f"only: explain one such deployment to see where it goes)", "warning"))
    return out


def _cond(value: Any) -> str:
    """A condition's value as a rule file writes it (None: any)."""
    if value is None:
        return "any"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value)


_COMMENT_WHEN = re.compile(r"when:\s*(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _comment_findings(catalog: Catalog) -> list[Finding]:
    """Comments in rule files that recommend a ``when`` key the schema refuses (e.g. ``(when: foo)``)."""
    allowed = set(When.model_fields)
    out = []
    for display, path in catalog.rule_paths.items():
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for no, line in enumerate(lines, 1):
            if "#" not in line:
                continue
            comment = line[line.index("#"):]
            for m in _COMMENT_WHEN.finditer(comment):
                body = m.group(1)
                keys = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", body) if body.startswith("{") else [body]
                for k in keys:
                    if k not in allowed:
                        out.append(Finding(f"{display}:{no}", f"a comment recommends when key {k!r}, which the schema "
                                           f"refuses (when keys: {', '.join(sorted(allowed))})", "warning"))
    return out


def _fact_objects(cap: Any) -> list[Any]:
    """The objects of one runner or all-to-all capability file that carry a ``source`` (the file's and its facts')."""
    if isinstance(cap, RunnerCapability):
        return [cap, cap.adapter, cap.weight_layout, cap.jit, *cap.support, *cap.activations, *cap.routing,
                *cap.dispatch, *cap.a2a, *cap.cuda_graph, *cap.constraints, *cap.packages, *cap.toolchain, *cap.notes]
    if isinstance(cap, A2ACapability):
        return [cap, cap.archs, cap.cuda_graph, *cap.modes.values(), *cap.unavailable, *cap.constraints, *cap.packages]
    return []


def _sources_of(objs: Iterable[Any]) -> list[tuple[str, str]]:
    return [(obj.where(), obj.source) for obj in objs if obj is not None and isinstance(getattr(obj, "source", None), str)]


def iter_sources(catalog: Catalog) -> list[tuple[str, str]]:
    """``(file:line, source)`` of every fact of every capability file (and the file-level sources)."""
    objs: list[Any] = [o for cap in [*catalog.runners.values(), *catalog.a2a.values()] for o in _fact_objects(cap)]
    objs += [catalog.common, *catalog.common.constraints, *catalog.packages_table.values(),
             *(p.markers for p in catalog.packages_table.values())]
    return _sources_of(objs)


def _source_findings(catalog: Catalog, alone: Iterable[Any] = ()) -> list[Finding]:
    """Facts whose source is not in a checkable form (capability.SOURCE_PATTERN): a repository file at a
    version, a PR or issue, a report, or this project's own code and measurements; those of the catalog's files
    and of ``alone`` (capability files checked on their own, not joined to the catalog)."""
    import re

    from .capability import SOURCE_PATTERN

    pattern = re.compile(SOURCE_PATTERN)
    sources = iter_sources(catalog) + _sources_of(o for cap in alone for o in _fact_objects(cap))
    out = [Finding(where, f"fact without a checkable source: {src[:100]!r} (write owner/repo@version:path[:symbol], "
                   "owner/repo#N, (reported) owner/repo#N, or 'this project: <path>')")
           for where, src in sources if not pattern.match(src)]
    # a branch name moves: the file it names today is not the one read (a fifth new user's trial, 2026-12-04)
    moving = re.compile(r"[\w.-]+/[\w.-]+@(main|master|HEAD|develop|dev|nightly|latest)(?=:)")
    out += [Finding(where, f"source cites a moving branch, not a commit or release: {m.group(0)!r} in {src[:80]!r} (cite the "
                    "commit or release tag read)", "warning")
            for where, src in sources for m in [moving.search(src)] if m]
    root = _project_root()
    if root is not None:   # this project's files named by 'this project:' sources exist (a checkout: tests/ is there)
        path_re = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:py|yaml|yml|json|md|sh|toml))")
        upstream = re.compile(r"^\s*(\(reported\)\s*)?[\w.-]+/[\w.-]+(@|#|\s*\()")   # an upstream segment
        for where, src in sources:
            if not src.startswith("this project"):
                continue
            ours = [seg for seg in src.split("this project", 1)[1].split(";") if not upstream.match(seg)]
            for path in path_re.findall(";".join(ours)):
                if not (root / path).exists() and not (root / "moe_select" / path).exists():
                    out.append(Finding(where, f"source names {path}, which this project does not have (checked under "
                                       f"{root.name}/)", "warning"))
    return out


def _project_root() -> Path | None:
    """The checkout this package runs from (its parent holding pyproject.toml and tests/), or None for an installed
    wheel (whose tests/ and benchmarks/ are not shipped: 'this project' paths are not checked then)."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "pyproject.toml").is_file() and (here / "tests").is_dir() else None


def evidence_findings(caps: Iterable[Any]) -> list[Finding]:
    """Evidence decisions (issue 18) of runner and all-to-all capability files: an error for a file of schema 3
    whose ``lists:`` has no decision for some list kind (:data:`~moe_select.capability.LIST_KINDS`,
    :data:`~moe_select.capability.A2A_LIST_KINDS`), and for an exhaustive decision whose source is not upstream
    code at a commit (:data:`~moe_select.capability.UPSTREAM_CODE_PATTERN`: a PR, an issue or this project's own
    text cannot say that every other value is refused); a warning for a file of schema 2 (loaded with every list
    open: its gaps are unverified, never refused)."""
    from .capability import A2A_LIST_KINDS, LIST_KINDS, UPSTREAM_CODE_PATTERN, Exhaustive

    code = re.compile(UPSTREAM_CODE_PATTERN)
    out: list[Finding] = []
    for cap in caps:
        if not isinstance(cap, (RunnerCapability, A2ACapability)):
            continue
        what = f"runner {cap.runner}" if isinstance(cap, RunnerCapability) else f"a2a {cap.a2a}"
        kinds = LIST_KINDS if isinstance(cap, RunnerCapability) else (
            A2A_LIST_KINDS + (("dispatch_precision",) if cap.dispatch_precision else ()))
        if cap.schema_version < 3:
            out.append(Finding(cap.where("schema_version"), f"{what}: schema_version {cap.schema_version} has no evidence "
                               "decisions (lists:), so every list is read as open: a value it does not name is unverified, "
                               "never refused; move to schema_version 3 and decide each list", "warning"))
            continue
        missing = [k for k in kinds if k not in cap.lists]
        if missing:
            out.append(Finding(cap.where("lists") if cap.lists else cap.where(),
                               f"{what}: lists: has no decision for {', '.join(missing)} (write open, or exhaustive: "
                               "<owner/repo@commit:path:symbol> citing the upstream check that refuses every other value)"))
        for kind, d in cap.lists.items():
            if isinstance(d, Exhaustive) and not code.match(d.exhaustive):
                out.append(Finding(d.where("exhaustive"), f"{what}: the exhaustive {kind} list cites {d.exhaustive[:100]!r}, "
                                   "not upstream code at a commit (owner/repo@commit:path[:symbol]); a PR, an issue or this "
                                   "project's own text cannot say that every other value is refused: cite the check, or "
                                   "make the list open"))
    return out


def negative_fact_findings(caps: Iterable[Any], engine_packages: dict[str, str]) -> list[Finding]:
    """Negative activation and routing facts (``supported: false``) of runner files that cannot do what they say
    (``engine_packages``: package name -> the serving engine it is). Errors: a fact whose ``when`` names activations
    (routing methods) none of its values is, or only engines the runner's ``engines:`` fact leaves out: it never
    matches. Warnings: a fact bounded by an engine's package version (``requires: {sglang: ...}``) that does not name
    that engine alone in ``when``, where the runner runs under another engine: there the package is read at its newest
    checked release, so the fact refuses that engine's deployments too; a fact with no ``when`` and no ``requires``
    naming a value that a positive fact with neither lists: the two contradict, and the positive one never takes it."""
    out: list[Finding] = []
    for cap in caps:
        if not isinstance(cap, RunnerCapability):
            continue
        shipped = list(cap.engines.values) if cap.engines is not None else None
        for kind, key in (("activations", "activation"), ("routing", "routing")):
            facts = getattr(cap, kind)
            for f in facts:
                if f.supported or f.values == "any":
                    continue
                named = getattr(f.when, key, None) if f.when is not None else None
                engines = f.when.engine if f.when is not None else None
                vals = ", ".join(f.values)
                if named is not None and not set(named) & set(f.values):
                    out.append(Finding(f.where(), f"runner {cap.runner}: this negative {kind} fact ({vals}) never "
                                       f"matches: its when names {key} {', '.join(named)}, none of its values"))
                    continue
                if engines is not None and shipped is not None and not set(engines) & set(shipped):
                    out.append(Finding(f.where(), f"runner {cap.runner}: this negative {kind} fact ({vals}) never "
                                       f"matches: its when names engine {', '.join(engines)}, which does not ship "
                                       f"{cap.runner} (engines: {', '.join(shipped)})"))
                    continue
                for pkg in f.requires or {}:
                    eng = engine_packages.get(pkg)
                    others = [e for e in (engines or shipped or ENGINES) if e != eng]
                    if eng is not None and others and (shipped is None or set(others) & set(shipped)):
                        out.append(Finding(f.where(), f"runner {cap.runner}: this negative {kind} fact ({vals}) is "
                                           f"bounded by {pkg}'s version but does not name {eng} alone in its when: under "
                                           f"{', '.join(others)} {pkg} is read at its newest checked release, so it "
                                           f"refuses those deployments too (write when: {{engine: [{eng}]}})",
                                           "warning"))
                if f.when is None and not f.requires:
                    for p in facts:
                        both = [v for v in f.values if p.supported and p.when is None and not p.requires
                                and p.values != "any" and v in p.values]
                        if both:
                            out.append(Finding(f.where(), f"runner {cap.runner}: this negative {kind} fact refuses "
                                               f"{', '.join(both)} everywhere, which the positive fact at {p.where()} "
                                               "takes everywhere: they contradict (give the negative one its when or "
                                               "requires, or drop the value from the positive one)", "warning"))
                            break
    return out


def uncovered_findings(catalog: Catalog) -> list[Finding]:
    """Arch x format x engine cells no rule covers, from the selector itself (:func:`moe_select.cells.evaluate`:
    one representative deployment per cell, the catalog's rules included; :func:`~moe_select.cells.cached_evaluate`
    keeps them per catalog and code, in the process and on disk): cells the selector refuses with
    ``not_preferred`` because some runner is eligible there (supported or unverified) but no matching ``prefer``
    rule names an eligible runner. One finding per group of :func:`moe_select.cells.uncovered` (an arch, a set of
    formats, the engines leaving them uncovered; naming the eligible runners with their evidence and the cell
    count), at the not_preferred reason's source: a ``warning`` for cells where one of those runners is
    ``supported`` (the facts say it runs, the policy refuses), a ``note`` for cells where every one is only
    ``unverified`` (no fact says it runs either: strict mode would refuse it anyway)."""
    from .cells import cached_evaluate, uncovered

    out = []
    cells = cached_evaluate(catalog)  # the same cells as evaluate(catalog), kept per catalog and code
    for arch, quants, engines, eligible, source in uncovered(cells):
        severity: Literal["warning", "note"] = "warning" if any(lv == "supported" for _, lv in eligible) else "note"
        runners = ", ".join(f"{n} ({lv})" for n, lv in eligible)
        formats = f"every format ({len(quants)})" if quants == cells.quants else ", ".join(quants)
        out.append(Finding(source or (catalog.rule_files[0] if catalog.rule_files else "rules/"),
                           f"no rule covers {arch} x {formats} x engine {', '.join(engines)} ({len(quants) * len(engines)} "
                           f"cells): {runners} eligible there, but no matching prefer rule names an eligible runner, so "
                           "explain refuses them with not_preferred (a prefer rule for this arch settles it)", severity))
    return out


def lint_catalog(catalog: Catalog) -> list[Finding]:
    """Every finding in the catalog's rules and capability files (see module doc)."""
    out: list[Finding] = _source_findings(catalog)
    for folder in catalog.backend_sources:   # an operator folder of no capability file: plans read the bundled facts alone
        f = Path(folder)
        if not any(f.glob("*.yaml")) and not any((f / "a2a").glob("*.yaml")):
            out.append(Finding(folder, "no capability file in this operator folder (runner files *.yaml, a2a/*.yaml, "
                               "common.yaml, vocabulary.yaml): plans read the bundled facts alone; is it the folder that "
                               "holds them?", "warning"))
    disables = [r for r in catalog.rules if r.action == "disable" and not r.when.unsatisfiable()]
    for i, rule in enumerate(catalog.rules):
        why = rule.when.unsatisfiable()
        if why:
            out.append(Finding(rule.where(), f"rule {rule.id} never fires: {why}"))
            continue
        if rule.measured:  # prefer: measured names no runner: the measurement table given at planning does (issue 25)
            continue
        domain = _domain(rule)
        runnable = {n for n in rule.runners if _runnable(catalog, n, rule)}
        for name in rule.runners:
            if name not in runnable:
                out.append(Finding(rule.where(rule.action), f"rule {rule.id} {rule.action}s {name}, which the capability "
                                   f"files exclude for every arch/quant/a2a it matches ({rule.when.describe()})"))
        if not runnable:
            out.append(Finding(rule.where(), f"rule {rule.id} never fires: none of its runners can run where it matches"))
            continue
        if rule.action == "prefer" and not rule.when.keys() and catalog.rules[i + 1:]:
            # a rule with no conditions matches every deployment: every rule after it is second (a new operator's trial
            # deleted a when: line, and the plans of every GPU cited it; check blamed only the bundled rules it shadows)
            out.append(Finding(rule.where(), f"rule {rule.id} has no when: it matches every deployment, ahead of the "
                               f"{len(catalog.rules) - i - 1} rule(s) after it (give it conditions, or mean it)", "warning"))
        if rule.action == "prefer":
            shadowed = False
            for earlier in catalog.rules[:i]:
                if earlier.action == "prefer" and _covers(earlier.when, rule.when) and runnable <= set(earlier.runners):
                    out.append(Finding(rule.where(), f"rule {rule.id} never fires: rule {earlier.id} ({earlier.where()}) "
                                       "matches everything it matches and already prefers all its runners"))
                    shadowed = True
                    break
            if shadowed:
                continue
            cancelling = [d for d in disables if _covers(d.when, rule.when)]
            gone = {n for d in cancelling for n in d.runners} & runnable
            if gone == runnable:
                names = ", ".join(f"{d.id} ({d.where()})" for d in cancelling if set(d.runners) & runnable)
                out.append(Finding(rule.where(), f"rule {rule.id} never chooses anything: disable rule(s) {names} "
                                   "disable all its runners wherever it matches"))
            else:
                left = ", ".join(n for n in rule.runners if n in runnable and n not in gone)
                for n in sorted(gone):
                    d = next(d for d in cancelling if n in d.runners)
                    out.append(Finding(rule.where("prefer"), f"rule {rule.id} prefers {n}, which rule {d.id} ({d.where()}) "
                                       f"disables wherever this rule matches; it still chooses among {left}", "note"))
        else:
            covering = [d for d in disables if _covers(d.when, rule.when)]
            off = {n for d in covering for n in d.runners}
            starved = sorted({(a, q) for a, q in domain
                              if any(q in c.formats_on(a) for c in catalog.runners.values())
                              and all(n in off for n, c in catalog.runners.items() if q in c.formats_on(a))})
            if starved:
                pairs = ", ".join(f"{a}/{q}" for a, q in starved[:8]) + (", ..." if len(starved) > 8 else "")
                out.append(Finding(rule.where(), f"rule {rule.id} (with the disable rules covering it) disables every runner "
                                   f"that can run {pairs}: matching deployments are always refused"))
    for name, cap in sorted(catalog.a2a.items()):
        formats = set(cap.formats_used(tuple(cap.modes))) if cap.modes else {cap.format}
        takers = [r for r, c in catalog.runners.items() if _accepts_a2a(c, name, formats)]
        if not takers:
            out.append(Finding(cap.where(), f"a2a {name}: no runner accepts its dispatch (none consumes "
                               f"{'/'.join(sorted(f for f in formats if f))} without an a2a restriction that leaves it out), "
                               "so every deployment with it is refused"))
    out += evidence_findings([*catalog.runners.values(), *catalog.a2a.values()])
    out += negative_fact_findings(catalog.runners.values(), _engine_packages(catalog))
    out += _override_findings(catalog)
    out += _comment_findings(catalog)
    out += module_findings(catalog.runners.values())
    out += uncovered_findings(catalog)
    for display, bundled in sorted(catalog.replaced_files.items()):   # an operator's correction of a bundled file: said
        out.append(Finding(display, f"replaces the bundled {bundled}: that file's facts are not read (this file's are, "
                           "whole)", "note"))
    return out


def _same_file(a: Any, b: Any) -> bool:
    """Whether capability models ``a`` and ``b`` were read from one file (a folder given to ``check`` is in the
    catalog and given too: its findings are reported once)."""
    try:
        return b is not None and Path(a._file).resolve() == Path(b._file).resolve()
    except (OSError, TypeError, AttributeError):
        return False


def module_findings(caps: Iterable[Any]) -> list[Finding]:
    """A warning per runner whose adapter ``module`` is not found on this machine (``importlib.util.find_spec``: its
    parent packages are imported, the module itself is not), or whose parent package fails to import: ``resolve``
    would refuse that runner (an eighth new user's trial: a file naming a module that does not exist passed ``check``).
    A warning, not an error: a plugin's module may be installed on the serving machine only."""
    import importlib.util

    out = []
    for cap in caps:
        module = getattr(cap, "module", None)
        if not module:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
            why = "it is not found on this machine"
        except (ImportError, ValueError) as exc:     # a parent package missing or failing to import
            found, why = False, f"finding it failed: {type(exc).__name__}: {str(exc)[:200]}"
        if not found:
            out.append(Finding(cap.where("module"), f"runner {cap.runner}: adapter module {module!r}: {why}; resolve "
                               "refuses this runner here (install the package that provides it, or fix module:)",
                               "warning"))
    return out


def _engine_packages(catalog: Catalog) -> dict[str, str]:
    """Package name -> the serving engine it is (backends/packages.yaml ``engine:``)."""
    return {p.name: p.engine for p in catalog.packages_table.values() if p.engine is not None}


_VOCABULARY_KEYS = ("archs", "families", "activations", "routings", "engines")
#: Keys of a deployment file (moe_select.deployment.Deployment) that no rule, capability, formats or vocabulary file has
_DEPLOYMENT_KEYS = ("gpu", "model_config", "model", "tp", "ep", "engine_version", "layer_runners")


def _kind(path: Path) -> tuple[str, Any]:
    """``(kind, model)`` of one file, validated: kind ``rules``, ``capability``, ``formats`` (the formats table,
    :mod:`moe_select.formats`) or ``vocabulary`` (:mod:`moe_select.vocabulary`); raises InputError."""
    from .formats import FormatsFile
    from .vocabulary import Vocabulary

    data = load_file(path, kind="rule or capability file")
    if not isinstance(data, MarkedDict):
        raise InputError(Issue(str(path), getattr(data, "line", 0), "", "the file must hold a mapping"))
    if "schema_version" not in data and any(k in data for k in _DEPLOYMENT_KEYS):
        # a fleet trial (break55): a deployment with runner: or a2a: was linted as a capability file (a dozen schema
        # errors, 'did you mean engines?'): check lints facts and policy, not deployments
        key = next(k for k in _DEPLOYMENT_KEYS if k in data)
        raise InputError(Issue(str(path), int(data.key_lines.get(key, data.line)), key,
                               "a deployment file: check lints rule and capability files (backends/, rules/); gate a "
                               f"deployment with `moe-select explain -d {path} --strict` (exit 1 when it is refused or "
                               "only unverified)"))
    model = (RuleFile if "rules" in data else RunnerCapability if "runner" in data else A2ACapability if "a2a" in data
             else CommonFacts if "constraints" in data else PackageTable if "packages" in data
             else FormatsFile if "formats" in data
             else Vocabulary if any(k in data for k in _VOCABULARY_KEYS) else None)
    if model is None:
        raise InputError(Issue(str(path), getattr(data, "line", 0), "", "not a rule file (rules:), capability file "
                               "(runner:, a2a:, constraints:, packages:), formats table (formats:) or vocabulary file "
                               "(archs:, families:, ...)"))
    obj = validate(model, data, str(path))
    kind = "rules" if model is RuleFile else "vocabulary" if model is Vocabulary else "formats" if model is FormatsFile else "capability"
    return kind, obj


def _given_names(catalog: Catalog, capability: list[Any], vocabularies: list[tuple[Path, Any]]) -> list[Issue]:
    """Names the capability files given to ``check`` use that neither the catalog's vocabulary nor a
    vocabulary file given with them declares (the bundled file itself, given again, is not read twice)."""
    from .vocabulary import Vocabulary, bundled_path, index_of, merge, name_issues

    bundled = bundled_path().resolve()
    # the bundled file, or a byte-for-byte copy of it (a copied bundled folder), is not read twice
    extra = [v for path, v in vocabularies if path.resolve() != bundled and not same_as_bundled(path, bundled)]
    base = catalog.vocabulary or Vocabulary.model_construct(schema_version=3)
    merged, issues = merge([base, *extra]) if extra else (base, [])
    idx = index_of(merged)
    for obj in capability:
        issues += name_issues(obj, idx)
    return issues


def _load(rule_paths: list[Path], use_env: bool, backends_dirs: Sequence[Path] = ()) -> Catalog:
    """The catalog ``check`` lints: ``load_catalog(rule_paths, use_env=use_env)``, read from the on-disk catalog
    cache (:func:`~moe_select.catalog.cached_load_catalog`: the same catalog, validated by an earlier process
    from exactly these files) when ``use_env`` and the cache is on. An empty ``$MOE_SELECT_CACHE_DIR`` is not
    this command's business: the files are loaded, as before there was a cache."""
    from .catalog import cached_load_catalog
    from .catalog_cache import cache_dir

    try:
        cached = use_env and cache_dir() is not None
    except InputError:
        cached = False
    return (cached_load_catalog(rule_paths, backends_dirs) if cached
            else load_catalog(rule_paths, use_env=use_env, backends_dirs=backends_dirs))


def check(paths: Iterable[str | Path] = (), *, use_env: bool = True,
          backends_dirs: Iterable[str | Path] = ()) -> tuple[list[Finding], Catalog]:
    """Validate ``paths`` (files, or directories of ``*.yaml``/``*.yml``/``*.json``) with the bundled files,
    then lint. Rule files join the catalog (as ``--rules`` would); a directory of capability files other than the
    bundled one, and each of ``backends_dirs``, joins it as an operator capability folder (as ``--backends`` would:
    linted whole, every fact's source included); a capability file given alone is validated on
    its own, and the arch, family, activation and routing names they use must be declared (by the
    catalog's vocabulary or a ``vocabulary.yaml`` given with them). ``$MOE_SELECT_RULES`` is included when
    ``use_env``, as ``explain`` does. Raises :class:`InputError` for files that do not load and for names no
    vocabulary declares (file:line, did-you-mean)."""
    from .catalog import RULE_GLOBS

    from .catalog import bundled_dirs

    rule_paths: list[Path] = []
    cap_dirs: list[Path] = [Path(d) for d in backends_dirs]
    bundled = bundled_dirs()[0].resolve()
    capability: list[Any] = []
    vocabularies: list[tuple[Path, Any]] = []
    issues: list[Issue] = []
    dup_issues: list[Issue] = []
    for p in map(Path, paths):
        try:
            exists = p.exists()
        except OSError as exc:  # a path the OS refuses (too long, ...)
            issues.append(Issue(shorten(str(p))[1:-1], 0, "", f"cannot read: {exc.strerror or exc}"))
            continue
        if not exists:
            issues.append(Issue(str(p), 0, "", "no such file or directory"))
            continue
        files = sorted(f for g in RULE_GLOBS for f in p.glob(g)) if p.is_dir() else [p]
        if not files:
            issues.append(Issue(str(p), 0, "", f"no {', '.join(RULE_GLOBS)} files in this directory"))
        rules_here: list[Any] = []  # a directory's rule files are one layer (as --rules DIR reads them): one id each
        for f in files:
            try:
                kind, obj = _kind(f)
            except InputError as exc:
                issues += exc.issues
                continue
            if kind == "rules":
                rule_paths.append(f)
                rules_here.extend(obj.rules)
            elif kind == "vocabulary":
                vocabularies.append((f, obj))
            elif kind == "capability":
                capability.append(obj)
                folder = p.resolve()
                if p.is_dir() and folder != bundled and bundled not in folder.parents and p not in cap_dirs:
                    cap_dirs.append(p)     # an operator's capability folder: linted whole, as --backends reads it
        dup_issues += duplicate_rule_ids(rules_here)
    if issues:
        raise InputError(issues + dup_issues)
    # duplicate ids do not stop the load: the catalog's own checks (unknown runners, undeclared archs) are reported with
    # them in one pass, as explain --rules does (a new user's trial, break51: check showed one class of error per run)
    try:
        catalog = _load(rule_paths, use_env, cap_dirs)
    except InputError as exc:
        # the catalog names a file as it read it (absolute where the path was), the duplicate-id pass as given
        def spot(i: Issue) -> tuple[str, int, str]:
            return os.path.abspath(i.file), i.line, i.field
        had = {spot(i) for i in exc.issues}
        raise InputError([*exc.issues, *(i for i in dup_issues if spot(i) not in had)]) from None
    if dup_issues:
        raise InputError(dup_issues)
    issues = _given_names(catalog, capability, vocabularies)
    if issues:
        raise InputError(issues)
    findings = lint_catalog(catalog)
    seen = {(f.where, f.message) for f in findings}  # a bundled file given again is reported once
    # a capability file given alone is not in the catalog: its facts' sources are linted here, as a folder's are
    alone = [c for c in capability if c not in [*catalog.runners.values(), *catalog.a2a.values()]]
    findings += [f for f in [*evidence_findings(capability), *negative_fact_findings(capability, _engine_packages(catalog)),
                             *(_source_findings(catalog, alone) if alone else []),
                             *module_findings(c for c in alone if isinstance(c, RunnerCapability)
                                              and not _same_file(c, catalog.runners.get(c.runner)))]
                 if (f.where, f.message) not in seen]
    return findings, catalog

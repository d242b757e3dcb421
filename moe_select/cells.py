"""Arch x format x engine cells judged by the selector: what ``moe-select matrix`` shows per runner
(``supported`` / ``unverified`` / ``refused`` with the fact's ``file:line``) and what ``moe-select check``
reads to find cells no rule covers.

Nothing here decides anything itself: every cell is one call of :func:`moe_select.selector.select` on a
representative deployment (:data:`REPRESENTATIVE`) with that arch, format and engine, on a declared machine
that declares no packages (each is assumed present at the newest version the facts were checked against, as
``explain`` assumes for another machine). A runner's verdict in a cell is its candidate's ``evidence`` there
(a ``disable`` rule is policy, not evidence: it does not change the level); a cell's plan is the report's.
The cost is one ``select`` per cell: declared archs x formats x engines (15 x 11 x 3 = 495 calls when this
was written, about 1.6 s of CPU: README, "Command line").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog
from .deployment import deployment_from_dict, understand
from .environment import declared
from .report import Report

#: The deployment every cell plans, besides its arch, format (``quant``) and engine: Qwen3-30B-A3B's MoE
#: layer (examples/model_configs/Qwen__Qwen3-30B-A3B: 128 experts, top-8, hidden 2048, expert width 768;
#: silu, softmax top-k renormalized), one rank (tp 1, ep 1, no all-to-all), both phases, the format's
#: default parameters (fp8_block 128x128, int group 128), CUDA graphs as the engines default them (on for a
#: GPU, off on cpu). Facts that depend on something else (expert parallelism, another activation, a2a
#: backends) are not exercised by the matrix: ``moe-select explain`` judges a real deployment.
REPRESENTATIVE: dict[str, Any] = {
    "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
              "activation": "silu", "routing": "renormalize"},
    "tp": 1, "ep": 1, "a2a": "none", "phase": "both",
}

#: Evidence levels, strongest first (the order of every count).
LEVELS = ("supported", "unverified", "refused")


@dataclass(frozen=True)
class Verdict:
    """One runner in one cell: its ``level``, and for ``refused`` the first reason's ``code`` and ``source``
    (the fact's ``file:line``), for ``unverified`` the first unknown's (the open list's ``file:line``);
    ``code`` and ``source`` are None for ``supported``."""

    level: str
    code: str | None = None
    source: str | None = None

    def text(self) -> str:
        """``supported``, ``unverified: <code> (<file:line>)`` or ``refused: <code> (<file:line>)``."""
        return self.level if self.code is None else f"{self.level}: {self.code} ({self.source})"


@dataclass(frozen=True)
class CellPlan:
    """A cell's outcome: the chosen ``runner`` (None: refused), its ``level`` (``refused`` without a plan),
    ``why`` (the choosing rule's id, or the refusal's reason codes), and ``not_preferred``: the runners the
    selector found eligible but that no matching ``prefer`` rule names, when that refused the cell (each as
    ``(runner, evidence)``), with the reason's ``source``."""

    runner: str | None
    level: str
    why: str
    not_preferred: tuple[tuple[str, str], ...] = ()
    source: str | None = None


@dataclass
class Cells:
    """Every cell of a catalog: ``verdicts[(runner, arch, quant, engine)]`` and ``plans[(arch, quant, engine)]``,
    over ``archs`` (the catalog's declared archs), ``quants`` (:data:`moe_select.vocab.QUANTS`) and ``engines``."""

    archs: tuple[str, ...]
    quants: tuple[str, ...]
    engines: tuple[str, ...]
    runners: tuple[str, ...]
    verdicts: dict[tuple[str, str, str, str], Verdict] = field(default_factory=dict)
    plans: dict[tuple[str, str, str], CellPlan] = field(default_factory=dict)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per engine: ``runners.<level>`` (runner x arch x format cells at each level), ``plans.<level>``
        (arch x format cells whose plan has that level, ``refused``: no plan) and ``not_preferred`` (refused
        cells where some runner is eligible but no matching rule prefers one)."""
        out: dict[str, dict[str, int]] = {}
        for e in self.engines:
            c = {f"runners.{lv}": 0 for lv in LEVELS} | {f"plans.{lv}": 0 for lv in LEVELS} | {"not_preferred": 0}
            for (_, _, _, engine), v in self.verdicts.items():
                if engine == e:
                    c[f"runners.{v.level}"] += 1
            for (_, _, engine), p in self.plans.items():
                if engine == e:
                    c[f"plans.{p.level}"] += 1
                    c["not_preferred"] += bool(p.not_preferred)
            out[e] = c
        return out


def _archs(catalog: Catalog) -> tuple[str, ...]:
    """The archs the catalog's vocabulary declares (the bundled list before the vocabulary is data)."""
    from . import vocab

    fn = getattr(vocab, "declared_archs", None)
    return tuple(fn(catalog.vocabulary)) if fn is not None else tuple(vocab.ARCHS)


def _verdict(c: Any) -> Verdict:
    if c.evidence == "refused":
        r = next((r for r in c.reasons if r.code != "disabled_by_rule"), None)
        return Verdict("refused", r.code if r else None, r.source if r else None)
    if c.evidence == "unverified":
        u = c.unknowns[0] if c.unknowns else None
        return Verdict("unverified", u.code if u else None, u.source if u else None)
    return Verdict("supported")


def _plan(report: Report) -> CellPlan:
    if report.plan is not None:
        p = report.plan
        return CellPlan(p.runner, p.evidence, p.chosen_by.rule or p.chosen_by.how)
    level = {c.backend: c.evidence for c in report.candidates}
    np_ = [r for r in report.reasons if r.code == "not_preferred"]
    codes = ", ".join(dict.fromkeys(r.code for r in report.reasons)) or "no candidate"
    return CellPlan(None, "refused", codes, tuple((str(r.backend), level.get(str(r.backend), "?")) for r in np_),
                    np_[0].source if np_ else None)


def evaluate(catalog: Catalog, *, archs: tuple[str, ...] | None = None, quants: tuple[str, ...] | None = None,
             engines: tuple[str, ...] | None = None) -> Cells:
    """Plan :data:`REPRESENTATIVE` in every cell (``archs`` x ``quants`` x ``engines``, by default every declared
    arch, every format and every engine) with :func:`~moe_select.selector.select` over ``catalog`` (its rules
    included: operator and plugin rules count), and collect each runner's verdict and each cell's plan.
    Raises :class:`~moe_select.errors.InputError` only if a cell's deployment is invalid (a bug: every
    declared arch and format is valid input)."""
    from .selector import select
    from .vocab import ENGINES, QUANTS

    cells = Cells(archs=archs if archs is not None else _archs(catalog), quants=quants if quants is not None else tuple(QUANTS),
                  engines=engines if engines is not None else tuple(ENGINES), runners=tuple(sorted(catalog.runners)))
    env = declared(packages=None, nvcc=None, cuda=None, prebuilt=None, where="moe_select/cells.py (REPRESENTATIVE)")
    for arch in cells.archs:
        for quant in cells.quants:
            for engine in cells.engines:
                dep = deployment_from_dict({**REPRESENTATIVE, "model": dict(REPRESENTATIVE["model"]), "arch": arch,
                                            "quant": quant, "engine": engine}, "<matrix cell>")
                report = select(understand(dep, a2a_backends=catalog.a2a), env, catalog)
                for c in report.candidates:
                    cells.verdicts[(c.backend, arch, quant, engine)] = _verdict(c)
                cells.plans[(arch, quant, engine)] = _plan(report)
    return cells


def uncovered(cells: Cells) -> list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...], str | None]]:
    """Cells no rule covers, grouped: ``(arch, formats, engines, eligible runners with their evidence, source)``.
    A cell is uncovered when the selector refused it with ``not_preferred``: some runner is eligible (supported
    or unverified) but no matching ``prefer`` rule names an eligible runner. Cells where one of those runners is
    ``supported`` and cells where every one is ``unverified`` are never grouped together; within each kind, per
    arch, the formats one engine leaves uncovered are grouped, and engines with the same formats share a group
    (their eligible runners merged, each with its best level)."""
    by_cell: dict[tuple[str, str, bool], list[str]] = {}
    eligible: dict[tuple[str, str, bool], dict[str, str]] = {}
    source: dict[tuple[str, str, bool], str | None] = {}  # per arch, engine and kind: that engine's refusal's rule
    for (arch, quant, engine), p in cells.plans.items():
        if p.not_preferred:
            firm = any(level == "supported" for _, level in p.not_preferred)
            by_cell.setdefault((arch, engine, firm), []).append(quant)
            runners = eligible.setdefault((arch, engine, firm), {})
            for name, level in p.not_preferred:
                runners[name] = "supported" if "supported" in (level, runners.get(name)) else level
            source.setdefault((arch, engine, firm), p.source)
    groups: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for (arch, engine, firm), listed in by_cell.items():
        groups.setdefault((arch, tuple(listed), firm), []).append(engine)
    out = []
    for (arch, quants, firm), engines in groups.items():
        merged: dict[str, str] = {}
        for e in engines:
            for name, level in eligible[(arch, e, firm)].items():
                merged[name] = "supported" if "supported" in (level, merged.get(name)) else level
        out.append((arch, quants, tuple(engines), tuple(sorted(merged.items())), source[(arch, engines[0], firm)]))
    return out


# --- The cells of a catalog, cached (moe-select check's uncovered-cell pass) ---------------------------------
#: Cells kept in this process (the newest ``_MEMO_KEEP``), by :func:`~moe_select.catalog_cache.content_key`.
_memo: dict[str, Cells] = {}
_MEMO_KEEP = 8
_KIND = "cells"


def _str_or_none(v: Any) -> str | None:
    if v is not None and type(v) is not str:
        raise ValueError("not a string")
    return v


def _strs(v: Any) -> tuple[str, ...]:
    if type(v) is not list or any(type(x) is not str for x in v):
        raise ValueError("not a list of strings")
    return tuple(v)


def encode_cells(cells: Cells) -> dict[str, Any]:
    """The JSON form of ``cells`` (:func:`decode_cells` reads it back): the axes, then each distinct verdict once
    and, per (runner, arch, quant, engine), its verdict's index; each plan as a list of its fields."""
    table: dict[Verdict, int] = {}
    verdicts = [[*k, table.setdefault(v, len(table))] for k, v in cells.verdicts.items()]
    return {"archs": list(cells.archs), "quants": list(cells.quants), "engines": list(cells.engines),
            "runners": list(cells.runners), "verdict_table": [[v.level, v.code, v.source] for v in table],
            "verdicts": verdicts,
            "plans": [[*k, p.runner, p.level, p.why, [list(x) for x in p.not_preferred], p.source]
                      for k, p in cells.plans.items()]}


def decode_cells(doc: Any) -> Cells:
    """The :class:`Cells` of :func:`encode_cells`'s form, in the same order. Raises ValueError (or TypeError,
    IndexError) for anything else: the on-disk cache then counts a miss."""
    if type(doc) is not dict or set(doc) != {"archs", "quants", "engines", "runners", "verdict_table", "verdicts", "plans"}:
        raise ValueError("not the cells' fields")
    table = []
    for row in doc["verdict_table"]:
        if type(row) is not list or len(row) != 3 or type(row[0]) is not str:
            raise ValueError("not a verdict")
        table.append(Verdict(row[0], _str_or_none(row[1]), _str_or_none(row[2])))
    cells = Cells(archs=_strs(doc["archs"]), quants=_strs(doc["quants"]), engines=_strs(doc["engines"]),
                  runners=_strs(doc["runners"]))
    for row in doc["verdicts"]:
        if type(row) is not list or len(row) != 5 or type(row[4]) is not int or row[4] < 0:
            raise ValueError("not a runner's verdict in a cell")
        key = _strs(row[:4])
        cells.verdicts[(key[0], key[1], key[2], key[3])] = table[row[4]]
    for row in doc["plans"]:
        if type(row) is not list or len(row) != 8 or type(row[6]) is not list:
            raise ValueError("not a cell's plan")
        arch, quant, engine = _strs(row[:3])
        if type(row[4]) is not str or type(row[5]) is not str:
            raise ValueError("not a cell's plan")
        pairs = [_strs(x) for x in row[6]]
        if any(len(x) != 2 for x in pairs):
            raise ValueError("not a (runner, evidence) pair")
        not_preferred = tuple((x[0], x[1]) for x in pairs)
        cells.plans[(arch, quant, engine)] = CellPlan(_str_or_none(row[3]), row[4], row[5], not_preferred, _str_or_none(row[7]))
    return cells


def _active_for(catalog: Catalog) -> bool:
    """True when the vocabulary and formats table the selector reads (:func:`moe_select.vocab.use`,
    :func:`moe_select.formats.use`) are ``catalog``'s own, as loading it made them: then the cells are a function
    of the catalog (and the code) alone, and may be cached by it."""
    from . import formats, vocab
    from .vocabulary import index_of

    want = index_of(catalog.vocabulary) if catalog.vocabulary is not None else None
    return vocab._active is want and (not catalog.formats or formats.table() is catalog.formats)


def _copy(cells: Cells) -> Cells:
    return Cells(cells.archs, cells.quants, cells.engines, cells.runners, dict(cells.verdicts), dict(cells.plans))


def cached_evaluate(catalog: Catalog) -> Cells:
    """:func:`evaluate` (every cell of ``catalog``), or the cells an earlier call computed for the same catalog
    and code: kept in this process, and on disk beside the catalog cache (:mod:`moe_select.catalog_cache`: the
    same folder, HMAC key and checks; ``MOE_SELECT_CACHE_DIR=off`` turns both off). The key
    (:func:`~moe_select.catalog_cache.content_key`) is a digest of the catalog itself (every fact, rule and
    file:line mark: an edit to any capability, rule or operator file that changes the catalog gives another key)
    and of moe_select's code and the libraries' versions. Nothing is cached when the active vocabulary or formats
    table is not the catalog's (:func:`_active_for`). The cells are the same either way, only faster: about
    5 s of CPU for every cell on a 2-core VM, against ~0.1 s to digest the catalog and read an entry."""
    from . import catalog_cache, selector  # noqa: F401  (the selector is loaded before the code is stamped)

    try:
        on = catalog_cache.cache_dir() is not None
    except Exception:  # an empty $MOE_SELECT_CACHE_DIR: not this command's business; compute
        on = False
    key = catalog_cache.content_key(catalog, _KIND) if on and _active_for(catalog) else None
    if key is None:
        return evaluate(catalog)
    hit = _memo.get(key)
    if hit is None:
        hit = catalog_cache.read_value(_KIND, key, decode_cells)
        if hit is None:
            hit = evaluate(catalog)
            catalog_cache.write_value(_KIND, key, encode_cells(hit))
        if len(_memo) >= _MEMO_KEEP:
            _memo.pop(next(iter(_memo)))
        _memo[key] = hit
    return _copy(hit)

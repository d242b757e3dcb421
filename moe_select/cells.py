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
    source: dict[str, str | None] = {}
    for (arch, quant, engine), p in cells.plans.items():
        if p.not_preferred:
            firm = any(level == "supported" for _, level in p.not_preferred)
            by_cell.setdefault((arch, engine, firm), []).append(quant)
            runners = eligible.setdefault((arch, engine, firm), {})
            for name, level in p.not_preferred:
                runners[name] = "supported" if "supported" in (level, runners.get(name)) else level
            source.setdefault(arch, p.source)
    groups: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for (arch, engine, firm), listed in by_cell.items():
        groups.setdefault((arch, tuple(listed), firm), []).append(engine)
    out = []
    for (arch, quants, firm), engines in groups.items():
        merged: dict[str, str] = {}
        for e in engines:
            for name, level in eligible[(arch, e, firm)].items():
                merged[name] = "supported" if "supported" in (level, merged.get(name)) else level
        out.append((arch, quants, tuple(engines), tuple(sorted(merged.items())), source[arch]))
    return out

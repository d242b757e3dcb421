"""All-to-all buffer capacities, checked before launch (issue 23).

An all-to-all backend sizes its buffer for a fixed number of tokens per rank, set by an engine variable (the a2a
file names it, with its default per engine). A forward that passes more tokens per rank through it fails: at
startup where the engine checks its arguments, at CUDA-graph capture after the weights loaded (sgl-project/sglang#29942:
a graph batch of 128 with 6 tokens per request is 768 tokens per rank against a capacity of 512), or at the first such
forward. The facts are the a2a file's
``capacity`` entries (:class:`~moe_select.capability.CapacityFact`: variable, default per engine and version, the
most the engine accepts, which forwards pass through it, when the engine finds out) and its constraints on two
quantities this module computes per engine:

- ``a2a_capacity``: the deployment's ``a2a_capacity`` (a launch line's variable), else the entry's default;
- ``a2a_tokens_per_rank``: the most tokens one rank passes through the buffer in one forward, over the phases whose
  forwards pass through it (the entry's ``phases``, and its ``modes`` against the mode each phase runs in) and whose
  need is given: prefill ``max_tokens_per_rank`` (the chunk per rank: SGLang divides ``--chunked-prefill-size`` by
  dp under DP attention; divided again over tp / dp ranks where the entry's ``prefill_scatter`` says the engine
  scatters it before the dispatch), decode ``decode_tokens_per_rank`` (the decode CUDA-graph batch x tokens per request).
  A need left at its default is not checked (the report says so): the default is this project's guess, not the
  engine's.

The constraint (``a2a_tokens_per_rank`` at most ``a2a_capacity``) refuses with the variable, the need, where each
number came from and the fix (:func:`describe`, :func:`fix`). Torch-free, pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .capability import A2ACapability, CapacityFact
from .deployment import Understood

#: The quantities this module adds to a deployment's facts.
QUANTITIES = ("a2a_tokens_per_rank", "a2a_capacity")


@dataclass(frozen=True)
class Need:
    """The tokens one rank passes through the buffer in one forward of ``phase`` (``how``: where the number came from)."""

    phase: str
    tokens: int
    how: str


@dataclass
class Capacity:
    """The capacity entry that holds for one engine and what the deployment asks of it."""

    fact: CapacityFact
    a2a: str
    engine: str
    capacity: int
    capacity_how: str
    #: The phases whose forwards pass through the buffer and whose need is given.
    needs: list[Need] = field(default_factory=list)
    #: The phases whose forwards pass through the buffer but whose need is not given (not checked).
    unknown: list[str] = field(default_factory=list)

    @property
    def need(self) -> int | None:
        """``a2a_tokens_per_rank``: the largest given need, or None."""
        return max((n.tokens for n in self.needs), default=None)


def phase_needs(u: Understood) -> dict[str, Need]:
    """The given per-rank tokens of each phase ``u`` runs: prefill -> ``max_tokens_per_rank`` when given (not its
    default), decode -> ``decode_tokens_per_rank`` when known."""
    out: dict[str, Need] = {}
    if "prefill" in u.phases and not u.provenance.get("max_tokens_per_rank", "default").startswith("default"):
        out["prefill"] = Need("prefill", u.max_tokens_per_rank, u.provenance["max_tokens_per_rank"])
    if "decode" in u.phases and u.decode_tokens_per_rank is not None:
        out["decode"] = Need("decode", u.decode_tokens_per_rank, u.provenance.get("decode_tokens_per_rank", "given"))
    return out


def bounded_phases(fact: CapacityFact, a2a: A2ACapability, u: Understood) -> list[str]:
    """The phases of ``u`` whose forwards pass through the buffer of ``fact``: in ``fact.phases`` (None: any) and, where
    ``fact.modes`` is given, running in one of those modes (``a2a_mode``, or ``auto``'s mode for that phase)."""
    out = []
    for p in u.phases:
        if fact.phases is not None and p not in fact.phases:
            continue
        if fact.modes is not None and not set(a2a.modes_used(u.a2a_mode, (p,))) & set(fact.modes):
            continue
        out.append(p)
    return out


def capacity_for(u: Understood, a2a: A2ACapability | None, facts: Mapping[str, Any],
                 requires_ok: Callable[[CapacityFact], bool]) -> Capacity | None:
    """The first ``capacity`` entry of ``a2a`` whose ``when`` matches ``facts`` (one engine's) and whose ``requires``
    holds (``requires_ok``: the selector's package-version test), with the deployment's needs of it; None when none
    applies (another engine, another version, or an a2a without a capacity)."""
    if a2a is None:
        return None
    for fact in a2a.capacity:
        if (fact.when is None or fact.when.matches(facts)) and requires_ok(fact):
            given = phase_needs(u)
            ranks = max(1, u.tp // max(1, u.dp or 1))
            if fact.prefill_scatter and "prefill" in given and ranks > 1:
                n = given["prefill"]
                given["prefill"] = Need("prefill", -(-n.tokens // ranks), f"{n.how} / {ranks} ranks (the engine scatters the "
                                        f"chunk over tp / dp = {u.tp} / {u.dp or 1} ranks before the dispatch)")
            if u.a2a_capacity is not None:
                value, how = u.a2a_capacity, f"{fact.variable} = {u.a2a_capacity} ({u.provenance.get('a2a_capacity', 'given')})"
            else:
                value = fact.default
                how = (f"{fact.variable} not set: {facts.get('engine')}'s default {fact.default}"
                       + (f" ({fact.default_note})" if fact.default_note else "") + f" [{fact.where('default')}]")
                grown = given.get(fact.default_covers) if fact.default_covers else None
                if grown is not None and grown.tokens > value:   # the engine sizes it to the chunk: max(chunk, default)
                    value = grown.tokens
                    how = (f"{fact.variable} not set: {facts.get('engine')} sizes it to the {grown.phase} chunk per rank, "
                           f"{grown.tokens} ({grown.how}), over its default {fact.default}"
                           + (f" ({fact.default_note})" if fact.default_note else "") + f" [{fact.where('default')}]")
            phases = bounded_phases(fact, a2a, u)
            return Capacity(fact=fact, a2a=a2a.a2a, engine=str(facts.get("engine")), capacity=value, capacity_how=how,
                            needs=[given[p] for p in phases if p in given], unknown=[p for p in phases if p not in given])
    return None


def quantities(cap: Capacity | None) -> dict[str, int | None]:
    """The two quantities of ``cap`` as facts (both None without one)."""
    if cap is None:
        return {"a2a_capacity": None, "a2a_tokens_per_rank": None}
    return {"a2a_capacity": cap.capacity, "a2a_tokens_per_rank": cap.need}


_WHEN = {"startup": "at startup (it checks its arguments)", "capture": "only at CUDA-graph capture, after the weights loaded",
         "runtime": "only at the first forward that exceeds it"}


def describe(cap: Capacity) -> str:
    """The numbers behind a capacity verdict: each need with where it came from, the capacity with where it came from,
    and when the engine itself would find out."""
    needs = "; ".join(f"{n.phase} {n.tokens} ({n.how})" for n in cap.needs) or "none given"
    return (f"tokens per rank through the buffer: {needs}; capacity: {cap.capacity_how}; {cap.engine} finds out "
            f"{_WHEN[cap.fact.checked]}")


def _flag(engine: str, means: str) -> str | None:
    from .engine_tables import ENGINES, table

    if engine not in ENGINES:
        return None
    entry = next((e for e in table(engine).flags if e.means == means and not e.removed), None)
    return entry.name if entry is not None else None


def fix(cap: Capacity, field_name: str) -> str | None:
    """How to make a violated capacity constraint hold: raise the variable to the need (where the engine accepts
    that much), or lower each need above the capacity (naming the deployment key and the engine's flag)."""
    if field_name == "a2a_capacity":
        top = cap.fact.max
        return f"set {cap.fact.variable} <= {top}" + (f" (and >= {cap.need}, the need)" if cap.need else "") if top else None
    need = cap.need
    if need is None:
        return None
    parts = []
    if cap.fact.max is None or need <= cap.fact.max:
        parts.append(f"set {cap.fact.variable}={need}" + (f" (at most {cap.fact.max})" if cap.fact.max else ""))
    for n in cap.needs:
        if n.tokens <= cap.capacity:
            continue
        if n.phase == "decode":
            flag = _flag(cap.engine, "cuda_graph_max_bs")
            parts.append(f"a decode CUDA-graph batch x tokens per request <= {cap.capacity} (decode_tokens_per_rank"
                         + (f"; {cap.engine} {flag}" if flag else "") + ")")
        else:
            flag = _flag(cap.engine, "chunked_prefill")
            parts.append(f"a prefill chunk per rank <= {cap.capacity} (max_tokens_per_rank"
                         + (f"; {cap.engine} {flag}" if flag else "") + ")")
    return ", or ".join(parts) or None


def unchecked(cap: Capacity) -> str | None:
    """What could not be checked for lack of a need (an assumption line), or None."""
    if not cap.unknown:
        return None
    keys = {"prefill": "max_tokens_per_rank (the prefill chunk per rank)",
            "decode": "decode_tokens_per_rank (decode CUDA-graph batch x tokens per request)"}
    return (f"a2a {cap.a2a} under {cap.engine}: {', '.join(cap.unknown)} tokens per rank not given ("
            + "; ".join(keys[p] for p in cap.unknown) + f"): not checked against {cap.fact.variable} ({cap.capacity}) "
            f"[{cap.fact.where()}]")


__all__ = ["Need", "Capacity", "phase_needs", "bounded_phases", "capacity_for", "quantities", "describe", "fix", "unchecked"]

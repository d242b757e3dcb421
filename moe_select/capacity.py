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
  engine's. Where the deployment gives no decode batch but the engine sets its own (the engine table's
  ``graph_defaults``: SGLang's limit from the GPU's memory and tp, sgl-project/sglang#28914) and every rank decodes its
  own batch (one attention rank per DP group), that limit is the decode need (:func:`engine_decode_need`).

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
    #: Why the engine's own decode batch limit was not taken as the decode need, where one is known (for the note).
    remark: str | None = None
    #: The engine's version the facts are read at (declared or detected, else the newest checked): the fix names
    #: the flags that release has.
    engine_version: str | None = None

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


def engine_decode_need(u: Understood, facts: Mapping[str, Any],
                       requires_ok: Callable[[dict[str, str] | None], bool]) -> tuple[Need | None, str | None]:
    """The decode batch limit the engine of ``facts`` sets itself when the deployment gives none (its table's ``graph_defaults``,
    the entry whose release range holds: ``requires_ok`` is the selector's package-version test, which reads a
    deployment without ``engine_version`` at the newest release checked), as the decode need per rank: ``(need,
    None)``; or ``(None, why not)`` where a limit is known but is not each rank's batch (attention ranks share a DP
    group's batch: each dispatches its share, not checked); ``(None, None)`` where the engine sets none here (no
    table entry, CUDA graphs off, a GPU whose memory is not known, a branch the memory range does not decide)."""
    from .engine_tables import ENGINES, table
    from .vocab import gpu_memory_gib

    engine = str(facts.get("engine"))
    if engine not in ENGINES or not u.cuda_graph or "decode" not in u.phases or u.gpu is None:
        return None, None
    entry = next((g for g in table(engine).graph_defaults if requires_ok({engine: g.version})), None)
    memory = gpu_memory_gib(u.gpu) if entry is not None else None
    if entry is None or memory is None:
        return None, None
    row = entry.max_bs(memory[0], u.tp)
    if row is None:
        return None, None
    said = (f"{engine}'s own decode CUDA-graph batch limit, no flag giving one: {row.max_bs} on {u.gpu} ({memory[1]}) at "
            f"tp {u.tp} [{row.where()}]")
    attn_tp = facts.get("attn_tp", u.tp)
    if attn_tp != 1:
        return None, f"{said}; attention over {attn_tp} ranks per DP group, each dispatching its share of the batch"
    if u.speculative:
        said += " (x the draft's tokens per request with speculative decoding: at least this)"
    return Need("decode", row.max_bs, said), None


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
                 requires_ok: Callable[[dict[str, str] | None], bool], engine_version: str | None = None) -> Capacity | None:
    """The first ``capacity`` entry of ``a2a`` whose ``when`` matches ``facts`` (one engine's) and whose ``requires``
    holds (``requires_ok``: the selector's package-version test of a ``requires`` mapping), with the deployment's needs
    of it (a decode need not given: the engine's own limit, :func:`engine_decode_need`); None when none applies (another
    engine, another version, or an a2a without a capacity)."""
    if a2a is None:
        return None
    for fact in a2a.capacity:
        if (fact.when is None or fact.when.matches(facts)) and requires_ok(fact.requires):
            given = phase_needs(u)
            remark = None
            if "decode" not in given:
                own, remark = engine_decode_need(u, facts, requires_ok)
                if own is not None:
                    given["decode"] = own
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
                            needs=[given[p] for p in phases if p in given], unknown=[p for p in phases if p not in given],
                            remark=remark, engine_version=engine_version)
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


def _flag(engine: str, means: str, version: str | None) -> str | None:
    """The engine's flag of ``means`` that release ``version`` has (None: the newest), or None."""
    from .engine_tables import ENGINES, table

    if engine not in ENGINES:
        return None
    entry = table(engine).flag_at(means, version)
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
            flag = _flag(cap.engine, "cuda_graph_max_bs", cap.engine_version)
            parts.append(f"a decode CUDA-graph batch x tokens per request <= {cap.capacity} (decode_tokens_per_rank"
                         + (f"; {cap.engine} {flag}" if flag else "") + ")")
        else:
            flag = _flag(cap.engine, "chunked_prefill", cap.engine_version)
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
            f"[{cap.fact.where()}]" + (f" ({cap.remark})" if cap.remark and "decode" in cap.unknown else ""))


__all__ = ["Need", "Capacity", "phase_needs", "engine_decode_need", "bounded_phases", "capacity_for", "quantities", "describe", "fix", "unchecked"]

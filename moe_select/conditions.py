"""Conditions (``when``) and numeric constraints shared by rule files and capability files.

A deployment is seen by conditions as flat *facts* (:func:`facts_of`): the categorical values arch,
quant, a2a, deepep_mode, activation, routing, cuda_graph, and the quantities below. ``moe_tp = tp / ep``
is the MoE tensor-parallel size; each rank keeps ``experts_per_rank = num_experts / ep`` experts and
``intermediate_per_rank = moe_intermediate_size / moe_tp`` rows of each (knowledge file, "Parallelism").
Quantities are exact fractions, so an uneven split is visible instead of being rounded away.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal, Mapping, Sequence, Union

from pydantic import Field, model_validator

from .located import Located
from .vocab import A2A, Activation, Arch, Quant, Routing

Quantity = Literal[
    "num_experts", "top_k", "hidden_size", "moe_intermediate_size", "tp", "ep", "moe_tp",
    "experts_per_rank", "intermediate_per_rank",
]
QUANTITIES: tuple[str, ...] = Quantity.__args__  # type: ignore[attr-defined]


def fmt_num(x: Fraction | int) -> str:
    """An exact quantity as text: 96, or 153.6 for an uneven split."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


class IntRange(Located):
    """A numeric condition: ``min`` <= value <= ``max``, value a multiple of ``multiple_of``."""

    min: int | None = None
    max: int | None = None
    multiple_of: int | None = Field(default=None, gt=0)

    def contains(self, value: Fraction | int) -> bool:
        """True when ``value`` is within the range and a multiple of ``multiple_of``."""
        value = Fraction(value)
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > self.max:
            return False
        return self.multiple_of is None or value % self.multiple_of == 0

    def empty(self, positive: bool = False) -> bool:
        """True when no value can match: ``min > max``, or no multiple of ``multiple_of`` in [min, max]
        (``positive``: only values >= 1 count, as for every quantity of a deployment)."""
        lo = max(self.min or 1, 1) if positive else self.min
        if lo is not None and self.max is not None and lo > self.max:
            return True
        if self.multiple_of and self.max is not None:
            lo = lo if lo is not None else self.max - self.multiple_of  # some multiple <= max exists
            first = -(-lo // self.multiple_of) * self.multiple_of  # smallest multiple >= lo
            return first > self.max
        return False


IntCond = Union[list[int], IntRange]


def _int_match(cond: IntCond, value: Fraction | int) -> bool:
    return value in cond if isinstance(cond, list) else cond.contains(value)


class When(Located):
    """Conditions on a deployment; every key given must match (lists: any of). Empty: always."""

    arch: list[Arch] | None = None
    quant: list[Quant] | None = None
    a2a: list[A2A] | None = None
    deepep_mode: list[Literal["normal", "low_latency", "auto"]] | None = None
    activation: list[Activation] | None = None
    routing: list[Routing] | None = None
    cuda_graph: bool | None = None
    tp: IntCond | None = None
    ep: IntCond | None = None
    moe_tp: IntCond | None = None
    num_experts: IntCond | None = None
    top_k: IntCond | None = None
    hidden_size: IntCond | None = None
    moe_intermediate_size: IntCond | None = None
    intermediate_per_rank: IntCond | None = None
    experts_per_rank: IntCond | None = None

    def keys(self) -> list[str]:
        """The condition keys that are set."""
        return [k for k in type(self).model_fields if getattr(self, k) is not None]

    def matches(self, facts: Mapping[str, Any]) -> bool:
        """True when every set key matches ``facts`` (see :func:`facts_of`)."""
        for key in self.keys():
            cond, value = getattr(self, key), facts.get(key)
            if value is None:
                return False
            if key in QUANTITIES:
                if not _int_match(cond, value):
                    return False
            elif isinstance(cond, bool):
                if cond != value:
                    return False
            elif value not in cond:
                return False
        return True

    def unsatisfiable(self) -> str | None:
        """Why no deployment can ever match (an empty list or range, sizes that are never positive), or None."""
        for key in self.keys():
            cond = getattr(self, key)
            if isinstance(cond, list) and not cond:
                return f"when.{key} is an empty list"
            if isinstance(cond, IntRange) and cond.empty(positive=key in QUANTITIES):
                if cond.min is not None and cond.max is not None and cond.min > cond.max:
                    return f"when.{key}: min {cond.min} > max {cond.max}"
                if cond.max is not None and cond.max <= 0:
                    return f"when.{key}: max {cond.max} is not positive, and {key} is always positive"
                return (f"when.{key}: no positive multiple of {cond.multiple_of} lies in "
                        f"[{max(cond.min or 1, 1)}, {cond.max}]")
            # Every quantity is a positive size (tp, ep, experts, shapes, their per-rank splits).
            if key in QUANTITIES and isinstance(cond, list) and all(v <= 0 for v in cond):
                return f"when.{key}: {cond} holds no positive value, and {key} is always positive"
        if self.a2a is not None and "none" not in self.a2a and self.ep is not None:
            if isinstance(self.ep, list) and self.ep and all(e <= 1 for e in self.ep):
                return "when.a2a names only all-to-all backends, which need ep > 1, but when.ep allows only 1"
            if isinstance(self.ep, IntRange) and self.ep.max is not None and self.ep.max <= 1:
                return "when.a2a names only all-to-all backends, which need ep > 1, but when.ep allows only 1"
        return None

    def describe(self) -> str:
        """Short text of the set conditions, e.g. ``arch in [sm90], quant in [fp8_block]``."""
        parts = []
        for key in self.keys():
            cond = getattr(self, key)
            if isinstance(cond, IntRange):
                bits = [f">= {cond.min}" if cond.min is not None else "", f"<= {cond.max}" if cond.max is not None else "",
                        f"multiple of {cond.multiple_of}" if cond.multiple_of else ""]
                parts.append(f"{key} " + ", ".join(b for b in bits if b))
            elif isinstance(cond, bool):
                parts.append(f"{key} = {str(cond).lower()}")
            else:
                parts.append(f"{key} in [{', '.join(map(str, cond))}]")
        return ", ".join(parts) or "always"


ConstraintCode = Literal["shape_unaligned", "experts_not_divisible", "parallelism_unsupported"]


class Constraint(Located):
    """A numeric fact about a runner, an a2a backend, or every runner (``common.yaml``).

    ``field`` must be a multiple of ``multiple_of``, at least ``min``, and one of ``one_of`` (each an
    integer or the name of another quantity, e.g. ``one_of: [1, tp]``), when ``when`` matches.
    A violation is reported with ``code`` and the text ``why``.
    """

    field: Quantity
    multiple_of: int | Quantity | None = None
    min: int | None = None
    one_of: list[int | Quantity] | None = None
    when: When | None = None
    code: ConstraintCode = "shape_unaligned"
    why: str | None = None
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_test(self) -> "Constraint":
        if self.multiple_of is None and self.min is None and self.one_of is None:
            raise ValueError("a constraint needs multiple_of, min or one_of")
        if isinstance(self.multiple_of, int) and self.multiple_of <= 0:
            raise ValueError(f"multiple_of must be a positive integer or a quantity, got {self.multiple_of}")
        if self.when is not None and self.when.unsatisfiable():
            raise ValueError(f"when can never match: {self.when.unsatisfiable()}")
        return self

    def applies(self, facts: Mapping[str, Any]) -> bool:
        """True when the constraint's ``when`` matches ``facts`` (always without one)."""
        return self.when is None or self.when.matches(facts)

    def violation(self, facts: Mapping[str, Any]) -> str | None:
        """Text of the violation in ``facts``, or None when the constraint holds."""
        value = Fraction(facts[self.field])
        if self.multiple_of is not None:
            div = facts[self.multiple_of] if isinstance(self.multiple_of, str) else self.multiple_of
            name = f"{self.multiple_of} ({div})" if isinstance(self.multiple_of, str) else str(div)
            if div == 0 or value % Fraction(div) != 0:
                return f"{self.field} = {fmt_num(value)} is not a multiple of {name}"
        if self.min is not None and value < self.min:
            return f"{self.field} = {fmt_num(value)} is below {self.min}"
        if self.one_of is not None:
            allowed = [facts[v] if isinstance(v, str) else v for v in self.one_of]
            if value not in allowed:
                names = ", ".join(f"{v} ({facts[v]})" if isinstance(v, str) else str(v) for v in self.one_of)
                return f"{self.field} = {fmt_num(value)} is not one of {{{names}}}"
        return None


def facts_of(*, arch: str, quant: str, a2a: str, deepep_mode: str | None, activation: str, routing: str,
             cuda_graph: bool, tp: int, ep: int, num_experts: int, top_k: int, hidden_size: int,
             moe_intermediate_size: int) -> dict[str, Any]:
    """Flat facts of a deployment, as conditions and constraints read them."""
    moe_tp = Fraction(tp, ep) if ep else Fraction(0)
    return {
        "arch": arch, "quant": quant, "a2a": a2a, "deepep_mode": deepep_mode, "activation": activation,
        "routing": routing, "cuda_graph": cuda_graph, "tp": tp, "ep": ep, "moe_tp": moe_tp,
        "num_experts": num_experts, "top_k": top_k, "hidden_size": hidden_size,
        "moe_intermediate_size": moe_intermediate_size,
        "experts_per_rank": Fraction(num_experts, ep) if ep else Fraction(0),
        "intermediate_per_rank": Fraction(moe_intermediate_size) / moe_tp if moe_tp else Fraction(0),
    }


def parallel_fixes(constraint: Constraint, facts: Mapping[str, Any], max_tp: int = 64,
                   also: Sequence[Constraint] = ()) -> str | None:
    """Suggest tp/ep values that satisfy ``constraint`` (and every constraint in ``also``, e.g. the
    rules every runner obeys) with everything else unchanged.

    Returns e.g. ``"ep in {4, 8} (tp 8), or tp in {1, 2, 3, 6} (ep 1)"``, or None when nothing helps.
    """
    def ok(tp: int, ep: int) -> bool:
        f = dict(facts)
        f.update(facts_of(arch=f["arch"], quant=f["quant"], a2a=f["a2a"], deepep_mode=f["deepep_mode"],
                          activation=f["activation"], routing=f["routing"], cuda_graph=f["cuda_graph"], tp=tp, ep=ep,
                          num_experts=f["num_experts"], top_k=f["top_k"], hidden_size=f["hidden_size"],
                          moe_intermediate_size=f["moe_intermediate_size"]))
        return tp % ep == 0 and all(not c.applies(f) or c.violation(f) is None for c in (constraint, *also))

    tp, ep = facts["tp"], facts["ep"]
    eps = [e for e in range(1, tp + 1) if tp % e == 0 and e != ep and ok(tp, e)]
    tps = [t for t in range(1, max_tp + 1) if t % ep == 0 and t != tp and ok(t, ep)]
    parts = []
    if eps:
        parts.append(f"ep in {{{', '.join(map(str, eps))}}} (tp {tp})" if len(eps) > 1 else f"set ep: {eps[0]} (tp {tp})")
    if tps:
        parts.append(f"tp in {{{', '.join(map(str, tps[:8]))}{', ...' if len(tps) > 8 else ''}}} (ep {ep})")
    if not parts:  # no single change helps: the nearest (tp, ep) pairs that do
        pairs = sorted(((t, e) for t in range(1, max_tp + 1) for e in range(1, t + 1) if t % e == 0 and ok(t, e)),
                       key=lambda p: (abs(p[0] - tp), p[0], abs(p[1] - ep)))[:4]
        if pairs:
            parts.append("(tp, ep) in {" + ", ".join(f"({t}, {e})" for t, e in pairs) + "}")
    return ", or ".join(parts) or None

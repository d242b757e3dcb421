"""Rule files (policy): which runner to prefer where, and which to disable.

``rules/*.yaml`` are read in file-name order, then each operator directory (``--rules DIR``, or the
``MOE_SELECT_RULES`` environment variable, ``os.pathsep``-separated) in turn. An operator rule whose id
matches a bundled one replaces it in place; a new operator rule goes before every bundled rule, so
operator intent wins. The report lists the files used, and the plan's fingerprint covers them.

Selection with ``runner: auto`` walks the matching ``prefer`` rules in order and takes the first
eligible runner; a matching ``disable`` rule removes runners (``disabled_by_rule``), also when a
runner is asked for explicitly. ``prefer: measured`` (issue 25) prefers, at the rule's place, the runners a
measurement table (``--measurements``) times for the deployment, by measured time per token range
(:mod:`moe_select.measured`); without an applicable table the rule prefers nothing. A prefer rule may add
``small_forwards: {max_tokens: N, prefer: [...]}``: when it chooses and the deployment's largest forward exceeds N,
forwards of at most N tokens run the first eligible runner of that list and the plan gets token ranges (as a
measured plan has: a grouped-GEMM runner for large batches, a fused kernel for small ones); when the largest forward
is at most N, that runner is the plan's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .conditions import When
from .located import Located

if TYPE_CHECKING:
    from .errors import Issue


#: The ``prefer`` value of a rule that prefers by measurement (issue 25).
MEASURED = "measured"


class SmallForwards(Located):
    """``small_forwards`` of a prefer rule: forwards of at most ``max_tokens`` tokens per rank run the first eligible
    runner of ``prefer`` (module doc)."""

    max_tokens: int = Field(gt=0)
    prefer: list[str] = Field(min_length=1)


class Rule(Located):
    """One policy rule: ``when`` -> ``prefer`` (ordered runners, or ``measured``: the runners a measurement
    table times, fastest per token range) or ``disable`` (runners, with ``reason``); a prefer list may add
    ``small_forwards`` (another list for forwards up to a token count)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    when: When = When.model_construct()  # always; not When(): that would build the validator at import
    prefer: list[str] | Literal["measured"] | None = None
    disable: list[str] | None = None
    reason: str | None = None
    note: str | None = None
    small_forwards: SmallForwards | None = None

    @field_validator("prefer", "disable", mode="before")
    @classmethod
    def _a_list(cls, v: Any, info: ValidationInfo) -> Any:
        """A bare runner name where a list goes (``prefer: triton``): one message saying to write a list (an eighth new
        user's trial got "'triton' is not one of measured")."""
        if isinstance(v, str) and not (info.field_name == "prefer" and v == MEASURED):
            also = " or measured" if info.field_name == "prefer" else ""
            raise ValueError(f"{info.field_name} takes a list of runner names{also}: write [{v}], not the string {v!r}")
        return v

    @model_validator(mode="after")
    def _one_action(self) -> "Rule":
        if (self.prefer is None) == (self.disable is None):
            raise ValueError("a rule has exactly one of prefer or disable")
        if self.small_forwards is not None and (self.prefer is None or self.prefer == MEASURED):
            raise ValueError("small_forwards goes with a prefer list (not with disable or prefer: measured)")
        if self.disable is not None and not self.reason:
            raise ValueError("a disable rule needs a reason")
        if not (self.prefer or self.disable):
            raise ValueError("prefer/disable must name at least one runner")
        names = [*(self.prefer if isinstance(self.prefer, list) else []), *(self.disable or [])]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named twice: each runner once (the first place decides)")
        return self

    @property
    def measured(self) -> bool:
        """True for ``prefer: measured`` (the runners come from a measurement table, not from the rule)."""
        return self.prefer == MEASURED

    @property
    def runners(self) -> list[str]:
        """The runners the rule names (prefers or disables); none for ``prefer: measured``."""
        if self.measured:
            return []
        return list(self.prefer or self.disable or [])

    @property
    def action(self) -> Literal["prefer", "disable"]:
        """``prefer`` or ``disable``."""
        return "prefer" if self.prefer is not None else "disable"


class RuleFile(Located):
    """A rule file: ``schema_version: 1`` and an ordered list of rules."""

    schema_version: Literal[1]
    rules: list[Rule] = []


def duplicate_rule_ids(rules: Iterable[Rule]) -> list[Issue]:
    """One issue (file:line, field ``id``) per rule whose id an earlier rule of ``rules`` has: the rules of one layer
    (a rules directory, or the bundled files) must name each id once."""
    from .errors import Issue
    from .yamlio import shorten

    first: dict[str, Rule] = {}
    out: list[Issue] = []
    for r in rules:
        if r.id in first:
            out.append(Issue(r._file, r._line, "id", f"duplicate rule id {shorten(r.id)} (first at {first[r.id].where()})"))
        first.setdefault(r.id, r)
    return out

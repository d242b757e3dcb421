"""Rule files (policy): which runner to prefer where, and which to disable.

``rules/*.yaml`` are read in file-name order, then each operator directory (``--rules DIR``, or the
``MOE_SELECT_RULES`` environment variable, ``os.pathsep``-separated) in turn. An operator rule whose id
matches a bundled one replaces it in place; a new operator rule goes before every bundled rule, so
operator intent wins. The report lists the files used, and the plan's fingerprint covers them.

Selection with ``runner: auto`` walks the matching ``prefer`` rules in order and takes the first
eligible runner; a matching ``disable`` rule removes runners (``disabled_by_rule``), also when a
runner is asked for explicitly. ``prefer: measured`` (issue 25) prefers, at the rule's place, the runners a
measurement table (``--measurements``) times for the deployment, by measured time per token range
(:mod:`moe_select.measured`); without an applicable table the rule prefers nothing.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .conditions import When
from .located import Located


#: The ``prefer`` value of a rule that prefers by measurement (issue 25).
MEASURED = "measured"


class Rule(Located):
    """One policy rule: ``when`` -> ``prefer`` (ordered runners, or ``measured``: the runners a measurement
    table times, fastest per token range) or ``disable`` (runners, with ``reason``)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    when: When = When.model_construct()  # always; not When(): that would build the validator at import
    prefer: list[str] | Literal["measured"] | None = None
    disable: list[str] | None = None
    reason: str | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _one_action(self) -> "Rule":
        if (self.prefer is None) == (self.disable is None):
            raise ValueError("a rule has exactly one of prefer or disable")
        if self.disable is not None and not self.reason:
            raise ValueError("a disable rule needs a reason")
        if not (self.prefer or self.disable):
            raise ValueError("prefer/disable must name at least one runner")
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

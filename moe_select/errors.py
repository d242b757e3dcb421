"""Typed errors of moe-select. Every error says what is wrong and where (file:line, field, rank).

- :class:`InputError`: a deployment, rule, capability, model-config or plan file (or CLI flag) is
  invalid. Carries one :class:`Issue` per problem; the CLI exits 2.
- :class:`SelectionError`: no runner can serve the deployment (or the requested runner cannot). Carries
  the full :class:`~moe_select.report.Report`; the CLI exits 1.
- :class:`ResolveError`: a plan cannot be made ready on this machine (plan_mismatch,
  dependency_missing, no_adapter, ...). Carries the reasons; raised by ``resolve`` before weights load.
- :class:`RunnerInputError`: tensors passed to a runner have the wrong shape, dtype or device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


class ReasonLike(Protocol):
    """What an error needs of a :class:`~moe_select.plans.Reason` (kept structural, so that this module
    imports nothing of the package and no import circle closes through it)."""

    @property
    def code(self) -> str: ...

    def render(self) -> str: ...


class ReportLike(Protocol):
    """What :class:`SelectionError` needs of a :class:`~moe_select.report.Report`."""

    def summary(self) -> str: ...


@dataclass(frozen=True)
class Issue:
    """One problem in an input: ``file:line: field: message``. ``line`` is 1-based, 0 when unknown."""

    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class MoeSelectError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(MoeSelectError, ValueError):
    """Invalid input. ``issues`` lists every problem found, each naming file, line and field."""

    def __init__(self, issues: Sequence[Issue] | Issue | str, *, file: str = "<input>", field: str = ""):
        if isinstance(issues, str):
            issues = [Issue(file, 0, field, issues)]
        elif isinstance(issues, Issue):
            issues = [issues]
        self.issues: list[Issue] = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class SelectionError(MoeSelectError):
    """The selector refused the deployment. ``report`` holds every candidate and every reason."""

    def __init__(self, report: ReportLike):
        self.report = report
        super().__init__(report.summary())


class ResolveError(MoeSelectError):
    """``resolve(plan)`` refused the plan at startup. ``reasons`` are :class:`Reason` records."""

    def __init__(self, reasons: Sequence[ReasonLike], *, rank: int | None = None):
        self.reasons = list(reasons)
        self.rank = rank
        prefix = f"rank {rank}: " if rank is not None else ""
        lines = [f"{prefix}cannot resolve the plan:"] + [f"  - {r.render()}" for r in self.reasons]
        super().__init__("\n".join(lines))

    @property
    def codes(self) -> list[str]:
        """The reason codes of this refusal, in order."""
        return [r.code for r in self.reasons]


class RunnerInputError(MoeSelectError, ValueError):
    """A tensor passed to ``MoeRunner.prepare_weights`` or ``MoeRunner.run`` is wrong (shape, dtype, device)."""


class RunnerOutputError(MoeSelectError, RuntimeError):
    """A runner's core returned what the runner contract does not allow from ``MoeRunner.run`` (no tensor, another
    shape than ``[T, H]``, another dtype than the input's): the core's fault, not the caller's."""


def first_line(obj: object) -> str:
    """First line of ``str(obj)`` (for compact table cells)."""
    return str(obj).splitlines()[0] if str(obj) else ""

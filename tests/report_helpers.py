"""Small readers of an explain report (``moe_select.explain(...)``) shared by the fact tests: one candidate, its
refusals, a refusal by exactly one fact file, what no fact decides, the report's reason codes, one reason, whether a
runner was planned."""
from __future__ import annotations

from typing import Any


def cand(report: Any, runner: str) -> Any:
    """The candidate ``runner`` of ``report`` (StopIteration when it is not a candidate)."""
    return next(c for c in report.candidates if c.backend == runner)


def refusals(report: Any, runner: str) -> dict[str, str]:
    """``{code: source}`` of what a fact refuses for ``runner`` (not what no fact covers)."""
    return {r.code: r.source for r in cand(report, runner).reasons}


def only_refusal(report: Any, runner: str, code: str, file: str) -> str:
    """Assert ``runner`` is refused by exactly ``code``, cited from ``backends/<file>``; return the refusal's detail."""
    codes = refusals(report, runner)
    assert set(codes) == {code}, codes
    assert codes[code].startswith(f"backends/{file}:"), codes[code]
    return next(x.detail for x in cand(report, runner).reasons if x.code == code)


def unknown_codes(report: Any, runner: str) -> set[str]:
    """Codes of what no fact decides for ``runner`` (issue 18: an open list's gap is unverified, not refused)."""
    return {x.code for x in cand(report, runner).unknowns}


def report_codes(report: Any) -> set[str]:
    """Every reason code the report gives, over all candidates."""
    return {r.code for r in report.reasons}


def reason_of(report: Any, code: str, backend: str) -> Any:
    """The report's reason ``code`` for ``backend`` (StopIteration when there is none)."""
    return next(r for r in report.reasons if r.code == code and r.backend == backend)


def planned(report: Any, runner: str) -> bool:
    """Whether the report's plan runs ``runner``."""
    return report.plan is not None and report.plan.runner == runner


def assert_planned(report: Any, runner: str) -> None:
    """Assert the report's plan runs ``runner``; the message lists the report's reasons (code, detail)."""
    assert report.plan is not None and report.plan.runner == runner, [(x.code, x.detail) for x in report.reasons]

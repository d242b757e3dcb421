"""Field rounds of issue 21: public failure reports chosen by a stated rule by a checker who did not write the facts,
listed and committed before any fix (tests/cases/field_round_*.yaml), run through `explain --deployment --json`.

Each round file holds ``rule`` (how its reports were chosen), ``committed_at_pass`` (how many were right at the commit
that listed them) and ``cases`` in the shared case format, each with a ``report`` (the PR/issue it stands on). A case
whose fix is not in yet is listed under the file's ``xfail`` (id -> why). A report may be cited by a fact only in the
files its case names under ``fixed_by`` (the fix of its kind): a round must be fresh reports, none already cited.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from test_cases import check_expect, run_case

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = sorted((ROOT / "tests" / "cases").glob("field_round_*.yaml"))
LOADED = {p.name: yaml.safe_load(p.read_text()) for p in ROUNDS}
CASES = [(name, c) for name, d in LOADED.items() for c in d["cases"]]
IDS = [f"{name.removesuffix('.yaml')}:{c['id']}" for name, c in CASES]
REPORT = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def test_rounds_are_stated():
    """Every round states its rule, lists twelve reports, and records its pass count at the listing commit."""
    for name, d in LOADED.items():
        assert d["rule"].strip(), name
        assert len(d["cases"]) == 12, name
        assert 0 <= d["committed_at_pass"] <= 12, name
        reports = [c["report"] for c in d["cases"]]
        assert len(set(reports)) == 12, f"{name}: a report listed twice"
        assert all(REPORT.match(r) for r in reports), f"{name}: report must be owner/repo#N"
        assert set(d.get("xfail", {})) <= {c["id"] for c in d["cases"]}, name


@pytest.mark.parametrize(("name", "case"), CASES, ids=IDS)
def test_report_not_cited_elsewhere(name, case):
    """None of a round's reports is cited by a fact, rule or earlier case, except in the files of its own fix
    (``fixed_by``) and the round file itself."""
    owner_repo, number = REPORT.match(case["report"]).groups()
    # Cited as owner/repo#N, owner/repo PR #N, a pull/issues URL, or by the repository's short name alone
    # ("vLLM issue #N", "sglang#N", "FlashInfer PR #N").
    short = re.escape(owner_repo.split("/")[1])
    pattern = (rf"({re.escape(owner_repo)}|\b{short})( ?#| PR #| issue #| pull #|/pull/|/issues/){number}\b")
    allowed = {f"tests/cases/{name}", *case.get("fixed_by", [])}
    grep = subprocess.run(["git", "grep", "-l", "-E", "-i", pattern, "--", "backends", "rules", "tests/cases"],
                          cwd=ROOT, capture_output=True, text=True)
    assert grep.returncode in (0, 1), f"git grep failed (this test needs the git checkout): {grep.stderr}"
    hits = grep.stdout.split()
    assert not set(hits) - allowed, f"{case['report']} already cited in {sorted(set(hits) - allowed)}"


@pytest.mark.parametrize(("name", "case"), CASES, ids=IDS)
def test_field_round_case(name, case, tmp_path, capsys):
    """The case's expected outcome (status, runner, reasons, evidence) from `explain --deployment FILE --json`."""
    why = LOADED[name].get("xfail", {}).get(case["id"])
    if why:
        pytest.xfail(why)
    rc, out = run_case(case, tmp_path, capsys)
    check_expect(case, rc, out)

"""Field rounds of issue 21: public failure reports chosen by a stated rule by a checker who did not write the facts,
listed and committed before any fix (tests/cases/field_round_*.yaml), run through `explain --deployment --json`.

Each round file holds ``rule`` (how its reports were chosen), ``committed_at_pass`` (how many were right at the commit
that listed them) and ``cases`` in the shared case format, each with a ``report`` (the PR/issue it stands on). A case
whose fix is not in yet is listed under the file's ``xfail`` (id -> why). A report may be cited by a fact only in the
files its case names under ``fixed_by`` (the fix of its kind): a round must be fresh reports, none already cited.
"""
from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any, Iterator

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
    """Every round states its rule, lists twelve reports (or fewer with ``short:``, the reason its rule's pool ran dry:
    such a round does not count for issue 21's criterion), and records its pass count at the listing commit."""
    for name, d in LOADED.items():
        assert d["rule"].strip(), name
        size = len(d["cases"])
        if "short" in d:
            assert d["short"].strip() and 1 <= size < 12, f"{name}: a short round states why and lists 1..11 reports"
        else:
            assert size == 12, f"{name}: {size} reports (a round lists twelve, or says `short:` why not)"
        assert 0 <= d["committed_at_pass"] <= size, name
        reports = [c["report"] for c in d["cases"]]
        assert len(set(reports)) == size, f"{name}: a report listed twice"
        assert all(REPORT.match(r) for r in reports), f"{name}: report must be owner/repo#N"
        assert set(d.get("xfail") or {}) <= {c["id"] for c in d["cases"]}, name


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
    hits = set(grep.stdout.split()) | bare_citations().get((owner_repo.lower(), int(number)), set())
    # In another round's file only its cases cite (report, source, about, expectations): the header's list of the
    # reports that round skipped, its rule and its xfail notes name reports without standing on them.
    # A later round may name an earlier round's report (its cases were listed after): only earlier rounds count.
    hits = {h for h in hits if not _is_round(h) or (_round_number(h) < _round_number(f"tests/cases/{name}")
                                                   and _cited_by_round_cases(h, pattern, owner_repo, int(number)))}
    assert not hits - allowed, f"{case['report']} already cited in {sorted(hits - allowed)}"


def _is_round(rel: str) -> bool:
    """Whether ``rel`` is a field-round file (tests/cases/field_round_*.yaml)."""
    return rel.startswith("tests/cases/field_round_") and rel.endswith(".yaml")


def _round_number(rel: str) -> int:
    """The round's number from its file name (field_round_N.yaml)."""
    return int(re.search(r"field_round_(\d+)\.yaml$", rel).group(1))


def _cited_by_round_cases(rel: str, pattern: str, owner_repo: str, number: int) -> bool:
    """Whether the cases of round file ``rel`` (not its header comments, rule or xfail notes) cite ``owner_repo#number``:
    directly (``pattern``) or as a bare ``#N`` after the repository's name within one of the cases' strings."""
    cases = LOADED[rel.removeprefix("tests/cases/")]["cases"]
    units = [u for c in cases for u in _units("case.yaml", yaml.safe_dump(c, sort_keys=False))]
    if any(re.search(pattern, u, flags=re.IGNORECASE) for u in units):
        return True
    repos = _repositories()
    return any((owner_repo.lower(), number) in attribute_bare_refs(u, repos) for u in units)


# A bare reference: "#N", "PR #N", "PRs #N, #M", "issue #N", "pull #N" whose "#" does not follow a repository name
# ("owner/repo#N" and "short#N" are the direct citations git grep finds above).
BARE_REF = re.compile(r"(?<![\w/.#-])#(\d+)\b")
# An owner/repo mention (not a path inside a citation: those follow ':' or '/').
OWNER_REPO = re.compile(r"(?<![\w.:/-])([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*?)(?=[#@:\s,;)\]\"']|$)")
AMBIGUOUS = ""


@functools.lru_cache(maxsize=1)
def _repositories() -> dict[str, list[str]]:
    """Every repository cited as ``owner/repo#N`` or ``owner/repo@commit`` under backends/, rules/ and tests/cases/,
    and every round report's: ``{owner/repo (lower case): [its short form]}`` (the repository's own name)."""
    repos = {r.lower() for _, c in CASES for r in [REPORT.match(c["report"]).group(1)]}
    for text in _texts().values():
        repos |= {m.lower() for m in re.findall(r"([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*?)[#@]", text)}
    return {r: [r.split("/")[1]] for r in repos}


@functools.lru_cache(maxsize=1)
def _texts() -> dict[str, str]:
    """The tracked text files of backends/, rules/ and tests/cases/ (path -> text)."""
    ls = subprocess.run(["git", "ls-files", "--", "backends", "rules", "tests/cases"], cwd=ROOT, capture_output=True,
                        text=True)
    assert ls.returncode == 0, f"git ls-files failed (this test needs the git checkout): {ls.stderr}"
    out = {}
    for rel in ls.stdout.split():
        path = ROOT / rel
        if path.suffix in {".yaml", ".yml", ".md", ".py", ".txt"} and path.is_file():
            out[rel] = path.read_text(errors="replace")
    return out


def _units(rel: str, text: str) -> Iterator[str]:
    """The pieces of a file a citation is read within: each line, each block of consecutive comment lines, and (YAML)
    each string scalar, so that a scalar folded over several lines is read whole."""
    lines = text.splitlines()
    yield from lines
    block: list[str] = []
    for line in [*lines, ""]:
        if line.lstrip().startswith("#"):
            block.append(line.lstrip().lstrip("#"))
        elif block:
            yield " ".join(block)
            block = []
    if rel.endswith((".yaml", ".yml")):
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return
        stack: list[Any] = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                yield node
            elif isinstance(node, dict):
                stack.extend([*node.keys(), *node.values()])
            elif isinstance(node, list):
                stack.extend(node)


def attribute_bare_refs(unit: str, repos: dict[str, list[str]]) -> set[tuple[str, int]]:
    """``(owner/repo, N)`` for each bare ``#N`` of ``unit`` that follows a repository's name: the nearest repository
    mentioned before it in the unit (``owner/repo`` or its short form, e.g. "SGLang PR #23948" or
    "sgl-project/sglang#32846 ... PR #23948"). Any other ``owner/repo`` mentioned in between takes the numbers after
    it, and a short form two repositories share (DeepGEMM) gives none: a number with no repository named before it is
    not attributed (no false hit on another repository's numbers)."""
    refs = [(m.start(), int(m.group(1))) for m in BARE_REF.finditer(unit)]
    if not refs:
        return set()
    mentions = [(m.start(), m.group(1).lower()) for m in OWNER_REPO.finditer(unit)]
    owners: dict[str, set[str]] = {}
    for repo, shorts in repos.items():
        for short in shorts:
            owners.setdefault(short.lower(), set()).add(repo)
    for short, named in owners.items():
        for m in re.finditer(rf"(?<![\w/.:-]){re.escape(short)}(?![\w/-])", unit, flags=re.IGNORECASE):
            mentions.append((m.start(), next(iter(named)) if len(named) == 1 else AMBIGUOUS))
    mentions.sort()
    found = set()
    for at, number in refs:
        before = [repo for pos, repo in mentions if pos < at]
        if before and before[-1] in repos:
            found.add((before[-1], number))
    return found


@functools.lru_cache(maxsize=1)
def bare_citations() -> dict[tuple[str, int], set[str]]:
    """``{(owner/repo, N): files}`` of the bare ``#N`` citations under backends/, rules/ and tests/cases/."""
    repos = _repositories()
    out: dict[tuple[str, int], set[str]] = {}
    for rel, text in _texts().items():
        for unit in _units(rel, text):
            for key in attribute_bare_refs(unit, repos):
                out.setdefault(key, set()).add(rel)
    return out


def test_bare_citations_are_attributed():
    """The bare-number reader: a number after a repository's name (direct, or later in the same scalar) is that
    repository's; another repository named in between takes the numbers after it; a unit naming no repository before
    the number, or a short form two repositories share, gives none."""
    repos = {"sgl-project/sglang": ["sglang"], "vllm-project/vllm": ["vllm"],
             "flashinfer-ai/flashinfer": ["flashinfer"], "deepseek-ai/deepgemm": ["deepgemm"],
             "sgl-project/deepgemm": ["deepgemm"]}
    assert attribute_bare_refs("SGLang PR #23948", repos) == {("sgl-project/sglang", 23948)}
    assert attribute_bare_refs("sgl-project/sglang#32846 (fixed by PR #23948)", repos) == {
        ("sgl-project/sglang", 23948)}
    assert attribute_bare_refs("SGLang PR #23948; FlashInfer PRs #3084, #3738", repos) == {
        ("sgl-project/sglang", 23948), ("flashinfer-ai/flashinfer", 3084), ("flashinfer-ai/flashinfer", 3738)}
    assert attribute_bare_refs("sgl-project/sglang#32846; kvcache-ai/ktransformers issue #2036", repos) == set()
    assert attribute_bare_refs("vllm#52732, DeepGEMM PR #324", repos) == set()
    assert attribute_bare_refs("fixed by #4412 (a revert) in vLLM", repos) == set()
    assert attribute_bare_refs("flashinfer_trtllm on PR #12 with flashinfer-python 0.6.12", repos) == set()
    # a citation's path names no repository; a YAML comment marker or an owner/repo#N is no bare reference
    assert attribute_bare_refs("vllm-project/vllm@abc:python/sglang/x.py (PR #5)", repos) == {("vllm-project/vllm", 5)}
    assert attribute_bare_refs("# vllm-project/vllm#46880", repos) == set()
    # a ticket number joined to a word by a hyphen (TensorRT-LLM's '[TRTLLM-13334]') is no '#N', whatever repository
    # was named before it; only '#N' is (round 12's flashinfer#3334 was reported hit by round 10's '[TRTLLM-13334]')
    for unit in ("FlashInfer [TRTLLM-13334][fix] Add EP assertion", "flashinfer TRTLLM-13334, TRTLLM-3334",
                 "flashinfer-ai/flashinfer#12 ('[TRTLLM-13334][fix]')"):
        assert all(n not in (3334, 13334) for _, n in attribute_bare_refs(unit, repos)), unit
    assert attribute_bare_refs("FlashInfer [TRTLLM-13334] see #3334", repos) == {("flashinfer-ai/flashinfer", 3334)}


def test_hyphenated_ticket_is_not_a_citation():
    """Round 10's case text '[TRTLLM-13334]' (a TensorRT-LLM ticket) cites neither flashinfer-ai/flashinfer#3334 (round
    12's report) nor #13334: neither the direct pattern (git grep) nor the bare-number reader reads it as one."""
    rel = "tests/cases/field_round_10.yaml"
    assert "TRTLLM-13334" in (ROOT / rel).read_text()
    for number in (3334, 13334):
        pattern = rf"(flashinfer-ai/flashinfer|\bflashinfer)( ?#| PR #| issue #| pull #|/pull/|/issues/){number}\b"
        grep = subprocess.run(["git", "grep", "-l", "-E", "-i", pattern, "--", rel], cwd=ROOT, capture_output=True, text=True)
        assert grep.returncode == 1, (number, grep.stdout, grep.stderr)
        assert rel not in bare_citations().get(("flashinfer-ai/flashinfer", number), set())


def test_round_skip_lists_are_not_citations():
    """A report an earlier round only named in its header (skipped) is not cited by that round; one its cases stand on
    is. Checked on round 8, whose header skips sgl-project/sglang#23948 and whose cases stand on vllm-project/vllm#51824."""
    rel = "tests/cases/field_round_8.yaml"
    text = (ROOT / rel).read_text()
    assert "23948" in text.split("cases:")[0]
    skip = r"(sgl-project/sglang|\bsglang)( ?#| PR #| issue #| pull #|/pull/|/issues/)23948\b"
    assert not _cited_by_round_cases(rel, skip, "sgl-project/sglang", 23948)
    used = r"(vllm-project/vllm|\bvllm)( ?#| PR #| issue #| pull #|/pull/|/issues/)51824\b"
    assert _cited_by_round_cases(rel, used, "vllm-project/vllm", 51824)


@pytest.mark.parametrize(("name", "case"), CASES, ids=IDS)
def test_field_round_case(name, case, tmp_path, capsys):
    """The case's expected outcome (status, runner, reasons, evidence) from `explain --deployment FILE --json`."""
    why = (LOADED[name].get("xfail") or {}).get(case["id"])  # `xfail:` left empty once every miss is fixed
    if why:
        pytest.xfail(why)
    rc, out = run_case(case, tmp_path, capsys)
    check_expect(case, rc, out)

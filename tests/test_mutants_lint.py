"""Tests that kill the mutants of moe_select/lint.py that the local sampled run of 2026-12-02 (eighth session; mutmut
3.8.1, seed 19, 50 mutants per module, lint at c581f8e; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json)
left alive: 19 survived. Each test names the mutants it kills (``lint.x_function__mutmut_N``, numbered at c581f8e);
the expectations are written by hand from the inputs (the files below, backends/*.yaml where named).

No equivalent mutant among the 19: each one is killed below.
"""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from moe_select import lint
from moe_select.catalog import bundled_dirs, load_catalog
from moe_select.conditions import When
from moe_select.errors import InputError, Issue

from test_evidence_lists import UPSTREAM, all_open, runner_file

SRC = '"this project: tests/test_mutants_lint.py"'


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def no_cells(monkeypatch):
    """check without the arch x format x engine cell pass (uncovered_findings, tested at the end): a catalog with
    operator rules is a new catalog, whose cells take seconds to evaluate; these tests read other findings."""
    monkeypatch.setattr(lint, "uncovered_findings", lambda catalog: [])


def _mine(findings: list[lint.Finding], path: Path) -> list[str]:
    """The findings at ``path`` (a file given to check), as ``check`` prints them."""
    return [str(f) for f in findings if f.where.startswith(f"{path}:")]


# ------------------------------------------------------------------------------------------------------- _covers
def _when(**conds) -> When:
    return When.model_validate(conds)


def test_a_multiple_of_range_covers_a_range_of_its_multiples():
    """x__covers__mutmut_21 (``not cb.multiple_of`` -> ``cb.multiple_of``): every multiple of 4 is a multiple of 2, so
    ``tp: {multiple_of: 2}`` covers ``tp: {multiple_of: 4}``; not the other way, and not a range with no step."""
    assert lint._covers(_when(tp={"multiple_of": 2}), _when(tp={"multiple_of": 4})) is True
    assert lint._covers(_when(tp={"multiple_of": 4}), _when(tp={"multiple_of": 2})) is False
    assert lint._covers(_when(tp={"multiple_of": 2}), _when(tp={"min": 1, "max": 8})) is False


def test_a_range_without_a_minimum_covers_one_without_a_minimum():
    """x__covers__mutmut_24 (``ca.min is not None and`` -> ``or``): ``tp <= 8`` covers ``tp <= 4`` (neither has a
    minimum); ``tp >= 2`` does not cover ``tp <= 4`` (1 is in the second only)."""
    assert lint._covers(_when(tp={"max": 8}), _when(tp={"max": 4})) is True
    assert lint._covers(_when(tp={"min": 2}), _when(tp={"max": 4})) is False
    assert lint._covers(_when(tp={"min": 2}), _when(tp={"min": 4})) is True


# --------------------------------------------------------------------------------------------------------- check
def test_a_path_the_os_refuses_is_named_shortened():
    """x_check__mutmut_18 (the Issue built without its field: TypeError) and _22 (``[2:-1]``: the name's first
    character cut): a 300-character file name (longer than NAME_MAX, 255) -> ``cannot read: File name too long``,
    the name echoed as its first 80 characters and an ellipsis (yamlio.shorten), without the quotes."""
    name = "x" * 300
    with pytest.raises(InputError) as e:
        lint.check([name], use_env=False)
    assert e.value.issues == [Issue("x" * 80 + "…", 0, "", "cannot read: File name too long")]


def test_a_missing_path_is_no_such_file_or_directory(tmp_path):
    """x_check__mutmut_42 (the message misspelt): a path that does not exist."""
    gone = tmp_path / "gone.yaml"
    with pytest.raises(InputError) as e:
        lint.check([gone], use_env=False)
    assert e.value.issues == [Issue(str(gone), 0, "", "no such file or directory")]


def test_a_fifo_is_refused_as_a_rule_or_capability_file(tmp_path):
    """x__kind__mutmut_6 (the kind of file misspelt in load_file's messages): a named pipe given to check is refused
    before it is opened, naming it a rule or capability file."""
    fifo = tmp_path / "rules.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as e:
        lint.check([fifo], use_env=False)
    assert e.value.issues == [Issue(str(fifo), 0, "", "the rule or capability file is a FIFO (named pipe), not a "
                                    "regular file: refused (reading it could block or never end)")]


def test_the_formats_table_is_of_kind_formats():
    """x__kind__mutmut_115 (``"formats"`` -> ``"FORMATS"``): _kind names the bundled formats table (its top key
    ``formats:``) ``formats``, as its docstring says."""
    kind, _ = lint._kind(bundled_dirs()[0] / "formats.yaml")
    assert kind == "formats"


OPERATOR_VOCABULARY = f"""\
schema_version: 3
activations:
  - {{name: gelu_tanh, gated: true, source: {SRC}}}
"""


def test_a_vocabulary_file_given_with_a_capability_file_declares_its_names(tmp_path, no_cells):
    """x__given_names__mutmut_11 (``merge(None)``: TypeError): a runner file whose activation gelu_tanh only the
    vocabulary file given beside it declares checks without a load error."""
    runner = _write(tmp_path / "site_tanh.yaml", runner_file("site_tanh", lists=all_open()).replace("[silu]", "[gelu_tanh]"))
    vocab = _write(tmp_path / "vocabulary.yaml", OPERATOR_VOCABULARY)
    findings, _ = lint.check([runner, vocab], use_env=False)
    assert _mine(findings, runner) == []
    with pytest.raises(InputError) as e:  # without the vocabulary file the name is unknown
        lint.check([runner], use_env=False)
    assert "unknown activation 'gelu_tanh'" in str(e.value)


# --------------------------------------------------------------------------------------------------- lint_catalog
def test_a_rule_for_an_a2a_its_runner_refuses_never_fires(tmp_path, no_cells):
    """x__runnable__mutmut_23 (``return False`` -> ``True`` when no a2a of the rule is accepted): torch_native takes
    only the a2a backends none and torch (backends/torch_native.yaml ``a2a: {values: [none, torch]}``), so a rule
    preferring it for a2a deepep names a runner that never runs there and never fires."""
    f = _write(tmp_path / "r.yaml", """\
        schema_version: 1
        rules:
          - id: native-on-deepep
            when: {a2a: [deepep]}
            prefer: [torch_native]
        """)
    findings, _ = lint.check([f], use_env=False)
    assert _mine(findings, f) == [
        f"{f}:5: rule native-on-deepep prefers torch_native, which the capability files exclude for every "
        "arch/quant/a2a it matches (a2a in [deepep])",
        f"{f}:3: rule native-on-deepep never fires: none of its runners can run where it matches"]


def test_a_prefer_rule_partly_disabled_names_the_runners_left(tmp_path, no_cells):
    """x_lint_catalog__mutmut_92 (``n in runnable`` -> ``not in``: the note would name the runner that cannot run
    there instead of those left): on sm90 bf16 flashinfer_trtllm cannot run (backends/flashinfer_trtllm.yaml: sm100
    and sm103 only), torch_grouped_mm is disabled by the rule before, so the rule still chooses among torch_native."""
    f = _write(tmp_path / "r.yaml", """\
        schema_version: 1
        rules:
          - id: no-gmm-on-hopper
            when: {arch: [sm90]}
            disable: [torch_grouped_mm]
            reason: test
          - id: hopper-bf16
            when: {arch: [sm90], quant: [bf16]}
            prefer: [flashinfer_trtllm, torch_grouped_mm, torch_native]
        """)
    findings, _ = lint.check([f], use_env=False)
    assert _mine(findings, f) == [
        f"{f}:9: rule hopper-bf16 prefers flashinfer_trtllm, which the capability files exclude for every "
        "arch/quant/a2a it matches (arch in [sm90], quant in [bf16])",
        f"{f}:9: note: rule hopper-bf16 prefers torch_grouped_mm, which rule no-gmm-on-hopper ({f}:3) disables "
        "wherever this rule matches; it still chooses among torch_native"]


# ---------------------------------------------------------------------------------------------- evidence_findings
def test_an_exhaustive_list_citing_a_pr_is_reported_at_its_exhaustive_key(tmp_path, no_cells):
    """x_evidence_findings__mutmut_61 (``where("XXexhaustiveXX")``: the decision's first line, here ``why:``) and _70
    (the message's end in capitals): the formats decision ``why:`` on line 31, ``exhaustive:`` (a PR) on line 32 of
    test_evidence_lists.runner_file's 20 lines, ``lists:`` and the eight other kinds open."""
    lists = all_open(("formats",)) + '  formats:\n    why: a PR said so\n    exhaustive: "vllm-project/vllm#12345"\n'
    f = _write(tmp_path / "site_pr.yaml", runner_file("site_pr", lists=lists))
    assert f.read_text().splitlines()[31].startswith("    exhaustive:")
    findings, _ = lint.check([f], use_env=False)
    assert _mine(findings, f) == [
        f"{f}:32: runner site_pr: the exhaustive formats list cites 'vllm-project/vllm#12345', not upstream code at a "
        "commit (owner/repo@commit:path[:symbol]); a PR, an issue or this project's own text cannot say that every "
        "other value is refused: cite the check, or make the list open"]


# ------------------------------------------------------------------------------------------ negative_fact_findings
NEGATIVE = f"""\
schema_version: 3
runner: toy_negative
summary: negative activation facts the lint reads
source: {SRC}
engines: {{values: [vllm, sglang], source: {SRC}}}
support:
  - {{archs: [sm90], formats: [bf16], source: {SRC}}}
activations:
  - {{values: [silu, silu_clamped, swiglu_oai], source: {SRC}}}
  - {{values: [silu_clamped], supported: false, source: {SRC}}}
  - {{values: [swiglu_oai], supported: false, when: {{activation: [gelu]}}, source: {SRC}}}
  - {{values: [swiglu_oai], supported: false, when: {{engine: [trtllm]}}, source: {SRC}}}
  - {{values: [swiglu_oai], supported: false, requires: {{sglang: "<0.5.20"}}, source: {SRC}}}
routing: {{values: any, source: {SRC}}}
dispatch: {{formats: [standard], source: {SRC}}}
cuda_graph: {{supported: true, source: {SRC}}}
lists: {{archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}}
"""


def test_negative_activation_facts_that_never_match_or_contradict(tmp_path, no_cells):
    """Four negative facts of one runner shipped by vllm and sglang, one finding each (backends/packages.yaml: the
    package sglang is the engine sglang):
    - line 10, no when and no requires, refusing silu_clamped, which the positive fact of line 9 takes everywhere:
      a contradiction (x_negative_fact_findings__mutmut_102: ``f.when is None`` -> ``is not None``);
    - line 11, when activation gelu, none of its values: never matches (_12: the when key ``ACTIVATION``, never set);
    - line 12, when engine trtllm, which does not ship it: never matches (_60: ``shipped is None``; _73: the engines
      joined by ``XX, XX``);
    - line 13, bounded by sglang's version without naming sglang in a when, where vllm runs it too: a warning
      (_88: ``set(None)``: TypeError)."""
    f = _write(tmp_path / "toy_negative.yaml", NEGATIVE)
    findings, _ = lint.check([f], use_env=False)
    assert _mine(findings, f) == [
        f"{f}:10: warning: runner toy_negative: this negative activations fact refuses silu_clamped everywhere, which "
        f"the positive fact at {f}:9 takes everywhere: they contradict (give the negative one its when or requires, "
        "or drop the value from the positive one)",
        f"{f}:11: runner toy_negative: this negative activations fact (swiglu_oai) never matches: its when names "
        "activation gelu, none of its values",
        f"{f}:12: runner toy_negative: this negative activations fact (swiglu_oai) never matches: its when names "
        "engine trtllm, which does not ship toy_negative (engines: vllm, sglang)",
        f"{f}:13: warning: runner toy_negative: this negative activations fact (swiglu_oai) is bounded by sglang's "
        "version but does not name sglang alone in its when: under vllm sglang is read at its newest checked "
        "release, so it refuses those deployments too (write when: {engine: [sglang]})"]


# ---------------------------------------------------------------------------------------------------- iter_sources
def test_iter_sources_reads_every_runner_not_only_the_last(tmp_path):
    """x_iter_sources__mutmut_12 (``objs +=`` -> ``objs =`` per runner: only the last runner's facts kept): two
    operator runners, aa_site then zz_site (files read in name order, after the bundled ones); the file-level
    source of each (its mapping starts on line 1) is listed, aa_site's uncheckable one too."""
    d = tmp_path / "operator"
    d.mkdir()
    _write(d / "aa_site.yaml", runner_file("aa_site", lists=all_open()).replace(f'source: "{UPSTREAM}"', 'source: "a wiki page"', 1))
    _write(d / "zz_site.yaml", runner_file("zz_site", lists=all_open()))
    cat = load_catalog(use_env=False, plugins=False, backends_dirs=[d])
    assert list(cat.runners)[-2:] == ["aa_site", "zz_site"]
    sources = lint.iter_sources(cat)
    assert (f"{d}/aa_site.yaml:1", "a wiki page") in sources
    assert (f"{d}/aa_site.yaml:6", UPSTREAM) in sources  # its support fact (the list item of line 6)
    assert (f"{d}/zz_site.yaml:1", UPSTREAM) in sources


# ---------------------------------------------------------------------------------------------- uncovered_findings
SITE = f"""\
schema_version: 3
runner: site
summary: one runner, shipped by two engines, and no rule
source: {SRC}
engines: {{values: [vllm, sglang], source: {SRC}}}
support:
  - {{archs: [sm90], formats: [bf16], source: {SRC}}}
activations: {{values: [silu], source: {SRC}}}
routing: {{values: any, source: {SRC}}}
dispatch: {{formats: [standard], source: {SRC}}}
cuda_graph: {{supported: true, source: {SRC}}}
lists:
  archs: {{exhaustive: "{UPSTREAM}", why: test}}
  formats: {{exhaustive: "{UPSTREAM}", why: test}}
  engines: {{exhaustive: "{UPSTREAM}", why: test}}
  support: open
  activations: open
  routing: open
  dispatch: open
  a2a: open
  cuda_graph: open
"""


def test_an_uncovered_cell_group_names_each_engine(tmp_path):
    """x_uncovered_findings__mutmut_39 (the engines joined by ``XX, XX``): a capability folder of the bundled formats,
    common facts, packages and vocabulary, one runner on sm90 bf16 shipped by vllm and sglang only (each list
    exhaustive), and no rule: the two cells (sm90, bf16, sglang) and (sm90, bf16, vllm) are uncovered, one group."""
    d = tmp_path / "backends"
    d.mkdir()
    for name in ("formats.yaml", "common.yaml", "packages.yaml", "vocabulary.yaml"):
        shutil.copy(bundled_dirs()[0] / name, d / name)
    (d / "site.yaml").write_text(SITE)
    cat = load_catalog(use_env=False, backends_dir=d, bundled_rules=False, plugins=False)
    messages = [f.message for f in lint.uncovered_findings(cat)]
    assert messages == [
        "no rule covers sm90 x bf16 x engine sglang, vllm (2 cells): site (unverified) eligible there, but no matching "
        "prefer rule names an eligible runner, so explain refuses them with not_preferred (a prefer rule for this "
        "arch settles it)"]

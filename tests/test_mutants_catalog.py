"""Tests that kill the mutants of moe_select/catalog.py that the sampled local run of 2026-12-02 (eighth session;
mutmut 3.8.1, seed 19, 50 of catalog's mutants, catalog at a0d1820;
benchmarks/results/mutation_sampled_local_2026-12-02_s8.json) left: 17 survived. Each test names the mutants it
kills (``catalog.x_function__mutmut_N``, numbered at a0d1820). Most of them change the file, line or field of a load
error (what an operator reads): the tests load a small capability or rules folder written into tmp_path and assert
the exact :class:`~moe_select.errors.Issue`, written by hand from the files.

Equivalent, so not tested (the reason in one line each):

- x__capability_dir__mutmut_51 (``cap._lines.get("runner", )``: no default) and __mutmut_54 (default 1): ``runner``
  is a required key of a runner file, so a file that validated has it in its key lines (a merge key ``<<`` is
  flattened into the mapping's own keys) and the default is never read;
  test_a_misnamed_runner_is_reported_at_its_runner_line pins the line that is read.
"""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from moe_select import catalog
from moe_select.catalog import load_catalog, plugin_backend_dirs, rule_dirs_from_env
from moe_select.errors import InputError, Issue

from test_mutants_c import _issues as load_issues

T = '"this project: tests/test_mutants_catalog.py"'


def _runner(name: str, a2a: str) -> str:
    """A runner file saying ``runner: name`` (line 2) whose a2a fact (line 10) names ``a2a``."""
    return f"""\
schema_version: 3
runner: {name}
summary: a toy runner
source: {T}
support:
  - {{archs: [sm90], formats: [bf16], source: {T}}}
activations: {{values: [silu], source: {T}}}
routing: {{values: any, source: {T}}}
dispatch: {{formats: [standard], source: {T}}}
a2a: {{values: [{a2a}], source: {T}}}
cuda_graph: {{supported: true, source: {T}}}
lists: {{archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}}
"""


#: An a2a file that names itself ``none``, as the bundled backends/a2a/none.yaml does.
A2A_NONE = f"""\
schema_version: 3
a2a: none
summary: a second none
source: {T}
archs: {{values: [sm90], source: {T}}}
format: standard
cuda_graph: {{supported: true, source: {T}}}
lists: {{archs: open}}
"""

RULE = "schema_version: 1\nrules:\n  - id: plugin-prefers-triton\n    when: {arch: [sm90]}\n    prefer: [triton]\n"


def _issues(**kw) -> list[Issue]:
    return load_issues(load_catalog, use_env=False, **kw)


def _ops(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "ops"
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    return folder


# --------------------------------------------------------------------------------------------- capability folders
def test_a_formats_file_in_an_operator_folder_is_an_issue_of_that_file_without_a_field(tmp_path):
    """x__capability_dir__mutmut_12 (the issue's field ``""`` -> None): formats.yaml in a --backends folder is
    refused at that file, line 0, with no field."""
    ops = _ops(tmp_path, {"formats.yaml": "formats: []\n"})
    assert _issues(backends_dirs=[ops]) == [
        Issue(f"{ops}/formats.yaml", 0, "", "format rows are bundled only (backends/formats.yaml): a plugin or "
              "--backends folder cannot add or change a format yet; remove this file")]


def test_an_a2a_backend_defined_twice_is_reported_at_the_second_file(tmp_path):
    """x__capability_dir__mutmut_114 (the issue's file ``display`` -> None): two operator folders' a2a/none.yaml (the
    first replaces the bundled file: an operator's correction, the ninth new user's trial) both name a backend: the
    issue is the second file's, at its a2a: key (the break52 trial: the mapping's first line was named), field a2a, and
    it names the first."""
    ops = _ops(tmp_path, {"a2a/none.yaml": A2A_NONE})
    ops2 = tmp_path / "ops2"
    (ops2 / "a2a").mkdir(parents=True)
    (ops2 / "a2a" / "none.yaml").write_text(A2A_NONE)
    [issue] = _issues(backends_dirs=[ops, ops2])
    key = A2A_NONE.splitlines().index(next(x for x in A2A_NONE.splitlines() if x.startswith("a2a:"))) + 1
    assert (issue.file, issue.line, issue.field) == (f"{ops2}/a2a/none.yaml", key, "a2a")
    assert re.fullmatch(rf"a2a 'none' is already defined by {re.escape(str(ops))}/a2a/none\.yaml:\d+: two operator "
                        r"folders give it: keep one", issue.message), issue.message


def test_a_misnamed_runner_is_reported_at_its_runner_line(tmp_path):
    """(Pins the line the equivalent x__capability_dir__mutmut_51/_54 leave alone.) toy_misnamed.yaml says
    ``runner: toy_other`` on line 2."""
    ops = _ops(tmp_path, {"toy_misnamed.yaml": _runner("toy_other", "none")})
    assert _issues(backends_dirs=[ops]) == [
        Issue(f"{ops}/toy_misnamed.yaml", 2, "runner", "runner 'toy_other' must match the file name 'toy_misnamed'")]


def test_an_unknown_a2a_backend_of_a_runner_file_gets_a_suggestion(tmp_path):
    """x__cross_check__mutmut_69 (``_did_you_mean(name, None)``), __mutmut_70 (``_did_you_mean(a2a)``) and
    __mutmut_71 (``_did_you_mean(name, )``): each a TypeError instead of the load error. The runner file's a2a
    fact (line 10) names ``nonee``; the bundled ``none`` is suggested."""
    ops = _ops(tmp_path, {"toy_cat.yaml": _runner("toy_cat", "nonee")})
    assert _issues(backends_dirs=[ops]) == [
        Issue(f"{ops}/toy_cat.yaml", 10, "a2a", "unknown a2a backend 'nonee' (did you mean 'none'?)")]


def test_a_capability_file_holding_a_list_is_refused_at_that_file(tmp_path):
    """x__read__mutmut_26 (``Issue(display, "", message)``: a TypeError instead of the load error): a runner file
    holding a YAML list."""
    ops = _ops(tmp_path, {"toy_list.yaml": "- a\n- b\n"})
    assert _issues(backends_dirs=[ops]) == [Issue(f"{ops}/toy_list.yaml", 0, "", "the file must hold a mapping")]


# ------------------------------------------------------------------------------------------------------ plugins
def test_a_plugin_whose_package_is_missing_is_an_issue_named_by_its_origin(monkeypatch):
    """x_load_catalog__mutmut_75 (``Issue(0, "", message)``: a TypeError instead of the load error)."""
    origin = "plugin toy-plugin (entry point toy = toy_gone)"
    monkeypatch.setattr(catalog, "plugin_backend_dirs", lambda: [(Path("<missing package toy_gone>"), origin)])
    assert _issues() == [Issue(origin, 0, "", "the plugin's package was not found (<missing package toy_gone>)")]


def test_a_plugins_rules_folder_is_read(tmp_path, monkeypatch):
    """x_load_catalog__mutmut_112 (the plugin's rules read from ``RULES``, not ``rules``: none read): the rule of the
    plugin's rules/site.yaml is in the catalog, first (a new rule id goes before the bundled ones), with the
    plugin as its file's origin."""
    origin = "plugin toy-plugin (entry point toy = toy_pkg)"
    plugin = _ops(tmp_path, {"rules/site.yaml": RULE})
    monkeypatch.setattr(catalog, "plugin_backend_dirs", lambda: [(plugin, origin)])
    cat = load_catalog(use_env=False)
    assert cat.rules[0].id == "plugin-prefers-triton" and cat.rules[0].prefer == ["triton"]
    assert f"{plugin}/rules/site.yaml" in cat.rule_files
    assert cat.origins[f"{plugin}/rules/site.yaml"] == origin


def test_plugin_backend_dirs_locates_each_package_and_names_its_distribution(tmp_path, monkeypatch):
    """x_plugin_backend_dirs__mutmut_13 (``getattr(ep, None)``: a TypeError) and __mutmut_30 (the package's second
    search location, of a package that has one: an IndexError): an entry point of distribution toy-cat-plugin
    naming a package on sys.path, one without a distribution, and one naming no package."""
    pkg = tmp_path / "site" / "toy_cat_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('a plugin package is located, never imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    eps = [SimpleNamespace(name="toy", value="toy_cat_pkg", dist=SimpleNamespace(name="toy-cat-plugin")),
           SimpleNamespace(name="bare", value="toy_cat_pkg"),
           SimpleNamespace(name="gone", value="toy_cat_gone_pkg", dist=SimpleNamespace(name="gone-plugin"))]
    monkeypatch.setattr(catalog, "_entry_points", lambda group: eps if group == "moe_select.backends" else [])
    assert plugin_backend_dirs() == [
        (pkg, "plugin toy-cat-plugin (entry point toy = toy_cat_pkg)"),
        (pkg, "plugin ? (entry point bare = toy_cat_pkg)"),
        (Path("<missing package toy_cat_gone_pkg>"), "plugin gone-plugin (entry point gone = toy_cat_gone_pkg)")]


# -------------------------------------------------------------------------------------------------- rules paths
def test_a_rules_path_the_os_refuses_is_an_issue_at_line_0(monkeypatch):
    """x_load_catalog__mutmut_217 (line 0 -> 1): a rules path whose one component is 300 characters (the OS's
    ENAMETOOLONG), shown cut to 80 characters."""
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    assert _issues(rules_dirs=["r" * 300]) == [Issue("r" * 80 + "…", 0, "", "rules path cannot be read: File name too long")]


def test_an_empty_rules_folder_is_an_issue_naming_the_globs(tmp_path):
    """x_load_catalog__mutmut_231 (field ``""`` -> None) and __mutmut_241 (the globs joined with ``'XX, XX'``)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "r.YAML").write_text(RULE)  # not one of the globs: it would silently not apply
    assert _issues(rules_dirs=[empty]) == [Issue(str(empty), 0, "", "no *.yaml, *.yml, *.json files in this rules directory")]


def test_a_missing_rules_path_is_an_issue_saying_not_found(tmp_path):
    """x_load_catalog__mutmut_262 (the message -> ``XXrules file or directory not foundXX``)."""
    missing = tmp_path / "nowhere"
    assert _issues(rules_dirs=[missing]) == [Issue(str(missing), 0, "", "rules file or directory not found")]


def test_an_empty_rules_variable_says_what_to_name(monkeypatch):
    """x_rule_dirs_from_env__mutmut_2 (``what`` -> None: ``... or name None``)."""
    monkeypatch.setenv("MOE_SELECT_RULES", "")
    with pytest.raises(InputError) as err:
        rule_dirs_from_env()
    assert err.value.issues == [Issue("$MOE_SELECT_RULES", 0, "", "is set but empty: unset it, or name one or more rules "
                                      "folders or files")]

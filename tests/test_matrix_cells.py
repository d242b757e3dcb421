"""``moe-select matrix`` per engine and ``moe-select check``'s uncovered cells (issue 18): every verdict is the
selector's own (checked against ``moe_select.explain`` on the same deployment), refused verdicts cite a fact's
file:line, the README's counts are checked, and cells no rule covers are listed with the right severity."""
from __future__ import annotations

import random
import re

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.cells import LEVELS, REPRESENTATIVE, evaluate, uncovered
from moe_select.cli import main
from moe_select.lint import check
from moe_select.engine_tables import NAMES_BEGIN, NAMES_END, names_block
from moe_select.matrix import README_BEGIN, README_END, build, readme_block, render_markdown, write

from conftest import ROOT


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_env=False, plugins=False)


@pytest.fixture(scope="module")
def cells(catalog):
    return evaluate(catalog)


@pytest.fixture(scope="module")
def data(catalog, cells):
    return build(catalog, cells)


def _explain(arch: str, quant: str, engine: str, **kw):
    return moe_select.explain({**REPRESENTATIVE, "model": dict(REPRESENTATIVE["model"]), "arch": arch, "quant": quant,
                               "engine": engine}, **kw)


def test_every_cell_has_a_verdict_per_runner_and_engine(cells, catalog):
    assert {"sglang", "vllm", "trtllm"} <= set(cells.engines)
    assert len(cells.verdicts) == len(catalog.runners) * len(cells.archs) * len(cells.quants) * len(cells.engines)
    assert len(cells.plans) == len(cells.archs) * len(cells.quants) * len(cells.engines)
    assert {v.level for v in cells.verdicts.values()} == set(LEVELS)  # the bundled tree has all three


def _same_as_explain(cells, runner: str, arch: str, quant: str, engine: str) -> int:
    """Assert the matrix's verdict and plan of one cell are explain's; return how many reasons refused the runner."""
    report = _explain(arch, quant, engine)
    cand = next(c for c in report.candidates if c.backend == runner)
    v = cells.verdicts[(runner, arch, quant, engine)]
    assert v.level == cand.evidence, (runner, arch, quant, engine, v, cand.evidence)
    reasons = [r for r in cand.reasons if r.code != "disabled_by_rule"]
    if v.level == "refused":
        assert (v.code, v.source) == (reasons[0].code, reasons[0].source)
    elif v.level == "unverified":
        assert (v.code, v.source) == (cand.unknowns[0].code, cand.unknowns[0].source)
    plan = cells.plans[(arch, quant, engine)]
    assert plan.runner == (report.plan.runner if report.plan else None)
    assert plan.level == report.evidence
    return len(reasons)


def test_verdicts_are_what_explain_says(cells, seed):
    """A sample of cells (three per level and engine; seeded) against moe_select.explain on the same deployment:
    the matrix's level, first reason / unknown and plan are the selector's, not a reimplementation's. A refused
    runner with several reasons is among them (the first one is shown)."""
    rng = random.Random(seed)
    by_level: dict[tuple[str, str], list] = {}
    for key, v in cells.verdicts.items():
        by_level.setdefault((v.level, key[3]), []).append(key)
    several = 0
    for keys in by_level.values():
        for key in rng.sample(keys, 3):
            several += _same_as_explain(cells, *key) > 1
    for key in sorted(k for k, v in cells.verdicts.items() if v.level == "refused"):
        if several:
            break
        several += _same_as_explain(cells, *key) > 1
    assert several


def test_refused_verdicts_cite_a_fact_line(cells):
    """Every refused verdict names a file:line that exists: a capability or rule file of the catalog."""
    pattern = re.compile(r"^((?:backends|rules)/[\w./-]+\.yaml):(\d+)$")
    lines: dict[str, int] = {}
    for v in cells.verdicts.values():
        if v.level != "refused":
            continue
        m = pattern.match(str(v.source))
        assert m, v
        path = ROOT / m.group(1)
        n = lines.setdefault(m.group(1), len(path.read_text(encoding="utf-8").splitlines()))
        assert 1 <= int(m.group(2)) <= n, v


def test_counts_add_up(cells, catalog):
    counts = cells.counts()
    per_engine = len(catalog.runners) * len(cells.archs) * len(cells.quants)
    for e in cells.engines:
        assert sum(counts[e][f"runners.{lv}"] for lv in LEVELS) == per_engine
        assert sum(counts[e][f"plans.{lv}"] for lv in LEVELS) == len(cells.archs) * len(cells.quants)
        assert counts[e]["runners.supported"] == sum(v.level == "supported" for (_, _, _, en), v in cells.verdicts.items() if en == e)
        assert counts[e]["not_preferred"] == sum(bool(p.not_preferred) for (_, _, en), p in cells.plans.items() if en == e)


def test_markdown_has_the_engine_axis(data, cells):
    """Each runner's section has a row per arch and group of formats with one verdict per engine, in the engines'
    order: checked on a cell whose first and last engines' verdicts differ (the bundled tree has such cells)."""
    md = render_markdown(data)
    engines = list(cells.engines)
    assert "## Evidence per engine" in md and all(f"### Plans with engine {e}" in md for e in engines)
    runner, arch, quant = next((r, a, q) for (r, a, q, e), v in cells.verdicts.items() if e == engines[0]
                               and v != cells.verdicts[(r, a, q, engines[-1])])
    section = md[md.index(f"Evidence of {runner} "):]
    section = section[:section.index("\n## ", 1)]
    assert "| arch | formats | " + " | ".join(engines) + " |" in section
    row = next(line for line in section.splitlines() if line.startswith(f"| {arch} | ")
               and quant in line.split("|")[2].replace(",", " ").split())
    shown = [c.strip() for c in row.strip().strip("|").split("|")[2:]]
    assert shown == [cells.verdicts[(runner, arch, quant, e)].text() for e in engines]


def test_readme_counts_are_checked(tmp_path, data, catalog, capsys):
    """matrix --check exits 1 naming each count that differs from the facts; --write puts them back."""
    block = readme_block(data)
    assert block.startswith(README_BEGIN) and block.endswith(README_END)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_BEGIN}\n{README_END}\n\n{NAMES_BEGIN}\n{NAMES_END}\n\nrest\n", encoding="utf-8")
    write(catalog, tmp_path, data)
    text = readme.read_text(encoding="utf-8")
    assert block in text and names_block() in text and text.endswith("\n\nrest\n")
    assert main(["matrix", "--check", "--root", str(tmp_path)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    n = data["evidence"]["counts"]["vllm"]["runners.refused"]
    stale = text.replace(f"| vllm | {data['evidence']['counts']['vllm']['runners.supported']} | "
                         f"{data['evidence']['counts']['vllm']['runners.unverified']} | {n} |",
                         f"| vllm | {data['evidence']['counts']['vllm']['runners.supported']} | "
                         f"{data['evidence']['counts']['vllm']['runners.unverified']} | {n + 7} |")
    assert stale != text
    readme.write_text(stale, encoding="utf-8")
    assert main(["matrix", "--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"README.md: vllm runners.refused is {n + 7} in the README, {n} from the facts" in out
    assert "docs/matrix" not in out  # only the counts are stale
    readme.write_text(text.replace(README_BEGIN, "<!-- gone -->"), encoding="utf-8")
    assert main(["matrix", "--check", "--root", str(tmp_path)]) == 1
    assert "no generated matrix counts block" in capsys.readouterr().out
    # The names table (backends/engines/names.yaml, issue 20) is generated and checked the same way.
    readme.write_text(text.replace("| `trtllm_gen` |", "| `trtllm_gen_old` |"), encoding="utf-8")
    assert main(["matrix", "--check", "--root", str(tmp_path)]) == 1
    assert "the names block differs from backends/engines/names.yaml" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- check: coverage
def test_bundled_uncovered_cells_are_notes(cells):
    """The bundled tree's uncovered cells: only unverified runners are eligible there, so they are notes."""
    findings, _ = check(use_env=False)
    covers = [f for f in findings if f.message.startswith("no rule covers ")]
    groups = uncovered(cells)
    assert len(covers) == len(groups)
    assert all(f.severity == "note" for f in covers)
    cells_named = sum(int(re.search(r"\((\d+) cells\)", f.message).group(1)) for f in covers)  # type: ignore[union-attr]
    assert cells_named == sum(bool(p.not_preferred) for p in cells.plans.values())


TOY = """\
schema_version: 3
runner: toy_runner
summary: a toy runner of an operator's capability folder
source: "this project: tests/test_matrix_cells.py"
support:
  - {archs: [cpu], formats: [bf16], source: "this project: tests/test_matrix_cells.py"}
activations: {values: [silu], source: "this project: tests/test_matrix_cells.py"}
routing: {values: any, source: "this project: tests/test_matrix_cells.py"}
dispatch: {formats: [standard], source: "this project: tests/test_matrix_cells.py"}
cuda_graph: {supported: false, source: "this project: tests/test_matrix_cells.py"}
lists: {archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}
"""
# The bundled rules prefer torch_native on cpu: disabled there for bf16, cpu x bf16 is left to no rule.
NO_REFERENCE = """\
schema_version: 1
rules:
  - id: no-reference-for-bf16
    when: {arch: [cpu], quant: [bf16]}
    disable: [torch_native]
    reason: a test
"""
TOY_RULE = """\
schema_version: 1
rules:
  - id: toy-on-cpu
    when: {arch: [cpu], quant: [bf16]}
    prefer: [toy_runner]
"""


def test_a_hole_in_the_policy_is_a_warning_naming_its_cells(tmp_path, monkeypatch, capsys):
    """A runner of an operator's capability folder that runs bf16 on cpu (supported there: every part is a fact of
    its file) and no rule preferring it where the bundled choice is disabled: check warns, naming cpu x bf16 and the
    runner, and explain refuses that cell with not_preferred; a prefer rule for it removes the warning."""
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "toy_runner.yaml").write_text(TOY, encoding="utf-8")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "ops.yaml").write_text(NO_REFERENCE, encoding="utf-8")
    monkeypatch.setenv("MOE_SELECT_BACKENDS", str(facts))
    rc = main(["check", str(rules)])
    out = capsys.readouterr().out
    assert rc == 0, out
    warnings = [line for line in out.splitlines() if ": warning: no rule covers " in line]
    assert len(warnings) == 1, out
    assert "no rule covers cpu x bf16 x engine " in warnings[0] and "toy_runner (supported)" in warnings[0], warnings[0]
    report = _explain("cpu", "bf16", "vllm", rules_dirs=[rules])
    assert report.plan is None and "toy_runner" in {r.backend for r in report.reasons if r.code == "not_preferred"}
    settled = tmp_path / "settled"  # another folder: explain keeps a catalog per folder in memory
    settled.mkdir()
    (settled / "ops.yaml").write_text(NO_REFERENCE, encoding="utf-8")
    (settled / "toy.yaml").write_text(TOY_RULE, encoding="utf-8")
    rc = main(["check", str(settled)])
    out = capsys.readouterr().out
    assert rc == 0 and ": warning: no rule covers " not in out, out
    assert _explain("cpu", "bf16", "vllm", rules_dirs=[settled]).plan.runner == "toy_runner"  # type: ignore[union-attr]

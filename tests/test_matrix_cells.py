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
    assert set(cells.engines) == {"sglang", "vllm", "trtllm"}
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


def test_known_cells(cells):
    """Cells whose answer the facts state plainly: triton runs bf16 on sm90 (SGLang, vLLM), TensorRT-LLM does not
    ship this project's triton runner (an exhaustive engines list), torch_native cannot be captured on a GPU."""
    assert cells.verdicts[("triton", "sm90", "bf16", "sglang")].level == "supported"
    trt = cells.verdicts[("triton", "sm90", "bf16", "trtllm")]
    assert (trt.level, trt.code) == ("refused", "engine_unsupported")
    tn = cells.verdicts[("torch_native", "sm90", "bf16", "vllm")]
    assert (tn.level, tn.code) == ("refused", "cuda_graph_unsupported")
    assert cells.verdicts[("torch_native", "cpu", "bf16", "vllm")].level == "supported"
    assert cells.plans[("sm90", "fp8_block", "sglang")].runner == "triton"


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


def test_markdown_has_the_engine_axis(data):
    md = render_markdown(data)
    assert "## Evidence per engine" in md and "### Plans with engine trtllm" in md
    section = md[md.index("## triton\n"):md.index("## triton_kernel")]
    assert "| arch | formats | sglang | vllm | trtllm |" in section
    assert re.search(r"\| sm90 \| bf16, [^|]* \| supported \| supported \| refused: engine_unsupported \(backends/triton\.yaml:\d+\) \|", section)


def test_readme_counts_are_checked(tmp_path, data, catalog, capsys):
    """matrix --check exits 1 naming each count that differs from the facts; --write puts them back."""
    block = readme_block(data)
    assert block.startswith(README_BEGIN) and block.endswith(README_END)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_BEGIN}\n{README_END}\n\nrest\n", encoding="utf-8")
    write(catalog, tmp_path, data)
    text = readme.read_text(encoding="utf-8")
    assert block in text and text.endswith("\n\nrest\n")
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


def test_bundled_readme_counts_match(data):
    """The README's counts are the bundled catalog's (matrix --check does the same)."""
    assert readme_block(data) in (ROOT / "README.md").read_text(encoding="utf-8")


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


def test_a_hole_in_the_policy_is_a_warning_naming_its_cells(tmp_path, capsys):
    """Operator rules that narrow the bundled cpu and fallback rules to bf16 leave cpu x fp16 (torch_native
    supported there) to no rule: check warns, naming the cell, and explain refuses it with not_preferred."""
    (tmp_path / "ops.yaml").write_text(
        "schema_version: 1\nrules:\n"
        "  - id: cpu\n    when: {arch: [cpu], quant: [bf16]}\n    prefer: [torch_native]\n"
        "  - id: reference-fallback\n    when: {quant: [bf16]}\n    prefer: [torch_native]\n", encoding="utf-8")
    rc = main(["check", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    warnings = [line for line in out.splitlines() if ": warning: no rule covers cpu x " in line]
    assert len(warnings) == 1, out
    assert "fp16" in warnings[0] and "bf16," not in warnings[0] and "torch_native (supported)" in warnings[0]
    assert "engine sglang, vllm, trtllm" in warnings[0]
    report = _explain("cpu", "fp16", "vllm", rules_dirs=[tmp_path])
    assert report.plan is None
    np_ = {r.backend for r in report.reasons if r.code == "not_preferred"}
    assert [c.backend for c in report.candidates if c.backend in np_ and c.evidence == "supported"] == ["torch_native"]
    assert _explain("cpu", "bf16", "vllm", rules_dirs=[tmp_path]).plan is not None  # covered: not listed


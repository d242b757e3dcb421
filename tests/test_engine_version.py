"""The engine's version as an input (issue 20): ``engine_version`` (or the engine's own package under ``packages``)
is the version of the serving engine, read by facts (``requires`` on the engine's package), by the evidence levels
(an engine newer than its facts were checked at is reported, and a plan the facts scoped to that engine make
``supported`` is ``unverified`` there; refusals stand), and by launch lines (``--engine-version``). Not given: the
newest version checked, said in ``explain``."""
from __future__ import annotations

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.cli import main
from moe_select.errors import InputError
from moe_select.launch_line import from_command

from conftest import CONFIGS, explain_json

FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")


@pytest.fixture(scope="module")
def checked() -> dict[str, str]:
    """Engine -> the newest version of it the bundled facts were checked at (backends/packages.yaml)."""
    cat = load_catalog(use_env=False, plugins=False)
    out = {}
    for e in ("sglang", "vllm", "trtllm"):
        pkg = cat.engine_package(e)
        assert pkg is not None and pkg.checked_up_to, e
        out[e] = pkg.checked_up_to
    assert cat.engine_package("vllm").name == "vllm" and cat.engine_package("trtllm").name == "tensorrt-llm"  # type: ignore[union-attr]
    return out


def _next(version: str) -> str:
    """A release newer than ``version`` (0.29.0 -> 0.30.0; 1.3.0rc24 -> 1.4.0)."""
    parts = version.split(".")
    return f"{parts[0]}.{int(parts[1]) + 1}.0"


def _vllm(**kw):
    return moe_select.explain({"gpu": "H100", "engine": "vllm", "model_config": FP8, "tp": 1, **kw})


def test_not_given_is_the_newest_checked_and_explain_says_so(checked):
    report = _vllm()
    assert report.plan is not None and report.plan.evidence == "supported"
    said = next(a for a in report.plan.assumptions if a.startswith("vllm's version not given"))
    assert f"vllm {checked['vllm']}" in said and "backends/packages.yaml:" in said
    assert f"  assumed: {said}" in report.render_text().splitlines()
    assert report.version_notes == []  # nothing newer than checked


def test_a_newer_engine_is_reported_and_its_facts_are_unverified(checked):
    newer = _next(checked["vllm"])
    at = _vllm(engine_version=checked["vllm"])
    assert at.plan is not None and at.plan.evidence == "supported"
    report = _vllm(engine_version=newer)
    plan = report.plan
    assert plan is not None and plan.runner == at.plan.runner and plan.evidence == "unverified"
    (gap,) = [x for x in plan.unknowns if x.code == "engine_unsupported"]
    assert newer in gap.detail and checked["vllm"] in gap.detail and gap.source.startswith("backends/packages.yaml:")
    assert any(newer in n and "newer" in n for n in report.version_notes)
    assert report.environment.packages["vllm"] == newer
    assert "engine_version" in report.environment.provenance
    # Older than checked: the facts hold there as far as they say (version gates decide), no unknown is added.
    older = _vllm(engine_version="0.20.0")
    assert not [x for x in older.plan.unknowns if x.code == "engine_unsupported"]  # type: ignore[union-attr]


def test_strict_refuses_a_plan_only_the_old_facts_support(checked):
    report = _vllm(engine_version=_next(checked["vllm"]), strict=True)
    assert report.plan is None
    strict = [r for c in report.candidates for r in c.reasons if r.code == "unverified"]
    assert any("read at vllm up to" in r.detail for r in strict)


def test_refusals_stand_at_a_newer_engine(checked):
    """A cited refusal read at the last checked version is kept (the note says the engine is newer)."""
    def refused(report):
        return {c.backend: [r.code for r in c.reasons] for c in report.candidates if not c.eligible}
    assert refused(_vllm()) == refused(_vllm(engine_version=_next(checked["vllm"])))


def test_packages_is_the_same_input(checked):
    newer = _next(checked["vllm"])
    a = _vllm(engine_version=newer)
    b = _vllm(packages={"vllm": newer})
    assert a.plan.evidence == b.plan.evidence == "unverified"  # type: ignore[union-attr]
    assert [x.detail for x in a.plan.unknowns] == [x.detail for x in b.plan.unknowns]  # type: ignore[union-attr]
    same = _vllm(engine_version=newer, packages={"vllm": newer})
    assert same.plan.evidence == "unverified"  # type: ignore[union-attr]


@pytest.mark.parametrize("dep, says", [
    ({"engine": "any", "engine_version": "0.29.0"}, "needs one serving engine"),
    ({"engine": "moe_select", "engine_version": "0.29.0"}, "needs one serving engine"),
    ({"engine": "vllm", "engine_version": "0.29.0", "packages": {"vllm": "0.28.0"}}, "contradicts"),
    ({"engine": "vllm", "engine_version": "zero"}, "PEP 440"),
])
def test_ill_formed_engine_versions_are_input_errors(dep, says):
    with pytest.raises(InputError) as exc:
        moe_select.explain({"gpu": "H100", "model_config": FP8, **dep})
    assert says in str(exc.value)


def test_cli_flag_and_exit_codes(checked, capsys):
    rc, out = explain_json(capsys, ["--gpu", "H100", "--engine", "vllm", "--model-config", FP8,
                                    "--engine-version", _next(checked["vllm"])])
    assert rc == 0 and out["evidence"] == "unverified"
    assert any(u["code"] == "engine_unsupported" for u in out["plan"]["unknowns"])
    assert main(["explain", "--gpu", "H100", "--engine", "any", "--model-config", FP8, "--engine-version", "1.0"]) == 2
    capsys.readouterr()


TOY = """\
schema_version: 3
runner: toy_kernel
summary: a kernel whose facts name no engine (they are the kernel's own) and one gated on the engine's version
source: "this project: tests/test_engine_version.py"
support:
  - {archs: [sm90], formats: [bf16], source: "this project: tests/test_engine_version.py"}
  - {archs: [sm90], formats: [fp16], requires: {vllm: ">=0.40"}, source: "this project: tests/test_engine_version.py"}
activations: {values: [silu], source: "this project: tests/test_engine_version.py"}
routing: {values: any, source: "this project: tests/test_engine_version.py"}
dispatch: {formats: [standard], source: "this project: tests/test_engine_version.py"}
cuda_graph: {supported: true, source: "this project: tests/test_engine_version.py"}
lists: {archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}
"""
SHAPE = {"num_experts": 8, "top_k": 2, "hidden_size": 1024, "moe_intermediate_size": 512, "activation": "silu",
         "routing": "renormalize"}


def test_facts_that_name_no_engine_hold_at_any_engine_version_and_requires_reads_it(tmp_path, checked):
    """"Unless they hold for it": a runner whose every fact is the kernel's own (no engine scope) stays supported at a
    newer engine; a fact gated on the engine's package version is decided by engine_version."""
    (tmp_path / "toy_kernel.yaml").write_text(TOY, encoding="utf-8")
    dep = {"arch": "sm90", "engine": "vllm", "model": SHAPE, "runner": "toy_kernel"}
    newer = _next(checked["vllm"])
    bf16 = moe_select.explain({**dep, "quant": "bf16", "engine_version": newer}, backends_dirs=[tmp_path])
    assert bf16.plan is not None and bf16.plan.evidence == "supported"
    low = moe_select.explain({**dep, "quant": "fp16", "engine_version": "0.39.0"}, backends_dirs=[tmp_path])
    assert low.plan is None and any(r.code == "quant_unsupported" and "vllm is 0.39.0" in r.detail for r in low.reasons)
    high = moe_select.explain({**dep, "quant": "fp16", "engine_version": "0.41.0"}, backends_dirs=[tmp_path])
    assert high.plan is not None and high.plan.evidence == "supported"


def test_launch_line_engine_version_reaches_the_deployment(checked):
    newer = _next(checked["vllm"])
    launch = from_command("vllm serve M -tp 1", model_config=FP8, engine_version=newer)
    assert launch.deployment["engine_version"] == newer and "--engine-version" in launch.provenance["engine_version"]
    report = launch.explain(deployment={"gpu": "H100"})
    assert report.environment.packages["vllm"] == newer
    assert report.plan is not None and any(x.code == "engine_unsupported" for x in report.plan.unknowns)

"""Tests that kill the mutants of moe_select/selector.py that the local sampled run of 2026-12-02 (eighth session;
seed 19, 50 of selector's 4878 mutants, tree 352b298; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json)
left: 23 survived, 3 reached no test. Each test names the mutants it kills (``selector.x_function__mutmut_N``,
numbered at 352b298; selector.py is unchanged since). The expectations are written by hand from the inputs: the
bundled capability and rule files (their lines found by the text of the fact, as ``_line`` does), a small runner
file written here (``selmut``, in a folder of its own) and the measurement fixtures of tests/fixtures/measurements.

Equivalent, so not tested: none. (x_check_runner__mutmut_344, ``f.values != "XXanyXX"``, looks equivalent but is
not: with it a ``values: any`` routing fact is searched with ``routing in "any"``, a substring test, and a routing
of the open vocabulary such as ``an`` then cites that fact instead of the runner's first routing fact.)
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

import moe_select
from moe_select import selector
from moe_select.catalog import default_catalog
from moe_select.environment import Environment
from moe_select.measurements import load_measurements

from report_helpers import cand

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "measurements"
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "routing": "deepseek_v3"}
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 1024, "activation": "silu",
         "routing": "renormalize"}
SRC = "example-org/example-kernels@0123456789ab:src"

#: A runner shipped by SGLang only, on sm90 / bf16: silu and gelu, gelu refused with triton 3.0 .. 3.1 (a negative
#: fact bounded by package versions); renormalize and softmax_topk routing, softmax_topk refused with triton 3.0 .. 3.1
#: (pre-computed top-k on sm100 only); ep at most 4; three
#: package needs: torch on sm100 only, flashinfer-python only with triton >= 9, and sgl-deep-gemm.
SELMUT = textwrap.dedent(f"""\
    schema_version: 3
    runner: selmut
    summary: a hand-built runner of the selector's mutant tests
    source: "{SRC}/moe.py:Experts"
    engines:
      values: [sglang]
      source: "{SRC}/engines.py"
    support:
      - archs: [sm90]
        formats: [bf16]
        source: "{SRC}/support.py"
    activations:
      - values: [silu, gelu]
        source: "{SRC}/act.py"
      - values: [gelu]
        supported: false
        requires: {{triton: ">=3.0,<3.2"}}
        source: "{SRC}/act_bug.py"
    routing:
      - values: [renormalize, softmax_topk]
        source: "{SRC}/routing.py"
      - values: [softmax_topk]
        supported: false
        requires: {{triton: ">=3.0,<3.2"}}
        source: "{SRC}/routing_bug.py"
      - values: any
        when: {{arch: [sm100]}}
        source: "{SRC}/routing_sm100.py"
    dispatch:
      - formats: [standard]
        source: "{SRC}/dispatch.py"
    cuda_graph:
      - supported: true
        source: "{SRC}/graph.py"
    constraints:
      - field: ep
        max: 4
        code: parallelism_unsupported
        source: "{SRC}/ep.py"
    packages:
      - {{name: torch, when: {{arch: [sm100]}}, source: "{SRC}/setup.py"}}
      - {{name: flashinfer-python, requires: {{triton: ">=9"}}, source: "{SRC}/setup.py"}}
      - {{name: sgl-deep-gemm, source: "{SRC}/setup.py"}}
    """)


def _line(path: Path, needle: str, shown: str | None = None) -> str:
    """``<shown or path>:<line>`` of the first line of ``path`` that starts with ``needle`` (a fact's first line)."""
    lines = path.read_text().splitlines()
    return f"{shown or path}:{next(i for i, t in enumerate(lines) if t.startswith(needle)) + 1}"


def _bundled(rel: str, needle: str) -> str:
    return _line(ROOT / rel, needle, rel)


def _row(rel: str, *lines: str) -> str:
    """``<rel>:<line>`` of the first fact of bundled file ``rel`` that starts with exactly ``lines``."""
    text = (ROOT / rel).read_text().splitlines()
    return f"{rel}:{next(i for i in range(len(text)) if text[i:i + len(lines)] == list(lines)) + 1}"


@pytest.fixture(scope="module")
def selmut(tmp_path_factory) -> Path:
    """The folder holding ``selmut.yaml`` (an operator capability folder)."""
    d = tmp_path_factory.mktemp("selmut")
    (d / "selmut.yaml").write_text(SELMUT)
    return d


def _selmut(folder: Path, model: dict | None = None, environment: Environment | None = None, **dep):
    return moe_select.explain({"gpu": "H200", "quant": "bf16", "model": model or SMALL, "engine": "sglang",
                               "runner": "selmut", **dep}, backends_dirs=[folder], environment=environment)


# ------------------------------------------------------------------------------------- the hand-built runner
def test_version_bounded_negative_facts_and_a_missing_package(selmut):
    """x_check_runner__mutmut_268 (the routing refusal's fix -> None), x__under__mutmut_9 (`` (with ...)`` closed by
    ``XX)XX``), x__package_reasons__mutmut_15 (``continue`` -> ``break``: the needs after a skipped one are not read)
    and x__package_reasons__mutmut_98 (`` : None`` after a missing package no look-alike explains): gelu and
    softmax_topk refused by the facts bounded to triton 3.0 .. 3.1 (the positive facts take both at any version, so
    leaving the bound is the fix), and sgl-deep-gemm, declared absent (null), named as not installed in the
    deployment's packages."""
    f = selmut / "selmut.yaml"
    r = _selmut(selmut, {**SMALL, "activation": "gelu", "routing": "softmax_topk"},
                packages={"triton": "3.1.0", "sgl-deep-gemm": None})
    assert r.plan is None
    assert [(x.code, x.detail, x.source, x.fix) for x in cand(r, "selmut").reasons] == [
        ("activation_unsupported", "selmut does not apply gelu (with triton >=3.0,<3.2)", _line(f, "  - values: [gelu]"),
         "triton outside >=3.0,<3.2"),
        ("routing_unsupported", "selmut does not apply softmax_topk routing (with triton >=3.0,<3.2)",
         _line(f, "  - values: [softmax_topk]"), "triton outside >=3.0,<3.2"),
        ("dependency_missing", "selmut needs sgl-deep-gemm (import deep_gemm); it is not installed (in the deployment's "
         "packages)", _line(f, "  - {name: sgl-deep-gemm"), "pip install 'sgl-deep-gemm'")]


def test_a_plan_notes_each_package_assumed_installed(selmut):
    """x__make_plan__mutmut_84 (``"assumed"`` -> ``"ASSUMED"``: the note never written) and
    x__package_reasons__mutmut_15 (``break``): sgl-deep-gemm, not declared, is needed (the two needs before it do
    not hold on sm90 / with triton 3.3) and the plan says it is assumed installed."""
    r = _selmut(selmut, packages={"triton": "3.3.0"})
    assert r.plan is not None and r.plan.runner == "selmut"
    assert [p.name for p in r.plan.packages] == ["sgl-deep-gemm"]
    assert "sgl-deep-gemm assumed installed (not declared)" in r.plan.notes


def test_on_a_detected_machine_what_is_missing_is_missing_here(selmut):
    """x__package_reasons__mutmut_75 (``on this machine`` upper-cased) and x__untold_engines__mutmut_17 (an absent
    engine package said to be "not given (engine_version)"): on a detected H200 without sgl-deep-gemm and without
    SGLang, the need is "not installed (on this machine)", and the SGLang-scoped facts (selmut's engines) are read as
    at backends/packages.yaml's checked_up_to for sglang (0.5.19 when written, 0.5.23 since the release delta of
    2026-12-05; read from the file here) because SGLang is not installed."""
    env = Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages={"triton": "3.3.0"})
    r = _selmut(selmut, environment=env)
    c = cand(r, "selmut")
    assert [(x.code, x.detail) for x in c.reasons] == [
        ("dependency_missing", "selmut needs sgl-deep-gemm (import deep_gemm); it is not installed (on this machine)")]
    newest = next(p["checked_up_to"] for p in yaml.safe_load((ROOT / "backends" / "packages.yaml").read_text())["packages"]
                  if p["name"] == "sglang")
    assert (f"sglang's version not installed on this machine: the facts scoped to sglang are read as at sglang {newest}, "
            f"the newest checked [{_row('backends/packages.yaml', '  - name: sglang')}]") in c.assumptions


def test_a_parallel_fix_is_searched_in_the_engines_that_ship_the_runner(selmut):
    """x_check_runner__mutmut_403 (``... or None`` -> ``... and None``: the fix searched in every engine of ``engine:
    any``): selmut is shipped by SGLang only, so ep 8 above its 4 is fixed as SGLang takes it at tp 8 (ep 1, 2 or 4),
    not searched again under vLLM and TensorRT-LLM (whose parallelism facts differ: vLLM spans EP over TP x DP)."""
    r = _selmut(selmut, engine="any", tp=8, ep=8, packages={"triton": "3.3.0"})
    (why,) = cand(r, "selmut").reasons
    assert (why.code, why.detail, why.fix) == ("parallelism_unsupported", "selmut: ep = 8 is above 4", "ep in {1, 2, 4} (tp 8)")


def test_an_unnamed_routing_cites_the_first_routing_fact(selmut):
    """x_check_runner__mutmut_344 (``"any"`` -> ``"XXanyXX"``): routing ``an`` (a well-formed name no fact knows) is
    unverified citing selmut's first routing fact (renormalize, softmax_topk), not the sm100 ``values: any`` fact (``"an" in
    "any"`` is a substring test)."""
    r = _selmut(selmut, {**SMALL, "routing": "an"}, packages={"triton": "3.3.0"})
    assert r.plan is not None
    # (selmut's file says sglang ships it, which SGLang's closed runner option denies: that unknown is the ninth
    # trial's, not this test's)
    assert [(x.code, x.detail, x.source) for x in r.plan.unknowns if x.code != "engine_unsupported"] == [
        ("routing_unsupported", "selmut routes inside the kernel with renormalize, softmax_topk; the model routes with an",
         _line(selmut / "selmut.yaml", "  - values: [renormalize, softmax_topk]"))]


# ------------------------------------------------------------------------------------------- bundled facts
def test_an_a2a_backend_failing_at_some_engine_versions_is_refused():
    """x__a2a_reasons__mutmut_50 (the reason appended as None): DeepEP under SGLang 0.5.4 with an NVFP4 model is
    refused by backends/a2a/deepep.yaml's third ``unavailable`` entry, naming the bound and where it holds."""
    r = moe_select.explain({"gpu": "B200", "quant": "nvfp4", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep",
                            "engine": "sglang", "engine_version": "0.5.4", "runner": "flashinfer_cutedsl"})
    src = _bundled("backends/a2a/deepep.yaml", "    requires: {sglang: \">=0.5.4,<0.5.5\"}")
    src = f"backends/a2a/deepep.yaml:{int(src.rsplit(':', 1)[1]) - 2}"  # the entry's first line (engines:)
    (why,) = [x for x in cand(r, "flashinfer_cutedsl").reasons if x.source == src]
    assert why.code == "a2a_unsupported"
    assert why.detail.startswith("a2a deepep fails under sglang with sglang >=0.5.4,<0.5.5 where quant in [nvfp4]: "
                                 "SGLang 0.5.4.x runs an NVFP4 MoE over DeepEP only through flashinfer_cutedsl")
    assert why.fix == "another a2a backend, another engine, or package versions outside sglang >=0.5.4,<0.5.5 where quant in [nvfp4]"


def test_a_dispatch_precision_a_negative_fact_refuses():
    """x__dispatch_precision_reasons__mutmut_22 (``_holds`` called without ``assumed``: TypeError) and __mutmut_44
    (``+`` -> ``-`` between two strings: TypeError), x__under__mutmut_9: W4AFP8 over DeepEP normal mode under SGLang
    0.5.18 with dispatch_precision fp8_group is refused by the negative fact bounded to sglang >= 0.5.18."""
    r = moe_select.explain({"gpu": "H200", "quant": "int4_w4a8", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep",
                            "deepep_mode": "normal", "engine": "sglang", "engine_version": "0.5.18",
                            "dispatch_precision": "fp8_group", "runner": "cutlass"})
    (why,) = [x for x in cand(r, "cutlass").reasons if "does not send" in x.detail]
    assert (why.code, why.detail, why.source, why.fix) == (
        "a2a_unsupported", "a2a deepep does not send fp8_group activations for the main layers (int4_w4a8, runner cutlass) "
        "(with sglang >=0.5.18): W4AFP8 DeepEP normal requires BF16 dispatcher output (W4AFp8MoEMethod.apply_deepep_normal "
        "raises)", _bundled("backends/a2a/deepep.yaml", "  - values: [fp8_group, nvfp4]"),
        "dispatch_precision: auto (the engine chooses from the layer's weights)")


def test_a_mode_fix_without_cuda_graphs_says_only_the_mode():
    """x__dispatch_reasons__mutmut_86 (`` and cuda_graph: false`` always added): vLLM's triton takes int4 over DeepEP
    normal mode only; with cuda_graph false already, the fix is the mode alone."""
    r = moe_select.explain({"gpu": "H200", "quant": "int4_w4a16", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep",
                            "runner": "triton", "engine": "vllm", "cuda_graph": False})
    (why,) = [x for x in cand(r, "triton").reasons if x.code == "a2a_unsupported"]
    assert "hands over batched" in why.detail and why.fix == "a2a_mode: normal"


def test_a_cuda_runtime_below_a_toolchain_minimum_is_refused():
    """x_check_runner__mutmut_468 (``at_least(cuda, None)``): SGLang's cutlass int4_w4a8 with sglang-kernel 0.3.9
    needs a CUDA 12.8 runtime (backends/cutlass.yaml); 12.6 is refused, 12.8 is not."""
    dep = {"gpu": "H200", "quant": "int4_w4a8", "model": DSV3, "tp": 8, "ep": 8, "runner": "cutlass", "engine": "sglang",
           "packages": {"sglang-kernel": "0.3.9"}}
    old = moe_select.explain({**dep, "cuda": "12.6"})
    (why,) = [x for x in cand(old, "cutlass").reasons if x.code == "toolchain_unsupported"]
    assert why.source == _bundled("backends/cutlass.yaml", "  - tool: cuda")
    assert why.detail.startswith("cutlass for quant in [int4_w4a8], engine in [sglang]; sglang-kernel >=0.3.9 needs a CUDA "
                                 "runtime >= 12.8; cuda is 12.6 (")
    assert why.fix == "a CUDA 12.8 or newer runtime"
    assert moe_select.explain({**dep, "cuda": "12.8"}).status == "ok"


MXFP4_BF16_SGLANG = """\
  - archs: [ARCHS]
    formats: [mxfp4]
    activation_precision: {mxfp4: bf16}
    when: {engine: [sglang]}"""


def test_an_asked_activation_precision_no_row_runs_is_named_with_the_rows_precision():
    """x__support_reasons__mutmut_236 (``other is not None`` -> ``is None``: the row of another precision not named)
    and __mutmut_240 (``_row_precision(u)``: TypeError): gpt-oss (MXFP4) on an H200 asking MXFP8 activations: SGLang's
    triton and marlin run MXFP4 with bf16 activations there (marlin from sglang 0.5.12), unverified for the request."""
    r = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": str(ROOT / "examples" / "model_configs" /
                            "openai__gpt-oss-20b"), "tp": 1, "ep": 1, "a2a": "none", "quant_config": {"activation_precision": "mxfp8"},
                            "packages": {"flashinfer-python": "0.6.18", "sglang": "0.5.19"}})
    asks = {c: [(x.code, x.detail, x.source) for x in cand(r, c).unknowns if "asks" in x.detail] for c in ("triton", "marlin")}
    assert asks == {
        "triton": [("quant_unsupported", "triton runs mxfp4 on sm90 with bf16 activations; the deployment asks "
                    "activation_precision mxfp8", _row("backends/triton.yaml", *MXFP4_BF16_SGLANG.replace("ARCHS", "sm80, sm86, sm89, sm90")
                                                               .splitlines()))],
        "marlin": [("quant_unsupported", "marlin runs mxfp4 on sm90 with bf16 activations (with sglang >=0.5.12); the "
                    "deployment asks activation_precision mxfp8", _row("backends/marlin.yaml", *MXFP4_BF16_SGLANG.replace("ARCHS", "sm90, sm120")
                                                                 .splitlines()))]}


def test_walk_reported_finds_the_facts_cited_from_reports():
    """x__walk_reported__mutmut_23 (``None`` added instead of the fact's file:line): the CUDA runtime fact of
    backends/cutlass.yaml cites ``(reported) sgl-project/sglang#10215``."""
    found = selector._walk_reported(default_catalog())
    assert _bundled("backends/cutlass.yaml", "  - tool: cuda") in found and None not in found


def test_each_layer_kind_keeps_its_own_dispatch_precision(mxfp4_mtp):
    """x__select_kind__mutmut_61 (the kind's ``dispatch_precision`` written under another key: the kind keeps the
    main layers'): MXFP4 dispatch for the main layers only; the BF16 MTP layer, not named, is auto and planned."""
    r = moe_select.explain({"gpu": "MI355X", "engine": "sglang", "tp": 8, "ep": 8, "a2a": "mori", "engine_version": "0.5.23",
                            "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "mxfp4"}})
    assert r.plan is not None
    assert [(k.deployment.layer_kind, k.deployment.dispatch_precision) for k in r.plan.layers] == [("mtp", "auto")]


# --------------------------------------------------------------------------------- rule ranges, measurements
def test_small_forwards_split_the_plan_and_each_candidate_names_its_rule():
    """x_select__mutmut_748 (``_with_rule_ranges`` without the plan: TypeError), x__range_parts__mutmut_10 (``-=`` on
    the unknowns: TypeError), x_select__mutmut_496 (``preferred.get(None)``) and __mutmut_516 (``preferred_by`` left
    out): 8 experts in fp8_block on an H200 for this install at 512 tokens per rank: rule
    hopper-fp8-block-few-experts-large-batches prefers deep_gemm, with triton up to 128 tokens."""
    r = moe_select.explain({"gpu": "H200", "quant": "fp8_block", "model": SMALL, "engine": "moe_select",
                            "max_tokens_per_rank": 512})
    rule = _bundled("rules/10-nvidia.yaml", "  - id: hopper-fp8-block-few-experts-large-batches")
    p = r.plan
    assert p is not None and p.runner == "deep_gemm" and p.chosen_by.rule == "hopper-fp8-block-few-experts-large-batches"
    assert [(x.max_tokens, x.runner) for x in p.ranges] == [(128, "triton"), (None, "deep_gemm")]
    assert [x.runner for x in p.range_runners] == ["triton", "deep_gemm"]
    assert cand(r, "deep_gemm").preferred_by == cand(r, "triton").preferred_by == \
        f"hopper-fp8-block-few-experts-large-batches ({rule})"


def test_a_measured_plan_takes_the_tables_ranges():
    """x_select__mutmut_2 (``applicable(None, ...)``), x_select__mutmut_807 (the report's ``measured`` left None),
    x__measured_choice__mutmut_31 (no verdicts), x__with_measurements__mutmut_53 (the ranged fingerprint without the
    table: TypeError), x__range_parts__mutmut_10: cpu_small.json times torch_grouped_mm fastest at 1 and 16 tokens and
    torch_native at 256, so a CPU plan for that layer switches at 64 tokens (the geometric midpoint of 16 and 256)."""
    table = FIX / "cpu_small.json"
    model = {**SMALL, "hidden_size": 64, "moe_intermediate_size": 32}
    r = moe_select.explain({"arch": "cpu", "quant": "bf16", "model": model, "engine": "moe_select"}, measurements=[table])
    (m,) = load_measurements(table)
    assert r.measured is not None and r.measured.applied and r.measured.source == str(table)
    assert r.measured.why == "--measurements, before every rule (no prefer: measured rule in the rules)"
    p = r.plan
    assert p is not None and p.chosen_by.how == "measured" and p.measurements_fingerprint == m.fingerprint()
    assert [(x.max_tokens, x.runner) for x in p.ranges] == [(64, "torch_grouped_mm"), (None, "torch_native")]
    assert [x.runner for x in p.range_runners] == ["torch_grouped_mm", "torch_native"]

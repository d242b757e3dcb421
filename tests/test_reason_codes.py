"""Every closed reason code has a deployment that produces it, with a source file:line and a fix where one exists."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.plans import REASON_CODES

DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
        "activation": "silu", "routing": "deepseek_v3"}
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
        "activation": "silu", "routing": "renormalize"}


def reasons(dep: dict, **kw) -> list:
    report = moe_select.explain(dep, **kw)
    return report.reasons


def codes(dep: dict, **kw) -> set[str]:
    return {r.code for r in reasons(dep, **kw)}


def find(dep: dict, code: str, **kw):
    rs = [r for r in reasons(dep, **kw) if r.code == code]
    assert rs, f"{code} not produced; got {codes(dep, **kw)}"
    return rs[0]


def test_arch_unsupported():
    r = find({"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "runner": "flashinfer_trtllm"}, "arch_unsupported")
    assert "sm100, sm103" in r.detail and "sm90 (H200)" in r.detail and r.source.startswith("backends/flashinfer_trtllm.yaml:")


def test_quant_unsupported_names_where_the_format_runs():
    # Issue 18: a refusal needs an exhaustive list (this project's own runners have none): vLLM's FlashInferExperts
    # takes block FP8 on compute capability 9.0 only (its _supports_quant_scheme, the support list's check).
    r = find({"gpu": "B200", "engine": "vllm", "quant": "fp8_block", "model": QWEN, "tp": 1, "runner": "flashinfer_cutlass"},
             "quant_unsupported")
    assert "not fp8_block" in r.detail and "(fp8_block runs on sm90)" in r.detail and "exhaustive support list" in r.detail


def test_activation_unsupported():
    # Issue 18: vLLM's FlashInferExperts._supports_activation is an exhaustive check (deep_gemm's list is open); it
    # names gelu (GELU_TANH) from 0.24.0, so 0.23.0 is asked.
    r = find({"gpu": "H200", "engine": "vllm", "engine_version": "0.23.0", "quant": "fp8_block",
              "model": {**DSV3, "activation": "gelu"}, "tp": 8, "ep": 8, "runner": "flashinfer_cutlass"},
             "activation_unsupported")
    assert "gelu" in r.detail and "silu" in r.detail and r.source.startswith("backends/flashinfer_cutlass.yaml:")


def test_routing_unsupported():
    # FlashInfer's TRT-LLM-gen routing kernels take MiniMax2-style sigmoid_topk from 0.6.8 (tests/test_facts_flashinfer.py).
    r = find({"gpu": "B200", "engine": "vllm", "quant": "nvfp4", "model": {**DSV3, "routing": "sigmoid_topk"}, "tp": 8,
              "runner": "flashinfer_trtllm", "packages": {"flashinfer-python": "0.6.7"}}, "routing_unsupported")
    assert "sigmoid_topk" in r.detail and "(flashinfer-python is 0.6.7)" in r.detail
    assert "pip install 'flashinfer-python>=0.6.8'" in r.fix


def test_engine_unsupported():
    r = find({"gpu": "B200", "quant": "nvfp4", "model": DSV3, "tp": 8, "engine": "trtllm", "runner": "flashinfer_trtllm"},
             "engine_unsupported")
    assert "not shipped by trtllm" in r.detail and r.source.startswith("backends/flashinfer_trtllm.yaml:")
    assert r.fix is not None and "sglang" in r.fix


def test_a2a_unsupported_with_fix():
    r = find({"gpu": "B300", "quant": "nvfp4", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep",
              "runner": "flashinfer_trtllm"}, "a2a_unsupported")
    assert "deepep" in r.detail and r.fix and "none" in r.fix


def test_deepep_mode_unsupported_by_runner():
    r = find({"gpu": "B200", "quant": "nvfp4", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep", "deepep_mode": "normal",
              "runner": "flashinfer_cutedsl", "cuda_graph": False, "engine": "sglang"}, "a2a_unsupported")
    assert "hands over standard" in r.detail and r.fix == "a2a_mode: low_latency"


def test_parallelism_unsupported_with_fix():
    r = find({"gpu": "H200", "quant": "bf16", "model": QWEN, "tp": 8, "ep": 4, "runner": "flashinfer_cutlass"},
             "parallelism_unsupported")
    assert "ep = 4" in r.detail and "tp (8)" in r.detail
    assert r.fix is not None and "1" in r.fix and "8" in r.fix


def test_a2a_on_the_wrong_arch_is_a2a_unsupported():
    # FlashInfer's one-sided NVLink all-to-all was verified on datacenter NVLink parts (backends/a2a/flashinfer.yaml).
    # Issue 18: no check refuses other GPUs (its arch list is open), so the arch gap is an unknown with that code and
    # source (a refusal only under strict), not a reason.
    dep = {"gpu": "A100", "quant": "bf16", "model": QWEN, "tp": 8, "ep": 8, "a2a": "flashinfer"}
    report = moe_select.explain(dep)
    gap = [x for c in report.candidates for x in c.unknowns if x.source.startswith("backends/a2a/flashinfer.yaml:")]
    arch = [x for x in gap if "a2a flashinfer runs on" in x.detail]
    assert arch and all(x.code == "a2a_unsupported" for x in arch), gap
    # the other unknowns of that file: SGLang's dp == tp constraint, which this deployment (dp unstated) might break
    # (the unstated-input rule): parallelism_unsupported, never a refusal without strict
    assert all(x.code == "parallelism_unsupported" and "dp" in x.detail for x in gap if x not in arch), gap
    strict = [x for x in reasons({**dep, "strict": True}) if x.source.startswith("backends/a2a/flashinfer.yaml:")]
    assert strict and {x.code for x in strict} == {"unverified"}
    assert "arch_unsupported" not in {x.code for x in reasons({"gpu": "A100", "quant": "bf16", "model": QWEN, "tp": 8,
                                                               "ep": 8, "a2a": "flashinfer", "runner": "triton"})}


def test_not_preferred_when_no_preferred_runner_is_eligible(tmp_path):
    # An operator disable rule removes the runner the bundled cpu rule prefers; the runners still eligible there
    # (unverified) are named with their own code, and nothing is chosen silently.
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: no-reference\n    when: {arch: [cpu]}\n"
                                       "    disable: [torch_native]\n    reason: test\n")
    report = moe_select.explain({"arch": "cpu", "quant": "bf16", "model": QWEN, "tp": 1}, rules_dirs=[tmp_path])
    assert report.plan is None and report.status == "rejected"
    r = next(x for x in report.reasons if x.code == "not_preferred")
    assert "no matching rule prefers it" in r.detail and r.fix and "runner: " in r.fix


def test_deepep_needs_ep():
    r = find({"gpu": "H100", "quant": "fp8_block", "model": QWEN, "tp": 8, "ep": 1, "a2a": "deepep"}, "parallelism_unsupported")
    assert r.source.startswith("backends/a2a/deepep.yaml:")


def test_experts_not_divisible_with_fix():
    r = find({"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 6, "ep": 3}, "experts_not_divisible")
    assert "256" in r.detail and r.source.startswith("backends/common.yaml:")
    assert r.fix == "(tp, ep) in {(4, 2), (4, 4), (4, 1), (8, 2)}"  # no single change works: 2048 / 6 is uneven


def test_shape_unaligned_with_fix():
    # vLLM 0.28.0 declared (0.29.0 refines split blocks for its Triton experts): vLLM's own rule, its own fix
    r = find({"gpu": "H100", "quant": "fp8_block", "model": QWEN, "tp": 8, "ep": 1, "engine": "vllm",
              "engine_version": "0.28.0"}, "shape_unaligned")
    assert "96" in r.detail and r.fix == "set ep: 8 (tp 8), or tp in {1, 2, 3, 6} (ep 1)"
    r = find({"gpu": "H100", "quant": "fp8_block", "model": QWEN, "tp": 8, "ep": 1, "engine": "sglang"}, "shape_unaligned")
    assert "96" in r.detail and r.fix == "ep in {4, 8} (tp 8), or tp in {1, 2, 3, 6} (ep 1)"


def test_dependency_missing_absent_and_too_old():
    # SGLang needs the deep_gemm package (vLLM bundles DeepGEMM in its wheel, so no engine-any refusal).
    r = find({"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "runner": "deep_gemm", "engine": "sglang",
              "packages": {"deep_gemm": None}}, "dependency_missing")
    assert "needs sgl-deep-gemm (import deep_gemm)" in r.detail and "not installed" in r.detail and "sgl-deep-gemm" in r.fix
    # this install's flashinfer_cutlass adapter (the serving engines call FlashInfer at the version they pin)
    r = find({"gpu": "H200", "quant": "bf16", "model": QWEN, "tp": 1, "runner": "flashinfer_cutlass", "engine": "moe_select",
              "packages": {"flashinfer-python": "0.5.3"}}, "dependency_missing")
    assert ">=0.6.4" in r.detail and "0.5.3" in r.detail


def test_toolchain_unsupported():
    r = find({"gpu": "RTX PRO 6000", "quant": "bf16", "model": QWEN, "runner": "flashinfer_cutlass", "nvcc": "12.8"},
             "toolchain_unsupported")
    assert "12.9" in r.detail and "12.8" in r.detail


def test_toolchain_not_needed_when_prebuilt():
    assert "toolchain_unsupported" not in codes({"gpu": "RTX PRO 6000", "quant": "bf16", "model": QWEN, "runner": "flashinfer_cutlass",
                                                 "nvcc": "12.8", "prebuilt": {"flashinfer-python": True}})


def test_cuda_graph_unsupported_runner_and_deepep_normal():
    r = find({"gpu": "H200", "quant": "bf16", "model": QWEN, "runner": "torch_native"}, "cuda_graph_unsupported")
    assert r.fix and "cuda_graph: false" in r.fix
    dep = {"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep", "deepep_mode": "normal",
           "runner": "deep_gemm"}
    r = find({**dep, "cuda_graph": True}, "cuda_graph_unsupported")
    assert "normal" in r.detail and r.source.startswith("backends/a2a/deepep.yaml:")
    # Left to its default, cuda_graph is off with DeepEP normal mode, as SGLang does, and the report says so.
    report = moe_select.explain(dep)
    assert report.plan.runner == "deep_gemm" and report.plan.cuda_graph is False
    assert "a2a deepep normal mode, used for decode, cannot be captured" in report.deployment.provenance["cuda_graph"]


def test_disabled_by_rule(tmp_path):
    (tmp_path / "ops.yaml").write_text(
        "schema_version: 1\nrules:\n  - id: no-deep-gemm\n    when: {arch: [sm90]}\n    disable: [deep_gemm]\n"
        "    reason: deep_gemm warm-up hangs on our driver\n")
    dep = {"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "runner": "deep_gemm"}
    r = find(dep, "disabled_by_rule", rules_dirs=[tmp_path])
    assert "warm-up hangs" in r.detail and r.source == f"{tmp_path / 'ops.yaml'}:3"
    # auto moves on to the next preferred runner, and says which rule disabled deep_gemm
    report = moe_select.explain({**dep, "runner": "auto"}, rules_dirs=[tmp_path])
    assert report.plan.runner == "triton"


def test_no_adapter_when_required():
    # marlin: planned by the engines, no adapter in this install (deep_gemm has one since issue 26, refused on sm90)
    r = find({"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "runner": "marlin", "require_adapter": True},
             "no_adapter")
    assert "plan-only" in r.detail


def test_plan_mismatch_and_no_adapter_at_resolve():
    plan = moe_select.plan({"gpu": "L40", "quant": "bf16", "model": QWEN, "tp": 1})
    assert plan.runner == "triton"
    with pytest.raises(moe_select.ResolveError) as exc:
        moe_select.resolve(plan)
    assert "plan_mismatch" in exc.value.codes  # planned for sm89, this machine is cpu
    assert "sm89 (L40)" in str(exc.value)


def test_every_code_is_covered_by_this_file():
    text = Path(__file__).read_text()
    missing = [c for c in REASON_CODES if f'"{c}"' not in text and f"'{c}'" not in text]
    assert not missing, missing


def test_sources_point_at_real_lines():
    """A reason's source is file:line of the fact: that line of the bundled file exists and is not blank."""
    from moe_select.catalog import bundled_dirs

    bdir, rdir = bundled_dirs()
    report = moe_select.explain({"gpu": "H100", "quant": "fp8_block", "model": QWEN, "tp": 8, "ep": 1, "a2a": "deepep"})
    assert report.reasons
    for r in report.reasons:
        path, line = r.source.rsplit(":", 1)
        f = (bdir / path.removeprefix("backends/")) if path.startswith("backends/") else (rdir / path.removeprefix("rules/"))
        lines = f.read_text().splitlines()
        assert 1 <= int(line) <= len(lines) and lines[int(line) - 1].strip(), r

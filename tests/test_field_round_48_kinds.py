"""Field round 48 of issue 21 (tests/cases/field_round_48.yaml), fixed as kinds, each tested on deployments other than
the round's cases; read in the vLLM PyPI wheels 0.16.0 .. 0.34.0.

- FlashInfer's NVLink all-to-alls (two-sided: flashinfer_all2allv before 0.18.0; one-sided from 0.18.0) report their
  combined output unreduced, so with TP above 1 beside DP vLLM all-reduces it again over the TP group (x tp) until
  0.22.0 (backends/a2a/flashinfer_two_sided.yaml, flashinfer.yaml).
- vLLM's NVFP4 MoE methods build only what the NvFp4 oracle lists, and with a model swiglu_limit only its clamp set;
  its Marlin entry is MarlinExperts (no batched kernel) (backends/common.yaml methods, backends/marlin.yaml).
- vLLM 0.16.0 .. 0.18.x cannot run AITER's FP8 experts behind MoRI (defer_input_quant) (backends/aiter.yaml).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.launch_line import from_command
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
R1_SHAPE = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
            "routing": "deepseek_v3"}
DSV31_NVFP4 = str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4")
QWEN_NVFP4 = str(ROOT / "examples" / "model_configs" / "nvidia__Qwen3-30B-A3B-NVFP4")
M3 = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536,
      "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "sigmoid_topk"}

FI_WHY = "a second time over the tensor-parallel group"


def _double_reduce(report) -> bool:
    return any(r.code == "parallelism_unsupported" and FI_WHY in r.detail for r in report.reasons)


@pytest.mark.parametrize("a2a, version, tp, ep, dp, refused", [
    ("flashinfer_two_sided", "0.17.1", 2, 4, 2, True),    # the flashinfer_all2allv name, the same prepare/finalize
    ("flashinfer_two_sided", "0.21.0", 4, 4, 2, True),    # tp written as the whole MoE group (a launch line's reading)
    ("flashinfer_two_sided", "0.21.0", 2, 2, 2, False),   # one TP rank per DP rank: the all-reduce is over one rank
    ("flashinfer_two_sided", "0.22.0", 2, 4, 2, False),   # the fix
    ("flashinfer", "0.18.0", 2, 4, 2, True),              # one-sided, first release
    ("flashinfer", "0.22.0", 2, 4, 2, False),
])
def test_flashinfer_nvlink_double_reduce(a2a, version, tp, ep, dp, refused):
    r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version, "model_config": DSV31_NVFP4,
                            "tp": tp, "ep": ep, "dp": dp, "a2a": a2a})
    assert _double_reduce(r) is refused, report_codes(r)


def test_flashinfer_nvlink_double_reduce_from_a_launch_line():
    line = ("vllm serve x -tp 2 -dp 2 --enable-expert-parallel --all2all-backend flashinfer_nvlink_two_sided")
    report = from_command(line, model_config=DSV31_NVFP4, engine_version="0.21.0").explain(deployment={"gpu": "B200"})
    assert report.plan is None and _double_reduce(report), report_codes(report)


def _m3(version: str, **dep):
    base = {"gpu": "B200", "engine": "vllm", "engine_version": version, "quant": "nvfp4", "model": M3, "tp": 1}
    return moe_select.explain({**base, **dep})


@pytest.mark.parametrize("version, runner", [("0.25.1", "flashinfer_trtllm"), ("0.27.1", "flashinfer_trtllm")])
def test_vllm_nvfp4_clamp_set_plans_what_vllm_runs(version, runner):
    r = _m3(version)
    assert r.plan is not None and r.plan.runner == runner, report_codes(r)


def test_vllm_nvfp4_clamp_set_at_0240_leaves_only_a_wrong_marlin():
    # 0.24.0: TRT-LLM NVFP4 lacks the split SwiGLU-OAI and FlashInfer CUTLASS takes the interleaved one only, so vLLM
    # runs Marlin, whose NVFP4 config drops the activation's alpha / beta before 0.29.0 (vllm-project/vllm#49070)
    r = _m3("0.24.0")
    assert r.plan is None, report_codes(r)
    marlin = next(c for c in r.candidates if c.backend == "marlin")
    assert [x.code for x in marlin.reasons] == ["activation_unsupported"], marlin.reasons
    assert "marlin.yaml" in marlin.reasons[0].source


def test_vllm_nvfp4_boundaries_read_by_the_audit():
    """0.25.0: the TRT-LLM NVFP4 experts already take the split SwiGLU-OAI and the oracle's list has Humming (plans
    there); 0.28.0: Marlin's NVFP4 config still drops the activation's alpha / beta (refused on Hopper)."""
    r = _m3("0.25.0")
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm" and r.plan.evidence == "supported", report_codes(r)
    humming = next(c for c in moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": "0.25.0",
                                                   "model_config": QWEN_NVFP4, "tp": 1, "runner": "humming"}).candidates
                   if c.backend == "humming")
    assert not any("select_nvfp4_moe_backend" in x.detail for x in humming.reasons), humming.reasons
    r = _m3("0.28.0", gpu="H200", runner="marlin")
    marlin = next(c for c in r.candidates if c.backend == "marlin")
    assert any(x.code == "activation_unsupported" for x in marlin.reasons), marlin.reasons


def test_vllm_nvfp4_marlin_split_swiglu_from_0290():
    # on Hopper (no FlashInfer NVFP4 kernels) Marlin is what runs; from 0.29.0 with the activation's alpha / beta
    r = _m3("0.29.0", gpu="H200", runner="marlin")
    marlin = next(c for c in r.candidates if c.backend == "marlin")
    assert not any(x.code == "activation_unsupported" for x in marlin.reasons), marlin.reasons


def test_vllm_nvfp4_clamp_set_with_deepep_low_latency_is_refused():
    r = _m3("0.27.1", ep=16, dp=16, a2a="deepep", a2a_mode="low_latency")
    assert r.plan is None, report_codes(r)
    marlin = next(c for c in r.candidates if c.backend == "marlin")
    assert any(x.code == "a2a_unsupported" for x in marlin.reasons), marlin.reasons


@pytest.mark.parametrize("runner, version, refused", [
    ("deep_gemm", "0.24.0", True), ("hpc_ops", "0.25.1", True), ("humming", "0.24.0", True),
    ("humming", "0.25.1", False), ("marlin", "0.24.0", False),
])
def test_vllm_nvfp4_methods_build_the_oracle_list_only(runner, version, refused):
    r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version, "model_config": QWEN_NVFP4,
                            "tp": 1, "runner": runner})
    cand = next(c for c in r.candidates if c.backend == runner)
    hit = any(x.code == "quant_unsupported" and "select_nvfp4_moe_backend" in x.detail for x in cand.reasons)
    assert hit is refused, cand.reasons


def test_marlin_batched_dispatch_kept_for_other_formats():
    # the batched Marlin experts still serve vLLM's other weight-only formats under DeepEP low-latency
    r = moe_select.explain({"gpu": "A100", "engine": "vllm", "model_config": str(ROOT / "examples" / "model_configs" /
                            "Qwen__Qwen3-30B-A3B-AWQ"), "tp": 1, "ep": 8, "dp": 8, "a2a": "deepep",
                            "a2a_mode": "low_latency", "runner": "marlin", "cuda_graph": False})
    cand = next(c for c in r.candidates if c.backend == "marlin")
    assert not any(x.code == "a2a_unsupported" and "marlin.yaml" in (x.source or "") for x in cand.reasons), cand.reasons


MORI_WHY = "defer_input_quant"


@pytest.mark.parametrize("quant, version, refused", [
    ("fp8_channel", "0.16.0", True), ("fp8_tensor", "0.18.0", True), ("fp8_block", "0.19.0", False),
    ("bf16", "0.18.0", False),   # the unquantized AITER method builds no prepare/finalize
])
def test_aiter_mori_fp8_by_release(quant, version, refused):
    r = moe_select.explain({"gpu": "MI300X", "engine": "vllm", "engine_version": version, "quant": quant,
                            "model": R1_SHAPE, "tp": 1, "ep": 8, "dp": 8, "a2a": "mori", "runner": "aiter",
                            "vendor_library": True, "cuda_graph": False})
    hit = any(x.code == "parallelism_unsupported" and MORI_WHY in x.detail for x in r.reasons)
    assert hit is refused, report_codes(r)

"""Field round 50 of issue 21 (tests/cases/field_round_50.yaml), fixed as kinds (backends/common.yaml), each tested on
deployments other than the round's cases.

- vLLM 0.20.1 .. 0.20.x: the FP8 MoE method never hands the model's swiglu_limit to its kernels (a methods row with
  code activation_unsupported: every runner but DeepSeek-V4's mega MoE path computes plain SiLU).
- SGLang 0.5.15 .. 0.5.18 under AITER: the fused shared expert written twice on the per-rank shared-slot path over
  DeepEP / MoRI (a constraint on fused_shared_experts).
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

V4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu_clamped",
      "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}
CLAMP_WHY = "never passes the model's swiglu_limit"


def _clamp_refused(report, runner: str) -> bool:
    c = next(c for c in report.candidates if c.backend == runner)
    return any(x.code == "activation_unsupported" and CLAMP_WHY in x.detail for x in c.reasons)


@pytest.mark.parametrize("version, quant, activation, refused", [
    ("0.20.1", "fp8_block", "silu_clamped", True), ("0.20.2", "fp8_channel", "silu_clamped", True),
    ("0.21.0", "fp8_block", "silu_clamped", False), ("0.20.0", "fp8_block", "silu_clamped", False),
    ("0.20.2", "fp8_block", "silu", False), ("0.20.2", "mxfp4", "silu_clamped", False),
])
def test_vllm_fp8_clamp_not_passed(version, quant, activation, refused):
    model = {**V4, "activation": activation}
    if activation != "silu_clamped":
        model.pop("swiglu_limit")
    r = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": version, "quant": quant, "model": model,
                            "tp": 8, "runner": "triton"})
    assert _clamp_refused(r, "triton") is refused, report_codes(r)
    assert not _clamp_refused(r, "deep_gemm_mega_moe")   # its own path passes the clamp


PRO = {**V4, "num_experts": 384, "hidden_size": 7168, "moe_intermediate_size": 3072}
SGL = {"gpu": "MI355X", "engine": "sglang", "quant": "mxfp4", "model": PRO, "tp": 8, "dp": 8, "ep": 8, "a2a": "mori",
       "shared_expert_fusion": True, "runner": "aiter", "vendor_library": True, "cuda_graph": False}
MARKER_WHY = "writes the fused shared expert twice"


def _marker(report) -> bool:
    return any(x.code == "parallelism_unsupported" and MARKER_WHY in x.detail for x in report.reasons)


@pytest.mark.parametrize("change, refused", [
    ({"engine_version": "0.5.15"}, True), ({"engine_version": "0.5.18", "a2a": "deepep"}, True),
    ({"engine_version": "0.5.19"}, False), ({"engine_version": "0.5.14"}, False),
    ({"engine_version": "0.5.18", "shared_expert_fusion": False}, False),
    ({"engine_version": "0.5.18", "vendor_library": False}, False),
    ({"engine_version": "0.5.18", "model": {**PRO, "routing": "renormalize"}}, False),
])
def test_sglang_per_rank_shared_slot_double_marker(change, refused):
    r = moe_select.explain({**SGL, **change})
    assert _marker(r) is refused, report_codes(r)

"""Field round 52 of issue 21 (tests/cases/field_round_52.yaml), the kind fixed (backends/common.yaml methods: SGLang's
NVFP4 MoE method refuses some Blackwell-generation GPUs at model construction, whatever the runner), tested on
deployments other than the round's case: compute capability 11.x (Thor) before 0.5.9, 12.x before 0.5.5."""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

QWEN_NVFP4 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
              "routing": "renormalize"}


def _gate(report) -> bool:
    return any("Current platform does not support NVFP4" in r.detail for r in report.reasons)


@pytest.mark.parametrize("gpu, version, runner, refused", [
    ("THOR", "0.5.8", "auto", True), ("THOR", "0.5.6", "triton", True), ("THOR", "0.5.9", "auto", False),
    ("RTX PRO 6000", "0.5.4", "auto", True), ("RTX PRO 6000", "0.5.5", "auto", False),
    ("B200", "0.5.4", "auto", False), ("B200", "0.5.8", "flashinfer_cutlass", False)])
def test_sglang_nvfp4_moe_method_device_gate(gpu, version, runner, refused):
    r = moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "quant": "nvfp4",
                            "model": QWEN_NVFP4, "tp": 1, "runner": runner})
    assert _gate(r) is refused, report_codes(r)
    if refused:
        assert r.plan is None


def test_vllm_is_not_held_to_sglangs_gate():
    r = moe_select.explain({"gpu": "THOR", "engine": "vllm", "engine_version": "0.20.0", "quant": "nvfp4",
                            "model": QWEN_NVFP4, "tp": 1})
    assert not _gate(r), report_codes(r)

"""Field round 54 of issue 21 (tests/cases/field_round_54.yaml), the two kinds fixed in backends/humming.yaml, tested on
deployments other than the round's cases: vLLM 0.25.0 .. 0.26.x size Humming's w13 as gated for a non-gated (relu2)
quantized layer (vllm-project/vllm#49096); vLLM 0.22.0 .. 0.27.x's humming-kernels read GB10's memory clock from NVML,
which has none (vllm-project/vllm#49554)."""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

NEMOTRON = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856, "activation": "relu2",
            "routing": "deepseek_v3", "n_group": 1, "topk_group": 1}
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
        "routing": "renormalize"}


def _humming(report):
    return next(c for c in report.candidates if c.backend == "humming")


@pytest.mark.parametrize("version, quant, activation, refused", [
    ("0.25.0", "fp8_block", "relu2", True), ("0.26.0", "int4_w4a16", "relu2", True), ("0.25.1", "mxfp4", "relu2", True),
    ("0.27.0", "nvfp4", "relu2", False), ("0.24.0", "nvfp4", "relu2", False), ("0.26.0", "nvfp4", "silu", False)])
def test_humming_non_gated_layers_in_vllm_0_25_and_0_26(version, quant, activation, refused):
    r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version, "quant": quant,
                            "model": {**NEMOTRON, "activation": activation}, "tp": 2, "runner": "humming"})
    codes = [x.code for x in _humming(r).reasons]
    assert ("activation_unsupported" in codes) is refused, report_codes(r)


@pytest.mark.parametrize("gpu, version, refused", [
    ("DGX SPARK", "0.22.0", True), ("GB10", "0.25.1", True), ("GB10", "0.27.1", True), ("GB10", "0.28.0", False),
    ("RTX PRO 6000", "0.25.1", False), ("GB10", "0.21.0", False)])
def test_humming_nvml_memory_clock_on_gb10(gpu, version, refused):
    r = moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version, "quant": "int4_w4a16",
                            "model": QWEN, "tp": 1, "runner": "humming"})
    hit = [x for x in _humming(r).reasons if x.code == "arch_unsupported" and "NVML" in x.detail]
    assert bool(hit) is refused, report_codes(r)
    if refused:
        assert "vLLM 0.28.0 or later" in (hit[0].fix or "")


def test_sglangs_humming_is_not_held_to_vllms_pins():
    r = moe_select.explain({"gpu": "GB10", "engine": "sglang", "quant": "int4_w4a16", "model": QWEN, "tp": 1,
                            "runner": "humming"})
    assert not any("NVML" in x.detail for x in _humming(r).reasons), report_codes(r)

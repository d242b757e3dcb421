"""Field round 44 of issue 21 (tests/cases/field_round_44.yaml), fixed as kinds (backends/common.yaml ``methods``), each
tested on deployments other than the round's case; read in the PyPI wheels.

- vLLM's Quark OCP MX MoE method refuses EPLB at construction in 0.23.0 and 0.24.x (supports_eplb False; 0.25.0 on
  True).
- SGLang's DeepSeek (before 0.5.10) and Qwen3 (before 0.5.23) MoE blocks, without an all-to-all, never map the top-k
  ids to EPLB's physical slots: wrong output after the first rebalance. The DeepEP path remaps; other architectures are
  not read (not refused).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
KIMI = {"num_experts": 384, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "num_shared_experts": 1, "architecture": "DeepseekV3ForCausalLM"}


def _eplb_refused(report, needle: str) -> bool:
    return any(r.code == "parallelism_unsupported" and needle in r.detail for r in report.reasons)


@pytest.mark.parametrize("version, refused", [("0.22.0", False), ("0.23.0", True), ("0.24.0", True), ("0.25.0", False),
                                              ("0.34.0", False)])
def test_vllm_quark_mxfp4_eplb_by_release(version, refused):
    dep = {"gpu": "MI355X", "engine": "vllm", "engine_version": version, "quant": "mxfp4",
           "quant_config": {"layout": "quark"}, "model": {**KIMI, "architecture": "KimiK25ForConditionalGeneration"},
           "tp": 8, "ep": 8, "dp": 1, "a2a": "none", "eplb": True}
    r = moe_select.explain(dep)
    assert _eplb_refused(r, "QuarkOCP_MX_MoEMethod") is refused, (version, report_codes(r))
    # the same layer without EPLB is not refused by it
    assert not _eplb_refused(moe_select.explain({**dep, "eplb": False}), "QuarkOCP_MX_MoEMethod")


def test_vllm_quark_fp8_eplb_is_not_this_fact():
    r = moe_select.explain({"gpu": "MI300X", "engine": "vllm", "engine_version": "0.24.0", "quant": "fp8_channel",
                            "quant_config": {"layout": "quark"}, "model": KIMI, "tp": 8, "ep": 8, "dp": 1, "a2a": "none",
                            "eplb": True})
    assert not _eplb_refused(r, "QuarkOCP_MX_MoEMethod")


@pytest.mark.parametrize("model, version, refused", [
    ("deepseek-ai__DeepSeek-V3", "0.5.1", True), ("deepseek-ai__DeepSeek-V3", "0.5.9", True),
    ("deepseek-ai__DeepSeek-V3", "0.5.10", False), ("deepseek-ai__DeepSeek-V3", "0.5.23", False),
    ("Qwen__Qwen3-235B-A22B", "0.5.6", True), ("Qwen__Qwen3-235B-A22B", "0.5.22", True),
    ("Qwen__Qwen3-235B-A22B", "0.5.23", False),
    # another MoE block (Mixtral): not read, not refused
    ("mistralai__Mixtral-8x7B-v0.1", "0.5.9", False),
])
def test_sglang_eplb_without_a2a_by_block_and_release(model, version, refused):
    dep = {"gpu": "H200", "engine": "sglang", "engine_version": version, "model_config": str(CONFIGS / model),
           "tp": 8, "ep": 8, "a2a": "none", "eplb": True}
    r = moe_select.explain(dep)
    assert _eplb_refused(r, "routes by logical expert ids") is refused, (model, version, report_codes(r))
    if refused:
        assert r.status == "rejected"
        assert any("sglang>=" in (x.fix or "") for x in r.reasons if "logical expert ids" in x.detail)
    # without EPLB, or over DeepEP (whose path remaps), the fact does not apply
    assert not _eplb_refused(moe_select.explain({**dep, "eplb": False}), "routes by logical expert ids")
    assert not _eplb_refused(moe_select.explain({**dep, "a2a": "deepep"}), "routes by logical expert ids")

"""Field round 29 (tests/cases/field_round_29.yaml), fixed as kinds:

1. vllm-project/recipes#620 (Tencent Hy3, FP8 per-tensor, AITER at TP 8 under vLLM: 192 rows per rank die at warm-up
   in ck_moe_stage2): the CK 2-stage fp8 MoE's 128-alignment rows (ROCm/aiter#5413) now hold under vLLM too: its
   padding (vllm-project/vllm#55251) was an open PR when read.
2. vllm-project/vllm#44679 (gpt-oss-120b, AITER at TP 8 on MI355X, GSM8K 0.896 -> 0.684 on vLLM 0.22.0): 0.22.x pass a
   pre-doubled intermediate pad that AITER's CK-Tile stage 1 doubles again; refused where vLLM pads (a per-rank
   intermediate not a multiple of 256) at TP > 1, read in the 0.21.0 .. 0.23.0 sdists.
"""
from __future__ import annotations

import pytest

import moe_select

HY3 = {"num_experts": 192, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu"}
GPT_OSS_120B = "examples/model_configs/openai__gpt-oss-120b"


def _aiter(r):
    return {x.code: x for x in next(c for c in r.candidates if c.backend == "aiter").reasons}


@pytest.mark.parametrize("tp, refused", [(8, True), (4, False), (2, False)])
def test_vllm_aiter_fp8_per_tensor_needs_128_aligned_rows(tp, refused):
    r = moe_select.explain({"gpu": "MI355X", "engine": "vllm", "quant": "fp8_tensor", "model": HY3, "tp": tp,
                            "runner": "aiter", "vendor_library": True})
    assert ("shape_unaligned" in _aiter(r)) is refused
    if refused:
        assert "neither engine pads" in _aiter(r)["shape_unaligned"].detail


@pytest.mark.parametrize("version, tp, refused", [("0.22.0", 8, True), ("0.22.1", 2, True), ("0.22.1", 1, False),
                                                  ("0.23.0", 8, False), ("0.21.0", 8, False)])
def test_vllm_022_aiter_mxfp4_pad_doubled_at_tp_over_1(version, tp, refused):
    # aiter 0.1.13 declared: the gate-mode fact of the same window (aiter >= 0.1.14) stays out of the way
    r = moe_select.explain({"gpu": "MI355X", "engine": "vllm", "engine_version": version, "model_config": GPT_OSS_120B,
                            "tp": tp, "runner": "aiter", "vendor_library": True, "packages": {"amd-aiter": "0.1.13"}})
    reason = _aiter(r).get("shape_unaligned")
    assert (reason is not None and "doubled intermediate pad" in reason.detail) is refused, _aiter(r)

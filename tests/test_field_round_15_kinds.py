"""Field round 15 of issue 21 (tests/cases/field_round_15.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. SGLang's DeepGEMM MoE runner and bf16 experts, by release (read in the PyPI wheels): FP8-only before 0.5.12
   (sgl-project/sglang#8110's init check from 0.4.9.post3; no bf16 deep_gemm runner in 0.5.6 .. 0.5.11), the bf16
   grouped GEMMs from 0.5.12, and the standard (a2a none) path quantizing activations to FP8 in 0.5.12 and
   0.5.12.post1 (sgl-project/sglang#27056, fixed in 0.5.13 by PR #26473).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import report_codes as _codes


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# --------------------------------------- kind 1: SGLang deep_gemm x bf16 by release (sglang#8110, #27056)
# Qwen3-30B-A3B (not the round cases' Qwen3-235B / Qwen1.5-MoE) on H200.
QWEN3_30B = "examples/model_configs/Qwen__Qwen3-30B-A3B"


def _dg(version: str, a2a: str, gpu: str = "H200") -> Any:
    ep = 1 if a2a == "none" else 4
    return moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "model_config": QWEN3_30B,
                               "quant": "bf16", "tp": 4, "ep": ep, "a2a": a2a, "runner": "deep_gemm"})


def _deep_gemm_row(r: Any) -> set[str]:
    return {x.source for x in r.reasons if x.source.startswith("backends/deep_gemm.yaml:")}


@pytest.mark.parametrize(("version", "a2a"), [("0.4.9.post1", "deepep"), ("0.4.10", "deepep"), ("0.5.6", "none"),
                                              ("0.5.11", "deepep"), ("0.5.11", "none")])
def test_sglang_deep_gemm_bf16_refused_before_0512(version, a2a):
    """Before SGLang 0.5.12 the DeepGEMM MoE path is FP8-only: bf16 experts are refused as quant_unsupported by the
    deep_gemm.yaml negative row (the only reason), over DeepEP and without an all-to-all alike."""
    r = _dg(version, a2a)
    assert r.plan is None, _why(r)
    assert _codes(r) == {"quant_unsupported"}, _why(r)
    assert len(_deep_gemm_row(r)) == 1, _why(r)


def test_sglang_deep_gemm_bf16_standard_path_refused_in_0512_only():
    """0.5.12 and 0.5.12.post1 quantize the standard path's activations to FP8 before the bf16 GEMM: a2a none is
    refused there (another deep_gemm.yaml row than the <0.5.12 one), DeepEP plans; 0.5.13 plans a2a none."""
    old = _dg("0.5.11", "none")
    for version in ("0.5.12", "0.5.12.post1"):
        r = _dg(version, "none")
        assert r.plan is None, _why(r)
        assert _codes(r) == {"quant_unsupported"}, _why(r)
        assert _deep_gemm_row(r) and _deep_gemm_row(r) != _deep_gemm_row(old), _why(r)
        over_deepep = _dg(version, "deepep")
        assert over_deepep.plan is not None and over_deepep.plan.runner == "deep_gemm", _why(over_deepep)
    for version in ("0.5.13", "0.5.23"):
        ok = _dg(version, "none")
        assert ok.plan is not None and ok.plan.runner == "deep_gemm", _why(ok)


def test_sglang_deep_gemm_bound_leaves_fp8_block_and_vllm_alone():
    """The bound is bf16's: block-FP8 experts plan with deep_gemm under SGLang 0.4.9.post1 (DeepEP) and 0.5.6, and
    vLLM's bf16 deep_gemm answer does not come from the SGLang rows."""
    for version, a2a, ep in (("0.4.9.post1", "deepep", 4), ("0.5.6", "none", 1)):
        r = moe_select.explain({"gpu": "H200", "engine": "sglang", "engine_version": version,
                                "model_config": "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8", "tp": ep, "ep": ep,
                                "a2a": a2a, "runner": "deep_gemm"})
        assert not _deep_gemm_row(r) or all(x.code != "quant_unsupported" for x in r.reasons), _why(r)
        assert r.plan is not None and r.plan.runner == "deep_gemm", _why(r)
    v = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.11.0", "model_config": QWEN3_30B,
                            "quant": "bf16", "tp": 4, "ep": 1, "a2a": "none", "runner": "deep_gemm"})
    rows = {x.source for x in v.reasons}
    sglang_rows = _deep_gemm_row(_dg("0.5.11", "none")) | _deep_gemm_row(_dg("0.5.12", "none"))
    assert not rows & sglang_rows, _why(v)

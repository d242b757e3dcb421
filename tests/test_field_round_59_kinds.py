"""Field round 59 (documented, benchmarked MoE deployments must not be refused): every case was planned, and the kinds
of the checker's findings are fixed here: SGLang's marlin, flashinfer_mxfp4 and deep_gemm apply DeepSeek-V4's clamped
SwiGLU (swiglu_limit) on its FP4 experts from 0.5.12, so `--strict` (the CI gate) no longer refuses those working
deployments as unverified; SGLang's own runner for DeepSeek-V4's FP4 experts is predicted under DeepEP / Mooncake / NIXL
(deep_gemm, Fp8MoEMethod) and without an all-to-all from 0.5.19 (flashinfer_mxfp4, the model override). The two other
cells of sgl-project/sglang#33109 (DeepEP, Mega MoE on 8 B200 at 0.5.16) are kept here: a round lists a report once."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
DSV4 = str(ROOT / "tests/cases/models/deepseek-ai__DeepSeek-V4-Flash-0731")


def _dep(gpu: str, version: str, **kw):
    return {"gpu": gpu, "engine": "sglang", "engine_version": version, "model_config": DSV4, "speculative": False, **kw}


def _clamp_unknown(report) -> bool:
    p = report.plan
    return p is not None and any("silu_clamped" in str(u) for u in [*p.unknowns, *(x for k in p.layers for x in k.unknowns)])


@pytest.mark.parametrize("gpu, version, runner, extra", [
    ("H100", "0.5.18", "marlin", {"tp": 8}),                                  # sgl-project/sglang#38312
    ("H200", "0.5.19", "flashinfer_mxfp4", {"tp": 4}),                        # sgl-project/sglang#37993
    ("B200", "0.5.16", "flashinfer_mxfp4", {"tp": 8}),                        # sgl-project/sglang#33109 (low latency)
])
def test_the_clamp_is_a_fact_for_deepseek_v4_fp4_experts(gpu, version, runner, extra):
    r = moe_select.explain(_dep(gpu, version, runner=runner, **extra))
    assert r.plan is not None and r.plan.runner == runner and not _clamp_unknown(r), report_codes(r)
    strict = moe_select.explain(_dep(gpu, version, runner=runner, strict=True, **extra))
    assert strict.plan is not None, report_codes(strict)
    # before DeepSeek-V4 reached SGLang (0.5.12) the fact does not hold: the clamp is refused there as before
    old = moe_select.explain(_dep(gpu, "0.5.11", runner=runner, **extra))
    assert old.plan is None and "activation_unsupported" in {x.code for x in old.reasons}, report_codes(old)


def test_the_deepep_cell_plans_deep_gemm_and_predicts_it():
    # sgl-project/sglang#33109, the balanced cell: TP8 / DP8 DP attention, DeepEP, runner auto, 8 B200, 0.5.16
    r = moe_select.explain(_dep("B200", "0.5.16", tp=8, ep=8, dp=8, a2a="deepep", a2a_mode="auto", a2a_capacity=1024))
    assert r.plan is not None and r.plan.runner == "deep_gemm" and not _clamp_unknown(r), report_codes(r)
    ch = next(c for c in r.engine_choices if c.engine == "sglang")
    assert ch.runner == "deep_gemm" and any(o.hook == "sglang-dsv4-fp4-a2a-auto-deep-gemm" for o in ch.overrides), ch.how


def test_the_megamoe_cell_is_planned():
    # sgl-project/sglang#33109, the high-throughput cell: the Mega MoE all-to-all, cap 8320 tokens per rank
    r = moe_select.explain(_dep("B200", "0.5.16", tp=8, ep=8, dp=8, a2a="megamoe", a2a_capacity=8320))
    assert r.plan is not None, report_codes(r)


@pytest.mark.parametrize("version, gpu, predicted", [("0.5.19", "H200", "flashinfer_mxfp4"),
                                                      ("0.5.23", "B200", "flashinfer_mxfp4"),
                                                      ("0.5.18", "H200", None)])
def test_sglangs_auto_without_an_all_to_all_from_0_5_19(version, gpu, predicted):
    r = moe_select.explain(_dep(gpu, version, tp=4))
    ch = next(c for c in r.engine_choices if c.engine == "sglang")
    hooked = any(o.hook == "sglang-dsv4-fp4-auto-flashinfer-mxfp4" for o in ch.overrides)
    assert hooked is (predicted is not None), (ch.runner, ch.how)
    if predicted:
        assert ch.runner == predicted

"""vLLM's DeepEP V2 all-to-all hands its experts padded token-major rows (issue 21): ``padded_standard``.

DeepEPV2PrepareAndFinalize hands token-major rows whose count is an upper bound (rows with all top-k ids -1 are padding)
in every release with it. vLLM 0.24.0 .. 0.33.0 declare them Standard, so its format check pairs every Standard experts
class with them; 0.34.0 declares PaddedStandard (vllm-project/vllm#54109) and FusedMoEExperts.is_supported_config
refuses an experts class whose format is not a superset of it ('kernel does not support padded_standard activation
format'). backends/a2a/deepep_v2.yaml says padded_standard under vLLM; each runner's dispatch facts say which of its
vLLM classes take it, per release:

- PaddedStandard from 0.34.0 (and Standard before): triton (TritonExperts), deep_gemm (DeepGemmExperts,
  TritonOrDeepGemmExperts), flashinfer_trtllm (the modular TRT-LLM-gen classes): planned on both sides of 0.34.0.
- Standard in every release: flashinfer_cutlass (FlashInferExperts; its dispatch list is exhaustive for vLLM) and
  flashinfer_cutedsl (FlashInferCuteDSLExperts): planned up to 0.33.0, refused from 0.34.0 (a2a_unsupported);
  cutlass (vLLM CUTLASS: an open dispatch list, a batched class the facts do not state) is unverified from 0.34.0.

The expectations are written out by hand from the wheels' classes, not computed from the facts.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, unknown_codes

# A 64-expert top-6 MoE (DeepSeek-V2-Lite-like widths), DP 4 / EP 4 on B200: not a field round's deployment.
MODEL = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
         "routing": "renormalize"}
DEP = dict(gpu="B200", engine="vllm", model=MODEL, tp=1, ep=4, dp=4, a2a="deepep_v2")


def _explain(**over: Any) -> Any:
    return moe_select.explain({**DEP, **over})


# ------------------------------------------------------------------ runners whose vLLM classes take PaddedStandard
@pytest.mark.parametrize("vllm", ["0.29.0", "0.33.0", "0.34.0"])
@pytest.mark.parametrize(("runner", "quant"), [("triton", "bf16"), ("triton", "fp8_block"), ("deep_gemm", "fp8_block"),
                                               ("flashinfer_trtllm", "bf16"), ("flashinfer_trtllm", "fp8_block")])
def test_padded_standard_experts_planned_on_both_sides(runner, quant, vllm):
    """TritonExperts, DeepGemmExperts and the modular TRT-LLM-gen classes: Standard like DeepEP V2 up to 0.33.0,
    PaddedStandard with it from 0.34.0: planned at 0.29.0, 0.33.0 and 0.34.0, the hand-over padded_standard."""
    r = _explain(runner=runner, quant=quant, engine_version=vllm)
    assert_planned(r, runner)
    assert r.plan.dispatch_formats == ["padded_standard"]
    assert "a2a_unsupported" not in unknown_codes(r, runner)


# ------------------------------------------------------------------ Standard-only classes: refused from 0.34.0
@pytest.mark.parametrize("vllm", ["0.29.0", "0.33.0"])
def test_flashinfer_cutlass_planned_before_0_34(vllm):
    """FlashInferExperts (Standard) behind DeepEP V2 (Standard up to 0.33.0; bf16 from 0.29.0, vllm#51824): planned."""
    assert_planned(_explain(runner="flashinfer_cutlass", quant="bf16", engine_version=vllm), "flashinfer_cutlass")


@pytest.mark.parametrize("vllm", ["0.34.0", "0.35.0"])
def test_flashinfer_cutlass_refused_from_0_34(vllm):
    """0.34.0 and later: DeepEP V2 hands PaddedStandard, FlashInferExperts declares Standard: is_supported_config
    refuses it (a2a_unsupported, the exhaustive vLLM dispatch list of flashinfer_cutlass.yaml)."""
    r = _explain(runner="flashinfer_cutlass", quant="bf16", engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, "flashinfer_cutlass", "a2a_unsupported", "flashinfer_cutlass.yaml")
    assert "padded_standard" in detail and "exhaustive dispatch list" in detail, detail


def test_flashinfer_cutlass_refused_at_0_34_under_an_open_a2a_list():
    """NVFP4: no a2a fact pairs FlashInferExperts with DeepEP V2 (open for vLLM: unverified), yet the format check
    still refuses at 0.34.0; at 0.33.0 the pairing stays unverified, not refused."""
    r = _explain(runner="flashinfer_cutlass", quant="nvfp4", engine_version="0.34.0")
    assert r.plan is None
    only_refusal(r, "flashinfer_cutlass", "a2a_unsupported", "flashinfer_cutlass.yaml")
    old = _explain(runner="flashinfer_cutlass", quant="nvfp4", engine_version="0.33.0")
    assert not cand(old, "flashinfer_cutlass").reasons
    assert "a2a_unsupported" in unknown_codes(old, "flashinfer_cutlass")


@pytest.mark.parametrize("vllm", ["0.29.0", "0.33.0"])
def test_flashinfer_cutedsl_planned_before_0_34(vllm):
    """FlashInferCuteDSLExperts (Standard from 0.20.0) behind DeepEP V2 declaring Standard: planned."""
    assert_planned(_explain(runner="flashinfer_cutedsl", quant="nvfp4", engine_version=vllm), "flashinfer_cutedsl")


def test_flashinfer_cutedsl_refused_from_0_34():
    """0.34.0: padded_standard is not FlashInferCuteDSLExperts' Standard (exhaustive dispatch list): refused."""
    r = _explain(runner="flashinfer_cutedsl", quant="nvfp4", engine_version="0.34.0")
    assert r.plan is None
    detail = only_refusal(r, "flashinfer_cutedsl", "a2a_unsupported", "flashinfer_cutedsl.yaml")
    assert "padded_standard" in detail, detail


def test_cutlass_unverified_from_0_34():
    """vLLM CUTLASS FP8 (CutlassExpertsFp8, Standard): paired at 0.33.0 (no dispatch gap); from 0.34.0 vLLM refuses it,
    but cutlass.yaml's dispatch list is open (CutlassBatchedExpertsFp8 is not stated), so the gap is unverified."""
    old = _explain(runner="cutlass", quant="fp8_tensor", engine_version="0.33.0")
    assert_planned(old, "cutlass")
    assert "a2a_unsupported" not in unknown_codes(old, "cutlass")
    new = _explain(runner="cutlass", quant="fp8_tensor", engine_version="0.34.0")
    assert not cand(new, "cutlass").reasons
    assert "a2a_unsupported" in unknown_codes(new, "cutlass")


# ------------------------------------------------------------------ the auto plan and the other engine
def test_auto_plan_avoids_standard_only_experts_at_0_34():
    """NVFP4 on B200 at 0.33.0: the auto plan is FlashInfer CuTe-DSL; at 0.34.0 neither it nor FlashInfer CUTLASS
    (both Standard) is planned behind DeepEP V2."""
    assert _explain(quant="nvfp4", engine_version="0.33.0").plan.runner == "flashinfer_cutedsl"
    r = _explain(quant="nvfp4", engine_version="0.34.0")
    assert r.plan is None or r.plan.runner not in {"flashinfer_cutedsl", "flashinfer_cutlass"}
    for runner in ("flashinfer_cutedsl", "flashinfer_cutlass"):
        assert "a2a_unsupported" in {x.code for x in cand(r, runner).reasons}


def test_sglang_deepep_v2_formats_unchanged():
    """SGLang's DeepEP V2 keeps its own layouts (contiguous token rows, expert-major decode): deep_gemm block-FP8 is
    planned with standard and batched dispatch, no padded_standard."""
    r = moe_select.explain({**DEP, "engine": "sglang", "gpu": "H200", "tp": 4, "ep": 4, "dp": 4, "quant": "fp8_block",
                            "runner": "deep_gemm"})
    assert_planned(r, "deep_gemm")
    assert sorted(r.plan.dispatch_formats) == ["batched", "standard"]


# ------------------------------------------------------------------ DeepEP V1's batched low-latency mode
def test_flashinfer_cutlass_refused_behind_deepep_low_latency():
    """FlashInferExperts takes Standard only: DeepEP low-latency's BatchedExperts is refused (exhaustive vLLM dispatch
    list), DeepEP normal (Standard) planned."""
    r = _explain(a2a="deepep", a2a_mode="low_latency", runner="flashinfer_cutlass", quant="bf16", engine_version="0.29.0")
    assert r.plan is None
    detail = only_refusal(r, "flashinfer_cutlass", "a2a_unsupported", "flashinfer_cutlass.yaml")
    assert "batched" in detail, detail
    assert_planned(_explain(a2a="deepep", a2a_mode="normal", runner="flashinfer_cutlass", quant="bf16",
                            engine_version="0.29.0", cuda_graph=False), "flashinfer_cutlass")

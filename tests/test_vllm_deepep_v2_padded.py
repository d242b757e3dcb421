"""vLLM's DeepEP V2 all-to-all hands its experts padded token-major rows (issue 21): ``padded_standard``.

DeepEPV2PrepareAndFinalize hands token-major rows whose count is an upper bound (rows with all top-k ids -1 are padding)
in every release with it. vLLM 0.24.0 .. 0.33.0 declare them Standard, so its format check pairs every Standard experts
class with them; 0.34.0 declares PaddedStandard (vllm-project/vllm#54109) and FusedMoEExperts.is_supported_config
refuses an experts class whose format is not a superset of it ('kernel does not support padded_standard activation
format'). backends/a2a/deepep_v2.yaml says padded_standard under vLLM; each runner's dispatch facts say which of its
vLLM classes take it, per release:

- PaddedStandard from 0.34.0 (and Standard before): triton (TritonExperts), deep_gemm (DeepGemmExperts,
  TritonOrDeepGemmExperts), flashinfer_trtllm (the modular TRT-LLM-gen classes): planned on both sides of 0.34.0.
- PaddedStandard from 0.34.0, Standard before: humming (HummingIndexedExperts, HummingGroupedExperts), whose vLLM a2a
  list names DeepEP V2 (its parallel-config check refuses no all-to-all that any release consults): planned on both
  sides of 0.34.0.
- Standard in every release: flashinfer_cutlass (FlashInferExperts; its dispatch list is exhaustive for vLLM),
  flashinfer_cutedsl (FlashInferCuteDSLExperts), marlin (MarlinExperts; BatchedMarlinExperts takes batched) and cutlass
  (vLLM's CUTLASS classes; CutlassBatchedExpertsFp8 takes batched FP8 per-tensor / per-channel): planned up to 0.33.0,
  refused from 0.34.0 (a2a_unsupported, each file's exhaustive vLLM dispatch list); behind DeepEP low-latency the
  batched classes stay planned, and the Standard-only ones (CUTLASS W4A8) are refused.

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


# ------------------------------------------------------------------ humming, marlin, cutlass (follow-ups of ffab1ad)
# GPT-OSS-like widths for Humming's MXFP4 (its vLLM support row is sm90); CUDA graphs off, whose capture is not read.
@pytest.mark.parametrize("vllm", ["0.24.0", "0.33.0", "0.34.0", "0.35.0"])
def test_humming_planned_behind_deepep_v2_on_both_sides(vllm):
    """HummingIndexedExperts / HummingGroupedExperts: Standard up to 0.33.0 (DeepEP V2 Standard there), PaddedStandard
    from 0.34.0; HummingExpertsBase._supports_parallel_config refuses no all-to-all a release consults, so no a2a gap."""
    r = _explain(runner="humming", quant="mxfp4", gpu="H200", cuda_graph=False, engine_version=vllm)
    assert_planned(r, "humming")
    assert r.plan.dispatch_formats == ["padded_standard"]
    assert not cand(r, "humming").reasons
    assert "a2a_unsupported" not in unknown_codes(r, "humming")


def test_humming_refuses_only_what_vllm_does_not_ship():
    """pplx is gone from vLLM (falls back to allgather_reducescatter): refused by backends/a2a/pplx.yaml alone, not by a
    Humming a2a list (no Humming check refuses it)."""
    r = _explain(runner="humming", quant="mxfp4", gpu="H200", cuda_graph=False, engine_version="0.29.0", a2a="pplx")
    assert r.plan is None
    only_refusal(r, "humming", "a2a_unsupported", "a2a/pplx.yaml")


@pytest.mark.parametrize("vllm", ["0.24.0", "0.29.0", "0.33.0"])
def test_marlin_planned_behind_deepep_v2_before_0_34(vllm):
    """MarlinExperts (Standard) behind DeepEP V2 declaring Standard; MarlinExpertsBase._supports_parallel_config refuses
    FlashInfer's NVLink kernels only: planned, padded_standard, no a2a gap."""
    r = _explain(runner="marlin", quant="int4_w4a16", gpu="H200", engine_version=vllm)
    assert_planned(r, "marlin")
    assert r.plan.dispatch_formats == ["padded_standard"]
    assert "a2a_unsupported" not in unknown_codes(r, "marlin")


@pytest.mark.parametrize("vllm", ["0.34.0", "0.35.0"])
def test_marlin_refused_behind_deepep_v2_from_0_34(vllm):
    """0.34.0: DeepEP V2 hands PaddedStandard, MarlinExperts declares Standard (BatchedMarlinExperts BatchedExperts):
    is_supported_config refuses both (marlin.yaml's exhaustive vLLM dispatch list)."""
    r = _explain(runner="marlin", quant="int4_w4a16", gpu="H200", engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, "marlin", "a2a_unsupported", "marlin.yaml")
    assert "padded_standard" in detail and "exhaustive dispatch list" in detail, detail


@pytest.mark.parametrize("vllm", ["0.29.0", "0.34.0"])
def test_marlin_batched_and_no_a2a_stay_planned(vllm):
    """The exhaustive list keeps BatchedMarlinExperts behind DeepEP low-latency and MarlinExperts without an
    all-to-all, on both sides of 0.34.0."""
    ll = _explain(runner="marlin", quant="int4_w4a16", gpu="H200", engine_version=vllm, a2a="deepep",
                  a2a_mode="low_latency")
    assert_planned(ll, "marlin")
    assert ll.plan.dispatch_formats == ["batched"]
    none = _explain(runner="marlin", quant="int4_w4a16", gpu="H200", engine_version=vllm, a2a="none")
    assert_planned(none, "marlin")
    assert none.plan.dispatch_formats == ["standard"]


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel", "int4_w4a8"])
@pytest.mark.parametrize("vllm", ["0.24.0", "0.33.0"])
def test_cutlass_planned_behind_deepep_v2_before_0_34(quant, vllm):
    """TritonOrCutlassExperts / CutlassExpertsFp8 and CutlassExpertsW4A8Fp8 (Standard) behind DeepEP V2 declaring
    Standard: planned, padded_standard, no dispatch gap."""
    r = _explain(runner="cutlass", quant=quant, gpu="H200", engine_version=vllm)
    assert_planned(r, "cutlass")
    assert r.plan.dispatch_formats == ["padded_standard"]
    assert "a2a_unsupported" not in unknown_codes(r, "cutlass")


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel", "int4_w4a8"])
@pytest.mark.parametrize("vllm", ["0.34.0", "0.35.0"])
def test_cutlass_refused_behind_deepep_v2_from_0_34(quant, vllm):
    """0.34.0: every vLLM CUTLASS class is Standard or BatchedExperts, none PaddedStandard: refused on evidence (the
    exhaustive vLLM dispatch list of cutlass.yaml), no longer unverified."""
    r = _explain(runner="cutlass", quant=quant, gpu="H200", engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, "cutlass", "a2a_unsupported", "cutlass.yaml")
    assert "padded_standard" in detail and "exhaustive dispatch list" in detail, detail


@pytest.mark.parametrize("vllm", ["0.29.0", "0.34.0"])
def test_cutlass_batched_fp8_planned_and_w4a8_refused_behind_deepep_low_latency(vllm):
    """CutlassBatchedExpertsFp8 (BATCHED_VLLM_CUTLASS) takes DeepEP low-latency's batched rows for FP8 per-tensor and
    per-channel: planned; CutlassExpertsW4A8Fp8 has no batched form: refused."""
    for quant in ("fp8_tensor", "fp8_channel"):
        r = _explain(runner="cutlass", quant=quant, gpu="H200", engine_version=vllm, a2a="deepep", a2a_mode="low_latency")
        assert_planned(r, "cutlass")
        assert r.plan.dispatch_formats == ["batched"]
        assert "a2a_unsupported" not in unknown_codes(r, "cutlass")
    r = _explain(runner="cutlass", quant="int4_w4a8", gpu="H200", engine_version=vllm, a2a="deepep", a2a_mode="low_latency")
    assert r.plan is None
    detail = only_refusal(r, "cutlass", "a2a_unsupported", "cutlass.yaml")
    assert "batched" in detail, detail


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
    # SGLang 0.5.21: 0.5.19 (assumed without engine_version) and 0.5.20 fail DeepEP V2's prefill into DeepGEMM
    # (sgl-project/sglang#38160, backends/a2a/deepep_v2.yaml).
    r = moe_select.explain({**DEP, "engine": "sglang", "engine_version": "0.5.21", "gpu": "H200", "tp": 4, "ep": 4,
                            "dp": 4, "quant": "fp8_block", "runner": "deep_gemm", "decode_tokens_per_rank": 64})
    assert_planned(r, "deep_gemm")    # (a decode batch stated: SGLang's own, 512 on an H200 at tp 4, outgrows 128)
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


# ------------------------------------------------------------------ the release that brought DeepEP V2 to vLLM
@pytest.mark.parametrize(("vllm", "shipped"), [("0.22.1", False), ("0.23.0", False), ("0.24.0", True), ("0.29.0", True)])
def test_vllm_takes_deepep_v2_from_0_24(vllm, shipped):
    """vLLM 0.23.0's ParallelConfig.All2AllBackend Literal has no deepep_v2 (0.24.0's has: vllm-project/vllm#41183), so
    before 0.24.0 every runner behind it is refused naming the release; from 0.24.0 triton bf16 plans behind it."""
    r = _explain(runner="triton", quant="bf16", engine_version=vllm)
    if shipped:
        assert_planned(r, "triton")
    else:
        detail = only_refusal(r, "triton", "a2a_unsupported", "a2a/deepep_v2.yaml")
        assert "takes deepep_v2 from 0.24.0" in detail, detail


def test_vllm_has_no_flashinfer_megamoe_all_to_all():
    """No vLLM release's All2AllBackend Literal (0.13.0 .. 0.34.0) names FlashInfer MegaMoE: behind it every runner is
    refused under vLLM (deep_gemm was planned, unverified)."""
    # block FP8: deep_gemm's own format under vLLM (its bf16 is refused by deep_gemm.yaml itself: vLLM's unquantized
    # oracle has no deep_gemm), so the all-to-all is the one refusal
    r = _explain(a2a="flashinfer_megamoe", quant="fp8_block", quant_config={"block": [128, 128]}, engine_version="0.29.0")
    assert r.plan is None
    assert "flashinfer" in only_refusal(r, "deep_gemm", "a2a_unsupported", "a2a/flashinfer_megamoe.yaml").lower()

"""Field round 18 of issue 21 (tests/cases/field_round_18.yaml), the AMD cases fixed as kinds: each kind tested on
other deployments than the round's case (another GPU, model, format or release), on both sides of each bound.

1. vLLM 0.25.0 .. 0.28.x's Triton experts align tokens with the routed expert count when there is no expert map, so
   fused shared-expert slots are dropped (vllm-project/vllm#51632, in the 0.29.0 sdist, not in 0.28.0): refused for
   shared-expert fusion without expert parallelism (backends/triton.yaml). With it, vLLM's Triton experts take
   MiniMax-M3's SwiGLU-OAI on split halves (MoEActivation.SWIGLUOAI_UNINTERLEAVE) from the 0.24.0 sdist.
2. SGLang before 0.5.6 computes a per-channel FP8 MoE with the Triton runner under SGLANG_USE_AITER (AITER only for
   the top-1 weight-on-input path), and its compressed-tensors method shuffles the weights for AITER first (wrong
   output; sgl-project/sglang#13157, in the 0.5.6 wheel): aiter refused for fp8_channel there (backends/aiter.yaml).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import cand, planned, refusals

# A DeepSeek-V2-Lite-shaped MoE with two shared experts (64 routed, top 6).
SHARED = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
          "routing": "renormalize", "num_shared_experts": 2}
# MiniMax-M3's shape as in the round's case, without shared-expert fusion.
M3 = {"num_experts": 128, "top_k": 4, "hidden_size": 6144, "moe_intermediate_size": 3072,
      "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "sigmoid_topk", "num_shared_experts": 1}
# A Qwen3-30B-A3B-shaped MoE (128 experts, top 8).
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
        "routing": "renormalize"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


# ------------------------------------------------------------ kind 1: vLLM's Triton experts x fused shared experts
FUSED = dict(engine="vllm", quant="bf16", model=SHARED, tp=2, ep=1, a2a="none", shared_expert_fusion=True,
             runner="triton")


@pytest.mark.parametrize("version", ["0.25.0", "0.28.0"])
@pytest.mark.parametrize("gpu", ["H200", "MI300X"])
def test_triton_fused_shared_experts_without_ep_refused_in_vllm_0_25_to_0_28(gpu, version):
    """Two fused shared experts, TP 2 without EP (no expert map), bf16, on an H200 and an MI300X (the fusion flag alone
    fuses from 0.25.0, any GPU): refused (parallelism_unsupported) by the triton.yaml row citing vllm-project/vllm#51632."""
    r = _explain(**FUSED, gpu=gpu, engine_version=version)
    assert r.plan is None
    codes = refusals(r, "triton")
    assert set(codes) == {"parallelism_unsupported"}, codes
    assert codes["parallelism_unsupported"].startswith("backends/triton.yaml:")
    assert "fused shared-expert slots are dropped" in next(x.detail for x in cand(r, "triton").reasons)


@pytest.mark.parametrize("version", ["0.24.0", "0.29.0"])
def test_triton_fused_shared_experts_outside_the_bound_planned(version):
    """0.29.0 aligns with w1.shape[0] without a map (the fix); 0.24.0 fuses only with AITER's MoE on (not claimed):
    the same deployment is planned with triton."""
    r = _explain(**FUSED, gpu="H200", engine_version=version)
    assert planned(r, "triton"), [(x.code, x.detail) for x in r.reasons]


def test_triton_fused_shared_experts_with_expert_map_planned():
    """With expert parallelism the ids are remapped through the expert map, which carries the shared slots: EP 2 at
    0.28.0 is planned with triton."""
    r = _explain(**{**FUSED, "ep": 2}, gpu="H200", engine_version="0.28.0")
    assert planned(r, "triton"), [(x.code, x.detail) for x in r.reasons]


def test_triton_unfused_shared_experts_planned_and_sglang_untouched():
    """Without fusion (the shared experts run as their own MLP) vLLM 0.28.0 plans triton; the row is vLLM's: SGLang
    0.5.5 with fusion is not refused by it."""
    r = _explain(**{**FUSED, "shared_expert_fusion": False}, gpu="MI300X", engine_version="0.28.0")
    assert planned(r, "triton")
    r = _explain(**{**FUSED, "engine": "sglang"}, gpu="H200", engine_version="0.5.5")
    assert "parallelism_unsupported" not in refusals(r, "triton")


@pytest.mark.parametrize("version", ["0.24.0", "0.28.0"])
def test_triton_takes_swiglu_oai_split_in_vllm_from_0_24(version):
    """MiniMax-M3 (FP8 per-channel, split-half SwiGLU-OAI) on MI300X at TP 4, no fusion: planned with triton from 0.24.0
    (TritonExperts._supports_activation lists SWIGLUOAI_UNINTERLEAVE)."""
    r = _explain(gpu="MI300X", engine="vllm", engine_version=version, quant="fp8_channel", model=M3, tp=4, ep=1,
                 a2a="none", runner="triton")
    assert planned(r, "triton"), [(x.code, x.detail) for x in r.reasons]


def test_triton_refuses_swiglu_oai_split_before_vllm_0_24():
    """0.22.0 has no SWIGLUOAI_UNINTERLEAVE: refused by the exhaustive vLLM activations list (activation_unsupported)."""
    r = _explain(gpu="MI300X", engine="vllm", engine_version="0.22.0", quant="fp8_channel", model=M3, tp=4, ep=1,
                 a2a="none", runner="triton")
    assert r.plan is None and set(refusals(r, "triton")) == {"activation_unsupported"}


# ------------------------------------------------------- kind 2: SGLang's per-channel FP8 MoE under SGLANG_USE_AITER
CHANNEL = dict(engine="sglang", quant="fp8_channel", model=QWEN, tp=2, ep=1, a2a="none", runner="aiter")


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.2", "0.5.5.post3"])
@pytest.mark.parametrize("gpu", ["MI300X", "MI355X"])
def test_aiter_fp8_channel_refused_in_sglang_before_0_5_6(gpu, version):
    """A Qwen3-30B-A3B-shaped per-channel FP8 MoE at TP 2 with aiter asked for, on gfx942 and gfx950: refused
    (quant_unsupported) by the aiter.yaml row citing sgl-project/sglang#13157 (Triton computes, on shuffled weights
    from 0.5.1 for compressed-tensors)."""
    r = _explain(**CHANNEL, gpu=gpu, engine_version=version)
    assert r.plan is None
    codes = refusals(r, "aiter")
    assert set(codes) == {"quant_unsupported"}, codes
    assert codes["quant_unsupported"].startswith("backends/aiter.yaml:")
    assert "<0.5.6" in next(x.detail for x in cand(r, "aiter").reasons)


@pytest.mark.parametrize("version", ["0.5.6", "0.5.19"])
def test_aiter_fp8_channel_planned_in_sglang_from_0_5_6(version):
    """0.5.6 runs AITER's fused_moe for per-channel weights (the shuffle gated on the same condition): planned."""
    r = _explain(**CHANNEL, gpu="MI300X", engine_version=version)
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


def test_aiter_fp8_channel_row_leaves_top1_and_vllm_alone():
    """The top-1 weight-on-input path (AITER's tkw1 kernel) is outside the row (llama4 at 0.5.5 is refused by the
    routing facts only, not on the format), and vLLM 0.26.0 still plans aiter for per-channel FP8; runner auto at
    SGLang 0.5.5.post3 plans triton, what SGLang computes."""
    llama4 = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192, "activation": "silu",
              "routing": "llama4"}
    r = _explain(**{**CHANNEL, "model": llama4, "tp": 8}, gpu="MI300X", engine_version="0.5.5")
    assert "quant_unsupported" not in refusals(r, "aiter")
    r = _explain(**{**CHANNEL, "engine": "vllm"}, gpu="MI300X", engine_version="0.26.0")
    assert planned(r, "aiter")
    r = _explain(**{**CHANNEL, "runner": "auto"}, gpu="MI300X", engine_version="0.5.5.post3")
    assert planned(r, "triton")

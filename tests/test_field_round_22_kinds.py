"""Field round 22 of issue 21 (tests/cases/field_round_22.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case, on both sides of each bound. The expectations are written by
hand from the upstream code read (the sdists, wheels and tags each fact cites), not computed from the facts.

1. vLLM's AITER MXFP8 experts (AiterMxfp8Experts, new in 0.25.0; gfx950): MXFP8 x aiter x vLLM >= 0.25.0, computing
   AITER's SwiGLU-OAI only (split gate/up in the checkpoint: swiglu_oai_split; any other activation refused), and
   0.25.0's expert-mask defect under EP (vllm-project/vllm#47158, fixed in 0.26.0).
2. vLLM 0.20.0 .. 0.22.x pad DeepSeek-V4's MXFP4 per-rank intermediate to a multiple of 256 on ROCm and load the
   checkpoint at the padded offset (vllm-project/vllm#42595, fixed in 0.23.0): aiter refused (shape_unaligned) at
   TP >= 2 where the per-rank intermediate is no multiple of 256.
3. SGLang 0.5.19 and 0.5.20 launch DeepEP V2's prefill scatter into DeepGEMM without two arguments
   (sgl-project/sglang#38160, fixed in 0.5.21): deepep_v2 refused under SGLang in its normal (prefill) mode.
4. vLLM 0.17.0 .. 0.23.x shuffle gpt-oss's MXFP4 W4A16 w13 interleaved and pass AITER no gate mode, which AITER >=
   0.1.14 reads (ROCm/aiter#3586, vllm-project/vllm#44893): the vLLM twin of the SGLang fact.
5. vLLM before 0.24.0 repacks NVFP4 MoE weights for Marlin at the unpadded per-rank intermediate (vllm-project/vllm#41947):
   marlin refused for NVFP4 under vLLM < 0.24.0 where the per-rank intermediate is no multiple of 64.
6. FlashInfer 0.6.5's autotuner hands a token count its bucket's tactic whose tile the TRT-LLM-gen launchers did not
   build (flashinfer-ai/flashinfer#2821): flashinfer-python 0.6.5 refused on both TRT-LLM-gen runners.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, refusals

AITER = "aiter"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _not_planned_and_not_refused_by(r: Any, runner: str, code: str) -> None:
    assert not (r.plan is not None and r.plan.runner == runner)
    assert code not in refusals(r, runner), refusals(r, runner)


# ------------------------------------------------ kind 1: vLLM's AITER MXFP8 experts (0.25.0 on) and 0.25.0's EP mask
# A smaller MiniMax-M3-like MXFP8 MoE (64 experts, top 4, hidden 3072, intermediate 1536): not the round's shape.
M3 = {"num_experts": 64, "top_k": 4, "hidden_size": 3072, "moe_intermediate_size": 1536,
      "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "sigmoid_topk"}
MXFP8 = dict(gpu="MI355X", engine="vllm", quant="mxfp8", model=M3, a2a="none", runner=AITER)


@pytest.mark.parametrize(("tp", "ep"), [(2, 2), (8, 8), (1, 4)])
def test_mxfp8_aiter_under_ep_refused_at_0_25_0(tp, ep):
    """0.25.0 with EP 2, 4 and 8 and VLLM_ROCM_USE_AITER=1 (the report's launch): refused (parallelism_unsupported,
    aiter.yaml), naming the mask and the switch."""
    r = _explain(**MXFP8, engine_version="0.25.0", tp=tp, ep=ep, vendor_library=True)
    assert r.plan is None
    detail = only_refusal(r, AITER, "parallelism_unsupported", "aiter.yaml")
    assert "expert mask" in detail and "0.26.0" in detail and "VLLM_ROCM_USE_AITER=0" in detail, detail


def test_mxfp8_aiter_under_ep_at_0_25_0_with_the_switch_off_is_planned():
    """An independent audit (2026-12-04) read the 0.25.0 sdist: with VLLM_ROCM_USE_AITER off, RoutedExperts hands the
    MXFP8 experts vLLM's own expert map (-1 for other ranks' experts), so the mask is right, and the experts still run
    (AiterMxfp8Experts._supports_current_device needs only ROCm and MX support). Off: planned; not stated: the row is
    unverified (strict refuses), not a refusal."""
    assert_planned(_explain(**MXFP8, engine_version="0.25.0", tp=4, ep=4, vendor_library=False), AITER)
    r = _explain(**MXFP8, engine_version="0.25.0", tp=4, ep=4)
    assert "parallelism_unsupported" not in refusals(r, AITER), refusals(r, AITER)
    assert r.plan is not None and r.plan.runner == AITER and r.plan.evidence == "unverified", r.plan


@pytest.mark.parametrize(("vllm", "tp", "ep"), [("0.25.0", 4, 1), ("0.25.0", 1, 1), ("0.26.0", 4, 4), ("0.29.0", 8, 8)])
def test_mxfp8_aiter_planned_without_ep_or_from_0_26_0(vllm, tp, ep):
    """0.25.0 without EP (no expert map: no mask), and 0.26.0 / 0.29.0 with EP (the mask passed through): planned."""
    assert_planned(_explain(**MXFP8, engine_version=vllm, tp=tp, ep=ep), AITER)


def test_mxfp8_aiter_not_planned_before_0_25_0():
    """0.24.0 has no AITER MXFP8 experts class: no fact plans aiter for MXFP8 there (not planned, no EP refusal)."""
    r = _explain(**MXFP8, engine_version="0.24.0", tp=4, ep=1)
    _not_planned_and_not_refused_by(r, AITER, "parallelism_unsupported")


@pytest.mark.parametrize("act", ["silu", "swiglu_oai", "gelu"])
def test_mxfp8_aiter_other_activations_refused(act):
    """The experts compute AITER's SwiGLU-OAI whatever the layer's activation: SiLU, gpt-oss's interleaved SwiGLU-OAI
    and GELU refused (activation_unsupported, aiter.yaml) at 0.26.0 without EP."""
    model = {k: v for k, v in M3.items() if k != "swiglu_limit"}
    model["activation"] = act
    r = _explain(**{**MXFP8, "model": model}, engine_version="0.26.0", tp=4, ep=1)
    assert r.plan is None
    only_refusal(r, AITER, "activation_unsupported", "aiter.yaml")


def test_mxfp8_aiter_not_on_gfx942():
    """MI300X (gfx942, no MX support: _supports_current_device is False): not planned at 0.26.0."""
    r = _explain(**{**MXFP8, "gpu": "MI300X"}, engine_version="0.26.0", tp=4, ep=1)
    assert not (r.plan is not None and r.plan.runner == AITER)


# ------------------------------------------------ kind 2: DeepSeek-V4 MXFP4 padded-offset load on ROCm (0.20.0 .. 0.22.x)
# A DeepSeek-V4-like MXFP4 MoE with intermediate 1536 (768 per rank at TP 2, 384 at TP 4, 192 at TP 8): not the round's
# DeepSeek-V4-Pro at TP 8.
DSV4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu_clamped",
        "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}
DSV4_DEP = dict(gpu="MI355X", engine="vllm", quant="mxfp4", model=DSV4, ep=1, a2a="none", runner=AITER)


@pytest.mark.parametrize(("vllm", "tp", "per_rank"), [("0.20.0", 4, 384), ("0.22.1", 4, 384), ("0.22.0", 8, 192)])
def test_dsv4_mxfp4_padded_offset_refused(vllm, tp, per_rank):
    """384 and 192 per rank (padded to 512 / 256) under 0.20.0, 0.22.0 and 0.22.1: refused (shape_unaligned, aiter.yaml)."""
    r = _explain(**DSV4_DEP, engine_version=vllm, tp=tp)
    assert r.plan is None
    detail = only_refusal(r, AITER, "shape_unaligned", "aiter.yaml")
    assert "multiple of 256" in detail and str(per_rank) in detail, detail


@pytest.mark.parametrize(("vllm", "tp"), [("0.22.1", 2), ("0.22.1", 1), ("0.23.0", 4), ("0.23.0", 8)])
def test_dsv4_mxfp4_aligned_tp1_or_fixed_planned(vllm, tp):
    """768 per rank (a multiple of 256: no padding) and TP 1 (offset 0) under 0.22.1, and 384 / 192 per rank under 0.23.0
    (loaded_per_rank offsets): planned."""
    assert_planned(_explain(**DSV4_DEP, engine_version=vllm, tp=tp), AITER)


def test_dsv4_padded_offset_scoped_to_deepseek_v4():
    """Another architecture (MXFP4 silu_clamped under a made-up architecture name) at 384 per rank under 0.22.1: not
    refused by this fact."""
    model = {**DSV4, "architecture": "SomeOtherMoeForCausalLM"}
    r = _explain(**{**DSV4_DEP, "model": model}, engine_version="0.22.1", tp=4)
    assert "shape_unaligned" not in refusals(r, AITER), refusals(r, AITER)


# ------------------------------------------------ kind 3: SGLang DeepEP V2 -> DeepGEMM prefill scatter (0.5.19, 0.5.20)
# DeepSeek-R1 (block FP8) on 8 x B200 (sm100), DP attention: not the round's DeepSeek-V3 on H200.
DV2 = dict(gpu="B200", engine="sglang", model_config="examples/model_configs/deepseek-ai__DeepSeek-R1", tp=8, dp=8,
           ep=8, a2a="deepep_v2", runner="deep_gemm", decode_tokens_per_rank=64)   # below SGLang's own 512 (round 53)


@pytest.mark.parametrize(("sglang", "phase"), [("0.5.19", "both"), ("0.5.20", "both"), ("0.5.20", "prefill")])
def test_sglang_deepep_v2_prefill_scatter_refused(sglang, phase):
    """0.5.19 and 0.5.20 with a prefill phase (both, prefill): refused (a2a_unsupported, a2a/deepep_v2.yaml)."""
    r = _explain(**DV2, engine_version=sglang, phase=phase)
    assert r.plan is None
    detail = only_refusal(r, "deep_gemm", "a2a_unsupported", "a2a/deepep_v2.yaml")
    assert "0.5.21" in detail and "_fwd_kernel_ep_scatter_2" in detail, detail


@pytest.mark.parametrize(("sglang", "phase"), [("0.5.21", "both"), ("0.5.23", "prefill"), ("0.5.19", "decode")])
def test_sglang_deepep_v2_fixed_or_decode_planned(sglang, phase):
    """0.5.21 and 0.5.23 (the arguments passed) with prefill, and a 0.5.19 decode worker (expanded layout, no scatter):
    planned."""
    assert_planned(_explain(**DV2, engine_version=sglang, phase=phase), "deep_gemm")


# ------------------------------------------------ kind 4: vLLM gpt-oss W4A16 AITER gate mode (0.17.0 .. 0.23.x, AITER >= 0.1.14)
# gpt-oss-20b on one MI355X: not the round's gpt-oss-120b.
GPTOSS = dict(gpu="MI355X", engine="vllm", model_config="examples/model_configs/openai__gpt-oss-20b", tp=1, ep=1,
              a2a="none", runner=AITER)


@pytest.mark.parametrize(("vllm", "aiter"), [("0.17.0", "0.1.14"), ("0.20.0", "0.1.16"), ("0.23.0", "0.1.20.post1")])
def test_vllm_gptoss_aiter_gate_mode_refused(vllm, aiter):
    """0.17.0, 0.20.0 and 0.23.0 with AITER 0.1.14 .. 0.1.20.post1: refused (quant_unsupported, aiter.yaml)."""
    r = _explain(**GPTOSS, engine_version=vllm, packages={"amd-aiter": aiter})
    assert r.plan is None
    only_refusal(r, AITER, "quant_unsupported", "aiter.yaml")


@pytest.mark.parametrize(("vllm", "aiter"), [("0.24.0", "0.1.14"), ("0.26.0", "0.1.20.post1"), ("0.23.0", "0.1.13")])
def test_vllm_gptoss_aiter_gate_mode_passed_or_old_aiter_planned(vllm, aiter):
    """0.24.0 and 0.26.0 (GateMode.INTERLEAVE passed), and 0.23.0 with AITER 0.1.13 (before PR #3123): planned."""
    assert_planned(_explain(**GPTOSS, engine_version=vllm, packages={"amd-aiter": aiter}), AITER)


def test_vllm_gptoss_aiter_before_the_a16w4_shuffle_not_refused_by_the_fact():
    """0.16.0 (no a16w4 shuffle in the sdist) with AITER 0.1.14: the gate-mode fact does not refuse it."""
    r = _explain(**GPTOSS, engine_version="0.16.0", packages={"amd-aiter": "0.1.14"})
    assert "quant_unsupported" not in refusals(r, AITER), refusals(r, AITER)


# ------------------------------------------------ kind 5: vLLM NVFP4 Marlin MoE at an unaligned per-rank size (< 0.24.0)
# A 64-expert NVFP4 MoE with intermediate 1408 (704 per rank at TP 2 = 11 x 64; 352 at TP 4) on H200: not the round's
# Qwen3-30B-A3B on H100.
WIDE = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
        "routing": "renormalize"}
MARLIN = dict(gpu="H200", engine="vllm", quant="nvfp4", model=WIDE, ep=1, a2a="none", runner="marlin")


@pytest.mark.parametrize("vllm", ["0.13.0", "0.20.0", "0.23.0"])
def test_vllm_nvfp4_marlin_unaligned_refused_before_0_24_0(vllm):
    """352 per rank (TP 4) under 0.13.0, 0.20.0 and 0.23.0: refused (shape_unaligned, marlin.yaml)."""
    r = _explain(**MARLIN, engine_version=vllm, tp=4)
    assert r.plan is None
    detail = only_refusal(r, "marlin", "shape_unaligned", "marlin.yaml")
    assert "multiple of 64" in detail and "352" in detail, detail


@pytest.mark.parametrize(("vllm", "tp"), [("0.23.0", 2), ("0.24.0", 4), ("0.26.0", 4)])
def test_vllm_nvfp4_marlin_aligned_or_padded_planned(vllm, tp):
    """704 per rank (TP 2) under 0.23.0, and 352 per rank under 0.24.0 / 0.26.0 (padded to 384): planned."""
    assert_planned(_explain(**MARLIN, engine_version=vllm, tp=tp), "marlin")


def test_nvfp4_marlin_constraint_not_under_sglang():
    """SGLang's NVFP4 Marlin path is not vLLM's repack: 352 per rank under SGLang 0.5.19 is not refused by this fact."""
    r = _explain(**{**MARLIN, "engine": "sglang"}, engine_version="0.5.19", tp=4)
    assert "shape_unaligned" not in refusals(r, "marlin"), refusals(r, "marlin")


# ------------------------------------------------ kind 6: FlashInfer 0.6.5 TRT-LLM-gen autotuner tile vs launcher
# DeepSeek-R1 (block FP8, DeepSeek routing) on 8 x B200 under vLLM, and the routed runner under SGLang: not the round's
# NVFP4 DeepSeek-V3.1.
FI = dict(gpu="B200", model_config="examples/model_configs/deepseek-ai__DeepSeek-R1", tp=8, ep=1, a2a="none")


@pytest.mark.parametrize(("runner", "engine", "file"), [
    ("flashinfer_trtllm", "vllm", "flashinfer_trtllm.yaml"),
    ("flashinfer_trtllm_routed", "sglang", "flashinfer_trtllm_routed.yaml")])
def test_flashinfer_0_6_5_trtllm_moe_refused(runner, engine, file):
    """flashinfer-python 0.6.5: refused (dependency_missing) by the runner's own file."""
    r = _explain(**FI, engine=engine, runner=runner, packages={"flashinfer-python": "0.6.5"})
    assert r.plan is None
    detail = only_refusal(r, runner, "dependency_missing", file)
    assert "!=0.6.5" in detail, detail


@pytest.mark.parametrize("fi", ["0.6.6", "0.6.7"])
@pytest.mark.parametrize(("runner", "engine"), [("flashinfer_trtllm", "vllm"), ("flashinfer_trtllm_routed", "sglang")])
def test_flashinfer_around_0_6_5_trtllm_moe_planned(fi, runner, engine):
    """0.6.6 (the autotuner fix reverted) and 0.6.7 (launchers for every tile): planned."""
    assert_planned(_explain(**FI, engine=engine, runner=runner, packages={"flashinfer-python": fi}), runner)


def test_flashinfer_0_6_4_not_refused_by_the_fact():
    """0.6.4 (before #2617) is not refused by the 0.6.5 fact (other version facts may still decide it)."""
    r = _explain(**FI, engine="vllm", runner="flashinfer_trtllm", packages={"flashinfer-python": "0.6.4"})
    c = cand(r, "flashinfer_trtllm")
    assert not any("0.6.5" in x.detail for x in c.reasons), [(x.code, x.detail) for x in c.reasons]

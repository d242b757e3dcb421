"""Field round 18 of issue 21 (tests/cases/field_round_18.yaml), fixed as kinds (the FlashInfer cases): each kind a
round case missed, tested on other deployments of the same kind than the round's case, on both sides of each bound.

1. FlashInfer before 0.6.2: the TRT-LLM-gen DeepSeekV3 routing kernel takes -1 as its invalid score, so a correction
   bias that pushes sigmoid + bias below -1 (GLM's n_group-1 routing) picks padding slots and already-picked experts
   (flashinfer-ai/flashinfer#2485, fixed by #2313 in 0.6.2). A routing fact of flashinfer_trtllm.yaml.
2. FlashInfer 0.6.8: the per-tensor FP8 TRT-LLM-gen MoE is called with one argument fewer than its binding takes
   (flashinfer-ai/flashinfer#3094, fixed in 0.6.8.post1). A flashinfer-python !=0.6.8 need (fp8_tensor).
3. vLLM 0.14.0 / 0.14.1: NVFP4 on the TRT-LLM-gen MoE with DP > 1 and expert parallelism asserts in the post-quant DP
   all-gather (vllm-project/vllm#32349, first fixed in 0.15.0). A dp constraint of both TRT-LLM-gen files.
4. vLLM >= 0.17.0: FlashInfer CUTLASS MXFP4 x MXFP8 with dp > 1 over the naive all-gather or the FlashInfer NVLink
   all-to-alls gets row-major MXFP8 scales where the kernel reads swizzled ones: NaN (vllm-project/vllm#42118, fix
   #49335 open). A dp constraint of flashinfer_cutlass.yaml.
The round's BF16 case (flashinfer-ai/flashinfer#3427) stays xfail: see its note in the round file.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import only_refusal, refusals, unknown_codes

QWEN_NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
DSV3 = str(CONFIGS / "deepseek-ai__DeepSeek-V3")
GPT_OSS = str(CONFIGS / "openai__gpt-oss-120b")

TRTLLM = "flashinfer_trtllm"
ROUTED = "flashinfer_trtllm_routed"
CUTLASS = "flashinfer_cutlass"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _fi(version: str) -> dict[str, str]:
    return {"flashinfer-python": version}


# ------------------------------------------------- kind 1: DeepSeekV3 routing without groups, FlashInfer < 0.6.2
# GLM-4.5-Air's routed-expert shape (128 experts, top 8, hidden 4096, intermediate 1408, sigmoid + bias, n_group 1):
# another GLM than the round's GLM-4.7, block FP8 on one B200 (1408 is no multiple of 128 split over TP).
GLM_AIR = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1408, "activation": "silu",
           "routing": "deepseek_v3", "n_group": 1, "topk_group": 1, "num_shared_experts": 1}
GLM_FP8 = dict(gpu="B200", quant="fp8_block", model=GLM_AIR, tp=1, ep=1, a2a="none")


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.6.0"), ("sglang", "0.6.1"), ("vllm", "0.6.1")])
def test_ungrouped_deepseek_v3_routing_refused_before_0_6_2(engine, version):
    """GLM-4.5-Air-shaped block FP8 on flashinfer_trtllm with FlashInfer 0.6.0 / 0.6.1: refused (routing_unsupported,
    the kernel's -1 invalid score; flashinfer-ai/flashinfer#2313 is first in 0.6.2), under either engine."""
    r = _explain(**GLM_FP8, engine=engine, runner=TRTLLM, packages=_fi(version))
    assert r.plan is None
    assert "deepseek_v3" in only_refusal(r, TRTLLM, "routing_unsupported", "flashinfer_trtllm.yaml")


def test_ungrouped_deepseek_v3_routing_planned_from_0_6_2():
    """The same deployment with FlashInfer 0.6.2 (the -inf invalid score) is planned on flashinfer_trtllm."""
    r = _explain(**GLM_FP8, engine="sglang", runner=TRTLLM, packages=_fi("0.6.2"))
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


def test_grouped_deepseek_v3_routing_not_refused_at_0_6_1():
    """DeepSeek-V3 (n_group 8, 32 experts per group: no padding lane) at 0.6.1 is outside the n_group <= 1 scope."""
    r = _explain(gpu="B200", engine="sglang", model_config=DSV3, tp=8, ep=1, a2a="none", runner=TRTLLM,
                 packages=_fi("0.6.1"))
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


def test_ungrouped_routing_on_the_routed_runner_not_refused():
    """flashinfer_trtllm_routed takes the engine's top-k (no routing kernel): GLM-4.5-Air NVFP4 at 0.6.1 is planned
    there, and the auto choice at 0.6.1 avoids flashinfer_trtllm."""
    dep = dict(gpu="B200", engine="sglang", quant="nvfp4", model=GLM_AIR, tp=1, ep=1, a2a="none",
               packages=_fi("0.6.1"))
    r = _explain(**dep, runner=ROUTED)
    assert r.plan is not None and r.plan.runner == ROUTED, [(x.code, x.detail) for x in r.reasons]
    auto = _explain(**dep, runner="auto")
    assert auto.plan is not None and auto.plan.runner != TRTLLM
    assert "routing_unsupported" in refusals(auto, TRTLLM)


# ------------------------------------------------------- kind 2: FlashInfer 0.6.8's per-tensor FP8 call one short
# Mixtral-8x7B's shape with per-tensor FP8 experts and Renormalize routing (in the kernel from 0.6.7): not the round's
# Llama-4-Scout.
MIXTRAL = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu",
           "routing": "renormalize"}
MIX_FP8 = dict(gpu="B200", quant="fp8_tensor", model=MIXTRAL, tp=2, ep=1, a2a="none", runner=TRTLLM)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_fp8_tensor_trtllm_refused_at_0_6_8(engine):
    """Per-tensor FP8 Mixtral on flashinfer_trtllm with FlashInfer 0.6.8: refused (dependency_missing, !=0.6.8)."""
    r = _explain(**MIX_FP8, engine=engine, packages=_fi("0.6.8"))
    assert r.plan is None
    assert "flashinfer-python !=0.6.8; 0.6.8 is installed" in only_refusal(r, TRTLLM, "dependency_missing",
                                                                   "flashinfer_trtllm.yaml")


@pytest.mark.parametrize("version", ["0.6.7", "0.6.8.post1", "0.6.9"])
def test_fp8_tensor_trtllm_planned_around_0_6_8(version):
    """0.6.7 (no routing_replay_out yet), 0.6.8.post1 (#3094) and 0.6.9 plan the same deployment."""
    r = _explain(**MIX_FP8, engine="sglang", packages=_fi(version))
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


def test_other_formats_at_0_6_8_not_refused():
    """0.6.8's other trtllm_* calls pass routing_replay_out: block FP8 Mixtral at 0.6.8 is planned."""
    r = _explain(**{**MIX_FP8, "quant": "fp8_block"}, engine="sglang", packages=_fi("0.6.8"))
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


# --------------------------------------- kind 3: vLLM 0.14.x NVFP4 TRT-LLM-gen, DP > 1 with EP (post-quant all-gather)
def _nvfp4(version: str, *, dp: int | None, ep: int, tp: int, runner: str = TRTLLM) -> Any:
    dep: dict[str, Any] = dict(gpu="B200", engine="vllm", engine_version=version, model_config=QWEN_NVFP4, tp=tp,
                               ep=ep, a2a="none", runner=runner)
    if dp is not None:
        dep["dp"] = dp
    return _explain(**dep)


@pytest.mark.parametrize(("version", "dp"), [("0.14.0", 2), ("0.14.1", 8)])
def test_nvfp4_trtllm_dp_ep_refused_in_vllm_0_14(version, dp):
    """Qwen3-30B-A3B NVFP4 (ModelOpt) at DP x EP on flashinfer_trtllm, vLLM 0.14.0 and 0.14.1: refused
    (parallelism_unsupported: prepare_dp_allgather_tensor asserts the quant config FLASHINFER_TRTLLM leaves None)."""
    r = _nvfp4(version, dp=dp, ep=dp, tp=1)
    assert r.plan is None
    assert f"dp = {dp} is above 1" in only_refusal(r, TRTLLM, "parallelism_unsupported", "flashinfer_trtllm.yaml")


def test_nvfp4_trtllm_routed_dp_ep_refused_in_vllm_0_14():
    """0.14.x's routed NVFP4 kernel (the EPLB path) runs after the same all-gather: refused on the routed runner too."""
    r = _nvfp4("0.14.1", dp=2, ep=2, tp=1, runner=ROUTED)
    assert r.plan is None
    only_refusal(r, ROUTED, "parallelism_unsupported", "flashinfer_trtllm_routed.yaml")


@pytest.mark.parametrize(("version", "dp", "ep", "tp"), [("0.13.0", 2, 2, 1), ("0.15.0", 2, 2, 1),
                                                          ("0.14.1", 1, 4, 4), ("0.14.1", 2, 1, 1)])
def test_nvfp4_trtllm_planned_outside_the_bound(version, dp, ep, tp):
    """0.13.0 (no post-quant all-gather), 0.15.0 (#32349 reads a1_gscale), and at 0.14.1 EP without DP or DP without
    EP (post_quant_allgather needs both): planned."""
    r = _nvfp4(version, dp=dp, ep=ep, tp=tp)
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


def test_nvfp4_trtllm_dp_unstated_is_unverified_in_vllm_0_14():
    """Without dp the constraint cannot be checked: an unknown, not a refusal."""
    r = _nvfp4("0.14.1", dp=None, ep=2, tp=2)
    assert refusals(r, TRTLLM) == {}
    assert "parallelism_unsupported" in unknown_codes(r, TRTLLM)


# ---------------------------------------- kind 4: vLLM FlashInfer CUTLASS MXFP4 x MXFP8 with dp > 1 (unswizzled scales)
def _gpt_oss(version: str, *, dp: int, ep: int, tp: int = 1, a2a: str = "none", runner: str = CUTLASS,
             precision: str | None = "mxfp8", gpu: str = "B200") -> Any:
    dep: dict[str, Any] = dict(gpu=gpu, engine="vllm", engine_version=version, model_config=GPT_OSS, tp=tp, ep=ep,
                               dp=dp, a2a=a2a, runner=runner)
    if precision:
        dep["quant_config"] = {"activation_precision": precision}
    return _explain(**dep)


@pytest.mark.parametrize(("version", "dp", "ep", "a2a"), [("0.17.0", 4, 4, "none"), ("0.29.0", 2, 1, "none"),
                                                          ("0.28.0", 4, 4, "flashinfer"),
                                                          ("0.28.0", 4, 4, "flashinfer_two_sided")])
def test_mxfp8_cutlass_dp_refused_from_vllm_0_17(version, dp, ep, a2a):
    """gpt-oss-120b (not the round's 20b) with MXFP8 activations on flashinfer_cutlass at dp > 1, over the naive
    all-gather (with and without EP) and the FlashInfer NVLink all-to-alls: refused (parallelism_unsupported)."""
    r = _gpt_oss(version, dp=dp, ep=ep, a2a=a2a)
    assert r.plan is None
    assert "swizzles only NVFP4" in only_refusal(r, CUTLASS, "parallelism_unsupported", "flashinfer_cutlass.yaml")


@pytest.mark.parametrize(("version", "dp", "ep", "tp"), [("0.28.0", 1, 2, 2), ("0.16.0", 2, 2, 1)])
def test_mxfp8_cutlass_planned_outside_the_bound(version, dp, ep, tp):
    """dp 1 quantizes straight into the swizzled layout; 0.16.0 quantized inside apply after a bf16 gather: planned."""
    r = _gpt_oss(version, dp=dp, ep=ep, tp=tp)
    assert r.plan is not None and r.plan.runner == CUTLASS, [(x.code, x.detail) for x in r.reasons]


def test_mxfp8_on_trtllm_not_refused_by_the_cutlass_row():
    """The TRT-LLM-gen MXFP4 x MXFP8 kernel takes row-major scales (is_scale_swizzled False): planned at DP 2 x EP 2."""
    r = _gpt_oss("0.28.0", dp=2, ep=2, runner=TRTLLM)
    assert r.plan is not None and r.plan.runner == TRTLLM, [(x.code, x.detail) for x in r.reasons]


def test_bf16_activation_cutlass_not_refused_by_the_mxfp8_row():
    """W4A16 MXFP4 on Hopper (bf16 activations, no scales to swizzle) at DP 2 x EP 2: planned."""
    r = _gpt_oss("0.28.0", dp=2, ep=2, precision=None, gpu="H200")
    assert r.plan is not None and r.plan.runner == CUTLASS, [(x.code, x.detail) for x in r.reasons]

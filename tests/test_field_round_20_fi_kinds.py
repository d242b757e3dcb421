"""Field round 20 of issue 21 (tests/cases/field_round_20.yaml), fixed as kinds (the FlashInfer TRT-LLM-gen cases):
each kind a round case missed, tested on other deployments of the same kind than the round's case, on both sides of
each bound.

1. SGLang's flashinfer_trtllm_routed runner takes softmax scoring without a correction bias to
   fused_topk_softmax_torch_raw_logits, which applies softmax only under renormalize: a softmax_topk model (no
   renormalisation) hands the raw router logits to the kernel as its top-k weights (sgl-project/sglang#35160, an open
   PR; every release from 0.5.10rc0, the first with the routed runner, to 0.5.23 reads so). A negative routing fact of
   flashinfer_trtllm_routed.yaml, every format, SGLang only.
2. SGLang's MiMo-V2 MoE names no routing method; with flashinfer_trtllm the NVFP4 path sends the kernel
   RoutingMethodType.Default (softmax, no bias) for MiMo-V2's sigmoid + bias routing from 0.5.10, and 0.5.7 ..
   0.5.10rc0 assert on the missing method (sgl-project/sglang#27916; 0.5.23 passes DeepSeekV3). A negative routing
   fact of flashinfer_trtllm.yaml scoped to the MiMo-V2 model classes, NVFP4, SGLang >=0.5.7,<0.5.23.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, only_refusal, refusals, unknown_codes

TRTLLM = "flashinfer_trtllm"
ROUTED = "flashinfer_trtllm_routed"
FI = {"flashinfer-python": "0.6.18"}  # past every FlashInfer-side bound of both files (bf16 launcher, #3875)


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


_planned = assert_planned


# ------------------------------------------------ kind 1: raw router logits as top-k weights on the routed runner
# Qwen1.5-MoE-A2.7B's routed-expert shape (60 experts, top 4, norm_topk_prob false: softmax_topk), not the round's
# OLMoE (64 experts, top 8, bf16 at 0.5.23).
QWEN15 = {"num_experts": 60, "top_k": 4, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
          "routing": "softmax_topk"}
RT = dict(gpu="B200", engine="sglang", model=QWEN15, tp=1, ep=1, a2a="none", runner=ROUTED, packages=FI)


@pytest.mark.parametrize("quant", ["bf16", "nvfp4", "fp8_block", "mxfp8"])
@pytest.mark.parametrize("sglang", ["0.5.10rc0", "0.5.10", "0.5.17", "0.5.23"])
def test_softmax_without_renormalize_refused_on_the_routed_runner(quant, sglang):
    """Every format of the routed runner (the top-k is computed before the quant method), from 0.5.10rc0 to 0.5.23
    (the fix is open: no upper bound): refused (routing_unsupported) by the routed file's negative fact."""
    r = _explain(**RT, quant=quant, engine_version=sglang)
    assert r.plan is None
    detail = only_refusal(r, ROUTED, "routing_unsupported", "flashinfer_trtllm_routed.yaml")
    assert "softmax_topk" in detail and "sglang >=0.5.10rc0" in detail, detail


def test_softmax_without_renormalize_refused_at_tp_4():
    """The same layer at TP 4 (a parallelism the fact does not read): refused alike."""
    r = _explain(**{**RT, "tp": 4}, quant="nvfp4", engine_version="0.5.20")
    assert r.plan is None
    only_refusal(r, ROUTED, "routing_unsupported", "flashinfer_trtllm_routed.yaml")


@pytest.mark.parametrize("quant", ["bf16", "nvfp4"])
def test_renormalized_softmax_planned_on_the_routed_runner(quant):
    """The other side of the renormalize flag: the same shape with renormalize (softmax over the k raw logits is the
    renormalised probabilities) at 0.5.23 is planned on the routed runner."""
    _planned(_explain(**{**RT, "model": {**QWEN15, "routing": "renormalize"}}, quant=quant, engine_version="0.5.23"),
             ROUTED)


def test_vllm_routed_softmax_not_refused():
    """vLLM computes the top-k weights its own way: the SGLang fact does not refuse softmax_topk there."""
    r = _explain(**{**RT, "engine": "vllm"}, quant="nvfp4", engine_version="0.33.0")
    _planned(r, ROUTED)
    assert "routing_unsupported" not in refusals(r, ROUTED)


def test_monolithic_runner_not_refused_by_the_routed_fact():
    """flashinfer_trtllm (the kernel routes with Default: softmax, top-k) is another runner: planned for the same
    NVFP4 layer at 0.5.23, and auto does not plan the routed runner."""
    dep = {**RT, "quant": "nvfp4", "engine_version": "0.5.23"}
    _planned(_explain(**{**dep, "runner": TRTLLM}), TRTLLM)
    auto = _explain(**{**dep, "runner": "auto"})
    assert auto.plan is not None and auto.plan.runner != ROUTED


# ----------------------------------------------- kind 2: MiMo-V2 under SGLang's flashinfer_trtllm NVFP4, no method
# MiMo-V2's routed-expert shape (256 experts, top 8, sigmoid + bias, one group) under the generic MiMo-V2 class
# (MiMoV2ForCausalLM: MiMo-V2.5), at TP 8 / EP 8: not the round's MiMoV2FlashForCausalLM at TP 4 with 0.5.17.
MIMO = {"num_experts": 256, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 1, "topk_group": 1, "architecture": "MiMoV2ForCausalLM"}
MI = dict(gpu="B200", engine="sglang", quant="nvfp4", model=MIMO, tp=8, ep=8, a2a="none", runner=TRTLLM, packages=FI)


@pytest.mark.parametrize("sglang", ["0.5.7", "0.5.9", "0.5.10", "0.5.15.post1", "0.5.22"])
def test_mimo_v2_nvfp4_refused_before_0_5_23(sglang):
    """0.5.7 .. 0.5.10rc0 (FlashInferFP4MoE asserts the method) and 0.5.10 .. 0.5.22 (Default routing): refused
    (routing_unsupported), the fact naming its SGLang bounds."""
    r = _explain(**MI, engine_version=sglang)
    assert r.plan is None
    detail = only_refusal(r, TRTLLM, "routing_unsupported", "flashinfer_trtllm.yaml")
    assert "deepseek_v3" in detail and "sglang >=0.5.7,<0.5.23" in detail, detail


def test_mimo_v2_flash_class_refused_at_tp_1():
    """The MiMo-V2-Flash class at TP 1, EP 1 under 0.5.19: refused alike."""
    r = _explain(**{**MI, "tp": 1, "ep": 1, "model": {**MIMO, "architecture": "MiMoV2FlashForCausalLM"}},
                 engine_version="0.5.19")
    assert r.plan is None
    only_refusal(r, TRTLLM, "routing_unsupported", "flashinfer_trtllm.yaml")


def test_mimo_v2_nvfp4_planned_from_0_5_23():
    """0.5.23 passes DeepSeekV3 for MiMo-V2's biased gate: planned."""
    _planned(_explain(**MI, engine_version="0.5.23"), TRTLLM)


def test_other_model_classes_and_formats_not_refused():
    """DeepSeek-V3's class with the same routing at 0.5.17 names DeepSeekV3 (planned); MiMo-V2 block FP8 at 0.5.17
    defaults to DeepSeekV3 in Fp8MoEMethod (planned); the routed runner computes MiMo-V2's top-k in SGLang
    (planned)."""
    _planned(_explain(**{**MI, "model": {**MIMO, "architecture": "DeepseekV3ForCausalLM"}}, engine_version="0.5.17"),
             TRTLLM)
    _planned(_explain(**{**MI, "quant": "fp8_block"}, engine_version="0.5.17"), TRTLLM)
    _planned(_explain(**{**MI, "runner": ROUTED}, engine_version="0.5.17"), ROUTED)


def test_vllm_mimo_v2_not_refused():
    """vLLM maps the routing from the config, not from SGLang's model class: not refused by the SGLang fact."""
    r = _explain(**{**MI, "engine": "vllm"}, engine_version="0.33.0")
    assert "routing_unsupported" not in refusals(r, TRTLLM)


def test_inline_model_without_architecture_is_unverified():
    """An inline MiMo-V2-shaped model that does not state its architecture: not refused, the routing an unknown
    naming the architecture the fact refuses at (settled by stating model.architecture)."""
    model = {k: v for k, v in MIMO.items() if k != "architecture"}
    r = _explain(**{**MI, "model": model}, engine_version="0.5.17")
    _planned(r, TRTLLM)
    assert "routing_unsupported" not in refusals(r, TRTLLM)
    assert "routing_unsupported" in unknown_codes(r, TRTLLM)
    u = next(x for x in r.plan.unknowns if x.code == "routing_unsupported")
    assert "MiMoV2" in u.detail and "architecture" in u.settle, (u.detail, u.settle)


def test_auto_avoids_flashinfer_trtllm_for_mimo_v2():
    """auto at 0.5.17 plans another runner and names the refusal of flashinfer_trtllm."""
    r = _explain(**{**MI, "runner": "auto"}, engine_version="0.5.17")
    assert r.plan is not None and r.plan.runner != TRTLLM
    assert "routing_unsupported" in refusals(r, TRTLLM)


@pytest.mark.parametrize(("sglang", "refused"), [("0.5.8", True), ("0.5.9", True), ("0.5.10rc0", False), ("0.5.19", False)])
def test_sglang_ships_the_routed_runner_from_0_5_10rc0(sglang, refused):
    """Found while fixing sglang#35160: the 0.5.9 wheel has no flashinfer_trtllm_routed (server_args'
    MOE_RUNNER_BACKEND_CHOICES gains it in 0.5.10rc0), so an older SGLang is refused naming the bound; vLLM is not
    bounded by it."""
    dep = {**RT, "model": {**QWEN15, "routing": "renormalize"}, "quant": "nvfp4", "engine_version": sglang}
    r = _explain(**dep)
    if refused:
        assert r.plan is None
        assert "needs sglang >=0.5.10rc0" in only_refusal(r, ROUTED, "dependency_missing", "flashinfer_trtllm_routed.yaml")
    else:
        _planned(r, ROUTED)
    _planned(_explain(**{**dep, "engine": "vllm", "engine_version": None}), ROUTED)

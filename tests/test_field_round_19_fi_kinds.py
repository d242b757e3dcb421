"""Field round 19 of issue 21 (tests/cases/field_round_19.yaml), fixed as kinds (the FlashInfer TRT-LLM-gen cases):
each kind a round case missed, tested on other deployments of the same kind than the round's case, on both sides of
each bound.

1. FlashInfer >= 0.6.5 returns a list from trtllm_mxint4_block_scale_moe (#2548) and vLLM before 0.20.0 calls
   .to(x.dtype) on it (vllm-project/vllm#39315, first in the 0.20.0 sdist); SGLang 0.5.9 hands it on as the hidden
   states (0.5.10rc0 returns its own buffer). flashinfer-python <0.6.5 needs of flashinfer_trtllm.yaml (int4_w4a16).
2. SGLang's FP8 flashinfer_trtllm path drops a swiglu_limit clamp (silu_clamped) before 0.5.20
   (sgl-project/sglang#39920); the kernel takes the clamp for MXFP8 from FlashInfer 0.6.13 and for DeepSeek block FP8
   from 0.6.18rc2 (#4405). silu_clamped activations rows (SGLang, fp8_block / mxfp8) of both TRT-LLM-gen files.
3. FlashInfer 0.6.8rc1 .. 0.6.17 recover the no-group DeepSeekV3 routing weights as (sigmoid + bias) - bias, zero for
   GLM-5.2's biases (flashinfer-ai/flashinfer#3875, first in 0.6.18rc1). A routing fact of flashinfer_trtllm.yaml
   (the routed entry points take the engine's weights).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import only_refusal, refusals, unknown_codes

TRTLLM = "flashinfer_trtllm"
ROUTED = "flashinfer_trtllm_routed"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _fi(version: str) -> dict[str, str]:
    return {"flashinfer-python": version}


def _planned(r: Any, runner: str) -> None:
    assert r.plan is not None and r.plan.runner == runner, [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------ kind 1: the MXINT4 call's list return (FlashInfer >= 0.6.5)
# DeepSeek-V3's routed-expert shape with grouped routing (n_group 8: outside kind 3) as group-32 INT4 W4A16: not the
# round's Kimi-K2-Thinking (384 experts, n_group 1).
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 8, "topk_group": 4, "num_shared_experts": 1}
INT4 = dict(gpu="B200", quant="int4_w4a16", quant_config={"group_size": 32}, model=DSV3, tp=8, ep=1, a2a="none",
            runner=TRTLLM)


@pytest.mark.parametrize(("vllm", "fi"), [("0.18.0", "0.6.6"), ("0.19.1", "0.6.6"), ("0.19.1", "0.6.5")])
def test_vllm_mxint4_refused_with_the_list_return(vllm, fi):
    """vLLM 0.18.0 and 0.19.1 (pinning 0.6.6) with FlashInfer 0.6.5 / 0.6.6: refused (dependency_missing, the
    flashinfer-python <0.6.5 need that holds with vllm <0.20.0)."""
    r = _explain(**INT4, engine="vllm", engine_version=vllm, packages=_fi(fi))
    assert r.plan is None
    detail = only_refusal(r, TRTLLM, "dependency_missing", "flashinfer_trtllm.yaml")
    assert "flashinfer-python <0.6.5 with vllm <0.20.0" in detail and f"{fi} is installed" in detail, detail


@pytest.mark.parametrize(("vllm", "fi"), [("0.17.0", "0.6.4"), ("0.19.1", "0.6.4"), ("0.20.0", "0.6.8.post1"),
                                          ("0.20.0", "0.6.6")])
def test_vllm_mxint4_planned_around_the_bounds(vllm, fi):
    """0.17.0 with its pinned 0.6.4 (a tensor return), 0.19.1 with 0.6.4, and 0.20.0 (#39315 takes out[0]) with its
    0.6.8.post1 or with 0.6.6: planned on flashinfer_trtllm."""
    _planned(_explain(**INT4, engine="vllm", engine_version=vllm, packages=_fi(fi)), TRTLLM)


def test_vllm_other_formats_not_refused_by_the_mxint4_need():
    """Block FP8 under vLLM 0.19.0 with FlashInfer 0.6.6 calls another entry point: planned."""
    dep = {**INT4, "quant": "fp8_block", "quant_config": {}}
    _planned(_explain(**dep, engine="vllm", engine_version="0.19.0", packages=_fi("0.6.6")), TRTLLM)


@pytest.mark.parametrize(("sglang", "fi", "refused"), [("0.5.9", "0.6.5", True), ("0.5.9", "0.6.3", False),
                                                        ("0.5.10rc0", "0.6.6", False)])
def test_sglang_0_5_9_mxint4_list_return(sglang, fi, refused):
    """SGLang 0.5.9 (pins 0.6.3) passes the call's result on as the hidden states: refused with FlashInfer 0.6.5;
    planned with its own 0.6.3, and 0.5.10rc0 (returns its preallocated output) with its 0.6.6."""
    r = _explain(**INT4, engine="sglang", engine_version=sglang, packages=_fi(fi))
    if refused:
        assert r.plan is None
        assert "with sglang >=0.5.9,<0.5.10rc0" in only_refusal(r, TRTLLM, "dependency_missing", "flashinfer_trtllm.yaml")
    else:
        _planned(r, TRTLLM)


# --------------------------------------------- kind 2: SGLang's FP8 TRT-LLM-gen path and a swiglu_limit clamp
# A DeepSeek-V3-shaped layer with a SwiGLU clamp of 10 and grouped routing (not the round's GLM-5.3-Flash: 288
# experts, n_group 1).
CLAMPED = {**DSV3, "activation": "silu_clamped", "swiglu_limit": 10.0}
CL = dict(gpu="B200", engine="sglang", model=CLAMPED, tp=8, ep=1, a2a="none")


@pytest.mark.parametrize(("quant", "sglang", "fi", "text"), [
    ("fp8_block", "0.5.18", "0.6.17", "(with sglang >=0.5.12,<0.5.20)"),      # reads gemm1_clamp_limit only
    ("fp8_block", "0.5.19", "0.6.18", "(with sglang >=0.5.12,<0.5.20)"),      # the kernel takes it, SGLang drops it
    ("fp8_block", "0.5.20", "0.6.18rc1", "flashinfer-python >=0.6.13,<0.6.18rc2"),  # FlashInfer raises for DeepSeekFp8
    ("fp8_block", "0.5.20", "0.6.13", "flashinfer-python >=0.6.13,<0.6.18rc2"),
    ("mxfp8", "0.5.19", "0.6.18", "silu_clamped only when"),
    ("mxfp8", "0.5.20", "0.6.12", "silu_clamped only when"),          # trtllm_fp8_block_scale_moe has no gemm1_* yet
])
def test_sglang_fp8_clamp_refused(quant, sglang, fi, text):
    """silu_clamped on flashinfer_trtllm under SGLang before 0.5.20 (#39920), or with a FlashInfer whose FP8
    block-scale kernel does not take the clamp for the format: refused (activation_unsupported). Block FP8 by negative
    facts (every checkpoint method drops or fails it there), MXFP8 by its positive row's version gate."""
    r = _explain(**CL, quant=quant, engine_version=sglang, packages=_fi(fi), runner=TRTLLM)
    assert r.plan is None
    assert text in only_refusal(r, TRTLLM, "activation_unsupported", "flashinfer_trtllm.yaml")


@pytest.mark.parametrize(("quant", "fi"), [("mxfp8", "0.6.13"), ("mxfp8", "0.6.17")])
def test_sglang_fp8_clamp_planned_from_0_5_20(quant, fi):
    """SGLang 0.5.20 (swiglu_limit falls back into gemm1_clamp_limit) with a FlashInfer that takes it: MXFP8 planned,
    the activation decided (no activation unknown)."""
    r = _explain(**CL, quant=quant, engine_version="0.5.20", packages=_fi(fi), runner=TRTLLM)
    _planned(r, TRTLLM)
    assert "activation_unsupported" not in unknown_codes(r, TRTLLM)


@pytest.mark.parametrize("fi", ["0.6.18rc2", "0.6.18"])
def test_sglang_block_fp8_clamp_unverified_from_0_5_20(fi):
    """Block FP8 from SGLang 0.5.20 with a FlashInfer that takes the clamp: Fp8Config checkpoints pass it, the
    compressed-tensors scheme (CompressedTensorsW8A8Fp8MoE.apply_weights) passes no gemm1_*, and the deployment states
    no checkpoint method: planned as unverified, the clamp an activation unknown, not a support."""
    r = _explain(**CL, quant="fp8_block", engine_version="0.5.20", packages=_fi(fi), runner=TRTLLM)
    _planned(r, TRTLLM)
    assert r.evidence == "unverified" and "activation_unsupported" in unknown_codes(r, TRTLLM)


@pytest.mark.parametrize(("sglang", "refused"), [("0.5.19", True), ("0.5.20", False)])
def test_sglang_fp8_clamp_on_the_routed_runner(sglang, refused):
    """flashinfer_trtllm_routed runs the same quant infos: refused at 0.5.19, planned (unverified: the checkpoint
    method decides) at 0.5.20."""
    r = _explain(**CL, quant="fp8_block", engine_version=sglang, packages=_fi("0.6.18"), runner=ROUTED)
    if refused:
        assert r.plan is None
        only_refusal(r, ROUTED, "activation_unsupported", "flashinfer_trtllm_routed.yaml")
    else:
        _planned(r, ROUTED)
        assert r.evidence == "unverified" and "activation_unsupported" in unknown_codes(r, ROUTED)


def test_unclamped_silu_not_refused_at_0_5_19():
    """The same layer without a clamp (plain silu) at SGLang 0.5.19 is planned: the rows read silu_clamped only."""
    model = {**DSV3}
    _planned(_explain(**{**CL, "model": model}, quant="fp8_block", engine_version="0.5.19", packages=_fi("0.6.18"),
                      runner=TRTLLM), TRTLLM)


def test_vllm_clamp_not_decided_by_the_sglang_rows():
    """The rows are SGLang's: vLLM's block FP8 with the same clamp is decided by vLLM's own rows, not by them.

    This pinned silu_clamped as an unknown under vLLM (no vLLM fact either way then). The 2026-12-05 release delta
    (docs/release_delta_2026-12-05/vllm_A.md F8) read vLLM's own check: TrtLlmFp8ExpertsBase.is_supported_config
    takes the clamp parameters for MXFP8 only in 0.29.0 ('... only for MXFP8 weights') and for MXFP8 and 128-block
    FP8 from 0.30.0 (vllm-0.30.0 vllm/model_executor/layers/fused_moe/experts/trtllm_fp8_moe.py:
    TrtLlmFp8ExpertsBase.is_supported_config, (kFp8Static128BlockSym, kFp8Dynamic128Sym) with SILU). So at vLLM 0.33.0
    with FlashInfer 0.6.18 the clamp is supported (a vLLM row), and at 0.29.0 refused by a vLLM row."""
    r = _explain(**{**CL, "engine": "vllm"}, engine_version="0.33.0", quant="fp8_block", packages=_fi("0.6.18"),
                 runner=TRTLLM)
    assert "activation_unsupported" not in refusals(r, TRTLLM)
    assert "activation_unsupported" not in unknown_codes(r, TRTLLM)
    _planned(r, TRTLLM)
    r = _explain(**{**CL, "engine": "vllm"}, engine_version="0.29.0", quant="fp8_block", packages=_fi("0.6.18"),
                 runner=TRTLLM)
    where = refusals(r, TRTLLM)["activation_unsupported"]
    path, line = where.rsplit(":", 1)
    fact = (Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8").splitlines()[int(line) - 1:]
    assert "engine: [vllm]" in "\n".join(fact[:4]), (where, fact[:4])


# ----------------------------------------- kind 3: no-group DeepSeekV3 routing weights, FlashInfer 0.6.8rc1 .. 0.6.17
# Kimi-K2's shape (384 experts, n_group 1) and GLM-4.5-Air's (128 experts, n_group 1): not the round's GLM-5.2.
KIMI = {"num_experts": 384, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 1, "topk_group": 1, "num_shared_experts": 1}
AIR = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1408, "activation": "silu",
       "routing": "deepseek_v3", "n_group": 1, "topk_group": 1, "num_shared_experts": 1}


@pytest.mark.parametrize("fi", ["0.6.8rc1", "0.6.8.post1", "0.6.12", "0.6.17"])
def test_ungrouped_sigmoid_routing_refused_on_0_6_8_to_0_6_17(fi):
    """GLM-4.5-Air-shaped block FP8 on flashinfer_trtllm (SGLang, one B200): refused (routing_unsupported) on every
    release from 0.6.8rc1 to 0.6.17."""
    r = _explain(gpu="B200", engine="sglang", quant="fp8_block", model=AIR, tp=1, ep=1, a2a="none", runner=TRTLLM,
                 packages=_fi(fi))
    assert r.plan is None
    assert ">=0.6.8rc1,<0.6.18rc1" in only_refusal(r, TRTLLM, "routing_unsupported", "flashinfer_trtllm.yaml")


@pytest.mark.parametrize("fi", ["0.6.7", "0.6.18rc1", "0.6.18"])
def test_ungrouped_sigmoid_routing_planned_outside(fi):
    """0.6.7 (the DeepSeek kernel keeps the unbiased sigmoid) and 0.6.18rc1 / 0.6.18 (#3875): planned."""
    _planned(_explain(gpu="B200", engine="sglang", quant="fp8_block", model=AIR, tp=1, ep=1, a2a="none", runner=TRTLLM,
                      packages=_fi(fi)), TRTLLM)


@pytest.mark.parametrize(("quant", "fi"), [("nvfp4", "0.6.14"), ("mxfp8", "0.6.14"), ("fp8_tensor", "0.6.12"),
                                           ("int4_w4a16", "0.6.14")])
def test_every_format_routes_through_the_same_kernel(quant, fi):
    """Kimi-K2-shaped layers under vLLM at TP 8, NVFP4, MXFP8, per-tensor FP8 and MXINT4 (each launcher runs
    Routing::Runner): refused by the same routing fact."""
    extra = {"quant_config": {"group_size": 32}} if quant == "int4_w4a16" else {}
    r = _explain(gpu="B200", engine="vllm", quant=quant, model=KIMI, tp=8, ep=1, a2a="none", runner=TRTLLM,
                 packages=_fi(fi), **extra)
    assert r.plan is None
    only_refusal(r, TRTLLM, "routing_unsupported", "flashinfer_trtllm.yaml")


def test_grouped_routing_and_the_routed_runner_not_refused():
    """DeepSeek-V3's grouped routing (n_group 8) at 0.6.14 is outside the fact; the routed runner takes the engine's
    top-k and weights (GLM-4.5-Air NVFP4 at 0.6.14 planned there), and auto at 0.6.14 avoids flashinfer_trtllm."""
    _planned(_explain(gpu="B200", engine="sglang", quant="nvfp4", model=DSV3, tp=8, ep=1, a2a="none", runner=TRTLLM,
                      packages=_fi("0.6.14")), TRTLLM)
    dep = dict(gpu="B200", engine="sglang", quant="nvfp4", model=AIR, tp=1, ep=1, a2a="none", packages=_fi("0.6.14"))
    _planned(_explain(**dep, runner=ROUTED), ROUTED)
    auto = _explain(**dep, runner="auto")
    assert auto.plan is not None and auto.plan.runner != TRTLLM
    assert "routing_unsupported" in refusals(auto, TRTLLM)

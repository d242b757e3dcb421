"""Issue 21, version gates: engine-scoped routing facts, each with a deployment it plans and one it refuses, citing
the public source of the fact (released wheels read at the named function). Planning only (no GPU):
moe_select.explain on declared machines.

- AITER with llama4's routing weight on the expert input runs in SGLang too (sgl-project/sglang#6274): top-1, every
  non-MXFP4 format on standard dispatch from 0.5.11 (moe_runner/aiter.py), bf16/fp16 from 0.4.6.post5; before 0.5.11
  the FP8 path puts the weight on the output; the DeepEP/MoRI pre-permute (from 0.5.13) ignores it; vLLM asserts for
  block FP8 (backends/aiter.yaml).
- MiniMax-M2's routing (sigmoid_topk) on plain flashinfer_trtllm per engine: vLLM maps it to MiniMax2 (FP8, MXFP8,
  NVFP4 from 0.21.0, BF16 from 0.32.0); SGLang through 0.5.22 sends NVFP4 the Default routing and block FP8 a
  group-less DeepSeekV3 that FlashInfer's block-scale launcher rejects; 0.5.23 keeps the top-k in SGLang
  (_can_bypass_trtllm_routing) (backends/flashinfer_trtllm.yaml).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select
from conftest import CONFIGS
from report_helpers import cand, planned, unknown_codes

# Llama-4-Scout's MoE (16 experts, top-1, hidden 5120, 8192 wide, one shared expert), inline; and its FP8-dynamic
# checkpoint config (compressed-tensors per-channel FP8: fp8_channel, architecture Llama4ForConditionalGeneration).
LLAMA4 = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192, "activation": "silu",
          "routing": "llama4", "num_shared_experts": 1}
LLAMA4_FP8 = str(CONFIGS / "llm-compressor__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
# MiniMax-M2's MoE (examples/model_configs/MiniMaxAI__MiniMax-M2: 256 experts, top 8, hidden 3072, 1536 wide, sigmoid
# scoring with a correction bias and no groups), inline with its model class so a format can be chosen; the checkpoint
# config itself is block FP8.
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "sigmoid_topk", "architecture": "MiniMaxM2ForCausalLM"}
MINIMAX_FP8 = str(CONFIGS / "MiniMaxAI__MiniMax-M2")
BASE = {"tp": 1, "ep": 1, "a2a": "none"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _fact_at(path: str, when: str) -> str:
    """``path:line`` of the fact whose ``when:`` line is ``when`` (its ``- values`` line two lines above), the form a
    reason's source takes; fails when the file has not exactly one such fact."""
    lines = (Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8").splitlines()
    hits = [i for i, line in enumerate(lines) if line.strip() == when]
    assert len(hits) == 1, (path, when, hits)
    assert lines[hits[0] - 2].lstrip().startswith("- values:"), lines[hits[0] - 2]
    return f"{path}:{hits[0] - 1}"


MINIMAX_NVFP4_ROW = _fact_at("backends/flashinfer_trtllm.yaml",
                             "when: {engine: [sglang], quant: [nvfp4], architecture: [MiniMaxM2ForCausalLM]}")
MINIMAX_FP8_ROW = _fact_at("backends/flashinfer_trtllm.yaml",
                           "when: {engine: [sglang], quant: [fp8_block, mxfp8], architecture: [MiniMaxM2ForCausalLM]}")


def _routing_refusal(report: Any, runner: str) -> Any:
    """The routing_unsupported reason of ``runner`` (StopIteration when there is none)."""
    return next(r for r in cand(report, runner).reasons if r.code == "routing_unsupported")


def _no_routing_doubt(report: Any, runner: str) -> bool:
    """Neither a routing refusal nor an undecided routing for ``runner``."""
    c = cand(report, runner)
    return not any(r.code == "routing_unsupported" for r in c.reasons) and "routing_unsupported" not in unknown_codes(
        report, runner)


# ------------------------------------------------------------------ AITER: llama4's weight on the input, SGLang
@pytest.mark.parametrize("version", ["0.5.11", "0.5.19", "0.5.23"])
def test_sglang_aiter_applies_llama4_weight_on_input_for_block_fp8(version):
    """sgl-project/sglang@v0.5.11 .. v0.5.23 moe_runner/aiter.py (fused_experts_none_to_aiter, later
    pre_permute_standard_to_aiter): top-1 weights pre-scale the input, whatever the format, block FP8 included."""
    r = _explain(gpu="MI300X", engine="sglang", engine_version=version, quant="fp8_block", model=LLAMA4, tp=8,
                 runner="aiter")
    assert planned(r, "aiter") and _no_routing_doubt(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.10.post1"])
def test_sglang_aiter_fp8_before_0_5_11_puts_the_weight_on_the_output(version):
    """sgl-project/sglang@v0.5.10.post1 (and v0.4.6.post5) fp8.py Fp8MoEMethod.maybe_apply_hip_fused_experts never reads
    apply_router_weight_on_input: Llama-4-Scout FP8-dynamic (per-channel) is refused there, wrong output otherwise."""
    r = _explain(gpu="MI300X", engine="sglang", engine_version=version, model_config=LLAMA4_FP8, tp=8, runner="aiter")
    assert r.plan is None
    reason = _routing_refusal(r, "aiter")
    assert reason.source.startswith("backends/aiter.yaml:") and "sglang >=0.4.6.post4,<0.5.11" in reason.detail
    # The same checkpoint from 0.5.11, and the unquantized experts at 0.5.10.post1 (pre-scaled since 0.4.6.post5).
    assert planned(_explain(gpu="MI300X", engine="sglang", engine_version="0.5.11", model_config=LLAMA4_FP8, tp=8,
                            runner="aiter"), "aiter")
    bf16 = _explain(gpu="MI300X", engine="sglang", engine_version=version, quant="bf16", model=LLAMA4, tp=8,
                    runner="aiter")
    assert planned(bf16, "aiter") and _no_routing_doubt(bf16, "aiter")


def test_sglang_aiter_weight_on_input_asserts_top_1():
    """"apply_router_weight_on_input requires topk=1" (sgl-project/sglang@v0.5.23 moe_runner/aiter.py) and "Only support
    topk=1 when `apply_router_weight_on_input` is True" (v0.5.10.post1 unquant.py): a top-2 llama4 routing is refused."""
    for version, quant in (("0.5.23", "fp8_block"), ("0.5.10.post1", "bf16")):
        r = _explain(gpu="MI300X", engine="sglang", engine_version=version, quant=quant, model={**LLAMA4, "top_k": 2},
                     tp=8, runner="aiter")
        assert r.plan is None, version
        assert _routing_refusal(r, "aiter").source.startswith("backends/aiter.yaml:")


def test_sglang_aiter_over_mori_ignores_the_weight_on_input():
    """sgl-project/sglang@v0.5.23 moe_runner/aiter.py _pre_permute_deepep_to_aiter (from 0.5.13): no
    apply_router_weight_on_input, the expert output is weighted. Refused over MoRI at 0.5.13 and 0.5.23; at 0.5.12
    (no such pre-permute) no fact decides it; the same deployment without an all-to-all is planned."""
    dep = dict(gpu="MI300X", engine="sglang", quant="bf16", model=LLAMA4, tp=8, ep=8, a2a="mori", runner="aiter")
    for version in ("0.5.13", "0.5.23"):
        reason = _routing_refusal(_explain(**dep, engine_version=version), "aiter")
        assert reason.source.startswith("backends/aiter.yaml:") and "sglang >=0.5.13" in reason.detail
    old = _explain(**dep, engine_version="0.5.12")
    assert not any(x.code == "routing_unsupported" for x in cand(old, "aiter").reasons)
    assert "routing_unsupported" in unknown_codes(old, "aiter")
    assert planned(_explain(**{**dep, "a2a": "none", "ep": 1}, engine_version="0.5.13"), "aiter")


def test_vllm_aiter_refuses_weight_on_input_for_block_fp8():
    """vllm-project/vllm@v0.33.0 experts/rocm_aiter_moe.py rocm_aiter_fused_experts: "apply_router_weight_on_input is not
    supported for block scaled moe" (also in v0.16.0 rocm_aiter_fused_moe.py); per-channel FP8 (asm_moe_tkw1) runs."""
    refused = _explain(gpu="MI300X", engine="vllm", quant="fp8_block", model=LLAMA4, tp=8, runner="aiter")
    assert refused.plan is None and _routing_refusal(refused, "aiter").source.startswith("backends/aiter.yaml:")
    ok = _explain(gpu="MI300X", engine="vllm", model_config=LLAMA4_FP8, tp=8, runner="aiter")
    assert planned(ok, "aiter") and ok.plan.quant == "fp8_channel"


# ------------------------------------------------------------------ flashinfer_trtllm: MiniMax-M2 routing per engine
def test_vllm_trtllm_minimax2_routing_from_0_21():
    """vllm-project/vllm@v0.21.0 fused_moe/config.py get_routing_method_type (sigmoid + bias, no groups: MiniMax2) and
    TrtLlmFp8ExpertsMonolithic._supports_routing_method (vllm-project/vllm#39141); v0.20.0 has no MiniMax2."""
    dep = dict(gpu="B200", engine="vllm", model_config=MINIMAX_FP8, tp=4, runner="flashinfer_trtllm")
    ok = _explain(**dep, engine_version="0.21.0")
    assert planned(ok, "flashinfer_trtllm") and ok.plan.quant == "fp8_block"
    old = _explain(**dep, engine_version="0.20.0")
    reason = _routing_refusal(old, "flashinfer_trtllm")
    assert old.plan is None and "vllm is 0.20.0" in reason.detail and "vllm>=0.21.0" in (reason.fix or "")


def test_vllm_trtllm_bf16_minimax2_from_0_32():
    """vllm-project/vllm@v0.32.0 experts/trtllm_bf16_moe.py TrtLlmBf16Experts._supports_routing_method lists MiniMax2;
    v0.31.0 does not (the former note "its bf16 experts do not list MiniMax2" was stale)."""
    dep = dict(gpu="B200", engine="vllm", quant="bf16", model=MINIMAX, tp=4, runner="flashinfer_trtllm")
    assert planned(_explain(**dep, engine_version="0.32.0"), "flashinfer_trtllm")
    old = _explain(**dep, engine_version="0.31.0")
    assert old.plan is None and "vllm is 0.31.0" in _routing_refusal(old, "flashinfer_trtllm").detail


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.18", "0.5.22"])
def test_sglang_trtllm_minimax_nvfp4_gets_default_routing_through_0_5_22(version):
    """sgl-project/sglang@v0.5.22: minimax_m2.py names no routing_method_type, TopK.forward_cuda bypasses the top-k
    for flashinfer_trtllm and fused_experts_none_to_flashinfer_trtllm_fp4 sends RoutingMethodType.Default (softmax,
    no bias, no renormalisation; flashinfer-ai/flashinfer@v0.6.8 trtllm_fused_moe_runner.cu Runner.run)."""
    r = _explain(gpu="B200", engine="sglang", engine_version=version, quant="nvfp4", model=MINIMAX, tp=4,
                 runner="flashinfer_trtllm")
    assert r.plan is None
    reason = _routing_refusal(r, "flashinfer_trtllm")
    assert reason.source == MINIMAX_NVFP4_ROW and "sglang >=0.5.10.post1,<0.5.23" in reason.detail


def test_sglang_trtllm_minimax_block_fp8_fails_through_0_5_22_and_runs_from_0_5_23():
    """sgl-project/sglang@v0.5.22 fp8.py Fp8MoEMethod.apply sends DeepSeekV3 with MiniMax-M2's n_group None (0), which
    flashinfer-ai/flashinfer@v0.6.18rc7 Fp8BlockScaleLauncher.check_routing rejects ("n_group should not be zero");
    sgl-project/sglang@v0.5.23 topk.py _can_bypass_trtllm_routing keeps the top-k in SGLang (routed kernel)."""
    dep = dict(gpu="B200", engine="sglang", model_config=MINIMAX_FP8, tp=4, runner="flashinfer_trtllm")
    old = _explain(**dep, engine_version="0.5.22")
    assert old.plan is None and _routing_refusal(old, "flashinfer_trtllm").source == MINIMAX_FP8_ROW
    new = _explain(**dep, engine_version="0.5.23")
    assert planned(new, "flashinfer_trtllm") and _no_routing_doubt(new, "flashinfer_trtllm")
    nvfp4 = _explain(gpu="B200", engine="sglang", engine_version="0.5.23", quant="nvfp4", model=MINIMAX, tp=4,
                     runner="flashinfer_trtllm")
    assert planned(nvfp4, "flashinfer_trtllm") and _no_routing_doubt(nvfp4, "flashinfer_trtllm")


def test_sglang_trtllm_minimax_per_tensor_fp8_routes_right_with_flashinfer_0_6_8():
    """Per-tensor FP8 sends the same group-less DeepSeekV3, but Fp8PerTensorLauncher.check_routing has no n_group check
    and Runner.run (flashinfer-ai/flashinfer@v0.6.8) runs DeepSeekV3 with nGroup <= 1 as SigmoidBias +
    ScaledSumNormalize, MiniMax2's routing: planned at 0.5.22; with FlashInfer 0.6.7 refused on that version gate."""
    dep = dict(gpu="B200", engine="sglang", engine_version="0.5.22", quant="fp8_tensor", model=MINIMAX, tp=4,
               runner="flashinfer_trtllm")
    ok = _explain(**dep)
    assert planned(ok, "flashinfer_trtllm") and _no_routing_doubt(ok, "flashinfer_trtllm")
    old = _explain(**dep, packages={"flashinfer-python": "0.6.7"})
    assert old.plan is None and "flashinfer-python is 0.6.7" in _routing_refusal(old, "flashinfer_trtllm").detail


def test_sglang_trtllm_minimax_refusal_names_the_model_class():
    """The MiniMax-M2 refusals read minimax_m2.py: another model class is not refused by them (it meets the version
    gate of the positive rows instead), and an inline model without a class is not cited as MiniMax-M2."""
    dep = dict(gpu="B200", engine="sglang", engine_version="0.5.22", quant="nvfp4", tp=4, runner="flashinfer_trtllm")
    for model in ({**MINIMAX, "architecture": "SomeSigmoidMoeForCausalLM"},
                  {k: v for k, v in MINIMAX.items() if k != "architecture"}):
        reason = _routing_refusal(_explain(**dep, model=model), "flashinfer_trtllm")
        assert reason.source != MINIMAX_NVFP4_ROW and "sglang >=0.5.23" in reason.detail

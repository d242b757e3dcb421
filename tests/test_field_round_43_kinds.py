"""Field round 43 of issue 21 (tests/cases/field_round_43.yaml), fixed as kinds (backends/common.yaml ``methods``), each
tested on deployments other than the round's case; read in the PyPI wheels (sglang 0.5.8 / 0.5.9, vllm 0.16.0 / 0.17.0
/ 0.19.0 / 0.20.0).

- Expert biases under the engines' Fp8Config MoE methods: SGLang's Fp8MoEMethod before 0.5.9 and vLLM's Fp8MoEMethod /
  Fp8OnlineMoEMethod before 0.17.0 register no bias parameters, so gpt-oss (swiglu_oai, biased experts) cannot load as
  FP8, online (--quantization fp8 on the bf16 export) or serialized (quant_method fp8). Compressed-tensors FP8 goes
  through other methods, not read: not refused.
- vLLM's Quark MoE method has no W8A8 INT8 scheme before 0.20.0 (get_moe_method raises 'Unsupported FusedMoe scheme'
  before any kernel), on any GPU.

The checker's two extra cases of the round are here as they stand: vllm#34906's control at 0.17.0 (planned triton) and
vllm#36320 on MI300X (refused).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import refusals, report_codes

ROOT = Path(__file__).resolve().parents[1]
#: the bf16 export of gpt-oss-120b (the openai config without its quantization_config)
OSS_BF16 = str(ROOT / "tests" / "cases" / "models" / "openai__gpt-oss-120b-bf16")
#: gpt-oss-20b's layer, inline (32 experts, top 4, hidden 2880, intermediate 2880, biased clamped SwiGLU)
OSS20 = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880, "activation": "swiglu_oai",
         "architecture": "GptOssForCausalLM"}
#: Qwen3-30B-A3B's layer (no expert biases), inline
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu"}
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "sigmoid_topk", "architecture": "MiniMaxM2ForCausalLM"}


def _bias_refused(report) -> bool:
    return any(r.code == "quant_unsupported" and "registers no expert biases" in r.detail for r in report.reasons)


@pytest.mark.parametrize("engine, version, refused", [
    ("sglang", "0.5.5", True), ("sglang", "0.5.8", True), ("sglang", "0.5.9", False), ("sglang", "0.5.23", False),
    ("vllm", "0.11.0", True), ("vllm", "0.16.0", True), ("vllm", "0.17.0", False), ("vllm", "0.28.0", False),
])
def test_online_fp8_of_gpt_oss_bf16_by_release(engine, version, refused):
    r = moe_select.explain({"gpu": "H100", "engine": engine, "engine_version": version, "model_config": OSS_BF16,
                            "quant": "fp8_tensor", "tp": 2, "ep": 1, "a2a": "none"})
    assert _bias_refused(r) is refused, (engine, version, r.status, report_codes(r))
    if refused:
        assert r.status == "rejected"


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.6"), ("vllm", "0.15.0")])
def test_serialized_fp8_gpt_oss_is_refused_before_the_fix(engine, version):
    # a quant_method fp8 checkpoint (layout fp8) of gpt-oss-20b's layer: the same Fp8MoEMethod, the same missing biases
    for quant in ("fp8_tensor", "fp8_block"):
        r = moe_select.explain({"gpu": "H200", "engine": engine, "engine_version": version, "model": OSS20,
                                "quant": quant, "quant_config": {"layout": "fp8"}, "tp": 1, "ep": 1, "a2a": "none"})
        assert _bias_refused(r), (quant, r.status, report_codes(r))


def test_what_the_bias_facts_leave_alone():
    # a model without expert biases under online FP8 at the old releases
    for engine, version in (("sglang", "0.5.8"), ("vllm", "0.16.0")):
        r = moe_select.explain({"gpu": "H200", "engine": engine, "engine_version": version, "model": QWEN,
                                "quant": "fp8_tensor", "quant_config": {"layout": "fp8"}, "tp": 2, "ep": 1, "a2a": "none"})
        assert not _bias_refused(r) and r.status == "ok", (engine, report_codes(r))
    # gpt-oss through compressed-tensors FP8 (another method, not read): not refused by these facts
    r = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.16.0", "model": OSS20,
                            "quant": "fp8_tensor", "quant_config": {"layout": "compressed-tensors"}, "tp": 1, "ep": 1,
                            "a2a": "none"})
    assert not _bias_refused(r)
    # the bf16 export served unquantized
    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": "0.16.0", "model_config": OSS_BF16,
                            "tp": 2, "ep": 1, "a2a": "none"})
    assert not _bias_refused(r) and r.status == "ok", report_codes(r)


def test_r43_vllm34906_control_at_the_fixed_release():
    """The checker's control: vLLM 0.17.0 registers the biases; planned triton (the kernel the PR profiled)."""
    r = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.17.0", "model_config": OSS_BF16,
                            "quant": "fp8_tensor", "tp": 4, "ep": 1, "a2a": "none", "runner": "auto", "cuda_graph": True})
    assert r.status == "ok" and r.plan is not None and r.plan.runner == "triton", report_codes(r)


def _quark_int8(gpu: str, version: str):
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version, "quant": "int8_w8a8",
                               "quant_config": {"layout": "quark"}, "model": MINIMAX, "tp": 8, "ep": 1, "a2a": "none",
                               "runner": "auto", "cuda_graph": True})


@pytest.mark.parametrize("gpu", ["H200", "MI300X", "A100"])
def test_quark_int8_moe_before_0_20_is_refused_on_any_gpu(gpu):
    r = _quark_int8(gpu, "0.19.0")
    assert r.status == "rejected"
    assert any(x.code == "quant_unsupported" and "Quark MoE method has no W8A8 INT8 scheme" in x.detail
               for x in r.reasons), report_codes(r)
    assert any("vllm>=0.20.0" in (x.fix or "") for x in r.reasons if "Quark MoE method" in x.detail)


def test_quark_int8_moe_from_0_20_is_not_refused_by_that_fact():
    for gpu in ("H200", "MI300X"):
        r = _quark_int8(gpu, "0.20.0")
        assert not any("Quark MoE method has no W8A8 INT8" in x.detail for x in r.reasons), gpu
    assert _quark_int8("H200", "0.20.0").status == "ok"
    # compressed-tensors INT8 at 0.19.0 is another method: not this fact's
    r = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.19.0", "quant": "int8_w8a8",
                            "quant_config": {"layout": "compressed-tensors"}, "model": MINIMAX, "tp": 8, "ep": 1,
                            "a2a": "none"})
    assert not any("Quark MoE method" in x.detail for x in r.reasons)


def test_r43_vllm36320_on_mi300x():
    """The checker's MI300X variant: refused (before this fix on the Triton int8 row only; now on the Quark fact too)."""
    r = _quark_int8("MI300X", "0.19.0")
    assert r.status == "rejected" and "quant_unsupported" in refusals(r, "triton")

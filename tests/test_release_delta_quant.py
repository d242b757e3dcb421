"""Release delta vLLM 0.29.0 -> 0.34.0 and SGLang 0.5.19 -> 0.5.23 (quantization methods, AITER): the behaviour
changes the audit found, each asserted at the first release that has it and at the release before (read in the PyPI
wheels' Python sources of every release between).

- vLLM's AITER MXFP4 W4A16 monolithic experts (gfx942): no gfx942 device in 0.29.0 (from 0.30.0); expert
  parallelism refused in 0.31.0/0.32.0 and honoured (expert map masked) from 0.33.0; DeepSeek-V3 routing from 0.32.0.
- vLLM's AITER MXFP8 experts: VLLM_ROCM_USE_AITER needed from 0.31.0; an aiter.fused_moe taking gate_mode (AITER
  0.1.14) from 0.33.0; SiLU from 0.33.0.
- vLLM's Quark FP8 MoE: no block FP8 in 0.29.0 (from 0.30.0). vLLM's compressed-tensors MXFP4 MoE method builds
  Marlin / CUTLASS / b12x (0.29.0 on) and deep_gemm (0.34.0 on) only.
- SGLang's block-FP8 MoE: the block_k check follows the MoE TP size from 0.5.22 (the global TP size before).
- SGLang's unquantized MoE on gfx950: no AITER for SwiGLU-OAI-style layers (gemm1_alpha / gemm1_clamp_limit) from
  0.5.21.
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import cand, refusals, unknown_codes

from conftest import CONFIGS

GPT_OSS = str(CONFIGS / "openai__gpt-oss-20b")
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 8, "topk_group": 4}


def _explain(engine: str, version: str, gpu: str, **dep):
    return moe_select.explain({"gpu": gpu, "engine": engine, "engine_version": version, **dep})


def _from(report, runner: str, code: str, file: str) -> bool:
    """Whether a fact of backends/<file> refuses ``runner`` with ``code``."""
    return any(r.code == code and r.source.startswith(f"backends/{file}:") for r in cand(report, runner).reasons)


# ------------------------------------------------------------------ vLLM: AITER MXFP4 W4A16 on gfx942

@pytest.mark.parametrize("version, refused", [("0.29.0", True), ("0.30.0", False), ("0.34.0", False)])
def test_vllm_aiter_mxfp4_on_gfx942_from_0_30(version, refused):
    r = _explain("vllm", version, "MI300X", model_config=GPT_OSS, tp=1, runner="aiter", vendor_library=True)
    assert _from(r, "aiter", "arch_unsupported", "aiter.yaml") == refused, refusals(r, "aiter")
    if not refused:
        assert r.plan is not None and r.plan.runner == "aiter", r.summary()


@pytest.mark.parametrize("version, refused", [("0.32.0", True), ("0.33.0", False), ("0.34.0", False)])
def test_vllm_aiter_mxfp4_gfx942_takes_expert_parallelism_from_0_33(version, refused):
    r = _explain("vllm", version, "MI300X", model_config=GPT_OSS, tp=4, ep=4, runner="aiter", vendor_library=True)
    assert _from(r, "aiter", "parallelism_unsupported", "aiter.yaml") == refused, refusals(r, "aiter")


@pytest.mark.parametrize("version, refused", [("0.31.0", True), ("0.32.0", False), ("0.34.0", False)])
def test_vllm_aiter_mxfp4_gfx942_deepseek_v3_routing_from_0_32(version, refused):
    r = _explain("vllm", version, "MI300X", model=DSV3, quant="mxfp4", tp=8, runner="aiter", vendor_library=True)
    assert _from(r, "aiter", "routing_unsupported", "aiter.yaml") == refused, refusals(r, "aiter")
    assert "routing_unsupported" not in unknown_codes(r, "aiter")


# ------------------------------------------------------------------ vLLM: AITER MXFP8 (gfx950)

M3_SPLIT = {**QWEN3_30B, "activation": "swiglu_oai_split", "swiglu_limit": 7.0}


@pytest.mark.parametrize("version, refused", [("0.30.0", False), ("0.31.0", True), ("0.34.0", True)])
def test_vllm_aiter_mxfp8_needs_vllm_rocm_use_aiter_from_0_31(version, refused):
    r = _explain("vllm", version, "MI355X", model=M3_SPLIT, quant="mxfp8", tp=1, runner="aiter", vendor_library=False)
    assert _from(r, "aiter", "engine_unsupported", "aiter.yaml") == refused, refusals(r, "aiter")
    on = _explain("vllm", version, "MI355X", model=M3_SPLIT, quant="mxfp8", tp=1, runner="aiter", vendor_library=True)
    assert not _from(on, "aiter", "engine_unsupported", "aiter.yaml"), refusals(on, "aiter")


@pytest.mark.parametrize("version, aiter, refused", [("0.32.0", "0.1.13", False), ("0.33.0", "0.1.13", True),
                                                     ("0.33.0", "0.1.14", False)])
def test_vllm_aiter_mxfp8_needs_an_aiter_with_gate_mode_from_0_33(version, aiter, refused):
    r = _explain("vllm", version, "MI355X", model=M3_SPLIT, quant="mxfp8", tp=1, runner="aiter", vendor_library=True,
                 packages={"amd-aiter": aiter})
    assert _from(r, "aiter", "engine_unsupported", "aiter.yaml") == refused, refusals(r, "aiter")


@pytest.mark.parametrize("version, silu_refused", [("0.32.0", True), ("0.33.0", False), ("0.34.0", False)])
def test_vllm_aiter_mxfp8_takes_silu_from_0_33(version, silu_refused):
    r = _explain("vllm", version, "MI355X", model=QWEN3_30B, quant="mxfp8", tp=1, runner="aiter", vendor_library=True)
    assert _from(r, "aiter", "activation_unsupported", "aiter.yaml") == silu_refused, refusals(r, "aiter")
    if not silu_refused:
        assert r.plan is not None and r.plan.runner == "aiter", r.summary()
    gelu = _explain("vllm", version, "MI355X", model={**QWEN3_30B, "activation": "gelu"}, quant="mxfp8", tp=1,
                    runner="aiter", vendor_library=True)
    assert _from(gelu, "aiter", "activation_unsupported", "aiter.yaml"), refusals(gelu, "aiter")


# ------------------------------------------------------------------ vLLM: Quark block FP8, compressed-tensors MXFP4

@pytest.mark.parametrize("version, refused", [("0.29.0", True), ("0.30.0", False)])
def test_vllm_quark_block_fp8_moe_from_0_30(version, refused):
    r = _explain("vllm", version, "MI300X", model=QWEN3_30B, quant="fp8_block",
                 quant_config={"block": [128, 128], "layout": "quark"}, tp=2)
    for runner in ("triton", "aiter"):
        assert _from(r, runner, "quant_unsupported", "common.yaml") == refused, (runner, refusals(r, runner))
    assert (r.plan is None) == refused, r.summary()
    # the compressed-tensors layout had its block FP8 MoE method in 0.29.0 already
    ct = _explain("vllm", version, "MI300X", model=QWEN3_30B, quant="fp8_block",
                  quant_config={"block": [128, 128], "layout": "compressed-tensors"}, tp=2)
    assert not _from(ct, "triton", "quant_unsupported", "common.yaml"), refusals(ct, "triton")


def test_vllm_compressed_tensors_mxfp4_builds_its_own_runners():
    def ct(version):
        return _explain("vllm", version, "B200", model=QWEN3_30B, quant="mxfp4",
                        quant_config={"layout": "compressed-tensors"}, tp=1)
    old, mid, new = ct("0.28.0"), ct("0.29.0"), ct("0.34.0")
    # 0.25.0 .. 0.28.x not read: no method fact, the native MXFP4 runners stay eligible
    assert not _from(old, "flashinfer_trtllm", "quant_unsupported", "common.yaml")
    for r in (mid, new):
        for runner in ("flashinfer_trtllm", "triton"):
            assert _from(r, runner, "quant_unsupported", "common.yaml"), (runner, refusals(r, runner))
        assert not _from(r, "cutlass", "quant_unsupported", "common.yaml")
        assert not _from(r, "marlin", "quant_unsupported", "common.yaml")
    # deep_gemm on request from 0.34.0
    assert _from(mid, "deep_gemm", "quant_unsupported", "common.yaml")
    assert not _from(new, "deep_gemm", "quant_unsupported", "common.yaml")


# ------------------------------------------------------------------ SGLang: block FP8's block_k check, AITER bf16

# block_n 64 divides the per-rank intermediate 960, block_k 128 does not: only the block_k check refuses
BLOCK_64x128 = {**QWEN3_30B, "moe_intermediate_size": 960}


@pytest.mark.parametrize("version, refused", [("0.5.21", True), ("0.5.22", False), ("0.5.23", False)])
def test_sglang_block_fp8_block_k_follows_the_moe_tp_size_from_0_5_22(version, refused):
    r = _explain("sglang", version, "H100", model=BLOCK_64x128, quant="fp8_block", quant_config={"block": [64, 128]},
                 tp=2, ep=2, runner="triton")                     # moe_tp 1: 960 rows per rank
    assert _from(r, "triton", "shape_unaligned", "common.yaml") == refused, refusals(r, "triton")
    assert (r.plan is None) == refused, r.summary()
    # with MoE tensor parallelism left (tp 4, ep 2: moe_tp 2, 480 rows per rank) every release refuses it
    split = _explain("sglang", version, "H100", model=BLOCK_64x128, quant="fp8_block",
                     quant_config={"block": [64, 128]}, tp=4, ep=2, runner="triton")
    assert _from(split, "triton", "shape_unaligned", "common.yaml"), refusals(split, "triton")


SWIGLU_OAI_BF16 = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 3072,
                   "activation": "swiglu_oai", "routing": "renormalize", "swiglu_limit": 7.0}


@pytest.mark.parametrize("version, refused", [("0.5.20", False), ("0.5.21", True), ("0.5.23", True)])
def test_sglang_aiter_bf16_refuses_swiglu_oai_on_gfx950_from_0_5_21(version, refused):
    for activation in ("swiglu_oai", "swiglu_oai_split"):
        r = _explain("sglang", version, "MI355X", model={**SWIGLU_OAI_BF16, "activation": activation}, quant="bf16",
                     tp=1, runner="aiter", vendor_library=True)
        assert _from(r, "aiter", "activation_unsupported", "aiter.yaml") == refused, (activation, refusals(r, "aiter"))
    # plain SiLU and gfx942 are untouched
    silu = {k: v for k, v in SWIGLU_OAI_BF16.items() if k != "swiglu_limit"}
    r = _explain("sglang", version, "MI355X", model={**silu, "activation": "silu"}, quant="bf16", tp=1, runner="aiter",
                 vendor_library=True)
    assert r.plan is not None and r.plan.runner == "aiter", r.summary()
    r = _explain("sglang", version, "MI300X", model=SWIGLU_OAI_BF16, quant="bf16", tp=1, runner="aiter",
                 vendor_library=True)
    assert not _from(r, "aiter", "activation_unsupported", "aiter.yaml"), refusals(r, "aiter")

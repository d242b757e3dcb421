"""Field round 51 of issue 21 (tests/cases/field_round_51.yaml), the kinds fixed (backends/common.yaml constraints on every
runner: the routing step fails before any expert kernel), tested on deployments other than the round's cases.

- SGLang on ROCm with SGLANG_USE_AITER hands biased grouped top-k (routing deepseek_v3) to AITER's biased_grouped_topk,
  which before AITER 0.1.12 sends a forward above cu_num * 212 tokens to moe_fused_gate: at most 32 experts per group and
  a power-of-two expert count (ROCm/aiter#2369, #2604).
- vLLM's DeepSeek-V4 router kernel (topk_hash_softplus_sqrt) is compiled for a fixed set of expert counts
  (vllm-project/vllm#50982).
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

# Kimi-K2 (384 experts in one group), DeepSeek-V3 (256 in 8 groups of 32), GLM-5 (256 in one group)
KIMI = {"num_experts": 384, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827, "num_shared_experts": 1}
DSV3 = {**KIMI, "num_experts": 256, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5}
GLM5 = {**KIMI, "num_experts": 256, "hidden_size": 6144, "routed_scaling_factor": 2.5}
AMD = {"engine": "sglang", "engine_version": "0.5.20", "quant": "fp8_block", "quant_config": {"block": [128, 128]},
       "tp": 8, "ep": 1, "a2a": "none", "runner": "auto", "vendor_library": True}


def _fused_gate(report) -> bool:
    return any(r.code == "shape_unaligned" and "moe_fused_gate" in r.detail for r in report.reasons)


@pytest.mark.parametrize("gpu, model, tokens, aiter, vendor, refused", [
    ("MI300X", KIMI, 65536, "0.1.11.post1", True, True),    # 384 per group, above 304 * 212 tokens
    ("MI300X", KIMI, 32768, "0.1.11.post1", True, False),   # below the bound: the HIP kernel
    ("MI300X", KIMI, 65536, "0.1.12", True, False),         # more than 32 per group stays on HIP from 0.1.12
    ("MI300X", DSV3, 65536, "0.1.11.post1", True, False),   # 32 per group, 256 a power of two
    ("MI355X", GLM5, 60000, "0.1.10", True, True),          # 256 CUs: above 54272 tokens
    ("MI355X", GLM5, 50000, "0.1.10", True, False),
    ("MI300X", GLM5, 65536, "0.1.11.post1", False, False),  # no SGLANG_USE_AITER: SGLang's own router
])
def test_aiter_fused_gate_limits(gpu, model, tokens, aiter, vendor, refused):
    r = moe_select.explain({**AMD, "gpu": gpu, "model": model, "max_tokens_per_rank": tokens,
                            "vendor_library": vendor, "packages": {"amd-aiter": aiter}})
    assert _fused_gate(r) is refused, report_codes(r)


def test_a_non_power_of_two_expert_count_is_refused_there_too():
    m = {**DSV3, "num_experts": 160, "n_group": 8}         # 20 per group, 160 not a power of two
    r = moe_select.explain({**AMD, "gpu": "MI300X", "model": m, "max_tokens_per_rank": 65536,
                            "packages": {"amd-aiter": "0.1.11.post1"}})
    assert any(x.code == "shape_unaligned" and "power of 2" in x.detail and "num_experts = 160" in x.detail
               for x in r.reasons), report_codes(r)


V4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu_clamped",
      "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}


def _router(report) -> bool:
    return any(r.code == "shape_unaligned" and "topk_hash_softplus_sqrt" in r.detail for r in report.reasons)


@pytest.mark.parametrize("gpu, engine, version, experts, refused", [
    ("B200", "vllm", "0.34.0", 160, True),
    ("H200", "vllm", "0.22.0", 96, True),
    ("B200", "vllm", "0.34.0", 256, False),
    ("B200", "vllm", "0.34.0", 192, False),    # compiled (not a power of two)
    ("MI355X", "vllm", "0.34.0", 160, False),  # the ROCm build was not read
    ("B200", "sglang", "0.5.23", 160, False),
])
def test_vllm_dsv4_router_expert_counts(gpu, engine, version, experts, refused):
    r = moe_select.explain({"gpu": gpu, "engine": engine, "engine_version": version, "quant": "mxfp4", "tp": 4,
                            "ep": 1, "a2a": "none", "runner": "auto", "model": {**V4, "num_experts": experts}})
    assert _router(r) is refused, report_codes(r)


def test_the_router_fact_leaves_other_models_alone_when_the_architecture_is_unstated():
    """A 160-expert GLM-style layer (routing deepseek_v3, no architecture) under vLLM: no unknown from the DeepSeek-V4
    router fact (scoped to its own sqrtsoftplus routing, `custom`): field round 14's GLM-4.7 case planned cutlass once it
    was added unscoped."""
    glm = {"num_experts": 160, "top_k": 8, "hidden_size": 5120, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "deepseek_v3", "num_shared_experts": 1}
    r = moe_select.explain({"gpu": "RTX PRO 6000", "engine": "vllm", "quant": "fp8_block", "model": glm, "tp": 4, "ep": 1,
                            "a2a": "none", "runner": "auto"})
    texts = [u.detail for c in r.candidates for u in [*c.reasons, *c.unknowns]]
    assert not any("topk_hash_softplus_sqrt" in t for t in texts), report_codes(r)


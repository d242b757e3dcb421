"""Field round 23 of issue 21 (tests/cases/field_round_23.yaml), its vLLM cases fixed as kinds: each kind tested on other
deployments of the same kind than the round's case, on both sides of each bound. The expectations are written by hand
from the upstream code read (the PyPI wheels each fact cites), not computed from the facts.

1. vLLM's compressed-tensors W4A8-FP8 MoE method (CompressedTensorsW4A8Fp8MoEMethod, CUTLASS) is first in 0.13.0: before
   it an int4_w4a8 checkpoint has no MoE method ('Unsupported FusedMoe scheme', vllm-project/vllm#25241): cutlass
   refused (quant_unsupported, cutlass.yaml) under vLLM < 0.13.0.
2. vLLM 0.10.1 .. 0.11.0 load gpt-oss's experts sliced by the attention TP while the MoE without EP is TP across DP
   (vllm-project/vllm#24032, fixed in 0.11.1): dp > 1 with ep 1 refused (parallelism_unsupported, common.yaml).
3. Weight-only NVFP4 (compressed-tensors NVFP4A16) has no vLLM MoE method before 0.14.0 (vllm-project/vllm#21977):
   marlin refused (quant_unsupported, marlin.yaml) under vLLM < 0.14.0 for a weight-only checkpoint.
4. ROCm int4 W4A16 MoE before 0.10.1 (vllm-project/vllm#22001, fixed by #21733): GPTQ has no MoE method and the Triton
   path calls the CUDA-only moe_wna16_gemm at groups 32/64/128: triton refused (arch_unsupported, triton.yaml) on ROCm
   under vLLM 0.8.0 .. 0.10.0.
5. vLLM's Triton fused MoE before 0.8.0 slices the last chunk's activation cache without the top-k factor
   (vllm-project/vllm#13693): FP8 forwards over 32768 tokens per rank refused (parallelism_unsupported, triton.yaml).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, refusals


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


# ------------------------------------------------ kind 1: vLLM's W4A8-FP8 MoE method from 0.13.0 (cutlass)
# A Qwen3-235B-A22B-like W4A8 MoE (128 experts, top 8, hidden 4096, intermediate 1536: 768 per rank at TP 2) on H200:
# not the round's Qwen3-30B-A3B on one H100.
W4A8_MODEL = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
              "routing": "renormalize"}
W4A8 = dict(gpu="H200", engine="vllm", quant="int4_w4a8", quant_config={"group_size": 128}, model=W4A8_MODEL, tp=2,
            ep=1, a2a="none", runner="cutlass")


@pytest.mark.parametrize("vllm", ["0.10.2", "0.12.0"])
def test_vllm_w4a8_fp8_moe_refused_before_0_13_0(vllm):
    """0.10.2 and 0.12.0 (no W4A8-FP8 branch in get_moe_method): refused (quant_unsupported, cutlass.yaml)."""
    r = _explain(**W4A8, engine_version=vllm)
    assert r.plan is None
    only_refusal(r, "cutlass", "quant_unsupported", "cutlass.yaml")


@pytest.mark.parametrize("vllm", ["0.13.0", "0.16.0"])
def test_vllm_w4a8_fp8_moe_planned_from_0_13_0(vllm):
    """0.13.0 (CompressedTensorsW4A8Fp8MoEMethod) and 0.16.0: planned on sm90."""
    assert_planned(_explain(**W4A8, engine_version=vllm), "cutlass")


def test_vllm_w4a8_auto_refused_before_0_13_0():
    """With runner auto at 0.12.0 no runner is planned for W4A8 on H200."""
    r = _explain(**{**W4A8, "runner": "auto"}, engine_version="0.12.0")
    assert r.plan is None
    assert refusals(r, "cutlass") == {"quant_unsupported": refusals(r, "cutlass")["quant_unsupported"]}
    assert refusals(r, "cutlass")["quant_unsupported"].startswith("backends/cutlass.yaml:")


# ------------------------------------------------ kind 2: vLLM gpt-oss attention DP + MoE TP weight loading (< 0.11.1)
# gpt-oss-20b on H200 at TP 2 / DP 2 and gpt-oss-120b at 0.10.1: not the round's gpt-oss-120b at TP 1 / DP 2 under 0.10.2.
GPTOSS20 = dict(gpu="H200", engine="vllm", model_config="examples/model_configs/openai__gpt-oss-20b", a2a="none")
GPTOSS120 = dict(gpu="B200", engine="vllm", model_config="examples/model_configs/openai__gpt-oss-120b", a2a="none")


@pytest.mark.parametrize(("dep", "vllm", "tp", "dp"), [
    (GPTOSS20, "0.11.0", 2, 2), (GPTOSS20, "0.10.2", 1, 4), (GPTOSS120, "0.10.1", 1, 2)])
def test_vllm_gptoss_dp_without_ep_refused_before_0_11_1(dep, vllm, tp, dp):
    """DP > 1 without expert parallelism under 0.10.1, 0.10.2 and 0.11.0: no plan; every candidate the facts would
    otherwise judge is refused by common.yaml (parallelism_unsupported), naming the fix."""
    r = _explain(**dep, engine_version=vllm, tp=tp, dp=dp, ep=1)
    assert r.plan is None
    hits = [x for c in r.candidates for x in c.reasons
            if x.code == "parallelism_unsupported" and x.source.startswith("backends/common.yaml:")]
    assert hits, [(x.code, x.source) for x in r.reasons]
    assert "0.11.1" in hits[0].detail and "#24032" in hits[0].detail, hits[0].detail


@pytest.mark.parametrize(("dep", "vllm", "tp", "dp", "ep"), [
    (GPTOSS20, "0.11.1", 2, 2, 1),   # the fix: loaders flatten TP across DP
    (GPTOSS20, "0.10.2", 2, 1, 1),   # no DP: attention TP is the MoE TP
    (GPTOSS120, "0.10.2", 1, 2, 2),  # expert parallelism: loaders slice by expert
])
def test_vllm_gptoss_fixed_or_no_dp_or_ep_planned(dep, vllm, tp, dp, ep):
    """0.11.1 at DP 2, 0.10.2 without DP, and 0.10.2 with EP over DP: the fact does not refuse (a plan exists)."""
    r = _explain(**dep, engine_version=vllm, tp=tp, dp=dp, ep=ep)
    assert r.plan is not None, [(x.code, x.source, x.detail) for x in r.reasons]
    assert not any(x.source.startswith("backends/common.yaml:") and "#24032" in x.detail for x in r.reasons)


def test_vllm_gptoss_dp_unstated_is_unverified_not_refused():
    """dp not given under 0.10.2 (ep 1): the fact reads an unstated input, so the plan is unverified, never refused."""
    r = _explain(**GPTOSS20, engine_version="0.10.2", tp=2, ep=1)
    assert r.plan is not None
    assert r.plan.evidence == "unverified"
    assert any("dp" in (u.settle or "") for u in cand(r, r.plan.runner).unknowns), cand(r, r.plan.runner).unknowns


def test_vllm_gptoss_dp_fact_leaves_other_activations_decided():
    """A model that names no architecture and whose activation is not gpt-oss's swiglu_oai (an inline DeepSeek-shaped
    SiLU MoE, dp unstated, vLLM 0.10.2) is not gpt-oss: the fact leaves no unknown, and the plan's evidence does not
    drop to unverified on its account."""
    model = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
             "routing": "renormalize"}
    r = _explain(gpu="H200", engine="vllm", engine_version="0.10.2", model=model, quant="bf16", tp=4, ep=1, a2a="none")
    assert r.plan is not None
    assert not any(u.source.startswith("backends/common.yaml:") and "#24032" in u.detail
                   for c in r.candidates for u in c.unknowns)


# ------------------------------------------------ kind 3: vLLM weight-only NVFP4 MoE (NVFP4A16) from 0.14.0 (marlin)
# A Qwen3-30B-A3B-shaped NVFP4A16 MoE on 2 x H200 at TP 2: not the round's Llama-4-Scout on 8 x H100.
NVFP4A16_MODEL = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
                  "activation": "silu", "routing": "renormalize"}
NVFP4A16 = dict(gpu="H200", engine="vllm", quant="nvfp4", quant_config={"weight_only": True}, model=NVFP4A16_MODEL,
                tp=2, ep=1, a2a="none")


@pytest.mark.parametrize("vllm", ["0.10.2", "0.13.0"])
def test_vllm_nvfp4a16_refused_before_0_14_0(vllm):
    """0.10.2 and 0.13.0 (get_moe_method takes NVFP4 with NVFP4 activations only): refused (quant_unsupported,
    marlin.yaml), with runner marlin and with runner auto."""
    for runner in ("marlin", "auto"):
        r = _explain(**NVFP4A16, engine_version=vllm, runner=runner)
        assert r.plan is None
        only_refusal(r, "marlin", "quant_unsupported", "marlin.yaml")


@pytest.mark.parametrize("vllm", ["0.14.0", "0.16.0"])
def test_vllm_nvfp4a16_planned_from_0_14_0(vllm):
    """0.14.0 (NVFP4A16 with use_marlin) and 0.16.0: marlin planned."""
    assert_planned(_explain(**NVFP4A16, engine_version=vllm, runner="auto"), "marlin")


def test_vllm_nvfp4_w4a4_on_hopper_not_refused_by_the_weight_only_fact():
    """An NVFP4 W4A4 checkpoint (activation scales) on H200 under 0.13.0 runs Marlin's W4A16 fallback: not refused."""
    r = _explain(**{**NVFP4A16, "quant_config": {}}, engine_version="0.13.0", runner="marlin")
    assert "quant_unsupported" not in refusals(r, "marlin"), refusals(r, "marlin")


# ------------------------------------------------ kind 4: vLLM ROCm int4 W4A16 MoE before 0.10.1 (triton)
# An OLMoE-shaped int4 MoE (64 experts, top 8, hidden 2048, intermediate 1024) at group 64 on MI355X (gfx950) and group
# 32 on MI300X at TP 2: not the round's Qwen3-30B-A3B GPTQ at group 128 on one MI300X.
INT4_MODEL = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 1024, "activation": "silu",
              "routing": "softmax_topk"}
INT4 = dict(engine="vllm", quant="int4_w4a16", model=INT4_MODEL, ep=1, a2a="none", runner="triton")


@pytest.mark.parametrize(("gpu", "vllm", "group", "tp"), [
    ("MI355X", "0.9.2", 64, 1), ("MI300X", "0.8.0", 32, 2), ("MI300X", "0.10.0", 128, 2)])
def test_vllm_rocm_int4_triton_refused_before_0_10_1(gpu, vllm, group, tp):
    """gfx950 and gfx942 under 0.8.0, 0.9.2 and 0.10.0 at groups 32/64/128: refused (arch_unsupported, triton.yaml)."""
    r = _explain(**INT4, gpu=gpu, engine_version=vllm, quant_config={"group_size": group}, tp=tp)
    assert r.plan is None
    only_refusal(r, "triton", "arch_unsupported", "triton.yaml")


@pytest.mark.parametrize(("gpu", "vllm"), [("MI300X", "0.10.1"), ("MI355X", "0.11.0")])
def test_vllm_rocm_int4_triton_planned_from_0_10_1(gpu, vllm):
    """0.10.1 (GPTQ's MoeWNA16 branch, moe_wna16_gemm CUDA only) and 0.11.0: planned."""
    assert_planned(_explain(**INT4, gpu=gpu, engine_version=vllm, quant_config={"group_size": 128}, tp=1), "triton")


def test_vllm_int4_on_cuda_not_refused_by_the_rocm_fact():
    """H100 under 0.10.0 (moe_wna16_gemm is built for CUDA): the ROCm fact does not refuse triton."""
    r = _explain(**INT4, gpu="H100", engine_version="0.10.0", quant_config={"group_size": 128}, tp=1)
    assert "arch_unsupported" not in refusals(r, "triton"), refusals(r, "triton")


# ------------------------------------------------ kind 5: vLLM Triton fused MoE last-chunk slice before 0.8.0
# Mixtral-8x7B as FP8 per-tensor on 2 x H200 with forwards of 40000 tokens per rank, and Qwen3-30B-A3B-FP8 (block FP8)
# at 49152: not the round's DeepSeek-R1 at TP 16 on H20.
MIXTRAL = dict(gpu="H200", engine="vllm", model_config="examples/model_configs/mistralai__Mixtral-8x7B-v0.1",
               quant="fp8_tensor", tp=2, ep=1, a2a="none", runner="triton")
QWEN_FP8 = dict(gpu="H200", engine="vllm", model_config="examples/model_configs/Qwen__Qwen3-30B-A3B-FP8", tp=1, ep=1,
                a2a="none", runner="triton")


@pytest.mark.parametrize(("dep", "vllm", "tokens"), [
    (MIXTRAL, "0.7.3", 40000), (MIXTRAL, "0.6.4.post1", 32769), (QWEN_FP8, "0.7.2", 49152)])
def test_vllm_triton_fp8_over_chunk_refused_before_0_8_0(dep, vllm, tokens):
    """FP8 forwards of more than 32768 tokens per rank under 0.6.4.post1, 0.7.2 and 0.7.3: refused
    (parallelism_unsupported, triton.yaml)."""
    r = _explain(**dep, engine_version=vllm, max_tokens_per_rank=tokens)
    assert r.plan is None
    detail = only_refusal(r, "triton", "parallelism_unsupported", "triton.yaml")
    assert "32768" in detail, detail


@pytest.mark.parametrize(("dep", "vllm", "tokens"), [
    (MIXTRAL, "0.8.0", 40000), (MIXTRAL, "0.7.3", 32768), (QWEN_FP8, "0.8.0", 131072)])
def test_vllm_triton_fp8_fixed_or_within_chunk_planned(dep, vllm, tokens):
    """0.8.0 (the slice times top-k) over the chunk, and 0.7.3 at 32768 tokens (one chunk): planned."""
    assert_planned(_explain(**dep, engine_version=vllm, max_tokens_per_rank=tokens), "triton")


def test_vllm_triton_bf16_over_chunk_not_refused():
    """A 16-bit layer under 0.7.3 at 65536 tokens (its second GEMM reads the cache behind the view): not refused."""
    r = _explain(**{**MIXTRAL, "quant": "bf16"}, engine_version="0.7.3", max_tokens_per_rank=65536)
    assert "parallelism_unsupported" not in refusals(r, "triton"), refusals(r, "triton")

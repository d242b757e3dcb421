"""Field round 23 of issue 21 (tests/cases/field_round_23.yaml), its SGLang misses fixed as kinds: each kind tested on
other deployments of the same kind than the round's case, on both sides of each bound (version, arch, token count,
format). The expectations are written by hand from the SGLang and vLLM wheels read (each fact cites them), not computed
from the facts.

1. SGLang < 0.5.14's default Triton FP8 W8A8 tile (128 x 256 x 128, 4 stages, 147456 B of shared memory) for forwards of
   more tokens than local experts, taken on GB10 (sm121: no tuned config in those wheels) (sgl-project/sglang#28038):
   triton refused (shape_unaligned, triton.yaml) when max_tokens_per_rank > experts_per_rank.
2. SGLang 0.4.1 .. 0.4.3.post2's EPMoE grouped GEMM with a fixed 128x128x128 tile (131072 B for 16-bit weights) on
   sm86/sm89 (sgl-project/sglang#3370): ep > 1 refused (parallelism_unsupported, common.yaml).
3. SGLang 0.4.1 .. 0.4.2.x with vLLM >= 0.7.0 (create_weights' argument renamed; sgl-project/sglang#3476): marlin refused
   (dependency_missing, marlin.yaml); and SGLang's Triton fused MoE has no int4 mode before 0.4.4.post4 (quant_unsupported,
   triton.yaml).
4. SGLang 0.4.3.post3 .. 0.4.7's EPMoE keeps block-FP8 e4m3fn weights on gfx942 (sgl-project/sglang#7055): ep > 1 refused
   (parallelism_unsupported, common.yaml); and EPMoE never runs AITER before 0.4.10 (aiter at ep > 1 without an all-to-all
   refused, aiter.yaml).
5. SGLang 0.4.1 .. 0.4.3.x's last-chunk slice of the fused MoE's activation cache (sgl-project/sglang#3779): FP8 triton
   refused above 65536 tokens per rank (parallelism_unsupported, triton.yaml).
6. SGLang before 0.4.3.post3's EPMoE has no block FP8 (sgl-project/sglang#3075): ep > 1 with fp8_block refused
   (parallelism_unsupported, common.yaml).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, only_refusal, refusals

DSV3 = "examples/model_configs/deepseek-ai__DeepSeek-V3"
DSR1 = "examples/model_configs/deepseek-ai__DeepSeek-R1"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _codes_from(r: Any, runner: str, file: str) -> set[str]:
    """The codes with which ``backends/<file>`` refuses ``runner``."""
    return {code for code, src in refusals(r, runner).items() if src.startswith(f"backends/{file}:")}


# ------------------------------------------------ kind 1: SGLang's default FP8 Triton tile on GB10 (before 0.5.14)
# A 64-expert FP8 MoE (top 8, hidden 4096, intermediate 1024): not the round's 128-expert gemma stand-in.
SMALL = {"num_experts": 64, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1024, "activation": "silu",
         "routing": "renormalize"}
GB10 = dict(gpu="GB10", engine="sglang", model=SMALL, tp=1, ep=1, a2a="none", runner="triton")


@pytest.mark.parametrize(("sglang", "quant", "extra"), [
    ("0.5.13", "fp8_tensor", {}),                                       # prefill/both default 8192 tokens
    ("0.5.4", "fp8_channel", {"phase": "decode", "max_tokens_per_rank": 65}),  # 65 > 64 local experts
    ("0.5.13.post1", "fp8_channel", {"max_tokens_per_rank": 4096}),
])
def test_gb10_default_fp8_tile_refused(sglang, quant, extra):
    """More tokens per rank than local experts under 0.5.4 .. 0.5.13.post1: refused (shape_unaligned, triton.yaml)."""
    r = _explain(**GB10, engine_version=sglang, quant=quant, **extra)
    assert r.plan is None
    detail = only_refusal(r, "triton", "shape_unaligned", "triton.yaml")
    assert "experts_per_rank" in detail, detail


@pytest.mark.parametrize(("dep", "extra"), [
    ({"engine_version": "0.5.14", "quant": "fp8_tensor"}, {}),                        # the low-smem default tile
    ({"engine_version": "0.5.13", "quant": "fp8_channel"}, {"phase": "decode", "max_tokens_per_rank": 64}),  # M <= E
    ({"engine_version": "0.5.13", "quant": "fp8_block"}, {}),                         # block FP8: 64 x bn x bk, fits
])
def test_gb10_fixed_small_forwards_or_block_planned(dep, extra):
    """0.5.14 (low-smem tile), 64 tokens over 64 experts (the small tile), and block FP8: planned on GB10."""
    assert_planned(_explain(**GB10, **dep, **extra), "triton")


def test_gb10_tile_on_sm120_where_no_tuned_file_matches():
    """RTX PRO 6000 (sm120: the same 99 KB per block): the wheels' tuned configs for sm120 are of a few intermediate widths
    (field round 40, backends/triton.yaml's second row), so this layer's width is refused at 0.5.13 as on GB10, and a
    width a tuned file has is not."""
    r = _explain(**{**GB10, "gpu": "RTX PRO 6000"}, engine_version="0.5.13", quant="fp8_channel")
    assert _codes_from(r, "triton", "triton.yaml") == {"shape_unaligned"}, refusals(r, "triton")
    model = {**SMALL, "moe_intermediate_size": 352}
    r = _explain(**{**GB10, "gpu": "RTX PRO 6000", "model": model}, engine_version="0.5.13", quant="fp8_channel")
    assert not _codes_from(r, "triton", "triton.yaml"), refusals(r, "triton")


# ------------------------------------------------ kind 2: EPMoE's 128x128x128 grouped GEMM on sm86/sm89 (0.4.1 .. 0.4.3.post2)
# Mixtral-8x7B-like bf16/fp16 layers at EP 2: not the round's DeepSeek-V2-Lite at EP 4.
MIX = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu",
       "routing": "renormalize"}
EP16 = dict(engine="sglang", model=MIX, tp=2, a2a="none", runner="auto")


@pytest.mark.parametrize(("where", "sglang", "quant"), [
    ({"gpu": "L40S"}, "0.4.3", "bf16"), ({"arch": "sm86"}, "0.4.1", "fp16"), ({"gpu": "L40S"}, "0.4.3.post2", "fp16")])
def test_epmoe_big_tile_refused_on_99kb_gpus(where, sglang, quant):
    """EP 2 with 16-bit weights on sm89 / sm86 under 0.4.1 .. 0.4.3.post2: refused (parallelism_unsupported, common.yaml)."""
    r = _explain(**EP16, **where, engine_version=sglang, quant=quant, ep=2)
    assert r.plan is None
    detail = only_refusal(r, "triton", "parallelism_unsupported", "common.yaml")
    assert "128x128x128" in detail and "0.4.3.post3" in detail, detail


@pytest.mark.parametrize(("gpu", "sglang", "quant", "ep"), [
    ("L40S", "0.4.3.post3", "bf16", 2),   # 64/32/128 tile
    ("A100", "0.4.2", "bf16", 2),         # sm80: 166912 B per block holds the big tile
    ("L40S", "0.4.3", "fp8_tensor", 2),   # 1-byte tiles: 65536 B
    ("L40S", "0.4.2.post4", "bf16", 1),   # no EP: FusedMoE
])
def test_epmoe_tile_fixed_other_arch_fp8_or_no_ep_planned(gpu, sglang, quant, ep):
    assert_planned(_explain(**EP16, gpu=gpu, engine_version=sglang, quant=quant, ep=ep), "triton")


# ------------------------------------------------ kind 3: SGLang 0.4.1 .. 0.4.2.x with vLLM >= 0.7.0 (int4 MoE methods)
# Qwen3-30B-A3B's shape as int4 (group 128) at TP 2 on A100: not the round's DeepSeek-R1-AWQ at TP 8.
Q3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
      "routing": "renormalize"}
INT4 = dict(gpu="A100", engine="sglang", quant="int4_w4a16", quant_config={"group_size": 128}, model=Q3, tp=2, ep=1,
            a2a="none")


@pytest.mark.parametrize(("sglang", "vllm"), [("0.4.2", "0.7.0"), ("0.4.1", "0.7.1"), ("0.4.2.post1", "0.7.2")])
def test_sglang_042_with_vllm_07_marlin_refused(sglang, vllm):
    """vLLM 0.7.0 .. 0.7.2 under SGLang 0.4.1 .. 0.4.2.x: marlin refused (dependency_missing, marlin.yaml), nothing planned."""
    r = _explain(**INT4, engine_version=sglang, packages={"vllm": vllm}, runner="auto")
    assert r.plan is None
    detail = only_refusal(r, "marlin", "dependency_missing", "marlin.yaml")
    assert "vllm" in detail, detail


@pytest.mark.parametrize(("sglang", "vllm"), [("0.4.2.post1", "0.6.6.post1"), ("0.4.2", "0.6.4.post1"), ("0.4.3", "0.7.2")])
def test_sglang_042_with_vllm_06_or_sglang_043_marlin_planned(sglang, vllm):
    """vLLM 0.6.x (intermediate_size) under 0.4.2.x, and SGLang 0.4.3 (both keywords) with vLLM 0.7.2: marlin planned."""
    assert_planned(_explain(**INT4, engine_version=sglang, packages={"vllm": vllm}, runner="auto"), "marlin")


@pytest.mark.parametrize("sglang", ["0.4.4.post3", "0.4.3"])
def test_sglang_triton_int4_refused_before_0_4_4_post4(sglang):
    """SGLang's Triton fused MoE has no int4 mode before 0.4.4.post4: refused (quant_unsupported, triton.yaml)."""
    r = _explain(**INT4, engine_version=sglang, runner="triton")
    assert r.plan is None
    only_refusal(r, "triton", "quant_unsupported", "triton.yaml")


def test_sglang_triton_int4_planned_from_0_4_4_post4():
    assert_planned(_explain(**INT4, engine_version="0.4.4.post4", runner="triton"), "triton")


# ------------------------------------------------ kind 4: block FP8 EPMoE on gfx942 (0.4.3.post3 .. 0.4.7), no AITER in EPMoE
# DeepSeek-V3 (block FP8) on 8 MI300X: not the round's DeepSeek-R1 at 0.4.6.post5.
MI = dict(gpu="MI300X", engine="sglang", model_config=DSV3, tp=8, a2a="none")


@pytest.mark.parametrize("sglang", ["0.4.3.post3", "0.4.7"])
def test_mi300x_block_fp8_epmoe_refused(sglang):
    """EP 8 under 0.4.3.post3 and 0.4.7: triton refused (parallelism_unsupported, common.yaml), naming e4m3fnuz."""
    r = _explain(**MI, ep=8, engine_version=sglang, runner="auto")
    assert r.plan is None
    detail = only_refusal(r, "triton", "parallelism_unsupported", "common.yaml")
    assert "e4m3fnuz" in detail, detail


@pytest.mark.parametrize(("gpu", "sglang", "ep"), [("MI300X", "0.4.8", 8), ("MI355X", "0.4.7", 8)])
def test_mi300x_block_fp8_epmoe_fixed_or_gfx950_planned(gpu, sglang, ep):
    """0.4.8 (normalized) and gfx950 (OCP e4m3fn): triton planned at EP 8."""
    assert_planned(_explain(**{**MI, "gpu": gpu}, ep=ep, engine_version=sglang, runner="auto"), "triton")


@pytest.mark.parametrize("sglang", ["0.4.9.post6", "0.4.6.post5"])
def test_sglang_epmoe_never_aiter_before_0_4_10(sglang):
    """aiter at EP 8 without an all-to-all under 0.4.6.post5 / 0.4.9.post6: refused (parallelism_unsupported, aiter.yaml)."""
    r = _explain(**MI, ep=8, engine_version=sglang, runner="aiter")
    assert r.plan is None
    assert _codes_from(r, "aiter", "aiter.yaml") == {"parallelism_unsupported"}, refusals(r, "aiter")


@pytest.mark.parametrize(("sglang", "ep"), [("0.4.10", 8), ("0.4.7", 1)])
def test_sglang_aiter_from_0_4_10_or_without_ep_planned(sglang, ep):
    """0.4.10 (EPMoE falls back to FusedMoE) at EP 8, and 0.4.7 without EP: aiter planned."""
    assert_planned(_explain(**MI, ep=ep, engine_version=sglang, runner="aiter"), "aiter")


# ------------------------------------------------ kind 5: the fused MoE's last-chunk slice with FP8 (0.4.1 .. 0.4.3.x)
# DeepSeek-V3 (block FP8) on 8 H100 and a Mixtral-like FP8 per-channel layer: not the round's DeepSeek-R1 on H200.
TOK = dict(gpu="H100", engine="sglang", tp=8, ep=1, a2a="none", runner="triton")


@pytest.mark.parametrize(("sglang", "model", "tokens"), [
    ("0.4.2.post4", {"model_config": DSV3}, 65537), ("0.4.3.post4", {"model_config": DSV3}, 100000),
    ("0.4.1", {"model": MIX, "quant": "fp8_channel"}, 131072)])
def test_fp8_forward_over_64k_tokens_refused(sglang, model, tokens):
    """Over 65536 tokens per rank with FP8 under 0.4.1 .. 0.4.3.post4: refused (parallelism_unsupported, triton.yaml)."""
    r = _explain(**TOK, **model, engine_version=sglang, max_tokens_per_rank=tokens)
    assert r.plan is None
    detail = only_refusal(r, "triton", "parallelism_unsupported", "triton.yaml")
    assert "65536" in detail, detail


@pytest.mark.parametrize(("sglang", "model", "tokens"), [
    ("0.4.3.post4", {"model_config": DSV3}, 65536),              # one chunk
    ("0.4.4", {"model_config": DSV3}, 131072),                   # the tokens x top_k slice
    ("0.4.3", {"model": MIX, "quant": "bf16"}, 131072)])         # 16-bit: the full cache behind the view
def test_fp8_forward_within_chunk_fixed_or_bf16_planned(sglang, model, tokens):
    assert_planned(_explain(**TOK, **model, engine_version=sglang, max_tokens_per_rank=tokens), "triton")


# ------------------------------------------------ kind 6: EPMoE block FP8 (from 0.4.3.post3)
# DeepSeek-R1 on 8 H100 at EP 8: not the round's DeepSeek-V3 on 4 H20.
BLK = dict(gpu="H100", engine="sglang", model_config=DSR1, tp=8, a2a="none", runner="auto")


@pytest.mark.parametrize("sglang", ["0.4.1", "0.4.3"])
def test_epmoe_block_fp8_refused_before_0_4_3_post3(sglang):
    """EP 8 under 0.4.1 and 0.4.3: refused (parallelism_unsupported, common.yaml), naming the scale_inv parameters."""
    r = _explain(**BLK, ep=8, engine_version=sglang)
    assert r.plan is None
    detail = only_refusal(r, "triton", "parallelism_unsupported", "common.yaml")
    assert "weight_scale_inv" in detail, detail


@pytest.mark.parametrize(("sglang", "ep"), [("0.4.3.post3", 8), ("0.4.3", 1)])
def test_epmoe_block_fp8_from_0_4_3_post3_or_without_ep_planned(sglang, ep):
    assert_planned(_explain(**BLK, ep=ep, engine_version=sglang), "triton")

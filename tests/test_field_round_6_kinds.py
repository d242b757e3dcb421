"""Field round 6 of issue 21 (tests/cases/field_round_6.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case, on both sides of each version bound.

1. vLLM before 0.20.0 rounds the MoE hidden size up for DeepEP (low_latency sizes; 512-byte atoms for high_throughput)
   and copies the unpadded checkpoint experts into the padded weights: the worker fails at load (vllm-project/vllm#36926;
   backends/a2a/deepep.yaml). Any 16-bit checkpoint whose hidden size is rounded, not NemotronH only.
2. AITER's CK MXFP4 MoE needs a per-rank intermediate that is a multiple of 256, and vLLM before 0.18.0 neither pads
   it nor falls back (vllm-project/vllm#35637, #35893; backends/aiter.yaml).
3. TensorRT-LLM's device gates (TRTLLMGenFusedMoE, DeepGemmFusedMoE can_implement: SM_UNSUPPORTED before any format is
   read) refuse the GPU: arch_unsupported, not quant_unsupported (NVIDIA/TensorRT-LLM#10679; backends/trtllm_gen.yaml,
   backends/trtllm_deepgemm.yaml). CUTLASS's per-format SM table stays quant_unsupported: the GPU runs other formats.
4. ROCm/aiter#5049 (GLM-5.3-Flash block FP8 on gfx950): decided without a fact. The report is open, names no AITER
   release and its fault was not confirmed by anyone else: the shape stays planned (the round case stays xfail).
5. vLLM enables AITER only on gfx942/gfx950 (is_aiter_found_and_supported: on_mi3xx from 0.19.0): aiter's archs list
   is exhaustive under vLLM (ROCm/aiter#4492; backends/aiter.yaml); SGLang's gate checks no ROCm arch (open).
6. AITER v0.1.8 .. v0.1.15 ship a gfx950 block-FP8 1-stage kernel (fmoe_bf16_blockscaleFp8_g1u1_vs_silu_32x384) that
   writes out of bounds, picked where 384 divides the per-rank intermediate; rebuilt in v0.1.15.post1 / v0.1.16
   (ROCm/aiter#3471, PR #3540; backends/aiter.yaml).
7. vLLM's AITER experts take SiLU, GELU and SwiGLU-OAI only (_supports_activation; 'Unsupported activation' else):
   aiter's activations list is exhaustive under vLLM (ROCm/aiter#2484; backends/aiter.yaml); SGLang open.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import planned as _planned, reason_of as _reason, report_codes as _codes

QWEN_FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
QWEN_NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
GPT_OSS_120B = str(CONFIGS / "openai__gpt-oss-120b")
# Qwen1.5-MoE-A2.7B's MoE (moe_intermediate_size 1408: 704 rows per rank at TP 2, 704 % 256 = 192), the shape of
# vllm-project/vllm PR #38166's gfx950 CK MXFP4 crash, written inline with an MXFP4 format.
QWEN15 = {"num_experts": 60, "top_k": 4, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
          "routing": "softmax_topk", "num_shared_experts": 1}
# MiniMax-M2.x's MoE (hidden 3072, 256 experts, top 8, 1536 wide, sigmoid routing, no shared expert).
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "sigmoid_topk", "num_shared_experts": 0}
BASE = {"tp": 1, "ep": 1, "a2a": "none"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


# --------------------------------------------------------------------- kind 2: AITER CK MXFP4 needs 256 rows per rank
@pytest.mark.parametrize("version", ["0.16.0", "0.17.0", "0.17.1"])
def test_aiter_ck_mxfp4_unaligned_rows_refused_before_vllm_0_18(version):
    """Qwen1.5-MoE MXFP4 at TP 2 on MI355X: 704 rows per rank, not a multiple of 256; vLLM before 0.18.0 hands it to
    AITER's CK MXFP4 MoE unpadded, which has no GEMM instance for it."""
    r = _explain(gpu="MI355X", engine="vllm", engine_version=version, quant="mxfp4", model=QWEN15, tp=2,
                 runner="aiter")
    assert r.plan is None and _codes(r) == {"shape_unaligned"}
    reason = _reason(r, "shape_unaligned", "aiter")
    assert reason.source.startswith("backends/aiter.yaml:")
    assert "intermediate_per_rank = 704 is not a multiple of 256" in reason.detail and "vllm <0.18.0" in reason.detail


def test_aiter_ck_mxfp4_from_vllm_0_18_is_not_refused_for_the_shape():
    """vllm-project/vllm#35893 (first in 0.18.0) stops the crash, and current vLLM pads the rows to 256: the same
    deployment is planned from 0.18.0 and at the current engine."""
    for version in ("0.18.0", None):
        dep = dict(gpu="MI355X", engine="vllm", quant="mxfp4", model=QWEN15, tp=2, runner="aiter")
        r = _explain(**dep, **({"engine_version": version} if version else {}))
        assert _planned(r, "aiter"), (version, [(x.code, x.detail) for x in r.reasons])


def test_aiter_ck_mxfp4_aligned_rows_planned_at_vllm_0_16():
    """MiniMax-M2.1 MXFP4 at TP 2 (768 rows per rank, 3 x 256) ran on vLLM 0.16.0 in the report: planned."""
    r = _explain(gpu="MI355X", engine="vllm", engine_version="0.16.0", quant="mxfp4", model=MINIMAX, tp=2,
                 runner="aiter")
    assert _planned(r, "aiter")


def test_aiter_ck_mxfp4_row_rule_leaves_gpt_oss_and_sglang_alone():
    """gpt-oss (swiglu_oai) is padded to 256 on gfx950 by vLLM's MXFP4 path (get_padding_alignment), so gpt-oss-120b at
    TP 8 (360 rows per rank) is not refused at 0.17.1; and the fact is vLLM's (SGLang's padding was not read)."""
    oss = _explain(gpu="MI355X", engine="vllm", engine_version="0.17.1", model_config=GPT_OSS_120B, tp=8,
                   runner="aiter")
    assert "shape_unaligned" not in _codes(oss)
    # SGLang is not reached by this vLLM fact; a SiLU MXFP4 MoE there meets AITER's CK-Tile kernel row instead.
    sgl = _explain(gpu="MI355X", engine="sglang", quant="mxfp4", model=QWEN15, tp=2, runner="aiter")
    assert not any(r.code == "shape_unaligned" and "vllm <0.18.0" in r.detail for r in sgl.reasons)
    assert all("CK-Tile" in r.detail for r in sgl.reasons if r.code == "shape_unaligned"), sgl.reasons


# --------------------------------------------------------------- kind 3: TensorRT-LLM device gates refuse the GPU
@pytest.mark.parametrize(("gpu", "model_config"), [("H200", QWEN_NVFP4), ("H100", QWEN_FP8)])
def test_trtllm_gen_on_hopper_is_refused_as_an_arch(gpu, model_config):
    """TRTLLMGenFusedMoE.can_implement refuses any SM outside the SM100 family before it reads the format: an NVFP4 or
    block-FP8 Qwen3 on Hopper with moe_config.backend TRTLLM is refused for the GPU."""
    r = _explain(gpu=gpu, engine="trtllm", model_config=model_config, tp=2, runner="trtllm_gen")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    assert _reason(r, "arch_unsupported", "trtllm_gen").source.startswith("backends/trtllm_gen.yaml:")


def test_trtllm_deepgemm_on_hopper_is_refused_as_an_arch():
    """DeepGemmFusedMoE.can_implement: SM {100, 103} only (SM_UNSUPPORTED), a device gate."""
    r = _explain(gpu="H100", engine="trtllm", model_config=QWEN_FP8, tp=2, runner="trtllm_deepgemm")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    assert _reason(r, "arch_unsupported", "trtllm_deepgemm").source.startswith("backends/trtllm_deepgemm.yaml:")


def test_trtllm_cutlass_per_format_sm_table_stays_a_format_refusal():
    """CUTLASS refuses block FP8 on B200 through its per-format SM table, yet runs NVFP4 there: the format on this GPU
    (quant_unsupported), not the GPU."""
    fp8 = _explain(gpu="B200", engine="trtllm", model_config=QWEN_FP8, tp=2, runner="trtllm_cutlass")
    assert fp8.plan is None and "quant_unsupported" in _codes(fp8) and "arch_unsupported" not in _codes(fp8)
    assert _planned(_explain(gpu="B200", engine="trtllm", model_config=QWEN_NVFP4, tp=2, runner="trtllm_cutlass"),
                    "trtllm_cutlass")


# ------------------------------------------------------------------ kind 5: vLLM's AITER device gate (on_mi3xx)
QWEN_BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")


@pytest.mark.parametrize("gpu", ["W7900", "H100", "MI250"])
def test_vllm_aiter_off_mi3xx_is_refused_as_an_arch(gpu):
    """An RDNA3 W7900 (gfx1100), an H100 and an MI250 (gfx90a) asked for --moe-backend aiter under vLLM: vLLM's AITER
    ops run only where is_aiter_found_and_supported() (ROCm, on_mi3xx), so AiterExperts refuses the device."""
    r = _explain(gpu=gpu, engine="vllm", model_config=QWEN_BF16, runner="aiter")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    reason = _reason(r, "arch_unsupported", "aiter")
    assert reason.source.startswith("backends/aiter.yaml:") and "on_mi3xx" in reason.detail


def test_vllm_aiter_on_mi3xx_planned_and_sglang_left_open():
    """MI300X (gfx942) is planned under vLLM; under SGLang the gate (SGLANG_USE_AITER and is_hip) checks no ROCm arch,
    so a W7900 stays unverified there, not refused."""
    assert _planned(_explain(gpu="MI300X", engine="vllm", model_config=QWEN_BF16, runner="aiter"), "aiter")
    sgl = _explain(gpu="W7900", engine="sglang", model_config=QWEN_BF16, runner="aiter")
    assert _planned(sgl, "aiter") and sgl.evidence == "unverified"


# ------------------------------------------------- kind 6: AITER's gfx950 32x384 block-FP8 kernel, v0.1.8 .. v0.1.15
QWEN235_FP8 = str(CONFIGS / "Qwen__Qwen3-235B-A22B-FP8")
# GLM-5.3-Flash's MoE shape (2048 wide: 256 rows per rank at TP 8, not a multiple of 384).
GLM53 = {"num_experts": 288, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu",
         "routing": "deepseek_v3", "num_shared_experts": 1}


@pytest.mark.parametrize(("engine", "tp", "aiter"), [("vllm", 4, "0.1.12"), ("sglang", 2, "0.1.8"), ("vllm", 4, "0.1.15")])
def test_aiter_32x384_releases_refuse_block_fp8_where_384_divides_the_rows(engine, tp, aiter):
    """Qwen3-235B-A22B-FP8 on MI355X (1536 wide: 384 rows per rank at TP 4, 768 at TP 2) with an AITER release that
    ships the out-of-bounds 32x384 kernel: refused in either engine, naming the releases."""
    r = _explain(gpu="MI355X", engine=engine, model_config=QWEN235_FP8, tp=tp, runner="aiter",
                 packages={"amd-aiter": aiter})
    assert r.plan is None and _codes(r) == {"quant_unsupported"}
    reason = _reason(r, "quant_unsupported", "aiter")
    assert reason.source.startswith("backends/aiter.yaml:") and "amd-aiter >=0.1.8,<0.1.15.post1" in reason.detail


@pytest.mark.parametrize("aiter", ["0.1.15.post1", "0.1.16", "0.1.7.post5"])
def test_aiter_32x384_outside_the_releases_is_planned(aiter):
    """The rebuilt kernel (PR #3540: v0.1.15.post1, v0.1.16) and a release before the kernel existed (v0.1.7.post5)
    plan the same deployment."""
    r = _explain(gpu="MI355X", engine="vllm", model_config=QWEN235_FP8, tp=4, runner="aiter",
                 packages={"amd-aiter": aiter})
    assert _planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


def test_aiter_32x384_is_gfx950_and_384_rows_only():
    """gfx942 ships no such kernel (MI300X planned), and 256 rows per rank (GLM-5.3-Flash at TP 8) is no multiple of
    384 (planned at 0.1.12)."""
    mi300 = _explain(gpu="MI300X", engine="vllm", model_config=QWEN235_FP8, tp=4, runner="aiter",
                     packages={"amd-aiter": "0.1.12"})
    assert _planned(mi300, "aiter")
    glm = _explain(gpu="MI350X", engine="vllm", quant="fp8_block", model=GLM53, tp=8, runner="aiter",
                   packages={"amd-aiter": "0.1.12"})
    assert _planned(glm, "aiter"), [(x.code, x.detail) for x in glm.reasons]


# ------------------------------------------------ kind 1: vLLM < 0.20.0 cannot load experts DeepEP's rounding padded
# gpt-oss-20b's MoE written as a 16-bit layer (hidden 2880: DeepEP low_latency rounds it to 3072, high_throughput to
# 3072 as well: 5760 bytes to whole 512-byte atoms).
OSS_BF16 = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
            "activation": "swiglu_oai", "routing": "renormalize", "num_shared_experts": 0}
# Nemotron-3-Nano's MoE without a checkpoint architecture: the refusal is the hidden size's, not the model's.
NANO = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856, "activation": "relu2",
        "routing": "deepseek_v3", "num_shared_experts": 1}
DEEPEP = {"gpu": "H100", "engine": "vllm", "quant": "bf16", "tp": 1, "dp": 2, "ep": 2, "a2a": "deepep"}


def _deepep_reasons(report: Any) -> set[str]:
    return {r.code for r in report.reasons if r.source.startswith("backends/a2a/deepep.yaml:")}


@pytest.mark.parametrize(("model", "mode", "version"), [(OSS_BF16, "low_latency", "0.18.1"),
                                                         (OSS_BF16, "normal", "0.16.0"),
                                                         (NANO, "normal", "0.19.1")])
def test_vllm_before_0_20_refuses_deepep_rounded_hidden_sizes(model, mode, version):
    """A 16-bit MoE whose hidden size DeepEP rounds up (2880, 2688) under vLLM before 0.20.0, in either DeepEP mode:
    the expert weights are created at the rounded size and the loader copies the checkpoint's as is."""
    r = _explain(**DEEPEP, model=model, a2a_mode=mode, engine_version=version)
    assert r.plan is None and _deepep_reasons(r) == {"shape_unaligned"}
    reason = next(x for x in r.reasons if x.source.startswith("backends/a2a/deepep.yaml:"))
    assert "vllm <0.20.0" in reason.detail and "hidden_size" in reason.detail


@pytest.mark.parametrize("mode", ["low_latency", "normal"])
def test_vllm_0_20_loads_rounded_hidden_sizes(mode):
    """From 0.20.0 FusedMoE._narrow_expert_data_for_padding narrows the padded hidden dimension: planned."""
    for version in ("0.20.0", None):
        extra = {"engine_version": version} if version else {}
        r = _explain(**DEEPEP, model=NANO, a2a_mode=mode, **extra)
        assert r.plan is not None and not _deepep_reasons(r), (version, [(x.code, x.detail) for x in r.reasons])


def test_vllm_deepep_sizes_it_does_not_round_load_before_0_20():
    """Qwen3-30B-A3B's hidden 2048 is a low_latency size and a multiple of 256: nothing is padded, planned at 0.17.1;
    and SGLang, which does not pad, keeps its own list (2688 refused there by DeepEP's kernels, not by this fact)."""
    r = _explain(**{**DEEPEP, "quant": None}, model_config=QWEN_BF16, a2a_mode="low_latency", engine_version="0.17.1")
    assert r.plan is not None, [(x.code, x.detail) for x in r.reasons]
    sgl = _explain(**{**DEEPEP, "engine": "sglang", "tp": 2, "dp": None}, model=NANO, a2a_mode="low_latency")
    assert not any("vllm <0.20.0" in x.detail for x in sgl.reasons)


def test_vllm_deepep_low_latency_above_8192_is_refused():
    """vLLM's low_latency rounding raises for a hidden size above its largest size (8192), at every release read."""
    big = {**NANO, "hidden_size": 12288, "moe_intermediate_size": 2048, "activation": "silu"}
    r = _explain(**DEEPEP, model=big, a2a_mode="low_latency")
    assert r.plan is None and "shape_unaligned" in _deepep_reasons(r)


# ------------------------------------------------------ kind 7: vLLM's AITER experts compute SiLU, GELU, SwiGLU-OAI
def _layer(activation: str) -> dict:
    return {"num_experts": 64, "top_k": 4, "hidden_size": 2048, "moe_intermediate_size": 1024, "activation": activation,
            "routing": "renormalize", "num_shared_experts": 0}


@pytest.mark.parametrize(("gpu", "quant", "activation"), [("MI300X", "bf16", "relu2"), ("MI355X", "fp8_tensor", "swiglustep"),
                                                          ("MI355X", "fp8_block", "geglu")])
def test_vllm_aiter_refuses_activations_outside_its_mapping(gpu, quant, activation):
    """Nemotron's ReLU^2, Step-3.5's SwiGLU-step and an activation no fact knows, asked of AITER under vLLM:
    AiterExperts._supports_activation takes SILU, GELU and SWIGLUOAI only (rocm_aiter_fused_experts raises
    'Unsupported activation' for any other)."""
    r = _explain(gpu=gpu, engine="vllm", quant=quant, model=_layer(activation), runner="aiter")
    assert r.plan is None and _codes(r) == {"activation_unsupported"}
    reason = _reason(r, "activation_unsupported", "aiter")
    assert reason.source.startswith("backends/aiter.yaml:") and "_supports_activation" in reason.detail


def test_vllm_aiter_swiglu_oai_only_with_mxfp4_and_sglang_left_open():
    """SwiGLU-OAI runs as MXFP4 on gfx950 (planned); a bf16 one is refused (vLLM hands AITER the expert biases for
    MXFP4 W4A16 only); SiLU bf16 is planned; and SGLang's AITER activations stay open (SwiGLU-step unverified)."""
    assert _planned(_explain(gpu="MI355X", engine="vllm", quant="mxfp4", model=_layer("swiglu_oai"), runner="aiter"),
                    "aiter")
    bf16 = _explain(gpu="MI300X", engine="vllm", quant="bf16", model=_layer("swiglu_oai"), runner="aiter")
    assert bf16.plan is None and _codes(bf16) == {"activation_unsupported"}
    assert _planned(_explain(gpu="MI300X", engine="vllm", quant="bf16", model=_layer("silu"), runner="aiter"), "aiter")
    sgl = _explain(gpu="MI300X", engine="sglang", quant="fp8_block", model=_layer("swiglustep"), runner="aiter")
    assert _planned(sgl, "aiter") and sgl.evidence == "unverified"


# ---------------------------------------------- kind 4: an unconfirmed fault report is no refusal (ROCm/aiter#5049)
@pytest.mark.parametrize("aiter", [None, "0.1.19.post2", "0.1.20.post1"])
def test_glm53_block_fp8_on_gfx950_stays_planned_without_a_confirmed_report(aiter):
    """GLM-5.3-Flash's block-FP8 MoE on MI350X at TP 8 (288 experts, top 8, 256 rows per rank) with AITER: the fault
    report (open, no AITER release named, not reproduced by the one commenter who ran the default kernel) decides
    nothing, so no fact refuses it and aiter is planned on its support rows."""
    extra = {"packages": {"amd-aiter": aiter}} if aiter else {}
    r = _explain(gpu="MI350X", engine="vllm", quant="fp8_block", model=GLM53, tp=8, runner="aiter", vendor_library=True,
                 **extra)  # vLLM's AITER runs only under VLLM_ROCM_USE_AITER (backends/aiter.yaml)
    assert _planned(r, "aiter") and r.evidence == "supported", [(x.code, x.detail) for x in r.reasons]

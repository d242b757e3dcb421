"""Field round 7 of issue 21 (tests/cases/field_round_7.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case, on both sides of each version bound.

1. SGLang before 0.4.10 runs every expert-parallel MoE in its EPMoE layer (--enable-ep-moe; DeepEPMoE is one), which
   takes unquantized or Fp8Config weights only (sgl-project/sglang#6234; backends/common.yaml): ep > 1 with another
   format is refused (parallelism_unsupported), by format and first release that took it (NVFP4 0.4.8, W4AFp8 0.4.9.post1).
2. FlashInfer's TRT-LLM-gen NVFP4 weight shuffle asserts 128 gate+up rows per rank (64 per rank when gated), and vLLM
   before 0.26.0 pads a gated layer to 16 only (flashinfer-ai/flashinfer#3206, vllm-project/vllm#46880;
   backends/flashinfer_trtllm.yaml, flashinfer_trtllm_routed.yaml).
4. SGLang v0.5.12 / v0.5.12.post1's flashinfer_trtllm corrupts MiniMax-M2.7-NVFP4 output on B200 (reported, cause not
   identified; sgl-project/sglang#26324): refused only for NVFP4 with MiniMax's sigmoid_topk routing on SM100 there.
(Kind 3, the per-token NVFP4 tile-192 NaNs of FlashInfer 0.6.16.post4 .. 0.6.17, is left unfixed: no deployment input
says per-token NVFP4; tests/cases/field_round_7.yaml says why.)
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import report_codes as _codes

QWEN_AWQ = str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ")
QWEN235_FP8 = str(CONFIGS / "Qwen__Qwen3-235B-A22B-FP8")
# Qwen3-235B-A22B's MoE, written inline so that a format can be given without a checkpoint of it.
QWEN235 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "renormalize"}
QWEN_NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
BASE = {"tp": 1, "ep": 1, "a2a": "none"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _ep_moe(report: Any) -> list[Any]:
    """The reasons given by SGLang's old-EPMoE facts (backends/common.yaml)."""
    return [r for r in report.reasons if r.code == "parallelism_unsupported" and "EPMoE" in r.detail
            and r.source.startswith("backends/common.yaml:")]


# --------------------------------------------------------------------- kind 1: SGLang's pre-0.4.10 EPMoE formats
@pytest.mark.parametrize("version", ["0.4.1", "0.4.6.post5", "0.4.8", "0.4.9.post6"])
def test_old_sglang_ep_moe_refuses_awq(version):
    """Qwen3-30B-A3B-AWQ at TP 2 with EP 2 on H100: EPMoE hands the AWQ config to Fp8EPMoEMethod (or raises
    'Unsupported quant_config' from 0.4.9.post6): no runner can serve it."""
    r = _explain(gpu="H100", engine="sglang", engine_version=version, model_config=QWEN_AWQ, tp=2, ep=2)
    assert r.plan is None
    assert _ep_moe(r), [(x.code, x.detail) for x in r.reasons]
    assert "ep = 2 is above 1" in _ep_moe(r)[0].detail and "sglang >=0.4.1,<0.4.10" in _ep_moe(r)[0].detail


def test_old_sglang_ep_moe_refuses_int8_over_deepep():
    """DeepEPMoE is an EPMoE: an int8 W8A8 layer over DeepEP at EP 8 on SGLang 0.4.6.post2 is refused too."""
    r = _explain(gpu="H100", engine="sglang", engine_version="0.4.6.post2", model=QWEN235, quant="int8_w8a8",
                 tp=8, ep=8, a2a="deepep")
    assert r.plan is None and _ep_moe(r)


def test_old_sglang_ep_moe_keeps_fp8_and_tp_only():
    """FP8 (Fp8Config) at EP 4 and AWQ without EP (FusedMoE) are not refused by the EPMoE facts at 0.4.6.post2."""
    fp8 = _explain(gpu="H100", engine="sglang", engine_version="0.4.6.post2", model_config=QWEN235_FP8, tp=4, ep=4)
    assert fp8.plan is not None and not _ep_moe(fp8)
    awq = _explain(gpu="H100", engine="sglang", engine_version="0.4.6.post2", model_config=QWEN_AWQ, tp=2)
    assert awq.plan is not None and not _ep_moe(awq)


@pytest.mark.parametrize("version", ["0.4.10", "0.5.2", None])
def test_sglang_0_4_10_ep_moe_takes_awq(version):
    """From 0.4.10 EPMoE is a FusedMoE with the config's own quant method: AWQ at EP 2 is not refused by these facts."""
    dep = dict(gpu="H100", engine="sglang", model_config=QWEN_AWQ, tp=2, ep=2)
    r = _explain(**dep, **({"engine_version": version} if version else {}))
    assert not _ep_moe(r) and r.plan is not None


def test_old_sglang_ep_moe_format_bounds():
    """NVFP4 at EP 2 on B200 is refused before 0.4.8 (FlashInfer's FusedMoE path from 0.4.8); int4_w4a8 before
    0.4.9.post1 (W4AFp8MoEMethod in EPMoE from then)."""
    nv = dict(gpu="B200", engine="sglang", model_config=QWEN_NVFP4, tp=2, ep=2)
    assert _ep_moe(_explain(**nv, engine_version="0.4.7"))
    assert not _ep_moe(_explain(**nv, engine_version="0.4.8"))
    w4 = dict(gpu="H100", engine="sglang", model=QWEN235, quant="int4_w4a8", tp=4, ep=4)
    assert _ep_moe(_explain(**w4, engine_version="0.4.9"))
    assert not _ep_moe(_explain(**w4, engine_version="0.4.9.post1"))


# --------------------------------------------------------------------- kind 2: NVFP4 shuffle rows under vLLM < 0.26
def _shuffle(report: Any, runner: str) -> list[Any]:
    """The reasons given by the NVFP4 weight-shuffle alignment fact of ``runner``."""
    return [r for r in report.reasons if r.code == "shape_unaligned" and r.backend == runner
            and "multiple of 64" in r.detail and "get_shuffle_matrix_sf_a_row_indices" in r.detail]


@pytest.mark.parametrize("version", ["0.16.0", "0.20.0", "0.25.1"])
def test_trtllm_nvfp4_shuffle_refuses_96_rows_per_rank_before_vllm_0_26(version):
    """Qwen3-30B-A3B-NVFP4 at TP 8 on B200: 768 / 8 = 96 rows per rank, 2 x 96 = 192 gate+up rows, not a multiple of 128;
    vLLM pads it to 16 only (96 stays): FlashInfer's shuffle asserts at load."""
    r = _explain(gpu="B200", engine="vllm", engine_version=version, model_config=QWEN_NVFP4, tp=8,
                 runner="flashinfer_trtllm")
    assert r.plan is None and _codes(r) == {"shape_unaligned"}
    (reason,) = _shuffle(r, "flashinfer_trtllm")
    assert reason.source.startswith("backends/flashinfer_trtllm.yaml:")
    assert "intermediate_per_rank = 96 is not a multiple of 64" in reason.detail and "vllm >=0.16.0,<0.26.0" in reason.detail


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0", None])
def test_trtllm_nvfp4_shuffle_padded_from_vllm_0_26(version):
    """vllm-project/vllm#46880 (first in 0.26.0) pads a gated NVFP4 intermediate to 64 (96 -> 128): planned."""
    dep = dict(gpu="B200", engine="vllm", model_config=QWEN_NVFP4, tp=8, runner="flashinfer_trtllm")
    r = _explain(**dep, **({"engine_version": version} if version else {}))
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm", [(x.code, x.detail) for x in r.reasons]


def test_trtllm_nvfp4_shuffle_rule_scope():
    """Aligned per-rank widths (768 / 4 = 192 = 3 x 64), SGLang (pads to 128) and the engines' other runners are not
    refused by it; the routed runner, on the same weight prep, is (Gemma-4-26B-A4B's 704 at TP 4, gelu)."""
    ok = _explain(gpu="B200", engine="vllm", engine_version="0.20.0", model_config=QWEN_NVFP4, tp=4,
                  runner="flashinfer_trtllm")
    assert ok.plan is not None and not _shuffle(ok, "flashinfer_trtllm")
    sgl = _explain(gpu="B200", engine="sglang", model_config=QWEN_NVFP4, tp=8, runner="flashinfer_trtllm")
    assert not _shuffle(sgl, "flashinfer_trtllm")
    auto = _explain(gpu="B200", engine="vllm", engine_version="0.20.0", model_config=QWEN_NVFP4, tp=8)
    assert auto.plan is not None and auto.plan.runner != "flashinfer_trtllm"
    gemma = {"num_experts": 128, "top_k": 8, "hidden_size": 2816, "moe_intermediate_size": 704, "activation": "gelu",
             "routing": "renormalize"}
    routed = _explain(gpu="B200", engine="vllm", engine_version="0.25.0", quant="nvfp4", model=gemma, tp=4,
                      runner="flashinfer_trtllm_routed")
    assert routed.plan is None and _shuffle(routed, "flashinfer_trtllm_routed")


# --------------------------------------------------------------------- kind 4: reported corrupt MiniMax NVFP4 output
# MiniMax-M2's MoE (hidden 3072, 256 experts, top 8, 1536 wide, sigmoid routing), written inline with NVFP4.
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "sigmoid_topk"}


def _minimax(report: Any) -> list[Any]:
    """The reasons given by the reported-corruption routing fact of flashinfer_trtllm."""
    return [r for r in report.reasons if r.code == "routing_unsupported" and r.backend == "flashinfer_trtllm"
            and "sglang >=0.5.12,<=0.5.12.post1" in r.detail]


@pytest.mark.parametrize("version", ["0.5.12", "0.5.12.post1"])
def test_minimax_nvfp4_trtllm_refused_at_reported_sglang(version):
    """MiniMax-M2-shaped NVFP4 at TP 8 (192 rows per rank) on B200 with flashinfer_trtllm asked for: refused at both
    releases the report reproduced; auto plans another runner."""
    dep = dict(gpu="B200", engine="sglang", engine_version=version, quant="nvfp4", model=MINIMAX, tp=8)
    r = _explain(**dep, runner="flashinfer_trtllm")
    assert r.plan is None and _minimax(r) and _codes(r) == {"routing_unsupported"}
    assert _minimax(r)[0].source.startswith("backends/flashinfer_trtllm.yaml:")
    auto = _explain(**dep)
    assert auto.plan is not None and auto.plan.runner != "flashinfer_trtllm"


def test_minimax_nvfp4_trtllm_refusal_is_narrow():
    """Outside the report's conditions the fact is silent: SGLang 0.5.11 and 0.5.13, B300 (SM103, not tested there),
    FP8 weights, renormalize routing (Qwen3-30B-A3B-NVFP4) at 0.5.12.post1."""
    base = dict(gpu="B200", engine="sglang", quant="nvfp4", model=MINIMAX, tp=8, runner="flashinfer_trtllm")
    for dep in (dict(base, engine_version="0.5.11"), dict(base, engine_version="0.5.13"),
                dict(base, engine_version="0.5.12.post1", gpu="B300"),
                dict(base, engine_version="0.5.12.post1", quant="fp8_block")):
        r = _explain(**dep)
        assert not _minimax(r), dep
    qwen = _explain(gpu="B200", engine="sglang", engine_version="0.5.12.post1", model_config=QWEN_NVFP4, tp=4,
                    runner="flashinfer_trtllm")
    assert not _minimax(qwen) and qwen.plan is not None

"""vLLM facts of issue 21 left open after field round 21, tested on both sides of each bound (not the rounds' cases:
round 8's Gemma-4 at 704 and round 21's at 176 per rank are in tests/cases).

1. vLLM's FlashInferExperts._supports_activation names GELU_TANH (gated tanh GELU, FlashInfer's Geglu) from 0.24.0
   (0.23.0 does not; still in 0.34.0): a gelu activation row of flashinfer_cutlass.yaml, vllm >= 0.24.0.
2. With it vLLM's own choice for a bf16 gated-GELU MoE is FlashInfer CUTLASS (TRT-LLM bf16 declines GELU_TANH), which
   hangs at engine init when the per-rank intermediate is not a multiple of 128 (vllm-project/vllm#51492, reported on
   0.26.0 with Gemma-4-26B-A4B at 704 on a B200; vLLM has no guard or padding for it up to 0.34.0): an
   intermediate_per_rank multiple_of 128 constraint for vLLM, bf16, gelu, from 0.24.0. Its source is a report, so the
   engine-choice prediction says vLLM still takes FlashInfer CUTLASS there (a known failure). SiLU and fp16 at such
   widths were not reproduced: not refused.
3. vLLM's CuTe-DSL NVFP4 backends refuse a gated layer whose intermediate_per_rank is not a multiple of 64
   (vllm-project/vllm#48624's kind): the batched one (FLASHINFER_CUTEDSL before 0.20.0, FLASHINFER_CUTEDSL_BATCHED
   after; DeepEP low-latency and NIXL hand it over) through prepare_nvfp4_moe_layer_for_fi_or_cutlass's
   NotImplementedError from 0.14.0 (0.13.0 has no such function) with no upper end; the token-major one
   (FLASHINFER_CUTEDSL from 0.20.0) through interleave_linear_and_gate's assert up to 0.31.x, and it pads from 0.32.0.
   Three constraints of flashinfer_cutedsl.yaml.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, refusals

FICUT = "flashinfer_cutlass"
CUTEDSL = "flashinfer_cutedsl"


def _explain(**dep: Any) -> Any:
    """explain() of ``dep`` without its None keys (a key set to None is one a test leaves out)."""
    return moe_select.explain({k: v for k, v in dep.items() if v is not None})


def _choice(report: Any, engine: str) -> Any:
    return next(c for c in report.engine_choices if c.engine == engine)


# ------------------------------------------------ kind 1: vLLM FlashInferExperts takes gated GELU from 0.24.0
# A 64-expert gated-GELU bf16 MoE, intermediate 1536: 384 per rank at tp 4 (3 x 128), 192 at tp 8 (not a multiple of
# 128, a multiple of 64); not the rounds' Gemma-4 (704).
GELU = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 1536, "activation": "gelu",
        "routing": "renormalize"}
BF16 = dict(gpu="B200", engine="vllm", quant="bf16", model=GELU, ep=1, a2a="none")


@pytest.mark.parametrize("vllm", ["0.24.0", "0.26.0", "0.29.0"])
def test_vllm_gelu_planned_from_0_24_0(vllm):
    """384 per rank, flashinfer_cutlass asked for under 0.24.0 (the first wheel with GELU_TANH), 0.26.0 and 0.29.0 (the
    newest checked): planned, supported."""
    r = _explain(**BF16, runner=FICUT, engine_version=vllm, tp=4)
    assert_planned(r, FICUT)
    assert r.plan.evidence == "supported", [(u.code, u.detail) for u in r.plan.unknowns]


def test_vllm_gelu_still_taken_at_the_newest_release_read():
    """0.34.0 (newer than the releases the other facts were checked at): planned, and its only unknown is that
    newness, not the activation."""
    r = _explain(**BF16, runner=FICUT, engine_version="0.34.0", tp=4)
    assert_planned(r, FICUT)
    assert "activation_unsupported" not in {u.code for u in cand(r, FICUT).unknowns}


@pytest.mark.parametrize("vllm", ["0.22.0", "0.23.0"])
@pytest.mark.parametrize("tp", [4, 8])
def test_vllm_gelu_refused_before_0_24_0(vllm, tp):
    """0.22.0 and 0.23.0 (SILU, RELU2_NO_MUL, SWIGLUOAI only): refused with activation_unsupported alone, aligned or
    not (the alignment constraint starts at 0.24.0 too)."""
    r = _explain(**BF16, runner=FICUT, engine_version=vllm, tp=tp)
    assert r.plan is None
    assert "gelu" in only_refusal(r, FICUT, "activation_unsupported", "flashinfer_cutlass.yaml")


def test_sglang_gelu_unchanged():
    """SGLang's own gelu row (Geglu) is not bounded by vLLM's versions: planned at 0.5.14, aligned."""
    assert_planned(_explain(**{**BF16, "engine": "sglang"}, runner=FICUT, engine_version="0.5.14", tp=4), FICUT)


# ------------------------------------------------ kind 2: bf16 gated GELU hangs below 128-aligned widths (vllm#51492)
@pytest.mark.parametrize("vllm", ["0.24.0", "0.26.0", "0.29.0", "0.34.0"])
def test_bf16_gelu_unaligned_refused(vllm):
    """192 per rank (tp 8) under 0.24.0 .. 0.34.0: refused, shape_unaligned (multiple of 128), by the report-sourced
    constraint alone."""
    r = _explain(**BF16, runner=FICUT, engine_version=vllm, tp=8)
    assert r.plan is None
    detail = only_refusal(r, FICUT, "shape_unaligned", "flashinfer_cutlass.yaml")
    assert "multiple of 128" in detail and "192" in detail, detail


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_bf16_gelu_unaligned_refused_on_every_arch(arch):
    """The PR's condition has no device condition: 192 per rank refused on sm90 and sm120 too (0.26.0)."""
    r = _explain(**{**BF16, "gpu": None, "arch": arch}, runner=FICUT, engine_version="0.26.0", tp=8)
    assert r.plan is None
    assert "multiple of 128" in only_refusal(r, FICUT, "shape_unaligned", "flashinfer_cutlass.yaml")


@pytest.mark.parametrize(("change", "engine_version"), [
    ({"model": {**GELU, "activation": "silu"}}, "0.26.0"),  # SiLU: not reproduced
    ({"quant": "fp16"}, "0.26.0"),  # fp16: not reproduced
    ({"engine": "sglang"}, "0.5.14"),  # SGLang's runner is not vLLM's path
])
def test_unaligned_outside_the_report_not_refused(change, engine_version):
    """192 per rank with SiLU, with fp16, or under SGLang: planned (the constraint is vLLM bf16 gelu only)."""
    assert_planned(_explain(**{**BF16, **change}, runner=FICUT, engine_version=engine_version, tp=8), FICUT)


def test_auto_avoids_the_hang_and_vllm_still_takes_it():
    """runner auto at 192 per rank under 0.26.0: the plan is not flashinfer_cutlass; vLLM's own oracle takes FlashInfer
    CUTLASS (TRT-LLM declines gelu), which the prediction marks as a known failure with the way to follow the plan."""
    r = _explain(**BF16, runner="auto", engine_version="0.26.0", tp=8)
    assert r.plan is not None and r.plan.runner != FICUT
    ch = _choice(r, "vllm")
    assert ch.runner == FICUT and ch.evidence == "known failure" and ch.differs
    assert ch.cost.startswith("the engine's choice is a known failure here: shape_unaligned"), ch.cost
    assert ch.follow == f"--moe-backend {r.plan.runner}"


def test_auto_takes_flashinfer_cutlass_when_aligned():
    """runner auto at 384 per rank under 0.26.0: FlashInfer CUTLASS is planned (the gelu row holds, no constraint)."""
    assert_planned(_explain(**BF16, runner="auto", engine_version="0.26.0", tp=4), FICUT)


def test_auto_before_0_24_0_not_flashinfer_cutlass():
    """runner auto at 384 per rank under 0.23.0: FlashInfer CUTLASS is not planned (no GELU_TANH there)."""
    r = _explain(**BF16, runner="auto", engine_version="0.23.0", tp=4)
    assert r.plan is not None and r.plan.runner != FICUT
    assert "activation_unsupported" in refusals(r, FICUT)


# ------------------------------------------------ kind 3: vLLM CuTe-DSL NVFP4 gated layers need I per rank % 64
# Token-major (a2a none): intermediate 1408 is 704 per rank at tp 2 (11 x 64) and 352 at tp 4 (not a multiple of 64).
NV = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
      "routing": "renormalize"}
STD = dict(gpu="B200", engine="vllm", quant="nvfp4", model=NV, ep=1, a2a="none", runner=CUTEDSL)
# Batched (DeepEP low-latency, EP 4: the whole intermediate per rank): 1440 (22.5 x 64) against 1408.
EP_UNALIGNED = {**NV, "moe_intermediate_size": 1440}
LL = dict(gpu="B200", engine="vllm", quant="nvfp4", tp=4, ep=4, a2a="deepep", a2a_mode="low_latency", runner=CUTEDSL)


@pytest.mark.parametrize("vllm", ["0.20.0", "0.26.0", "0.31.0"])
def test_token_major_unaligned_refused_0_20_to_0_31(vllm):
    """352 per rank, a2a none, under 0.20.0 (the first with the token-major backend), 0.26.0, 0.31.0 (the last without
    its padding): refused, shape_unaligned (multiple of 64)."""
    r = _explain(**STD, engine_version=vllm, tp=4)
    assert r.plan is None
    detail = only_refusal(r, CUTEDSL, "shape_unaligned", "flashinfer_cutedsl.yaml")
    assert "multiple of 64" in detail and "352" in detail and "interleave_linear_and_gate" in detail, detail


@pytest.mark.parametrize("vllm", ["0.20.0", "0.31.0"])
def test_token_major_aligned_planned(vllm):
    """704 per rank (tp 2) under 0.20.0 and 0.31.0: planned."""
    assert_planned(_explain(**STD, engine_version=vllm, tp=2), CUTEDSL)


@pytest.mark.parametrize("vllm", ["0.32.0", "0.34.0"])
def test_token_major_padded_from_0_32_0(vllm):
    """352 per rank, a2a none, under 0.32.0 (align_fp4_moe_weights_for_fi first) and 0.34.0: planned."""
    assert_planned(_explain(**STD, engine_version=vllm, tp=4), CUTEDSL)


def test_token_major_before_0_20_0_not_this_constraint():
    """Before 0.20.0 vLLM had no token-major CuTe-DSL backend (FLASHINFER_CUTEDSL was the batched one): no alignment
    refusal is stated for a2a none there (the batched constraint names the batched all-to-alls only)."""
    r = _explain(**STD, engine_version="0.19.0", tp=4)
    assert "shape_unaligned" not in refusals(r, CUTEDSL)


@pytest.mark.parametrize(("vllm", "line_of"), [("0.14.0", "batched"), ("0.19.0", "batched"), ("0.20.0", "every"),
                                               ("0.31.0", "every"), ("0.32.0", "batched"), ("0.34.0", "batched")])
def test_batched_unaligned_refused_from_0_14_0(vllm, line_of):
    """1440 per rank over DeepEP low-latency under 0.14.0 (the first with prepare_nvfp4_moe_layer_for_fi_or_cutlass),
    0.19.0, 0.20.0, 0.31.0, 0.32.0 and 0.34.0: refused (shape_unaligned), by the batched constraint outside 0.20.0 ..
    0.31.x and by the every-format one inside it."""
    r = _explain(**LL, model=EP_UNALIGNED, engine_version=vllm)
    assert r.plan is None
    detail = only_refusal(r, CUTEDSL, "shape_unaligned", "flashinfer_cutedsl.yaml")
    assert "multiple of 64" in detail and "1440" in detail, detail
    assert ("batched CuTe-DSL" in detail) == (line_of == "batched"), detail


def test_batched_before_0_14_0_not_refused():
    """0.13.0 (swizzles in the quant methods, no such raise): 1440 over DeepEP low-latency planned."""
    assert_planned(_explain(**LL, model=EP_UNALIGNED, engine_version="0.13.0"), CUTEDSL)


@pytest.mark.parametrize("vllm", ["0.14.0", "0.32.0"])
def test_batched_aligned_planned(vllm):
    """1408 per rank (22 x 64) over DeepEP low-latency under 0.14.0 and 0.32.0: planned."""
    assert_planned(_explain(**LL, model=NV, engine_version=vllm), CUTEDSL)


def test_batched_scope_is_the_batched_all_to_alls():
    """0.32.0 at 1440 per rank: NIXL-EP (batched) refused; DeepEP normal (token-major, padded) planned; DeepEP V2's
    low-latency mode, which vLLM hands over token-major, planned."""
    nixl = _explain(**{**LL, "a2a": "nixl", "a2a_mode": None}, model=EP_UNALIGNED, engine_version="0.32.0")
    assert nixl.plan is None
    assert "batched CuTe-DSL" in only_refusal(nixl, CUTEDSL, "shape_unaligned", "flashinfer_cutedsl.yaml")
    assert_planned(_explain(**{**LL, "a2a_mode": "normal"}, model=EP_UNALIGNED, engine_version="0.32.0"), CUTEDSL)
    assert_planned(_explain(**{**LL, "a2a": "deepep_v2"}, model=EP_UNALIGNED, engine_version="0.32.0"), CUTEDSL)


def test_sglang_cutedsl_not_refused():
    """SGLang's own preparation is not this code: 352 per rank planned under SGLang 0.5.14."""
    assert_planned(_explain(**{**STD, "engine": "sglang"}, engine_version="0.5.14", tp=4), CUTEDSL)

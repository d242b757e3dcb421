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
   Three constraints of flashinfer_cutedsl.yaml. The same raise for FlashInfer CUTLASS and vLLM CUTLASS NVFP4 is in the
   0.14.0, 0.14.1, 0.15.0 and 0.15.1 wheels too: their constraints start at 0.14.0 (0.13.0 has no such function).
4. vLLM has no token-major CuTe-DSL backend before 0.20.0 (0.13.0 .. 0.19.x: the batched FlashInferCuteDSLExperts only;
   is_supported_config refuses another activation format, 0.13.0 / 0.14.x assert it): the vLLM standard dispatch fact
   starts at 0.20.0 and the dispatch list is exhaustive for vLLM, so a standard-format all-to-all (none, DeepEP normal,
   FlashInfer) before 0.20.0 is refused (a2a_unsupported).
5. vLLM's activations per class and release (wheels 0.13.0 .. 0.34.0): SiLU in both classes everywhere; the token-major
   class adds relu2 in 0.27.0, swiglu_oai_split (and the SiLU clamp) in 0.28.0, situ in 0.30.0, each with the FlashInfer
   release whose cute_dsl_fused_moe_nvfp4 takes the parameter (activation_type / swiglu_*: 0.6.15rc1, situ_beta:
   0.6.18rc1); gated GELU never; swiglu_oai refused before 0.28.0 and left open from it (gpt-oss's alpha/beta/limit are
   not shown to reach the kernel); the batched class SiLU only (0.13.0 / 0.14.x run SiLU whatever the activation); the
   clamped SiLU raised for 0.22.0 .. 0.27.x and for the batched class from 0.28.0.
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
    refusal is stated for a2a none there (the batched constraint names the batched all-to-alls only); the dispatch
    refuses it (kind 4)."""
    r = _explain(**STD, engine_version="0.19.0", tp=4)
    assert set(refusals(r, CUTEDSL)) == {"a2a_unsupported"}, refusals(r, CUTEDSL)


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


# ------------------------------------------------ kind 3b: the FlashInfer CUTLASS / vLLM CUTLASS raise from 0.14.0
@pytest.mark.parametrize("vllm", ["0.14.0", "0.14.1", "0.15.0", "0.15.1"])
@pytest.mark.parametrize(("runner", "file"), [(FICUT, "flashinfer_cutlass.yaml"), ("cutlass", "cutlass.yaml")])
def test_fi_cutlass_and_cutlass_nvfp4_unaligned_refused_from_0_14_0(vllm, runner, file):
    """352 per rank (tp 4, a2a none) under 0.14.0, 0.14.1, 0.15.0 and 0.15.1 (prepare_nvfp4_moe_layer_for_fi_or_cutlass
    with its raise, called for VLLM_CUTLASS and FLASHINFER_CUTLASS): refused, shape_unaligned (multiple of 64)."""
    r = _explain(**{**STD, "runner": runner}, engine_version=vllm, tp=4)
    assert r.plan is None
    detail = only_refusal(r, runner, "shape_unaligned", file)
    assert "multiple of 64" in detail and "352" in detail and "vllm >=0.14.0" in detail, detail


@pytest.mark.parametrize(("vllm", "tp"), [("0.13.0", 4), ("0.14.0", 2), ("0.15.1", 2)])
@pytest.mark.parametrize("runner", [FICUT, "cutlass"])
def test_fi_cutlass_and_cutlass_nvfp4_planned_below_0_14_0_or_aligned(vllm, tp, runner):
    """352 per rank under 0.13.0 (no such function), 704 per rank under 0.14.0 and 0.15.1: planned."""
    assert_planned(_explain(**{**STD, "runner": runner}, engine_version=vllm, tp=tp), runner)


# ------------------------------------------------ kind 4: vLLM's token-major CuTe-DSL backend starts at 0.20.0
@pytest.mark.parametrize("vllm", ["0.13.0", "0.14.0", "0.16.0", "0.19.0"])
def test_token_major_refused_before_0_20_0(vllm):
    """704 per rank (aligned), a2a none, flashinfer_cutedsl asked for under 0.13.0 .. 0.19.0: refused by the dispatch
    alone (a2a_unsupported: the runner consumes batched there, a2a none hands over standard), cited from
    flashinfer_cutedsl.yaml's exhaustive vLLM dispatch decision."""
    r = _explain(**STD, engine_version=vllm, tp=2)
    assert r.plan is None
    detail = only_refusal(r, CUTEDSL, "a2a_unsupported", "flashinfer_cutedsl.yaml")
    assert "consumes batched dispatch" in detail and "hands over standard" in detail, detail
    assert "exhaustive dispatch list" in detail and "before 0.20.0" in detail, detail


@pytest.mark.parametrize("vllm", ["0.20.0", "0.26.0", "0.29.0"])
def test_token_major_planned_from_0_20_0(vllm):
    """The same deployment under 0.20.0 (FlashInferCuteDSLExperts of the Standard format first), 0.26.0 and 0.29.0:
    planned, supported."""
    r = _explain(**STD, engine_version=vllm, tp=2)
    assert_planned(r, CUTEDSL)
    assert r.plan.evidence == "supported", [(u.code, u.detail) for u in r.plan.unknowns]


def _cutedsl_planned_or_refused(r, ok: bool, code: str, says: str) -> None:
    """``ok``: flashinfer_cutedsl planned; else no plan, and its one refusal has ``code`` from flashinfer_cutedsl.yaml
    and a message containing ``says``."""
    if ok:
        assert_planned(r, CUTEDSL)
    else:
        assert r.plan is None
        assert says in only_refusal(r, CUTEDSL, code, "flashinfer_cutedsl.yaml")


@pytest.mark.parametrize(("a2a", "mode", "vllm", "ok"), [
    ("deepep", "normal", "0.19.0", False), ("deepep", "normal", "0.20.0", True),
    ("flashinfer", None, "0.19.0", False), ("flashinfer", None, "0.20.0", True),
    ("deepep", "low_latency", "0.19.0", True),
])
def test_standard_all_to_alls_follow_the_bound_and_batched_ones_do_not(a2a, mode, vllm, ok):
    """EP 4 at 1408 per rank (aligned): DeepEP normal and FlashInfer's all-to-all (standard format) refused under
    0.19.0, planned under 0.20.0; DeepEP low-latency (batched) planned under 0.19.0. (NIXL, batched too, fails under
    0.18.0 .. 0.23.x without elastic EP: field round 35.)"""
    r = _explain(**{**LL, "a2a": a2a, "a2a_mode": mode}, model=NV, engine_version=vllm)
    _cutedsl_planned_or_refused(r, ok, "a2a_unsupported", "hands over standard")


def test_auto_before_0_20_0_does_not_take_cutedsl_token_major():
    """runner auto, a2a none, 704 per rank under 0.19.0: flashinfer_cutedsl is refused (a2a_unsupported), another
    runner planned; under 0.20.0 the candidate is not refused."""
    r = _explain(**{**STD, "runner": "auto"}, engine_version="0.19.0", tp=2)
    assert r.plan is not None and r.plan.runner != CUTEDSL
    assert set(refusals(r, CUTEDSL)) == {"a2a_unsupported"}
    assert refusals(_explain(**{**STD, "runner": "auto"}, engine_version="0.20.0", tp=2), CUTEDSL) == {}


def test_sglang_token_major_dispatch_unchanged():
    """SGLang's token-major path (a2a none) is not bounded by vLLM's releases: planned at 0.5.14, aligned."""
    assert_planned(_explain(**{**STD, "engine": "sglang"}, engine_version="0.5.14", tp=2), CUTEDSL)


# ------------------------------------------------ kind 5: vLLM's CuTe-DSL activations per class and release
def _act(act: str, **extra: Any) -> dict[str, Any]:
    model = {**NV, "activation": act}
    if act in ("silu_clamped", "swiglu_oai_split"):
        model["swiglu_limit"] = 7.0
    return {**STD, "model": model, **extra}


def _ll(act: str, **extra: Any) -> dict[str, Any]:
    return {**_act(act), **LL, **extra}


def _refused_activation(r: Any, act: str) -> str:
    """CuTe-DSL refused for the activation by its own file; where the model's swiglu_limit puts the layer on vLLM's NVFP4
    clamp set (0.23.0 .. 0.27.1, backends/common.yaml methods: CuTe-DSL not in it), that methods row refuses it too."""
    assert r.plan is None
    codes = refusals(r, CUTEDSL)
    assert codes.get("activation_unsupported", "").startswith("backends/flashinfer_cutedsl.yaml:"), codes
    others = {c: src for c, src in codes.items() if c != "activation_unsupported"}
    assert others in ({}, {"quant_unsupported": others.get("quant_unsupported")}), codes
    if others:
        clamp = next(x for x in cand(r, CUTEDSL).reasons if x.code == "quant_unsupported")
        assert others["quant_unsupported"].startswith("backends/common.yaml:") and "swiglu_limit" in clamp.detail, clamp
    detail = next(x.detail for x in cand(r, CUTEDSL).reasons if x.code == "activation_unsupported")
    assert act in detail, detail
    return detail


@pytest.mark.parametrize(("act", "first", "before", "why"), [
    ("relu2", "0.27.0", "0.26.0", "vllm >=0.27.0, flashinfer-python >=0.6.15rc1 (vllm is 0.26.0)"),
    ("swiglu_oai_split", "0.28.0", "0.27.1", "vllm >=0.28.0, flashinfer-python >=0.6.15rc1 (vllm is 0.27.1)"),
    ("silu_clamped", "0.28.0", "0.27.1", "does not apply silu_clamped (with vllm >=0.22.0,<0.28.0)"),
    ("situ", "0.30.0", "0.29.0", "vllm >=0.30.0, flashinfer-python >=0.6.18rc1 (vllm is 0.29.0)"),
])
def test_token_major_activation_from_its_first_release(act, first, before, why):
    """704 per rank, a2a none: relu2 from 0.27.0, swiglu_oai_split and the SiLU clamp from 0.28.0, situ from 0.30.0
    are planned at that release (no activation unknown) and refused at the release before it (activation_unsupported,
    the row's vLLM bound or, for silu_clamped, the 0.22.0 .. 0.27.x raise)."""
    r = _explain(**_act(act), engine_version=first, tp=2)
    assert_planned(r, CUTEDSL)
    assert "activation_unsupported" not in {u.code for u in cand(r, CUTEDSL).unknowns}
    detail = _refused_activation(_explain(**_act(act), engine_version=before, tp=2), act)
    assert why in detail, detail


@pytest.mark.parametrize(("act", "vllm", "flashinfer", "ok"), [
    ("relu2", "0.27.0", "0.6.14", False), ("relu2", "0.27.0", "0.6.15", True),
    ("swiglu_oai_split", "0.28.0", "0.6.14", False), ("swiglu_oai_split", "0.28.0", "0.6.15", True),
    ("silu_clamped", "0.28.0", "0.6.14", False), ("silu_clamped", "0.28.0", "0.6.16.post3", True),
    ("situ", "0.30.0", "0.6.17", False), ("situ", "0.30.0", "0.6.18rc1", True),
])
def test_token_major_activation_flashinfer_bound(act, vllm, flashinfer, ok):
    """The FlashInfer release whose cute_dsl_fused_moe_nvfp4 takes the parameter vLLM passes (activation_type and
    swiglu_*: 0.6.15rc1; situ_beta: 0.6.18rc1): below it refused (activation_unsupported, naming the bound), at it
    planned."""
    r = _explain(**_act(act, packages={"flashinfer-python": flashinfer}), engine_version=vllm, tp=2)
    if ok:
        assert_planned(r, CUTEDSL)
    else:
        detail = _refused_activation(r, act)
        assert f"(flashinfer-python is {flashinfer})" in detail, detail


@pytest.mark.parametrize("vllm", ["0.22.0", "0.26.0"])
def test_silu_clamped_raised_0_22_to_0_27(vllm):
    """DeepSeek-V4's clamped SiLU under 0.22.0 and 0.26.0 (NVFP4_BACKENDS_WITH_CLAMP without either CuTe-DSL backend:
    ValueError for --moe-backend flashinfer_cutedsl): refused on that negative row."""
    detail = _refused_activation(_explain(**_act("silu_clamped"), engine_version=vllm, tp=2), "silu_clamped")
    assert "does not apply" in detail, detail


@pytest.mark.parametrize("vllm", ["0.20.0", "0.26.0", "0.29.0", "0.34.0"])
def test_gelu_refused_token_major(vllm):
    """Gated GELU (704 per rank, a2a none) under 0.20.0 .. 0.34.0: in neither class's list: refused."""
    _refused_activation(_explain(**_act("gelu"), engine_version=vllm, tp=2), "gelu")


@pytest.mark.parametrize("vllm", ["0.20.0", "0.27.1"])
def test_swiglu_oai_refused_token_major_before_0_28_0(vllm):
    """gpt-oss's SwiGLU, a2a none, 704 per rank, under 0.20.0 and 0.27.1 (SWIGLUOAI in neither class): refused."""
    _refused_activation(_explain(**_act("swiglu_oai"), engine_version=vllm, tp=2), "swiglu_oai")


def test_swiglu_oai_open_token_major_from_0_28_0():
    """Under 0.28.0 SWIGLUOAI is admitted but gpt-oss's alpha/beta/limit are not shown to reach the kernel on the NVFP4
    path: not refused, not supported (an activation unknown); asked for explicitly, it is planned unverified."""
    r = _explain(**_act("swiglu_oai"), engine_version="0.28.0", tp=2)
    assert "activation_unsupported" not in refusals(r, CUTEDSL)
    assert "activation_unsupported" in {u.code for u in cand(r, CUTEDSL).unknowns}
    assert_planned(r, CUTEDSL)
    assert r.plan.evidence == "unverified"


@pytest.mark.parametrize(("act", "vllm", "rows"), [
    ("relu2", "0.29.0", ">=0.20.0"), ("swiglu_oai_split", "0.29.0", ">=0.20.0"), ("situ", "0.30.0", ">=0.20.0"),
    ("swiglu_oai_split", "0.20.0", ">=0.20.0"), ("swiglu_oai", "0.29.0", ">=0.20.0"), ("gelu", "0.29.0", ">=0.20.0"),
    ("silu_clamped", "0.28.0", ">=0.28.0"), ("silu_clamped", "0.34.0", ">=0.28.0"),
    ("relu2", "0.19.0", ">=0.15.0,<0.20.0"), ("swiglu_oai", "0.16.0", ">=0.15.0,<0.20.0"),
    ("gelu", "0.15.0", ">=0.15.0,<0.20.0"), ("gelu", "0.19.0", ">=0.15.0,<0.20.0"),
    ("gelu", "0.14.0", ">=0.13.0,<0.15.0"), ("swiglu_oai", "0.13.0", ">=0.13.0,<0.15.0"),
    ("relu2", "0.14.1", ">=0.13.0,<0.15.0"),
])
def test_batched_takes_silu_only(act, vllm, rows):
    """DeepEP low-latency (the batched class), 1408 per rank: every activation but SiLU refused (activation_unsupported)
    by the negative row of its range: from 0.20.0 (FlashInferCuteDSLBatchedExperts; the SiLU clamp from 0.28.0, when
    the token-major class takes it), 0.15.0 .. 0.19.x (_supports_activation SILU) and 0.13.0 / 0.14.x (SiLU whatever
    the activation; non-gated raised)."""
    detail = _refused_activation(_explain(**_ll(act), engine_version=vllm), act)
    assert f"does not apply {act} (with vllm {rows})" in detail, detail


@pytest.mark.parametrize("act", ["relu2", "silu_clamped"])
def test_batched_rows_cover_nixl(act):
    """NIXL-EP (batched, low-latency only) under 0.29.0: relu2 and the SiLU clamp refused as over DeepEP
    low-latency."""
    r = _explain(**_ll(act, a2a="nixl", a2a_mode=None), engine_version="0.29.0")
    _refused_activation(r, act)


@pytest.mark.parametrize("vllm", ["0.13.0", "0.14.0", "0.19.0", "0.20.0", "0.29.0"])
def test_batched_silu_planned(vllm):
    """SiLU over DeepEP low-latency, 1408 per rank: planned in every range (0.13.0 .. 0.29.0)."""
    assert_planned(_explain(**_ll("silu"), engine_version=vllm), CUTEDSL)


def test_relu2_token_major_over_deepep_normal_planned():
    """relu2 over DeepEP normal (standard format, the token-major class) at 1408 per rank under 0.27.0: planned; the
    batched negative rows name the low-latency mode only."""
    assert_planned(_explain(**_ll("relu2", a2a_mode="normal"), engine_version="0.27.0"), CUTEDSL)


@pytest.mark.parametrize(("act", "tp", "ok"), [("swiglu_oai_split", 4, False), ("situ", 4, False),
                                                ("silu_clamped", 4, False), ("swiglu_oai_split", 2, True),
                                                ("silu_clamped", 2, True), ("relu2", 4, True)])
def test_new_gated_activations_share_the_token_major_alignment(act, tp, ok):
    """The 0.20.0 .. 0.31.x interleave assert covers the gated activations the class admits later: swiglu_oai_split,
    situ and the clamped SiLU at 352 per rank refused (shape_unaligned) under 0.30.0, at 704 planned; relu2 (not
    gated, not interleaved from 0.27.0) at 352 planned."""
    r = _explain(**_act(act), engine_version="0.30.0", tp=tp)
    _cutedsl_planned_or_refused(r, ok, "shape_unaligned", "multiple of 64")


def test_sglang_activations_unchanged():
    """SGLang's flashinfer_cutedsl asserts SiLU; none of vLLM's rows reach it: relu2 under SGLang stays unverified
    (the list is open), never refused by a vLLM row."""
    r = _explain(**{**_act("relu2"), "engine": "sglang"}, engine_version="0.5.14", tp=2)
    assert "activation_unsupported" not in refusals(r, CUTEDSL)
    assert "activation_unsupported" in {u.code for u in cand(r, CUTEDSL).unknowns}

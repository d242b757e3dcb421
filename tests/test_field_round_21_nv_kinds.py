"""Field round 21 of issue 21 (tests/cases/field_round_21.yaml), fixed as kinds (the NVIDIA cases): each kind a round
case missed, tested on other deployments of the same kind than the round's case, on both sides of each bound.

1. From vLLM 0.25.0 FlashInferB12xExperts builds B12xMoEWrapper with max_num_tokens = the per-rank token bound while
   DP (no EP) all-gathers every rank's tokens into the kernel: 'num_tokens exceeds max_num_tokens'
   (vllm-project/vllm#47982; 0.24.0 calls b12x_fused_moe without the wrapper's capacity; open fix #48698). A dp
   constraint of flashinfer_b12x.yaml.
2. vLLM's NVFP4 weight preparation for the non-TRT-LLM backends (prepare_nvfp4_moe_layer_for_fi_or_cutlass) raises
   NotImplementedError for a gated layer whose 2 x intermediate_per_rank is not a multiple of 128 (read in 0.14.0 ..
   0.29.0, the 0.13.0 wheel has no such function; vllm-project/vllm#48624): an intermediate_per_rank multiple_of 64 constraint (shape_unaligned) in
   flashinfer_cutlass.yaml, cutlass.yaml (vLLM CUTLASS NVFP4) and flashinfer_b12x.yaml (in the list from 0.22.0).
   (vLLM's FlashInferExperts also takes GELU_TANH from 0.24.0: its gelu row, the bf16 alignment at which it hangs
   (vllm-project/vllm#51492) and the same NVFP4 kind for flashinfer_cutedsl are tested in
   test_vllm_fi_cutlass_gelu_cutedsl_align.py.)
3. SGLang before 0.5.2 allocates the w4afp8 CUTLASS MoE GEMM outputs as float16, which overflow to NaN
   (sgl-project/sglang#9918, bfloat16 from 0.5.2): a negative int4_w4a8 support row of cutlass.yaml.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, only_refusal

B12X = "flashinfer_b12x"
FICUT = "flashinfer_cutlass"
CUTLASS = "cutlass"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


_planned = assert_planned


# ------------------------------------------------ kind 1: b12x's per-rank token capacity under DP (vLLM >= 0.25.0)
# A 64-expert NVFP4 MoE (intermediate 768: 768 / tp is a multiple of 64 at tp 1 and 2, outside kind 2) on sm120: not
# the round's Qwen3-30B-A3B on RTX 5090.
SMALL = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}
B12X_DEP = dict(arch="sm120", engine="vllm", quant="nvfp4", model=SMALL, ep=1, a2a="none", runner=B12X)


@pytest.mark.parametrize(("vllm", "tp", "dp"), [("0.25.0", 1, 2), ("0.29.0", 2, 4), ("0.27.1", 1, 8)])
def test_b12x_refused_with_dp_from_0_25_0(vllm, tp, dp):
    """0.25.0 (the first sdist with the wrapper's max_num_tokens), 0.27.1 and 0.29.0 with dp > 1 and no EP: refused
    (parallelism_unsupported, the dp constraint of flashinfer_b12x.yaml)."""
    r = _explain(**B12X_DEP, engine_version=vllm, tp=tp, dp=dp)
    assert r.plan is None
    detail = only_refusal(r, B12X, "parallelism_unsupported", "flashinfer_b12x.yaml")
    assert "max_num_tokens" in detail, detail


@pytest.mark.parametrize(("vllm", "tp", "dp"), [("0.24.0", 1, 2), ("0.26.0", 2, 1), ("0.26.0", 1, 1)])
def test_b12x_planned_without_dp_or_before_the_wrapper(vllm, tp, dp):
    """0.24.0 (b12x_fused_moe without a wrapper capacity) with dp 2, and 0.26.0 with dp 1: planned."""
    _planned(_explain(**B12X_DEP, engine_version=vllm, tp=tp, dp=dp), B12X)


# ------------------------------------------------ kind 2: gated NVFP4 w13 scale padding raises (vLLM >= 0.14.0)
# Intermediate 1408 (a DeepSeek-V2-Lite-like width): 704 per rank at tp 2 (11 x 64, no padding), 352 at tp 4
# (2 x 352 = 704 rows, not a multiple of 128): not the round's Gemma-4 (704 at tp 4).
WIDE = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
        "routing": "renormalize"}
FI_DEP = dict(gpu="B200", engine="vllm", quant="nvfp4", model=WIDE, ep=1, a2a="none")


@pytest.mark.parametrize("vllm", ["0.16.0", "0.20.0", "0.29.0"])
@pytest.mark.parametrize(("runner", "file"), [(FICUT, "flashinfer_cutlass.yaml"), (CUTLASS, "cutlass.yaml")])
def test_nvfp4_gated_unaligned_per_rank_intermediate_refused(vllm, runner, file):
    """352 per rank (tp 4) under 0.16.0, 0.20.0 and 0.29.0: FlashInfer CUTLASS and vLLM CUTLASS refused
    (shape_unaligned, multiple of 64)."""
    r = _explain(**FI_DEP, runner=runner, engine_version=vllm, tp=4)
    assert r.plan is None
    detail = only_refusal(r, runner, "shape_unaligned", file)
    assert "multiple of 64" in detail and "352" in detail, detail


@pytest.mark.parametrize(("vllm", "tp"), [("0.16.0", 2), ("0.29.0", 2), ("0.13.0", 4)])
@pytest.mark.parametrize("runner", [FICUT, CUTLASS])
def test_nvfp4_gated_aligned_or_before_the_bound_planned(vllm, tp, runner):
    """704 per rank (tp 2) under 0.16.0 / 0.29.0, and 352 under 0.13.0 (the last wheel without
    prepare_nvfp4_moe_layer_for_fi_or_cutlass; the raise is in 0.14.0 .. 0.15.1 too, tested in
    test_vllm_fi_cutlass_gelu_cutedsl_align.py): planned."""
    _planned(_explain(**FI_DEP, runner=runner, engine_version=vllm, tp=tp), runner)


def test_nvfp4_non_gated_unaligned_is_padded():
    """relu2 (not act-and-mul: vLLM pads w13/w2 instead of raising) at 352 per rank under 0.26.0: planned."""
    dep = {**FI_DEP, "model": {**WIDE, "activation": "relu2"}}
    _planned(_explain(**dep, runner=FICUT, engine_version="0.26.0", tp=4), FICUT)


def test_nvfp4_unaligned_not_refused_under_sglang():
    """SGLang's own NVFP4 preparation is not this code: the vLLM-scoped constraint does not refuse it (0.5.14, tp 4)."""
    dep = {**FI_DEP, "engine": "sglang"}
    _planned(_explain(**dep, runner=FICUT, engine_version="0.5.14", tp=4), FICUT)


@pytest.mark.parametrize(("vllm", "tp", "refused"), [("0.22.0", 4, True), ("0.26.0", 4, True),
                                                     ("0.22.0", 2, False)])
def test_b12x_shares_the_nvfp4_preparation(vllm, tp, refused):
    """FLASHINFER_B12X is in the function's backend list from 0.22.0: 352 per rank refused, 704 planned (sm120)."""
    r = _explain(**{**B12X_DEP, "model": WIDE}, engine_version=vllm, tp=tp, dp=1)
    if refused:
        assert r.plan is None
        assert "multiple of 64" in only_refusal(r, B12X, "shape_unaligned", "flashinfer_b12x.yaml")
    else:
        _planned(r, B12X)


# ------------------------------------------------ kind 3: SGLang w4afp8 float16 GEMM outputs (before 0.5.2)
# A 128-expert int4 W4A8 MoE (group 128) on H200: not the round's DeepSeek-R1 on H100.
W4A8_MODEL = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536,
              "activation": "silu", "routing": "renormalize"}
W4A8 = dict(gpu="H200", engine="sglang", quant="int4_w4a8", quant_config={"group_size": 128}, model=W4A8_MODEL,
            a2a="none", runner=CUTLASS)


@pytest.mark.parametrize(("sglang", "tp", "ep"), [("0.5.1", 4, 1), ("0.5.1", 8, 8), ("0.4.10", 8, 8)])
def test_sglang_w4afp8_refused_before_0_5_2(sglang, tp, ep):
    """0.4.10 and 0.5.1 (torch.half outputs), with and without EP: refused (quant_unsupported, cutlass.yaml)."""
    r = _explain(**W4A8, engine_version=sglang, tp=tp, ep=ep)
    assert r.plan is None
    only_refusal(r, CUTLASS, "quant_unsupported", "cutlass.yaml")


@pytest.mark.parametrize(("sglang", "tp", "ep"), [("0.5.2", 4, 1), ("0.5.2", 8, 8), ("0.5.3", 8, 8)])
def test_sglang_w4afp8_planned_from_0_5_2(sglang, tp, ep):
    """0.5.2 and 0.5.3 (torch.bfloat16 outputs): planned."""
    _planned(_explain(**W4A8, engine_version=sglang, tp=tp, ep=ep), CUTLASS)


def test_vllm_w4a8_not_refused_by_the_sglang_fact():
    """vLLM's own CUTLASS W4A8 experts (another code path) at 0.20.0: planned."""
    _planned(_explain(**{**W4A8, "engine": "vllm"}, engine_version="0.20.0", tp=4, ep=1), CUTLASS)

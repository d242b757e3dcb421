"""Field round 8 of issue 21 (tests/cases/field_round_8.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case, on both sides of each version bound.

1. vLLM's modular TRT-LLM-gen experts run under DeepEP V2 (vllm-project/vllm#51824, first in 0.29.0, fixed the bf16
   class's top-k on DeepEP V2's expanded layout; the block-FP8 / MXFP8 class admitted deepep_v2 from 0.24.0), and the
   PR's test runs bf16 flashinfer_cutlass there too (backends/flashinfer_trtllm.yaml, flashinfer_cutlass.yaml).
2. SGLang's unquantized MoE on ROCm takes AITER only for a per-rank intermediate that is a multiple of 128 from 0.5.14
   (sgl-project/sglang#28244; before it a CK refusal fell back to Triton with AITER-shuffled weights: garbled output):
   runner auto plans Triton there, aiter asked for is refused (backends/aiter.yaml). The upstream fix is keyed on the
   per-rank width, not on the checkpoint architecture (the round case's tp 1 contradicted it; now tp 8).
3. SGLang pads a ModelOpt FP8 layer's per-rank intermediate to 16 for flashinfer_cutlass from 0.5.13
   (sgl-project/sglang#22627): the kernel's multiple-of-16 refusal holds for SGLang before it, and for the engines whose
   padding was not read (backends/flashinfer_cutlass.yaml).
4. FlashInfer's SM90 MXFP4 x BF16 CUTLASS MoE writes wrong tiles in the releases with #3084 and without #3738
   (flashinfer-ai/flashinfer#5438; by the tags: 0.6.10rc1 .. 0.6.15.post1, 0.6.16.post3 / post4, 0.6.17rc5 / 0.6.17):
   refused on sm90 MXFP4 for SGLang's flashinfer_mxfp4 and vLLM's flashinfer_cutlass (backends/flashinfer_mxfp4.yaml,
   flashinfer_cutlass.yaml).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import report_codes as _codes
from report_helpers import unknown_codes

QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
QWEN_FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
BASE = {"tp": 1, "ep": 1, "a2a": "none"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


# --------------------------------------------------------------------- kind 1: vLLM's modular TRT-LLM experts x DeepEP V2
DP4_V2 = dict(gpu="B200", engine="vllm", tp=1, dp=4, ep=4, a2a="deepep_v2")


@pytest.mark.parametrize("cuda_graph", [True, False])
def test_trtllm_bf16_over_deepep_v2_from_vllm_0_29(cuda_graph):
    """bf16 Qwen3-30B-A3B (renormalize routing, 128 experts) at DP 4 / EP 4 over DeepEP V2 with flashinfer_trtllm:
    planned, evidence supported, at vLLM 0.29.0 (the fix's first release), with CUDA graphs on or off."""
    r = _explain(**DP4_V2, engine_version="0.29.0", model_config=QWEN, runner="flashinfer_trtllm",
                 cuda_graph=cuda_graph)
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm", [(x.code, x.detail) for x in r.reasons]
    assert r.evidence == "supported"


@pytest.mark.parametrize("version", ["0.26.0", "0.28.0"])
def test_trtllm_bf16_over_deepep_v2_refused_before_the_fix(version):
    """Before 0.29.0 the bf16 modular class passed the model's top-k to a kernel that reads DeepEP V2's expanded ids:
    refused (a2a_unsupported, the exhaustive list of flashinfer_trtllm.yaml)."""
    # FlashInfer declared past the BF16 launcher's fix: these releases' pins (0.6.14, 0.6.16.post3) are refused on
    # their own by flashinfer_trtllm.yaml's >=0.6.18rc2 need (tests/test_field_round_57_kinds.py)
    r = _explain(**DP4_V2, engine_version=version, model_config=QWEN, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.6.18"})
    assert r.plan is None and _codes(r) == {"a2a_unsupported"}
    assert r.reasons[0].source.startswith("backends/flashinfer_trtllm.yaml:")


@pytest.mark.parametrize(("version", "planned"), [("0.20.0", False), ("0.24.0", True), ("0.28.0", True)])
def test_trtllm_fp8_block_over_deepep_v2_from_vllm_0_24(version, planned):
    """Block-FP8 Qwen3-30B-A3B-FP8 over DeepEP V2: TrtLlmFp8ExpertsModular admits deepep_v2 from 0.24.0 (and reads the
    top-k from the ids); refused at 0.20.0."""
    r = _explain(**DP4_V2, engine_version=version, model_config=QWEN_FP8, runner="flashinfer_trtllm")
    assert (r.plan is not None) is planned, [(x.code, x.detail) for x in r.reasons]
    if not planned:
        assert _codes(r) == {"a2a_unsupported"}


def test_trtllm_deepep_v2_pairing_stays_engine_and_a2a_scoped():
    """DeepEP high-throughput under vLLM (the modular classes refuse it) and DeepEP V2 under SGLang (no fused function
    registered) stay refused."""
    ht = _explain(**dict(DP4_V2, a2a="deepep"), model_config=QWEN, runner="flashinfer_trtllm")
    assert ht.plan is None and _codes(ht) == {"a2a_unsupported"}
    sgl = _explain(gpu="B200", engine="sglang", model_config=QWEN, tp=4, ep=4, a2a="deepep_v2",
                   runner="flashinfer_trtllm")
    assert sgl.plan is None and "a2a_unsupported" in _codes(sgl)


def test_cutlass_bf16_over_deepep_v2_supported_from_vllm_0_29():
    """bf16 flashinfer_cutlass over DeepEP V2 under vLLM: supported at 0.29.0 (the PR's test); at 0.28.0 no fact says
    (its vLLM a2a list is open: unverified, not refused)."""
    new = _explain(**DP4_V2, engine_version="0.29.0", model_config=QWEN, runner="flashinfer_cutlass")
    assert new.plan is not None and new.evidence == "supported"
    old = _explain(**DP4_V2, engine_version="0.28.0", model_config=QWEN, runner="flashinfer_cutlass")
    assert old.plan is not None and "a2a_unsupported" in unknown_codes(old, "flashinfer_cutlass")


# --------------------------------------------------------------------- kind 4: FlashInfer's SM90 W4A16 MXFP4 race
GPT_OSS = str(CONFIGS / "openai__gpt-oss-120b")
BAD_FI = ["0.6.10rc1", "0.6.11.post3", "0.6.15.post1", "0.6.16.post3", "0.6.16.post4", "0.6.17rc5", "0.6.17"]
GOOD_FI = ["0.6.16", "0.6.16.post2", "0.6.17rc4", "0.6.18rc7"]


def _race(report: Any, runner: str) -> list[Any]:
    """The reasons given by the SM90 W4A16 MXFP4 known-bad-range rows of ``runner``."""
    return [r for r in report.reasons if r.code == "quant_unsupported" and r.backend == runner
            and "does not run mxfp4 on sm90" in r.detail and "flashinfer-python" in r.detail]


@pytest.mark.parametrize("version", BAD_FI)
def test_w4a16_mxfp4_race_refuses_vllm_cutlass_on_hopper(version):
    """gpt-oss-120b (MXFP4) on one H200 under vLLM with flashinfer_cutlass (FlashInferExperts' W4A16 path on 9.0):
    refused in every release with #3084 and without #3738; auto plans another runner."""
    dep = dict(gpu="H200", engine="vllm", model_config=GPT_OSS, packages={"flashinfer-python": version})
    r = _explain(**dep, runner="flashinfer_cutlass")
    assert r.plan is None and _race(r, "flashinfer_cutlass") and _codes(r) == {"quant_unsupported"}
    assert _race(r, "flashinfer_cutlass")[0].source.startswith("backends/flashinfer_cutlass.yaml:")
    auto = _explain(**dep)
    assert auto.plan is not None and auto.plan.runner != "flashinfer_cutlass"


@pytest.mark.parametrize("version", GOOD_FI)
def test_w4a16_mxfp4_race_silent_with_3738(version):
    """Releases holding #3738 (0.6.16 .. 0.6.16.post2, 0.6.17rc1 .. rc4, 0.6.18rc*): planned under both engines."""
    cut = _explain(gpu="H200", engine="vllm", model_config=GPT_OSS, runner="flashinfer_cutlass",
                   packages={"flashinfer-python": version})
    assert cut.plan is not None and not _race(cut, "flashinfer_cutlass"), [(x.code, x.detail) for x in cut.reasons]
    mx = _explain(gpu="H200", engine="sglang", model_config=GPT_OSS, runner="flashinfer_mxfp4",
                  packages={"flashinfer-python": version})
    assert mx.plan is not None and not _race(mx, "flashinfer_mxfp4")


@pytest.mark.parametrize("version", ["0.6.10rc1", "0.6.16.post4", "0.6.17"])
def test_w4a16_mxfp4_race_refuses_sglang_flashinfer_mxfp4(version):
    """SGLang's flashinfer_mxfp4 on H200 (the report's serving path) at a bound of each bad range: refused."""
    r = _explain(gpu="H200", engine="sglang", model_config=GPT_OSS, runner="flashinfer_mxfp4",
                 packages={"flashinfer-python": version})
    assert r.plan is None and _race(r, "flashinfer_mxfp4")


def test_w4a16_mxfp4_race_is_hopper_only():
    """Blackwell's MXFP4 paths (TRT-LLM-gen for flashinfer_mxfp4 on B200, the MXFP8 x MXFP4 CUTLASS path of vLLM) are
    other kernels: not refused by the rows at 0.6.12."""
    mx = _explain(gpu="B200", engine="sglang", model_config=GPT_OSS, runner="flashinfer_mxfp4",
                  packages={"flashinfer-python": "0.6.12"})
    assert not _race(mx, "flashinfer_mxfp4")
    cut = _explain(gpu="B200", engine="vllm", model_config=GPT_OSS, runner="flashinfer_cutlass",
                   packages={"flashinfer-python": "0.6.12"})
    assert not _race(cut, "flashinfer_cutlass")


# --------------------------------------------------------------------- kind 3: SGLang pads ModelOpt FP8 for flashinfer_cutlass
# Gemma-4-26B-A4B's MoE (gated gelu, 704 wide) as a ModelOpt per-tensor FP8 layer: 704 / 8 = 88 per rank, 88 % 16 = 8.
GEMMA = {"num_experts": 128, "top_k": 8, "hidden_size": 2816, "moe_intermediate_size": 704, "activation": "gelu",
         "routing": "renormalize"}
GEMMA_FP8_TP8 = dict(gpu="B200", quant="fp8_tensor", model=GEMMA, tp=8, runner="flashinfer_cutlass")


def _tma16(report: Any) -> list[Any]:
    """The reasons given by flashinfer_cutlass's 8-bit per-rank intermediate alignment constraints."""
    return [r for r in report.reasons if r.code == "shape_unaligned" and r.backend == "flashinfer_cutlass"
            and "intermediate_per_rank = 88 is not a multiple of 16" in r.detail]


@pytest.mark.parametrize("version", ["0.5.13", "0.5.19", None])
def test_sglang_pads_modelopt_fp8_for_cutlass_from_0_5_13(version):
    """Gated ModelOpt FP8 at TP 8 (88 per rank) with flashinfer_cutlass under SGLang 0.5.13+: planned (padded to 96)."""
    dep = dict(GEMMA_FP8_TP8, engine="sglang", **({"engine_version": version} if version else {}))
    r = _explain(**dep)
    assert r.plan is not None and r.plan.runner == "flashinfer_cutlass", [(x.code, x.detail) for x in r.reasons]
    assert not _tma16(r)


@pytest.mark.parametrize("version", ["0.5.11", "0.5.12.post1"])
def test_sglang_before_0_5_13_keeps_the_fp8_alignment_refusal(version):
    """SGLang before 0.5.13 did not pad: refused (shape_unaligned), naming the SGLang-scoped constraint."""
    r = _explain(**GEMMA_FP8_TP8, engine="sglang", engine_version=version)
    assert r.plan is None and _codes(r) == {"shape_unaligned"}
    (reason,) = _tma16(r)
    assert reason.source.startswith("backends/flashinfer_cutlass.yaml:") and "sglang <0.5.13" in reason.detail


def test_fp8_alignment_refusal_stays_for_other_engines():
    """vLLM (its padding not read here) and this install's adapter (no padding) keep the kernel's refusal."""
    for engine in ("vllm", "moe_select"):
        r = _explain(**GEMMA_FP8_TP8, engine=engine)
        assert r.plan is None and _tma16(r), engine


# --------------------------------------------------------------------- kind 2: SGLang's AITER gate for unquantized MoE
# Qwen3-30B-A3B (bf16) at TP 4 on MI355X: 768 / 4 = 192 per rank, a width AITER's CK kernel takes (64-wide tiles up to
# 192) but SGLang's 128 gate does not.
QWEN_TP4_AMD = dict(gpu="MI355X", engine="sglang", model_config=QWEN, tp=4)


def _aiter128(report: Any) -> list[Any]:
    """The reasons given by SGLang's AITER width gate (aiter.yaml, sglang >=0.5.14)."""
    return [r for r in report.reasons if r.code == "shape_unaligned" and r.backend == "aiter"
            and "sglang >=0.5.14" in r.detail and "not a multiple of 128" in r.detail]


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19", None])
def test_sglang_aiter_gate_refuses_192_per_rank(version):
    """From 0.5.14: aiter asked for is refused (SGLang raises ValueError) and auto plans triton (SGLang's own choice)."""
    dep = dict(QWEN_TP4_AMD, **({"engine_version": version} if version else {}))
    asked = _explain(**dep, runner="aiter")
    assert asked.plan is None and _codes(asked) == {"shape_unaligned"} and _aiter128(asked)
    assert _aiter128(asked)[0].source.startswith("backends/aiter.yaml:")
    auto = _explain(**dep)
    assert auto.plan is not None and auto.plan.runner == "triton"


def test_sglang_aiter_gate_bounds():
    """Before 0.5.14 (no gate: the kernel takes 192), with a 128-multiple width per rank (Qwen3-30B-A3B's shape inline
    with 512-wide experts at TP 4: 128; TP 1: 768) and under vLLM, the gate is silent and aiter is planned. (TP 6 of
    the checkpoint was the 128-wide case until the ninth trial: its 32 attention heads do not split over 6 ranks, which
    SGLang refuses.)"""
    old = _explain(**QWEN_TP4_AMD, engine_version="0.5.13", runner="aiter")
    assert old.plan is not None and not _aiter128(old)
    shape = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 512}
    inline = {k: v for k, v in QWEN_TP4_AMD.items() if k != "model_config"} | {"model": shape, "quant": "bf16"}
    for dep in (inline, dict(QWEN_TP4_AMD, tp=1, gpu="MI300X"), dict(QWEN_TP4_AMD, engine="vllm")):
        r = _explain(**dep, runner="aiter")
        assert r.plan is not None and r.plan.runner == "aiter" and not _aiter128(r), dep

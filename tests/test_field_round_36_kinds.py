"""Field round 36 (tests/cases/field_round_36.yaml), fixed as kinds.

1. A kernel's tile alignment that an engine release leaves unpadded: vLLM before 0.25.0 repacks FP8 MoE weights for
   Marlin at the per-rank intermediate (Gemma-4-26B-A4B at TP 2: 352 rows, 'Invalid thread config' on RTX 3090),
   which the Marlin MoE GEMM tiles by 64 or 128 (vllm-project/vllm#42390): backends/marlin.yaml.
2. An engine's quantization method that builds only some runners: vLLM loads a compressed-tensors MXFP4 checkpoint
   through CompressedTensorsW4A4Mxfp4MoEMethod (Marlin only in 0.18.0; CUTLASS MXFP4 or Marlin in 0.24.0), never
   FlashInfer's experts (vllm-project/vllm#38022): the new ``methods`` of backends/common.yaml
   (:class:`moe_select.capability.MethodRunners`); the compressed-tensors reader now reads 4-bit float weights of group
   32 as MXFP4 (was NVFP4) with layout compressed-tensors; MXFP4's default layout is its own serialization
   (``layout: mxfp4``, backends/formats.yaml), shown in the plan.
3. A tile rule that depends on two dimensions at once: Marlin's MoE GEMM runs K x N only where (K % 128, N % 64) or
   (K % 64, N % 128) are 0, and that method repacks unpadded, so hidden 2880 and intermediate 2880 fail. The new
   ``not_multiple_of`` of a numeric condition states the second branch.
Not fixed (xfail in the round file): vLLM 0.10.1's tuned Triton file for the H20-3e (Qwen3-Coder#461) needs a fact
keyed on the GPU product within sm90, which no condition reads.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import moe_select
from moe_select.capability import MethodRunners
from moe_select.conditions import IntRange, When
from moe_select.lint import _covers
from moe_select.model_config import read_model_config

ROOT = Path(__file__).resolve().parents[1]
GEMMA4 = {"num_experts": 128, "top_k": 8, "hidden_size": 2816, "moe_intermediate_size": 704, "activation": "gelu",
          "routing": "renormalize"}
GPT_OSS_20B = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize", "swiglu_limit": 7.0}


def _reasons(r, runner: str) -> list:
    return next(c for c in r.candidates if c.backend == runner).reasons


def _cited(r, runner: str, code: str, path: str) -> bool:
    return any(x.code == code and path in x.source for x in _reasons(r, runner))


# --- 1. FP8 Marlin at the unpadded per-rank intermediate -------------------------------------------------------------

@pytest.mark.parametrize("version, tp, refused", [
    ("0.21.0", 2, True), ("0.24.0", 2, True), ("0.25.0", 2, False), ("0.21.0", 1, False)])
def test_vllm_fp8_marlin_needs_a_per_rank_intermediate_of_64_before_0_25(version, tp, refused):
    r = moe_select.explain({"gpu": "RTX 3090", "engine": "vllm", "engine_version": version, "model": GEMMA4,
                            "quant": "fp8_tensor", "tp": tp})
    hit = [x for x in _reasons(r, "marlin") if x.code == "shape_unaligned" and "marlin.yaml" in x.source
           and "intermediate_per_rank = 352" in x.detail]
    assert bool(hit) == refused, r.summary()
    if refused:
        assert "0.25.0 pads it" in hit[0].detail


def test_the_fp8_marlin_bound_is_vllms_only():
    r = moe_select.explain({"gpu": "RTX 3090", "engine": "sglang", "engine_version": "0.5.23", "model": GEMMA4,
                            "quant": "fp8_tensor", "tp": 2})
    assert not any("0.25.0 pads it" in x.detail for x in _reasons(r, "marlin")), r.summary()


# --- 2. the compressed-tensors MXFP4 method -----------------------------------------------------------------------

def _ct_mxfp4(version: str, gpu: str = "RTX PRO 6000", layout: str | None = "compressed-tensors", **model):
    qc = {"layout": layout, "group_size": 32} if layout else None
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version,
                               "model": {**GPT_OSS_20B, "hidden_size": 3072, "moe_intermediate_size": 3072, **model},
                               "quant": "mxfp4", **({"quant_config": qc} if qc else {}), "tp": 1})


def test_the_ct_mxfp4_method_builds_marlin_only_in_0_18():
    r = _ct_mxfp4("0.18.0")
    for other in ("flashinfer_cutlass", "b12x", "cutlass"):
        assert _cited(r, other, "quant_unsupported", "backends/common.yaml"), (other, r.summary())
    assert not _cited(r, "marlin", "quant_unsupported", "backends/common.yaml")
    assert r.plan is not None and r.plan.runner == "marlin", r.summary()
    detail = next(x.detail for x in _reasons(r, "flashinfer_cutlass") if "common.yaml" in x.source)
    assert "CompressedTensorsW4A4Mxfp4MoEMethod" in detail and "builds marlin" in detail


def test_the_ct_mxfp4_method_builds_cutlass_or_marlin_in_0_24_and_is_not_stated_after():
    """0.24.0: CUTLASS MXFP4 or Marlin. After it, only the releases still not read (0.25.0 .. 0.28.x) carry no method
    fact. Release delta of 2026-12-05 (was: 0.30.0 had no fact, because 0.25 .. 0.33 were not read): the 0.29.0 ..
    0.34.0 wheels were read, and CompressedTensorsW4A4Mxfp4MoEMethod.__init__ (vllm-0.30.0 and vllm-0.34.0:
    vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_mxfp4.py)
    builds what select_mxfp4_moe_backend picks for --moe-backend b12x (0.29.0 on) and deep_gemm (0.34.0 on), else
    CutlassExpertsMxfp4 where supported, else MarlinExperts: never FlashInfer's CUTLASS experts."""
    r = _ct_mxfp4("0.24.0")
    assert _cited(r, "flashinfer_cutlass", "quant_unsupported", "backends/common.yaml")
    assert not _cited(r, "cutlass", "quant_unsupported", "backends/common.yaml")
    unread = _ct_mxfp4("0.27.0")   # 0.25 .. 0.28 not read: no method fact there
    assert not any("common.yaml" in x.source for c in unread.candidates for x in c.reasons), unread.summary()
    later = _ct_mxfp4("0.30.0")   # read in the release delta: marlin, cutlass, b12x
    for other in ("flashinfer_cutlass", "deep_gemm"):
        assert _cited(later, other, "quant_unsupported", "backends/common.yaml"), (other, later.summary())
    for built in ("marlin", "cutlass", "b12x"):
        assert not _cited(later, built, "quant_unsupported", "backends/common.yaml"), (built, later.summary())
    newest = _ct_mxfp4("0.34.0")  # deep_gemm on request from 0.34.0
    assert not _cited(newest, "deep_gemm", "quant_unsupported", "backends/common.yaml"), newest.summary()
    assert _cited(newest, "flashinfer_cutlass", "quant_unsupported", "backends/common.yaml")


def test_the_native_mxfp4_layout_is_the_default_and_not_touched():
    r = _ct_mxfp4("0.18.0", layout=None)
    assert r.deployment.quant_params.get("layout") == "mxfp4"
    assert "default" in r.deployment.provenance["quant_params"]
    assert not any("common.yaml" in x.source for c in r.candidates for x in c.reasons), r.summary()
    assert _cited(_ct_mxfp4("0.18.0"), "b12x", "quant_unsupported", "backends/common.yaml")


def _ct_config(tmp_path: Path, group: int, fmt: str) -> Path:
    c = json.loads((ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b" / "config.json").read_text())
    c["quantization_config"] = {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": group,
                                           "symmetric": True}}}}
    d = tmp_path / f"ckpt{group}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(c))
    return d


def test_compressed_tensors_fp4_of_group_32_is_mxfp4_and_says_its_layout(tmp_path):
    info = read_model_config(_ct_config(tmp_path, 32, "mxfp4-pack-quantized"), engine="vllm")
    assert info.quant == "mxfp4" and info.quant_params["layout"] == "compressed-tensors"
    info = read_model_config(_ct_config(tmp_path, 16, "nvfp4-pack-quantized"), engine="vllm")
    assert info.quant == "nvfp4" and "layout" not in info.quant_params
    native = read_model_config(ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b", engine="vllm")
    assert native.quant == "mxfp4" and native.quant_params["layout"] == "mxfp4"


def test_a_method_fact_names_its_engine():
    with pytest.raises(ValidationError, match="names the engine"):
        MethodRunners.model_validate({"runners": ["marlin"], "when": {"quant": ["mxfp4"]}, "why": "x", "source": "y"})
    # (empty runners: the method loads the layer with none, field round 37: tests/test_field_round_37_kinds.py)


# --- 3. Marlin's two-dimensional tile rule under that method ------------------------------------------------------

@pytest.mark.parametrize("hidden, inter, refused", [
    (2880, 2880, True),     # the report: hidden % 128 == 64 and intermediate % 128 == 64
    (2880, 2944, False),    # intermediate % 128 == 0: (128, 64) tiles fit the down projection
    (3072, 2880, False),    # hidden % 128 == 0: (64, 128) tiles fit it
    (3072, 2912, True),     # intermediate % 64 == 32
    (2848, 3072, True)])    # hidden % 64 == 32
def test_marlin_ct_mxfp4_alignment(hidden, inter, refused):
    r = _ct_mxfp4("0.24.0", gpu="A100", hidden_size=hidden, moe_intermediate_size=inter)
    hit = _cited(r, "marlin", "shape_unaligned", "backends/marlin.yaml")
    assert hit == refused, (hidden, inter, r.summary())


def test_the_native_layout_is_not_held_to_the_unpadded_rule():
    r = moe_select.explain({"gpu": "A100", "engine": "vllm", "engine_version": "0.24.0", "model": GPT_OSS_20B,
                            "quant": "mxfp4", "tp": 1})
    assert r.plan is not None and r.plan.runner == "marlin", r.summary()
    assert not any("Invalid thread config" in x.detail for x in _reasons(r, "marlin"))


def test_not_multiple_of():
    c = IntRange(not_multiple_of=128)
    assert c.contains(2880) and not c.contains(3072) and c.contains(64)
    both = IntRange(multiple_of=64, not_multiple_of=128)
    assert both.contains(2880) and not both.contains(3072) and not both.contains(2848)
    assert IntRange(multiple_of=256, not_multiple_of=128).empty() and not both.empty()
    assert "not a multiple of 128" in When(hidden_size=IntRange(not_multiple_of=128)).describe()
    with pytest.raises(ValidationError):
        IntRange(not_multiple_of=1)
    # a condition excluding the multiples of 128 covers one excluding those of 64 (every such value is excluded too)
    assert _covers(When(hidden_size=IntRange(not_multiple_of=128)), When(hidden_size=IntRange(not_multiple_of=64)))
    assert not _covers(When(hidden_size=IntRange(not_multiple_of=64)), When(hidden_size=IntRange(not_multiple_of=128)))

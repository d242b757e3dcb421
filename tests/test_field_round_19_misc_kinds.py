"""Field round 19 of issue 21 (tests/cases/field_round_19.yaml), two cases fixed as kinds: each kind tested on other
deployments than the round's case (another GPU, format, model, release or parallel layout), on both sides of each bound.

1. SGLang's flashinfer_cutlass runner hands FlashInfer's cutlass_fused_moe no swiglu_alpha/beta/limit before 0.5.21
   (FlashInferCutlassMoeQuantInfo has no such fields up to the 0.5.20 wheel; 0.5.21's materialize_swiglu_params_for_cutlass
   fills them for the bf16, ModelOpt FP8 and NVFP4 methods; sgl-project/sglang#39939, #28092, #28326), so gpt-oss's
   clamped SwiGLU runs as plain SwiGLU (wrong output): swiglu_oai refused there (activation_unsupported,
   backends/flashinfer_cutlass.yaml), taken from 0.5.21; vLLM's FlashInferExperts pass them (not touched).
2. AITER's CK MXFP4 MoE (fp4x2 activations, SiLU/GELU) faults under expert parallelism: its sorting runs over the
   global expert count and the stage-1 GEMM indexes the local weights with the ids it writes (ROCm/aiter#2343, fixes
   #2447 closed and #2478 open, in no release). Reported with 96 local experts (Kimi-K2.5-MXFP4 at TP 4 / EP 4) under
   AITER 6af8b687 and v0.1.10.post2 (vLLM 0.16.0 / 0.17.0 images); 48 local experts and no EP run. aiter refused
   (parallelism_unsupported, backends/aiter.yaml) on gfx950 for SiLU/GELU MXFP4 with EP and 96 or more local experts,
   amd-aiter >= 0.1.7.post5, no upper bound (the fix is unreleased).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import cand, planned, refusals

# gpt-oss-20b's MoE (32 experts, top 4, hidden 2880, intermediate 2880, OAI SwiGLU): not the round's 120b.
GPT_OSS_20B = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize"}
# DeepSeek-R1's MoE as an MXFP4 checkpoint (256 experts, top 8, 8 groups / top 4), not the round's Kimi-K2.5.
R1 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
      "routing": "deepseek_v3", "n_group": 8, "topk_group": 4, "num_shared_experts": 1}


BACKENDS = Path(__file__).resolve().parent.parent / "backends"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _fc_line(marker: str) -> int:
    """The 1-based line of backends/flashinfer_cutlass.yaml's first line containing ``marker``."""
    with open(BACKENDS / "flashinfer_cutlass.yaml", encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if marker in line)


def _aiter_line(marker: str) -> int:
    """The 1-based line of backends/aiter.yaml's first line containing ``marker``."""
    with open(BACKENDS / "aiter.yaml", encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if marker in line)


# ------------------------------------------------------------ kind 1: SGLang flashinfer_cutlass x swiglu_oai
SGL = dict(engine="sglang", model=GPT_OSS_20B, tp=1, ep=1, a2a="none", runner="flashinfer_cutlass")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.20"])
@pytest.mark.parametrize(("gpu", "quant"), [("B200", "nvfp4"), ("H200", "bf16"), ("H200", "fp8_tensor")])
def test_sglang_fi_cutlass_swiglu_oai_refused_before_0_5_21(gpu, quant, version):
    """gpt-oss-20b under SGLang 0.5.14 / 0.5.20 (wheels whose non-MXFP4 cutlass_fused_moe calls pass no swiglu_*):
    NVFP4 on B200, bf16 and ModelOpt FP8 on H200 are refused (activation_unsupported) by the SGLang swiglu_oai row's
    version gate (sglang >=0.5.21), whose comment cites sgl-project/sglang#39939."""
    r = _explain(**SGL, gpu=gpu, quant=quant, engine_version=version)
    assert r.plan is None
    codes = refusals(r, "flashinfer_cutlass")
    assert set(codes) == {"activation_unsupported"}, codes
    row = _fc_line("requires: {sglang: \">=0.5.21\"}") - 2  # the row's '- values: [swiglu_oai]' line
    assert codes["activation_unsupported"] == f"backends/flashinfer_cutlass.yaml:{row}"
    detail = next(x.detail for x in cand(r, "flashinfer_cutlass").reasons)
    assert "sglang >=0.5.21" in detail and f"sglang is {version}" in detail


@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
@pytest.mark.parametrize(("gpu", "quant"), [("B200", "nvfp4"), ("H200", "bf16"), ("RTX PRO 6000", "nvfp4")])
def test_sglang_fi_cutlass_swiglu_oai_planned_from_0_5_21(gpu, quant, version):
    """From the 0.5.21 wheel (materialize_swiglu_params_for_cutlass, passed by _run_flashinfer_cutlass) the same
    deployments are planned with flashinfer_cutlass."""
    r = _explain(**SGL, gpu=gpu, quant=quant, engine_version=version)
    assert planned(r, "flashinfer_cutlass"), [(x.code, x.detail) for x in r.reasons]


def test_sglang_fi_cutlass_plain_silu_untouched_before_0_5_21():
    """The gate is the clamped SwiGLU's: the same shape with plain SiLU (no alpha, no clamp) is planned at 0.5.20."""
    r = _explain(**{**SGL, "model": {**GPT_OSS_20B, "activation": "silu"}}, gpu="B200", quant="nvfp4",
                 engine_version="0.5.20")
    assert planned(r, "flashinfer_cutlass"), [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("gpu", "quant"), [("B200", "nvfp4"), ("H200", "bf16")])
def test_vllm_fi_cutlass_swiglu_oai_not_refused_by_the_sglang_row(gpu, quant):
    """vLLM's FlashInferExperts take SWIGLUOAI and pass its parameters: under vLLM 0.19.0 gpt-oss-20b on
    flashinfer_cutlass is not refused for its activation."""
    r = _explain(**{**SGL, "engine": "vllm"}, gpu=gpu, quant=quant, engine_version="0.19.0")
    assert "activation_unsupported" not in refusals(r, "flashinfer_cutlass")


# ------------------------------------------------------------ kind 2: AITER CK MXFP4 MoE x expert parallelism
AITER = dict(gpu="MI355X", quant="mxfp4", a2a="none", runner="aiter")


def _ck_ep_refusal(r: Any) -> None:
    """``r`` refuses aiter for parallelism, citing the CK MXFP4 EP constraint (its ``max: 95`` line)."""
    assert r.plan is None or r.plan.runner != "aiter"
    codes = refusals(r, "aiter")
    assert codes.get("parallelism_unsupported") == f"backends/aiter.yaml:{_aiter_line('    max: 95') - 1}", codes
    detail = next(x.detail for x in cand(r, "aiter").reasons if x.code == "parallelism_unsupported")
    assert "ROCm/aiter#2343" in detail


@pytest.mark.parametrize("aiter", ["0.1.7.post5", "0.1.10.post2", "0.1.20.post1"])
def test_aiter_ck_mxfp4_ep_refused_vllm(aiter):
    """DeepSeek-R1 MXFP4 on MI355X at TP 2 / EP 2 (128 local experts) under vLLM 0.17.0: refused for every AITER from
    the first release the report's images carry (0.1.7.post5) to the newest read (0.1.20.post1: no fix released)."""
    r = _explain(**AITER, engine="vllm", engine_version="0.17.0", model=R1, tp=2, ep=2,
                 packages={"amd-aiter": aiter})
    _ck_ep_refusal(r)


def test_aiter_ck_mxfp4_ep_refused_sglang_with_expert_mask():
    """SGLang from 0.5.7 hands AITER the expert mask for SiLU MXFP4 (the earlier no-mask row does not apply): at
    0.5.9, TP 2 / EP 2 on MI355X, the CK MXFP4 EP constraint refuses aiter (engine-independent: AITER's fault)."""
    r = _explain(**AITER, engine="sglang", engine_version="0.5.9", model=R1, tp=2, ep=2)
    _ck_ep_refusal(r)


def test_aiter_ck_mxfp4_ep_before_the_bound_planned():
    """amd-aiter 0.1.7.post4 (before the vLLM 0.16.0 image's commit 6af8b687): the same deployment is planned."""
    r = _explain(**AITER, engine="vllm", engine_version="0.17.0", model=R1, tp=2, ep=2,
                 packages={"amd-aiter": "0.1.7.post4"})
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("tp", "ep"), [(2, 1), (8, 8)])
def test_aiter_ck_mxfp4_without_ep_or_few_local_experts_planned(tp, ep):
    """No expert parallelism (TP 2, 256 experts on every rank) and EP 8 (32 local experts, below the 48 the report ran)
    are planned with aiter 0.1.10.post2."""
    r = _explain(**AITER, engine="vllm", engine_version="0.17.0", model=R1, tp=tp, ep=ep,
                 packages={"amd-aiter": "0.1.10.post2"})
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("experts", "refused"), [(190, False), (192, True)])
def test_aiter_ck_mxfp4_ep_local_expert_bound(experts, refused):
    """Both sides of the local-expert bound at EP 2: 95 local experts planned, 96 (the count that faulted) refused."""
    r = _explain(**AITER, engine="vllm", engine_version="0.17.0", model={**R1, "num_experts": experts, "n_group": 1,
                 "topk_group": 1}, tp=2, ep=2, packages={"amd-aiter": "0.1.10.post2"})
    if refused:
        _ck_ep_refusal(r)
    else:
        assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


def test_aiter_ck_mxfp4_ep_not_for_swiglu_oai():
    """The constraint is the gfx950 CK fp4x2 path's: gpt-oss's SwiGLU (bf16 activations, another kernel) at TP 2 /
    EP 2 with 128 experts per rank on MI355X is not refused by it."""
    gpt = {**GPT_OSS_20B, "num_experts": 256}
    r = _explain(**AITER, engine="vllm", engine_version="0.17.0", model=gpt, tp=2, ep=2,
                 packages={"amd-aiter": "0.1.10.post2"})
    line = f"backends/aiter.yaml:{_aiter_line('    max: 95') - 1}"
    assert line not in refusals(r, "aiter").values()

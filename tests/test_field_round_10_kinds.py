"""Field round 10 of issue 21 (tests/cases/field_round_10.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case.

1. AITER builds no fp4x2 path on gfx942 (ROCm/aiter jit/core.py, quant_kernels.cu; sgl-project/sglang#35525): aiter
   refused for MXFP4 on gfx942 under SGLang for every architecture; vLLM's Triton W4A16 path there is untouched.
2. vLLM's Mega MoE shards experts evenly over EP (vllm-project/vllm#52435; DeepGEMM's symmetric buffer asserts it).
3. TensorRT-LLM's DenseGEMMFusedMoE is TP-only (NVIDIA/TensorRT-LLM#15451).
4. TensorRT-LLM's MegaMoEDeepGemm is EP-only and rejects TEP (NVIDIA/TensorRT-LLM#14222); MegaMoECuteDsl is EP-only too
   but takes TEP.
5. vLLM's Triton experts run on any ROCm GPU, and MXFP4 there through the OCP MX emulation from 0.27.0
   (vllm-project/vllm#49141).
6. SGLang's CUTLASS W4A8 MoE is the Hopper kernel: refused on 12.x (sgl-project/sglang#17494).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
QWEN235 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "renormalize"}
DSV4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "custom", "num_shared_experts": 1}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _source_of(r: Any) -> set[str]:
    return {x.source.split(":")[0] for x in r.reasons}


# --------------------------------------------------------------------------------- kind 1: aiter MXFP4 on gfx942 (SGLang)
@pytest.mark.parametrize("architecture", [None, "Qwen3MoeForCausalLM", "DeepseekV4ForCausalLM"])
def test_aiter_mxfp4_gfx942_refused_under_sglang_any_architecture(architecture):
    """Qwen3-235B-shaped MXFP4 on MI325X (gfx942) with aiter asked for under SGLang: refused (quant_unsupported) with or
    without a stated architecture, by the aiter.yaml row that is not architecture-scoped."""
    model = dict(QWEN235, **({"architecture": architecture} if architecture else {}))
    r = _explain(gpu="MI325X", engine="sglang", quant="mxfp4", model=model, tp=4, runner="aiter")
    assert r.plan is None and _codes(r) == {"quant_unsupported"}, [(x.code, x.source) for x in r.reasons]
    assert _source_of(r) == {"backends/aiter.yaml"}


def test_aiter_mxfp4_gfx942_vllm_and_gfx950_unchanged():
    """The refusal is SGLang's: vLLM's AITER Triton W4A16 stays planned on gfx942, and gfx950 MXFP4 stays supported."""
    v = _explain(gpu="MI325X", engine="vllm", quant="mxfp4", model=QWEN235, runner="aiter")
    assert v.plan is not None and v.plan.runner == "aiter"
    s = _explain(gpu="MI355X", engine="sglang", quant="mxfp4", model=QWEN235, runner="aiter")
    assert s.plan is not None and s.evidence == "supported"


# --------------------------------------------------------------------------------- kind 2: vLLM Mega MoE expert split
@pytest.mark.parametrize(("ep", "ok"), [(2, True), (4, True), (8, True), (3, False), (6, False), (5, False)])
def test_vllm_megamoe_experts_divide_over_ep(ep, ok):
    """DeepSeek-V4-Flash-shaped MXFP4 (256 experts) on B200 under vLLM 0.30.0 with deep_gemm_mega_moe at DP = EP:
    refused with experts_not_divisible exactly where 256 % ep != 0."""
    r = _explain(gpu="B200", engine="vllm", engine_version="0.30.0", quant="mxfp4", model=DSV4, tp=1, dp=ep, ep=ep,
                 runner="deep_gemm_mega_moe", cuda_graph=False)
    assert (r.plan is not None) is ok, [(x.code, x.source) for x in r.reasons]
    if not ok:
        assert _codes(r) == {"experts_not_divisible"}
        assert _source_of(r) == {"backends/deep_gemm_mega_moe.yaml"}


# --------------------------------------------------------------------------------- kind 3: TRT-LLM DENSEGEMM is TP-only
@pytest.mark.parametrize(("tp", "ep", "ok"), [(4, 1, True), (4, 4, False), (8, 2, False)])
def test_trtllm_densegemm_refuses_expert_parallelism(tp, ep, ok):
    """NVFP4 Qwen3-30B-A3B on B200 under TensorRT-LLM with DENSEGEMM: TP 4 planned; any EP > 1 refused
    (parallelism_unsupported, trtllm_densegemm.yaml)."""
    r = _explain(gpu="B200", engine="trtllm", model_config=str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"), tp=tp, ep=ep,
                 runner="trtllm_densegemm")
    assert (r.plan is not None) is ok, [(x.code, x.source) for x in r.reasons]
    if not ok:
        assert _codes(r) == {"parallelism_unsupported"}
        assert _source_of(r) == {"backends/trtllm_densegemm.yaml"}


# --------------------------------------------------------------------------------- kind 4: TRT-LLM MegaMoE topologies
KIMI = {"num_experts": 384, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "custom", "num_shared_experts": 1}


@pytest.mark.parametrize(("tp", "dp", "ep", "code"), [
    (4, 4, 4, None),                       # DEP4: attention DP over every rank
    (4, 1, 4, "parallelism_unsupported"),  # TEP4
    (8, 8, 4, "parallelism_unsupported"),  # moe_tp 2: MegaMoE is EP-only
    (1, 1, 1, None),                       # one GPU: nothing to partition
])
def test_trtllm_megamoe_deepgemm_needs_dep(tp, dp, ep, code):
    """Kimi-K2-shaped MXFP4 (384 experts) on B200 under TensorRT-LLM with MEGAMOE_DEEPGEMM."""
    r = _explain(gpu="B200", engine="trtllm", quant="mxfp4", model=KIMI, tp=tp, dp=dp, ep=ep,
                 runner="trtllm_megamoe_deepgemm")
    if code is None:
        assert r.plan is not None and r.evidence == "supported", [(x.code, x.source) for x in r.reasons]
    else:
        assert r.plan is None and _codes(r) == {code}
        assert _source_of(r) == {"backends/trtllm_megamoe_deepgemm.yaml"}


def test_trtllm_megamoe_deepgemm_dp_unstated_is_unverified():
    """TP 4 / EP 4 without dp: the TEP refusal reads dp, so the runner is unverified (not planned as supported)."""
    r = _explain(gpu="B200", engine="trtllm", quant="mxfp4", model=KIMI, tp=4, ep=4, runner="trtllm_megamoe_deepgemm")
    assert r.plan is not None and r.evidence == "unverified"


def test_trtllm_megamoe_deepgemm_experts_divide_over_ep():
    """384 experts over EP 5 (DEP5): refused, experts_not_divisible."""
    r = _explain(gpu="B200", engine="trtllm", quant="mxfp4", model=KIMI, tp=5, dp=5, ep=5,
                 runner="trtllm_megamoe_deepgemm")
    assert r.plan is None and _codes(r) == {"experts_not_divisible"}


@pytest.mark.parametrize(("tp", "dp", "ep", "ok"), [(4, 1, 4, True), (4, 4, 4, True), (8, 8, 4, False)])
def test_trtllm_megamoe_cutedsl_takes_tep_but_is_ep_only(tp, dp, ep, ok):
    """NVFP4 Qwen3-30B-A3B on B200 under TensorRT-LLM with MEGAMOE_CUTEDSL: TEP4 and DEP4 planned, moe_tp 2 refused."""
    r = _explain(gpu="B200", engine="trtllm", model_config=str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"), tp=tp, dp=dp,
                 ep=ep, runner="trtllm_megamoe_cutedsl")
    assert (r.plan is not None) is ok, [(x.code, x.source) for x in r.reasons]
    if not ok:
        assert _codes(r) == {"parallelism_unsupported"}


# --------------------------------------------------------------------------------- kind 5: vLLM Triton on other ROCm GPUs
@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100", "gfx1201"])
def test_vllm_mxfp4_emulation_on_other_rocm(arch):
    """Qwen3-235B-shaped MXFP4 under vLLM (newest checked) with runner auto on CDNA2 / RDNA3 / RDNA4: triton planned
    (amd-other rule), bf16 activations; at vLLM 0.26.0 (no ROCm EMULATION in the MXFP4 oracle) refused."""
    r = _explain(arch=arch, engine="vllm", quant="mxfp4", model=QWEN235)
    assert r.plan is not None and r.plan.runner == "triton", [(x.code, x.source) for x in r.reasons]
    assert r.plan.activation_precision == "bf16"
    old = _explain(arch=arch, engine="vllm", engine_version="0.26.0", quant="mxfp4", model=QWEN235, runner="triton")
    assert old.plan is None and _codes(old) == {"quant_unsupported"}


def test_vllm_bf16_triton_on_mi100_and_not_sglang():
    """bf16 Mixtral-shaped layer on MI100 (gfx908): vLLM plans triton; SGLang's ROCm kernels are not built for it."""
    m = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu",
         "routing": "renormalize"}
    r = _explain(gpu="MI100", engine="vllm", quant="bf16", model=m)
    assert r.plan is not None and r.plan.runner == "triton"
    s = _explain(gpu="MI100", engine="sglang", quant="bf16", model=m, runner="triton")
    assert s.plan is None or s.evidence != "supported"


# --------------------------------------------------------------------------------- kind 6: SGLang CUTLASS W4A8 is Hopper's
@pytest.mark.parametrize("gpu", ["RTX 5090", "GB10"])
def test_sglang_cutlass_w4a8_refused_on_sm12x(gpu):
    """W4AFP8 Qwen3-235B-shaped layer under SGLang with the CUTLASS W4A8 MoE on 12.x: refused (arch_unsupported,
    cutlass.yaml); on H200 still supported; on B200 left open (unverified)."""
    r = _explain(gpu=gpu, engine="sglang", quant="int4_w4a8", model=QWEN235, runner="cutlass")
    assert r.plan is None and _codes(r) == {"arch_unsupported"}
    assert _source_of(r) == {"backends/cutlass.yaml"}
    h = _explain(gpu="H200", engine="sglang", quant="int4_w4a8", model=QWEN235, runner="cutlass")
    assert h.plan is not None and h.evidence == "supported"
    b = _explain(gpu="B200", engine="sglang", quant="int4_w4a8", model=QWEN235, runner="cutlass")
    assert b.plan is not None and b.evidence == "unverified"

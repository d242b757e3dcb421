"""Field round 26 (2026-12-03; tests/cases/field_round_26.yaml): its one report answered with the right status but the
wrong reason, and the kind behind it fixed: an upstream gate that admits *any* ROCm GPU written as a list of the
declared gfx targets, so an undeclared one (gfx1151, Strix Halo) was refused.

vLLM's Triton experts run wherever ``current_platform.is_cuda_alike()`` holds, any ROCm GPU
(TritonExperts._supports_current_device); FP8 only where ``RocmPlatform.supports_fp8()`` holds (gfx94*, gfx95*, gfx12* at
vllm-project/vllm@001eda31e3d0), which excludes RDNA3/3.5 (gfx11xx). lemonade-sdk/vllm-rocm#44: on gfx1151 the FP8
checkpoint has no MoE backend, the bf16 one serves. The expectations are written from those two upstream checks, not
computed from the facts.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.vocab import arch_in
from moe_select.vocabulary import Family

from report_helpers import only_refusal, refusals

QWEN35_A3B = {"num_experts": 256, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 512, "activation": "silu"}
DEP = dict(engine="vllm", quant="bf16", model=QWEN35_A3B, tp=1)


def _explain(**over: Any) -> Any:
    return moe_select.explain({**DEP, **over})


@pytest.mark.parametrize("arch", ["gfx1151", "gfx1150", "gfx1101", "gfx1030", "gfx1100", "gfx90a"])
def test_vllm_bf16_runs_triton_on_any_rocm_gpu_declared_or_not(arch):
    r = _explain(arch=arch)
    assert r.plan is not None and r.plan.runner == "triton", refusals(r, "triton")
    assert r.plan.evidence == "supported"


def test_gfx1151_is_declared_with_its_product():
    r = _explain(gpu="Radeon 8060S")
    assert r.plan is not None and r.plan.runner == "triton"
    assert r.deployment.arch == "gfx1151"


@pytest.mark.parametrize("quant", ["fp8_block", "fp8_channel", "fp8_tensor"])
@pytest.mark.parametrize("arch", ["gfx1151", "gfx1100"])
def test_vllm_fp8_off_supports_fp8_is_refused_for_the_fp8_gate(arch, quant):
    """The report's deployment: refused, and for the platform's FP8 gate (the support list's exhaustive source cites
    RocmPlatform.supports_fp8), not for the arch. (gfx90a was listed here too, from supports_fp8 at 001eda31e3d0; but
    TritonExperts' own gate is on_gfx9(), gfx90a included, from the 0.15.0 wheel, and supports_fp8 takes on_gfx9() from
    0.20.0: tests/test_vllm_rocm_fp8_triton.py.)

    Pinned to vLLM 0.29.0, the release assumed when this was written.
    From 0.33.0 RocmPlatform.supports_fp8() is on_cdna() or on_rdna() (vllm-0.33.0 vllm/platforms/rocm.py:supports_fp8;
    0.29.0 .. 0.32.0: on_cdna() or on_rdna4()), so TritonExperts._supports_quant_scheme takes the FP8 schemes on
    gfx11xx and Triton is planned there (below)."""
    qc = {"quant_config": {"block": [128, 128]}} if quant == "fp8_block" else {}
    r = _explain(arch=arch, quant=quant, engine_version="0.29.0", **qc)
    assert r.plan is None
    detail = only_refusal(r, "triton", "quant_unsupported", "triton.yaml")
    # the gate's row: from vLLM 0.33.0 supports_fp8() admits RDNA (fact audit 61-90), so at 0.29.0 the refusal names
    # that version-gated row
    assert "supports_fp8" in detail or "vllm >=0.33.0" in detail, detail
    r = _explain(arch=arch, quant=quant, engine_version="0.33.0", **qc)
    assert r.plan is not None and r.plan.runner == "triton", refusals(r, "triton")


def test_mi3xx_still_prefers_aiter_and_cuda_is_not_rocm():
    # vLLM's AITER experts need VLLM_ROCM_USE_AITER (vendor_library; default off): with it stated, aiter is preferred;
    # unstated, the supported triton is planned before the unverified aiter
    r = _explain(gpu="MI300X", vendor_library=True)
    assert r.plan is not None and r.plan.runner == "aiter"
    r = _explain(gpu="MI300X")
    assert r.plan is not None and r.plan.runner == "triton" and r.plan.evidence == "supported"
    assert arch_in("gfx1151", ["rocm"]) and arch_in("gfx942", ["rocm"])
    assert not arch_in("sm90", ["rocm"]) and not arch_in("cpu", ["rocm"])


def test_a_family_takes_one_way_of_naming_its_archs():
    src = "vllm-project/vllm@c77619938d1c:vllm/platforms/interface.py:Platform.is_rocm"
    assert Family(name="rocm", vendor="amd", source=src).describe() == "rocm (every amd GPU)"
    for bad in ({"vendor": "amd", "members": ["gfx942"]}, {"vendor": "amd", "majors": [9]}, {}):
        with pytest.raises(ValueError, match="give one of members"):
            Family(name="x9", source=src, **bad)
    with pytest.raises(ValueError):
        Family(name="x9", source=src, vendor="cpu")


@pytest.mark.parametrize("runner", ["cutlass", "flashinfer_cutedsl", "hpc_ops"])
@pytest.mark.parametrize("arch", ["gfx942", "gfx1151", "gfx1201"])
@pytest.mark.parametrize("quant", ["fp8_block", "nvfp4", "bf16"])
def test_vllm_cuda_only_experts_are_refused_on_rocm(runner, arch, quant):
    """The round's checker found CUDA-only vLLM experts listed as eligible (unverified) on AMD GPUs: their device checks
    test ``current_platform.is_cuda()`` (CutlassExpertsFp8Base via cutlass_group_gemm_supported, CutlassExpertsFp4 /
    Mxfp4, FlashInferCuteDSLExperts, HPCExperts), so every ROCm GPU is refused, declared or not."""
    qc = {"quant_config": {"block": [128, 128]}} if quant == "fp8_block" else {}
    r = _explain(arch=arch, quant=quant, runner=runner, **qc)
    assert r.plan is None
    assert "arch_unsupported" in refusals(r, runner)


@pytest.mark.parametrize("runner", ["flashinfer_mxfp4", "torch_grouped_mm"])
def test_vllm_ships_neither_flashinfer_mxfp4_nor_torch_grouped_mm(runner):
    """vLLM's --moe-backend values are its MoEBackend literal: neither name is one (refused, not unverified)."""
    r = _explain(gpu="B200", quant="mxfp4" if runner == "flashinfer_mxfp4" else "bf16", runner=runner)
    assert r.plan is None
    assert "engine_unsupported" in refusals(r, runner)


def test_cuda_only_experts_stay_open_on_cuda():
    """The rocm rows do not touch CUDA GPUs: cutlass on an H100 with block FP8 under vLLM is not refused for the arch."""
    r = _explain(gpu="H100", quant="fp8_block", quant_config={"block": [128, 128]}, runner="cutlass")
    assert "arch_unsupported" not in refusals(r, "cutlass")


OLMOE = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 1024, "activation": "silu"}


def test_turing_fp16_runs_vllm_triton_experts():
    """A new user's trial (2026-12-03): an unquantized MoE on a T4 under vLLM was refused by the Triton arch list,
    whose upstream check is is_cuda_alike() with no capability test; vLLM's unquantized oracle ends at TRITON there."""
    r = _explain(gpu="T4", quant="fp16", model=OLMOE)
    assert r.plan is not None and r.plan.runner == "triton" and r.plan.evidence == "supported"


def test_turing_bf16_is_refused_for_the_dtype_under_vllm():
    """vLLM refuses a bf16 model dtype below compute capability 8.0 (check_if_supports_dtype): fp16 is the fix."""
    r = _explain(gpu="T4", quant="bf16", model=OLMOE)
    assert r.plan is None
    assert set(refusals(r, "triton")) == {"quant_unsupported"}


def test_turing_quantized_stays_with_marlin_and_16bit_does_not_go_to_marlin():
    r = _explain(gpu="T4", quant="int4_w4a16", model=OLMOE, quant_config={"group_size": 128})
    assert r.plan is not None and r.plan.runner == "marlin"
    r = _explain(gpu="T4", quant="fp16", model=OLMOE, engine="sglang")
    assert r.plan is not None and r.plan.runner == "triton"


@pytest.mark.parametrize("runner", ["flashinfer_b12x", "b12x"])
def test_sglang_has_no_b12x_runner(runner):
    """A new user's trial: flashinfer_b12x was planned under SGLang (unverified) though SGLang's --moe-runner-backend
    choices (argparse) have no such value; refused for the engine now."""
    r = moe_select.explain(dict(gpu="RTX 5090", engine="sglang", quant="nvfp4", model=QWEN35_A3B, tp=1, runner=runner))
    assert r.plan is None
    assert "engine_unsupported" in refusals(r, runner)


def test_bare_fp8_suggests_the_fp8_formats_not_mxfp8():
    """A new user's trial: ``--quant fp8`` was answered "did you mean 'mxfp8'" (a Blackwell format); the formats it
    is short for are fp8_tensor, fp8_channel and fp8_block."""
    r = _explain(gpu="H100", quant="fp8")
    note = next(n for n in r.deployment.notes if n.startswith("quant fp8 is not a format"))
    assert "fp8_tensor, fp8_channel, fp8_block" in note and "mxfp8" not in note

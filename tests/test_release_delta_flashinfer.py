"""FlashInfer release delta 0.6.18 -> 0.7.x (0.7.0.post1, 0.7.1, 0.7.2.post1 and 0.7.4 wheels read; 0.7.3 not available),
applied as facts: each test asserts the behaviour at the old FlashInfer release and at the new one.

- F1: flashinfer.comm's MoE all-to-alls (MoeAlltoAll, MnnvlMoe) are gone in 0.7.4; flashinfer.moe_ep's
  NVLinkOneSidedAlltoAll / NVLinkTwoSidedAlltoAll are first read in 0.7.2.post1. SGLang (every release read) and vLLM
  < 0.33.0 (one-sided) / < 0.34.0 (two-sided) import the old classes; vLLM 0.33.0+ (one-sided) / 0.34.0 (two-sided) the
  new ones: engine-scoped flashinfer-python rows in backends/a2a/flashinfer*.yaml.
- F2: from 0.7.1 SM120 JIT-builds with CUDA 12.8 (compute_120a); SM121 keeps 12.9; NVFP4 on SM120 keeps 12.9 as a
  caution (not verified on a compute_120a build).
- F3: on an H20 (78 SMs) FlashInfer >= 0.7.1 builds fused_moe_90_h20_prebuilt_d, which flashinfer-jit-cache lacks: a
  note on sm90 plans (the arch vocabulary cannot tell an H20 from an H100).
- F4: the b12x EP refusal's why names vLLM's own refusal (FlashInfer takes EP for w4a16 from 0.7.1).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, refusals

SMALL = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _a2a_refusals(r: Any, yaml: str) -> list[str]:
    """Details of the dependency_missing reasons cited from backends/a2a/<yaml> (each candidate carries the a2a's), once."""
    return sorted({x.detail for x in r.reasons if x.code == "dependency_missing"
                   and x.source.startswith(f"backends/a2a/{yaml}:")})


# ------------------------------------------------------------------------------------ F1: the all-to-alls' homes
def _sglang_fi_a2a(fi: str) -> Any:
    return moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": "0.5.23", "tp": 4, "ep": 4, "dp": 4,
                               "a2a": "flashinfer", "model": SMALL, "quant": "bf16", "packages": {"flashinfer-python": fi}})


def test_sglang_flashinfer_a2a_needs_flashinfer_comm_moealltoall():
    """SGLang imports flashinfer.comm.MoeAlltoAll (FlashinferDispatcher raises ImportError without it): its pin 0.7.2
    plans; 0.7.4, where flashinfer.comm has no MoeAlltoAll, is refused at the a2a's package row."""
    ok = _sglang_fi_a2a("0.7.2")
    assert ok.status == "ok" and not _a2a_refusals(ok, "flashinfer.yaml")
    new = _sglang_fi_a2a("0.7.4")
    assert new.plan is None
    (detail,) = _a2a_refusals(new, "flashinfer.yaml")
    assert "flashinfer-python >=0.6.0,<0.7.4; 0.7.4 is installed" in detail


def _vllm_fi_a2a(version: str, a2a: str, fi: str) -> Any:
    return moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version, "tp": 1, "ep": 4, "dp": 4,
                               "a2a": a2a, "model": SMALL, "quant": "bf16", "packages": {"flashinfer-python": fi}})


@pytest.mark.parametrize(("vllm", "a2a", "yaml", "fi", "needs"), [
    # one-sided: flashinfer.comm.trtllm_moe_alltoall before vLLM 0.33.0, flashinfer.moe_ep.NVLinkOneSidedAlltoAll from it
    ("0.32.0", "flashinfer", "flashinfer.yaml", "0.7.4", ">=0.6.0,<0.7.4 with vllm <0.33.0"),
    ("0.33.0", "flashinfer", "flashinfer.yaml", "0.7.1", ">=0.7.2 with vllm >=0.33.0"),
    # two-sided: flashinfer.comm.trtllm_alltoall.MnnvlMoe before vLLM 0.34.0, flashinfer.moe_ep.NVLinkTwoSidedAlltoAll in it
    ("0.33.0", "flashinfer_two_sided", "flashinfer_two_sided.yaml", "0.7.4", ">=0.3.0,<0.7.4 with vllm <0.34.0"),
    ("0.34.0", "flashinfer_two_sided", "flashinfer_two_sided.yaml", "0.7.1", ">=0.7.2 with vllm >=0.34.0"),
])
def test_vllm_flashinfer_a2a_refused_off_its_flashinfer_home(vllm, a2a, yaml, fi, needs):
    r = _vllm_fi_a2a(vllm, a2a, fi)
    assert r.plan is None
    (detail,) = _a2a_refusals(r, yaml)
    assert f"flashinfer-python {needs}; {fi} is installed" in detail


@pytest.mark.parametrize(("vllm", "a2a", "fi"), [
    ("0.32.0", "flashinfer", "0.7.0.post1"),            # the pin, flashinfer.comm
    ("0.33.0", "flashinfer", "0.7.2.post1"),            # the pin, flashinfer.moe_ep
    ("0.33.0", "flashinfer", "0.7.4"),
    ("0.34.0", "flashinfer", "0.7.4"),
    ("0.32.0", "flashinfer_two_sided", "0.7.0.post1"),
    ("0.33.0", "flashinfer_two_sided", "0.7.2.post1"),  # MnnvlMoe still there (deprecated)
    ("0.34.0", "flashinfer_two_sided", "0.7.2.post1"),
    ("0.34.0", "flashinfer_two_sided", "0.7.4"),
])
def test_vllm_flashinfer_a2a_plans_where_its_flashinfer_class_is(vllm, a2a, fi):
    r = _vllm_fi_a2a(vllm, a2a, fi)
    assert r.status == "ok", [(x.code, x.detail) for x in r.reasons if x.backend is None]
    assert not _a2a_refusals(r, "flashinfer.yaml") and not _a2a_refusals(r, "flashinfer_two_sided.yaml")


# ------------------------------------------------------------------------------------ F2: SM120 with CUDA 12.8
def _cutlass(gpu: str, quant: str, fi: str, nvcc: str) -> Any:
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "quant": quant, "model": SMALL, "tp": 1, "ep": 1,
                               "runner": "flashinfer_cutlass", "nvcc": nvcc, "packages": {"flashinfer-python": fi}})


def test_sm120_builds_with_cuda_12_8_from_0_7_1():
    """0.7.0.post1 raises "SM 12.x requires CUDA >= 12.9"; from 0.7.1 SM 12.0 builds compute_120a with CUDA 12.8."""
    old = _cutlass("RTX PRO 6000", "bf16", "0.7.0.post1", "12.8")
    assert "toolchain_unsupported" in refusals(old, "flashinfer_cutlass")
    assert "12.9" in next(x.detail for x in cand(old, "flashinfer_cutlass").reasons if x.code == "toolchain_unsupported")
    assert_planned(_cutlass("RTX PRO 6000", "bf16", "0.7.1", "12.8"), "flashinfer_cutlass")
    assert_planned(_cutlass("RTX PRO 6000", "bf16", "0.7.4", "12.8"), "flashinfer_cutlass")
    # below 12.8 it still raises ("SM 120 requires CUDA >= 12.8")
    low = _cutlass("RTX PRO 6000", "bf16", "0.7.4", "12.6")
    detail = next(x.detail for x in cand(low, "flashinfer_cutlass").reasons if x.code == "toolchain_unsupported")
    assert "12.8" in detail


def test_sm121_keeps_cuda_12_9():
    """SM 12.1+ keeps raising below CUDA 12.9 at 0.7.x."""
    for fi in ("0.7.0.post1", "0.7.4"):
        r = _cutlass("GB10", "bf16", fi, "12.8")
        assert "toolchain_unsupported" in refusals(r, "flashinfer_cutlass"), fi
    assert_planned(_cutlass("GB10", "bf16", "0.7.4", "12.9"), "flashinfer_cutlass")


def test_sm120_nvfp4_keeps_cuda_12_9_as_a_caution():
    """The SM120 NVFP4 TMA grouped GEMM was verified on compute_120f only: CUDA 12.8 (compute_120a) stays refused for
    it at 0.7.x; 12.9 plans."""
    r = _cutlass("RTX PRO 6000", "nvfp4", "0.7.4", "12.8")
    assert "toolchain_unsupported" in refusals(r, "flashinfer_cutlass")
    assert "compute_120a" in next(x.detail for x in cand(r, "flashinfer_cutlass").reasons if x.code == "toolchain_unsupported")
    assert_planned(_cutlass("RTX PRO 6000", "nvfp4", "0.7.4", "12.9"), "flashinfer_cutlass")


# ------------------------------------------------------------------------------------ F3: H20's own sm90 module
def test_sm90_plan_notes_the_h20_module_from_0_7_1():
    def notes(fi: str) -> list[str]:
        r = moe_select.explain({"gpu": "H20", "engine": "vllm", "quant": "bf16", "model": SMALL, "tp": 1,
                                "runner": "flashinfer_cutlass", "packages": {"flashinfer-python": fi}})
        assert_planned(r, "flashinfer_cutlass")
        return [n for n in r.plan.notes if "fused_moe_90_h20_prebuilt_d" in n]
    assert not notes("0.7.0.post1")
    assert notes("0.7.1") and notes("0.7.4")


# ------------------------------------------------------------------------------------ F4: b12x EP refusal's why
def test_b12x_ep_refusal_names_vllms_own_refusal():
    """The refusal stands at every FlashInfer release (vLLM's FlashInferB12xExperts declines EP); its why says so."""
    for fi in ("0.7.0.post1", "0.7.4"):
        r = moe_select.explain({"gpu": "RTX PRO 6000", "engine": "vllm", "quant": "nvfp4", "model": SMALL, "tp": 2,
                                "ep": 2, "runner": "flashinfer_b12x", "nvcc": "13.0",
                                "packages": {"flashinfer-python": fi}})
        assert r.plan is None
        (detail,) = [x.detail for x in cand(r, "flashinfer_b12x").reasons
                     if x.code == "parallelism_unsupported" and x.source.startswith("backends/flashinfer_b12x.yaml:")]
        assert "_supports_parallel_config" in detail and "w4a16" in detail, detail

"""Field round 30 (tests/cases/field_round_30.yaml), fixed as kinds:

1. vllm-project/vllm#45836 (DeepSeek-V4-Flash NVFP4 below sm100 under vLLM 0.23.0: 'No NvFp4 MoE backend supports the
   deployment configuration'): with a swiglu_limit (silu_clamped) vLLM's NVFP4 oracle keeps only NVFP4_BACKENDS_WITH_CLAMP,
   FLASHINFER_TRTLLM alone in 0.22.0 / 0.23.0, also FLASHINFER_CUTLASS and MARLIN from 0.24.0 (read in the 0.22.0 ..
   0.25.0 wheels); VLLM_CUTLASS in none of them.
2. kvcache-ai/ktransformers#1930 (block FP8 with SGLang's --moe-runner-backend cutlass on an RTX 3090): Fp8MoEMethod
   asserts block quantization and an SM90 / SM100 (SM120) GPU under the cutlass runner.
"""
from __future__ import annotations

import pytest

import moe_select

DSV4_FLASH = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048,
              "activation": "silu_clamped", "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1}
QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu"}


def _cand(r, backend):
    return next(c for c in r.candidates if c.backend == backend)


def _nvfp4(gpu, version, runner="auto", model=DSV4_FLASH):
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version, "quant": "nvfp4",
                               "model": model, "tp": 4, "runner": runner})


@pytest.mark.parametrize("version", ["0.22.0", "0.23.0"])
@pytest.mark.parametrize("runner", ["marlin", "flashinfer_cutlass", "cutlass"])
def test_vllm_nvfp4_clamp_only_trtllm_before_024(version, runner):
    r = _nvfp4("B200", version, runner)
    c = _cand(r, runner)
    clamp = [x for x in c.reasons if x.code == "activation_unsupported"]
    assert r.plan is None and clamp, [(x.code, x.source) for x in c.reasons]
    # the negative row of the NVFP4 oracle's clamp set (not only a positive row's lower bound)
    assert clamp[0].source.startswith(f"backends/{runner}.yaml:") and "does not apply silu_clamped" in clamp[0].detail


def test_vllm_023_refuses_clamped_nvfp4_on_hopper_the_report():
    r = _nvfp4("H100", "0.23.0")
    assert r.plan is None
    assert "activation_unsupported" in {x.code for x in _cand(r, "marlin").reasons}


def test_vllm_024_marlin_and_flashinfer_cutlass_take_the_clamp():
    hopper = _nvfp4("H100", "0.24.0")
    assert hopper.plan is not None and hopper.plan.runner == "marlin" and hopper.plan.evidence == "supported"
    fi = _nvfp4("B200", "0.24.0", "flashinfer_cutlass")
    assert "activation_unsupported" not in {x.code for x in _cand(fi, "flashinfer_cutlass").reasons}
    # vLLM's own CUTLASS experts are outside the set in every wheel read (0.22.0 .. 0.25.0)
    cut = _nvfp4("B200", "0.25.0", "cutlass")
    assert "activation_unsupported" in {x.code for x in _cand(cut, "cutlass").reasons}


def test_unclamped_nvfp4_untouched():
    plain = {**DSV4_FLASH, "activation": "silu"}
    del plain["swiglu_limit"]
    r = _nvfp4("H100", "0.23.0", "marlin", plain)
    assert "activation_unsupported" not in {x.code for x in _cand(r, "marlin").reasons}


@pytest.mark.parametrize("gpu, quant, code", [("RTX 3090", "fp8_block", "arch_unsupported"),
                                              ("L40S", "fp8_block", "arch_unsupported"),
                                              ("H100", "fp8_tensor", "quant_unsupported"),
                                              ("H100", "fp8_block", None), ("B200", "fp8_block", None)])
def test_sglang_cutlass_fp8_moe_gates(gpu, quant, code):
    r = moe_select.explain({"gpu": gpu, "engine": "sglang", "quant": quant, "model": QWEN3, "runner": "cutlass"})
    codes = {x.code for x in _cand(r, "cutlass").reasons}
    if code is None:
        assert r.plan is not None and r.plan.runner == "cutlass", codes
    else:
        assert r.plan is None and code in codes, codes
        assert any(x.source.startswith("backends/cutlass.yaml:") and "cutlass_fp8 MoE requires" in x.detail
                   for x in _cand(r, "cutlass").reasons if x.code == code)


@pytest.mark.parametrize("version, planned", [("0.5.10", False), ("0.5.12", False), ("0.5.13", True), ("0.5.19", True)])
def test_sglang_nvfp4_marlin_from_0_5_13(version, planned):
    """Noted by round 30's checker: SGLang's ModelOpt NVFP4 Marlin MoE path is first in the 0.5.13 wheel (0.5.9 .. 0.5.12
    name no Marlin in modelopt_quant.py)."""
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": version, "quant": "nvfp4",
                            "model": QWEN3, "runner": "marlin"})
    assert (r.plan is not None and r.plan.evidence == "supported") is planned
    if not planned:
        assert "quant_unsupported" in {x.code for x in _cand(r, "marlin").reasons}


def test_sglang_marlin_relu2_from_0_5_13():
    """SGLang's Marlin MoE runner asserts activation == 'silu' in the 0.5.9 .. 0.5.12 wheels and admits non-gated relu2
    from 0.5.13 (fused_experts_none_to_marlin): the relu2 claim holds from 0.5.13 only, so an MXFP4 relu2 layer on
    H100 is not planned as supported with Marlin at 0.5.12 and is at 0.5.13."""
    relu2 = {**QWEN3, "activation": "relu2"}

    def marlin(version):
        r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": version, "quant": "mxfp4",
                                "model": relu2, "tp": 1, "runner": "marlin"})
        return r, _cand(r, "marlin")

    r, c = marlin("0.5.12")
    assert not (r.plan is not None and r.plan.evidence == "supported"), (c.evidence, [x.detail for x in c.reasons])
    assert any("relu2" in x.detail for x in list(c.reasons) + list(c.unknowns)), (c.reasons, c.unknowns)
    r, c = marlin("0.5.13")
    assert not any("relu2" in x.detail for x in list(c.reasons) + list(c.unknowns)), (c.reasons, c.unknowns)

"""Release delta, met while reconciling the tests written for the old assumed releases (2026-12-05): two SGLang
answers the audit's rows left open, each read in the PyPI wheels' Python sources.

- SGLang's ModelOpt NVFP4 MoE method runs Marlin and the FlashInfer runners only: ``ModelOptNvFp4FusedMoEMethod.apply``
  raises NotImplementedError for another runner (0.5.19 and 0.5.23): Triton was planned for round 4's Llama-4 Scout
  NVFP4 on GB10 once flashinfer_cutlass was (rightly) refused there.
- SGLang's AITER MXFP8 MoE on gfx950 (from 0.5.21) computes SwiGLU-OAI with alpha 1.702 only
  (``Fp8MoEMethod.maybe_get_hip_aiter_quant_info`` raises for any other gemm1_alpha): a SiLU layer was planned on aiter.
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import cand

SCOUT = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192, "activation": "silu",
         "routing": "llama4", "num_shared_experts": 1}
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "routing": "sigmoid_topk"}


def _codes(report, runner):
    return {r.code for r in cand(report, runner).reasons}


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_sglang_modelopt_nvfp4_method_builds_no_triton(version):
    dep = {"gpu": "GB10", "engine": "sglang", "engine_version": version, "quant": "nvfp4", "model": SCOUT, "tp": 2}
    r = moe_select.explain(dep)
    assert r.deployment.quant_params.get("layout") == "modelopt"          # nvfp4's default serialization
    assert "quant_unsupported" in _codes(r, "triton"), [(x.code, x.detail) for x in cand(r, "triton").reasons]
    assert r.plan is not None and r.plan.runner != "triton"
    # a compressed-tensors NVFP4 checkpoint loads through another method: this row does not decide it
    ct = moe_select.explain({**dep, "quant_config": {"layout": "compressed-tensors"}})
    assert not any("ModelOptNvFp4FusedMoEMethod" in x.detail for x in cand(ct, "triton").reasons)


@pytest.mark.parametrize(("activation", "refused"), [("silu", True), ("gelu", True), ("swiglu_oai", False)])
def test_sglang_aiter_mxfp8_on_gfx950_takes_swiglu_oai_only(activation, refused):
    dep = {"gpu": "MI355X", "engine": "sglang", "engine_version": "0.5.23", "quant": "mxfp8", "vendor_library": True,
           "runner": "aiter", "model": {**MINIMAX, "activation": activation}}
    r = moe_select.explain(dep)
    assert ("activation_unsupported" in _codes(r, "aiter")) == refused, [(x.code, x.detail) for x in cand(r, "aiter").reasons]


GPT_OSS_20B = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize"}


@pytest.mark.parametrize("version", ["0.29.0", "0.34.0"])
def test_vllm_flashinfer_cutlass_mxfp4_off_sm90_needs_mxfp8_activations(version):
    """From vLLM 0.29.0 the MXFP4 oracle keeps only the BF16-activation variants unless an activation is asked
    (oracle/mxfp4.py:_filter_by_activation), and FlashInferExperts takes MXFP4 with BF16 activations on 9.0 only
    (_supports_quant_scheme): on an RTX 5090 vLLM runs Marlin, not FlashInfer CUTLASS (a reviewer's run)."""
    dep = {"gpu": "RTX 5090", "engine": "vllm", "engine_version": version, "quant": "mxfp4", "model": GPT_OSS_20B}
    r = moe_select.explain(dep)
    fc = cand(r, "flashinfer_cutlass")
    assert not fc.eligible and fc.reasons, [(x.code, x.detail) for x in fc.reasons]
    [choice] = [e for e in r.engine_choices if e.engine == "vllm"]
    assert choice.runner != "flashinfer_cutlass", choice
    asked = moe_select.explain({**dep, "runner": "flashinfer_cutlass", "quant_config": {"activation_precision": "mxfp8"}})
    assert not cand(asked, "flashinfer_cutlass").reasons, [(x.code, x.detail) for x in cand(asked, "flashinfer_cutlass").reasons]

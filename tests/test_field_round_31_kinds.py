"""Field round 31 (tests/cases/field_round_31.yaml), fixed as kinds:

1. vllm-project/vllm#38086 (FP8 MoE on an R9700, gfx1201: 'No FP8 MoE backend supports the deployment configuration'
   before it): TritonExperts._supports_quant_scheme admits FP8 on on_gfx9() only in the 0.18.0 .. 0.19.1 wheels and
   where supports_fp8() holds (on_gfx9() or on_gfx12x()) from 0.20.0.
2. vllm-project/vllm#32244 (NemotronH, non-gated relu2 MoE, on an MI210): FusedMoE.__init__ raises for
   is_act_and_mul=False off CUDA before 0.15.0, whatever the experts; from 0.15.0 ROCm too.
3. The checker's code finding beside vllm-project/vllm#45498: vLLM's ROCm MXFP8 fallback
   (_select_rocm_mxfp8_backend, native Triton dot_scaled on gfx950) is already in the 0.24.0 wheel.
"""
from __future__ import annotations

import pytest

import moe_select

QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu"}
NEMOTRON = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856, "activation": "relu2"}


def _cand(r, backend):
    return next(c for c in r.candidates if c.backend == backend)


def _vllm(gpu, version, quant, model, runner="auto", **kw):
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version, "quant": quant, "model": model,
                               "tp": 1, "runner": runner, **kw})


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel", "fp8_block"])
def test_vllm_triton_fp8_on_gfx1201_from_0_20_0(quant):
    new = _vllm("R9700", "0.20.0", quant, QWEN3, "triton", vendor_library=False)
    assert new.plan is not None and new.plan.runner == "triton", [(x.code, x.detail) for x in _cand(new, "triton").reasons]
    old = _vllm("R9700", "0.19.1", quant, QWEN3, "triton", vendor_library=False)
    refused = [x for x in _cand(old, "triton").reasons if x.code == "quant_unsupported"]
    assert old.plan is None and refused and refused[0].source.startswith("backends/triton.yaml:")


def test_vllm_triton_fp8_gfx1201_row_names_rdna4_only():
    """gfx1100 (RDNA3: supports_fp8 false at 0.20.0) stays refused."""
    r = _vllm("RX 7900 XTX", "0.20.0", "fp8_block", QWEN3, "triton", vendor_library=False)
    assert r.plan is None and "quant_unsupported" in {x.code for x in _cand(r, "triton").reasons}


@pytest.mark.parametrize("gpu, runner", [("MI210", "triton"), ("MI300X", "triton"), ("MI300X", "aiter")])
def test_vllm_non_gated_moe_refused_on_rocm_before_0_15_0(gpu, runner):
    r = _vllm(gpu, "0.14.1", "bf16", NEMOTRON, runner)
    act = [x for x in _cand(r, runner).reasons if x.code == "activation_unsupported"]
    assert r.plan is None and act, [(x.code, x.detail) for x in _cand(r, runner).reasons]
    assert any(x.source.startswith(f"backends/{runner}.yaml:") and "relu2" in x.detail for x in act)


def test_vllm_non_gated_moe_on_rocm_from_0_15_0_and_on_cuda():
    r = _vllm("MI210", "0.15.0", "bf16", NEMOTRON)
    assert "activation_unsupported" not in {x.code for c in r.candidates for x in c.reasons if c.backend == "triton"}
    assert r.plan is not None and r.plan.runner == "triton"
    cuda = _vllm("H100", "0.14.1", "bf16", NEMOTRON, "triton")
    assert "activation_unsupported" not in {x.code for x in _cand(cuda, "triton").reasons}


def test_the_report_deployment_is_refused_at_0_14_1():
    r = _vllm("MI210", "0.14.1", "bf16", {**NEMOTRON, "routing": "deepseek_v3", "num_shared_experts": 1})
    assert r.plan is None


def test_vllm_mxfp8_explicit_triton_on_gfx950_from_0_25_0_only():
    """0.24.0 has the ROCm MXFP8 fallback (auto reaches native Triton on gfx950) but no 'triton' in its MXFP8
    _BACKEND_NAME_MAP: an explicit --moe-backend triton raises there (tests/test_field_round_11a_kinds.py)."""
    assert _vllm("MI355X", "0.25.0", "mxfp8", QWEN3, "triton").plan is not None
    old = _vllm("MI355X", "0.24.0", "mxfp8", QWEN3, "triton")
    assert old.plan is None

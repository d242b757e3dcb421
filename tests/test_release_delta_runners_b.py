"""Release-delta audit (vLLM 0.29.0 -> 0.34.0, SGLang 0.5.19 -> 0.5.23), runner facts (helper B): each behaviour change
read in the PyPI wheels and applied to backends/, asserted at the release before it and at the first release with it.
Planning only (no GPU): ``moe_select.explain`` on declared machines.

- SGLang's flashinfer_cutlass applies a top-1 routing weight on the expert input from 0.5.21
  (``_prescale_router_weight_on_input``; 0.5.19 and 0.5.20 assert), for the quantization methods that do not assert
  first (unquantized, ModelOpt FP8); the NVFP4 methods assert in every wheel read.
- SGLang's compressed-tensors NVFP4 MoE below Blackwell: refused before 0.5.22 (the W4A4 scheme raises off Blackwell;
  NVFP4A16 has no scheme), Marlin weight-only from 0.5.22.
- SGLang's DeepEP V2 takes BF16 and MXFP8 experts on deep_gemm from 0.5.21 (block FP8 only before).
- SGLang's flashinfer_megamoe runner is first in 0.5.20.
- vLLM's TRT-LLM FP8 experts take the SwiGLU clamp for block FP8 from 0.30.0 (MXFP8 already in 0.29.0; per-tensor
  never), and none of vLLM's BF16 / FP8 / NVFP4 TRT-LLM experts takes gpt-oss's interleaved SwiGLU (0.29.0 .. 0.34.0).
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import cand, refusals

QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}
LLAMA4_SCOUT = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192,
                "activation": "silu", "routing": "llama4", "num_shared_experts": 1}


def _sglang(version: str, **dep):
    return moe_select.explain({"engine": "sglang", "engine_version": version, **dep})


def _vllm(version: str, **dep):
    return moe_select.explain({"engine": "vllm", "engine_version": version, **dep})


def _unknown_codes(report, runner):
    return {u.code for u in cand(report, runner).unknowns}


def _refused_from(report, runner, code, file):
    got = refusals(report, runner)
    assert code in got and got[code].startswith(f"backends/{file}:"), got
    return got[code]


# ----------------------------------------------------------- flashinfer_cutlass: a top-1 weight on the input (0.5.21)
def _scout(version, quant, gpu, **model):
    return _sglang(version, gpu=gpu, quant=quant, model={**LLAMA4_SCOUT, **model}, tp=2, ep=1,
                   runner="flashinfer_cutlass")


@pytest.mark.parametrize("quant", ["bf16", "fp8_tensor"])
def test_sglang_flashinfer_cutlass_weight_on_input_from_0_5_21(quant):
    for old in ("0.5.19", "0.5.20"):
        r = _scout(old, quant, "H100")
        assert r.plan is None
        _refused_from(r, "flashinfer_cutlass", "routing_unsupported", "flashinfer_cutlass.yaml")
    for new in ("0.5.21", "0.5.23"):
        r = _scout(new, quant, "H100")
        assert r.plan is not None and r.plan.runner == "flashinfer_cutlass", r.summary()
        assert "routing_unsupported" not in refusals(r, "flashinfer_cutlass")
        assert "routing_unsupported" not in _unknown_codes(r, "flashinfer_cutlass")


def test_sglang_flashinfer_cutlass_weight_on_input_is_top1_only():
    r = _scout("0.5.21", "bf16", "H100", top_k=2)
    assert "routing_unsupported" in _unknown_codes(r, "flashinfer_cutlass")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.21", "0.5.23"])
def test_sglang_nvfp4_methods_assert_before_the_runner(version):
    """sgl-project/sglang#34192's case (Llama-4 NVFP4 on SM120): ModelOpt's and compressed-tensors' NVFP4 methods still
    assert not apply_router_weight_on_input for flashinfer_cutlass in every wheel read."""
    r = _scout(version, "nvfp4", "RTX PRO 6000")
    _refused_from(r, "flashinfer_cutlass", "routing_unsupported", "flashinfer_cutlass.yaml")
    assert not (r.plan is not None and r.plan.runner == "flashinfer_cutlass")


# ----------------------------------------------------- marlin: compressed-tensors NVFP4 MoE below Blackwell (0.5.22)
def _ct_nvfp4(version, gpu="H100", **qc):
    return _sglang(version, gpu=gpu, model=QWEN3_30B, quant="nvfp4",
                   quant_config={"layout": "compressed-tensors", **qc}, tp=1, runner="marlin")


def test_sglang_compressed_tensors_nvfp4_on_hopper_runs_marlin_from_0_5_22():
    old = _ct_nvfp4("0.5.21")
    assert old.plan is None
    _refused_from(old, "marlin", "arch_unsupported", "marlin.yaml")
    for new in ("0.5.22", "0.5.23"):
        r = _ct_nvfp4(new)
        assert r.plan is not None and r.plan.runner == "marlin" and not refusals(r, "marlin"), r.summary()


@pytest.mark.parametrize("gpu", ["H100", "B200"])
def test_sglang_compressed_tensors_nvfp4a16_has_a_scheme_from_0_5_22(gpu):
    old = _ct_nvfp4("0.5.21", gpu=gpu, weight_only=True)
    assert {"arch_unsupported", "quant_unsupported"} & set(refusals(old, "marlin")), refusals(old, "marlin")
    assert all(src.startswith("backends/marlin.yaml:") for src in refusals(old, "marlin").values())
    new = _ct_nvfp4("0.5.22", gpu=gpu, weight_only=True)
    assert not refusals(new, "marlin"), refusals(new, "marlin")


def test_sglang_modelopt_nvfp4_layout_unstated_is_not_refused_by_the_compressed_tensors_rows():
    r = _sglang("0.5.21", gpu="H100", model=QWEN3_30B, quant="nvfp4", tp=1, runner="marlin")
    assert r.plan is not None and r.plan.runner == "marlin" and not refusals(r, "marlin")


# ------------------------------------------------------ deep_gemm: DeepEP V2 with BF16 / MXFP8 experts (0.5.21)
def _deepep_v2(version, quant, gpu="H100"):
    return _sglang(version, gpu=gpu, model={**QWEN3_30B, "architecture": "Qwen3MoeForCausalLM"}, quant=quant, tp=8,
                   ep=8, a2a="deepep_v2", a2a_mode="low_latency", runner="deep_gemm")


def test_sglang_deepep_v2_takes_bf16_experts_from_0_5_21():
    for old in ("0.5.19", "0.5.20"):
        r = _deepep_v2(old, "bf16")
        assert r.plan is None
        _refused_from(r, "deep_gemm", "quant_unsupported", "deep_gemm.yaml")
    new = _deepep_v2("0.5.21", "bf16")
    assert new.plan is not None and new.plan.runner == "deep_gemm" and not refusals(new, "deep_gemm"), new.summary()
    assert "a2a_unsupported" not in _unknown_codes(new, "deep_gemm")


def test_sglang_deepep_v2_block_fp8_unchanged():
    for version in ("0.5.20", "0.5.21"):
        r = _deepep_v2(version, "fp8_block")
        assert r.plan is not None and r.plan.runner == "deep_gemm" and not refusals(r, "deep_gemm")


def test_sglang_deepep_v2_mxfp8_pairing_from_0_5_21():
    old = _deepep_v2("0.5.20", "mxfp8", gpu="B200")
    _refused_from(old, "deep_gemm", "quant_unsupported", "deep_gemm.yaml")
    new = _deepep_v2("0.5.21", "mxfp8", gpu="B200")
    # the pairing is stated; whether deep_gemm runs SGLang's MXFP8 on sm100 is the support rows' question (open)
    assert "a2a_unsupported" not in _unknown_codes(new, "deep_gemm")
    assert "quant_unsupported" not in refusals(new, "deep_gemm")


# ------------------------------------------------------------------------ flashinfer_megamoe: first in SGLang 0.5.20
def test_sglang_flashinfer_megamoe_runner_first_in_0_5_20():
    dep = {"gpu": "B200", "quant": "nvfp4", "tp": 8, "ep": 8, "dp": 8, "a2a": "flashinfer_megamoe",
           "runner": "flashinfer_megamoe",
           "model": {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
                     "activation": "silu", "routing": "deepseek_v3", "architecture": "DeepseekV3ForCausalLM"}}
    old = _sglang("0.5.19", **dep)
    assert old.plan is None
    _refused_from(old, "flashinfer_megamoe", "quant_unsupported", "flashinfer_megamoe.yaml")
    new = _sglang("0.5.20", **dep)
    assert new.plan is not None and new.plan.runner == "flashinfer_megamoe" and not refusals(new, "flashinfer_megamoe")


# --------------------------------------------------------- vLLM TRT-LLM FP8 experts: the SwiGLU clamp (0.30.0)
CLAMPED = {**QWEN3_30B, "activation": "silu_clamped", "swiglu_limit": 7.0}


@pytest.mark.parametrize("runner", ["flashinfer_trtllm", "flashinfer_trtllm_routed"])
def test_vllm_trtllm_block_fp8_takes_the_clamp_from_0_30_0(runner):
    old = _vllm("0.29.0", gpu="B200", model=CLAMPED, quant="fp8_block", tp=1, runner=runner)
    _refused_from(old, runner, "activation_unsupported", f"{runner}.yaml")
    new = _vllm("0.30.0", gpu="B200", model=CLAMPED, quant="fp8_block", tp=1, runner=runner)
    assert "activation_unsupported" not in refusals(new, runner)
    assert "activation_unsupported" not in _unknown_codes(new, runner)


def test_vllm_trtllm_mxfp8_clamp_at_both_releases_per_tensor_never():
    for version in ("0.29.0", "0.30.0", "0.34.0"):
        mx = _vllm(version, gpu="B200", model=CLAMPED, quant="mxfp8", tp=1, runner="flashinfer_trtllm")
        assert "activation_unsupported" not in refusals(mx, "flashinfer_trtllm")
        assert "activation_unsupported" not in _unknown_codes(mx, "flashinfer_trtllm")
        pt = _vllm(version, gpu="B200", model=CLAMPED, quant="fp8_tensor", tp=1, runner="flashinfer_trtllm")
        _refused_from(pt, "flashinfer_trtllm", "activation_unsupported", "flashinfer_trtllm.yaml")


# ------------------------------------------- vLLM TRT-LLM experts: gpt-oss's interleaved SwiGLU only on MXFP4 (0.29.0+)
OAI = {**QWEN3_30B, "activation": "swiglu_oai", "swiglu_limit": 7.0}


@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "mxfp8", "nvfp4"])
def test_vllm_trtllm_refuses_interleaved_swiglu_oai_outside_mxfp4(quant):
    new = _vllm("0.29.0", gpu="B200", model=OAI, quant=quant, tp=1, runner="flashinfer_trtllm")
    _refused_from(new, "flashinfer_trtllm", "activation_unsupported", "flashinfer_trtllm.yaml")
    old = _vllm("0.28.0", gpu="B200", model=OAI, quant=quant, tp=1, runner="flashinfer_trtllm")
    assert "activation_unsupported" not in refusals(old, "flashinfer_trtllm")


def test_vllm_trtllm_mxfp4_keeps_swiglu_oai():
    r = _vllm("0.34.0", gpu="B200", model=OAI, quant="mxfp4", tp=1, runner="flashinfer_trtllm")
    assert "activation_unsupported" not in refusals(r, "flashinfer_trtllm")
    assert "activation_unsupported" not in _unknown_codes(r, "flashinfer_trtllm")


@pytest.mark.parametrize("quant", ["fp8_block", "mxfp8"])
def test_vllm_trtllm_routed_refuses_interleaved_swiglu_oai(quant):
    r = _vllm("0.29.0", gpu="B200", model=OAI, quant=quant, tp=1, runner="flashinfer_trtllm_routed")
    _refused_from(r, "flashinfer_trtllm_routed", "activation_unsupported", "flashinfer_trtllm_routed.yaml")


# ------------------------------------------------------------------------------------------------ notes by release
def test_sglang_0_5_23_modelopt_fp8_note_on_flashinfer_trtllm():
    dep = {"gpu": "B200", "model": QWEN3_30B, "quant": "fp8_tensor", "tp": 1, "runner": "flashinfer_trtllm"}
    new = _sglang("0.5.23", **dep)
    old = _sglang("0.5.22", **dep)
    text = "cannot consume materialized routing"
    assert new.plan is not None and any(text in n for n in new.plan.notes), new.plan and new.plan.notes
    assert old.plan is not None and not any(text in n for n in old.plan.notes)

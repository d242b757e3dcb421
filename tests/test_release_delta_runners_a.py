"""Release delta vLLM 0.29.0 -> 0.34.0 (runner files, part A), each behaviour at the release before and after the
change, read in the vLLM 0.29.0 .. 0.34.0 wheels:

- OAI triton_kernels experts (triton_kernel, triton_unfused): the CUDA device gate widens from (9, 0) <= cc < (11, 0)
  to < (13, 0) in 0.32.0; sm12x runs from 0.32.0, sm110 (whose opt-flag constraints land in 0.34.0) from 0.34.0.
- vLLM CUTLASS NVFP4 / MXFP4 experts take an expert map from 0.32.0 (EP over all-gather / reduce-scatter), still
  refusing DeepEP high-throughput and the FlashInfer NVLink all-to-alls; CUTLASS NVFP4 drops the 11.x family in 0.34.0.
- W4A8 (int4 x FP8) MoE: from 0.31.0 the oracle falls back to Humming (FP8 activations, compute capability >= 8.9).
- DeepGEMM Mega MoE: GLM-5-Next (block FP8 -> MXFP8) and MiniMax-M3 (NVFP4, expert parallel only) from 0.34.0;
  hidden and intermediate widths multiples of 128; Kimi K3's SiTU.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import cand, refusals

ROOT = Path(__file__).resolve().parents[1]
GPT_OSS = str(ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b")
NVFP4 = str(ROOT / "examples" / "model_configs" / "nvidia__Qwen3-30B-A3B-NVFP4")
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}


def _vllm(version: str, gpu: str, **dep):
    return moe_select.explain({"gpu": gpu, "engine": "vllm", "engine_version": version, **dep})


def _planned(r, runner: str) -> bool:
    return r.plan is not None and r.plan.runner == runner


def _refused_by(r, runner: str, code: str, file: str) -> bool:
    return refusals(r, runner).get(code, "").startswith(f"backends/{file}:")


# ----------------------------------------------------------------- OAI triton_kernels experts: cc < 13.0 from 0.32.0
@pytest.mark.parametrize("gpu", ["RTX PRO 6000", "GB10"])
def test_triton_kernel_runs_gpt_oss_on_sm12x_from_0_32(gpu):
    old = _vllm("0.31.0", gpu, model_config=GPT_OSS, runner="triton_kernel")
    assert old.plan is None and _refused_by(old, "triton_kernel", "arch_unsupported", "triton_kernel.yaml")
    new = _vllm("0.32.0", gpu, model_config=GPT_OSS, runner="triton_kernel")
    assert _planned(new, "triton_kernel") and new.plan.activation_precision == "bf16", refusals(new, "triton_kernel")


def test_triton_kernel_runs_on_sm110_from_0_34_only():
    # 0.32.0 / 0.33.0 admit cc 11.0 in the gate but set SM110's opt flags only from 0.34.0: not claimed before it
    for v in ("0.31.0", "0.33.0"):
        assert _vllm(v, "THOR", model_config=GPT_OSS, runner="triton_kernel").plan is None, v
    assert _planned(_vllm("0.34.0", "THOR", model_config=GPT_OSS, runner="triton_kernel"), "triton_kernel")


def test_triton_unfused_runs_on_sm12x_from_0_32():
    dep = dict(quant="mxfp4", model=QWEN3_30B, tp=1, cuda_graph=False, runner="triton_unfused")
    old = _vllm("0.31.0", "RTX 5090", **dep)
    assert old.plan is None and _refused_by(old, "triton_unfused", "quant_unsupported", "triton_unfused.yaml")
    assert _planned(_vllm("0.32.0", "RTX 5090", **dep), "triton_unfused")
    assert _vllm("0.33.0", "THOR", **dep).plan is None
    assert _planned(_vllm("0.34.0", "THOR", **dep), "triton_unfused")
    # pre-Hopper GPUs stay outside the gate
    assert _refused_by(_vllm("0.34.0", "A100", **dep), "triton_unfused", "quant_unsupported", "triton_unfused.yaml")


# ----------------------------------------------------------------- vLLM CUTLASS NVFP4 under expert parallelism
def test_cutlass_nvfp4_takes_ep_over_allgather_from_0_32():
    dep = dict(model_config=NVFP4, runner="cutlass", tp=1, dp=4, ep=4)
    old = _vllm("0.31.0", "B200", **dep)
    assert old.plan is None and _refused_by(old, "cutlass", "parallelism_unsupported", "cutlass.yaml")
    new = _vllm("0.32.0", "B200", **dep)
    assert _planned(new, "cutlass"), refusals(new, "cutlass")


@pytest.mark.parametrize("a2a", [{"a2a": "deepep", "a2a_mode": "normal"}, {"a2a": "flashinfer"},
                                 {"a2a": "flashinfer_two_sided"}])
def test_cutlass_nvfp4_still_refuses_ht_and_nvlink_all_to_alls(a2a):
    r = _vllm("0.34.0", "B200", model_config=NVFP4, runner="cutlass", tp=1, dp=4, ep=4, **a2a)
    assert r.plan is None and _refused_by(r, "cutlass", "parallelism_unsupported", "cutlass.yaml")
    assert "all-gather / reduce-scatter only" in next(x.detail for x in cand(r, "cutlass").reasons
                                                      if x.code == "parallelism_unsupported")


def test_cutlass_nvfp4_drops_sm110_in_0_34():
    old = _vllm("0.33.0", "THOR", model_config=NVFP4, runner="cutlass")
    assert not _refused_by(old, "cutlass", "arch_unsupported", "cutlass.yaml"), refusals(old, "cutlass")
    new = _vllm("0.34.0", "THOR", model_config=NVFP4, runner="cutlass")
    assert new.plan is None and _refused_by(new, "cutlass", "arch_unsupported", "cutlass.yaml")


# ----------------------------------------------------------------- W4A8: Humming from 0.31.0
W4A8 = dict(model=QWEN3_30B, quant="int4_w4a8", quant_config={"group_size": 128}, runner="humming", cuda_graph=False)


@pytest.mark.parametrize("gpu", ["B200", "L40S", "H100"])
def test_humming_runs_w4a8_from_0_31(gpu):
    old = _vllm("0.30.0", gpu, **W4A8)
    assert old.plan is None and _refused_by(old, "humming", "quant_unsupported", "humming.yaml")
    new = _vllm("0.31.0", gpu, **W4A8)
    assert _planned(new, "humming") and new.plan.activation_precision == "fp8_token", refusals(new, "humming")


def test_humming_w4a8_needs_fp8_capable_gpus():
    r = _vllm("0.34.0", "A100", **W4A8)
    assert r.plan is None and _refused_by(r, "humming", "arch_unsupported", "humming.yaml")
    # CUTLASS W4A8 stays SM90-only at every release
    assert _refused_by(_vllm("0.34.0", "B200", **{**W4A8, "runner": "cutlass"}), "cutlass", "quant_unsupported",
                       "cutlass.yaml")


# ----------------------------------------------------------------- DeepGEMM Mega MoE
MEGA = dict(tp=1, dp=8, ep=8, cuda_graph=False, runner="deep_gemm_mega_moe")
BIG = {"num_experts": 128, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536, "activation": "silu",
       "routing": "renormalize"}


def _mega(version: str, architecture: str, quant: str, **kw):
    return _vllm(version, "B200", model={**BIG, "architecture": architecture, **kw.pop("model", {})}, quant=quant,
                 **{**MEGA, **kw})


def test_mega_moe_minimax_m3_nvfp4_from_0_34_with_ep():
    old = _mega("0.33.0", "MiniMaxM3SparseForCausalLM", "nvfp4")
    assert old.plan is None and _refused_by(old, "deep_gemm_mega_moe", "quant_unsupported", "deep_gemm_mega_moe.yaml")
    assert _planned(_mega("0.34.0", "MiniMaxM3SparseForCausalLM", "nvfp4"), "deep_gemm_mega_moe")
    no_ep = _mega("0.34.0", "MiniMaxM3SparseForCausalLM", "nvfp4", dp=1, ep=1)
    assert _refused_by(no_ep, "deep_gemm_mega_moe", "parallelism_unsupported", "deep_gemm_mega_moe.yaml")
    # a model that wires MXFP4 (DeepSeek-V4) does not run NVFP4 through it
    assert _refused_by(_mega("0.34.0", "DeepseekV4ForCausalLM", "nvfp4"), "deep_gemm_mega_moe", "quant_unsupported",
                       "deep_gemm_mega_moe.yaml")


def test_mega_moe_glm5_next_block_fp8_runs_as_mxfp8_from_0_34():
    assert _mega("0.33.0", "Glm5NextForCausalLM", "fp8_block").plan is None
    new = _mega("0.34.0", "Glm5NextForCausalLM", "fp8_block")
    assert _planned(new, "deep_gemm_mega_moe") and new.plan.activation_precision == "mxfp8"


@pytest.mark.parametrize("version", ["0.29.0", "0.34.0"])
@pytest.mark.parametrize("width", [{"hidden_size": 3000}, {"moe_intermediate_size": 1500}])
def test_mega_moe_widths_are_multiples_of_128(version, width):
    r = _mega(version, "DeepseekV4ForCausalLM", "mxfp4", model=width)
    assert r.plan is None and _refused_by(r, "deep_gemm_mega_moe", "shape_unaligned", "deep_gemm_mega_moe.yaml")
    assert _planned(_mega(version, "DeepseekV4ForCausalLM", "mxfp4"), "deep_gemm_mega_moe")


def test_mega_moe_kimi_k3_situ():
    r = _mega("0.29.0", "KimiK3ForConditionalGeneration", "mxfp4", model={"activation": "situ"})
    assert _planned(r, "deep_gemm_mega_moe") and r.evidence == "supported", r.summary()

"""Field round 20 of issue 21 (tests/cases/field_round_20.yaml), three cases fixed as kinds: each kind tested on other
deployments than the round's case (another GPU, model, release, format or parallel layout), on both sides of each bound.

1. backends/cutlass.yaml (vllm-project/vllm#43694): vLLM's CUTLASS FP8 experts apply Llama-4's router weight twice. The
   prepare step without an all-to-all multiplies the input by the top-1 weight and CutlassExpertsFp8's moe_unpermute
   scales the output by it again (wrong output). The compressed-tensors FP8 method hands the flag to the modular kernel
   from 0.14.0 (0.13.0 called cutlass_moe_fp8 without it); unfixed through 0.34.0: llama4 refused (routing_unsupported)
   for fp8_tensor / fp8_channel with a2a none from 0.14.0. The same weighted unpermute ends vLLM's CUTLASS W4A8 path,
   whose compressed-tensors method passes the flag from 0.16.0: int4_w4a8 refused from 0.16.0.
2. backends/marlin.yaml (sgl-project/sglang#28170): SGLang's MXFP4 Marlin paths pass no expert map (0.5.12, the first
   wheel with them, through 0.5.16): under EP the JIT kernel counts the dispatcher's -1 blocks as local unless is_ep
   (illegal memory access, 0.5.12 .. 0.5.15.x), and 0.5.16 leaves the masked rows to an unzeroed shared buffer; 0.5.17
   passes the map. EP > 1 refused (parallelism_unsupported) for SGLang mxfp4 from 0.5.12 below 0.5.17. The MXFP4 Marlin
   row itself now holds from 0.5.12 (0.5.11 has no such path).
3. backends/triton.yaml (vllm-project/vllm#47552): up to 0.27.x vLLM's TritonExperts take the SwiGLU clamp / alpha /
   beta from the quant config only and the INT8 W8A8 quant config sets none: MiniMax-M3's split SwiGLU-OAI asserts
   (0.24.0 .. 0.27.x), DeepSeek-V4's clamped SiLU runs unclamped (0.22.0, the first TritonExperts with a clamp, ..
   0.27.x); 0.28.0 falls back to the layer's moe_config. Both refused for int8_w8a8 (activation_unsupported) in those
   ranges; the positive silu_clamped row holds from 0.22.0 (0.21.0's TritonExperts has no clamp).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import cand, only_refusal, planned, refusals

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "model_configs"
GPT_OSS_120B = str(CONFIGS / "openai__gpt-oss-120b")

# Llama-4-Maverick's MoE (128 experts, top 1, router weight on the input, one shared expert): not the round's Scout.
MAVERICK = {"num_experts": 128, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192, "activation": "silu",
            "routing": "llama4", "num_shared_experts": 1}
# A Qwen3-30B-A3B-shaped MoE (softmax top 8, renormalized): the weight goes on the output, once.
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}
# DeepSeek-V4-Flash's MoE (clamped SiLU, limit 10, its own routing).
DSV4_FLASH = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048,
              "activation": "silu_clamped", "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1}
# MiniMax-M3's MoE (split SwiGLU-OAI, limit 7; sigmoid routing; one shared expert), the shape round 18 used.
MINIMAX_M3 = {"num_experts": 128, "top_k": 4, "hidden_size": 6144, "moe_intermediate_size": 3072,
              "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "sigmoid_topk", "num_shared_experts": 1}


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _fact_line(file: str, marker: str, opener: str) -> str:
    """``backends/<file>:N`` of the line opening (``opener``) the fact whose line holds ``marker``: the line a refusal by
    that fact cites."""
    lines = (ROOT / "backends" / file).read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    start = next(i for i in range(at, -1, -1) if lines[i].lstrip().startswith(opener))
    return f"backends/{file}:{start + 1}"


def _why(report: Any, runner: str) -> list[tuple[str, str]]:
    return [(x.code, x.detail) for x in report.reasons] + [(x.code, x.detail) for x in cand(report, runner).reasons]


# The lines each refusal must cite (a marker unique to the fact, then the fact's opening line).
CUTLASS_FP8 = ("cutlass.yaml", "quant: [fp8_tensor, fp8_channel], a2a: [none]}", "- values: [llama4]")
CUTLASS_W4A8 = ("cutlass.yaml", "quant: [int4_w4a8], a2a: [none]}", "- values: [llama4]")
MARLIN_EP = ("marlin.yaml", "SGLang's MXFP4 Marlin path passes no expert map before 0.5.17", "- field: ep")
MARLIN_MXFP4_ROW = ("marlin.yaml", 'requires: {sglang: ">=0.5.12"}', "- archs: [sm90, sm120]")
TRITON_SPLIT = ("triton.yaml", "(reported) vllm-project/vllm#47552", "- values: [swiglu_oai_split]")
TRITON_CLAMPED = ("triton.yaml", "(same failure as) vllm-project/vllm#47552", "- values: [silu_clamped]")
TRITON_CLAMPED_ROW = ("triton.yaml", "none in v0.21.0", "- values: [silu_clamped]")


# ------------------------------------------------------------ kind 1: vLLM's CUTLASS FP8 / W4A8 x llama4 routing
VLLM_CUTLASS = dict(engine="vllm", a2a="none", runner="cutlass", model=MAVERICK)


@pytest.mark.parametrize(("version", "gpu", "quant", "tp", "ep"), [
    ("0.14.0", "H100", "fp8_channel", 8, 1),   # the first release whose modular kernel gets the flag
    ("0.20.0", "B200", "fp8_tensor", 8, 1),    # per-tensor FP8 on sm100 (built from 0.10.0)
    ("0.28.0", "H200", "fp8_channel", 8, 8),   # EP over all-gather: the naive prepare weights the input too
    ("0.34.0", "B300", "fp8_channel", 4, 1),   # the newest release read (unfixed), sm103 (built from 0.11.1)
])
def test_vllm_cutlass_fp8_llama4_refused(version, gpu, quant, tp, ep):
    """Llama-4-Maverick-shaped FP8 under vLLM's CUTLASS experts, releases 0.14.0 .. 0.34.0: refused for its routing
    (routing_unsupported) by the cutlass.yaml fact citing moe_unpermute and the prepare step, and by nothing else."""
    r = _explain(**VLLM_CUTLASS, engine_version=version, gpu=gpu, quant=quant, tp=tp, ep=ep)
    assert r.plan is None
    detail = only_refusal(r, "cutlass", "routing_unsupported", "cutlass.yaml")
    assert refusals(r, "cutlass")["routing_unsupported"] == _fact_line(*CUTLASS_FP8)
    assert "llama4" in detail and "vllm >=0.14.0" in detail, detail


def test_vllm_cutlass_fp8_llama4_before_the_flag_is_not_refused_by_the_fact():
    """0.13.0 called cutlass_moe_fp8 without apply_router_weight_on_input (the weight lands on the output once): the
    fact does not hold there, so cutlass is planned, unverified (weight-on-input routing is claimed by no fact)."""
    r = _explain(**VLLM_CUTLASS, engine_version="0.13.0", gpu="H100", quant="fp8_channel", tp=8, ep=1)
    assert planned(r, "cutlass"), _why(r, "cutlass")
    assert cand(r, "cutlass").evidence == "unverified"
    assert refusals(r, "cutlass") == {}


@pytest.mark.parametrize(("version", "quant"), [("0.16.0", "fp8_channel"), ("0.28.0", "fp8_tensor")])
def test_vllm_cutlass_fp8_other_routing_planned(version, quant):
    """The fact is llama4's: a renormalized top-8 MoE (the weight applied once, on the output) on releases inside the
    range is planned with cutlass, supported."""
    r = _explain(engine="vllm", engine_version=version, gpu="H100", quant=quant, model=QWEN3_30B, tp=4, ep=1, a2a="none",
                 runner="cutlass")
    assert planned(r, "cutlass"), _why(r, "cutlass")
    assert cand(r, "cutlass").evidence == "supported"


def test_vllm_cutlass_fp8_llama4_with_a_batched_all_to_all_is_not_refused_by_the_fact():
    """Scoped to no all-to-all: behind DeepEP low-latency the batched CUTLASS experts copy their output unweighted (not
    read), so the routing fact says nothing there (still unverified: no fact claims the weight on the input)."""
    r = _explain(**{**VLLM_CUTLASS, "a2a": "deepep", "a2a_mode": "low_latency"}, engine_version="0.28.0", gpu="H200",
                 quant="fp8_channel", tp=1, dp=8, ep=8)
    assert "routing_unsupported" not in refusals(r, "cutlass"), refusals(r, "cutlass")


@pytest.mark.parametrize(("version", "refused"), [("0.15.1", False), ("0.16.0", True), ("0.34.0", True)])
def test_vllm_cutlass_w4a8_llama4_from_0_16_0(version, refused):
    """vLLM's CUTLASS W4A8 path: the compressed-tensors method passes the flag from 0.16.0 (0.15.1 does not): refused
    from 0.16.0 by the W4A8 fact; at 0.15.1 planned, unverified."""
    r = _explain(**VLLM_CUTLASS, engine_version=version, gpu="H100", quant="int4_w4a8",
                 quant_config={"group_size": 128}, tp=4, ep=1)
    if refused:
        assert r.plan is None
        only_refusal(r, "cutlass", "routing_unsupported", "cutlass.yaml")
        assert refusals(r, "cutlass")["routing_unsupported"] == _fact_line(*CUTLASS_W4A8)
    else:
        assert planned(r, "cutlass"), _why(r, "cutlass")
        assert refusals(r, "cutlass") == {}


def test_the_vllm_fact_does_not_reach_sglang_cutlass():
    """SGLang's own CUTLASS MoE (block FP8) with llama4 routing: the vLLM facts are scoped to vLLM, so neither refuses it
    (it stays unverified: SGLang's weight-on-input path was not read)."""
    r = _explain(engine="sglang", engine_version="0.5.20", gpu="H200", quant="fp8_block", model=MAVERICK, tp=8, ep=1,
                 a2a="none", runner="cutlass")
    assert "routing_unsupported" not in refusals(r, "cutlass"), refusals(r, "cutlass")


# ------------------------------------------------------------ kind 2: SGLang's MXFP4 Marlin x expert parallelism
SGL_MARLIN = dict(engine="sglang", a2a="none", runner="marlin")


@pytest.mark.parametrize(("version", "gpu", "model", "tp", "ep"), [
    ("0.5.12", "H100", DSV4_FLASH, 2, 2),                # the first wheel with an MXFP4 Marlin path (gpt-oss there:
                                                         # refused for its SwiGLU too, tests/test_sglang_marlin_gpt_oss.py)
    ("0.5.14", "H200", GPT_OSS_120B, 4, 4),
    ("0.5.13", "RTX PRO 6000", DSV4_FLASH, 2, 2),        # sm120, DeepSeek-V4's FP4 experts
    ("0.5.16", "H100", GPT_OSS_120B, 8, 8),              # the kernel skips -1 blocks, the rows stay unzeroed
])
def test_sglang_mxfp4_marlin_refused_under_ep(version, gpu, model, tp, ep):
    """SGLang's MXFP4 Marlin at EP > 1, 0.5.12 .. 0.5.16, gpt-oss and DeepSeek-V4 shapes on Hopper and SM120: refused
    (parallelism_unsupported) by the marlin.yaml constraint, and by nothing else."""
    dep = {"model_config": model} if isinstance(model, str) else {"model": model, "quant": "mxfp4"}
    r = _explain(**SGL_MARLIN, **dep, engine_version=version, gpu=gpu, tp=tp, ep=ep)
    assert r.plan is None
    detail = only_refusal(r, "marlin", "parallelism_unsupported", "marlin.yaml")
    assert refusals(r, "marlin")["parallelism_unsupported"] == _fact_line(*MARLIN_EP)
    assert f"ep = {ep}" in detail and "no expert map" in detail, detail


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.17"])
def test_sglang_mxfp4_marlin_without_ep_planned(version):
    """gpt-oss-120b's MXFP4 experts with Marlin at EP 1 (no masked experts) on an H100: planned, supported (0.5.12 ..
    0.5.13.post1 drop its biases and SwiGLU alpha: refused, tests/test_sglang_marlin_gpt_oss.py)."""
    r = _explain(**SGL_MARLIN, model_config=GPT_OSS_120B, engine_version=version, gpu="H100", tp=2, ep=1)
    assert planned(r, "marlin"), _why(r, "marlin")
    assert cand(r, "marlin").evidence == "supported"


def test_sglang_mxfp4_marlin_with_the_expert_map_planned_under_ep():
    """0.5.17 passes the dispatcher's expert map (build_marlin_moe_quant_info): gpt-oss-120b at EP 4 is planned."""
    r = _explain(**SGL_MARLIN, model_config=GPT_OSS_120B, engine_version="0.5.17", gpu="H200", tp=4, ep=4)
    assert planned(r, "marlin"), _why(r, "marlin")
    assert cand(r, "marlin").evidence == "supported"


def test_sglang_nvfp4_marlin_keeps_ep():
    """The ModelOpt NVFP4 Marlin path passes local_expert_mapping (read in 0.5.16): NVFP4 at EP 2 under 0.5.14 is not
    refused by the MXFP4 constraint."""
    r = _explain(**SGL_MARLIN, quant="nvfp4", model=QWEN3_30B, engine_version="0.5.14", gpu="H100", tp=2, ep=2)
    assert planned(r, "marlin"), _why(r, "marlin")


def test_vllm_mxfp4_marlin_keeps_ep():
    """The constraint is SGLang's: vLLM's MXFP4 Marlin experts at EP 2 are still planned."""
    r = _explain(engine="vllm", engine_version="0.20.0", gpu="H100", model_config=GPT_OSS_120B, tp=2, ep=2, a2a="none",
                 runner="marlin")
    assert planned(r, "marlin"), _why(r, "marlin")


def test_sglang_mxfp4_marlin_before_0_5_12_has_no_path():
    """0.5.11 has no MXFP4 Marlin path at all (neither mxfp4_marlin_moe.py nor a marlin branch in Mxfp4MoEMethod): the
    format row holds from 0.5.12, so marlin is refused for the format there (quant_unsupported, citing that row), not by
    the EP constraint (whose range starts at 0.5.12)."""
    r = _explain(**SGL_MARLIN, model_config=GPT_OSS_120B, engine_version="0.5.11", gpu="H100", tp=2, ep=2)
    assert r.plan is None
    only_refusal(r, "marlin", "quant_unsupported", "marlin.yaml")
    assert refusals(r, "marlin")["quant_unsupported"] == _fact_line(*MARLIN_MXFP4_ROW)


# ------------------------------------------------------------ kind 3: vLLM's INT8 W8A8 Triton MoE x SwiGLU parameters
VLLM_TRITON = dict(engine="vllm", a2a="none", runner="triton", quant="int8_w8a8")


@pytest.mark.parametrize(("version", "gpu", "tp", "ep"), [
    ("0.24.0", "H100", 4, 1),      # the first release with the split SwiGLU-OAI
    ("0.27.0", "MI300X", 8, 1),     # the same quant config on ROCm (int8 W8A8 on ROCm from 0.27.0: fact audit 61-90)
    ("0.27.1", "H200", 8, 8),       # the last release before the fallback, expert parallel
])
def test_vllm_int8_split_swiglu_refused(version, gpu, tp, ep):
    """MiniMax-M3's split SwiGLU-OAI with INT8 W8A8 under vLLM 0.24.0 .. 0.27.x: refused (activation_unsupported) by
    the negative triton.yaml fact (TritonExperts asserts on the missing clamp), and by nothing else."""
    r = _explain(**VLLM_TRITON, model=MINIMAX_M3, engine_version=version, gpu=gpu, tp=tp, ep=ep)
    assert r.plan is None
    detail = only_refusal(r, "triton", "activation_unsupported", "triton.yaml")
    assert refusals(r, "triton")["activation_unsupported"] == _fact_line(*TRITON_SPLIT)
    assert "swiglu_oai_split" in detail and "vllm >=0.24.0,<0.28.0" in detail, detail


@pytest.mark.parametrize(("version", "gpu"), [("0.22.0", "H100"), ("0.25.0", "B200"), ("0.27.1", "H200")])
def test_vllm_int8_clamped_silu_refused(version, gpu):
    """DeepSeek-V4's clamped SiLU with INT8 W8A8, 0.22.0 .. 0.27.x: the clamp is dropped with the quant config (a
    silent unclamped SiLU): refused (activation_unsupported) by the silu_clamped negative fact."""
    r = _explain(**VLLM_TRITON, model=DSV4_FLASH, engine_version=version, gpu=gpu, tp=8, ep=1)
    assert r.plan is None
    detail = only_refusal(r, "triton", "activation_unsupported", "triton.yaml")
    assert refusals(r, "triton")["activation_unsupported"] == _fact_line(*TRITON_CLAMPED)
    assert "silu_clamped" in detail and "vllm >=0.22.0,<0.28.0" in detail, detail


@pytest.mark.parametrize("model", [MINIMAX_M3, DSV4_FLASH], ids=["swiglu_oai_split", "silu_clamped"])
def test_vllm_int8_clamped_activations_planned_from_0_28_0(model):
    """From 0.28.0 the experts' activation config falls back to the layer's swiglu_limit/alpha/beta: both clamped
    activations with INT8 W8A8 are planned with triton, supported."""
    r = _explain(**VLLM_TRITON, model=model, engine_version="0.28.0", gpu="H100", tp=8, ep=1)
    assert planned(r, "triton"), _why(r, "triton")
    assert cand(r, "triton").evidence == "supported"


@pytest.mark.parametrize(("quant", "model"), [("fp8_block", MINIMAX_M3), ("int8_w8a8", QWEN3_30B)],
                         ids=["fp8-forwards-the-clamp", "int8-unclamped-silu"])
def test_vllm_triton_other_formats_and_activations_planned_in_range(quant, model):
    """Inside the range the facts are INT8's and the clamped activations': block FP8 (whose quant config forwards
    gemm1_clamp_limit) with MiniMax-M3 and INT8 with a plain SiLU model are planned at 0.26.0."""
    r = _explain(engine="vllm", engine_version="0.26.0", gpu="H100", quant=quant, model=model, tp=4, ep=1, a2a="none",
                 runner="triton")
    assert planned(r, "triton"), _why(r, "triton")
    assert cand(r, "triton").evidence == "supported"


def test_vllm_triton_clamped_silu_from_0_22_0():
    """vLLM 0.21.0's TritonExperts has no clamp at all (DeepSeek-V4 is there): the clamped SiLU with block FP8 is
    refused by the positive row's version bound; at 0.22.0 (the FP8 quant config forwards the clamp) it is planned."""
    before = _explain(engine="vllm", engine_version="0.21.0", gpu="H200", quant="fp8_block", model=DSV4_FLASH, tp=8,
                      ep=1, a2a="none", runner="triton")
    assert before.plan is None
    only_refusal(before, "triton", "activation_unsupported", "triton.yaml")
    assert refusals(before, "triton")["activation_unsupported"] == _fact_line(*TRITON_CLAMPED_ROW)
    after = _explain(engine="vllm", engine_version="0.22.0", gpu="H200", quant="fp8_block", model=DSV4_FLASH, tp=8,
                     ep=1, a2a="none", runner="triton")
    assert planned(after, "triton"), _why(after, "triton")

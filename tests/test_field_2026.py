"""Issue 21 (part A): the kinds of knowledge behind the round-3 field cases (tests/cases/field_cases_s3.yaml), each
with a deployment it plans and one it refuses, citing the public source of the fact. Planning only (no GPU):
moe_select.explain on declared machines.

- an engine-scoped routing fact: vLLM's Marlin applies the router weight on the expert input (llama4) for NVFP4
  weights (vllm-project/vllm#20457);
- an arch range: vLLM's Marlin MoE runs from compute capability 7.5 (sm75+, vllm-project/vllm#29901), in fp16 on
  Turing (no bf16);
- a new format, int4_w4a8 (SGLang w4afp8, vLLM W4A8), and the CUTLASS grouped GEMM that runs it on Hopper
  (vllm-project/vllm#29691; SGLang's cutlass runner W4A8 types);
- an all-to-all fused into its runner's kernel, dispatch format `fused`: FlashInfer MegaMoE (sgl-project/sglang#31470);
- a package version gate on a routing method: FlashInfer's in-kernel renormalize before 0.6.7 (vllm-project/vllm#37591,
  #37605, #38859).
"""
from __future__ import annotations

from pathlib import Path

import moe_select
from report_helpers import cand, refusals, unknown_codes

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
             "activation": "silu", "routing": "renormalize"}
LLAMA4_SCOUT = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192,
                "activation": "silu", "routing": "llama4", "num_shared_experts": 1}
DSV4_FLASH = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048,
              "activation": "silu", "routing": "custom", "num_shared_experts": 1}
QWEN35_35B = {"num_experts": 256, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 512,
              "activation": "silu", "routing": "renormalize", "num_shared_experts": 1}


def explain(**dep):
    return moe_select.explain(dep)


# --------------------------------------------------------------- routing weight on the input: vLLM Marlin, NVFP4
def test_llama4_nvfp4_on_vllm_marlin_is_supported():
    # vllm-project/vllm#20457: fused_marlin_moe applies the router weight on the first GEMM's input
    # (vllm-project/vllm@00da71c9d917 marlin_moe.py _fused_marlin_moe: mul_topk_weights=apply_router_weight_on_input);
    # Llama-4-Scout-17B-16E NVFP4 (W4A16) TP2 gsm8k 0.00 -> 0.81.
    r = explain(gpu="H100", engine="vllm", quant="nvfp4", model=LLAMA4_SCOUT, tp=2, runner="marlin")
    assert r.status == "ok" and r.plan.runner == "marlin" and r.evidence == "supported"
    assert r.plan.activation_precision == "bf16"


def test_llama4_on_marlin_stays_unverified_where_no_fact_applies_the_weight_on_input():
    # The AWQ/GPTQ layer check (check_moe_marlin_supports_layer, vllm-project/vllm@007d50058a06 marlin_utils.py)
    # refuses apply_router_weight_on_input and falls back to the wNa16 Triton kernel: the fact is scoped to NVFP4.
    r = explain(gpu="H100", engine="vllm", quant="int4_w4a16", model=LLAMA4_SCOUT, tp=2, runner="marlin")
    assert r.evidence == "unverified" and "routing_unsupported" in unknown_codes(r, "marlin")
    # SGLang: no fact of its Marlin applies the weight on the input either.
    s = explain(gpu="H100", engine="sglang", quant="nvfp4", model=LLAMA4_SCOUT, tp=2, runner="marlin")
    assert "routing_unsupported" in unknown_codes(s, "marlin")


# --------------------------------------------------------------- Marlin MoE from sm75 (vLLM), fp16 on Turing
def test_awq_moe_on_t4_plans_vllm_marlin_in_fp16():
    # vllm-project/vllm#29901 (Marlin for Turing: GPTQ, AWQ, FP8, NVFP4 weights, FP16 activations);
    # MarlinExpertsBase._supports_current_device = has_device_capability((7, 5)) (vllm-project/vllm@00da71c9d917).
    r = explain(gpu="T4", engine="vllm", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ"), tp=2, ep=1, a2a="none")
    assert r.status == "ok" and r.plan.runner == "marlin" and r.evidence == "supported"
    assert r.plan.activation_precision == "fp16"  # T4 has no bf16
    assert r.plan.chosen_by.rule == "turing"


def test_nvfp4_on_t4_is_weight_only_fp16():
    r = explain(gpu="T4", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, runner="marlin")
    assert r.evidence == "supported" and r.plan.activation_precision == "fp16"


def test_marlin_on_v100_is_refused_by_vllms_device_check():
    # has_device_capability((7, 5)): compute capability 7.0 is below it (exhaustive archs list, cited).
    r = explain(gpu="V100", engine="vllm", quant="int4_w4a16", model=QWEN3_30B, tp=1, runner="marlin")
    assert r.status != "ok"
    assert refusals(r, "marlin")["arch_unsupported"].startswith("backends/marlin.yaml:")


def test_mxfp4_marlin_on_t4_is_refused():
    # vllm-project/vllm#29901: "MXFP4 is not supported since it requires BF16 activation".
    r = explain(gpu="T4", engine="vllm", quant="mxfp4", model=QWEN3_30B, tp=1, runner="marlin")
    assert r.status != "ok" and refusals(r, "marlin")["quant_unsupported"].startswith("backends/marlin.yaml:")


# --------------------------------------------------------------- int4_w4a8: the CUTLASS W4A8 grouped GEMM on Hopper
def test_w4a8_on_hopper_plans_vllms_cutlass_w4a8():
    # vllm-project/vllm#29691; vllm-project/vllm@00606a9b8265 cutlass_moe.py CutlassExpertsW4A8Fp8
    # (kInt4Static weights, kFp8DynamicTokenSym activations, is_device_capability(90)); the W4A8 oracle names CUTLASS
    # only (vllm-project/vllm@07095d346602 oracle/w4a8.py).
    r = explain(gpu="H100", engine="vllm", quant="int4_w4a8", model=QWEN3_30B, tp=1)
    assert r.status == "ok" and r.plan.runner == "cutlass" and r.evidence == "supported"
    assert r.plan.activation_precision == "fp8_token" and r.plan.quant_params == {"group_size": 128}
    assert r.plan.chosen_by.rule == "hopper-w4a8"


def test_w4a8_on_hopper_under_sglang_uses_static_per_tensor_activation_scales():
    # sgl-project/sglang@007baab6e1d2 w4afp8.py (W4AFp8Config: moe_activation_scheme static, get_min_capability 90);
    # sgl-project/sglang@0698688259f4 moe_runner/cutlass.py (CutlassMoEType.W4A8).
    r = explain(gpu="H200", engine="sglang", quant="int4_w4a8", model=QWEN3_30B, tp=1)
    assert r.status == "ok" and r.plan.runner == "cutlass" and r.evidence == "supported"
    assert r.plan.activation_precision == "fp8_tensor"


def test_w4a8_on_ada_and_blackwell_is_refused_under_vllm():
    # CutlassExpertsW4A8Fp8._supports_current_device: compute capability 9.0 only.
    for gpu in ("L40S", "B200"):
        r = explain(gpu=gpu, engine="vllm", quant="int4_w4a8", model=QWEN3_30B, tp=1, runner="cutlass")
        assert r.status != "ok", gpu
        assert refusals(r, "cutlass")["quant_unsupported"].startswith("backends/cutlass.yaml:"), gpu


def test_w4a8_group_64_is_refused():
    # run_cutlass_moe_w4a8_fp8 asserts group_size == 128 (vllm-project/vllm@00606a9b8265).
    r = explain(gpu="H100", engine="vllm", quant="int4_w4a8", quant_config={"group_size": 64}, model=QWEN3_30B, tp=1,
                runner="cutlass")
    assert r.status != "ok" and "shape_unaligned" in refusals(r, "cutlass")


# --------------------------------------------------------------- FlashInfer MegaMoE: an all-to-all fused into its runner
# SGLang's MegaMoE all-to-all validates the checkpoint's architecture (backends/a2a/flashinfer_megamoe.yaml): the report's
# checkpoint is DeepSeek-V4-Flash, so the layer says so (an inline layer without one is unverified under that list)
MEGAMOE = {"gpu": "GB200", "engine": "sglang", "quant": "nvfp4", "model": {**DSV4_FLASH, "architecture": "DeepseekV4ForCausalLM"},
           "tp": 4, "ep": 4, "dp": 4}


def test_flashinfer_megamoe_plans_with_its_own_all_to_all():
    # sgl-project/sglang#31470; sgl-project/sglang@003b6ade987f moe_hook.py handle_a2a_moe (the a2a needs the runner,
    # DP attention with dp == tp, an SM100-family GPU); flashinfer_megamoe.py @dc9b78212af0 (fused function
    # registered for that a2a only).
    r = explain(**MEGAMOE, a2a="flashinfer_megamoe")
    assert r.status == "ok" and r.plan.runner == "flashinfer_megamoe" and r.evidence == "supported"
    assert r.plan.dispatch_formats == ["fused"]


def test_flashinfer_megamoe_runner_with_another_all_to_all_is_refused():
    for a2a in ("deepep", "flashinfer", "none"):
        r = explain(**MEGAMOE, a2a=a2a, runner="flashinfer_megamoe")
        assert r.status != "ok", a2a
        assert refusals(r, "flashinfer_megamoe")["a2a_unsupported"].startswith("backends/flashinfer_megamoe.yaml:"), a2a


def test_another_runner_with_the_megamoe_all_to_all_is_refused_where_its_a2a_list_is_exhaustive():
    # flashinfer_trtllm's SGLang a2a list is exhaustive (a fused-only runner raises without a fused function).
    r = explain(**MEGAMOE, a2a="flashinfer_megamoe", runner="flashinfer_trtllm")
    assert r.status != "ok" and "a2a_unsupported" in refusals(r, "flashinfer_trtllm")


def test_flashinfer_megamoe_refuses_dp_other_than_tp_and_non_sm100_gpus():
    r = explain(**{**MEGAMOE, "dp": 1}, a2a="flashinfer_megamoe")
    assert r.status != "ok" and "parallelism_unsupported" in refusals(r, "flashinfer_megamoe")
    h = explain(**{**MEGAMOE, "gpu": "H200"}, a2a="flashinfer_megamoe", runner="flashinfer_megamoe")
    assert h.status != "ok" and "arch_unsupported" in refusals(h, "flashinfer_megamoe")


def test_flashinfer_megamoe_refuses_standard_fp8():
    # validate_flashinfer_megamoe_model: "Standard FP8 MoE checkpoints are not supported".
    r = explain(**{**MEGAMOE, "quant": "fp8_block"}, a2a="flashinfer_megamoe", runner="flashinfer_megamoe")
    assert r.status != "ok" and "quant_unsupported" in refusals(r, "flashinfer_megamoe")


# --------------------------------------------------------------- FlashInfer < 0.6.7: in-kernel renormalize routing
QWEN35_B200 = {"gpu": "B200", "engine": "vllm", "quant": "fp8_block", "model": QWEN35_35B, "tp": 2, "ep": 2, "dp": 2}


def test_flashinfer_trtllm_renormalize_before_0_6_7_is_refused():
    # vllm-project/vllm#37591 (Qwen3.5-35B-A3B-FP8 DP2+EP gsm8k 0 % on Blackwell), flashinfer-ai/flashinfer#2822;
    # vLLM disabled it (#37605) and re-enabled it with FlashInfer 0.6.7 (#38859). Wrong output: a refusal.
    old = explain(**QWEN35_B200, packages={"flashinfer-python": "0.6.6"})
    assert old.status == "ok" and old.plan.runner != "flashinfer_trtllm"
    assert refusals(old, "flashinfer_trtllm")["routing_unsupported"].startswith("backends/flashinfer_trtllm.yaml:")
    # The routed variant routes outside the kernel: not gated.
    assert cand(old, "flashinfer_trtllm_routed").eligible


def test_flashinfer_trtllm_renormalize_from_0_6_7_is_planned():
    new = explain(**QWEN35_B200, packages={"flashinfer-python": "0.6.7"})
    assert new.status == "ok" and new.plan.runner == "flashinfer_trtllm" and new.evidence == "supported"


def test_the_renormalize_gate_leaves_deepseek_routing_alone():
    dsv3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
            "routing": "deepseek_v3"}
    r = explain(gpu="B200", engine="vllm", quant="fp8_block", model=dsv3, tp=8, ep=8,
                packages={"flashinfer-python": "0.6.6"}, runner="flashinfer_trtllm")
    assert "routing_unsupported" not in refusals(r, "flashinfer_trtllm")


# --------------------------------------------------------------- MXINT4 on TRT-LLM-gen: group-32 int4 (Kimi-K2-Thinking)
KIMI_K2 = {"num_experts": 384, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
           "routing": "deepseek_v3", "n_group": 1, "topk_group": 1}


def test_group_32_int4_on_blackwell_plans_flashinfer_trtllm_mxint4():
    # sgl-project/sglang#16892 (CompressedTensorsMxInt4MoE @0ba3cdd47463: group 32, symmetric, flashinfer_trtllm,
    # capability >= 100); vllm-project/vllm#32437 (TrtLlmMxint4ExpertsMonolithic @055e47c28003: kInt4Static32, SM100
    # family). W4A16: bf16 activations.
    for engine in ("sglang", "vllm"):
        r = explain(gpu="B200", engine=engine, quant="int4_w4a16", quant_config={"group_size": 32}, model=KIMI_K2,
                    tp=8, ep=8)
        assert r.status == "ok" and r.plan.runner == "flashinfer_trtllm" and r.evidence == "supported", engine
        assert r.plan.activation_precision == "bf16", engine


def test_mxint4_refuses_other_group_sizes_and_hopper():
    g128 = explain(gpu="B200", engine="vllm", quant="int4_w4a16", quant_config={"group_size": 128}, model=KIMI_K2,
                   tp=8, ep=8, runner="flashinfer_trtllm")
    assert g128.status != "ok" and refusals(g128, "flashinfer_trtllm")["shape_unaligned"].startswith("backends/flashinfer_trtllm.yaml:")
    h = explain(gpu="H200", engine="vllm", quant="int4_w4a16", quant_config={"group_size": 32}, model=KIMI_K2, tp=8, ep=8,
                runner="flashinfer_trtllm")
    assert h.status != "ok" and "arch_unsupported" in refusals(h, "flashinfer_trtllm")

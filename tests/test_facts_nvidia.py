"""Facts of the NVIDIA-family runner files (triton, triton_kernel, deep_gemm, cutlass, marlin,
torch_grouped_mm, torch_native), each checked through selection: a deployment -> eligible, or refused
with the right reason code. Every test names the public source of the fact it checks. Fresh, fast,
no GPU: planning only (moe_select.explain on declared machines)."""
from __future__ import annotations

import moe_select
from report_helpers import cand, refusals, unknown_codes

QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
             "activation": "silu", "routing": "renormalize"}
GPT_OSS_120B = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                "activation": "swiglu_oai", "routing": "renormalize"}
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
        "activation": "silu", "routing": "deepseek_v3"}


def explain(**dep):
    return moe_select.explain(dep)


def codes(report, runner):
    return {r.code for r in cand(report, runner).reasons}


# ------------------------------------------------------------------------------ int4 wNA16 (AWQ/GPTQ)
def test_awq_group_128_marlin_refused_when_a_rank_splits_a_group():
    # vllm-project/vllm#17604: AWQ Qwen3-30B-A3B (group 128) fails at TP 4 (768 / 4 = 192 rows per rank)
    # and works at TP 2. Marlin's MoE check (sgl-project/sglang@006d09616c51 marlin_utils.py
    # check_moe_marlin_supports_layer, the same in vLLM) needs intermediate_size_per_partition % max(64, group).
    # (the AWQ layout stated: unstated, SGLang's GPTQ layout, which fails at moe_tp > 1, leaves SGLang undecided)
    dep = {"gpu": "H100", "quant": "int4_w4a16", "model": QWEN3_30B, "ep": 1, "a2a": "none",
           "quant_config": {"group_size": 128, "layout": "awq"}}
    tp4 = explain(**dep, tp=4)
    marlin = cand(tp4, "marlin")
    assert not marlin.eligible
    shape = [r for r in marlin.reasons if r.code == "shape_unaligned"]
    assert any("192" in r.detail and r.source.startswith("backends/marlin.yaml:") for r in shape), shape
    tp2 = explain(**dep, tp=2)
    assert tp2.status == "ok" and cand(tp2, "marlin").eligible
    assert set(cand(tp2, "marlin").engines) == {"sglang", "vllm"}


def test_int4_w4a16_runs_on_hopper_through_triton_and_marlin():
    # vllm-project/vllm@00033579451d triton_moe.py (wNA16 Triton kernel) and
    # vllm-project/vllm@00da71c9d917 marlin_moe.py MarlinExpertsBase._supports_quant_scheme (kInt4Static).
    r = explain(gpu="H100", quant="int4_w4a16", model=QWEN3_30B, tp=2)
    assert r.status == "ok" and r.plan.runner in {"triton", "marlin"}
    assert cand(r, "triton").eligible and cand(r, "marlin").eligible


def test_marlin_group_size_32_keeps_smaller_rank_slices():
    # check_moe_marlin_supports_layer: group sizes -1, 32, 64, 128; 192 rows hold six groups of 32.
    r = explain(gpu="H100", quant="int4_w4a16", quant_config={"group_size": 32}, model=QWEN3_30B, tp=4)
    assert cand(r, "marlin").eligible
    bad = explain(gpu="H100", quant="int4_w4a16", quant_config={"group_size": 256}, model=QWEN3_30B, tp=1)
    assert "shape_unaligned" in codes(bad, "marlin")


# ------------------------------------------------------------------------------ FP8 on Ampere (W8A16)
def test_fp8_moe_on_ampere_runs_weight_only_marlin_in_vllm_only():
    # vllm-project/vllm@001a058b2463 oracle/fp8.py: Triton needs supports_fp8 (sm89+), so Marlin serves
    # FP8 MoE weight-only on sm80/sm86; SGLang's FP8 MoE Marlin path is not merged (sgl-project/sglang#30681).
    dep = {"gpu": "A100", "quant": "fp8_block", "model": QWEN3_30B, "tp": 1}
    vllm = explain(**dep, engine="vllm")
    assert vllm.status == "ok" and vllm.plan.runner == "marlin" and vllm.plan.activation_precision == "bf16"
    assert "quant_unsupported" in codes(vllm, "triton")
    anyr = explain(**dep)
    assert anyr.plan.runner == "marlin" and anyr.plan.engines == ["vllm"]
    sglang = explain(**dep, engine="sglang")
    # Field round 14 (sgl-project/sglang#18875): SGLang's Marlin MoE has no FP8 weight type and its FP8 MoE method
    # builds no Marlin runner (read in 0.5.9, 0.5.13, 0.5.23), and Triton takes fp8e4nv only from sm89: both refused
    # on evidence now (issue 18 had left them unverified on silence, when only #30681's unmerged path was known).
    assert sglang.status == "rejected"
    assert any(r.code == "quant_unsupported" and r.source.startswith("backends/marlin.yaml:")
               for r in cand(sglang, "marlin").reasons)
    assert any(r.code == "arch_unsupported" and r.source.startswith("backends/triton.yaml:")
               for r in cand(sglang, "triton").reasons)


def test_marlin_fp8_block_needs_128x128_blocks():
    # vllm marlin_moe.py: only kFp8Static128BlockSym among block-FP8 weight keys.
    r = explain(gpu="A100", engine="vllm", quant="fp8_block", quant_config={"block": [64, 64]}, model=QWEN3_30B, tp=1)
    assert "shape_unaligned" in codes(r, "marlin")


def test_sglang_mxfp4_marlin_only_on_sm90_and_sm120():
    # sgl-project/sglang@ed3e0bbaa518 mxfp4_marlin_moe.py: 'MXFP4 Marlin requires SM90 or SM120'; vLLM: cc >= 7.5.
    dep = {"quant": "mxfp4", "model": GPT_OSS_120B, "tp": 1, "runner": "marlin"}
    assert explain(gpu="A100", engine="sglang", **dep).status == "rejected"
    assert explain(gpu="A100", engine="vllm", **dep).status == "ok"
    assert explain(gpu="H100", engine="sglang", **dep).status == "ok"


def test_sglang_nvfp4_marlin_fallback_below_blackwell():
    # sgl-project/sglang@faeb96856c44 modelopt_quant.py: ModelOpt NVFP4 uses the Marlin W4A16 fallback on
    # 8.0 <= cc < 10.0 (sgl-project/sglang#19652); the old note said SGLang needs sm100+.
    r = explain(gpu="A100", engine="sglang", quant="nvfp4", model=QWEN3_30B, tp=1, runner="marlin")
    assert r.status == "ok" and r.plan.activation_precision == "bf16"


def test_marlin_refuses_weight_on_input_routing():
    # check_moe_marlin_supports_layer: supports_router_weight = not apply_router_weight_on_input.
    r = explain(gpu="H100", quant="int4_w4a16", model={**QWEN3_30B, "routing": "llama4", "top_k": 1}, tp=1)
    # Issue 18: that check gates the wNA16 path only (vLLM's Marlin kernel takes the weight on the input for its
    # other formats), so marlin's routing list stays open: the gap is unverified, never supported.
    assert cand(r, "marlin").evidence == "unverified" and "routing_unsupported" in unknown_codes(r, "marlin")
    assert cand(r, "triton").eligible  # SGLang's Triton runner multiplies the first GEMM's input


# ------------------------------------------------------------------------------ DeepGEMM
def test_pplx_dispatch_with_deep_gemm_bf16_on_hopper():
    # sgl-project/sglang#30756: --moe-a2a-backend pplx, only with --moe-runner-backend deep_gemm, bf16
    # Qwen3-30B-A3B at TP 4 / DP 4; bf16 DeepGEMM MoE: sgl-project/sglang#17392, #26473.
    r = explain(gpu="H200", quant="bf16", model=QWEN3_30B, tp=4, ep=4, a2a="pplx", runner="deep_gemm")
    assert r.status == "ok", r.reasons
    assert r.plan.engines == ["sglang"] and r.plan.dispatch_formats == ["batched"]
    # vLLM has no DeepGEMM bf16 MoE (vllm-project/vllm#49271) and pairs DeepGEMM with none/DeepEP only.
    v = explain(gpu="H200", engine="vllm", quant="bf16", model=QWEN3_30B, tp=4, ep=4, a2a="pplx", runner="deep_gemm")
    assert v.status == "rejected"


def test_pplx_is_deep_gemm_only_in_sglang():
    # sgl-project/sglang#30756: "Only support --moe-runner-backend deepgemm".
    # dp stated: SGLang's pplx needs attention DP >= 2 (backends/a2a/pplx.yaml), so without it the plan is unverified
    r = explain(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, a2a="pplx")
    assert r.status == "ok" and r.plan.runner == "deep_gemm" and r.plan.evidence == "unverified"
    # a decode batch stated: SGLang's own limit on an H200 at tp 8 (512) outgrows pplx's default 128 (field round 53)
    r = explain(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, dp=8, a2a="pplx", decode_tokens_per_rank=128)
    assert r.status == "ok" and r.plan.runner == "deep_gemm" and r.plan.evidence == "supported"
    # Issue 18: SGLang's pplx check lives on the a2a side (moe_hook.handle_a2a_moe), not in a runner list that
    # could be exhaustive: Triton with pplx is unverified for SGLang (vLLM has no pplx), not refused.
    assert cand(r, "triton").evidence == "unverified" and "a2a_unsupported" in unknown_codes(r, "triton")
    # Marlin is refused on the runner's side (9eea6dc, field round 4 kind 2): it is fused-only in SGLang and
    # MoeRunner.__init__ raises for every a2a backend it registers no fused function for (only none), pplx included.
    marlin = cand(r, "marlin")
    assert marlin.evidence == "refused"
    assert any(x.code == "a2a_unsupported" and x.source.startswith("backends/marlin.yaml:") and "exhaustive a2a list" in x.detail
               for x in marlin.reasons)


def test_deep_gemm_mooncake_is_sglangs():
    # SGLang's Fp8MoEMethod counts Mooncake as a DeepEP-class a2a for DeepGEMM
    # (sgl-project/sglang@00563d368df9 fp8.py); vLLM's DeepGemmExperts pairs with none/DeepEP.
    # (Mooncake EP's buffer holds 128 tokens per rank per forward by default in SGLang: backends/a2a/mooncake.yaml.)
    dep = {"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "a2a": "mooncake", "runner": "deep_gemm",
           "max_tokens_per_rank": 128, "a2a_mode": "low_latency"}
    assert explain(**dep, engine="sglang").status == "ok"
    assert explain(**dep, engine="vllm").status == "rejected"


def test_deep_gemm_bf16_hopper_alignment():
    # deepseek-ai/DeepGEMM@54e22612409371 sm90_bf16_gemm.hpp: the grouped bf16 GEMMs assert K % 64 == 0.
    odd = {**QWEN3_30B, "moe_intermediate_size": 720}  # 720 / 1 rows: not a multiple of 64
    r = explain(gpu="H200", quant="bf16", model=odd, tp=1, runner="deep_gemm")
    assert "shape_unaligned" in codes(r, "deep_gemm")


def test_deep_gemm_mxfp4_has_fp8_activations_on_blackwell_only():
    # vllm-project/vllm@055e47c28003 deep_gemm_moe.py DeepGemmFP4Experts: recipe_a (1, 128) FP8, recipe_b (1, 32)
    # MXFP4; DeepGEMM's FP8 x FP4 grouped GEMM runs on arch_major 10 only.
    b = explain(gpu="B200", quant="mxfp4", model=DSV3, tp=8, ep=8, runner="deep_gemm")
    assert b.status == "ok" and b.plan.activation_precision == "fp8_group"
    h = explain(gpu="H200", quant="mxfp4", model=DSV3, tp=8, ep=8, runner="deep_gemm")
    assert "quant_unsupported" in codes(h, "deep_gemm")


def test_deep_gemm_toolchain_per_arch():
    # DeepGEMM csrc/jit/compiler.hpp asserts NVCC >= 12.3; sm_100f (needed for sm103) only with >= 12.9.
    dep = {"quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "runner": "deep_gemm"}
    assert "toolchain_unsupported" in codes(explain(gpu="B300", nvcc="12.8", **dep), "deep_gemm")
    assert explain(gpu="B300", nvcc="12.9", **dep).status == "ok"
    assert explain(gpu="H200", nvcc="12.4", **dep).status == "ok"
    assert "toolchain_unsupported" in codes(explain(gpu="H200", nvcc="12.2", **dep), "deep_gemm")


def test_deep_gemm_weight_on_input_is_vllms():
    # vllm deep_gemm_moe.py DeepGemmExperts.apply: apply_router_weight_on_input -> unit combine weights.
    llama4 = {**QWEN3_30B, "routing": "llama4", "top_k": 1}
    r = explain(gpu="H200", quant="fp8_block", model=llama4, tp=1, runner="deep_gemm")
    assert r.status == "ok" and r.plan.engines == ["vllm"]


# ------------------------------------------------------------------------------ Triton
def test_triton_all_to_all_per_engine():
    # SGLang registers the Triton runner for the standard dispatcher only (sgl-project/sglang#36134);
    # vLLM pairs TritonExperts / BatchedTritonExperts with DeepEP (triton_moe.py, fused_batched_moe.py).
    dep = {"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep", "runner": "triton"}
    # Issue 18: no SGLang check refuses it (newer SGLang registers a DeepEP fused function for triton): unverified.
    s = explain(**dep, engine="sglang")
    assert s.evidence == "unverified" and "a2a_unsupported" in unknown_codes(s, "triton")
    v = explain(**dep, engine="vllm")
    assert v.status == "ok" and v.plan.a2a_modes == ["normal", "low_latency"]


def test_triton_batched_format_is_unquantized_or_fp8():
    # vllm fused_batched_moe.py BatchedTritonExperts: int8_w8a8 / int8_w8a16 / int4_w4a16 'NYI'.
    dep = {"gpu": "H200", "engine": "vllm", "model": QWEN3_30B, "tp": 4, "ep": 4, "a2a": "deepep",
           "a2a_mode": "low_latency", "runner": "triton"}
    assert explain(quant="bf16", **dep).status == "ok"
    r = explain(quant="int4_w4a16", **dep)
    assert "a2a_unsupported" in codes(r, "triton")


def test_triton_vllm_expert_count_limit():
    # vllm triton_moe.py TritonExperts.is_supported_config: padded experts (multiple of 32) must stay < 1024.
    many = {**QWEN3_30B, "num_experts": 1024, "top_k": 8}
    r = explain(gpu="H200", quant="bf16", model=many, tp=1, runner="triton")
    assert r.status == "ok" and r.plan.engines == ["sglang"]
    assert explain(gpu="H200", engine="vllm", quant="bf16", model=many, tp=1, runner="triton").status == "rejected"


def test_triton_swiglu_oai_and_relu2():
    # SGLang fused_moe.py swiglu_with_alpha_and_limit (gpt-oss); vLLM activation.py apply_moe_activation_supported.
    gptoss_bf16 = explain(gpu="H200", quant="bf16", model=GPT_OSS_120B, tp=1, runner="triton")
    assert gptoss_bf16.status == "ok"
    relu2 = {**QWEN3_30B, "activation": "relu2"}
    assert explain(gpu="H200", engine="vllm", quant="bf16", model=relu2, tp=1, runner="triton").status == "ok"
    # Issue 18: SGLang's activation list was read for what runs, not for a check refusing relu2: unverified.
    s = explain(gpu="H200", engine="sglang", quant="bf16", model=relu2, tp=1, runner="triton")
    assert s.evidence == "unverified" and "activation_unsupported" in unknown_codes(s, "triton")


# ------------------------------------------------------------------------------ OpenAI triton_kernels
def test_triton_kernel_expert_parallelism_per_engine():
    # SGLang asserts moe_ep_size == 1 (sgl-project/sglang@bafa16ec882f mxfp4.py); vLLM's OAITritonExperts
    # takes an expert_map and ran with DeepEP high-throughput (vllm-project/vllm#27370).
    dep = {"gpu": "H100", "quant": "mxfp4", "model": GPT_OSS_120B, "tp": 4, "ep": 4, "runner": "triton_kernel"}
    s = explain(**dep, engine="sglang")
    assert "parallelism_unsupported" in codes(s, "triton_kernel")
    assert explain(**dep, engine="vllm").status == "ok"
    assert explain(**dep, engine="vllm", a2a="deepep", a2a_mode="normal", cuda_graph=False).status == "ok"


def test_triton_kernel_arch_gates():
    # vLLM oracle/mxfp4.py: triton_kernels only where 9.0 <= cc < 11.0; ROCm: on_gfx9() (vllm@0221ab433e61);
    # SGLang on ROCm registers MXFP4 only on gfx95x (sglang@bafa16ec882f).
    dep = {"quant": "mxfp4", "model": GPT_OSS_120B, "tp": 8, "runner": "triton_kernel"}
    assert explain(gpu="B300", engine="vllm", **dep).status == "ok"
    assert explain(gpu="MI300X", engine="vllm", **dep).status == "ok"
    assert explain(gpu="MI300X", engine="sglang", **dep).status == "rejected"
    assert explain(gpu="MI355X", engine="sglang", **dep, ep=1).status == "ok"
    # RTX PRO 6000 (sm120) is outside vLLM's window up to 0.31.0 (0.29.0: the release assumed when this was written);
    # from 0.32.0 the window is cc < (13, 0) (vllm-0.32.0 experts/gpt_oss_triton_kernels_moe.py:
    # _triton_kernel_moe_supports_current_device) and sm120 is planned.
    assert explain(gpu="RTX PRO 6000", engine="vllm", engine_version="0.29.0", **dep).status == "rejected"
    assert explain(gpu="RTX PRO 6000", engine="vllm", engine_version="0.32.0", **dep).status == "ok"


def test_triton_kernels_install_hint_is_never_the_unrelated_pypi_project():
    # triton-lang/triton#8445: PyPI's 'triton-kernels' is not OpenAI's; vLLM on ROCm imports an installed
    # triton_kernels (vllm-project/vllm#52056).
    r = explain(gpu="MI300X", engine="vllm", quant="mxfp4", model=GPT_OSS_120B, tp=8, runner="triton_kernel",
                packages={"triton_kernels": None})
    miss = [x for x in r.reasons if x.code == "dependency_missing"]
    assert miss and "triton-lang/triton" in miss[0].fix and "pip install 'triton-kernels" not in miss[0].fix


# ------------------------------------------------------------------------------ SGLang CUTLASS
def test_sglang_cutlass_block_fp8_and_nvfp4():
    # sgl-project/sglang@00563d368df9 fp8.py: cutlass FP8 MoE needs block quantization and SM90/SM100/SM120;
    # moe_runner/cutlass.py: BlockscaledFP4 type; the FP8/FP4 types run on the standard dispatcher.
    assert explain(gpu="RTX PRO 6000", quant="fp8_block", model=QWEN3_30B, tp=1, runner="cutlass").status == "ok"
    # Issue 18: Fp8MoEMethod asserts block quantization for SGLang's 'fp8' checkpoints only (per-channel FP8 comes
    # through compressed-tensors, not read): the fp8_channel gap is unverified for SGLang, not refused. (vLLM's own
    # CUTLASS FP8 experts run it on Hopper: supported under engine any, issue 21.)
    ch = explain(gpu="H200", quant="fp8_channel", model=QWEN3_30B, tp=1, runner="cutlass", engine="sglang")
    assert ch.evidence == "unverified" and "quant_unsupported" in unknown_codes(ch, "cutlass")
    assert explain(gpu="H200", quant="fp8_channel", model=QWEN3_30B, tp=1, runner="cutlass").evidence == "supported"
    assert explain(gpu="B200", quant="nvfp4", model=QWEN3_30B, tp=1, runner="cutlass").status == "ok"
    r = explain(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, a2a="deepep", runner="cutlass")
    # SGLang refuses it (FP8 Cutlass MoE needs ep_size == 1). SGLang and vLLM ship a runner of this name (issue 21: vLLM's
    # `--moe-backend cutlass`, its own CUTLASS kernels; TensorRT-LLM's CUTLASS is trtllm_cutlass). vLLM's block-FP8
    # CUTLASS path was not read: no vLLM fact says it runs fp8_block (unverified), and the SGLang-only ep == 1 refusal
    # does not hold there.
    assert cand(r, "cutlass").evidence_by_engine.get("sglang", cand(r, "cutlass").evidence) == "refused"
    # DeepEP normal (token-major) under vLLM; its low-latency mode (auto's decode) hands batched rows, which only
    # CutlassBatchedExpertsFp8 takes, and for FP8 per-tensor / per-channel only: block FP8 refused there (cutlass.yaml's
    # exhaustive vLLM dispatch list; tests/test_vllm_deepep_v2_padded.py).
    under_vllm = explain(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, a2a="deepep", a2a_mode="normal",
                         cuda_graph=False, runner="cutlass", engine="vllm")
    assert "quant_unsupported" in unknown_codes(under_vllm, "cutlass")
    assert "engine_unsupported" not in unknown_codes(under_vllm, "cutlass")
    assert not cand(under_vllm, "cutlass").reasons
    auto = explain(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, a2a="deepep", runner="cutlass", engine="vllm")
    assert set(refusals(auto, "cutlass")) == {"a2a_unsupported"}
    assert refusals(auto, "cutlass")["a2a_unsupported"].startswith("backends/cutlass.yaml:")


# ------------------------------------------------------------------------------ torch_grouped_mm
def test_torch_grouped_mm_fp8_rowwise_is_hopper_only():
    # pytorch/pytorch@4c8b95514429 common_cuda.py: PLATFORM_SUPPORTS_FP8_GROUPED_GEMM = SM90OrLater and not
    # SM100OrLater (pytorch/pytorch#161780); the old file claimed fp8_channel/fp8_tensor on sm100.
    # This install's runner (engine moe_select): no serving engine ships it (its engines list, exhaustive).
    r = explain(gpu="B200", quant="fp8_channel", model=QWEN3_30B, tp=1, runner="torch_grouped_mm", engine="moe_select")
    assert "quant_unsupported" in codes(r, "torch_grouped_mm")
    assert explain(gpu="H200", quant="fp8_channel", model=QWEN3_30B, tp=1, runner="torch_grouped_mm",
                   engine="moe_select").status == "ok"


def test_torch_grouped_mm_bf16_on_sm100_needs_a_torch_with_the_sm100_kernel():
    # pytorch/pytorch#156202 / #156203: SM100 grouped GEMM added June 2025; claimed from torch 2.9.
    dep = {"gpu": "B200", "quant": "bf16", "model": QWEN3_30B, "tp": 1, "runner": "torch_grouped_mm", "engine": "moe_select"}
    assert explain(**dep, packages={"torch": "2.9.0"}).status == "ok"
    old = explain(**dep, packages={"torch": "2.8.0"})
    assert "quant_unsupported" in codes(old, "torch_grouped_mm")


def test_torch_grouped_mm_row_alignment():
    # pytorch/pytorch@2295ac79eeea GroupedMMUtils.h: strides multiples of 16 bytes (8 bf16 elements).
    odd = {**QWEN3_30B, "moe_intermediate_size": 100}
    r = explain(gpu="H200", quant="bf16", model=odd, tp=1, runner="torch_grouped_mm")
    assert "shape_unaligned" in codes(r, "torch_grouped_mm")


def test_this_projects_runners_pair_with_standard_dispatch_only():
    # this project: moe_select/contracts.py (standard format), backends/torch_grouped_mm.py route_plan and
    # backends/torch_native.py register(): token-major cores; no batched (expert-major) core.
    # Issue 18: planned for this install (engine moe_select): this project's torch all-to-all is no serving engine's.
    dep = {"gpu": "H200", "quant": "bf16", "model": QWEN3_30B, "tp": 2, "ep": 2, "a2a": "torch", "cuda_graph": False,
           "engine": "moe_select"}
    r = explain(**dep)
    assert cand(r, "torch_grouped_mm").eligible and cand(r, "torch_native").eligible
    ll = explain(gpu="H200", quant="bf16", model=QWEN3_30B, tp=2, ep=2, a2a="deepep", a2a_mode="low_latency")
    # Issue 18: this project's own facts cannot make a list exhaustive (no upstream check); with no engine stated
    # (sglang, vllm, trtllm) torch_grouped_mm is refused anyway now: no serving engine ships it (their backend tables).
    assert not cand(ll, "torch_grouped_mm").eligible and "engine_unsupported" in codes(ll, "torch_grouped_mm")
    assert not cand(ll, "torch_native").eligible  # refused on other facts (no CUDA-graph capture, parallelism)


# ------------------------------------------------------------------------------ DeepEP low-latency token cap
def test_deepep_low_latency_token_cap_where_low_latency_is_the_only_mode():
    """SGLang asserts SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK <= 1024 and DeepEP's low_latency dispatch
    takes at most that many tokens per rank (sgl-project/sglang@003a81bf2870 token_dispatcher/deepep.py;
    deepseek-ai/DeepEP#165: low_latency for prefill fails on 1k-token prompts). Checked where low_latency is the
    only mode: given, or auto on a decode-only worker; not under auto over prefill and decode (the decode batch
    is not an input there)."""
    base = dict(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, a2a="deepep", engine="sglang", cuda_graph=False)
    forced = explain(**base, a2a_mode="low_latency", max_tokens_per_rank=4096)
    assert forced.status == "rejected"
    cap = [r for c in forced.candidates for r in c.reasons if "low_latency_tokens_per_rank" in r.detail]
    assert cap and all(r.code == "parallelism_unsupported" and "a2a/deepep.yaml" in r.source for r in cap), cap
    # 1024 tokens fit once the buffer variable is raised to its maximum (its default 128 refuses them: issue 23)
    assert explain(**base, a2a_mode="low_latency", max_tokens_per_rank=1024, a2a_capacity=1024).status == "ok"
    assert explain(**base, phase="decode", max_tokens_per_rank=2048).status == "rejected"
    assert explain(**base, phase="decode").status == "ok"                       # default decode budget 256
    assert explain(**base, max_tokens_per_rank=16384).status == "ok"            # auto over both: not known
    assert explain(**base, a2a_mode="normal", max_tokens_per_rank=16384).status == "ok"


def test_deep_gemm_and_flashinfer_cutlass_take_128x128_fp8_blocks_only():
    """DeepGEMM's FP8 recipe is (1, 128, 128) (deepseek-ai/DeepGEMM@54e22612409371 csrc/utils/layout.hpp
    get_default_recipe; SGLang's UE8M0 requant asserts [128, 128]); vLLM admits FlashInfer's CUTLASS block FP8
    under kFp8Static128BlockSym only. A [128, 64] checkpoint was planned on both (break-it session)."""
    base = dict(gpu="H200", quant="fp8_block", model=DSV3, tp=8, ep=8, max_tokens_per_rank=256)
    for runner, extra in (("deep_gemm", dict(a2a="deepep", engine="sglang")), ("flashinfer_cutlass", dict(engine="vllm"))):
        ok = explain(**base, **extra, runner=runner, quant_config={"block": [128, 128]})
        assert ok.status == "ok", (runner, ok.reasons)
        for block in ([128, 64], [64, 128]):
            r = explain(**base, **extra, runner=runner, quant_config={"block": block})
            assert r.status == "rejected" and {x.code for x in r.reasons} == {"shape_unaligned"}, (runner, block, r.reasons)
            assert any("quant_block" in x.detail and f"backends/{runner}.yaml:" in x.source for x in r.reasons)


# ------------------------------------------------ second independent field-case round (helper, 2026-11-30)
def test_sglang_fp8_cutlass_moe_needs_ep_1():
    """sgl-project/sglang@003b6ade987f moe_hook.py handle_moe_kernel_config: 'FP8/MXFP8 Cutlass MoE is only
    supported with ep_size == 1'."""
    base = dict(gpu="H200", quant="fp8_block", model=DSV3, engine="sglang", runner="cutlass", tp=8)
    r = explain(**base, ep=8)
    assert r.status == "rejected" and "parallelism_unsupported" in {x.code for x in r.reasons}
    assert any("backends/cutlass.yaml:" in x.source for x in r.reasons)
    assert explain(**base, ep=1).status == "ok"


def test_sglang_deepep_v2_takes_block_fp8_experts_only():
    """sgl-project/sglang#35634 (deepep_v2's supported scope): dynamic blockwise FP8 128x128 experts with the
    deep_gemm runner; BF16 experts are not supported."""
    # SGLang 0.5.21: 0.5.19 (assumed without engine_version) and 0.5.20 fail DeepEP V2's prefill into DeepGEMM
    # (sgl-project/sglang#38160, backends/a2a/deepep_v2.yaml), which this check is not about.
    base = dict(gpu="H200", engine="sglang", engine_version="0.5.21", tp=8, ep=8, a2a="deepep_v2", runner="deep_gemm",
                max_tokens_per_rank=256, a2a_capacity=256)  # deepep_v2's buffer raised to the 256 tokens (default 128: issue 23)
    assert explain(**base, quant="fp8_block", model=DSV3).status == "ok"
    bf16 = explain(**base, quant="bf16", model=QWEN3_30B)
    # Issue 18: the PR's scope is not a check that refuses bf16 experts: unverified, not refused.
    assert bf16.evidence == "unverified" and "a2a_unsupported" in unknown_codes(bf16, "deep_gemm")


def test_vllm_runners_take_nixl_ep():
    """vLLM's experts accept every all-to-all but FlashInfer's NVLink kernels (BatchedDeepGemmExperts.
    _supports_parallel_config returns True, vllm@023fe477e2f3); NIXL-EP is batched (vllm-project/vllm#35627,
    whose test plan runs Qwen3-30B-A3B FP8 on 8x H100 with EP 8)."""
    model = dict(QWEN3_30B)
    r = explain(gpu="H100", engine="vllm", quant="fp8_block", model=model, tp=1, dp=8, ep=8, a2a="nixl")
    assert r.status == "ok", r.reasons


def test_deep_gemm_mxfp4_vllm_sm12x_refused_by_the_deepgemm_kernel_not_vllms_gate():
    # vllm-project/vllm@055e47c28003 DeepGemmFP4Experts._supports_current_device admits the 10.x and 12.x families,
    # but DeepGEMM (main @54e22612409371 and vLLM's pins) asserts packed FP4 operands on arch 10 only
    # (csrc/utils/layout.hpp check_grouped_ab_fp8_fp4); SM120 FP4 exists on DeepGEMM's nv_dev branch only (#324).
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "backends" / "deep_gemm.yaml").read_text().splitlines()
    row = next(i + 1 for i, text in enumerate(lines) if text.strip() == "- archs: [sm120, sm121]"
               and "supported: false" in lines[i + 2] and "engine: [vllm]" in lines[i + 4])
    dep = {"quant": "mxfp4", "model": GPT_OSS_120B, "tp": 1, "engine": "vllm", "runner": "deep_gemm"}
    for gpu in ("RTX PRO 6000", "GB10"):
        r = explain(gpu=gpu, **dep)
        reasons = cand(r, "deep_gemm").reasons
        assert r.status == "rejected" and [x.code for x in reasons] == ["arch_unsupported"], gpu
        assert reasons[0].source == f"backends/deep_gemm.yaml:{row}" and "does not run mxfp4" in reasons[0].detail, gpu
    # The same cell on SM100 is vLLM's DeepGemmFP4Experts row: not refused.
    assert "arch_unsupported" not in codes(explain(gpu="B200", **dep), "deep_gemm")

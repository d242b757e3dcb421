"""The FlashInfer family's facts (backends/flashinfer_*.yaml, backends/a2a/flashinfer.yaml), each through the
selector: a deployment, and the runner eligible or refused with the right reason code. Every test cites the
public source of the fact it checks. No GPU, no FlashInfer install: versions are declared."""
from __future__ import annotations

import random

import pytest

import moe_select

NEMOTRON = {"num_experts": 512, "top_k": 22, "hidden_size": 1024, "moe_intermediate_size": 2688,
            "activation": "relu2", "routing": "deepseek_v3"}
# MiniMax-M2 (config.json: 256 experts, top-8, hidden 3072, intermediate 1536, sigmoid + bias, no groups).
MINIMAX = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536,
           "activation": "silu", "routing": "sigmoid_topk"}
QWEN = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
        "activation": "silu", "routing": "renormalize"}
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
        "activation": "silu", "routing": "deepseek_v3", "n_group": 8, "topk_group": 4}


#: bf16 on the TRT-LLM-gen launcher below FlashInfer 0.6.18rc2 (flashinfer-ai/flashinfer#4319: the intermediates are
#: not padded to the 128 KiB the BMM's TMA loads address): the older version gates of bf16 are read next to it.
BF16_IMA = {"dependency_missing"}


def candidate(dep: dict, runner: str):
    report = moe_select.explain(dep)
    return report, next(c for c in report.candidates if c.backend == runner)


def codes(dep: dict, runner: str) -> set[str]:
    return {r.code for r in candidate(dep, runner)[1].reasons}


def eligible(dep: dict, runner: str) -> bool:
    return candidate(dep, runner)[1].eligible


def unverified(dep: dict, runner: str) -> set[str]:
    """Issue 18: the codes of what no fact decides for an eligible ``runner`` whose evidence is unverified (an open
    list's gap); empty when the runner is supported or refused."""
    c = candidate(dep, runner)[1]
    return {x.code for x in c.unknowns} if c.eligible and c.evidence == "unverified" else set()


# --------------------------------------------------------------------------------- flashinfer_cutlass
def test_cutlass_bf16_relu2_on_sm121_needs_0_6_8():
    # FlashInfer PR #2926 (first in v0.6.8) adds the Relu2 epilogue to the SM80-class fused GEMM that
    # 16-bit MoE uses on sm12x; vLLM PR #39825: flashinfer 0.6.7 threw "Invalid activation type" on SM121.
    dep = {"gpu": "GB10", "quant": "bf16", "model": NEMOTRON, "tp": 1, "ep": 1, "a2a": "none", "runner": "auto",
           "packages": {"flashinfer-python": "0.6.7"}}
    report, c = candidate(dep, "flashinfer_cutlass")
    assert not c.eligible and {r.code for r in c.reasons} == {"activation_unsupported"}
    assert all(r.fix == "pip install 'flashinfer-python>=0.6.8'" for r in c.reasons)
    assert report.plan is None or report.plan.runner != "flashinfer_cutlass"
    plan = moe_select.plan({**dep, "runner": "flashinfer_cutlass", "packages": {"flashinfer-python": "0.6.8"}})
    assert plan.runner == "flashinfer_cutlass"


def test_cutlass_relu2_on_hopper_needs_no_new_version(seed):
    # The TMA warp-specialized path (sm90/sm100) runs the activation in its own kernel, Relu2 included
    # (flashinfer v0.6.4 cutlass_fused_moe_kernels.cuh doActivation); only the SM80-class path needed #2926.
    version = random.Random(seed).choice(["0.6.4", "0.6.5", "0.6.6", "0.6.7"])
    dep = {"gpu": "H200", "quant": "bf16", "model": NEMOTRON, "runner": "flashinfer_cutlass",
           "packages": {"flashinfer-python": version}}
    assert eligible(dep, "flashinfer_cutlass"), version


def test_cutlass_ep_restriction_is_sglangs():
    # SGLang moe_hook.handle_moe_kernel_config asserts ep in {1, tp}; the kernel and vLLM's FlashInferExperts
    # (_supports_parallel_config returns True) take any tp x ep that vLLM can form: its ep spans tp x dp
    # (FusedMoEParallelConfig.make), so tp 4 with dp 2 gives ep 8.
    dep = {"gpu": "H200", "quant": "bf16", "model": QWEN, "tp": 4, "dp": 2, "ep": 8, "runner": "flashinfer_cutlass"}
    assert codes({**dep, "engine": "sglang"}, "flashinfer_cutlass") == {"parallelism_unsupported"}
    assert eligible({**dep, "engine": "vllm"}, "flashinfer_cutlass")


def test_cutlass_block_fp8_is_vllm_only_and_hopper_only():
    # vLLM FlashInferExperts._supports_quant_scheme: block FP8 on capability 9.0 only; SGLang refuses
    # quantization 'fp8' with flashinfer_cutlass (moe_hook); FlashInfer core.py: block scale Hopper-only.
    dep = {"gpu": "H200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "runner": "flashinfer_cutlass"}
    assert eligible({**dep, "engine": "vllm"}, "flashinfer_cutlass")
    assert codes({**dep, "engine": "sglang"}, "flashinfer_cutlass") == {"quant_unsupported"}
    assert "quant_unsupported" in codes({**dep, "gpu": "B200", "engine": "vllm"}, "flashinfer_cutlass")


def test_cutlass_sm89_not_in_vllm():
    # vLLM FlashInferExperts._supports_current_device: 9.0, family 10.x, family 12.x (no 8.9); FlashInfer
    # builds fused_moe_89 with SM80/SM89 kernels (moe_gemm_template_dispatch.h dispatchToArch).
    dep = {"gpu": "L40S", "quant": "fp8_tensor", "model": QWEN, "runner": "flashinfer_cutlass"}
    assert codes({**dep, "engine": "vllm"}, "flashinfer_cutlass") == {"quant_unsupported"}
    assert eligible({**dep, "engine": "sglang"}, "flashinfer_cutlass")


def test_cutlass_vllm_a2a_per_format():
    # vLLM FlashInferExperts: standard format, any parallel config, but "the per-tensor fp8 kernels don't
    # work with MNNVL FI A2As" (_supports_parallel_config); SGLang registers a2a none and flashinfer only.
    dep = {"gpu": "B200", "model": QWEN, "tp": 8, "ep": 8, "engine": "vllm", "runner": "flashinfer_cutlass"}
    assert eligible({**dep, "quant": "bf16", "a2a": "flashinfer"}, "flashinfer_cutlass")
    # Issue 18: vLLM's _supports_parallel_config accepts every config (the per-tensor FP8 caveat is a TODO comment,
    # not a check): unverified, not refused.
    assert unverified({**dep, "quant": "fp8_tensor", "a2a": "flashinfer"}, "flashinfer_cutlass") == {"a2a_unsupported"}
    assert eligible({**dep, "quant": "nvfp4", "a2a": "deepep", "a2a_mode": "normal", "cuda_graph": False},
                    "flashinfer_cutlass")
    sglang = {**dep, "engine": "sglang", "quant": "nvfp4", "a2a": "deepep", "a2a_mode": "normal", "cuda_graph": False}
    assert "a2a_unsupported" in codes(sglang, "flashinfer_cutlass")


def test_cutlass_sm12x_toolkit_rule_from_0_6_7():
    # FlashInfer PR #2839 (v0.6.7): CompilationContext raises "SM 12.x requires CUDA >= 12.9".
    dep = {"gpu": "RTX PRO 6000", "quant": "bf16", "model": QWEN, "runner": "flashinfer_cutlass", "nvcc": "12.8"}
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.7"}}, "flashinfer_cutlass") == {"toolchain_unsupported"}
    assert eligible({**dep, "packages": {"flashinfer-python": "0.6.6"}}, "flashinfer_cutlass")


def test_cutlass_mxfp4_unaligned_sizes_run_padded_by_vllm():
    # flashinfer_cutlass_fused_moe_binding.cu runMoe: MXFP4 x MXFP8/FP8 needs hidden and inter % 128, but vLLM
    # (the one engine with these rows) rounds both up to 128 at load (oracle/mxfp4.py
    # mxfp4_round_up_hidden_size_and_intermediate_size; gpt-oss-120b at hidden 2880 ran: vllm-project/vllm#23696).
    # MXFP8 activations asked: from vLLM 0.29.0 the MXFP4 oracle runs FlashInfer CUTLASS off sm90 only with them
    # (backends/flashinfer_cutlass.yaml, _filter_by_activation)
    dep = {"gpu": "B200", "quant": "mxfp4", "engine": "vllm", "runner": "flashinfer_cutlass",
           "quant_config": {"activation_precision": "mxfp8"},
           "model": {**QWEN, "hidden_size": 2880, "moe_intermediate_size": 2880}}
    report = moe_select.explain(dep)
    assert report.status == "ok" and report.plan.runner == "flashinfer_cutlass"
    assert any("vLLM zero-pads both up to 128" in n for n in report.plan.notes), report.plan.notes
    assert eligible({**{k: v for k, v in dep.items() if k != "quant_config"}, "quant": "bf16"}, "flashinfer_cutlass")


# --------------------------------------------------------------------------------- flashinfer_trtllm
def test_trtllm_minimax_routing_needs_0_6_8():
    # FlashInfer issue #2736, PR #2803 (MiniMax2 routing, first in v0.6.8); vLLM PR #39141 enabled it (SGLang's rows
    # differ by release: tests/test_field_2026_kinds_b.py).
    dep = {"gpu": "B200", "engine": "vllm", "quant": "fp8_block", "model": MINIMAX, "tp": 4, "ep": 1, "a2a": "none",
           "runner": "flashinfer_trtllm", "packages": {"flashinfer-python": "0.6.7"}}
    report = moe_select.explain(dep)
    assert report.status == "rejected" and {r.code for r in report.reasons} == {"routing_unsupported"}
    assert "(flashinfer-python is 0.6.7)" in report.reasons[0].detail
    assert "pip install 'flashinfer-python>=0.6.8'" in report.reasons[0].fix
    plan = moe_select.plan({**dep, "packages": {"flashinfer-python": "0.6.8"}})
    assert plan.runner == "flashinfer_trtllm"


def test_trtllm_relu2_fp8_per_tensor(seed):
    # FlashInfer PR #2462 (non-gated Relu2 NVFP4 and FP8, v0.6.3); SGLang PR #21321 and vLLM PR #33506
    # serve Nemotron-H FP8 on B200; FlashInfer #2882 fixed 0.6.7's tactic fallback, #2907 reported 0.6.7.
    dep = {"gpu": "B200", "quant": "fp8_tensor", "model": NEMOTRON, "tp": 2, "ep": 1, "a2a": "none",
           "runner": "flashinfer_trtllm"}
    assert moe_select.plan(dep).runner == "flashinfer_trtllm"
    # 0.6.8 itself calls the per-tensor FP8 binding one argument short (flashinfer-ai/flashinfer#3094): 0.6.8.post1.
    good = random.Random(seed).choice(["0.6.3", "0.6.6", "0.6.8.post1", "0.6.12", "0.6.18"])
    assert eligible({**dep, "packages": {"flashinfer-python": good}}, "flashinfer_trtllm"), good
    for bad in ("0.6.2", "0.6.7", "0.6.7.post2"):
        assert codes({**dep, "packages": {"flashinfer-python": bad}}, "flashinfer_trtllm") == {"activation_unsupported"}, bad


def test_trtllm_relu2_per_format_versions():
    # FlashInfer PRs #2707 (MXFP8 ReLU2, v0.6.7) and #2864 (BF16 Relu2, v0.6.8); vLLM PR #43853.
    dep = {"gpu": "B200", "model": NEMOTRON, "runner": "flashinfer_trtllm"}
    for quant, first, before in (("mxfp8", "0.6.7", "0.6.6"), ("bf16", "0.6.8", "0.6.7")):
        ima = BF16_IMA if quant == "bf16" else set()
        assert codes({**dep, "quant": quant, "packages": {"flashinfer-python": first}}, "flashinfer_trtllm") == ima
        assert codes({**dep, "quant": quant, "packages": {"flashinfer-python": before}},
                     "flashinfer_trtllm") == {"activation_unsupported"} | ima
    assert eligible({**dep, "quant": "bf16", "packages": {"flashinfer-python": "0.6.18rc2"}}, "flashinfer_trtllm")


def test_trtllm_nvfp4_hidden_not_512_aligned():
    # vLLM PR #39510 dropped hidden_dim % 512 for the TRT-LLM-gen NVFP4 experts (pads to 256 instead).
    dep = {"gpu": "B200", "quant": "nvfp4", "model": {**QWEN, "hidden_size": 2880, "moe_intermediate_size": 2880},
           "runner": "flashinfer_trtllm"}
    assert eligible(dep, "flashinfer_trtllm")
    assert eligible(dep, "flashinfer_trtllm_routed")


def test_trtllm_nvfp4_relu2_reported_corruption_refused_for_vllm():
    # (reported) vllm-project/vllm#52308: NVFP4 relu2 (Nemotron-3-Nano, hidden 2688) corrupt on SM100 with
    # flashinfer 0.6.16.post3 in vLLM; flashinfer_cutlass correct on the same GPU.
    dep = {"gpu": "B200", "quant": "nvfp4", "engine": "vllm", "runner": "flashinfer_trtllm",
           "model": {**NEMOTRON, "num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856}}
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.16.post3"}}, "flashinfer_trtllm") == {"shape_unaligned"}
    # Issue 21 (field round 5): the earlier report flashinfer-ai/flashinfer#3168 (open, filed at 0.6.8/0.6.9) has the
    # same failure whenever the hidden size is not a multiple of 512 and vLLM pads it to 256: refused before 0.6.16 too.
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.15"}}, "flashinfer_trtllm") == {"shape_unaligned"}
    assert eligible({**dep, "model": {**dep["model"], "hidden_size": 3072}, "packages": {"flashinfer-python": "0.6.15"}},
                    "flashinfer_trtllm")
    assert eligible({**dep, "packages": {"flashinfer-python": "0.6.16.post3"}}, "flashinfer_cutlass")


def test_trtllm_llama4_only_with_per_tensor_fp8():
    # Only FlashInfer's Fp8PerTensorLauncher applies the routing scale on the expert input
    # (usePerTokenScalingGemm1); the other launchers apply it on the output.
    llama4 = {"num_experts": 128, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192,
              "activation": "silu", "routing": "llama4"}
    dep = {"gpu": "B200", "model": llama4, "tp": 8, "runner": "flashinfer_trtllm"}
    assert eligible({**dep, "quant": "fp8_tensor"}, "flashinfer_trtllm")
    # Issue 18 left the routing list open for the other launchers (no engine check refuses Llama4; vLLM's NVFP4 and
    # BF16 experts even list it). Issue 21 (field round 5) decided bf16: the BF16 launcher puts the weight on the
    # output (a negative routing fact), so bf16 Llama4 is refused; NVFP4 stays open.
    assert codes({**dep, "quant": "bf16"}, "flashinfer_trtllm") == {"routing_unsupported"}
    assert unverified({**dep, "quant": "nvfp4"}, "flashinfer_trtllm") == {"routing_unsupported"}


def test_trtllm_softmax_topk_from_0_6_8_and_capped():
    # FlashInfer v0.6.7 runner.cu: Default routing "Unimplemented"; PR #2803 (v0.6.8) implements it with
    # tiers up to 256 experts and top_k 8 (RoutingCustomPolicy.cuh PolicyTraits<Softmax, NoOp>).
    model = {**QWEN, "routing": "softmax_topk"}
    dep = {"gpu": "B200", "quant": "bf16", "model": model, "runner": "flashinfer_trtllm"}
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.7"}}, "flashinfer_trtllm") == {"routing_unsupported"} | BF16_IMA
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.8"}}, "flashinfer_trtllm") == BF16_IMA
    assert eligible({**dep, "packages": {"flashinfer-python": "0.6.18"}}, "flashinfer_trtllm")
    assert codes({**dep, "model": {**model, "num_experts": 512}}, "flashinfer_trtllm") == {"shape_unaligned"}


def test_trtllm_renormalize_top_k_cap_by_version():
    # FlashInfer v0.6.4 routing_renormalize.cu: top_k <= 10, <= 512 experts; PR #2744 (v0.6.7): 2048, 32.
    dep = {"gpu": "B200", "quant": "bf16", "model": {**QWEN, "top_k": 16}, "runner": "flashinfer_trtllm"}
    # Before 0.6.7 renormalize routing is also refused: it picked wrong experts with all-negative logits
    # (vllm-project/vllm#37591, #38859; backends/flashinfer_trtllm.yaml's routing gate).
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.6"}}, "flashinfer_trtllm") == {"shape_unaligned",
                                                                                               "routing_unsupported"} | BF16_IMA
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.7"}}, "flashinfer_trtllm") == BF16_IMA
    assert codes({**dep, "quant": "nvfp4", "packages": {"flashinfer-python": "0.6.7"}}, "flashinfer_trtllm") == set()


def test_trtllm_deepseek_grouped_limits():
    # FlashInfer routing_deepseek.cu runImpl: at most 4 selected groups, 8 groups, 512 experts, top_k <= 8
    # with at most 384 experts; experts split evenly over the groups.
    dep = {"gpu": "B200", "quant": "fp8_block", "model": DSV3, "tp": 8, "ep": 8, "runner": "flashinfer_trtllm"}
    assert eligible(dep, "flashinfer_trtllm")
    assert codes({**dep, "model": {**DSV3, "topk_group": 5}}, "flashinfer_trtllm") == {"shape_unaligned"}
    assert codes({**dep, "model": {**DSV3, "top_k": 9}}, "flashinfer_trtllm") == {"shape_unaligned"}


def test_trtllm_mxfp4_on_sm103_for_vllm():
    # vLLM TrtLlmMxfp4ExpertsBase: family 100 (sm100 and sm103), W4A16 and W4A8; the old "no bf16
    # activations on sm103" exclusion had no source. SGLang serves MXFP4 with flashinfer_mxfp4 instead.
    dep = {"gpu": "B300", "quant": "mxfp4", "model": {**QWEN, "activation": "swiglu_oai"}, "runner": "flashinfer_trtllm"}
    assert eligible({**dep, "engine": "vllm"}, "flashinfer_trtllm")
    # SGLang's allow-list reads the quantization name (mxfp4 for gpt-oss's Mxfp4Config checkpoints): the refusal
    # holds for the gpt-oss architecture (tests/test_facts_loose_ends.py: DeepSeek-V4 stays undecided).
    gpt_oss = {**dep, "model": {**dep["model"], "architecture": "GptOssForCausalLM"}}
    assert codes({**gpt_oss, "engine": "sglang"}, "flashinfer_trtllm") == {"quant_unsupported"}


def test_trtllm_a2a_per_engine():
    # SGLang moe_hook.handle_a2a_moe allows flashinfer_trtllm with its FlashInfer a2a; vLLM's monolithic
    # TRT-LLM experts allow no all-to-all kernel (TrtLlmFp8ExpertsBase._supports_parallel_config).
    dep = {"gpu": "B200", "quant": "nvfp4", "model": QWEN, "tp": 8, "ep": 8, "dp": 8, "a2a": "flashinfer",
           "runner": "flashinfer_trtllm"}
    assert eligible({**dep, "engine": "sglang"}, "flashinfer_trtllm")
    assert codes({**dep, "engine": "vllm"}, "flashinfer_trtllm") == {"a2a_unsupported"}


# -------------------------------------------------------------------------- flashinfer_trtllm_routed
def test_routed_entry_points_by_version():
    # FlashInfer PRs #2379 (routed block FP8, v0.6.3), #2505 (MxFp8, v0.6.4), #2594 (bf16 routed, v0.6.5).
    dep = {"gpu": "B200", "model": QWEN, "engine": "sglang", "runner": "flashinfer_trtllm_routed"}
    for quant, first, before in (("fp8_block", "0.6.3", "0.6.2"), ("mxfp8", "0.6.4", "0.6.3"), ("bf16", "0.6.5", "0.6.4")):
        ima = BF16_IMA if quant == "bf16" else set()
        assert codes({**dep, "quant": quant, "packages": {"flashinfer-python": first}}, "flashinfer_trtllm_routed") == ima
        assert codes({**dep, "quant": quant, "packages": {"flashinfer-python": before}},
                     "flashinfer_trtllm_routed") == {"quant_unsupported"} | ima


def test_routed_relu2_bf16():
    # FlashInfer PR #2864 (v0.6.8); vLLM TrtLlmBf16ExpertsBase supports RELU2_NO_MUL.
    dep = {"gpu": "B200", "quant": "bf16", "model": NEMOTRON, "engine": "sglang", "runner": "flashinfer_trtllm_routed"}
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.8"}}, "flashinfer_trtllm_routed") == BF16_IMA
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.7"}},
                 "flashinfer_trtllm_routed") == {"activation_unsupported"} | BF16_IMA
    assert eligible({**dep, "packages": {"flashinfer-python": "0.6.18rc2"}}, "flashinfer_trtllm_routed")


def test_routed_vllm_a2a_per_class():
    # vLLM TrtLlmNvFp4ExpertsModular takes every parallel config; TrtLlmBf16ExpertsModular needs an
    # all-to-all kernel (not allgather-reducescatter, not DeepEP high-throughput); TrtLlmFp8ExpertsModular
    # takes allgather-reducescatter and the FlashInfer NVLink a2a.
    dep = {"gpu": "B200", "model": QWEN, "tp": 8, "ep": 8, "engine": "vllm", "runner": "flashinfer_trtllm_routed"}
    deepep = {"a2a": "deepep", "a2a_mode": "normal", "cuda_graph": False}
    assert eligible({**dep, **deepep, "quant": "nvfp4"}, "flashinfer_trtllm_routed")
    # Issue 18: the vLLM a2a facts are per class and list fewer backends than vLLM's checks take (nvfp4 takes every
    # config), so the list is open for vLLM: these pairings are unverified, not refused.
    assert unverified({**dep, **deepep, "quant": "fp8_block"}, "flashinfer_trtllm_routed") == {"a2a_unsupported"}
    assert unverified({**dep, "quant": "bf16", "a2a": "none"}, "flashinfer_trtllm_routed") == {"a2a_unsupported"}
    assert eligible({**dep, "quant": "bf16", "a2a": "flashinfer"}, "flashinfer_trtllm_routed")


# --------------------------------------------------------------------------------- flashinfer_mxfp4
def test_mxfp4_composite_is_sglangs(seed):
    # SGLang registers ('none', 'flashinfer_mxfp4') in moe_runner/flashinfer_cutlass.py; vLLM has no such
    # runner. sm90 needs FlashInfer #3084's SM90 mixed-input helpers (v0.6.10, SGLang PR #24816).
    gpt_oss = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize"}
    dep = {"gpu": "H200", "quant": "mxfp4", "model": gpt_oss, "runner": "flashinfer_mxfp4"}
    # vLLM's --moe-backend values are its MoEBackend literal, which has no flashinfer_mxfp4: refused for the engine
    # (field round 26's checker; it was unverified there before).
    assert "engine_unsupported" in codes({**dep, "engine": "vllm"}, "flashinfer_mxfp4")
    # flashinfer-ai/flashinfer#5438 (field round 8): the releases with #3084 but without #3738 write wrong tiles on sm90.
    ok = random.Random(seed).choice(["0.6.16", "0.6.16.post2", "0.6.18"])
    assert eligible({**dep, "engine": "sglang", "packages": {"flashinfer-python": ok}}, "flashinfer_mxfp4")
    bad = random.Random(seed).choice(["0.6.10", "0.6.12", "0.6.15.post1", "0.6.16.post3", "0.6.17"])
    assert not eligible({**dep, "engine": "sglang", "packages": {"flashinfer-python": bad}}, "flashinfer_mxfp4")
    assert codes({**dep, "engine": "sglang", "packages": {"flashinfer-python": "0.6.9"}}, "flashinfer_mxfp4") == {"quant_unsupported"}
    # sgl-project/sglang#32668: sm120 (is_sm120_supported), not sm121.
    assert eligible({**dep, "gpu": "RTX PRO 6000", "engine": "sglang"}, "flashinfer_mxfp4")
    # Issue 18: SGLang's per-arch dispatch was not read as a check that refuses sm121: unverified, not refused.
    # (gpt-oss named: an unstated architecture could be DeepSeek-V4's, whose FP4 experts take SGLang's CUTLASS MXFP4
    # method on SM12x with its 128 alignment, backends/flashinfer_mxfp4.yaml constraints: another unknown)
    named = {**dep, "model": {**gpt_oss, "architecture": "GptOssForCausalLM"}}
    assert unverified({**named, "gpu": "GB10", "engine": "sglang"}, "flashinfer_mxfp4") == {"arch_unsupported"}
    assert unverified({**dep, "gpu": "GB10", "engine": "sglang"}, "flashinfer_mxfp4") == {"arch_unsupported", "shape_unaligned"}


# -------------------------------------------------------------------------------- flashinfer_cutedsl
def test_cutedsl_deepep_normal_refused_by_sglang_only():
    # SGLang moe_hook: flashinfer_cutedsl has no DeepEP normal handler (ValueError); vLLM's
    # FlashInferCuteDSLExperts takes any parallel config in the standard format.
    dep = {"gpu": "B200", "quant": "nvfp4", "model": DSV3, "tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": "normal",
           "cuda_graph": False, "runner": "flashinfer_cutedsl"}
    assert codes({**dep, "engine": "sglang"}, "flashinfer_cutedsl") == {"a2a_unsupported"}
    assert eligible({**dep, "engine": "vllm"}, "flashinfer_cutedsl")
    assert eligible({**dep, "engine": "sglang", "a2a_mode": "low_latency", "cuda_graph": True, "max_tokens_per_rank": 256,
                     "a2a_capacity": 256}, "flashinfer_cutedsl")  # DeepEP's buffer raised to the 256 tokens (issue 23)


def test_cutedsl_needs_0_6_4():
    # FlashInfer PR #2398 (CuteDslMoEWrapper, v0.6.4).
    dep = {"gpu": "B200", "quant": "nvfp4", "model": QWEN, "engine": "vllm", "runner": "flashinfer_cutedsl"}
    assert codes({**dep, "packages": {"flashinfer-python": "0.6.3"}}, "flashinfer_cutedsl") == {"dependency_missing"}
    # with the nvidia-cutlass-dsl 0.6.4 .. 0.6.6 work with (the engine release's own pin, 4.8.0 for vLLM 0.34.0, is refused
    # by the package interaction of field round 12)
    assert eligible({**dep, "packages": {"flashinfer-python": "0.6.4", "nvidia-cutlass-dsl": "4.3.1"}}, "flashinfer_cutedsl")


# ---------------------------------------------------------------------------------- a2a flashinfer
def test_flashinfer_a2a_layout_rules_are_sglangs():
    # SGLang overrides._a2a_ep_size (ep = tp) and moe_hook.handle_a2a_moe (dp-attention with dp == tp);
    # vLLM's EP group spans TP x DP, with no such rule.
    dep = {"gpu": "B200", "quant": "nvfp4", "model": QWEN, "tp": 8, "ep": 8, "a2a": "flashinfer",
           "runner": "flashinfer_cutlass"}
    assert codes({**dep, "engine": "sglang", "dp": 1}, "flashinfer_cutlass") == {"parallelism_unsupported"}
    assert eligible({**dep, "engine": "sglang", "dp": 8}, "flashinfer_cutlass")
    assert eligible({**dep, "engine": "vllm", "dp": 2}, "flashinfer_cutlass")
    assert "parallelism_unsupported" in codes({**dep, "ep": 1, "engine": "vllm"}, "flashinfer_cutlass")


@pytest.mark.parametrize("gpu", ["RTX PRO 6000", "A100"])
def test_flashinfer_a2a_needs_nvlink_datacenter_parts(gpu):
    # flashinfer/comm/mnnvl.py MnnvlMemory.supports_mnnvl: every GPU pair on NVLink (or MNNVL fabric).
    dep = {"gpu": gpu, "quant": "bf16", "model": QWEN, "tp": 4, "ep": 4, "dp": 4, "a2a": "flashinfer",
           "runner": "flashinfer_cutlass"}
    # Issue 18: a2a flashinfer's arch list names the NVLink parts verified, no check refuses other GPUs (open):
    # elsewhere the pairing is unverified, never a refusal sourced from that list.
    report, _ = candidate(dep, "flashinfer_cutlass")
    assert not any(x.source.startswith("backends/a2a/flashinfer.yaml:") for c in report.candidates for x in c.reasons)
    assert any(x.code == "a2a_unsupported" and x.source.startswith("backends/a2a/flashinfer.yaml:")
               for c in report.candidates for x in c.unknowns)


def test_trtllm_block_fp8_keeps_deepseek_top_k_caps_without_groups():
    # flashinfer-ai/flashinfer@v0.6.8 csrc/trtllm_fused_moe_kernel_launcher.cu Fp8BlockScaleLauncher::check_routing:
    # DeepSeekV3 routing top_k <= 8 (<= 384 experts) or 22, whatever n_group is; the custom routing tiers
    # (top_k <= 32 with n_group <= 1, RoutingCustomPolicy.cuh) serve the other launchers.
    # Read at 0.6.18rc1 (the check is unchanged there): field round 19 refuses n_group <= 1 DeepSeekV3 routing on
    # 0.6.8rc1 .. 0.6.17 (flashinfer-ai/flashinfer#3875, zero weights), which would add routing_unsupported at 0.6.8.
    model = {"num_experts": 256, "top_k": 16, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
             "routing": "deepseek_v3", "n_group": 1, "topk_group": 1}
    dep = {"gpu": "B200", "model": model, "tp": 8, "runner": "flashinfer_trtllm",
           "packages": {"flashinfer-python": "0.6.18rc1"}}
    assert codes({**dep, "quant": "fp8_block"}, "flashinfer_trtllm") == {"shape_unaligned"}
    assert eligible({**dep, "quant": "nvfp4"}, "flashinfer_trtllm")
    assert eligible({**dep, "quant": "fp8_block", "model": {**model, "top_k": 8}}, "flashinfer_trtllm")


def test_bf16_trtllm_gen_needs_the_padded_intermediates_of_0_6_18rc2():
    """flashinfer-ai/flashinfer#3427 / #4319: the BF16 launcher (both entry points) allocated only the logical
    intermediates while the BMM's TMA loads address 128 KiB (an intermittent illegal memory access at small batches);
    padded from v0.6.18rc2. Other formats were padded already: they are not refused by it."""
    for runner, engine in (("flashinfer_trtllm", "vllm"), ("flashinfer_trtllm", "sglang"),
                           ("flashinfer_trtllm_routed", "sglang")):
        dep = {"gpu": "B200", "quant": "bf16", "model": QWEN, "engine": engine, "runner": runner}
        for bad in ("0.6.11", "0.6.11.post1", "0.6.17", "0.6.18rc1", "0.6.18.dev20260807"):
            c = candidate({**dep, "packages": {"flashinfer-python": bad}}, runner)[1]
            assert {r.code for r in c.reasons} == BF16_IMA, (runner, engine, bad)
            assert any("0.6.18rc2" in r.detail for r in c.reasons), [r.detail for r in c.reasons]
        for good in ("0.6.18rc2", "0.6.18rc7", "0.6.18", "0.7.0"):
            assert eligible({**dep, "packages": {"flashinfer-python": good}}, runner), (runner, engine, good)
    fp8 = {"gpu": "B200", "quant": "fp8_block", "model": QWEN, "engine": "sglang", "runner": "flashinfer_trtllm"}
    assert eligible({**fp8, "packages": {"flashinfer-python": "0.6.17"}}, "flashinfer_trtllm")

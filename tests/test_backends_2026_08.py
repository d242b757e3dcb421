"""Issue 21 (fifth bullet): the MoE backends and all-to-alls the engines added since 2026-08, each with a deployment it
plans and one it refuses, citing the upstream source of the fact. Planning only (no GPU): moe_select.explain on declared
machines, and the launch-line reader/writer for the engines' spellings (backends/engines/names.yaml).

Runners (backends/<name>.yaml): vLLM ``flashinfer_b12x``, ``b12x``, ``triton_unfused``, ``deep_gemm_mega_moe``; vLLM and
SGLang ``humming``; SGLang ``hpc_ops`` (vLLM ``hpc``) and ``experimental_sgl_marlin``. All-to-alls: vLLM's MoRI names
(``mori_high_throughput`` / ``mori_low_latency``, backends/a2a/mori.yaml), FlashInfer's two-sided NVLink all-to-all
(backends/a2a/flashinfer_two_sided.yaml; the one-sided one is backends/a2a/flashinfer.yaml) and ``nixl_ep``
(backends/a2a/nixl.yaml), whose dispatchers import the module ``nixl_ep``, not ``nixl``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.engine_tables import names
from moe_select.errors import InputError
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command
from report_helpers import cand, refusals

#: A local model folder for launch lines (the launch-line reader needs a config; the MoE facts tested here are the a2a's).
DSV3_DIR = str(Path(__file__).resolve().parents[1] / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3")
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
             "activation": "silu", "routing": "renormalize"}
GPT_OSS_20B = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize"}
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
        "activation": "silu", "routing": "deepseek_v3", "n_group": 8, "topk_group": 4}


def explain(**dep):
    return moe_select.explain(dep)


def argv(emitted):
    """An emitted launch's command as one string."""
    return " ".join(emitted.argv)


def planned(report, runner):
    """The deployment plans ``runner`` with every part supported by a cited fact."""
    assert report.status == "ok", [(r.code, r.detail) for r in report.reasons]
    assert report.plan.runner == runner and report.evidence == "supported", (report.plan.runner, report.evidence)
    return report.plan


def refused(report, runner, code, file):
    """``runner`` is refused with ``code``, by a fact of ``file`` (backends/...yaml:line)."""
    assert report.status != "ok" or report.plan.runner != runner
    got = refusals(report, runner)
    assert code in got, got
    assert got[code].startswith(file + ":"), got[code]


# --------------------------------------------------------------- vLLM flashinfer_b12x: FlashInfer's SM12x b12x fused MoE
def test_flashinfer_b12x_plans_nvfp4_on_dgx_spark():
    # vllm-project/vllm@c18000d95dc9 experts/flashinfer_b12x_moe.py: FlashInferB12xExperts (is_device_capability_family(120),
    # kNvfp4Static with kNvfp4Dynamic or None; the kernel quantizes the bf16 input to FP4 itself).
    # dp stated: vLLM >= 0.25's b12x refuses dp > 1 (vllm-project/vllm#47982), so an unstated dp is an unknown.
    p = planned(explain(gpu="GB10", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, dp=1, runner="flashinfer_b12x"),
                "flashinfer_b12x")
    assert p.activation_precision == "nvfp4"


def test_flashinfer_b12x_refuses_datacenter_blackwell_expert_parallelism_and_cuda_12():
    # _supports_current_device: compute capability 12.x only (exhaustive archs).
    refused(explain(gpu="B200", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, runner="flashinfer_b12x"),
            "flashinfer_b12x", "arch_unsupported", "backends/flashinfer_b12x.yaml")
    # flashinfer-ai/flashinfer@v0.6.18rc7 b12x_moe.py b12x_fused_moe: NotImplementedError for num_local_experts !=
    # num_experts (flashinfer-ai/flashinfer#3302).
    refused(explain(gpu="RTX PRO 6000", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=2, ep=2, runner="flashinfer_b12x"),
            "flashinfer_b12x", "parallelism_unsupported", "backends/flashinfer_b12x.yaml")
    # b12x_fused_moe raises "b12x fused MoE requires CUDA 13 or later".
    refused(explain(gpu="GB10", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, nvcc="12.9", runner="flashinfer_b12x"),
            "flashinfer_b12x", "toolchain_unsupported", "backends/flashinfer_b12x.yaml")


def test_flashinfer_b12x_is_not_chosen_by_auto():
    # vLLM's NVFP4 oracle leaves FLASHINFER_B12X out of its automatic list (vllm-project/vllm#31085): no rule prefers it.
    r = explain(gpu="GB10", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1)
    assert r.status == "ok" and r.plan.runner not in ("flashinfer_b12x", "b12x")


# --------------------------------------------------------------- vLLM b12x: the b12x package's own FP4 MoE
def test_b12x_plans_nvfp4_and_mxfp4_with_the_default_activation_precisions():
    # vllm-project/vllm#52018; vllm-project/vllm@d70bf883e72c fused_moe/b12x.py B12xExperts: NVFP4 keeps the checkpoint's
    # activation format, MXFP4 takes MXFP8 activations where the A8 path takes the layer (SiLU, hidden % 256) ...
    nv = planned(explain(gpu="RTX PRO 6000", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, runner="b12x"), "b12x")
    assert nv.activation_precision == "nvfp4"
    mx = planned(explain(gpu="GB10", engine="vllm", quant="mxfp4", model=QWEN3_30B, tp=1, runner="b12x"), "b12x")
    assert mx.activation_precision == "mxfp8"
    # ... and bf16 otherwise (gpt-oss: SwiGLU-OAI, hidden 2880 is no multiple of 256).
    oss = planned(explain(gpu="GB10", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=1, runner="b12x"), "b12x")
    assert oss.activation_precision == "bf16"


def test_b12x_refuses_other_formats_hopper_and_expert_parallelism():
    # B12xExperts.__init__: "b12x MoE requires MXFP4 or NVFP4 weights".
    refused(explain(gpu="RTX PRO 6000", engine="vllm", quant="fp8_block", model=QWEN3_30B, tp=1, runner="b12x"),
            "b12x", "quant_unsupported", "backends/b12x.yaml")
    # _supports_current_device: is_device_capability_family(120).
    refused(explain(gpu="H100", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=1, runner="b12x"),
            "b12x", "arch_unsupported", "backends/b12x.yaml")
    # _supports_parallel_config: not use_ep, ep_size == 1, no all-to-all kernels.
    refused(explain(gpu="RTX PRO 6000", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=2, ep=2, runner="b12x"),
            "b12x", "parallelism_unsupported", "backends/b12x.yaml")


def test_b12x_archs_are_sm12x_under_sglang_too():
    # SGLang's b12x path (sgl-project/sglang@5de65dff10a7 quantization/mxfp4_b12x_moe.py Mxfp4B12xMoEMethod.__init__)
    # raises "requires SM120 or SM121" unless is_sm120_supported(): the archs list is exhaustive there as under vLLM,
    # so b12x on an MI300X or an H100 under SGLang is refused, not left unverified.
    for gpu, quant in (("MI300X", "mxfp8"), ("H100", "mxfp4")):
        r = explain(gpu=gpu, engine="sglang", quant=quant, model=QWEN3_30B, tp=1)
        refused(r, "b12x", "arch_unsupported", "backends/b12x.yaml")
        assert "arch_unsupported" not in {u.code for u in cand(r, "b12x").unknowns}, gpu


def test_b12x_refuses_gelu_and_mxfp4_intermediate_not_a_multiple_of_32():
    refused(explain(gpu="GB10", engine="vllm", quant="nvfp4", model={**QWEN3_30B, "activation": "gelu"}, tp=1,
                    runner="b12x"), "b12x", "activation_unsupported", "backends/b12x.yaml")
    # is_supported_config: "MXFP4 requires the per-rank intermediate size to be divisible by 32" (768 / 8 = 96 passes,
    # 2880 / 8 = 360 does not).
    refused(explain(gpu="GB10", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=8, runner="b12x"),
            "b12x", "shape_unaligned", "backends/b12x.yaml")


# --------------------------------------------------------------- humming: vLLM and SGLang
def test_humming_plans_mxfp4_on_hopper_under_vllm_and_int4_under_sglang():
    # vllm-project/vllm#41083, #43373 (gpt-oss-20b, moe_backend=humming): W4A16 MXFP4. Eager (cuda_graph: false): capture
    # is not read, so with CUDA graphs on the plan is unverified.
    v = planned(explain(gpu="H100", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=2, cuda_graph=False,
                        runner="humming"), "humming")
    assert v.activation_precision == "bf16"
    # sgl-project/sglang#23754: Kimi-K2.6 (int4, group 32) on 8 x H20.
    # (Kimi's int4 checkpoints are compressed-tensors: stated, since SGLang's GPTQ layout fails at moe_tp > 1)
    planned(explain(gpu="H20", engine="sglang", quant="int4_w4a16", model=QWEN3_30B, tp=8, cuda_graph=False,
                    quant_config={"group_size": 32, "layout": "compressed-tensors"}, runner="humming"), "humming")
    graphs = explain(gpu="H100", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=2, runner="humming")
    assert graphs.evidence == "unverified" and "cuda_graph_unsupported" in {u.code for u in cand(graphs, "humming").unknowns}


def test_humming_refuses_rocm_and_pre_turing_under_vllm_and_swiglu_oai_under_sglang():
    # vllm-project/vllm@135ed35257a2 fused_humming_moe.py HummingExpertsBase._supports_current_device: CUDA, cc >= 7.5.
    for gpu in ("MI300X", "V100"):
        refused(explain(gpu=gpu, engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=2, runner="humming"),
                "humming", "arch_unsupported", "backends/humming.yaml")
    # sgl-project/sglang@e3ca3af5fed2 moe_runner/humming.py HummingRunnerCore.apply_activation: silu or gelu, else ValueError.
    refused(explain(gpu="H20", engine="sglang", quant="mxfp4", model=GPT_OSS_20B, tp=8, runner="humming"),
            "humming", "activation_unsupported", "backends/humming.yaml")


def test_humming_takes_flashinfer_nvlink_all_to_alls_under_vllm_from_0_25():
    # HummingExpertsBase._supports_parallel_config refuses use_fi_nvl_one_sided_kernels / use_fi_nvl_two_sided_kernels in
    # 0.20.0 .. 0.24.0, but no path consults it there (0.21.0 .. 0.24.0's is_supported_config override skips the base
    # check): unverified, not refused. From 0.25.0 it returns True and the override calls the base check: supported.
    for a2a in ("flashinfer", "flashinfer_two_sided"):
        dep = dict(gpu="H200", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=1, dp=8, ep=8, a2a=a2a,
                   cuda_graph=False, runner="humming")
        planned(explain(**dep, engine_version="0.25.0"), "humming")
        old = explain(**dep, engine_version="0.24.0")
        assert old.status == "ok" and old.plan.runner == "humming" and old.evidence == "unverified"
        assert not refusals(old, "humming")
        assert "a2a_unsupported" in {u.code for u in cand(old, "humming").unknowns}


# --------------------------------------------------------------- SGLang hpc_ops (HPC-Ops)
def test_hpc_ops_plans_block_fp8_on_h20():
    # sgl-project/sglang#30541 and @37de76f425fb moe_runner/hpc_ops.py: blockwise FP8 (128x128 weights, per-token-group-128
    # activations) through hpc.fuse_moe_blockwise_fp8.
    p = planned(explain(gpu="H20", engine="sglang", quant="fp8_block", model=QWEN3_30B, tp=1, runner="hpc_ops"), "hpc_ops")
    assert p.activation_precision == "fp8_group"


def test_hpc_ops_refuses_gelu_and_other_fp8_blocks():
    # HpcOpsRunnerCore.__init__: assert activation == "silu".
    refused(explain(gpu="H20", engine="sglang", quant="fp8_block", model={**QWEN3_30B, "activation": "gelu"}, tp=1,
                    runner="hpc_ops"), "hpc_ops", "activation_unsupported", "backends/hpc_ops.yaml")
    refused(explain(gpu="H20", engine="sglang", quant="fp8_block", quant_config={"block": [128, 64]}, model=QWEN3_30B,
                    tp=1, runner="hpc_ops"), "hpc_ops", "shape_unaligned", "backends/hpc_ops.yaml")


# --------------------------------------------------------------- SGLang experimental_sgl_marlin
def test_experimental_sgl_marlin_plans_nvfp4_weight_only():
    # sgl-project/sglang@fe7074c9276d lora/marlin_lora_temp/policy.py: without LoRA the stock Marlin fused path runs.
    p = planned(explain(gpu="H100", engine="sglang", quant="nvfp4", model=QWEN3_30B, tp=2, runner="experimental_sgl_marlin"),
                "experimental_sgl_marlin")
    assert p.activation_precision == "bf16"


def test_experimental_sgl_marlin_refuses_an_all_to_all_and_other_engines():
    # validate_experimental_sgl_marlin_server_args: "experimental_sgl_marlin EP requires --moe-a2a-backend none".
    refused(explain(gpu="H100", engine="sglang", quant="nvfp4", model=DSV3, tp=8, ep=8, a2a="deepep",
                    a2a_capacity=1024, runner="experimental_sgl_marlin"),
            "experimental_sgl_marlin", "a2a_unsupported", "backends/experimental_sgl_marlin.yaml")
    # vLLM's MoEBackend literal has no experimental_sgl_marlin (vllm-project/vllm@00634b8acf93 config/kernel.py).
    refused(explain(gpu="H100", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=2, runner="experimental_sgl_marlin"),
            "experimental_sgl_marlin", "engine_unsupported", "backends/experimental_sgl_marlin.yaml")


# --------------------------------------------------------------- vLLM triton_unfused
def test_triton_unfused_plans_gpt_oss_on_hopper():
    # vllm-project/vllm@5dc2bf89818b gpt_oss_triton_kernels_moe.py UnfusedOAITritonExperts: (kMxfp4Static, None), the OAI
    # Triton device gate (9, 0) <= cc < (11, 0).
    p = planned(explain(gpu="H100", engine="vllm", quant="mxfp4", model=GPT_OSS_20B, tp=1, cuda_graph=False,
                        runner="triton_unfused"), "triton_unfused")
    assert p.activation_precision == "bf16"


def test_triton_unfused_refuses_sm120_and_other_formats():
    # Written for vLLM 0.29.0 (the release then assumed): the device gate is (9, 0) <= cc < (11, 0) up to 0.31.0.
    refused(explain(gpu="RTX 5090", engine="vllm", engine_version="0.29.0", quant="mxfp4", model=GPT_OSS_20B, tp=1,
                    runner="triton_unfused"),
            "triton_unfused", "quant_unsupported", "backends/triton_unfused.yaml")
    # From 0.32.0 the gate is cc < (13, 0) (vllm-0.32.0 experts/gpt_oss_triton_kernels_moe.py:
    # _triton_kernel_moe_supports_current_device; UnfusedOAITritonExperts.apply pins block_m on SM12x): sm120 is planned.
    p = planned(explain(gpu="RTX 5090", engine="vllm", engine_version="0.32.0", quant="mxfp4", model=GPT_OSS_20B, tp=1,
                        cuda_graph=False, runner="triton_unfused"), "triton_unfused")
    assert p.activation_precision == "bf16"
    refused(explain(gpu="H100", engine="vllm", quant="fp8_block", model=QWEN3_30B, tp=1, runner="triton_unfused"),
            "triton_unfused", "quant_unsupported", "backends/triton_unfused.yaml")


# --------------------------------------------------------------- vLLM deep_gemm_mega_moe
def test_deep_gemm_mega_moe_plans_mxfp4_on_b200():
    # vllm-project/vllm@13f9685bbf1e experts/deep_gemm_mega_moe.py: MXFP4 weights, activations cast to FP8 with UE8M0
    # scales per 32 inside apply; deepseek-ai/DeepGEMM@54e22612409371 mega.hpp fp8_fp4_mega_moe (arch_major == 10).
    p = planned(explain(gpu="B200", engine="vllm", quant="mxfp4", model=QWEN3_30B, tp=1, dp=8, ep=8, cuda_graph=False,
                        runner="deep_gemm_mega_moe"), "deep_gemm_mega_moe")
    assert p.activation_precision == "mxfp8"


def test_deep_gemm_mega_moe_refuses_hopper_fp8_and_an_external_all_to_all():
    refused(explain(gpu="H100", engine="vllm", quant="mxfp4", model=QWEN3_30B, tp=1, dp=8, ep=8,
                    runner="deep_gemm_mega_moe"), "deep_gemm_mega_moe", "arch_unsupported", "backends/deep_gemm_mega_moe.yaml")
    # Written for vLLM 0.29.0 (the release then assumed): MXFP4 only, block FP8 refused for any model.
    refused(explain(gpu="B200", engine="vllm", engine_version="0.29.0", quant="fp8_block", model=QWEN3_30B, tp=1, dp=8,
                    ep=8, runner="deep_gemm_mega_moe"),
            "deep_gemm_mega_moe", "quant_unsupported", "backends/deep_gemm_mega_moe.yaml")
    # From 0.34.0 GLM-5-Next wires its block-FP8 checkpoint to the Mega MoE (requantized to MXFP8:
    # vllm-0.34.0 vllm/models/glm5next/nvidia/mega_moe.py:Glm5NextMegaMoEExperts, MEGA_MOE_MXFP8): block FP8 is planned
    # for that architecture, still refused for a model that wires MXFP4 (DeepSeek-V4), and undecided (no architecture).
    glm = dict(QWEN3_30B, architecture="Glm5NextForCausalLM")
    r = explain(gpu="B200", engine="vllm", engine_version="0.34.0", quant="fp8_block", model=glm, tp=1, dp=8, ep=8,
                runner="deep_gemm_mega_moe")
    assert r.status == "ok" and r.plan.runner == "deep_gemm_mega_moe"
    assert "quant_unsupported" not in [u.code for u in r.plan.unknowns]
    refused(explain(gpu="B200", engine="vllm", engine_version="0.34.0", quant="fp8_block",
                    model=dict(QWEN3_30B, architecture="DeepseekV4ForCausalLM"), tp=1, dp=8, ep=8,
                    runner="deep_gemm_mega_moe"),
            "deep_gemm_mega_moe", "quant_unsupported", "backends/deep_gemm_mega_moe.yaml")
    r = explain(gpu="B200", engine="vllm", engine_version="0.34.0", quant="fp8_block", model=QWEN3_30B, tp=1, dp=8, ep=8,
                runner="deep_gemm_mega_moe")
    assert r.evidence == "unverified" and "quant_unsupported" in [u.code for u in r.plan.unknowns]
    # _supports_parallel_config refuses DeepEP, MoRI, NIXL-EP and FlashInfer's NVLink all-to-alls.
    refused(explain(gpu="B200", engine="vllm", quant="mxfp4", model=QWEN3_30B, tp=1, dp=8, ep=8, a2a="deepep",
                    runner="deep_gemm_mega_moe"), "deep_gemm_mega_moe", "a2a_unsupported", "backends/deep_gemm_mega_moe.yaml")


# --------------------------------------------------------------- engine names (backends/engines/names.yaml)
@pytest.mark.parametrize("ours,engine,theirs", [
    ("flashinfer_b12x", "vllm", "flashinfer_b12x"), ("b12x", "vllm", "b12x"), ("humming", "vllm", "humming"),
    ("humming", "sglang", "humming"), ("triton_unfused", "vllm", "triton_unfused"),
    ("deep_gemm_mega_moe", "vllm", "deep_gemm_mega_moe"), ("hpc_ops", "sglang", "hpc_ops"), ("hpc_ops", "vllm", "hpc"),
    ("experimental_sgl_marlin", "sglang", "experimental_sgl_marlin"),
])
def test_runner_names_map_both_ways(ours, engine, theirs):
    t = names()
    assert t.runner_for(engine, ours) == (True, theirs)
    assert t.runner_from(engine, theirs) == ours


# --------------------------------------------------------------- vLLM MoRI names: mori_high_throughput / mori_low_latency
MORI = dict(gpu="MI300X", engine="vllm", quant="fp8_block", model=DSV3, tp=8, dp=8, ep=8, a2a="mori")


def test_vllm_mori_low_latency_launch_reads_as_mori_low_latency():
    # SemiAnalysisAI/InferenceX#1762: "--all2all-backend mori" became "--all2all-backend mori_low_latency" (vLLM decode).
    line = ("vllm serve " + DSV3_DIR + " --tensor-parallel-size 8 --enable-expert-parallel --all2all-backend mori_low_latency "
            "--no-enable-prefix-caching")
    d = from_command(line, {}).deployment
    assert (d["a2a"], d["a2a_mode"]) == ("mori", "low_latency")
    d = from_command(line.replace("mori_low_latency", "mori_high_throughput"), {}).deployment
    assert (d["a2a"], d["a2a_mode"]) == ("mori", "normal")


def test_vllm_mori_plan_emits_the_mode_name_and_is_refused_without_expert_parallelism():
    r = explain(**MORI, a2a_mode="low_latency")
    assert r.status == "ok" and r.plan.a2a == "mori", [(x.code, x.detail) for x in r.reasons]
    assert "--all2all-backend mori_low_latency" in argv(emit(r.plan, "vllm", model="M"))
    normal = explain(**MORI, a2a_mode="normal")
    assert "--all2all-backend mori_high_throughput" in argv(emit(normal.plan, "vllm", model="M"))
    # backends/a2a/mori.yaml: an all-to-all dispatches between expert-parallel ranks (ep >= 2).
    one = explain(**{**MORI, "dp": None, "ep": 1, "tp": 1})
    assert one.status != "ok"
    assert any(x.code == "parallelism_unsupported" and x.source.startswith("backends/a2a/mori.yaml:") for x in one.reasons)


# --------------------------------------------------------------- FlashInfer two-sided NVLink all-to-all (vLLM)
TWO_SIDED = dict(gpu="B200", engine="vllm", quant="nvfp4", model=QWEN3_30B, tp=8, dp=8, ep=8, a2a="flashinfer_two_sided")


def test_flashinfer_two_sided_plans_flashinfer_cutlass_and_reads_from_its_vllm_name():
    # vllm-project/vllm@95ee3a4f1b8c prepare_finalize/flashinfer_nvlink_two_sided.py (standard format, MnnvlMoe alltoallv);
    # @03063c09ed10 FlashInferExperts._supports_parallel_config takes FlashInfer's NVLink all-to-alls.
    r = explain(**TWO_SIDED, cuda_graph=False, runner="flashinfer_cutlass")
    p = planned(r, "flashinfer_cutlass")
    assert p.a2a == "flashinfer_two_sided"
    d = from_command("vllm serve " + DSV3_DIR + " --data-parallel-size 8 --enable-expert-parallel "
                     "--all2all-backend flashinfer_nvlink_two_sided", {}).deployment
    assert d["a2a"] == "flashinfer_two_sided"
    one_sided = from_command("vllm serve " + DSV3_DIR + " --data-parallel-size 8 --enable-expert-parallel "
                             "--all2all-backend flashinfer_nvlink_one_sided", {}).deployment
    assert one_sided["a2a"] == "flashinfer"


def test_flashinfer_two_sided_is_unavailable_to_sglang():
    # SGLang's only FlashInfer all-to-all, 'flashinfer', is the one-sided MoeAlltoAll
    # (sgl-project/sglang@001067fffe33 server_args.py MOE_A2A_BACKEND_CHOICES).
    r = explain(**{**TWO_SIDED, "engine": "sglang", "tp": 8, "dp": 8}, runner="flashinfer_cutlass")
    assert r.status != "ok"
    codes = {(x.code, x.source.split(":")[0]) for x in r.reasons}
    assert ("a2a_unsupported", "backends/a2a/flashinfer_two_sided.yaml") in codes, codes


# --------------------------------------------------------------- nixl_ep: vLLM's name, and the module detection checks
NIXL = dict(gpu="H200", engine="vllm", quant="fp8_block", model=DSV3, tp=8, dp=8, ep=8, a2a="nixl")


def test_nixl_ep_plans_deep_gemm_under_vllm_and_reads_its_vllm_name():
    # vllm-project/vllm#35627: --all2all-backend nixl_ep (batched format, BatchedDeepGemmExperts).
    r = explain(**NIXL, packages={"nixl_ep": "1.5.1"}, runner="deep_gemm")
    assert r.status == "ok" and r.plan.a2a == "nixl", [(x.code, x.detail) for x in r.reasons]
    assert "--all2all-backend nixl_ep" in argv(emit(r.plan, "vllm", model="M"))
    d = from_command("vllm serve " + DSV3_DIR + " --data-parallel-size 8 --enable-expert-parallel --all2all-backend nixl_ep", {}).deployment
    assert d["a2a"] == "nixl"


def test_nixl_ep_is_refused_without_the_nixl_ep_module():
    # sgl-project/sglang@007baab6e1d2 token_dispatcher/nixl.py: "from nixl_ep import Buffer" (vLLM likewise): what the
    # all-to-all needs is the nixl_ep module, which the PyPI nixl distribution (module nixl) does not provide.
    r = explain(**NIXL, packages={"nixl_ep": None}, runner="deep_gemm")
    assert r.status != "ok"
    missing = [x for x in r.reasons if x.code == "dependency_missing"]
    assert missing and any("nixl_ep" in x.detail for x in missing), [(x.code, x.detail) for x in r.reasons]
    assert any(x.source.startswith("backends/a2a/nixl.yaml:") for x in missing)
    # The PyPI nixl distribution is no package any fact needs: naming it is an input error that points to nixl_ep.
    with pytest.raises(InputError, match="did you mean 'nixl_ep'"):
        explain(**NIXL, packages={"nixl": "1.5.1"}, runner="deep_gemm")


def test_nixl_ep_detection_looks_for_the_nixl_ep_module(tmp_path):
    # environment.inspect_package(name, module): a nixl distribution with only the nixl module is not NIXL-EP; a nixl_ep
    # module next to it is found (version unknown: no nixl_ep distribution is published).
    from moe_select.environment import inspect_package

    site = tmp_path / "site"
    (site / "nixl").mkdir(parents=True)
    (site / "nixl" / "__init__.py").write_text("")
    info = site / "nixl-1.5.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nixl\nVersion: 1.5.1\n")
    (info / "RECORD").write_text("nixl/__init__.py,,\n")
    assert inspect_package("nixl_ep", "nixl_ep", path=[str(site)]).version is None
    (site / "nixl_ep").mkdir()
    (site / "nixl_ep" / "__init__.py").write_text("")
    assert inspect_package("nixl_ep", "nixl_ep", path=[str(site)]).version == "unknown"


def test_sglang_overrides_humming_and_experimental_sgl_marlin_for_mxfp8():
    # sgl-project/sglang@d9a2188f5202 arg_groups/choices.py MXFP8_MOE_RUNNER_BACKEND_CHOICES (cutlass, deep_gemm,
    # flashinfer_trtllm, flashinfer_trtllm_routed): any other runner is overridden for an MXFP8 MoE (sgl-project/sglang#35272).
    for runner in ("humming", "experimental_sgl_marlin"):
        refused(explain(gpu="H100", engine="sglang", quant="mxfp8", model=QWEN3_30B, tp=1, runner=runner),
                runner, "quant_unsupported", f"backends/{runner}.yaml")

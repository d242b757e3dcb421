"""Issue 23, part 1: what the engine itself would pick (moe_select/engine_choice.py, backends/engines/resolution.yaml),
checked against public launch lines and reports whose source shows the engine's own choice (a vLLM "Using X" line,
an SGLang log or maintainer statement, a report of what the engine did). Each case cites its source; where the
report's checkpoint is not among examples/model_configs, its MoE shape is written from the report (or the hook the
case checks reads no shape, and a config stands in: said per case)."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.engine_choice import resolution
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "examples/model_configs"
# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: 128 experts, top-6, hidden 2688, expert width 1856, non-gated relu2, sigmoid +
# bias grouped top-k with n_group 1, one shared expert (vllm-project/vllm#52308's description; its config.json).
NANO = dict(num_experts=128, top_k=6, hidden_size=2688, moe_intermediate_size=1856, activation="relu2",
            routing="deepseek_v3", n_group=1, topk_group=1, num_shared_experts=1)


def _choice(report, engine):
    return next(c for c in report.engine_choices if c.engine == engine)


# (id, source, deployment, engine, expected runner (ours), expected engine name, what else to check)
CASES = [
    ("vllm-34249-h100-fp8-block-ep",
     "vllm-project/vllm#34249: vllm 0.15.2rc1, 8x H100, Qwen3-235B-A22B-Instruct-2507-FP8 (block FP8), -tp 8 "
     "--enable-expert-parallel: 'Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends'",
     dict(gpu="H100", model_config=str(CFG / "Qwen__Qwen3-235B-A22B-FP8"), engine="vllm", tp=8, ep=8),
     "vllm", "flashinfer_cutlass", "FLASHINFER_CUTLASS"),
    ("vllm-36494-b200-nano-fp8",
     "vllm-project/vllm#36494: 4x B200, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8 (per-tensor FP8), -tp 4: "
     "'Flashinfer 0.6.4 installed, so fp8 default to trtllm MoE backend'",
     dict(gpu="B200", model=NANO, quant="fp8_tensor", engine="vllm", tp=4),
     "vllm", "flashinfer_trtllm", "FLASHINFER_TRTLLM"),
    ("vllm-52308-b200-nano-nvfp4",
     "vllm-project/vllm#52308: vLLM 0.27.0, B200, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 with default backend "
     "selection: the auto-selected FLASHINFER_TRTLLM NVFP4 MoE backend (corrupt output; --moe-backend=flashinfer_cutlass "
     "fixes it)",
     dict(gpu="B200", model=NANO, quant="nvfp4", engine="vllm", tp=1),
     "vllm", "flashinfer_trtllm", "FLASHINFER_TRTLLM"),
    ("vllm-43507-sm120-explicit-marlin",
     "vllm-project/vllm#43507 (comment of 2026-08-06): vLLM 0.24.0, RTX 5090 Laptop (SM120), an NVFP4 MoE checkpoint, "
     "--moe-backend marlin: \"Using 'MARLIN' NvFp4 MoE backend\" (an explicit backend is what runs; the Qwen3 NVFP4 "
     "config stands in for the report's Gemma-4 checkpoint: the explicit path reads no shape)",
     dict(gpu="RTX 5090", model_config=str(CFG / "nvidia__Qwen3-30B-A3B-NVFP4"), engine="vllm", runner="marlin"),
     "vllm", "marlin", "marlin"),
    ("vllm-52308-workaround-explicit-cutlass",
     "vllm-project/vllm#52308: adding --moe-backend=flashinfer_cutlass on the same B200 runs FlashInfer CUTLASS",
     dict(gpu="B200", model=NANO, quant="nvfp4", engine="vllm", tp=1, runner="flashinfer_cutlass"),
     "vllm", "flashinfer_cutlass", "flashinfer_cutlass"),
    ("sglang-36711-trtllm-unfuses-shared",
     "sgl-project/sglang#36711: --moe-runner-backend flashinfer_trtllm forces disable_shared_experts_fusion (GLM-5.3-Flash "
     "FP8 on H20; DeepSeek-V3's config stands in: the hook reads the runner and the fusion only)",
     dict(gpu="H20", model_config=str(CFG / "deepseek-ai__DeepSeek-V3"), engine="sglang", tp=4,
          runner="flashinfer_trtllm", shared_expert_fusion=True),
     "sglang", "flashinfer_trtllm", "flashinfer_trtllm"),
    ("sglang-33107-cutedsl-unfuses-shared",
     "sgl-project/sglang#33107: with --moe-runner-backend flashinfer_cutedsl SGLang force-sets "
     "--disable-shared-experts-fusion (MiniMax-M3 NVFP4, TP4, B300; DeepSeek-V3.1-NVFP4's config stands in)",
     dict(gpu="B300", model_config=str(CFG / "nvidia__DeepSeek-V3.1-NVFP4"), engine="sglang", tp=4,
          runner="flashinfer_cutedsl", shared_expert_fusion=True),
     "sglang", "flashinfer_cutedsl", "flashinfer_cutedsl"),
    ("sglang-11816-deepseek-b200-fp8",
     "sgl-project/sglang#11816: on SM100 with FP8 for DeepSeek, 'python3 -m sglang.launch_server --model-path "
     "deepseek-ai/DeepSeek-R1 --tp 8 ... Launches with FI trtllm moe runner now'",
     dict(gpu="B200", model_config=str(CFG / "deepseek-ai__DeepSeek-R1"), engine="sglang", tp=8),
     "sglang", "flashinfer_trtllm", "flashinfer_trtllm"),
    ("vllm-33543-gb200-minimax-fp8",
     "vllm-project/vllm#33543: on SM100 (GB200) the FlashInfer TRT-LLM FP8 MoE backend is enabled by default for FP8 "
     "MoE models (trtllm_fp8_block_scale_moe in the traceback; flashinfer-ai/flashinfer#2469 names MiniMax-M2.1); "
     "MiniMax-M2's config (same architecture and MoE shape family) stands in, tp 4",
     dict(gpu="GB200", model_config=str(CFG / "MiniMaxAI__MiniMax-M2"), engine="vllm", tp=4),
     "vllm", "flashinfer_trtllm", "FLASHINFER_TRTLLM"),
    ("trtllm-11074-gpt-oss-blackwell-auto",
     "NVIDIA/TensorRT-LLM#11074 (merged): 'Make TRTLLM MOE the default one for GPTOSS on Blackwell' through AUTO MoE "
     "backend selection",
     dict(gpu="B200", model_config=str(CFG / "openai__gpt-oss-120b"), engine="trtllm"),
     "trtllm", "trtllm_gen", "TRTLLM"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_predicted_choice_equals_the_reported_one(case):
    _id, _source, dep, engine, runner, name = case
    ch = _choice(moe_select.explain(dep), engine)
    assert (ch.runner, ch.engine_name) == (runner, name), ch.how


def test_vllm_log_line_is_the_oracles_own():
    ch = _choice(moe_select.explain(CASES[0][2]), "vllm")
    assert ch.log.startswith("Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['FLASHINFER_CUTLASS', "
                             "'AITER', 'FLASHINFER_TRTLLM', 'DEEPGEMM', 'TRITON'")
    # block FP8 on an H100 without EP: Triton first (oracle/fp8.py: prefer Triton for TP)
    tp_only = _choice(moe_select.explain(dict(gpu="H100", model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine="vllm")),
                      "vllm")
    assert (tp_only.runner, tp_only.engine_name) == ("triton", "TRITON")


def test_vllm_known_failure_is_what_vllm_runs_and_the_plan_and_the_fix_are_the_reports_workaround():
    """vllm-project/vllm#52308: vLLM runs FLASHINFER_TRTLLM (a known failure here); the plan avoids it and the flag
    makes vLLM follow the plan. The rule's next runner is FlashInfer CuTe-DSL, whose token-major vLLM class takes
    relu2 from 0.27.0 (the report's release; backends/flashinfer_cutedsl.yaml), so the plan is that one; the report's
    workaround, FlashInfer CUTLASS, is a supported candidate too."""
    r = moe_select.explain(CASES[2][2])
    ch = _choice(r, "vllm")
    assert ch.evidence == "known failure" and ch.differs
    assert r.plan.runner == "flashinfer_cutedsl"
    assert ch.cost.startswith("the engine's choice is a known failure here: shape_unaligned")
    assert ch.follow == "--moe-backend flashinfer_cutedsl"
    assert next(c for c in r.candidates if c.backend == "flashinfer_cutlass").evidence == "supported"


def test_vllm_environment_removes_backends():
    # vLLM reads VLLM_USE_FLASHINFER_MOE_FP8 up to 0.23.0 (the oracle's env rule requires vllm <0.24.0).
    line = "VLLM_USE_FLASHINFER_MOE_FP8=0 vllm serve m"
    launch = from_command(line, model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine_version="0.23.0")
    ch = _choice(launch.explain(deployment={"gpu": "B200"}), "vllm")
    assert "VLLM_USE_FLASHINFER_MOE_FP8=0 removes FLASHINFER_TRTLLM, FLASHINFER_CUTLASS (read at vllm <0.24.0" in ch.how
    assert ch.engine_name not in ("FLASHINFER_TRTLLM", "FLASHINFER_CUTLASS")


def test_vllm_environment_rule_not_read_where_the_engine_no_longer_reads_it():
    # The 0.24.0 wheel names VLLM_USE_FLASHINFER_MOE_FP8 nowhere: the variable changes nothing there, declared or (the
    # engine version not given) at the newest version the facts were checked at; the prediction is the no-variable one.
    line = "VLLM_USE_FLASHINFER_MOE_FP8=0 vllm serve m"
    plain = _choice(from_command("vllm serve m", model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine_version="0.24.0")
                    .explain(deployment={"gpu": "B200"}), "vllm")
    for version in ("0.24.0", None):
        launch = from_command(line, model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine_version=version)
        ch = _choice(launch.explain(deployment={"gpu": "B200"}), "vllm")
        said = "(vllm is " if version else "(vllm assumed "     # not declared: the newest checked, said as assumed
        assert f"VLLM_USE_FLASHINFER_MOE_FP8=0 is not read {said}" in ch.how and "removes" not in ch.how, version
        assert "vllm reads it at vllm <0.24.0 only" in ch.how and "backends/engines/resolution.yaml:" in ch.how
        assert (ch.runner, ch.engine_name) == (plain.runner, plain.engine_name), version


@pytest.mark.parametrize("case", CASES[5:7], ids=[c[0] for c in CASES[5:7]])
def test_sglang_runner_turns_shared_expert_fusion_off_silently(case):
    ch = _choice(moe_select.explain(case[2]), "sglang")
    [o] = [o for o in ch.overrides if o.field == "shared_expert_fusion"]
    assert (o.asked, o.becomes, o.explicit, o.hook) == (True, False, True, "sglang-runner-unfuses-shared-experts")
    assert "silently overrides what was asked" in o.render()


def test_sglang_29942_deepep_auto_resolves_decode_to_low_latency_and_ep_to_tp():
    """sgl-project/sglang#29942: TP=8, DP=8, EP=8, --moe-a2a-backend deepep, deep_gemm, deepep_mode=auto ('decode
    resolves to low-latency in v0.5.16')."""
    line = ("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=1024 python3 -m sglang.launch_server --model-path m --tp 8 "
            "--dp 8 --enable-dp-attention --ep 8 --moe-a2a-backend deepep --moe-runner-backend deep_gemm")
    ch = _choice(from_command(line, model_config=str(CFG / "deepseek-ai__DeepSeek-V3")).explain(deployment={"gpu": "B300"}),
                 "sglang")
    assert ch.runner == "deep_gemm" and ch.modes == {"prefill": "normal", "decode": "low_latency"}


# ------------------------------------------------------------------ every predicted override has a deployment
DSV3 = str(CFG / "deepseek-ai__DeepSeek-V3")
OVERRIDES = {
    # hook id -> (deployment, field, asked, becomes)
    "sglang-gpt-oss-triton-kernel": (dict(gpu="H100", model_config=str(CFG / "openai__gpt-oss-20b"), engine="sglang"),
                                     "runner", "auto", "triton_kernel"),
    "sglang-gpt-oss-blackwell-mxfp4": (dict(gpu="B200", model_config=str(CFG / "openai__gpt-oss-120b"), engine="sglang"),
                                       "runner", "auto", "flashinfer_mxfp4"),
    "sglang-deepseek-sm100-runner": (CASES[7][2], "runner", "auto", "flashinfer_trtllm"),
    "sglang-qwen3-moe-sm100-runner": (dict(gpu="B200", model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine="sglang"),
                                      "runner", "auto", "flashinfer_trtllm"),
    "sglang-mxfp8-runner": (dict(gpu="B200", model=dict(NANO, activation="silu"), quant="mxfp8", engine="sglang"),
                            "runner", "auto", "flashinfer_trtllm"),
    "sglang-mxfp8-runner-gfx95": (dict(gpu="MI355X", model=dict(NANO, activation="silu"), quant="mxfp8", engine="sglang"),
                                  "runner", "auto", "triton"),
    # hooks split by release (tests/test_release_delta_prediction.py): the old release's
    "sglang-mxfp8-runner-override": (dict(gpu="MI300X", model=dict(NANO, activation="silu"), quant="mxfp8", engine="sglang",
                                          engine_version="0.5.19", runner="triton"), "runner", "triton", "flashinfer_trtllm"),
    "sglang-mxfp8-runner-override-gfx95": (dict(gpu="MI355X", model=dict(NANO, activation="silu"), quant="mxfp8",
                                                engine="sglang", engine_version="0.5.19", runner="marlin"), "runner", "marlin", "triton"),
    "sglang-nvfp4-sm120-runner": (dict(gpu="RTX PRO 6000", model_config=str(CFG / "nvidia__Qwen3-30B-A3B-NVFP4"), engine="sglang",
                                       engine_version="0.5.19"), "runner", "auto", "flashinfer_cutlass"),
    "sglang-runner-unfuses-shared-experts": (CASES[5][2], "shared_expert_fusion", True, False),
    "sglang-a2a-ep-spans-tp": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=4, a2a="deepep"), "ep", 4, 8),
    "sglang-a2a-unfuses-shared-experts": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=8, dp=8, a2a="deepep_v2",
                                               shared_expert_fusion=True), "shared_expert_fusion", True, False),
    "sglang-megamoe-runner": (dict(gpu="B200", model_config=str(CFG / "nvidia__DeepSeek-V3.1-NVFP4"), engine="sglang", tp=8, ep=8,
                                   dp=8, a2a="flashinfer_megamoe"), "runner", "auto", "flashinfer_megamoe"),
    "sglang-deepep-cutedsl-low-latency": (dict(gpu="B200", model_config=str(CFG / "nvidia__DeepSeek-V3.1-NVFP4"), engine="sglang",
                                               tp=8, ep=8, a2a="deepep", runner="flashinfer_cutedsl"), "a2a_mode", "auto", "low_latency"),
    "sglang-deepep-normal-no-graphs": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=8, a2a="deepep",
                                            a2a_mode="normal", cuda_graph=True), "cuda_graph", True, False),
    "sglang-deepep-v2-runner": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=8, dp=8, a2a="deepep_v2"),
                                "runner", "auto", "deep_gemm"),
    "sglang-fp8-a2a-auto-deep-gemm": (dict(gpu="H200", model_config=DSV3, engine="sglang", engine_version="0.5.23", tp=8,
                                           ep=8, a2a="deepep"), "runner", "auto", "deep_gemm"),
    "sglang-mori-normal": (dict(gpu="MI300X", model_config=DSV3, engine="sglang", tp=8, ep=8, a2a="mori"), "a2a_mode", "auto", "normal"),
    "sglang-pplx-low-latency": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=8, dp=8, a2a="pplx"),
                                "a2a_mode", "auto", "low_latency"),
    "sglang-pplx-runner": (dict(gpu="H200", model_config=DSV3, engine="sglang", tp=8, ep=8, dp=8, a2a="pplx"), "runner", "auto", "deep_gemm"),
    # field round 56: under megamoe Fp8MoEMethod's auto is Triton (DeepGEMM only for deepep / mooncake / nixl)
    "sglang-megamoe-auto-triton": (dict(gpu="B200", model_config=DSV3, engine="sglang", engine_version="0.5.18", tp=8, ep=8,
                                        a2a="megamoe", max_tokens_per_rank=4096), "runner", "auto", "triton"),
    "sglang-megamoe-auto-triton-fallback-blocks": (dict(gpu="H100", model_config=DSV3, engine="sglang", engine_version="0.5.23",
                                                        tp=8, ep=8, a2a="megamoe", max_tokens_per_rank=4096),
                                                   "runner", "auto", "triton"),
    "sglang-megamoe-dsv4-fp4-auto-triton": (dict(gpu="B200", engine="sglang", engine_version="0.5.13", quant="mxfp4", tp=4,
                                                 ep=4, a2a="megamoe", model=dict(num_experts=256, top_k=6, hidden_size=4096,
                                                 moe_intermediate_size=2048, activation="silu_clamped", swiglu_limit=10.0,
                                                 architecture="DeepseekV4ForCausalLM")), "runner", "auto", "triton"),
    # field round 59: DeepSeek-V4's FP4 experts under DeepEP (Fp8MoEMethod: deep_gemm) and without an all-to-all from
    # 0.5.19 (the model override: flashinfer_mxfp4)
    "sglang-dsv4-fp4-a2a-auto-deep-gemm": (dict(gpu="B200", engine="sglang", engine_version="0.5.16", tp=8, ep=8, dp=8,
                                                a2a="deepep", model_config=str(ROOT / "tests/cases/models/"
                                                                               "deepseek-ai__DeepSeek-V4-Flash-0731"),
                                                speculative=False), "runner", "auto", "deep_gemm"),
    "sglang-dsv4-fp4-auto-flashinfer-mxfp4": (dict(gpu="H200", engine="sglang", engine_version="0.5.19", tp=4,
                                                   model_config=str(ROOT / "tests/cases/models/"
                                                                    "deepseek-ai__DeepSeek-V4-Flash-0731"),
                                                   speculative=False), "runner", "auto", "flashinfer_mxfp4"),
    "sglang-rocm-auto-aiter": (dict(gpu="MI300X", model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"), engine="sglang",
                                    vendor_library=True), "runner", "auto", "aiter"),
    "sglang-rocm-auto-triton": (dict(gpu="MI355X", model_config=str(CFG / "Qwen__Qwen3-30B-A3B"), engine="sglang",
                                     vendor_library=False), "runner", "auto", "triton"),
    "sglang-rocm-fp8-aiter-whatever-runner": (dict(gpu="MI300X", model_config=str(CFG / "Qwen__Qwen3-30B-A3B-FP8"),
                                                   engine="sglang", engine_version="0.5.10", vendor_library=True,
                                                   runner="triton"), "runner", "triton", "aiter"),
}


def test_every_hook_has_a_test_deployment():
    # the release-delta hooks' deployments are in tests/test_release_delta_prediction.py (test_each_new_hook_fires_...)
    from test_release_delta_prediction import NEW_HOOK_DEPLOYMENTS

    assert {h.id for h in resolution().hooks} == set(OVERRIDES) | set(NEW_HOOK_DEPLOYMENTS)


@pytest.mark.parametrize("hook", sorted(OVERRIDES))
def test_each_predicted_override(hook):
    dep, fld, asked, becomes = OVERRIDES[hook]
    ch = _choice(moe_select.explain(dep), "sglang")
    found = [o for o in ch.overrides if o.hook == hook]
    assert found, [o.render() for o in ch.overrides]
    assert (found[0].field, found[0].asked, found[0].becomes) == (fld, asked, becomes)
    # a value the deployment gave itself is a silent override; a default is not
    assert found[0].explicit == (fld in dep and asked != "auto")


@pytest.mark.parametrize("change, fires", [
    ({}, True), ({"a2a": "mooncake"}, True), ({"gpu": "B200"}, True),
    ({"a2a": "none", "ep": 1}, False),              # no all-to-all: Fp8MoEMethod's auto is triton
    ({"engine_version": "0.5.18"}, True), ({"engine_version": "0.5.13"}, True),   # read back to 0.5.13 (break54)
    ({"engine_version": "0.5.12"}, False),          # releases not read
    ({"gpu": "RTX PRO 6000"}, False)])              # SM120: DeepGEMM only with the DSV4 APIs (not stated)
def test_sglang_fp8_auto_is_deep_gemm_under_deepep_mooncake_nixl(change, fires):
    """SGLang's Fp8MoEMethod at model load: --moe-runner-backend auto with DeepEP, Mooncake or NIXL and DeepGEMM's JIT
    on is deep_gemm (is_deepgemm_moe_runner_backend_enabled, read in the 0.5.19 and 0.5.23 wheels); the eleventh trial
    found it not predicted."""
    dep = {**OVERRIDES["sglang-fp8-a2a-auto-deep-gemm"][0], **change}
    ch = _choice(moe_select.explain(dep), "sglang")
    assert any(o.hook == "sglang-fp8-a2a-auto-deep-gemm" for o in ch.overrides) == fires, [o.render() for o in ch.overrides]
    if fires:
        assert ch.runner == "deep_gemm"


def test_deepep_normal_with_graphs_is_refused_by_the_plan_but_sglang_runs_without_graphs():
    r = moe_select.explain(OVERRIDES["sglang-deepep-normal-no-graphs"][0])
    assert r.plan is None and any(x.code == "cuda_graph_unsupported" for x in r.reasons)
    ch = _choice(r, "sglang")
    assert any(o.field == "cuda_graph" and o.log == "Cuda graph is disabled because deepep_mode=`normal`" for o in ch.overrides)


def test_trtllm_auto_is_names_yaml_and_degrades_to_its_fallback():
    gpt = str(CFG / "openai__gpt-oss-120b")
    hopper = _choice(moe_select.explain(dict(gpu="H200", model_config=gpt, engine="trtllm")), "trtllm")
    assert (hopper.runner, hopper.engine_name) == ("trtllm_triton", "TRITON")
    blackwell = _choice(moe_select.explain(dict(gpu="B200", model_config=gpt, engine="trtllm")), "trtllm")
    assert (blackwell.runner, blackwell.engine_name) == ("trtllm_gen", "TRTLLM")
    other = _choice(moe_select.explain(dict(gpu="H200", model_config=str(CFG / "Qwen__Qwen3-30B-A3B"), engine="trtllm")), "trtllm")
    assert other.engine_name == "CUTLASS"


def test_explain_text_and_json_carry_the_engine_choice():
    r = moe_select.explain(CASES[2][2])
    text = r.render_text()
    assert "What the engine itself would do" in text and "to run the plan: --moe-backend flashinfer_cutedsl" in text
    d = r.to_dict()["engine_choices"][0]
    assert d["engine"] == "vllm" and d["runner"] == "flashinfer_trtllm" and d["follow"] == "--moe-backend flashinfer_cutedsl"


def test_env_rule_requires_is_a_pep440_specifier_named_at_its_line():
    from moe_select.engine_choice import Resolution
    from moe_select.errors import InputError
    from moe_select.yamlio import load_text, validate

    text = ("schema_version: 1\noracles:\n  - engine: vllm\n    name: Fp8\n    formats: [fp8_block]\n    log: x\n"
            "    source: \"vllm-project/vllm#43148\"\n    lists:\n      - order:\n          - {name: TRITON, runner: triton}\n"
            "    env:\n      - {variable: VLLM_X, values: [\"0\"], remove: [TRITON], requires: {vllm: \"before 0.24\"},\n"
            "         source: \"vllm-project/vllm#43148\"}\n")
    with pytest.raises(InputError) as e:
        validate(Resolution, load_text(text, "r.yaml"), "r.yaml")
    assert "r.yaml:12" in str(e.value) and "not a PEP 440 version specifier" in str(e.value)
    ok = validate(Resolution, load_text(text.replace("before 0.24", "<0.24.0"), "r.yaml"), "r.yaml")
    assert ok.oracles[0].env[0].requires == {"vllm": "<0.24.0"}


def test_vllm_name_of_a_runner_follows_the_checkpoint_format():
    # names.yaml by_format (vllm-project/vllm@001eda31e3d0 oracle/mxfp4.py map_mxfp4_backend): asked for triton_kernel on
    # an MXFP4 checkpoint, vLLM is told --moe-backend triton; on bf16 vLLM has no name for triton_kernel.
    oss = moe_select.explain({"gpu": "H100", "engine": "vllm", "runner": "triton_kernel",
                              "model_config": str(CFG / "openai__gpt-oss-20b")})
    ch = _choice(oss, "vllm")
    assert (ch.runner, ch.engine_name) == ("triton_kernel", "triton")
    from moe_select.engine_choice import _follow

    assert _follow("vllm", "triton_kernel", "mxfp4") == "--moe-backend triton"
    assert "vllm has no name for triton_kernel on bf16" in _follow("vllm", "triton_kernel", "bf16")
    assert _follow("vllm", "triton", "mxfp4") == "--moe-backend emulation"   # field round 49 (by_format)
    assert _follow("vllm", "triton", "bf16") == "--moe-backend triton"


def test_sglang_fp8_auto_deep_gemm_hook_is_fp8config_only(tmp_path):
    """A compressed-tensors block-FP8 checkpoint runs CompressedTensorsW8A8Fp8MoE, whose create_moe_runner resolves auto to
    triton without DeepGEMM's check (sglang 0.5.19 / 0.5.23): the Fp8Config hook does not fire there (a review found it
    predicted deep_gemm)."""
    import json
    import shutil

    d = tmp_path / "ct"
    shutil.copytree(CFG / "deepseek-ai__DeepSeek-V3", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128], "symmetric": True,
            "dynamic": False}, "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                                                     "dynamic": True, "symmetric": True}}}}
    (d / "config.json").write_text(json.dumps(cfg))
    r = moe_select.explain(dict(gpu="H200", model_config=str(d), engine="sglang", engine_version="0.5.23", tp=8, ep=8,
                                a2a="deepep"))
    assert (r.deployment.quant, r.deployment.quant_params["layout"]) == ("fp8_block", "compressed-tensors")
    assert not any(o.hook == "sglang-fp8-a2a-auto-deep-gemm" for o in _choice(r, "sglang").overrides)

"""Issue 21, field round 4 (tests/cases/field_round_4.yaml): each kind of miss the independent checker found, fixed in
the facts, tested here on a second deployment of the same kind (another runner, model or version than the round's
case). Planning only (no GPU): ``moe_select.explain`` on declared machines.

1. A fact read at a main commit past the engine release it is applied to: TensorRT-LLM's CUTLASS MoE serves MXFP8 with
   gpt-oss / MiniMax SwiGLU only after NVIDIA/TensorRT-LLM#18257 (after 1.3.0rc24), so the fact carries the bound.
2. SGLang's fused-only runners (marlin, flashinfer_mxfp4, hpc_ops: no runner core in MoeRunner.__init__) run with the
   all-to-alls they register a fused function for and no other: their a2a lists are exhaustive under SGLang
   (sgl-project/sglang#35557, PR #32846).
3. SGLang's per-format runner allow-list: MXFP8 runs only with cutlass, deep_gemm, flashinfer_trtllm(_routed), and
   triton on gfx95; any other runner given is overridden to the default with a warning (sgl-project/sglang#35272). The
   runners outside the list are refused under SGLang for MXFP8, and explain's engine section shows the rewrite.
4. A version-gated routing fact and a format list read in full: SGLang's flashinfer_cutlass applies a top-1 routing
   weight on the expert input since sgl-project/sglang PR #35504 (sgl-project/sglang#34192), and flashinfer_mxfp4's one
   entry point runs MXFP4 payloads only (it was picked for NVFP4 on SM121).
5. A model-specific conversion stated format-wide: TensorRT-LLM reads an NVFP4 checkpoint as W4A16_NVFP4 on Hopper for
   Nemotron-H (NVIDIA/TensorRT-LLM#14775); Qwen3.5 keeps NVFP4 there and CUTLASS fails (NVIDIA/TensorRT-LLM#17293). The
   model's architecture is an input (config.json architectures[0], or model.architecture): a fact scoped to one is
   supported there, refused for another, and unverified where the deployment does not say.
6. A refusal on evidence, not for want of a rule: sgl-kernel's ROCm build targets gfx942/gfx950 only and compiles no
   Marlin (sgl-project/sglang#30245), so SGLang's triton is refused on other ROCm GPUs and its marlin on every one.
"""
from __future__ import annotations

from pathlib import Path

import moe_select
from report_helpers import cand, refusals

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"

MINIMAX_M2 = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536,
              "activation": "swiglu_oai", "routing": "sigmoid_topk"}
GPT_OSS_120B = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                "activation": "swiglu_oai", "routing": "renormalize"}


def explain(**dep):
    return moe_select.explain(dep)


# ------------------------------------------------------------- 1. engine-version bound of a fact read past the release
def _trtllm_mxfp8_swiglu(version: str | None, gpu: str = "B200"):
    dep = {"gpu": gpu, "engine": "trtllm", "quant": "mxfp8", "model": GPT_OSS_120B, "tp": 1, "ep": 1,
           "runner": "trtllm_cutlass"}
    if version is not None:
        dep["engine_version"] = version
    return explain(**dep)


def test_trtllm_cutlass_mxfp8_swiglu_oai_is_refused_up_to_1_3_0rc24():
    """Another model (a gpt-oss-shaped MXFP8 checkpoint) and GPU (B200) than the round's MiniMax-M3 on B300: CUTLASS
    refuses SwigluBias for MXFP8 at 1.3.0rc24 and before (the fact is bounded to >1.3.0rc24)."""
    for version in ("1.3.0rc24", "1.3.0rc19"):
        report = _trtllm_mxfp8_swiglu(version)
        assert report.plan is None, version
        src = refusals(report, "trtllm_cutlass")["activation_unsupported"]
        assert src.startswith("backends/trtllm_cutlass.yaml:"), src


def test_trtllm_cutlass_mxfp8_swiglu_oai_not_refused_after_the_fix():
    """Past the bound the fact holds (the release is newer than the facts were checked at, so unverified, not
    refused); silu on MXFP8 was never bounded."""
    after = _trtllm_mxfp8_swiglu("1.3.0rc25")
    assert after.plan is not None and after.plan.runner == "trtllm_cutlass"
    assert "activation_unsupported" not in refusals(after, "trtllm_cutlass")
    silu = explain(gpu="B200", engine="trtllm", engine_version="1.3.0rc24", quant="mxfp8",
                   model={**GPT_OSS_120B, "activation": "silu"}, tp=1, ep=1, runner="trtllm_cutlass")
    assert silu.plan is not None and silu.plan.runner == "trtllm_cutlass"


def test_trtllm_engine_version_not_given_is_judged_at_the_newest_checked_release():
    """Not given: tensorrt-llm is assumed at its checked_up_to (1.3.0rc24), where the fix is not in."""
    report = _trtllm_mxfp8_swiglu(None)
    assert report.plan is None
    assert "activation_unsupported" in refusals(report, "trtllm_cutlass")


# ------------------------------------------------------ 2. SGLang's fused-only runners: exhaustive a2a lists per runner
def _a2a_refusal(report, runner):
    """The source of ``runner``'s a2a_unsupported refusal (KeyError when it is not refused for its a2a)."""
    return refusals(report, runner)["a2a_unsupported"]


def test_sglang_marlin_with_deepep_is_refused_for_int4_too():
    """Another format than the round's DSv4 MXFP4: an AWQ int4 checkpoint (Qwen3-30B-A3B-AWQ) on H100 under SGLang with
    DeepEP; Marlin has no fused function for deepep. With a2a none it plans; vLLM's Marlin takes DeepEP."""
    dep = {"gpu": "H100", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ"), "tp": 2, "dp": 2, "ep": 2,
           "runner": "marlin"}
    refused = explain(**dep, engine="sglang", a2a="deepep")
    assert refused.plan is None
    assert _a2a_refusal(refused, "marlin").startswith("backends/marlin.yaml:")
    alone = explain(**{**dep, "ep": 1, "dp": 1}, engine="sglang", a2a="none")
    assert alone.plan is not None and alone.plan.runner == "marlin"
    vllm = explain(**dep, engine="vllm", a2a="deepep")
    assert "a2a_unsupported" not in refusals(vllm, "marlin")


def test_sglang_flashinfer_mxfp4_with_an_all_to_all_is_refused():
    """gpt-oss-120b (MXFP4) on B200 under SGLang: flashinfer_mxfp4 registers ('none', 'flashinfer_mxfp4') only, so
    DeepEP and FlashInfer's all-to-all are refused; without one it plans."""
    dep = {"gpu": "B200", "engine": "sglang", "model_config": str(CONFIGS / "openai__gpt-oss-120b"), "tp": 4, "dp": 4,
           "ep": 4, "runner": "flashinfer_mxfp4"}
    for a2a in ("deepep", "flashinfer"):
        report = explain(**dep, a2a=a2a)
        assert report.plan is None, a2a
        assert _a2a_refusal(report, "flashinfer_mxfp4").startswith("backends/flashinfer_mxfp4.yaml:"), a2a
    alone = explain(**{**dep, "ep": 1, "dp": 1}, a2a="none")
    assert alone.plan is not None and alone.plan.runner == "flashinfer_mxfp4"


def test_sglang_hpc_ops_with_deepep_is_refused():
    """A block-FP8 checkpoint (Qwen3-30B-A3B-FP8) on H20 with hpc_ops: the standard dispatcher only."""
    dep = {"gpu": "H20", "engine": "sglang", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "tp": 2, "dp": 2,
           "ep": 2, "runner": "hpc_ops"}
    report = explain(**dep, a2a="deepep")
    assert report.plan is None
    assert _a2a_refusal(report, "hpc_ops").startswith("backends/hpc_ops.yaml:")
    alone = explain(**{**dep, "ep": 1, "dp": 1}, a2a="none")
    assert alone.plan is not None and alone.plan.runner == "hpc_ops"


# ---------------------------------------------------- 3. SGLang's MXFP8 runner allow-list and its rewrite of the runner
MINIMAX_SILU = {**MINIMAX_M2, "activation": "silu"}


def _sglang_mxfp8(gpu: str, runner: str, engine: str = "sglang", version: str | None = None, **extra):
    if version is not None:
        extra["engine_version"] = version
    return explain(gpu=gpu, engine=engine, quant="mxfp8", model=MINIMAX_SILU, tp=8, ep=1, a2a="none", runner=runner,
                   **extra)


def _sglang_choice(report):
    return next(c for c in report.engine_choices if c.engine == "sglang")


def test_sglang_marlin_for_mxfp8_on_hopper_is_refused_and_the_override_is_shown():
    """Another runner and GPU than the round's triton on MI300X: marlin for MXFP8 on H100 is overridden to
    flashinfer_trtllm by SGLang; moe-select refuses marlin (the allow-list) and says the engine rewrites it.
    Pinned at SGLang 0.5.19 (the release assumed when this was written). From 0.5.20 the list names
    flashinfer_megamoe too (sglang-0.5.20 sglang/srt/arg_groups/choices.py:MXFP8_MOE_RUNNER_BACKEND_CHOICES), so the
    override is the hook of that release on, with the longer warning; marlin is still refused (0.5.23)."""
    report = _sglang_mxfp8("H100", "marlin", version="0.5.19")
    assert report.plan is None
    assert refusals(report, "marlin")["quant_unsupported"].startswith("backends/marlin.yaml:")
    choice = _sglang_choice(report)
    assert choice.runner == "flashinfer_trtllm"
    (o,) = [o for o in choice.overrides if o.field == "runner"]
    assert (o.asked, o.becomes, o.explicit, o.hook) == ("marlin", "flashinfer_trtllm", True, "sglang-mxfp8-runner-override")
    assert o.log is not None and o.log.endswith("Overriding 'marlin'.")
    assert "silently overrides what was asked" in report.render_text()
    newest = _sglang_mxfp8("H100", "marlin", version="0.5.23")
    assert newest.plan is None
    assert refusals(newest, "marlin")["quant_unsupported"].startswith("backends/marlin.yaml:")
    (o,) = [o for o in _sglang_choice(newest).overrides if o.field == "runner"]
    assert (o.asked, o.becomes, o.hook) == ("marlin", "flashinfer_trtllm", "sglang-mxfp8-runner-override-cuda")
    assert "flashinfer_megamoe" in o.log and o.log.endswith("Overriding 'marlin'.")


def test_sglang_mxfp8_on_gfx950_takes_triton_and_rewrites_aiter_to_it():
    """On gfx95 SGLang adds triton to the list and makes it the default: aiter is refused and rewritten to triton,
    auto becomes triton, and triton is not refused by the allow-list there.
    Pinned at SGLang 0.5.19 (the release assumed when this was written). From 0.5.21
    (sglang-0.5.21 .. 0.5.23 sglang/srt/arg_groups/overrides.py:_moe_runner_backend_quant_constraints) aiter joins the
    list on gfx95 only under SGLANG_USE_AITER (vendor_library): rewritten to triton without it, kept with it; the
    engine's choice for auto is still triton."""
    aiter = _sglang_mxfp8("MI355X", "aiter", version="0.5.19")
    assert aiter.plan is None and "quant_unsupported" in refusals(aiter, "aiter")
    (o,) = [o for o in _sglang_choice(aiter).overrides if o.field == "runner"]
    assert (o.asked, o.becomes, o.hook) == ("aiter", "triton", "sglang-mxfp8-runner-override-gfx95")
    auto = _sglang_mxfp8("MI355X", "auto", version="0.5.19")
    assert _sglang_choice(auto).runner == "triton"
    assert "quant_unsupported" not in refusals(auto, "triton")
    gfx942 = _sglang_mxfp8("MI300X", "auto", version="0.5.19")
    assert _sglang_choice(gfx942).runner == "flashinfer_trtllm"
    assert "quant_unsupported" in refusals(gfx942, "triton")
    # 0.5.23: the engine's side only (the rewrite of the runner flag)
    off = _sglang_mxfp8("MI355X", "aiter", version="0.5.23", vendor_library=False)
    (o,) = [o for o in _sglang_choice(off).overrides if o.field == "runner"]
    assert (o.asked, o.becomes, o.hook) == ("aiter", "triton", "sglang-mxfp8-runner-override-gfx95-no-aiter")
    on = _sglang_mxfp8("MI355X", "aiter", version="0.5.23", vendor_library=True)
    assert _sglang_choice(on).runner == "aiter"
    assert not [o for o in _sglang_choice(on).overrides if o.field == "runner"]
    assert _sglang_choice(_sglang_mxfp8("MI355X", "auto", version="0.5.23")).runner == "triton"


def test_the_mxfp8_allow_list_is_sglangs_only():
    """vLLM has no such list: its Marlin takes MXFP8 weights (bf16 activations) on Hopper."""
    report = _sglang_mxfp8("H100", "marlin", engine="vllm")
    assert "quant_unsupported" not in refusals(report, "marlin")
    assert report.plan is not None and report.plan.runner == "marlin"


# ------------------------------- 4. flashinfer_cutlass's weight on the input (version-gated); flashinfer_mxfp4's formats
LLAMA4_SCOUT = {"num_experts": 16, "top_k": 1, "hidden_size": 5120, "moe_intermediate_size": 8192,
                "activation": "silu", "routing": "llama4", "num_shared_experts": 1}


def _scout_nvfp4(version: str | None, gpu: str = "RTX PRO 6000", **model):
    dep = {"gpu": gpu, "engine": "sglang", "quant": "nvfp4", "model": {**LLAMA4_SCOUT, **model}, "tp": 2, "ep": 1,
           "runner": "flashinfer_cutlass"}
    if version is not None:
        dep["engine_version"] = version
    return explain(**dep)


def _unknown_codes(report, runner):
    return {u.code for u in cand(report, runner).unknowns}


def test_sglang_flashinfer_cutlass_applies_a_top1_weight_on_the_input_from_0_5_19():
    """Another GPU than the round's GB10 (SM121): RTX PRO 6000 (SM120), NVFP4 Llama-4-Scout, flashinfer_cutlass asked.
    Corrected by the release delta of 2026-12-05 (the test said: supported from 0.5.19, when PR #35504 was assumed in
    it). The wheels say otherwise: the runner's pre-scale of a top-1 weight on the input is first in 0.5.21 (sglang-0.5.21
    sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py:_prescale_router_weight_on_input; 0.5.19 and 0.5.20 assert
    not apply_router_weight_on_input in fused_experts_none_to_flashinfer_cutlass), and for NVFP4 it is never reached:
    ModelOptNvFp4FusedMoEMethod.apply asserts not apply_router_weight_on_input before the flashinfer_cutlass runner in
    every wheel read (sglang-0.5.19 .. 0.5.23 sglang/srt/layers/quantization/modelopt_quant.py). So NVFP4 Scout is refused
    at 0.5.19 and at 0.5.23; a BF16 Scout is refused at 0.5.19 and supported from 0.5.21. At 0.5.17 (not read) no fact
    covers it (unverified)."""
    for version in ("0.5.19", "0.5.23"):
        nvfp4 = _scout_nvfp4(version)
        assert nvfp4.plan is None, version
        assert refusals(nvfp4, "flashinfer_cutlass")["routing_unsupported"].startswith("backends/flashinfer_cutlass.yaml:")
    bf16 = {"gpu": "RTX PRO 6000", "engine": "sglang", "quant": "bf16", "model": LLAMA4_SCOUT, "tp": 2, "ep": 1,
            "runner": "flashinfer_cutlass"}
    assert "routing_unsupported" in refusals(explain(**bf16, engine_version="0.5.19"), "flashinfer_cutlass")
    after = explain(**bf16, engine_version="0.5.21")
    assert after.plan is not None and after.plan.runner == "flashinfer_cutlass" and after.plan.evidence == "supported"
    before = _scout_nvfp4("0.5.17")
    assert before.plan is not None and before.plan.evidence == "unverified"
    assert "routing_unsupported" in _unknown_codes(before, "flashinfer_cutlass")


def test_the_weight_on_input_fact_is_top1_only():
    """Top-2 with the weight on the input would need a differently scaled input per expert: not covered.
    Moved by the release delta of 2026-12-05 from NVFP4 at 0.5.19 (now refused outright, see above) to BF16 at 0.5.21,
    where the top-1 fact holds (sglang-0.5.21 flashinfer_cutlass.py:_prescale_router_weight_on_input asserts top-k 1)."""
    bf16 = {"gpu": "RTX PRO 6000", "engine": "sglang", "engine_version": "0.5.21", "quant": "bf16", "tp": 2, "ep": 1,
            "runner": "flashinfer_cutlass"}
    report = explain(**bf16, model={**LLAMA4_SCOUT, "top_k": 2})
    assert "routing_unsupported" in _unknown_codes(report, "flashinfer_cutlass")
    assert not _unknown_codes(explain(**bf16, model=LLAMA4_SCOUT), "flashinfer_cutlass") & {"routing_unsupported"}


def test_sglang_flashinfer_mxfp4_runs_mxfp4_payloads_only():
    """Block FP8 on B200 with flashinfer_mxfp4 is refused under SGLang (its fused function raises TypeError for any
    other payload); gpt-oss's MXFP4 is not refused by the list."""
    fp8 = explain(gpu="B200", engine="sglang", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), tp=1, ep=1,
                  runner="flashinfer_mxfp4")
    assert fp8.plan is None
    assert refusals(fp8, "flashinfer_mxfp4")["quant_unsupported"].startswith("backends/flashinfer_mxfp4.yaml:")
    mxfp4 = explain(gpu="B200", engine="sglang", model_config=str(CONFIGS / "openai__gpt-oss-120b"), tp=1, ep=1,
                    runner="flashinfer_mxfp4")
    assert "quant_unsupported" not in refusals(mxfp4, "flashinfer_mxfp4")


# ------------------------------------------ 5. the checkpoint's architecture as an input: Nemotron-H's W4A16 NVFP4 read
NEMOTRON_H = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856,
              "activation": "relu2", "routing": "sigmoid_topk"}


def _cutlass_nvfp4_hopper(**dep):
    return explain(gpu="H100", engine="trtllm", tp=1, ep=1, runner="trtllm_cutlass", **dep)


def test_trtllm_cutlass_nvfp4_on_hopper_is_nemotron_h_only():
    """A Qwen3-30B-A3B NVFP4 checkpoint (Qwen3MoeForCausalLM, from its config.json) on H100 with CUTLASS is refused;
    a Nemotron-H-shaped layer naming NemotronHForCausalLM is supported; without an architecture it is unverified."""
    qwen = _cutlass_nvfp4_hopper(model_config=str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"))
    assert qwen.deployment.model.architecture == "Qwen3MoeForCausalLM"
    assert qwen.plan is None and "quant_unsupported" in refusals(qwen, "trtllm_cutlass")
    nemotron = _cutlass_nvfp4_hopper(quant="nvfp4", model={**NEMOTRON_H, "architecture": "NemotronHForCausalLM"})
    assert nemotron.plan is not None and nemotron.plan.runner == "trtllm_cutlass" and nemotron.plan.evidence == "supported"
    assert nemotron.plan.activation_precision == "bf16"
    unknown = _cutlass_nvfp4_hopper(quant="nvfp4", model=NEMOTRON_H)
    assert unknown.plan is not None and unknown.plan.evidence == "unverified"
    (u,) = [u for u in cand(unknown, "trtllm_cutlass").unknowns if u.code == "quant_unsupported"]
    assert "architecture not given" in u.detail and u.source.startswith("backends/trtllm_cutlass.yaml:")


def test_the_architecture_is_read_from_config_json_and_refused_when_malformed(tmp_path):
    """config.json architectures[0] is the input; a value that is not a list of class names is an error naming the
    file and key (nothing is coerced)."""
    import json

    from moe_select.errors import InputError

    cfg = json.loads((CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4" / "config.json").read_text())
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("hf_quant_config.json",):
        src = CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4" / name
        if src.exists():
            (folder / name).write_text(src.read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "architectures": "Qwen3MoeForCausalLM"}))
    try:
        explain(gpu="H100", engine="trtllm", model_config=str(folder), tp=1, ep=1)
    except InputError as exc:
        assert "architectures" in str(exc) and "config.json" in str(exc)
    else:
        raise AssertionError("a string architectures was accepted")
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "architectures"}))
    report = explain(gpu="H100", engine="trtllm", model_config=str(folder), tp=1, ep=1, runner="trtllm_cutlass")
    assert report.deployment.model.architecture is None
    assert "quant_unsupported" in {u.code for u in cand(report, "trtllm_cutlass").unknowns}


# ------------------------------------------------- 6. sgl-kernel's ROCm targets: SGLang's triton and marlin on AMD GPUs
RDNA_MOE = {"num_experts": 64, "top_k": 6, "hidden_size": 1280, "moe_intermediate_size": 896, "activation": "silu",
            "routing": "softmax_topk", "num_shared_experts": 2}


def test_sglang_triton_is_refused_on_rocm_gpus_sgl_kernel_is_not_built_for():
    """Another GPU and format than the round's bf16 on gfx1100: FP8 on MI250 (gfx90a) under SGLang is refused with
    arch_unsupported from triton.yaml; the same layer on MI300X is not; vLLM's triton (its own kernels) is not touched."""
    fp8 = {"model": RDNA_MOE, "quant": "fp8_tensor", "tp": 1, "ep": 1, "runner": "triton"}
    mi250 = explain(gpu="MI250", engine="sglang", **fp8)
    assert mi250.plan is None
    assert refusals(mi250, "triton")["arch_unsupported"].startswith("backends/triton.yaml:")
    mi300 = explain(gpu="MI300X", engine="sglang", **fp8)
    assert "arch_unsupported" not in refusals(mi300, "triton")
    w7900 = explain(gpu="W7900", engine="sglang", model=RDNA_MOE, quant="bf16", tp=1, ep=1, runner="triton")
    assert w7900.deployment.arch == "gfx1100" and "arch_unsupported" in refusals(w7900, "triton")
    row = refusals(mi250, "triton")["arch_unsupported"]
    vllm = explain(gpu="MI250", engine="vllm", **fp8)
    assert row not in refusals(vllm, "triton").values()


def test_sglang_marlin_is_refused_on_every_rocm_gpu():
    """An AWQ int4 checkpoint on MI300X (gfx942) with marlin under SGLang: no ROCm build of sgl-kernel has Marlin."""
    report = explain(gpu="MI300X", engine="sglang", model_config=str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ"), tp=1, ep=1,
                     runner="marlin")
    assert report.plan is None
    assert refusals(report, "marlin")["arch_unsupported"].startswith("backends/marlin.yaml:")

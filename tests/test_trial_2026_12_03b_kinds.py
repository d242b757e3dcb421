"""Kinds from a new user's trial (2026-12-03, fifteenth session; the report's findings were checked against upstream by a
second helper). Each test is a kind, not the one line of the report: the launch-line and emit kinds are in
tests/test_launch_line.py (engine choices, docker's environment, --moe-backend's first release), the vendor-library
switch in tests/test_field_round_25_kinds.py."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_gpt_oss_on_hopper_plans_the_engines_default_triton_kernel(engine, gpu):
    """gpt-oss (MXFP4) on Hopper: both engines default to OpenAI's triton_kernels (vLLM select_mxfp4_moe_backend, SGLang's
    gpt-oss override) and capture it in CUDA graphs (backends/triton_kernel.yaml cuda_graph rows); without a fact for
    that the plan left the default for a FlashInfer path whose sm90 module is a 50-minute JIT build."""
    for model in ("openai__gpt-oss-20b", "openai__gpt-oss-120b"):
        r = moe_select.explain({"gpu": gpu, "engine": engine, "model_config": str(CONFIGS / model), "tp": 2})
        assert r.plan is not None and r.plan.runner == "triton_kernel", r.summary()
        assert r.plan.evidence == "supported", r.summary()


def test_triton_kernel_capture_under_vllm_stays_unverified_on_blackwell():
    """The vLLM row is sm90 only: on Blackwell vLLM's gpt-oss default is FlashInfer's, and no public record of
    triton_kernels captured there was found, so asking for it there leaves the capture unverified (strict refuses)."""
    dep = {"gpu": "B200", "engine": "vllm", "model_config": str(CONFIGS / "openai__gpt-oss-20b"), "tp": 1,
           "runner": "triton_kernel"}
    r = moe_select.explain(dep)
    assert r.plan is not None and r.plan.evidence == "unverified"
    assert [u.code for u in r.plan.unknowns] == ["cuda_graph_unsupported"], r.plan.unknowns
    assert moe_select.explain({**dep, "strict": True}).plan is None


def _trt_choice(r):
    return next(c for c in r.engine_choices if c.engine == "trtllm")


def test_trtllm_auto_prediction_reads_the_narrow_branch_not_the_plans_rule():
    """TensorRT-LLM's AUTO sends W4A16_NVFP4 (a weight-only checkpoint) and Qwen3.5 MoE NVFP4 to MARLIN on Hopper; other
    NVFP4 checkpoints to CUTLASS, which has no NVFP4 below SM100 (names.yaml trtllm_auto rows with match). The plan's
    rule names MARLIN for every NVFP4 checkpoint there; the prediction used to say so too (a new user's trial)."""
    w4a4 = {"gpu": "H100", "engine": "trtllm", "tp": 2, "model_config": str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")}
    r = moe_select.explain(w4a4)
    assert r.plan is not None and r.plan.runner == "trtllm_marlin"
    c = _trt_choice(r)
    assert c.engine_name == "CUTLASS" and "cannot serve the layer here" in c.how and "fails at startup" in c.how, c.how
    model = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu"}
    for extra, want in (({"quant_config": {"weight_only": True}}, "MARLIN"),
                        ({"model": {**model, "architecture": "Qwen3_5MoeForConditionalGeneration"}}, "MARLIN")):
        dep = {"gpu": "H100", "engine": "trtllm", "tp": 2, "quant": "nvfp4", "model": model, **extra}
        c = _trt_choice(moe_select.explain(dep))
        assert c.engine_name == want, (extra, c.engine_name, c.how)


def test_trtllm_explicit_backend_that_cannot_serve_is_predicted_degraded_to_cutlass():
    """An explicit moe_config.backend TensorRT-LLM cannot serve the layer with degrades to CUTLASS (resolve_moe_impl's
    fallback, allow_degradation on); VANILLA does not (NO_FALLBACK_BACKENDS). moe-select still refuses the plan (the
    runner asked for cannot serve), and the prediction says what TensorRT-LLM would run instead."""
    r = moe_select.explain({"gpu": "B200", "engine": "trtllm", "tp": 1, "runner": "trtllm_deepgemm",
                            "model_config": str(CONFIGS / "openai__gpt-oss-20b")})
    assert r.plan is None
    c = _trt_choice(r)
    assert c.runner == "trtllm_cutlass" and "degrades it to CUTLASS" in c.how and "_candidates_for" in (c.source or ""), c.how
    r = moe_select.explain({"gpu": "B200", "engine": "trtllm", "tp": 1, "runner": "trtllm_gen",
                            "model_config": str(CONFIGS / "openai__gpt-oss-20b")})
    c = _trt_choice(r)
    assert c.runner == "trtllm_gen" and "runs it or raises" in c.how, c.how


@pytest.mark.parametrize("runner", ["cutlass", "hpc_ops", "experimental_sgl_marlin", "humming", "flashinfer_cutedsl"])
def test_sglang_cuda_runners_are_refused_on_rocm(runner):
    """SGLang runners built for NVIDIA GPUs were 'eligible, unverified' on MI300X / MI355X; each has a gate or a
    CUDA-only import that fails there (the backends' sglang rocm rows), so they are refused on that evidence."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report_helpers import refusals

    for gpu in ("MI300X", "MI355X"):
        r = moe_select.explain({"gpu": gpu, "engine": "sglang", "tp": 8, "runner": runner,
                                "model_config": str(CONFIGS / "Qwen__Qwen3-235B-A22B-FP8")})
        assert r.plan is None, (gpu, runner, r.summary())
        codes = refusals(r, runner)
        assert "arch_unsupported" in codes and codes["arch_unsupported"].startswith(f"backends/{runner}.yaml:"), codes


def test_sglang_aiter_is_refused_on_nvidia():
    """SGLang's AITER runner needs ROCm (is_hip): on a CUDA GPU it runs Triton, raises at the first forward, or fails
    importing aiter, by format (backends/aiter.yaml)."""
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "tp": 2, "runner": "aiter",
                            "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")})
    assert r.plan is None and "arch_unsupported" in [x.code for c in r.candidates if c.backend == "aiter" for x in c.reasons]


@pytest.mark.parametrize("gpu, sglang, vllm", [("H100", "triton_kernel", "triton_kernel"), ("B200", "flashinfer_mxfp4", "flashinfer_trtllm")])
def test_gpt_oss_engine_predictions_name_the_engines_defaults(gpu, sglang, vllm):
    """SGLang's _gpt_oss_overrides and vLLM's gpt-oss MXFP4 priority list (backends/engines/resolution.yaml): the
    predictions said 'resolved at model load' and 'no oracle covers mxfp4' (a second trial)."""
    got = {}
    for engine in ("sglang", "vllm"):
        r = moe_select.explain({"gpu": gpu, "engine": engine, "tp": 1, "model_config": str(CONFIGS / "openai__gpt-oss-20b")})
        got[engine] = next(c for c in r.engine_choices if c.engine == engine).runner
    assert got == {"sglang": sglang, "vllm": vllm}, got

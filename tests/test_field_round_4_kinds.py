"""Issue 21, field round 4 (tests/cases/field_round_4.yaml): each kind of miss the independent checker found, fixed in
the facts, tested here on a second deployment of the same kind (another runner, model or version than the round's
case). Planning only (no GPU): ``moe_select.explain`` on declared machines.

1. A fact read at a main commit past the engine release it is applied to: TensorRT-LLM's CUTLASS MoE serves MXFP8 with
   gpt-oss / MiniMax SwiGLU only after NVIDIA/TensorRT-LLM#18257 (after 1.3.0rc24), so the fact carries the bound.
2. SGLang's fused-only runners (marlin, flashinfer_mxfp4, hpc_ops: no runner core in MoeRunner.__init__) run with the
   all-to-alls they register a fused function for and no other: their a2a lists are exhaustive under SGLang
   (sgl-project/sglang#35557, PR #32846).
"""
from __future__ import annotations

from pathlib import Path

import moe_select

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"

MINIMAX_M2 = {"num_experts": 256, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 1536,
              "activation": "swiglu_oai", "routing": "sigmoid_topk"}
GPT_OSS_120B = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                "activation": "swiglu_oai", "routing": "renormalize"}


def explain(**dep):
    return moe_select.explain(dep)


def cand(report, runner):
    return next(c for c in report.candidates if c.backend == runner)


def refusals(report, runner):
    """``{code: source}`` of the refusals of ``runner``."""
    return {r.code: r.source for r in cand(report, runner).reasons}


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

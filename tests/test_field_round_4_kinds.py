"""Issue 21, field round 4 (tests/cases/field_round_4.yaml): each kind of miss the independent checker found, fixed in
the facts, tested here on a second deployment of the same kind (another runner, model or version than the round's
case). Planning only (no GPU): ``moe_select.explain`` on declared machines.

1. A fact read at a main commit past the engine release it is applied to: TensorRT-LLM's CUTLASS MoE serves MXFP8 with
   gpt-oss / MiniMax SwiGLU only after NVIDIA/TensorRT-LLM#18257 (after 1.3.0rc24), so the fact carries the bound.
"""
from __future__ import annotations

import moe_select

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

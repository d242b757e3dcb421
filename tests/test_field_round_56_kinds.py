"""Field round 56 of issue 21 (tests/cases/field_round_56.yaml), fixed as a kind in backends/a2a/megamoe.yaml (SGLang's
DeepGEMM Mega MoE all-to-all: its standard dispatch to the layer's runner, the per-rank token cap SGLang checks at
startup from 0.5.17, the archs it refuses from 0.5.21), the deep_gemm / triton pairings with it, and what SGLang's auto
resolves to under it (backends/engines/resolution.yaml: Triton, which cannot run DeepSeek-V4's FP4 experts:
sgl-project/sglang#27416). Tested on deployments other than the round's case: other releases, token budgets, models,
GPUs and engines."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")
QWEN3_FP8 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8")
VAR = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"

# DeepSeek-V4-Flash's routed experts as the round's case states them (FP4 experts, SwiGLU clamped at 10).
DSV4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu_clamped",
        "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}


def _dsv4(version: str, tokens: int, runner: str = "auto", **more):
    return moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": version, "quant": "mxfp4",
                               "model": DSV4, "tp": 4, "ep": 4, "a2a": "megamoe", "runner": runner,
                               "max_tokens_per_rank": tokens, **more})


def _cap_refusal(report) -> list[str]:
    return [r.detail for r in report.reasons
            if r.code == "parallelism_unsupported" and r.source.startswith("backends/a2a/megamoe.yaml")]


def test_auto_plans_deep_gemm_and_says_sglang_would_run_triton():
    """0.5.13 .. 0.5.16 check no budget: a forward over the cap runs the layer's runner. moe-select's plan names deep_gemm
    (written as the flag), and the prediction says SGLang's own auto is Triton here, refused on evidence."""
    r = _dsv4("0.5.14", 8192)
    assert r.plan is not None and r.plan.runner == "deep_gemm", report_codes(r)
    ch = next(c for c in r.engine_choices if c.engine == "sglang")
    assert ch.runner == "triton"
    (o,) = [o for o in ch.overrides if o.field == "runner"]
    assert (o.asked, o.becomes, o.hook, o.explicit) == ("auto", "triton", "sglang-megamoe-dsv4-fp4-auto-triton", False)
    text = r.render_text()
    assert "refused here on evidence: quant_unsupported" in text and "--moe-runner-backend deep_gemm" in text
    assert "silently overrides" not in text


def test_the_triton_fallback_is_refused_for_fp4_experts():
    r = _dsv4("0.5.16", 8192, runner="triton")
    assert r.plan is None and "quant_unsupported" in report_codes(r)


@pytest.mark.parametrize("version, tokens, cap", [("0.5.17", 2048, 1024), ("0.5.18", 16384, 8192), ("0.5.20", 9000, 8192),
                                                  ("0.5.23", 16384, 8192)])
def test_startup_budget_check_refuses_a_chunk_over_the_cap(version, tokens, cap):
    r = _dsv4(version, tokens)
    said = _cap_refusal(r)
    assert r.plan is None and said, report_codes(r)
    assert f"{tokens} is above a2a_capacity ({cap})" in said[0] and VAR in said[0]
    fix = next(x.fix for x in r.reasons if x.source.startswith("backends/a2a/megamoe.yaml"))
    assert fix and VAR in fix
    # raising the variable to the chunk clears it
    ok = _dsv4(version, tokens, a2a_capacity=tokens)
    assert not _cap_refusal(ok) and ok.plan is not None, report_codes(ok)


@pytest.mark.parametrize("version, tokens", [("0.5.16", 16384), ("0.5.18", 8192), ("0.5.17", 1024)])
def test_no_budget_refusal_where_sglang_checks_none_or_it_fits(version, tokens):
    r = _dsv4(version, tokens)
    assert not _cap_refusal(r) and r.plan is not None, report_codes(r)


def test_a_model_sglang_lets_fall_back_has_no_budget_before_0_5_21():
    """DeepSeek-V3 (FP8 block) under megamoe at 0.5.17 .. 0.5.20: no startup check, its block falls back per forward."""
    dep = {"gpu": "B200", "engine": "sglang", "model_config": DSV3, "tp": 8, "ep": 8, "a2a": "megamoe",
           "max_tokens_per_rank": 16384}
    for version in ("0.5.17", "0.5.20", "0.5.23"):
        r = moe_select.explain({**dep, "engine_version": version})
        assert not _cap_refusal(r) and r.plan is not None, (version, report_codes(r))
        assert r.plan.runner in {"deep_gemm", "triton"}


@pytest.mark.parametrize("version, refused", [("0.5.20", False), ("0.5.21", True), ("0.5.23", True)])
def test_qwen3_moe_has_no_fallback_from_0_5_21(version, refused):
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": version, "model_config": QWEN3_FP8,
                            "tp": 4, "ep": 4, "a2a": "megamoe", "max_tokens_per_rank": 16384})
    assert bool(_cap_refusal(r)) is refused, report_codes(r)


@pytest.mark.parametrize("gpu, version, refused", [("RTX PRO 6000", "0.5.21", True), ("RTX PRO 6000", "0.5.20", False),
                                                   ("H200", "0.5.23", False)])
def test_sglang_refuses_other_cuda_archs_from_0_5_21(gpu, version, refused):
    r = moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "model_config": DSV3, "tp": 8,
                            "ep": 8, "a2a": "megamoe", "max_tokens_per_rank": 4096})
    said = [x for x in r.reasons if x.code == "a2a_unsupported" and x.source.startswith("backends/a2a/megamoe.yaml")
            and "SM90" in x.detail]
    assert bool(said) is refused, report_codes(r)


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_megamoe_is_sglang_only(engine):
    r = moe_select.explain({"gpu": "B200", "engine": engine, "model_config": DSV3, "tp": 8, "ep": 8, "a2a": "megamoe"})
    assert r.plan is None
    assert any(x.code == "a2a_unsupported" and x.source.startswith("backends/a2a/megamoe.yaml") for x in r.reasons)


def test_ep_spans_tp():
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": "0.5.18", "model_config": DSV3,
                            "tp": 8, "ep": 4, "a2a": "megamoe", "max_tokens_per_rank": 4096})
    assert r.plan is None and any(x.code == "parallelism_unsupported" and "ep_size = tp_size" in x.detail
                                  for x in r.reasons), report_codes(r)


def test_a_launch_line_reads_and_writes_megamoe():
    from moe_select.launch_line import from_command

    line = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --moe-a2a-backend megamoe "
            "--chunked-prefill-size 4096")
    launch = from_command(line, model_config=DSV3, engine_version="0.5.18")
    assert launch.deployment["a2a"] == "megamoe"
    r = launch.explain(deployment={"gpu": "B200"})
    assert r.plan is not None and r.plan.a2a == "megamoe", report_codes(r)

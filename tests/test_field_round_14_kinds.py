"""Field round 14 of issue 21 (tests/cases/field_round_14.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. SGLang reaches DeepEP's low-latency dispatch ('Unsupported hidden', internode_ll.cu) even with --deepep-mode normal
   (sgl-project/sglang#19468): under SGLang the DeepEP 1.x low-latency hidden-size list holds in every a2a mode.
2. SGLang's AITER MXFP4 MoE engine-version wrong-output facts (backends/aiter.yaml): gpt-oss's interleaved gate/up
   W4A16 weights handed to AITER without a gate mode (SEPARATED) after ROCm/aiter PR #3123 (amd-aiter >=0.1.14), in
   SGLang 0.5.9 .. 0.5.12.post1 (sgl-project/sglang#26884, first in 0.5.13); and DeepSeek-style MXFP4 without the
   expert mask under expert parallelism before 0.5.7 (sgl-project/sglang#15304).
3. SGLang FP8 MoE on Ampere (sgl-project/sglang#18875): Triton admits fp8e4nv from sm89 only (triton.yaml negative row
   for sm7x/sm80/sm86 under SGLang), and SGLang has no FP8 Marlin MoE (marlin.yaml negative row, any NVIDIA arch).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import report_codes as _codes


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# --------------------------------------- kind 1: SGLang + DeepEP 1.x hidden sizes in normal mode (sglang#19468)
# A Qwen3-30B-like block-FP8 MoE widened to hidden 3072 (not MiniMax's model_config: another deployment of the kind),
# DeepGEMM's runner asked for (the planned one where the hidden size is built).
H3072 = {"num_experts": 128, "top_k": 8, "hidden_size": 3072, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _deepep(engine: str, mode: str, deep_ep: str, model: dict[str, Any] = H3072, gpu: str = "H200") -> Any:
    return moe_select.explain({"gpu": gpu, "engine": engine, "quant": "fp8_block", "model": model, "tp": 8, "ep": 8,
                               "a2a": "deepep", "a2a_mode": mode, "packages": {"deep_ep": deep_ep}, "runner": "deep_gemm"})


def test_sglang_deepep_1x_normal_refuses_hidden_outside_ll_list():
    """SGLang, DeepEP 1.2.1, normal mode, hidden 3072: refused as shape_unaligned at the deepep.yaml hidden-size row
    (which names sglang#19468); hidden 4096 (in the list) plans."""
    r = _deepep("sglang", "normal", "1.2.1")
    assert r.plan is None, _why(r)
    assert _codes(r) == {"shape_unaligned"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith("backends/a2a/deepep.yaml:"), reason.source
    assert "3072" in reason.detail and "Unsupported hidden" in reason.detail, reason.detail
    ok = _deepep("sglang", "normal", "1.2.1", model={**H3072, "hidden_size": 4096})
    assert ok.plan is not None and ok.plan.runner == "deep_gemm", _why(ok)


def test_sglang_deepep_normal_bound_is_1x_and_sglang_only():
    """The same deployment plans with DeepEP 2.x (3072 built) and under vLLM's deepep normal mode (vLLM pads the hidden
    size for its low-latency kernels and no report shows it reaching them in high-throughput mode)."""
    r = _deepep("sglang", "normal", "2.0.0")
    assert r.plan is not None and r.plan.runner == "deep_gemm", _why(r)
    v = _deepep("vllm", "normal", "1.2.1")
    assert not any(x.source.startswith("backends/a2a/deepep.yaml:") and x.code == "shape_unaligned"
                   for x in v.reasons), _why(v)


# --------------------------------------- kind 2: SGLang AITER MXFP4 wrong output by engine version (sglang#26884, #15304)
GPT_OSS_20B = "examples/model_configs/openai__gpt-oss-20b"  # the round case uses gpt-oss-120b
# A Qwen3-30B-like MoE with MXFP4 experts (DeepSeek-style MXFP4 methods: SiLU/GELU), not the round case's DeepSeek shape.
MX = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
      "routing": "renormalize"}


def _aiter(sglang: str, aiter: str | None, **dep: Any) -> Any:
    d = {"gpu": "MI355X", "engine": "sglang", "engine_version": sglang, "tp": 1, "ep": 1, "a2a": "none",
         "runner": "aiter", **dep}
    if aiter is not None:
        d["packages"] = {"amd-aiter": aiter}
    return moe_select.explain(d)


@pytest.mark.parametrize(("sglang", "aiter"), [("0.5.9", "0.1.14"), ("0.5.12.post1", "0.1.16")])
def test_gpt_oss_aiter_gate_mode_refused_before_0513(sglang, aiter):
    """gpt-oss-20b (swiglu_oai MXFP4) on MI355X, SGLang 0.5.9 / 0.5.12.post1 with AITER at or after PR #3123: refused
    (quant_unsupported at aiter.yaml's negative row, which cites sglang#26884)."""
    r = _aiter(sglang, aiter, model_config=GPT_OSS_20B)
    assert r.plan is None, _why(r)
    assert _codes(r) == {"quant_unsupported"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith("backends/aiter.yaml:"), reason.source


@pytest.mark.parametrize(("sglang", "aiter"), [("0.5.13", "0.1.16"), ("0.5.12", "0.1.13"), ("0.5.8", "0.1.16")])
def test_gpt_oss_aiter_gate_mode_bounds(sglang, aiter):
    """The fix's release (0.5.13), an AITER before PR #3123 (0.1.13), and SGLang before its interleaved a16w4 path
    (0.5.8) plan aiter."""
    r = _aiter(sglang, aiter, model_config=GPT_OSS_20B)
    assert r.plan is not None and r.plan.runner == "aiter", _why(r)


@pytest.mark.parametrize(("sglang", "act"), [("0.5.6.post2", "silu"), ("0.5.6", "gelu")])
def test_mxfp4_aiter_no_expert_mask_refused_with_ep_before_057(sglang, act):
    """SiLU/GELU MXFP4 experts under SGLang 0.5.6.x with the AITER MoE at TP 4 / EP 4: refused as
    parallelism_unsupported at aiter.yaml's ep row (naming the release bound)."""
    r = _aiter(sglang, "0.1.16", quant="mxfp4", model={**MX, "activation": act}, tp=4, ep=4)
    assert r.plan is None, _why(r)
    assert _codes(r) == {"parallelism_unsupported"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith("backends/aiter.yaml:") and "<0.5.7" in reason.detail, _why(r)


def test_mxfp4_aiter_expert_mask_bounds():
    """0.5.7 (expert_mask passed) plans at EP 4; 0.5.6 without expert parallelism (TP 4, EP 1) plans."""
    r = _aiter("0.5.7", "0.1.16", quant="mxfp4", model=MX, tp=4, ep=4)
    assert r.plan is not None and r.plan.runner == "aiter", _why(r)
    r = _aiter("0.5.6", "0.1.16", quant="mxfp4", model=MX, tp=4, ep=1)
    assert r.plan is not None and r.plan.runner == "aiter", _why(r)


# --------------------------------------- kind 3: SGLang FP8 MoE on Ampere (sglang#18875)
def _fp8(gpu: str, engine: str, runner: str, quant: str = "fp8_block") -> Any:
    return moe_select.explain({"gpu": gpu, "engine": engine, "quant": quant, "model": QWEN30_FP8, "tp": 1, "ep": 1,
                               "a2a": "none", "runner": runner})


# Qwen3-30B-A3B's routed experts (an inline model, not MiniMax's model_config).
QWEN30_FP8 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
              "routing": "renormalize"}


@pytest.mark.parametrize("gpu", ["A100", "A10"])
@pytest.mark.parametrize("quant", ["fp8_block", "fp8_tensor"])
def test_sglang_triton_fp8_refused_below_sm89(gpu, quant):
    """SGLang's Triton FP8 MoE on sm80 (A100) and sm86 (A10): arch_unsupported at triton.yaml's negative row."""
    r = _fp8(gpu, "sglang", "triton", quant)
    assert r.plan is None, _why(r)
    assert _codes(r) == {"arch_unsupported"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith("backends/triton.yaml:"), reason.source


def test_sglang_triton_fp8_plans_from_sm89():
    """The same deployment on L40S (sm89) and H100 (sm90) plans triton; bf16 on A100 plans triton."""
    for gpu in ("L40S", "H100"):
        r = _fp8(gpu, "sglang", "triton")
        assert r.plan is not None and r.plan.runner == "triton", _why(r)
    r = _fp8("A100", "sglang", "triton", "bf16")
    assert r.plan is not None and r.plan.runner == "triton", _why(r)


@pytest.mark.parametrize("gpu", ["A100", "H100"])
def test_sglang_marlin_fp8_moe_refused(gpu):
    """SGLang's Marlin MoE has no FP8 weight type: quant_unsupported at marlin.yaml on any NVIDIA arch; vLLM's FP8 Marlin
    MoE on A100 is not refused by it."""
    r = _fp8(gpu, "sglang", "marlin")
    assert r.plan is None, _why(r)
    assert _codes(r) == {"quant_unsupported"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith("backends/marlin.yaml:"), reason.source
    v = _fp8("A100", "vllm", "marlin")
    assert v.plan is not None and v.plan.runner == "marlin", _why(v)


def test_sglang_fp8_moe_on_ampere_auto_refused():
    """Runner auto for block-FP8 on A100 under SGLang: no plan (neither triton nor marlin eligible)."""
    r = _fp8("A100", "sglang", "auto")
    assert r.plan is None, _why(r)
    srcs = {x.source.split(":")[0] for x in r.reasons}
    assert {"backends/triton.yaml", "backends/marlin.yaml"} <= srcs, _why(r)

"""Field round 18 of issue 21 (tests/cases/field_round_18.yaml), the DeepEP cases fixed as kinds: each kind a round
case missed, tested on other deployments of the same kind than the round's case, on both sides of each bound. All
three facts are in backends/a2a/deepep.yaml.

1. SGLang's DeepEPMoE needs DeepGEMM on every CUDA path (low_latency/auto assert ENABLE_JIT_DEEPGEMM when the layer is
   built, normal mode at the first forward), and SGLang turns DeepGEMM off below sm90: DeepEP under SGLang
   0.4.10 .. 0.5.11 is refused on sm7x/sm8x for every runner (sgl-project/sglang#12320). 0.4.9.x had a Triton
   normal-mode fallback and 0.5.12 a BF16 one: outside the bound.
2. SGLang 0.5.4 .. 0.5.4.post3 runs an NVFP4 MoE over DeepEP only through flashinfer_cutedsl in low_latency mode, which
   asserts at the first forward by default (sgl-project/sglang#12353, fixed in 0.5.5); its other DeepEP paths assert
   DeepGEMM FP8: NVFP4 over DeepEP is refused there for every runner.
3. DeepEP's low_latency hidden sizes by version (deepseek-ai/DeepEP#329 added 6144 inside the 1.1.0 line): the 1.x row
   held v1.2.1's list for every version below 2.0.0; now 1.2.x, 1.1.0 (no 6144) and 1.0.0 (2560, 4096, 5120, 7168)
   each have their own list under SGLang, which passes the model's hidden size unpadded (vLLM pads it).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS

QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
QWEN_FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
QWEN_NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
QWEN235_FP8 = str(CONFIGS / "Qwen__Qwen3-235B-A22B-FP8")
DEEPSEEK_NVFP4 = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")
DEEPEP = "backends/a2a/deepep.yaml:"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _deepep_reasons(r: Any) -> list[Any]:
    """The reasons of the report that deepep.yaml's facts give."""
    return [x for x in r.reasons if (x.source or "").startswith(DEEPEP)]


# ------------------------------------------------------ kind 1: SGLang's DeepEPMoE needs DeepGEMM, which is sm90+
EP4 = dict(engine="sglang", tp=4, ep=4, a2a="deepep", runner="auto")


@pytest.mark.parametrize(("gpu", "version", "config", "mode"), [
    ("A100", "0.5.8", QWEN, "normal"),          # sm80, bf16, normal mode: the first-forward assert
    ("L40S", "0.4.10", QWEN_FP8, "low_latency"),  # sm89, block FP8, low_latency: the startup assert (lower bound)
    ("A100", "0.5.11", QWEN_FP8, "auto"),       # upper bound
])
def test_deepep_below_sm90_refused_in_sglang(gpu, version, config, mode):
    """DeepEP under SGLang 0.4.10 .. 0.5.11 below sm90: refused for every runner (a2a_unsupported from the a2a file),
    whatever the format and mode."""
    r = _explain(**EP4, gpu=gpu, engine_version=version, model_config=config, a2a_mode=mode,
                 **({"phase": "decode"} if mode == "low_latency" else {}))
    assert r.plan is None
    hits = _deepep_reasons(r)
    assert hits and {x.code for x in hits} == {"a2a_unsupported"}
    assert all("DeepGEMM" in x.detail and "sm8x" in x.detail for x in hits)
    assert {c.backend for c in r.candidates if not any((x.source or "").startswith(DEEPEP) for x in c.reasons)} == set()


@pytest.mark.parametrize("version", ["0.4.9", "0.5.12"])
def test_deepep_below_sm90_outside_the_read_bound_not_refused(version):
    """0.4.9 (Triton normal-mode fallback) and 0.5.12 (BF16 fallback) are outside the bound: the row does not refuse."""
    r = _explain(**EP4, gpu="A100", engine_version=version, model_config=QWEN, a2a_mode="normal")
    assert not _deepep_reasons(r)
    assert r.plan is not None


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_deepep_on_sm90_planned_in_sglang_0_5_4(gpu):
    """The same kind of deployment on sm90 (DeepGEMM on) at 0.5.4: planned with deep_gemm, supported."""
    r = _explain(**EP4, gpu=gpu, engine_version="0.5.4", model_config=QWEN_FP8, a2a_mode="auto")
    assert r.plan is not None and r.plan.runner == "deep_gemm" and r.plan.evidence == "supported"
    assert not _deepep_reasons(r)


# ------------------------------------------------- kind 2: NVFP4 over DeepEP in SGLang 0.5.4.x (cutedsl asserts)
EP8_LL = dict(engine="sglang", gpu="B200", tp=8, ep=8, a2a="deepep", a2a_mode="low_latency", phase="decode")


@pytest.mark.parametrize(("version", "config", "runner"), [
    ("0.5.4.post2", DEEPSEEK_NVFP4, "flashinfer_cutedsl"),
    ("0.5.4.post3", QWEN_NVFP4, "auto"),
    ("0.5.4", QWEN_NVFP4, "flashinfer_cutedsl"),
])
def test_nvfp4_over_deepep_refused_in_sglang_0_5_4(version, config, runner):
    """An NVFP4 MoE over DeepEP low_latency at SGLang 0.5.4 .. 0.5.4.post3: refused (a2a_unsupported), asked for
    flashinfer_cutedsl or not."""
    r = _explain(**EP8_LL, engine_version=version, model_config=config, runner=runner)
    assert r.plan is None
    hits = _deepep_reasons(r)
    assert hits and {x.code for x in hits} == {"a2a_unsupported"}
    assert all("SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH" in x.detail for x in hits)


@pytest.mark.parametrize("version", ["0.5.3", "0.5.5"])
def test_nvfp4_over_deepep_planned_around_0_5_4(version):
    """0.5.3 (BF16 dispatch) and 0.5.5 (the fix): the same deployment is planned with flashinfer_cutedsl."""
    r = _explain(**EP8_LL, engine_version=version, model_config=QWEN_NVFP4, runner="flashinfer_cutedsl")
    assert not _deepep_reasons(r)
    assert r.plan is not None and r.plan.runner == "flashinfer_cutedsl"


def test_fp8_over_deepep_in_0_5_4_not_refused_by_the_nvfp4_row():
    """Block FP8 over DeepEP low_latency at 0.5.4 on B200 (DeepGEMM's masked path): planned."""
    r = _explain(**EP8_LL, engine_version="0.5.4", model_config=QWEN_FP8, runner="auto")
    assert not _deepep_reasons(r)
    assert r.plan is not None and r.plan.runner == "deep_gemm"


# ------------------------------------------------------------ kind 3: DeepEP's low_latency hidden sizes by version
EP8 = dict(engine="sglang", engine_version="0.5.2", tp=8, ep=8, a2a="deepep", runner="auto")
HIDDEN_6144 = {"num_experts": 160, "top_k": 8, "hidden_size": 6144, "moe_intermediate_size": 2560, "activation": "silu",
               "routing": "renormalize"}


def _hidden_refusals(r: Any) -> set[str]:
    return {x.source for x in _deepep_reasons(r) if x.code == "shape_unaligned" and "hidden_size" in x.detail}


@pytest.mark.parametrize(("deep_ep", "mode"), [("1.1.0", "normal"), ("1.0.0", "low_latency")])
def test_hidden_6144_refused_before_deep_ep_1_2(deep_ep, mode):
    """Hidden 6144 (a Qwen3-Coder-shaped block-FP8 MoE) on B200 with DeepEP 1.1.0 (normal mode: SGLang reaches the
    low_latency kernels there too, field round 14) or 1.0.0: refused, shape_unaligned, by the version's own row."""
    r = _explain(**EP8, gpu="B200", model=HIDDEN_6144, quant="fp8_block", a2a_mode=mode, packages={"deep_ep": deep_ep},
                 **({"phase": "decode"} if mode == "low_latency" else {}))
    assert r.plan is None
    srcs = _hidden_refusals(r)
    assert len(srcs) == 1, srcs
    assert "6144" in next(x.detail for x in _deepep_reasons(r) if x.code == "shape_unaligned")


@pytest.mark.parametrize("deep_ep", ["1.2.0", "1.2.1"])
def test_hidden_6144_planned_from_deep_ep_1_2(deep_ep):
    """The same shape on H200 over low_latency with DeepEP 1.2.0 / 1.2.1: planned (deep_gemm)."""
    r = _explain(**EP8, gpu="H200", model=HIDDEN_6144, quant="fp8_block", a2a_mode="low_latency", phase="decode",
                 packages={"deep_ep": deep_ep})
    assert not _hidden_refusals(r)
    assert r.plan is not None and r.plan.runner == "deep_gemm"


def test_hidden_2048_refused_at_deep_ep_1_0_planned_at_1_1():
    """Qwen3-30B-A3B (hidden 2048): no 1.0.0 build has 2048 (refused); 1.1.0 has it from 7b0c25f on (planned)."""
    kw = dict(**EP8, gpu="H200", model_config=QWEN_FP8, a2a_mode="low_latency", phase="decode")
    old = _explain(**kw, packages={"deep_ep": "1.0.0"})
    assert old.plan is None and len(_hidden_refusals(old)) == 1
    new = _explain(**kw, packages={"deep_ep": "1.1.0"})
    assert not _hidden_refusals(new) and new.plan is not None


def test_hidden_4096_kept_at_deep_ep_1_0():
    """Qwen3-235B-A22B (hidden 4096) with DeepEP 1.0.0: 4096 came within 1.0.0 (a107266) and no report shows it
    missing: not refused."""
    r = _explain(**EP8, gpu="H200", model_config=QWEN235_FP8, a2a_mode="low_latency", phase="decode",
                 packages={"deep_ep": "1.0.0"})
    assert not _hidden_refusals(r) and r.plan is not None


def test_hidden_6144_with_old_deep_ep_not_refused_in_vllm():
    """vLLM pads the hidden size to a DeepEP size itself: the SGLang rows do not refuse it (6144 at deep_ep 1.1.0)."""
    r = _explain(engine="vllm", engine_version="0.11.0", gpu="H200", tp=1, dp=8, ep=8, a2a="deepep",
                 a2a_mode="low_latency", phase="decode", runner="auto", model=HIDDEN_6144, quant="fp8_block",
                 packages={"deep_ep": "1.1.0"})
    assert not _hidden_refusals(r)

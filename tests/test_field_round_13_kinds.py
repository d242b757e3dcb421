"""Field round 13 of issue 21 (tests/cases/field_round_13.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. nvidia-cutlass-dsl 4.5.0 lowers CuTe-DSL's warp-level FP4 block-scaled MMA (the SM120/121 b12x kernels) to PTX that
   ptxas rejects on sm_120a/121a; 4.5.1 fixes it (NVIDIA/cutlass#3227). Before 4.5.0 the op admits sm_120a only, so
   SM121 needs 4.5.0 or later. A package need on every runner that runs FlashInfer's b12x kernels on SM12x
   (flashinfer_b12x, trtllm_cutedsl's SM120/121 path), refused as dependency_missing.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
# Qwen3-30B-A3B's routed experts (another deployment than the round's model_config case: an inline model).
QWEN30 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
          "routing": "renormalize"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# ------------------------------------------------- kind 1: nvidia-cutlass-dsl 4.5.0 x SM12x FP4 MMA (cutlass#3227)
def _b12x(gpu: str, runner: str, engine: str, cutlass_dsl: str) -> Any:
    return _explain(gpu=gpu, engine=engine, quant="nvfp4", model=QWEN30, runner=runner,
                    packages={"flashinfer-python": "0.6.11", "nvidia-cutlass-dsl": cutlass_dsl})


@pytest.mark.parametrize(("runner", "engine", "yaml"), [("flashinfer_b12x", "vllm", "flashinfer_b12x.yaml"),
                                                         ("trtllm_cutedsl", "trtllm", "trtllm_cutedsl.yaml")])
@pytest.mark.parametrize("gpu", ["RTX PRO 6000", "GB10"])
def test_b12x_refused_on_cutlass_dsl_450(runner, engine, yaml, gpu):
    """NVFP4 Qwen3-30B-shaped MoE on SM120 and SM121 with FlashInfer's b12x kernels (vLLM flashinfer_b12x, TensorRT-LLM
    CUTEDSL) and nvidia-cutlass-dsl 4.5.0: refused (dependency_missing at the runner's !=4.5.0 need, naming the installed
    version); 4.5.1 plans."""
    r = _b12x(gpu, runner, engine, "4.5.0")
    assert r.plan is None, _why(r)
    assert _codes(r) == {"dependency_missing"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith(f"backends/{yaml}:")
    assert "nvidia-cutlass-dsl !=4.5.0; 4.5.0 is installed" in reason.detail
    ok = _b12x(gpu, runner, engine, "4.5.1")
    assert ok.plan is not None and ok.plan.runner == runner, _why(ok)


@pytest.mark.parametrize(("runner", "engine"), [("flashinfer_b12x", "vllm"), ("trtllm_cutedsl", "trtllm")])
def test_b12x_sm121_needs_cutlass_dsl_450(runner, engine):
    """Before 4.5.0 the DSL's SM120 block-scaled MMA admits sm_120a only: 4.4.2 is refused on GB10 (sm121, naming the
    >=4.5.0 need) and planned on an RTX PRO 6000 (sm120)."""
    r = _b12x("GB10", runner, engine, "4.4.2")
    assert _codes(r) == {"dependency_missing"}, _why(r)
    (reason,) = r.reasons
    assert "nvidia-cutlass-dsl >=4.5.0; 4.4.2 is installed" in reason.detail
    ok = _b12x("RTX PRO 6000", runner, engine, "4.4.2")
    assert ok.plan is not None and ok.plan.runner == runner, _why(ok)


def test_cutlass_dsl_450_bound_is_sm12x_only():
    """trtllm_cutedsl's SM100 path (tcgen05 CuTe-DSL kernels, not the b12x ones) plans with 4.5.0; an undeclared
    nvidia-cutlass-dsl is assumed, not refused."""
    r = _b12x("B200", "trtllm_cutedsl", "trtllm", "4.5.0")
    assert r.plan is not None and r.plan.runner == "trtllm_cutedsl", _why(r)
    r = _explain(gpu="GB10", engine="vllm", quant="nvfp4", model=QWEN30, runner="flashinfer_b12x",
                 packages={"flashinfer-python": "0.6.11"})
    assert r.plan is not None and r.plan.runner == "flashinfer_b12x", _why(r)

"""Field round 28 (tests/cases/field_round_28.yaml), the miss fixed as a kind: SGLang's FP8 MoE method loads MXFP8
expert weights only on SM100 (device major 10) or ROCm gfx95 (``_process_mxfp8_moe_weights`` raises 'MXFP8 MoE
quantization requires SM100' at load, whatever the runner; read in the sglang wheels 0.5.10 .. 0.5.23), so SGLang's
MXFP8 runners that had no row there (cutlass, deep_gemm) are refused on every other NVIDIA GPU, with the fix."""
from __future__ import annotations

import pytest

import moe_select

MINIMAX = {"num_experts": 128, "top_k": 4, "hidden_size": 6144, "moe_intermediate_size": 3072, "activation": "silu"}


def _explain(**over):
    return moe_select.explain({"engine": "sglang", "quant": "mxfp8", "model": MINIMAX, "tp": 2, **over})


@pytest.mark.parametrize("arch", ["sm120", "sm121", "sm90", "sm89", "sm80", "sm110"])
@pytest.mark.parametrize("runner", ["cutlass", "deep_gemm"])
def test_sglang_mxfp8_off_sm100_is_refused_for_its_runners(arch, runner):
    r = _explain(arch=arch, runner=runner)
    assert r.plan is None
    c = next(c for c in r.candidates if c.backend == runner)
    reason = next(x for x in c.reasons if x.code == "arch_unsupported" and "_process_mxfp8_moe_weights" in x.detail)
    assert reason.source.startswith(f"backends/{runner}.yaml:")
    assert "SGLANG_FORCE_MXFP8_BLOCK_CONVERT=1" in reason.fix


@pytest.mark.parametrize("arch", ["sm120", "sm90"])
def test_auto_has_no_runner_left_for_sglang_mxfp8_off_sm100(arch):
    r = _explain(arch=arch)
    assert r.plan is None and r.status == "rejected"


def test_sm100_and_other_engines_are_outside_the_row():
    r = _explain(arch="sm100", runner="cutlass")
    assert not any("_process_mxfp8_moe_weights" in x.detail for c in r.candidates for x in c.reasons)
    v = moe_select.explain({"engine": "vllm", "quant": "mxfp8", "model": MINIMAX, "tp": 2, "arch": "sm120",
                            "runner": "cutlass"})
    assert not any("_process_mxfp8_moe_weights" in x.detail for c in v.candidates for x in c.reasons)

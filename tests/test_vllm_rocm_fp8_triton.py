"""vLLM's Triton FP8 MoE on CDNA1/CDNA2 (MI100 gfx908, MI200 gfx90a), as the wheels gate it (backends/triton.yaml):

- 0.14.1: the FP8 oracle falls through to TRITON on ROCm without AITER (no device test);
- 0.15.0 .. 0.26.x: TritonExperts takes FP8 on on_gfx9() (gfx90a, gfx942, gfx950), then supports_fp8() (on_gfx9() or
  gfx12) from 0.20.0: gfx908 is refused there, gfx90a is not (the list's note once said 'not gfx90a');
- 0.27.0 on: supports_fp8() is on_cdna() (any gfx9) with gfx12 / RDNA4: gfx908 again.
RDNA3 (gfx1100) stays refused from 0.15.0.
"""
from __future__ import annotations

import pytest

import moe_select

MIXTRAL = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu",
           "routing": "renormalize"}


def _triton(arch, version, quant="fp8_channel"):
    r = moe_select.explain({"arch": arch, "engine": "vllm", "engine_version": version, "quant": quant, "model": MIXTRAL,
                            "tp": 4, "runner": "triton"})
    return r, next(c for c in r.candidates if c.backend == "triton")


@pytest.mark.parametrize("arch, version, runs", [
    ("gfx90a", "0.14.1", True), ("gfx90a", "0.15.0", True), ("gfx90a", "0.20.0", True), ("gfx90a", "0.28.0", True),
    ("gfx908", "0.14.1", True), ("gfx908", "0.15.0", False), ("gfx908", "0.26.0", False), ("gfx908", "0.27.0", True),
    ("gfx1100", "0.15.0", False), ("gfx1100", "0.28.0", False)])
@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel", "fp8_block"])
def test_triton_fp8_on_cdna_follows_the_device_gate(arch, version, runs, quant):
    r, c = _triton(arch, version, quant)
    if runs:
        assert r.plan is not None and r.plan.runner == "triton", r.summary()
    else:
        assert r.plan is None
        assert any(x.code == "quant_unsupported" and x.source.startswith("backends/triton.yaml:") for x in c.reasons), \
            [(x.code, x.detail, x.source) for x in c.reasons]

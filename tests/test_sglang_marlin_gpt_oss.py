"""SGLang's Marlin MoE runner and gpt-oss's SwiGLU (backends/marlin.yaml, activations): 0.5.12 .. 0.5.13.post1 run an
MXFP4 (and from 0.5.13 an NVFP4) layer on Marlin without the expert biases and with silu(gate) * up (clamped) instead
of gate * sigmoid(1.702 * gate) * (up + 1): wrong output without an error, so refused; 0.5.14 passes the biases,
gemm1_alpha and the clamp (read in the wheels)."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
GPT_OSS = str(ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b")


def _marlin(version):
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": version, "model_config": GPT_OSS,
                            "runner": "marlin"})
    return r, next(c for c in r.candidates if c.backend == "marlin")


@pytest.mark.parametrize("version", ["0.5.12", "0.5.13", "0.5.13.post1"])
def test_marlin_without_biases_and_alpha_is_refused(version):
    r, c = _marlin(version)
    assert r.plan is None
    assert any(x.code == "activation_unsupported" and x.source.startswith("backends/marlin.yaml:")
               and "swiglu_oai" in x.detail for x in c.reasons), [(x.code, x.detail, x.source) for x in c.reasons]


def test_marlin_from_0_5_14_runs_it():
    r, _ = _marlin("0.5.14")
    assert r.plan is not None and r.plan.runner == "marlin" and r.plan.evidence == "supported", r.summary()

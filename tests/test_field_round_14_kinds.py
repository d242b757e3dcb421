"""Field round 14 of issue 21 (tests/cases/field_round_14.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. SGLang reaches DeepEP's low-latency dispatch ('Unsupported hidden', internode_ll.cu) even with --deepep-mode normal
   (sgl-project/sglang#19468): under SGLang the DeepEP 1.x low-latency hidden-size list holds in every a2a mode.
"""
from __future__ import annotations

from typing import Any

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

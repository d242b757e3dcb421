"""Field round 47 of issue 21 (tests/cases/field_round_47.yaml), fixed as kinds (backends/common.yaml ``methods``, the
``ep_per_dp`` quantity), each tested on deployments other than the round's cases; read in the SGLang PyPI wheels
0.5.10.post1 .. 0.5.13.

With DP attention (dp > 1), no all-to-all and ep == dp, SGLang reduce-scatters the MoE output instead of all-reducing
it (should_use_dp_reduce_scatterv, from 0.5.11):
- 0.5.12 / 0.5.12.post1: DeepSeek-V4's own return path never reduces (each rank keeps its experts' partial sum);
- 0.5.11: the dense MLP layers of a DeepSeek checkpoint are summed twice in every prefill.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
R1 = str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-R1")
QWEN = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B")
V4 = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu",
      "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}
V4_DEP = {"gpu": "B200", "engine": "sglang", "quant": "fp8_block", "model": V4, "tp": 8, "ep": 8, "dp": 8, "a2a": "none"}
R1_DEP = {"gpu": "H200", "engine": "sglang", "model_config": R1, "tp": 8, "ep": 8, "dp": 8, "a2a": "none"}
V4_WHY = "its own return path (dp_scatter) never does"
DENSE_WHY = "dense MLP layers"


def _refused(report, needle: str) -> bool:
    return any(r.code == "parallelism_unsupported" and needle in r.detail for r in report.reasons)


@pytest.mark.parametrize("version, refused", [("0.5.11", False), ("0.5.12", True), ("0.5.12.post1", True),
                                              ("0.5.13", False)])
def test_deepseek_v4_reduce_scatter_by_release(version, refused):
    r = moe_select.explain({**V4_DEP, "engine_version": version})
    assert _refused(r, V4_WHY) is refused, (version, report_codes(r))


@pytest.mark.parametrize("change", [{"ep": 4}, {"dp": 1, "ep": 8}, {"a2a": "deepep"}, {"quant": "nvfp4"},
                                    {"model": {**V4, "architecture": "DeepseekV3ForCausalLM"}}])
def test_deepseek_v4_fact_needs_each_condition(change):
    """ep != dp, no DP attention, an all-to-all, the FlashInfer CUTLASS FP4 all-gather path's format, another block."""
    r = moe_select.explain({**V4_DEP, "engine_version": "0.5.12", **change})
    assert not _refused(r, V4_WHY), (change, report_codes(r))


def test_deepseek_v4_dp_unstated_is_assumed():
    dep = {k: v for k, v in V4_DEP.items() if k != "dp"}
    r = moe_select.explain({**dep, "engine_version": "0.5.12"})
    assert not _refused(r, V4_WHY), report_codes(r)
    assert r.plan is not None and any("dp not given" in a and V4_WHY in a for a in r.plan.assumptions), r.plan


@pytest.mark.parametrize("version, refused", [("0.5.10.post1", False), ("0.5.11", True), ("0.5.12", False)])
def test_deepseek_dense_layers_summed_twice_by_release(version, refused):
    r = moe_select.explain({**R1_DEP, "engine_version": version})
    assert _refused(r, DENSE_WHY) is refused, (version, report_codes(r))


@pytest.mark.parametrize("change", [{"ep": 4}, {"a2a": "deepep"}, {"model_config": QWEN}])
def test_dense_fact_needs_each_condition(change):
    """ep != dp, an all-to-all, or a checkpoint without dense layers (Qwen3-30B-A3B: every layer MoE)."""
    r = moe_select.explain({**R1_DEP, "engine_version": "0.5.11", **change})
    assert not _refused(r, DENSE_WHY), (change, report_codes(r))

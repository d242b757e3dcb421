"""Field round 46 of issue 21 (tests/cases/field_round_46.yaml), fixed as kinds, each tested on deployments other than
the round's cases; read in the vLLM PyPI wheels 0.12.0 and 0.34.0.

- vLLM's NVFP4 MoE methods shard w2's scales by ``intermediate_size_per_partition // 16`` groups per rank: a per-rank
  intermediate that is no multiple of 16 misaligns every rank after the first, whichever runner (backends/common.yaml).
- vLLM's GPTQ / AWQ (and, read at 0.34.0, compressed-tensors) Marlin MoE prep permutes w13's scales with the per-rank
  intermediate as K: where it equals the group size the single-group layout is taken (wrong output;
  backends/marlin.yaml).
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

NANO = {"num_experts": 128, "top_k": 6, "hidden_size": 2688, "moe_intermediate_size": 1856, "activation": "relu2",
        "routing": "deepseek_v3", "num_shared_experts": 1, "architecture": "NemotronHForCausalLM"}
NVFP4 = "scales of other values"


def _nvfp4_refused(report) -> bool:
    return any(r.code == "shape_unaligned" and "intermediate_per_rank = " in r.detail and "nvfp4" in r.detail
               and "vllm >=0.12.0" in r.detail for r in report.reasons)


@pytest.mark.parametrize("engine, version, tp, ep, refused", [
    ("vllm", "0.34.0", 8, 1, True),      # 1856 / 8 = 232: no multiple of 16
    ("vllm", "0.12.0", 8, 1, True),
    ("vllm", "0.34.0", 4, 1, False),     # 464 = 29 x 16
    ("vllm", "0.34.0", 8, 8, False),     # expert parallelism: the whole 1856 per rank
    ("vllm", "0.11.0", 8, 1, False),     # not read before 0.12.0
    ("sglang", "0.5.23", 8, 1, False),   # another engine's loader: not this fact
])
def test_vllm_nvfp4_scale_groups_per_rank(engine, version, tp, ep, refused):
    dep = {"gpu": "B200", "engine": engine, "engine_version": version, "quant": "nvfp4", "model": NANO, "tp": tp,
           "ep": ep, "dp": 1, "a2a": "none"}
    r = moe_select.explain(dep)
    assert _nvfp4_refused(r) is refused, (engine, version, tp, ep, report_codes(r))


GPTQ = {"num_experts": 64, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1024, "activation": "silu",
        "routing": "renormalize"}


def _marlin_refused(report) -> bool:
    return any(r.code == "shape_unaligned" and r.backend == "marlin" and "w13 scales" in r.detail for r in report.reasons)


@pytest.mark.parametrize("layout, group, intermediate, tp, version, refused", [
    ("gptq", 128, 1024, 8, "0.34.0", True),     # 128 per rank == group 128
    ("gptq", 128, 1024, 4, "0.34.0", False),    # 256 per rank: groups along the rank's K
    ("gptq", 64, 512, 8, "0.34.0", True),       # 64 per rank == group 64
    ("awq", 128, 1024, 8, "0.12.0", True),
    ("gptq", 128, 1024, 8, "0.11.0", False),    # not read before 0.12.0
    ("compressed-tensors", 128, 1024, 8, "0.34.0", True),
    ("compressed-tensors", 128, 1024, 8, "0.33.0", False),   # compressed-tensors read at 0.34.0 only
])
def test_vllm_marlin_w13_scale_permutation(layout, group, intermediate, tp, version, refused):
    dep = {"gpu": "A100", "engine": "vllm", "engine_version": version, "quant": "int4_w4a16",
           "quant_config": {"group_size": group, "layout": layout}, "model": {**GPTQ, "moe_intermediate_size": intermediate},
           "tp": tp, "ep": 1, "dp": 1, "a2a": "none", "runner": "marlin"}
    r = moe_select.explain(dep)
    assert _marlin_refused(r) is refused, (layout, group, intermediate, tp, version, report_codes(r))


def test_other_runners_still_run_the_layer():
    """The fact is Marlin's prep: with runner auto another runner is planned (vLLM's Triton WNA16 experts)."""
    r = moe_select.explain({"gpu": "A100", "engine": "vllm", "engine_version": "0.34.0", "quant": "int4_w4a16",
                            "quant_config": {"group_size": 128, "layout": "gptq"}, "model": GPTQ, "tp": 8, "ep": 1,
                            "dp": 1, "a2a": "none"})
    assert r.status == "ok" and r.plan is not None and r.plan.runner != "marlin", report_codes(r)
    assert _marlin_refused(r)

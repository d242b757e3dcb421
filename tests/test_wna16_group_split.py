"""A weight-only int MoE layer whose per-rank intermediate splits a scale group (backends/common.yaml, "weight-only int
group scales"), per engine, checkpoint layout and release, as an independent checker read the vLLM 0.8.4 .. 0.34.0 and
SGLang 0.4.10 .. 0.5.13 wheels (2026-12-04). The one row this replaces refused every engine on one vLLM report
(vllm-project/vllm#17604, vLLM of May 2025); vLLM 0.13.0 fits its MoeWNA16 kernel's K block to the halved group, and
SGLang's MoeWNA16 runs Triton with K masked, so Qwen3-30B-A3B-AWQ at TP 4 (192 rows per rank, group 128) starts there.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
AWQ = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-AWQ")
QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _group_reasons(r):
    return [x for c in r.candidates for x in c.reasons
            if x.code == "shape_unaligned" and x.source.startswith("backends/common.yaml:") and "intermediate_per_rank" in x.detail]


@pytest.mark.parametrize("engine, version, tp, refused", [
    ("vllm", "0.12.0", 4, True),      # block_size_k 128 on K 192 ('size_k must divisible by BLOCK_SIZE_K')
    ("vllm", "0.13.0", 4, False),     # _ensure_block_size_k_divisible: 64 on the group halved to 64
    ("vllm", "0.28.0", 4, False),
    ("vllm", "0.13.0", 8, True),      # 96 rows: the group halves to 32, the kernel refuses the ratio
    ("sglang", "0.5.13", 4, False),   # MoeWNA16 on Triton: the halved group, K masked
    ("sglang", "0.5.13", 8, False)])
def test_awq_group_split_per_engine_and_release(engine, version, tp, refused):
    r = moe_select.explain({"gpu": "H100", "engine": engine, "engine_version": version, "model_config": AWQ, "tp": tp})
    assert (r.plan is None) == refused, r.summary()
    assert bool(_group_reasons(r)) == refused, [(x.detail, x.source) for x in _group_reasons(r)]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_compressed_tensors_keeps_whole_groups_per_rank(engine):
    dep = {"gpu": "H100", "engine": engine, "quant": "int4_w4a16", "model": QWEN3, "tp": 4,
           "quant_config": {"group_size": 128, "layout": "compressed-tensors"}}
    r = moe_select.explain(dep)
    assert r.plan is None and _group_reasons(r), r.summary()
    assert moe_select.explain({**dep, "tp": 2}).plan is not None


def test_an_unstated_layout_is_undecided_and_rocm_awq_is_not_the_cuda_kernels():
    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "quant": "int4_w4a16", "model": QWEN3, "tp": 4,
                            "quant_config": {"group_size": 128}})
    assert r.plan is not None and r.plan.evidence == "unverified", r.summary()
    assert any("checkpoint_layout" in u.detail for u in r.plan.unknowns), [u.detail for u in r.plan.unknowns]
    rocm = moe_select.explain({"gpu": "MI300X", "engine": "vllm", "engine_version": "0.12.0", "quant": "int4_w4a16",
                               "model": QWEN3, "tp": 4, "quant_config": {"group_size": 128, "layout": "awq"}})
    assert not _group_reasons(rocm), [(x.detail, x.source) for x in _group_reasons(rocm)]


@pytest.mark.parametrize("version, tp, ep, refused", [("0.5.1", 2, 1, False), ("0.5.2", 2, 1, True), ("0.5.23", 4, 1, True),
                                                       ("0.5.23", 2, 2, False)])
def test_sglang_gptq_moe_with_split_experts(version, tp, ep, refused):
    """SGLang's GPTQ Marlin MoE method sizes w2's scale table with its act-order branches swapped from 0.5.2
    (sgl-project/sglang#13252: 'exceeds dimension size' at TP 2 on Qwen3-30B-A3B-GPTQ-Int4; #36822): refused wherever
    the experts' intermediate is split between ranks (moe_tp > 1), with whole experts per rank (ep = tp) not."""
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": version, "quant": "int4_w4a16",
                            "quant_config": {"group_size": 128, "layout": "gptq"}, "model": QWEN3, "tp": tp, "ep": ep})
    hit = [x for c in r.candidates for x in c.reasons
           if x.code == "parallelism_unsupported" and x.source.startswith("backends/common.yaml:") and "moe_tp" in x.detail]
    assert (r.plan is None) == refused and bool(hit) == refused, r.summary()

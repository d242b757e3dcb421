"""Field round 38 (tests/cases/field_round_38.yaml), fixed as a kind: a release whose MoE op's fake kernel disagrees
with a runner's output shape fails the first compiled forward. vLLM 0.20.1's TRT-LLM MXFP4 experts write the unpadded
hidden size while ``_moe_forward_fake`` returns the padded input's (gpt-oss-20b: 2880 vs 3072), so torch.compile,
which vLLM runs whenever CUDA graphs are on, asserts on the stride (vllm-project/vllm#41645; fixed in 0.21.0 by
vllm-project/vllm#41646): a cuda_graph fact of backends/flashinfer_trtllm.yaml."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
GPT_OSS = str(ROOT / "examples" / "model_configs" / "openai__gpt-oss-20b")


def _reasons(version: str, **dep):
    r = moe_select.explain({"gpu": "B200", "engine": "vllm", "engine_version": version, "model_config": GPT_OSS, "tp": 2,
                            "runner": "flashinfer_trtllm", **dep})
    return r, [x for c in r.candidates if c.backend == "flashinfer_trtllm" for x in c.reasons]


@pytest.mark.parametrize("version, refused", [("0.20.0", False), ("0.20.1", True), ("0.21.0", False)])
def test_vllm_0_20_1_trtllm_mxfp4_fails_under_compile(version, refused):
    r, reasons = _reasons(version)
    hit = [x for x in reasons if x.code == "cuda_graph_unsupported" and "flashinfer_trtllm.yaml" in x.source]
    assert bool(hit) == refused, r.summary()
    if refused:
        assert r.plan is None and "cuda_graph: false" in (hit[0].fix or "")


def test_eager_and_a_single_rank_are_not_touched():
    for dep in ({"cuda_graph": False}, {"tp": 1}):
        r, reasons = _reasons("0.20.1", **dep)
        assert not any(x.code == "cuda_graph_unsupported" for x in reasons), (dep, r.summary())

"""Online block FP8 and the 128 split (issue 21, vllm-project/vllm#44763).

vLLM quantizes a bf16 checkpoint to block FP8 at load (``--quantization fp8_per_block``, from 0.20.0) and, from 0.25.0,
rounds the MoE per-rank intermediate up to a multiple of 128 and zero-pads before quantizing
(``Fp8PerBlockOnlineMoEMethod.maybe_roundup_sizes``): Qwen3-30B-A3B at TP 4 (768 / 4 = 192 per rank) runs there and
failed before. A serialized block-FP8 checkpoint is never padded: the same split stays refused (``Fp8MoEMethod``).
The deployment says "made at load" as ``quant_params.online`` (facts: ``when: {online: ...}``).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.conditions import When

from conftest import CONFIGS

BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")


def _explain(model: str, version: str, tp: int, **extra: Any) -> Any:
    return moe_select.explain(dict(gpu="H200", engine="vllm", engine_version=version, model_config=model, tp=tp, ep=1,
                                   a2a="none", **extra))


def _unaligned(report: Any) -> list[Any]:
    return [r for r in report.reasons if r.code == "shape_unaligned" and "intermediate_per_rank" in r.detail]


def test_online_block_fp8_from_vllm_0_25_pads_the_192_rows():
    r = _explain(BF16, "0.25.0", 4, quant="fp8_block")
    assert r.plan is not None and not _unaligned(r)
    assert r.deployment.quant_params.get("online") is True


def test_online_block_fp8_before_vllm_0_25_is_refused_on_the_padding_fact():
    r = _explain(BF16, "0.24.0", 4, quant="fp8_block")
    assert r.plan is None
    why = _unaligned(r)
    assert why and all("vllm <0.25.0" in x.detail and x.source.startswith("backends/common.yaml:") for x in why)


def test_a_serialized_checkpoint_is_not_padded_at_any_version():
    """The checkpoint's own 128x128 blocks: 768 / 8 = 96 rows per rank split a block, in 0.25.0 too."""
    r = _explain(FP8, "0.25.0", 8)
    assert r.plan is None and _unaligned(r)
    assert "online" not in r.deployment.quant_params


@pytest.mark.parametrize("tp", [1, 2])
def test_online_block_fp8_that_splits_no_block_plans_in_every_release(tp):
    r = _explain(BF16, "0.20.0", tp, quant="fp8_block")
    assert r.plan is not None and not _unaligned(r)


def test_when_online_matches_only_deployments_that_quantize_at_load():
    assert When(online=True).matches({"online": True}) and not When(online=True).matches({"online": False})
    assert When(online=False).matches({"online": False}) and not When(online=False).matches({"online": True})

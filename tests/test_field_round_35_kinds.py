"""Field round 35 (tests/cases/field_round_35.yaml), fixed as kinds.

1. An all-to-all that fails at worker start in a range of engine releases for a launch default the deployment cannot
   state: vLLM 0.18.0 .. 0.23.x build nixl_ep only with elastic EP on (its TCP store group), fixed in 0.24.0
   (vllm-project/vllm#44422): backends/a2a/nixl.yaml ``unavailable``.
2. An engine's allow-list of checkpoint architectures for an all-to-all: SGLang's DeepEP V2 model registry, which grows
   by release (0.5.19 .. 0.5.23 read), refusing every other class at startup. The new condition
   ``when.architecture_not`` states it; a deployment that does not state its architecture is left unverified by it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.conditions import When

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
QWEN3 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")                  # Qwen3MoeForCausalLM
MINIMAX = str(CONFIGS / "MiniMaxAI__MiniMax-M2")              # MiniMaxM2ForCausalLM: in no release's registry
FP8_BLOCK = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
             "routing": "sigmoid_topk", "n_group": 8, "topk_group": 4}


def _codes(r) -> set[str]:
    return {x.code for c in r.candidates for x in c.reasons}


def _a2a_refusal(r, text: str) -> bool:
    return any(x.code == "a2a_unsupported" and text in x.detail for c in r.candidates for x in c.reasons)


@pytest.mark.parametrize("version, refused", [("0.18.0", True), ("0.22.1", True), ("0.23.0", True), ("0.24.0", False)])
def test_vllm_nixl_ep_needs_elastic_ep_before_0_24(version, refused):
    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version, "model_config": QWEN3,
                            "tp": 8, "ep": 8, "dp": 8, "a2a": "nixl"})
    hit = _a2a_refusal(r, "elastic-EP TCP store group")
    assert hit == refused, r.summary()
    if refused:
        assert r.plan is None
    else:
        assert r.plan is not None, r.summary()


def test_sglang_nixl_is_not_touched_by_the_vllm_fact():
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": "0.5.19", "model_config": QWEN3,
                            "tp": 8, "ep": 8, "a2a": "nixl", "max_tokens_per_rank": 512})
    assert not _a2a_refusal(r, "elastic-EP"), r.summary()


def _deepep_v2(version: str, **dep):
    # a decode batch stated: SGLang's own limit on an H200 at tp 8 (512) outgrows DeepEP V2's default 128 (field round 53)
    base = {"gpu": "H200", "engine": "sglang", "engine_version": version, "tp": 8, "ep": 8, "dp": 8, "a2a": "deepep_v2",
            "decode_tokens_per_rank": 64}
    return moe_select.explain({**base, **dep})


REGISTRY = "not validated for <architecture>"


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_deepep_v2_refuses_an_unregistered_architecture(version):
    r = _deepep_v2(version, model_config=MINIMAX)
    assert r.plan is None and _a2a_refusal(r, REGISTRY), r.summary()
    listed = _deepep_v2(version, model_config=QWEN3)
    assert not _a2a_refusal(listed, REGISTRY), listed.summary()


@pytest.mark.parametrize("architecture, first", [("Glm5NextForConditionalGeneration", "0.5.21"),
                                                 ("GlmMoeDsaForCausalLM", "0.5.22"), ("MiMoV2FlashForCausalLM", "0.5.22")])
def test_the_registry_grows_by_release(architecture, first):
    for version in ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"):
        r = _deepep_v2(version, quant="fp8_block", model={**FP8_BLOCK, "architecture": architecture})
        before = tuple(int(p) for p in version.split(".")) < tuple(int(p) for p in first.split("."))
        assert _a2a_refusal(r, REGISTRY) == before, (version, r.summary())


def test_deepep_v2_registry_past_the_newest_release_read_and_without_an_architecture():
    # newer than the releases read: the registry may have grown, so this fact does not refuse there
    newer = _deepep_v2("0.5.24", model_config=MINIMAX)
    assert not _a2a_refusal(newer, REGISTRY), newer.summary()
    # an inline model that does not say its architecture: not refused on the registry, not supported either
    r = _deepep_v2("0.5.21", quant="fp8_block", model=FP8_BLOCK)
    assert not _a2a_refusal(r, REGISTRY)
    unknowns = [u for c in r.candidates for u in c.unknowns if "not validated for" in u.detail]
    assert unknowns and all("architecture" in u.settle for u in unknowns), r.summary()
    assert r.plan is None or r.plan.evidence != "supported"


def test_architecture_not_condition():
    w = When(architecture_not=["Qwen3MoeForCausalLM"])
    assert w.matches({"architecture_not": "MiniMaxM2ForCausalLM"})
    assert not w.matches({"architecture_not": "Qwen3MoeForCausalLM"})
    assert not w.matches({})                   # unstated: matches no such condition (the selector leaves it undecided)
    assert w.describe() == "architecture not in [Qwen3MoeForCausalLM]"
    with pytest.raises(ValueError, match="not a model class name"):
        When(architecture_not=["not a class"])

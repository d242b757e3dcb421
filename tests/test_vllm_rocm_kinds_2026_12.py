"""Two public vLLM-on-ROCm failure reports the catalog answered wrongly (issue 21), fixed as kinds where the deployment
format can express them. The expectations are written by hand from the upstream code read (the PyPI wheels the fact
cites), not computed from the facts.

1. vllm-project/vllm#28942 (merged PR): DeepSeek with AITER's fused MoE and AITER's shared-expert fusion off. In the
   0.11.1 and 0.11.2 wheels DeepseekV2MoE builds no shared-expert MLP whenever AITER's fused MoE is on, and
   load_weights maps the checkpoint's shared experts only into fused expert slots: with the fusion off the weights have
   no parameter (KeyError at load). 0.11.0 has no AITER fusion (shared MLP always built, run first); 0.12.0 builds the
   shared MLP when the fusion is off and runs it before the routed experts. The deployment's shared_expert_fusion is
   vLLM's VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS: aiter refused (parallelism_unsupported, aiter.yaml) under
   vLLM 0.11.1 .. 0.11.2 for the DeepseekV2ForCausalLM classes with shared experts and the fusion off.
2. vllm-project/vllm#52715 (GPTQ int4 with group_size -1 on ROCm: MoeWNA16Method.create_weights divides by -1) is not
   a fact: a checkpoint's group_size -1 reaches the facts as no quant_group_size at all (formats.group_size: per output
   channel, None), the same as a format without groups, and quant_config's group_size must be positive, so no
   condition can select per-channel int4. Not tested here.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, refusals

R1 = "examples/model_configs/deepseek-ai__DeepSeek-R1"
V3 = "examples/model_configs/deepseek-ai__DeepSeek-V3"
QWEN15 = "examples/model_configs/Qwen__Qwen1.5-MoE-A2.7B-Chat"
# DeepSeek-V2-Lite's MoE shape (64 routed experts, top 6, hidden 2048, width 1408, two shared experts), bf16.
V2_LITE = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
           "routing": "softmax_topk", "num_shared_experts": 2}


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _aiter(**dep: Any) -> Any:
    return _explain(**{"engine": "vllm", "a2a": "none", "runner": "aiter", **dep})


def _cites_28942(x: Any) -> bool:
    return x.source.startswith("backends/aiter.yaml:") and "#28942" in x.detail


@pytest.mark.parametrize(("dep", "vllm"), [
    (dict(gpu="MI300X", model_config=R1, tp=8, ep=1), "0.11.1"),       # the report's deployment, released
    (dict(gpu="MI300X", model_config=R1, tp=8, ep=1), "0.11.2"),
    (dict(gpu="MI355X", model_config=V3, tp=8, ep=8), "0.11.2"),       # gfx950, expert parallel
    (dict(gpu="MI300X", model={**V2_LITE, "architecture": "DeepseekV2ForCausalLM"}, quant="bf16", tp=1, ep=1), "0.11.1"),
])
def test_vllm_deepseek_aiter_fusion_off_refused_0_11_1_to_0_11_2(dep, vllm):
    """DeepSeek-R1 / V3 (block FP8) and a bf16 DeepSeek-V2-Lite, fusion off, under 0.11.1 and 0.11.2: aiter refused
    (parallelism_unsupported, aiter.yaml), the reason naming the report."""
    r = _aiter(**dep, engine_version=vllm, shared_expert_fusion=False)
    assert r.plan is None
    detail = only_refusal(r, "aiter", "parallelism_unsupported", "aiter.yaml")
    assert "#28942" in detail and "0.12.0" in detail, detail


@pytest.mark.parametrize("vllm", ["0.11.0", "0.12.0", "0.13.0"])
def test_vllm_deepseek_aiter_fusion_off_planned_outside_bounds(vllm):
    """0.11.0 (no AITER fusion: the shared MLP is always built) and 0.12.0 / 0.13.0 (built when the fusion is off, run
    before the routed experts): DeepSeek-R1 with the fusion off is planned on aiter."""
    assert_planned(_aiter(gpu="MI300X", model_config=R1, tp=8, ep=1, engine_version=vllm, shared_expert_fusion=False),
                   "aiter")


@pytest.mark.parametrize("vllm", ["0.11.1", "0.11.2"])
def test_vllm_deepseek_aiter_fusion_on_planned(vllm):
    """The fusion on (vLLM's default VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=1) under 0.11.1 / 0.11.2: planned."""
    r = _aiter(gpu="MI300X", model_config=R1, tp=8, ep=1, engine_version=vllm, shared_expert_fusion=True)
    assert_planned(r, "aiter")
    assert not any(_cites_28942(x) for x in r.reasons)


def test_vllm_aiter_other_architecture_with_shared_experts_not_refused():
    """Qwen1.5-MoE (Qwen2MoeForCausalLM: a gated shared expert, its own model file) with the fusion off under 0.11.1:
    the DeepSeek fact does not hold; neither refused nor left unknown by it."""
    r = _aiter(gpu="MI300X", model_config=QWEN15, tp=1, ep=1, engine_version="0.11.1", shared_expert_fusion=False)
    assert "parallelism_unsupported" not in refusals(r, "aiter"), refusals(r, "aiter")
    assert not any(_cites_28942(u) for u in cand(r, "aiter").unknowns)


def test_vllm_deepseek_architecture_without_shared_experts_not_refused():
    """A DeepseekV2ForCausalLM-shaped model with no shared experts under 0.11.1: nothing to load, planned."""
    model = {**V2_LITE, "num_shared_experts": 0, "architecture": "DeepseekV2ForCausalLM"}
    r = _aiter(gpu="MI300X", model=model, quant="bf16", tp=1, ep=1, engine_version="0.11.1")
    assert_planned(r, "aiter")
    assert r.plan.evidence == "supported"


def test_vllm_aiter_architecture_unstated_is_unverified_not_refused():
    """An inline model with shared experts that names no architecture, fusion off, under 0.11.1: the fact reads an
    unstated input, so aiter is unverified (naming the fact and how to state it), never refused."""
    r = _aiter(gpu="MI300X", model=V2_LITE, quant="bf16", tp=1, ep=1, engine_version="0.11.1")
    assert r.plan is not None and r.plan.runner == "aiter"
    assert r.plan.evidence == "unverified"
    assert "parallelism_unsupported" not in refusals(r, "aiter")
    hits = [u for u in cand(r, "aiter").unknowns if u.source.startswith("backends/aiter.yaml:") and "#28942" in u.detail]
    assert hits and "architecture" in (hits[0].settle or ""), cand(r, "aiter").unknowns


@pytest.mark.parametrize("dep", [
    # no shared experts and no architecture: the fact cannot hold at any architecture
    dict(gpu="MI300X", engine="vllm", engine_version="0.11.1", quant="bf16", tp=1, ep=1, a2a="none", runner="aiter",
         model={**V2_LITE, "num_shared_experts": 0}),
    # another GPU vendor: DeepSeek-R1 on H200 under 0.11.1, runner auto
    dict(gpu="H200", engine="vllm", engine_version="0.11.1", model_config=R1, tp=8, ep=1, a2a="none"),
    # another activation and format: gpt-oss-20b (swiglu_oai, MXFP4) on MI355X under 0.11.2
    dict(gpu="MI355X", engine="vllm", engine_version="0.11.2", model_config="examples/model_configs/openai__gpt-oss-20b",
         tp=1, ep=1, a2a="none"),
])
def test_vllm_28942_fact_leaves_unrelated_deployments_alone(dep):
    """Deployments the fact is not about: no candidate is refused or left unknown by it."""
    r = _explain(**dep)
    assert not any(_cites_28942(x) for c in r.candidates for x in [*c.reasons, *c.unknowns])
    if dep.get("runner") == "aiter":
        assert_planned(r, "aiter")
        assert r.plan.evidence == "supported"

"""A refusal that might apply is an unknown, not a support (issue 21).

A refusal fact (a negative support row, a routing or capture refusal, a constraint) whose condition reads an input the
deployment leaves unstated (``model.architecture``, ``dp``: selector.UNGIVEN) and refuses at some value of it leaves the
candidate ``unverified``: its unknown names the input, the fact (file:line) and how to state it. A stated value that
matches refuses; one that does not gets the answer the other facts give; strict mode refuses the unstated one.

Two condition keys, each on a fact of the bundled catalog:
- ``architecture``: backends/triton.yaml refuses triton under SGLang for DeepSeek-V4's packed FP4 experts (a negative
  support row scoped to DeepseekV4ForCausalLM), sgl-project/sglang#33693;
- ``dp``: backends/aiter.yaml's constraint ``dp <= 1`` for vLLM's AITER Triton W4A16 MXFP4 experts on gfx942.
"""
from __future__ import annotations

import pytest

import moe_select

DSV4_FLASH = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "silu",
              "routing": "custom", "num_shared_experts": 1}
GPT_OSS_120B = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                "activation": "swiglu_oai", "routing": "renormalize"}

# key -> (deployment without the key, the file of the refusal fact, a refusing value, a value the fact does not name,
#         the refusal code, the settle text's start)
KEYS = {
    "architecture": ({"gpu": "H200", "engine": "sglang", "quant": "mxfp4", "model": DSV4_FLASH, "tp": 8, "ep": 1,
                      "runner": "triton"}, "backends/triton.yaml:", "DeepseekV4ForCausalLM", "GptOssForCausalLM",
                     "quant_unsupported", "state model.architecture"),
    # vendor_library stated (vLLM's AITER MXFP4 experts need VLLM_ROCM_USE_AITER): dp is the one input left unstated
    "dp": ({"gpu": "MI300X", "engine": "vllm", "quant": "mxfp4", "model": GPT_OSS_120B, "tp": 8, "ep": 1,
            "runner": "aiter", "vendor_library": True}, "backends/aiter.yaml:", 2, 1, "parallelism_unsupported", "state dp"),
}


def _stated(key: str, value):
    dep, *_ = KEYS[key]
    if key == "architecture":
        return {**dep, "model": {**dep["model"], "architecture": value}}
    return {**dep, key: value}


def _runner(report, name):
    return next(c for c in report.candidates if c.backend == name)


@pytest.mark.parametrize("key", KEYS)
def test_unstated_input_leaves_the_candidate_unverified(key):
    dep, src, bad, _, code, settle = KEYS[key]
    report = moe_select.explain(dep)
    cand = _runner(report, dep["runner"])
    assert report.status == "ok" and report.plan is not None and report.plan.runner == dep["runner"]
    assert cand.evidence == "unverified" and not cand.reasons
    mine = [u for u in cand.unknowns if u.source.startswith(src) and key in u.detail]
    assert len(mine) == 1, cand.unknowns
    u = mine[0]
    assert u.code == code
    assert f"does not state {key}" in u.detail and f"at {key} {bad}" in u.detail
    assert f"[{u.source}]" in u.detail  # the fact, file:line
    assert u.settle.startswith(settle)
    assert report.plan.evidence == "unverified"


@pytest.mark.parametrize("key", KEYS)
def test_stated_matching_value_refuses(key):
    dep, src, bad, _, code, _ = KEYS[key]
    report = moe_select.explain(_stated(key, bad))
    cand = _runner(report, dep["runner"])
    assert report.status == "rejected" and cand.evidence == "refused"
    assert [r for r in cand.reasons if r.code == code and r.source.startswith(src)], cand.reasons


@pytest.mark.parametrize("key", KEYS)
def test_stated_other_value_gets_the_other_facts_answer(key):
    """A stated value the fact does not name: the fact does not apply (today's behaviour), so no unknown names it;
    these two cells are supported by their other facts."""
    dep, src, _, good, _, _ = KEYS[key]
    report = moe_select.explain(_stated(key, good))
    cand = _runner(report, dep["runner"])
    assert not [u for u in cand.unknowns if u.source.startswith(src)]
    assert not [r for r in cand.reasons if r.source.startswith(src)]
    assert cand.evidence == "supported" and report.status == "ok"


@pytest.mark.parametrize("key", KEYS)
def test_strict_refuses_the_unstated_input(key):
    dep, src, *_ = KEYS[key]
    report = moe_select.explain({**dep, "strict": True})
    cand = _runner(report, dep["runner"])
    assert report.status == "rejected"
    strict = [r for r in cand.reasons if r.code == "unverified" and r.source.startswith(src)]
    assert strict and f"does not state {key}" in strict[0].detail
    assert strict[0].fix is not None and strict[0].fix.startswith(KEYS[key][5]) and "strict: false" in strict[0].fix


def test_a_constraint_that_holds_at_every_value_stays_supported():
    """``dp`` unstated, but the constraint refuses at no value of it (the block-FP8 dense split of common.yaml, dp 1
    only, holds for DeepSeek-R1's 18432 / 8 rows): no unknown, the rule is reported as not read."""
    model = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
             "routing": "deepseek_v3", "num_shared_experts": 1, "dense_intermediate_size": 18432}
    report = moe_select.explain({"gpu": "MI300X", "quant": "fp8_block", "model": model, "tp": 8, "runner": "aiter"})
    cand = _runner(report, "aiter")
    assert not [u for u in cand.unknowns if "dense_intermediate_per_tp" in u.detail]
    assert any(a.startswith("dp not given: not checked whether dense_intermediate_per_tp") for a in cand.assumptions)


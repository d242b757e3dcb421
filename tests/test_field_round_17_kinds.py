"""Field round 17 of issue 21 (tests/cases/field_round_17.yaml), fixed as kinds (the vLLM AITER cases): each kind a
round case missed, tested on another deployment of the same kind than the round's case, on both sides of each bound.

1. vLLM's AiterExperts takes the Standard (token-major) activation format only (AiterExperts.activation_format,
   is_supported_config: 'kernel does not support batched_experts activation format'), and its parallel-config check
   refuses only FlashInfer's NVLink all-to-alls: DeepEP and NIXL-EP are paired with it, and the batched layout of
   DeepEP low-latency and NIXL-EP is refused by an exhaustive vLLM dispatch list (vllm-project/vllm#45750).
2. vLLM >= 0.16.0's AiterExperts hands DeepEP normal mode's per-local-expert token counts to AITER as its single row
   count: NaN with more than one expert per rank (vllm-project/vllm#53261, fix open); MoRI hands over its row count.
3. vLLM 0.11.2 .. 0.12.0's Quark OCP-MX MoE calls AITER without the expert map: expert parallelism gives wrong output
   (vllm-project/vllm#29773); 0.10.1 only emulates, later releases were not refused.
All three facts are in backends/aiter.yaml.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from conftest import CONFIGS
from report_helpers import cand, refusals, unknown_codes

QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
QWEN_FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
MIXTRAL = str(CONFIGS / "mistralai__Mixtral-8x7B-v0.1")


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _aiter_codes(r: Any) -> dict[str, str]:
    return refusals(r, "aiter")


# ------------------------------------------------------------------ kind 1: vLLM's AITER experts x batched dispatch
EP8 = dict(engine="vllm", tp=1, dp=8, ep=8, runner="aiter")


@pytest.mark.parametrize(("gpu", "version", "config"), [("MI300X", "0.20.0", QWEN_FP8), ("MI355X", "0.30.0", QWEN)])
def test_aiter_refuses_deepep_low_latency_in_vllm(gpu, version, config):
    """Block-FP8 / bf16 Qwen3-30B-A3B at DP 8 / EP 8 over DeepEP low-latency with aiter asked for: refused
    (a2a_unsupported) by the exhaustive vLLM dispatch list of aiter.yaml, at releases on both sides of the round case's."""
    r = _explain(**EP8, gpu=gpu, engine_version=version, model_config=config, a2a="deepep", a2a_mode="low_latency")
    assert r.plan is None
    codes = _aiter_codes(r)
    assert set(codes) == {"a2a_unsupported"}, codes
    assert codes["a2a_unsupported"].startswith("backends/aiter.yaml:")
    assert "batched" in next(x.detail for x in cand(r, "aiter").reasons)


def test_aiter_refuses_nixl_ep_in_vllm():
    """NIXL-EP hands over the same batched layout: refused for vLLM's AITER experts too."""
    r = _explain(**EP8, gpu="MI355X", engine_version="0.27.0", model_config=QWEN_FP8, a2a="nixl")
    assert r.plan is None and set(_aiter_codes(r)) == {"a2a_unsupported"}


def test_aiter_batched_dispatch_left_open_for_sglang():
    """The dispatch list is exhaustive for vLLM only: SGLang's aiter over DeepEP low-latency is not refused on the
    dispatch format (its a2a pairing stays unverified; decode only, within DeepEP's low-latency token cap)."""
    r = _explain(gpu="MI300X", engine="sglang", model_config=QWEN_FP8, tp=8, ep=8, a2a="deepep",
                 a2a_mode="low_latency", runner="aiter", phase="decode")
    assert _aiter_codes(r) == {}
    assert "a2a_unsupported" in unknown_codes(r, "aiter")


# -------------------------------------------------------------- kind 2: vLLM's AITER experts x DeepEP normal (NaN)
@pytest.mark.parametrize("version", ["0.16.0", "0.24.0", "0.33.0"])
@pytest.mark.parametrize("config", [QWEN_FP8, QWEN])
def test_aiter_over_deepep_normal_refused_from_vllm_0_16(version, config):
    """Qwen3-30B-A3B (128 experts, 16 per rank at EP 8; block FP8 and bf16) on MI300X over DeepEP normal: refused
    (parallelism_unsupported, the wrong-output row of aiter.yaml) from 0.16.0, the first release read with the line."""
    r = _explain(**EP8, gpu="MI300X", engine_version=version, model_config=config, a2a="deepep", a2a_mode="normal")
    assert r.plan is None
    codes = _aiter_codes(r)
    assert set(codes) == {"parallelism_unsupported"}, codes
    assert "num_local_tokens" in next(x.detail for x in cand(r, "aiter").reasons)


def test_aiter_over_deepep_normal_not_refused_before_0_16():
    """vLLM 0.12.0 has no modular AiterExperts (the line is not there): the row does not refuse it."""
    r = _explain(**EP8, gpu="MI300X", engine_version="0.12.0", model_config=QWEN_FP8, a2a="deepep", a2a_mode="normal")
    assert "parallelism_unsupported" not in _aiter_codes(r)


def test_aiter_over_deepep_normal_one_expert_per_rank_not_refused():
    """Mixtral's 8 experts over EP 8: one local expert, whose count is the rank's row count: not refused by the row."""
    r = _explain(**EP8, gpu="MI300X", engine_version="0.27.0", model_config=MIXTRAL, a2a="deepep", a2a_mode="normal")
    assert "parallelism_unsupported" not in _aiter_codes(r)
    assert r.plan is not None and r.plan.runner == "aiter"


def test_aiter_over_mori_unaffected():
    """MoRI hands AITER its received row count: the same deployment over MoRI is planned."""
    r = _explain(**EP8, gpu="MI300X", engine_version="0.27.0", model_config=QWEN_FP8, a2a="mori")
    assert r.plan is not None and r.plan.runner == "aiter", [(x.code, x.detail) for x in r.reasons]


# ---------------------------------------------------------- kind 3: vLLM's Quark OCP-MX AITER MoE without an expert map
MXFP4 = dict(gpu="MI355X", engine="vllm", quant="mxfp4", runner="aiter", a2a="none",
             model={"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536,
                    "activation": "silu", "routing": "renormalize"})


@pytest.mark.parametrize("version", ["0.11.2", "0.12.0"])
def test_quark_mxfp4_aiter_ep_refused_in_0_11_2_to_0_12_0(version):
    """A Qwen3-235B-shaped MXFP4 SiLU MoE on MI355X at DP 4 / EP 4 with aiter: refused (parallelism_unsupported)."""
    r = _explain(**MXFP4, engine_version=version, tp=1, dp=4, ep=4)
    assert r.plan is None
    codes = _aiter_codes(r)
    assert set(codes) == {"parallelism_unsupported"}, codes
    assert "expert map" in next(x.detail for x in cand(r, "aiter").reasons)


@pytest.mark.parametrize("version", ["0.10.1", "0.16.0"])
def test_quark_mxfp4_aiter_ep_not_refused_outside_the_bound(version):
    """0.10.1 (emulation only, no AITER call) and 0.16.0 are outside the read bound: the row does not refuse."""
    r = _explain(**MXFP4, engine_version=version, tp=1, dp=4, ep=4)
    assert "parallelism_unsupported" not in _aiter_codes(r)


def test_quark_mxfp4_aiter_tp_without_ep_planned():
    """Tensor parallelism alone (no expert map) at 0.12.0: planned with aiter (TP 2: 768 per rank, a multiple of the
    256 the CK MXFP4 GEMMs need before 0.18.0)."""
    r = _explain(**MXFP4, engine_version="0.12.0", tp=2, dp=1, ep=1)
    assert r.plan is not None and r.plan.runner == "aiter", [(x.code, x.detail) for x in r.reasons]


def test_quark_mxfp4_aiter_ep_sglang_untouched():
    """SGLang (its own bound, < 0.5.7, is another row): 0.5.16 at EP 4 is not refused on parallelism."""
    r = _explain(**{**MXFP4, "engine": "sglang"}, engine_version="0.5.16", tp=4, ep=4)
    assert "parallelism_unsupported" not in _aiter_codes(r)

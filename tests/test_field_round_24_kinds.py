"""Field round 24 of issue 21 (tests/cases/field_round_24.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case, on both sides of each bound. The expectations are written by
hand from the upstream code read (the PyPI wheels each fact cites), not computed from the facts.

1. SGLang 0.5.3 and 0.5.3.post1's Bailing MoE block reads global_server_args_dict['deepep_mode'], a key the dict does not
   hold, when it builds its DeepEP dispatcher (KeyError at model construction; sgl-project/sglang#11465, fixed in
   0.5.3.post2): the DeepEP all-to-all refused (a2a_unsupported, a2a/deepep.yaml) for the three Bailing architectures in
   that version range only, in either DeepEP mode; an unstated architecture leaves it unverified, never supported.
2. SGLang's DeepGEMM MoE runner with BF16 weights (from 0.5.12) calls deep_gemm.m_grouped_bf16_gemm_nt_masked /
   _contiguous, which sgl-deep-gemm 0.1.0 does not export (sgl-project/DeepGEMM#37; 0.1.1 does): deep_gemm refused
   (dependency_missing, deep_gemm.yaml) for BF16 with sgl-deep-gemm < 0.1.1 under SGLang >= 0.5.12, on both of its BF16
   GEMM paths (masked: DeepEP low_latency; contiguous: DeepEP normal); FP8 and vLLM untouched.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

import moe_select

from report_helpers import assert_planned, cand, only_refusal, refusals

DG = "deep_gemm"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


# ------------------------------------------------ kind 1: SGLang 0.5.3 .. 0.5.3.post1 Bailing MoE x DeepEP (KeyError)
# A Ling-lite-like (Ling 1.x) block-FP8 MoE on 8 x H100 with DP attention: 64 experts, top 6, hidden 2048, intermediate
# 1408, two shared experts (not the round's Ling-mini-2.0 shape on 4 x H200). On CUDA, 0.5.3's DeepEPMoE runs block-FP8
# experts through DeepGEMM only, hence fp8_block and the deep_gemm runner.
LING = {"num_experts": 64, "top_k": 6, "hidden_size": 2048, "moe_intermediate_size": 1408, "activation": "silu",
        "routing": "renormalize", "num_shared_experts": 2}
BAIL = dict(gpu="H100", engine="sglang", quant="fp8_block", quant_config={"block": [128, 128]}, tp=8, dp=8, ep=8,
            a2a="deepep", runner=DG)
MODES = {"normal": dict(a2a_mode="normal", cuda_graph=False), "low_latency": dict(a2a_mode="low_latency", phase="decode")}


def _bailing(arch: str | None, sglang: str, mode: str, **extra: Any) -> Any:
    model = {**LING, **({"architecture": arch} if arch else {})}
    return _explain(**{**BAIL, **MODES[mode], **extra}, model=model, engine_version=sglang)


@pytest.mark.parametrize(("arch", "sglang", "mode"), [
    ("BailingMoeForCausalLM", "0.5.3.post1", "low_latency"),
    ("BailingMoEForCausalLM", "0.5.3", "normal"),
    ("BailingMoeV2ForCausalLM", "0.5.3.post1", "normal")])
def test_bailing_deepep_refused_at_0_5_3_and_post1(arch, sglang, mode):
    """Each of the three Bailing architectures (bailing_moe.py's EntryClass) at 0.5.3 / 0.5.3.post1, in either DeepEP
    mode: refused (a2a_unsupported, a2a/deepep.yaml), naming the key and the fix release."""
    r = _bailing(arch, sglang, mode)
    assert r.plan is None
    detail = only_refusal(r, DG, "a2a_unsupported", "a2a/deepep.yaml")
    assert "deepep_mode" in detail and "0.5.3.post2" in detail, detail


@pytest.mark.parametrize(("sglang", "mode"), [("0.5.3.post2", "normal"), ("0.5.4", "low_latency"), ("0.5.3.post3", "low_latency")])
def test_bailing_deepep_planned_from_0_5_3_post2(sglang, mode):
    """0.5.3.post2, 0.5.3.post3 and 0.5.4 (get_deepep_mode()): planned."""
    assert_planned(_bailing("BailingMoeV2ForCausalLM", sglang, mode), DG)


def test_bailing_deepep_before_the_deepep_branch_not_refused_by_the_fact():
    """0.5.2 (bailing_moe.py has no DeepEP branch, no such lookup): not refused by this fact."""
    r = _bailing("BailingMoeForCausalLM", "0.5.2", "normal")
    assert "a2a_unsupported" not in refusals(r, DG), refusals(r, DG)


@pytest.mark.parametrize("arch", ["Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"])
def test_other_architectures_deepep_planned_at_0_5_3(arch):
    """Other model classes over DeepEP at 0.5.3.post1 (their blocks call no such lookup): planned."""
    assert_planned(_bailing(arch, "0.5.3.post1", "normal"), DG)


def test_bailing_without_deepep_not_refused_by_the_fact():
    """Without the DeepEP all-to-all (a2a none, EP 8: the block never builds the dispatcher) at 0.5.3: planned, no a2a
    refusal."""
    r = _explain(**{**BAIL, "a2a": "none", "dp": 1, "runner": "auto"},
                 model={**LING, "architecture": "BailingMoeV2ForCausalLM"}, engine_version="0.5.3")
    assert r.plan is not None, [(x.code, x.detail) for x in r.reasons]
    assert not any(x.source.startswith("backends/a2a/deepep.yaml") for x in r.reasons), [(x.code, x.source) for x in r.reasons]


def test_bailing_architecture_unstated_is_unverified_not_supported():
    """An inline model that does not state its architecture at 0.5.3: planned unverified, the unknown naming the
    architecture to state and this fact's file (issue 21: a refusal that reads an unstated input is never a support);
    strict mode refuses it."""
    r = _bailing(None, "0.5.3", "normal")
    assert_planned(r, DG)
    assert r.plan.evidence == "unverified"
    u = next(x for x in cand(r, DG).unknowns if x.code == "a2a_unsupported")
    assert u.source.startswith("backends/a2a/deepep.yaml:"), u.source
    assert "architecture" in u.detail and "architecture" in u.settle, (u.detail, u.settle)
    strict = _bailing(None, "0.5.3", "normal", strict=True)
    assert strict.plan is None and any(x.code == "unverified" for x in strict.reasons)
    # 0.5.3.post2: the fact's version bound fails, nothing left to state
    fixed = _bailing(None, "0.5.3.post2", "normal")
    assert fixed.plan is not None and fixed.plan.evidence == "supported", [(x.code, x.detail) for x in cand(fixed, DG).unknowns]


def test_bailing_architecture_read_from_config_json(tmp_path):
    """A checkpoint folder whose config.json names BailingMoeV2ForCausalLM (Ling-mini-2.0's keys, block FP8) at 0.5.3:
    refused by this fact, the architecture read as config.json spells it (the refusal does not depend on the routing,
    which this reader takes from norm_topk_prob here; Bailing's score_function is not read)."""
    cfg = {"architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe", "hidden_size": 2048,
           "intermediate_size": 5120, "moe_intermediate_size": 512, "num_experts": 256, "num_shared_experts": 1,
           "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "score_function": "sigmoid", "norm_topk_prob": True,
           "hidden_act": "silu",
           "num_hidden_layers": 20, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = _explain(gpu="H200", engine="sglang", engine_version="0.5.3", model_config=str(tmp_path), tp=8, dp=8, ep=8,
                 a2a="deepep", a2a_mode="normal", cuda_graph=False, runner=DG)
    assert r.plan is None
    only_refusal(r, DG, "a2a_unsupported", "a2a/deepep.yaml")


def test_bailing_fact_is_sglang_only():
    """vLLM's DeepEP (deepep_high_throughput) with a Bailing architecture: this SGLang fact does not refuse it."""
    r = _explain(**{**BAIL, **MODES["normal"], "engine": "vllm"}, model={**LING, "architecture": "BailingMoeV2ForCausalLM"})
    assert not any(x.code == "a2a_unsupported" and "deepep_mode" in x.detail for x in r.reasons), \
        [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------ kind 2: SGLang BF16 DeepGEMM MoE needs sgl-deep-gemm >= 0.1.1
# Qwen1.5-MoE-A2.7B (BF16, 60 experts, top 4, hidden 2048, intermediate 1408) on 4 x H200 and Qwen3-30B-A3B on 8 x H200:
# not the round's Qwen3-30B-A3B at EP 4 in low-latency decode under 0.5.12.
QWEN15 = "examples/model_configs/Qwen__Qwen1.5-MoE-A2.7B-Chat"
QWEN3 = "examples/model_configs/Qwen__Qwen3-30B-A3B"
BF16 = dict(gpu="H200", engine="sglang", a2a="deepep", runner=DG)
LL = dict(a2a_mode="low_latency", phase="decode")       # the masked BF16 GEMM
NORMAL = dict(a2a_mode="normal", phase="prefill")      # the contiguous BF16 GEMM


@pytest.mark.parametrize(("model", "tp", "sglang", "dg", "path"), [
    (QWEN15, 4, "0.5.12.post1", "0.1.0", NORMAL),
    (QWEN3, 8, "0.5.12", "0.1.0", NORMAL),
    (QWEN3, 8, "0.5.13", "0.1.0", LL),
    (QWEN15, 4, "0.5.19", "0.1.0", LL)])
def test_sglang_bf16_deep_gemm_with_sgl_deep_gemm_0_1_0_refused(model, tp, sglang, dg, path):
    """BF16 experts on SGLang's deep_gemm runner with sgl-deep-gemm 0.1.0, in the contiguous (DeepEP normal) and masked
    (DeepEP low_latency) paths, under 0.5.12, 0.5.12.post1, 0.5.13 and 0.5.19: refused (dependency_missing,
    deep_gemm.yaml), naming the version needed."""
    r = _explain(**BF16, **path, model_config=model, tp=tp, ep=tp, engine_version=sglang, packages={"sgl-deep-gemm": dg})
    assert r.plan is None
    detail = only_refusal(r, DG, "dependency_missing", "deep_gemm.yaml")
    assert "sgl-deep-gemm >=0.1.1" in detail and "0.1.0" in detail, detail


@pytest.mark.parametrize(("model", "tp", "sglang", "dg", "path"), [
    (QWEN15, 4, "0.5.12.post1", "0.1.1", NORMAL),
    (QWEN3, 8, "0.5.12", "0.1.1", LL),
    (QWEN3, 8, "0.5.13", "0.1.2", NORMAL),
    (QWEN15, 4, "0.5.19", "0.1.7", LL)])
def test_sglang_bf16_deep_gemm_with_sgl_deep_gemm_0_1_1_on_planned(model, tp, sglang, dg, path):
    """sgl-deep-gemm 0.1.1, 0.1.2 (0.5.13's pin) and 0.1.7 (0.5.19's pin), which export both BF16 grouped GEMMs: planned."""
    r = _explain(**BF16, **path, model_config=model, tp=tp, ep=tp, engine_version=sglang, packages={"sgl-deep-gemm": dg})
    assert_planned(r, DG)


@pytest.mark.parametrize("sglang", ["0.5.12", "0.5.12.post1"])
def test_sglang_fp8_deep_gemm_with_sgl_deep_gemm_0_1_0_planned(sglang):
    """The FP8 path (block-FP8 Qwen3-30B-A3B-FP8, m_grouped_fp8_gemm_nt_*, which 0.1.0 exports) with sgl-deep-gemm 0.1.0,
    the release's own pin: planned, and not refused by the BF16 requirement."""
    r = _explain(**BF16, **NORMAL, model_config="examples/model_configs/Qwen__Qwen3-30B-A3B-FP8", tp=8, ep=8,
                 engine_version=sglang, packages={"sgl-deep-gemm": "0.1.0"})
    assert_planned(r, DG)


def test_sglang_bf16_deep_gemm_before_0_5_12_refused_by_the_format_not_the_package():
    """0.5.11 has no BF16 DeepGEMM MoE path: refused by the support row (quant_unsupported), not by the package need."""
    r = _explain(**BF16, **NORMAL, model_config=QWEN3, tp=8, ep=8, engine_version="0.5.11",
                 packages={"sgl-deep-gemm": "0.1.0"})
    assert r.plan is None
    assert "dependency_missing" not in refusals(r, DG), refusals(r, DG)
    assert "quant_unsupported" in refusals(r, DG), refusals(r, DG)


def test_bf16_package_need_is_sglang_only():
    """vLLM (no BF16 DeepGEMM MoE path; its DeepGEMM is bundled) with sgl-deep-gemm 0.1.0 declared: not refused by this
    need."""
    r = _explain(**{**BF16, "engine": "vllm"}, **LL, model_config=QWEN3, tp=8, ep=8, packages={"sgl-deep-gemm": "0.1.0"})
    assert "dependency_missing" not in refusals(r, DG), refusals(r, DG)

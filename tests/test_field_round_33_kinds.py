"""Field round 33 (tests/cases/field_round_33.yaml), fixed as kinds:

vllm-project/vllm#47154 and #52002: a compressed-tensors int8 weight-only MoE checkpoint with group scales fails when
vLLM builds its MoE method (assert group_size == -1 for 8 bits) in 0.23.0 / 0.24.0 (the Marlin method, where Marlin's
layer check holds) and 0.27.x / 0.28.0 (the merged method, before any backend). GPTQ / AWQ checkpoints take other
methods, so the facts hold for the compressed-tensors layout only: a new condition, ``checkpoint_layout``, which a
deployment states as ``quant_config.layout`` (a checkpoint's config says it) and which, unstated, leaves such a fact
undecided.
"""
from __future__ import annotations

import json

import pytest

import moe_select
from moe_select.errors import InputError

QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _int8(version, layout="compressed-tensors", group=128, tp=2, arch="sm86", model=QWEN3):
    qc = {"group_size": group}
    if layout:
        qc["layout"] = layout
    return moe_select.explain({"arch": arch, "engine": "vllm", "engine_version": version, "quant": "int8_w8a16",
                               "quant_config": qc, "model": model, "tp": tp})


@pytest.mark.parametrize("version", ["0.23.0", "0.24.0", "0.27.0", "0.27.1", "0.28.0"])
def test_vllm_grouped_compressed_tensors_int8_is_refused(version):
    r = _int8(version)
    assert r.plan is None
    for runner in ("triton", "marlin"):
        c = next(c for c in r.candidates if c.backend == runner)
        hit = [x for x in c.reasons if x.code == "quant_unsupported" and x.source.startswith(f"backends/{runner}.yaml:")]
        assert hit, (runner, [(x.code, x.detail, x.source) for x in c.reasons])


@pytest.mark.parametrize("version", ["0.22.0", "0.25.0", "0.26.0", "0.29.0"])
def test_vllm_grouped_compressed_tensors_int8_runs_outside_the_asserts(version):
    r = _int8(version)
    assert r.plan is not None and r.plan.evidence == "supported", r.summary()


@pytest.mark.parametrize("layout", ["gptq", "awq"])
def test_other_layouts_are_not_refused(layout):
    r = _int8("0.24.0", layout)
    assert r.plan is not None and r.plan.evidence == "supported", r.summary()


def test_an_unstated_layout_leaves_it_undecided_naming_how_to_state_it():
    r = _int8("0.27.1", layout=None)
    assert r.plan is not None and r.plan.evidence == "unverified"
    c = next(c for c in r.candidates if c.backend == r.plan.runner)
    settle = [u.settle for u in c.unknowns if "checkpoint_layout" in u.detail]
    assert settle and "quant_config.layout" in settle[0], [(u.detail, u.settle) for u in c.unknowns]
    assert moe_select.explain({"arch": "sm86", "engine": "vllm", "engine_version": "0.27.1", "quant": "int8_w8a16",
                               "quant_config": {"group_size": 128}, "model": QWEN3, "tp": 2, "strict": True}).plan is None


def test_marlin_layer_check_scopes_the_0_24_rows():
    """0.24.0 asserts in the Marlin method only, which vLLM picks where Marlin's layer check holds (hidden_size % 128 == 0
    among others): a hidden size of 2880 fails it, so the unasserted WNA16 method runs; 0.27.1 asserts before that."""
    model = {**QWEN3, "hidden_size": 2880}
    assert _int8("0.24.0", group=64, model=model).plan is not None
    assert _int8("0.27.1", group=64, model=model).plan is None


def test_per_channel_int8_is_not_refused_by_the_grouped_rows(tmp_path):
    """The grouped int8 rows (group_size == -1 asserted) do not refuse a per-channel checkpoint; its config here writes
    group_size -1 (a null one is refused in 0.27.0 .. 0.29.0 by other rows: tests/test_per_channel_wna16.py)."""
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
           "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "hidden_act": "silu",
           "norm_topk_prob": True, "num_hidden_layers": 4, "intermediate_size": 6144,
           "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                   "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                                                 "weights": {"num_bits": 8, "type": "int", "symmetric": True,
                                                                             "strategy": "channel", "group_size": -1}}},
                                   "ignore": ["lm_head"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = moe_select.explain({"arch": "sm86", "engine": "vllm", "engine_version": "0.27.1", "model_config": str(tmp_path),
                            "tp": 2})
    assert r.status == "ok" and r.plan.quant == "int8_w8a16", r.summary()


def test_quant_config_layout_may_not_contradict_the_checkpoint(tmp_path):
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
           "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "hidden_act": "silu",
           "norm_topk_prob": True, "num_hidden_layers": 4, "intermediate_size": 6144,
           "quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False, "sym": True}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="contradicts"):
        moe_select.explain({"arch": "sm86", "engine": "vllm", "model_config": str(tmp_path),
                            "quant_config": {"group_size": 128, "layout": "compressed-tensors"}, "tp": 2})

"""Per-channel weight-only int checkpoints as a fact condition, ``quant_per_channel`` (field round 33's unlisted miss):

vllm-project/vllm#52713 (fixed by #53163 in 0.30.0): a compressed-tensors W4A16 / W8A16 MoE checkpoint with one scale
per output channel (strategy channel, ``group_size`` null) fails at startup in vLLM 0.27.0 .. 0.29.0 (the WNA16 oracle's
Marlin check compares None with 0; the non-Marlin branch asserts strategy group). The per-channel case was not
expressible: ``quant_group_size`` is absent for it, and inline ``quant_config.group_size`` had to be positive. Now
``quant_config.group_size: -1`` says it (as a checkpoint's -1 or ``strategy: channel`` does), facts read
``quant_per_channel``, and FlashInfer's MXINT4 (groups of 32 only), whose group constraint could not see a
per-channel checkpoint, refuses it. Only a null ``group_size`` fails (a config that writes -1 passes), which only the
checkpoint's config says: ``quant_group_size_unset``, unknown for an inline -1.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.formats import per_channel

ROOT = Path(__file__).resolve().parents[1]
CHANNEL = str(ROOT / "tests" / "fixtures" / "models" / "quant-sources__Mixtral-8x7B-W4A16-channel")
AWQ_CHANNEL = str(ROOT / "tests" / "fixtures" / "models" / "quant-sources__Qwen3-30B-A3B-AWQ-per-channel")
MIXTRAL = {"num_experts": 8, "top_k": 2, "hidden_size": 4096, "moe_intermediate_size": 14336, "activation": "silu",
           "routing": "renormalize"}


def _vllm(version, **dep):
    return moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version, "tp": 4, **dep})


def _refused_by_the_rows(r):
    assert r.plan is None, r.summary()
    for runner in ("triton", "marlin"):
        c = next(c for c in r.candidates if c.backend == runner)
        hit = [x for x in c.reasons if x.code == "quant_unsupported" and x.source.startswith(f"backends/{runner}.yaml:")
               and "quant_per_channel" in x.detail]
        assert hit, (runner, [(x.code, x.detail, x.source) for x in c.reasons])


def _checkpoint(tmp_path, bits, group):
    """The fixture's config with ``bits``-bit channel-strategy weights whose ``group_size`` is ``group`` (None: null)."""
    cfg = json.loads(Path(CHANNEL, "config.json").read_text())
    w = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
    w["num_bits"], w["group_size"] = bits, group
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


@pytest.mark.parametrize("version", ["0.27.0", "0.27.1", "0.28.0", "0.29.0"])
@pytest.mark.parametrize("bits", [4, 8])
def test_vllm_per_channel_compressed_tensors_wna16_is_refused(version, bits, tmp_path):
    _refused_by_the_rows(_vllm(version, model_config=_checkpoint(tmp_path, bits, None)))


@pytest.mark.parametrize("bits", [4, 8])
def test_a_config_that_writes_minus_one_is_not_refused(bits, tmp_path):
    """group_size -1 in the config reaches vLLM as -1 (Marlin's check and the 8-bit assert take it)."""
    r = _vllm("0.28.0", model_config=_checkpoint(tmp_path, bits, -1))
    assert r.plan is not None and r.plan.evidence == "supported", r.summary()


def test_inline_minus_one_leaves_it_undecided_naming_how_to_settle_it():
    """Inline ``group_size: -1`` does not say whether the checkpoint writes null or -1: not decided (unverified), the
    unknown naming model_config; strict refuses."""
    dep = {"quant": "int4_w4a16", "model": MIXTRAL, "quant_config": {"group_size": -1, "layout": "compressed-tensors"}}
    r = _vllm("0.28.0", **dep)
    assert r.plan is not None and r.plan.evidence == "unverified", r.summary()
    c = next(c for c in r.candidates if c.backend == r.plan.runner)
    assert any("quant_group_size_unset" in u.detail and "model_config" in u.settle for u in c.unknowns), \
        [(u.detail, u.settle) for u in c.unknowns]
    assert _vllm("0.28.0", strict=True, **dep).plan is None


@pytest.mark.parametrize("version", ["0.26.0", "0.30.0"])
def test_vllm_per_channel_runs_outside_the_regression(version):
    r = _vllm(version, model_config=CHANNEL)
    assert r.plan is not None, r.summary()


@pytest.mark.parametrize("dep", [
    {"quant": "int4_w4a16", "model": MIXTRAL, "quant_config": {"group_size": 128, "layout": "compressed-tensors"}},
    {"quant": "int4_w4a16", "model": MIXTRAL, "quant_config": {"group_size": -1, "layout": "gptq"}},
    {"model_config": AWQ_CHANNEL}])
def test_grouped_or_other_layouts_are_not_refused(dep):
    r = _vllm("0.28.0", **dep)
    assert r.plan is not None and r.plan.evidence == "supported", r.summary()


def test_per_channel_is_read_from_the_group_size():
    assert per_channel("int4_w4a16", {"group_size": -1}) is True
    assert per_channel("int4_w4a16", {"group_size": 128}) is False
    assert per_channel("int4_w4a16", {}) is False                 # the format's default group
    assert per_channel("fp8_channel", {"group_size": -1}) is None   # no groups: the fact is absent


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_mxint4_refuses_a_per_channel_checkpoint(engine):
    r = moe_select.explain({"gpu": "B200", "engine": engine, "quant": "int4_w4a16", "model": MIXTRAL, "tp": 4,
                            "quant_config": {"group_size": -1, "layout": "compressed-tensors"},
                            "runner": "flashinfer_trtllm"})
    assert r.plan is None
    c = next(c for c in r.candidates if c.backend == "flashinfer_trtllm")
    assert any(x.code == "quant_unsupported" and x.source.startswith("backends/flashinfer_trtllm.yaml:")
               for x in c.reasons), [(x.code, x.detail, x.source) for x in c.reasons]
    g32 = moe_select.explain({"gpu": "B200", "engine": engine, "quant": "int4_w4a16", "model": MIXTRAL, "tp": 4,
                              "quant_config": {"group_size": 32, "layout": "compressed-tensors"},
                              "runner": "flashinfer_trtllm"})
    assert g32.plan is not None, g32.summary()


@pytest.mark.parametrize("quant, group, needle", [("fp8_channel", -1, "no groups along K"),
                                                  ("int4_w4a16", 0, "a positive count"),
                                                  ("int4_w4a16", -2, "group_size")])
def test_inline_group_size_minus_one_only_for_grouped_formats(quant, group, needle):
    with pytest.raises(InputError, match=needle):
        moe_select.explain({"gpu": "H100", "engine": "vllm", "quant": quant, "model": MIXTRAL,
                            "quant_config": {"group_size": group}})

"""Field round 37 (tests/cases/field_round_37.yaml), fixed as a kind: an engine that builds a speculative draft's MoE
layers with the main layers' quantization method whatever the checkpoint excludes. SGLang before 0.4.8 builds
DeepSeek's NextN (MTP) decoder with the target's ModelOpt NVFP4 config, and its FusedMoE method ignores
``exclude_modules``, so the checkpoint's bf16 MTP experts meet packed FP4 parameters at load (sgl-project/sglang#7376).

Stated by two new pieces: the condition ``when.main_quant`` (the format of the checkpoint's main MoE layers, read by a
layer kind planned on its own; for the main kind it is ``quant``) and a ``methods`` fact of backends/common.yaml with
no runners (the method loads the layer with none)."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import moe_select
from moe_select.capability import MethodRunners

ROOT = Path(__file__).resolve().parents[1]
NVFP4 = str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4")   # layer 61 (MTP) excluded: bf16
FP8 = str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3")


def _explain(version: str, model_config: str = NVFP4):
    return moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": version, "model_config": model_config,
                               "tp": 8})


def _mtp(r):
    kinds = [k for k in r.layers if k.deployment.layer_kind == "mtp"]
    return kinds[0] if kinds else None


def _bound(report) -> list:
    return [x for c in report.candidates for x in c.reasons if "common.yaml" in x.source and "NextN" in x.detail]


@pytest.mark.parametrize("version, refused", [("0.4.7.post1", True), ("0.4.8", False), ("0.5.23", False)])
def test_sglang_before_0_4_8_cannot_load_the_bf16_mtp_experts_of_an_nvfp4_checkpoint(version, refused):
    r = _explain(version)
    mtp = _mtp(r)
    assert mtp is not None and mtp.deployment.quant == "bf16" and mtp.deployment.main_quant == "nvfp4", r.summary()
    hits = _bound(mtp)
    assert bool(hits) == refused, mtp.summary()
    if refused:
        assert r.plan is None and mtp.plan is None
        assert all(x.code == "quant_unsupported" for x in hits)
        assert "no runner can load this layer" in hits[0].detail and "sglang>=0.4.8" in (hits[0].fix or "")
        # the main layers are not touched by it
        assert not _bound(r)


def test_the_main_kind_reads_its_own_format_as_main_quant():
    from moe_select.selector import _facts

    r = _explain("0.4.8")
    assert _facts(r.deployment, "sglang")["main_quant"] == "nvfp4" == r.deployment.quant
    assert r.deployment.main_quant is None


def test_a_method_with_no_runners_needs_its_engine_too():
    m = MethodRunners.model_validate({"runners": [], "when": {"engine": ["sglang"], "layer_kind": ["mtp"]},
                                      "why": "x", "source": "y"})
    assert m.runners == []
    with pytest.raises(ValidationError, match="names the engine"):
        MethodRunners.model_validate({"runners": [], "when": {"layer_kind": ["mtp"]}, "why": "x", "source": "y"})


def test_no_draft_builds_no_mtp_layer():
    """``speculative: false``: the engine builds no MTP layer, so none is planned and a refusal of those layers does not
    block the deployment (the round's fact refuses SGLang 0.4.7's NextN layers of an NVFP4 checkpoint only where a
    draft runs); not given: planned, with a note that says so."""
    dep = {"gpu": "B200", "engine": "sglang", "engine_version": "0.4.7.post1", "model_config": NVFP4, "tp": 8}
    off = moe_select.explain({**dep, "speculative": False})
    assert off.plan is not None and _mtp(off) is None, off.summary()
    assert any("MTP layers (61) are not built by the engine: not planned" in n for n in off.deployment.notes)
    unsaid = moe_select.explain(dep)
    assert unsaid.plan is None and _mtp(unsaid) is not None
    assert any("planned as a speculative draft would run them; speculative: false" in n for n in unsaid.deployment.notes)


@pytest.mark.parametrize("line, speculative", [
    ("python -m sglang.launch_server --model-path {m} --tp 8", False),
    ("python -m sglang.launch_server --model-path {m} --tp 8 --speculative-algorithm NEXTN --speculative-num-steps 2 "
     "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3", True),
    ("vllm serve {m} -tp 8", False),
    ("vllm serve {m} -tp 8 --speculative-config '{{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}}'", True)])
def test_a_launch_line_states_whether_a_draft_runs(line, speculative):
    from moe_select.launch_line import from_command

    launch = from_command(line.format(m=NVFP4))
    assert launch.deployment["speculative"] is speculative
    r = launch.explain(deployment={"gpu": "B200"})
    assert (_mtp(r) is not None) == speculative, r.summary()

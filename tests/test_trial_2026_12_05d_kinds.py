"""The launch-line trial's leftovers (2026-12-05, twenty-seventh session), fixed as kinds; read in the PyPI wheels.

- SGLang's FlashInfer MegaMoE all-to-all validates the checkpoint's architecture against a fixed list per release
  (arg_groups/moe_hook.py validate_flashinfer_megamoe_model, called by handle_a2a_moe before any weight) and raises for
  every other class: gpt-oss was planned unverified with exit 0. The list per release (0.5.20; 0.5.21-0.5.22 add
  GlmMoeDsa; 0.5.23 adds Beam and Kimi K3) is an ``architecture_not`` fact of backends/a2a/flashinfer_megamoe.yaml.
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import cand

from conftest import CONFIGS

MEGA = {"gpu": "B200", "engine": "sglang", "tp": 4, "ep": 4, "dp": 4, "a2a": "flashinfer_megamoe",
        "runner": "flashinfer_megamoe"}
#: an NVFP4 layer of DeepSeek-V3's shape, inline, with the architecture the test names
LAYER = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu"}


def _megamoe_refusals(version: str, **dep) -> set[str]:
    r = moe_select.explain({**MEGA, "engine_version": version, **dep})
    return {x.source.split(":")[0] for x in cand(r, "flashinfer_megamoe").reasons if x.code == "a2a_unsupported"}


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_sglang_megamoe_refuses_gpt_oss_in_every_release(version):
    got = _megamoe_refusals(version, model_config=str(CONFIGS / "openai__gpt-oss-120b"))
    assert "backends/a2a/flashinfer_megamoe.yaml" in got, got


@pytest.mark.parametrize("arch, refused_in", [
    ("DeepseekV3ForCausalLM", set()),
    ("Qwen3MoeForCausalLM", set()),
    ("GlmMoeDsaForCausalLM", {"0.5.20"}),
    ("KimiK3ForConditionalGeneration", {"0.5.20", "0.5.21", "0.5.22"}),
    ("BeamForCausalLM", {"0.5.20", "0.5.21", "0.5.22"}),
    ("MixtralForCausalLM", {"0.5.20", "0.5.21", "0.5.22", "0.5.23"}),
])
def test_sglang_megamoe_architecture_list_grows_by_release(arch, refused_in):
    for version in ("0.5.20", "0.5.21", "0.5.22", "0.5.23"):
        got = _megamoe_refusals(version, quant="nvfp4", model={**LAYER, "architecture": arch})
        assert ("backends/a2a/flashinfer_megamoe.yaml" in got) == (version in refused_in), (arch, version, got)


def test_sglang_megamoe_unstated_architecture_is_not_refused_by_the_list():
    """An inline layer that names no architecture: the allow-list cannot judge it (no refusal from it)."""
    got = _megamoe_refusals("0.5.23", quant="nvfp4", model=LAYER)
    assert "backends/a2a/flashinfer_megamoe.yaml" not in got, got


def test_megamoe_on_a_validated_checkpoint_plans():
    r = moe_select.explain({**MEGA, "engine_version": "0.5.23", "model_config": str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")})
    assert r.plan is not None and r.plan.runner == "flashinfer_megamoe", r.summary()

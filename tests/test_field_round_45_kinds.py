"""Field round 45 of issue 21 (tests/cases/field_round_45.yaml), fixed as kinds (backends/common.yaml ``methods``, two
new condition keys), each tested on deployments other than the round's cases; read in the vLLM PyPI wheels 0.11.0,
0.11.1, 0.11.2 and 0.12.0.

- vLLM 0.11.1 / 0.11.2's DeepSeek MoE block under AITER's fused MoE drops its shared-expert MLP; with
  VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS off the shared expert is never fused either, and its weights have no
  parameter (KeyError at load). The condition reads ``shared_expert_fusion`` only where the deployment states it (the
  engine's default there is on; this project's default off): left unstated, the plan says what it assumed.
- The same releases' DeepSeek MTP loader does not redirect the MTP block's shared expert into the fused slots: a draft
  that runs the checkpoint's MTP layers (``speculative``) fails at load under AITER's fused MoE.
- A vLLM launch line's VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS is read as the deployment's shared_expert_fusion.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.launch_line import from_command
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
R1 = str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-R1")
MIXTRAL = str(ROOT / "examples" / "model_configs" / "mistralai__Mixtral-8x7B-v0.1")
BASE = {"gpu": "MI300X", "engine": "vllm", "engine_version": "0.11.1", "model_config": R1, "tp": 8, "ep": 1, "dp": 1,
        "a2a": "none", "vendor_library": True}


def _refused(report, needle: str) -> bool:
    return any(r.code == "engine_unsupported" and needle in r.detail for r in report.reasons)


def _assumed(report, needle: str) -> bool:
    return report.plan is not None and any(needle in a for a in report.plan.assumptions)


FSE_OFF = "never fuses it either"
MTP = "DeepSeek MTP draft"


@pytest.mark.parametrize("version, refused", [("0.11.0", False), ("0.11.1", True), ("0.11.2", True), ("0.12.0", False)])
def test_fusion_off_by_release(version, refused):
    r = moe_select.explain({**BASE, "engine_version": version, "shared_expert_fusion": False, "speculative": False})
    assert _refused(r, FSE_OFF) is refused, (version, report_codes(r))
    if refused:
        assert r.status == "rejected"


@pytest.mark.parametrize("change", [{"shared_expert_fusion": True}, {"vendor_library": False}, {"gpu": "H200"},
                                    {"model_config": MIXTRAL}])
def test_fusion_off_fact_needs_each_condition(change):
    """Fusion on, AITER off, an NVIDIA GPU (AITER is ROCm's), or a block without shared experts: not this fact."""
    r = moe_select.explain({**BASE, "shared_expert_fusion": False, "speculative": False, **change})
    assert not _refused(r, FSE_OFF), (change, report_codes(r))


def test_fusion_unstated_is_assumed_not_refused():
    """This project's default (fusion off) is not vLLM 0.11.1's (on under AITER): left unstated, the fact refuses
    nothing and the plan says what it assumed and how to state it."""
    r = moe_select.explain({**BASE, "speculative": False})
    assert not _refused(r, FSE_OFF), report_codes(r)
    assert _assumed(r, "shared_expert_fusion not given"), r.plan


@pytest.mark.parametrize("version, refused", [("0.11.0", False), ("0.11.1", True), ("0.11.2", True), ("0.12.0", False)])
def test_mtp_draft_by_release(version, refused):
    r = moe_select.explain({**BASE, "engine_version": version, "shared_expert_fusion": True, "speculative": True})
    assert _refused(r, MTP) is refused, (version, report_codes(r))
    # no draft: the main layers load with fusion on
    r = moe_select.explain({**BASE, "engine_version": version, "shared_expert_fusion": True, "speculative": False})
    assert not _refused(r, MTP) and not _refused(r, FSE_OFF), (version, report_codes(r))


def test_mtp_draft_unstated_is_assumed():
    r = moe_select.explain({**BASE, "shared_expert_fusion": True})
    assert not _refused(r, MTP), report_codes(r)
    assert _assumed(r, "speculative not given"), r.plan


def test_mtp_draft_without_aiter_is_not_this_fact():
    r = moe_select.explain({**BASE, "vendor_library": False, "shared_expert_fusion": True, "speculative": True})
    assert not _refused(r, MTP), report_codes(r)


@pytest.mark.parametrize("value, fusion", [("0", False), ("false", False), ("1", True), ("True", True)])
def test_launch_line_reads_the_fusion_variable(value, fusion):
    line = (f"VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS={value} vllm serve deepseek-ai/DeepSeek-R1 "
            "--tensor-parallel-size 8")
    launch = from_command(line, model_config=R1, engine_version="0.11.1")
    dep = launch.deployment
    assert dep["shared_expert_fusion"] is fusion and dep["vendor_library"] is True
    r = launch.explain(deployment={"gpu": "MI300X"})
    assert _refused(r, FSE_OFF) is (not fusion), report_codes(r)

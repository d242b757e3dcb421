"""Field round 19 of issue 21 (tests/cases/field_round_19.yaml), the two CUTLASS-runner cases fixed as kinds: each kind
tested on other deployments than the round's case (another GPU, model, release or parallel layout), on both sides of
each bound. Both facts are in backends/cutlass.yaml (the `cutlass` runner: SGLang's own CUTLASS MoE and vLLM's).

1. vLLM's CUTLASS NVFP4 MoE (CutlassExpertsFp4) never takes an expert map, whichever checkpoint method loads the
   weights (ModelOpt or compressed-tensors: the deployment format has no key for it, and none is needed): asserted in
   ModelOptNvFp4FusedMoE.apply / CompressedTensorsW4A4MoeMethod.apply / cutlass_moe_fp4 (0.9.0 .. 0.13.0), dropped by
   the 0.14.x NVFP4 oracle (supports_expert_map False, the map never read: wrong output), passed over or refused by
   CutlassExpertsFp4._supports_parallel_config (ep_size == 1) from 0.16.0 through 0.29.0 (vllm-project/vllm#27231, an
   open feature request): refused at EP > 1 (parallelism_unsupported), no version bound; EP 1 planned.
2. SGLang's CUTLASS FP4 MoE (cutlass_moe_fp4) is built with CutlassMoEParams for the global expert count while an EP
   rank's weights hold its local experts, and asserts they match (wheels 0.4.9 .. 0.5.15; sgl-project/sglang#29055,
   Step-3.7-Flash-NVFP4 at EP 8, closed unmerged): refused at EP > 1 (parallelism_unsupported) before 0.5.16. From
   0.5.16 there is no SGLang CUTLASS FP4 MoE at all: ModelOpt NVFP4 raises "moe_runner_backend=cutlass is not supported
   for NVFP4 MoE" and compressed-tensors NVFP4 runs FlashInfer's CUTLASS MoE (wheels 0.5.16 .. 0.5.23): the nvfp4 cell
   is refused there at any EP (quant_unsupported), and the EP fact no longer applies.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import cand, planned, refusals

# DeepSeek-R1's MoE (NVIDIA's DeepSeek-R1-FP4 is ModelOpt NVFP4): 256 experts, top 8, 8 groups / top 4, one shared
# expert. Not the round's Qwen3-VL-235B or Step-3.7-Flash.
R1 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
      "routing": "deepseek_v3", "n_group": 8, "topk_group": 4, "num_shared_experts": 1}
# A Qwen3-30B-A3B-shaped MoE (128 experts, top 8, hidden 2048, intermediate 768).
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}

CUTLASS_YAML = Path(__file__).resolve().parent.parent / "backends" / "cutlass.yaml"


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _detail(report: Any, code: str) -> str:
    """The detail of the cutlass candidate's refusal ``code``."""
    return next(x.detail for x in cand(report, "cutlass").reasons if x.code == code)


# Markers of the facts a refusal should cite: the `why` of each new ep constraint, the `requires` of the 0.5.16 row.
VLLM_EP = "why: \"vLLM's CUTLASS NVFP4 MoE (CutlassExpertsFp4) takes no expert map"
SGL_EP = "why: \"SGLang's CUTLASS FP4 MoE (cutlass_moe_fp4) is built for the global expert count"
SGL_FROM_0_5_16 = 'requires: {sglang: ">=0.5.16"}'


def _fact_line(marker: str, opener: str) -> str:
    """``backends/cutlass.yaml:N`` of the line opening (``opener``) the fact whose line holds ``marker``: the line a
    refusal by that fact cites."""
    lines = CUTLASS_YAML.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    start = next(i for i in range(at, -1, -1) if lines[i].lstrip().startswith(opener))
    return f"backends/cutlass.yaml:{start + 1}"


# ------------------------------------------------------------ kind 1: vLLM's CUTLASS NVFP4 MoE x expert parallelism
VLLM = dict(engine="vllm", quant="nvfp4", a2a="none", runner="cutlass")


@pytest.mark.parametrize(("version", "gpu", "model", "tp", "ep"), [
    ("0.10.2", "B200", R1, 4, 4),          # the apply/cutlass_moe_fp4 asserts
    ("0.14.1", "B300", R1, 2, 2),          # the oracle drops the map (10.3 built from 0.11.2)
    ("0.28.0", "RTX PRO 6000", QWEN3_30B, 4, 4),  # the parallel-config check, on SM120 (built from 0.12.0)
    ("0.29.0", "B200", QWEN3_30B, 8, 8),   # the last release read
])
def test_vllm_cutlass_nvfp4_refused_under_ep(version, gpu, model, tp, ep):
    """vLLM's CUTLASS NVFP4 experts at EP > 1 in each era of the code (asserts, a dropped map, the parallel-config
    check), on GPUs and models other than the round's: refused (parallelism_unsupported) by the cutlass.yaml constraint
    citing the asserts and CutlassExpertsFp4._supports_parallel_config, and nothing else refuses it."""
    r = _explain(**VLLM, gpu=gpu, engine_version=version, model=model, tp=tp, ep=ep)
    assert r.plan is None
    codes = refusals(r, "cutlass")
    assert codes == {"parallelism_unsupported": _fact_line(VLLM_EP, "- field: ep")}, codes
    assert "takes no expert map" in _detail(r, "parallelism_unsupported")


@pytest.mark.parametrize(("version", "gpu", "model", "tp"), [
    ("0.10.2", "B200", R1, 4), ("0.14.1", "B300", R1, 2), ("0.28.0", "RTX PRO 6000", QWEN3_30B, 4),
    ("0.29.0", "B200", QWEN3_30B, 4)])  # TP 4: 192 per rank (TP 8's 96 is no multiple of 64, vllm-project/vllm#48624)
def test_vllm_cutlass_nvfp4_without_ep_planned(version, gpu, model, tp):
    """The same deployments at EP 1 (tensor-parallel experts, no expert map): planned with cutlass, supported."""
    r = _explain(**VLLM, gpu=gpu, engine_version=version, model=model, tp=tp, ep=1)
    assert planned(r, "cutlass"), [(x.code, x.detail) for x in r.reasons]
    assert cand(r, "cutlass").evidence == "supported"


def test_vllm_cutlass_nvfp4_refused_under_ep_with_an_all_to_all():
    """EP 8 over DeepEP is no way round it (0.10.x .. 0.13.0 raise "CutlassExpertsFp4 doesn't support DP"; from 0.16.0
    the check is ep_size == 1 whatever the all-to-all): refused at 0.12.0 and 0.28.0."""
    for version in ("0.12.0", "0.28.0"):
        r = _explain(**{**VLLM, "a2a": "deepep"}, gpu="B200", engine_version=version, model=R1, tp=8, ep=8)
        assert "parallelism_unsupported" in refusals(r, "cutlass"), version
        assert r.plan is None or r.plan.runner != "cutlass"


def test_vllm_cutlass_ep_fact_is_nvfp4_only():
    """vLLM's CUTLASS FP8 experts take the expert map (CutlassExpertsFp8): per-channel FP8 at EP 8 on an H200 under
    0.28.0 is still planned with cutlass; the vLLM fact does not refuse SGLang's NVFP4 at EP 1 (0.5.14)."""
    r = _explain(engine="vllm", engine_version="0.28.0", gpu="H200", quant="fp8_channel", model=QWEN3_30B, tp=8, ep=8,
                 a2a="none", runner="cutlass")
    assert planned(r, "cutlass"), [(x.code, x.detail) for x in r.reasons]
    r = _explain(engine="sglang", engine_version="0.5.14", gpu="B200", quant="nvfp4", model=R1, tp=8, ep=1, a2a="none",
                 runner="cutlass")
    assert planned(r, "cutlass"), [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------------------ kind 2: SGLang's CUTLASS FP4 MoE x expert parallelism
SGL = dict(engine="sglang", quant="nvfp4", a2a="none", runner="cutlass")


@pytest.mark.parametrize(("version", "model", "tp", "ep"), [
    ("0.5.6", R1, 4, 4), ("0.5.10", QWEN3_30B, 2, 2), ("0.5.15", QWEN3_30B, 8, 2)])
def test_sglang_cutlass_nvfp4_refused_under_ep_before_0_5_16(version, model, tp, ep):
    """SGLang's cutlass_moe_fp4 at EP > 1 (including EP smaller than TP) in releases before 0.5.16, on models other
    than Step-3.7-Flash: refused (parallelism_unsupported) by the cutlass.yaml constraint citing the global-count
    CutlassMoEParams and cutlass_moe_fp4's assert, and nothing else refuses it."""
    r = _explain(**SGL, gpu="B200", engine_version=version, model=model, tp=tp, ep=ep)
    assert r.plan is None
    codes = refusals(r, "cutlass")
    assert codes == {"parallelism_unsupported": _fact_line(SGL_EP, "- field: ep")}, codes
    assert "global expert count" in _detail(r, "parallelism_unsupported")


@pytest.mark.parametrize(("version", "model", "tp"), [("0.5.6", R1, 4), ("0.5.10", QWEN3_30B, 2),
                                                      ("0.5.15", QWEN3_30B, 8)])
def test_sglang_cutlass_nvfp4_without_ep_planned_before_0_5_16(version, model, tp):
    """The same deployments at EP 1 (the weights hold every expert, the global count is right): planned with cutlass."""
    r = _explain(**SGL, gpu="B200", engine_version=version, model=model, tp=tp, ep=1)
    assert planned(r, "cutlass"), [(x.code, x.detail) for x in r.reasons]
    assert cand(r, "cutlass").evidence == "supported"


@pytest.mark.parametrize("version", ["0.5.16", "0.5.19"])
@pytest.mark.parametrize("ep", [1, 4])
def test_sglang_cutlass_nvfp4_refused_from_0_5_16_at_any_ep(version, ep):
    """From 0.5.16 SGLang has no CUTLASS FP4 MoE of its own (ModelOpt NVFP4 raises for moe_runner_backend=cutlass,
    compressed-tensors runs FlashInfer's CUTLASS MoE instead): refused at EP 1 and EP 4 alike by the negative support
    row (quant_unsupported), and the before-0.5.16 EP fact does not apply there. From 0.5.19 the ModelOpt NVFP4 method
    fact (backends/common.yaml methods: ModelOptNvFp4FusedMoEMethod.apply raises for a runner it does not build) refuses
    it too, on the same raise."""
    r = _explain(**SGL, gpu="B200", engine_version=version, model=R1, tp=4, ep=ep)
    assert r.plan is None
    assert set(refusals(r, "cutlass")) == {"quant_unsupported"}, refusals(r, "cutlass")
    sources = {x.source for x in cand(r, "cutlass").reasons}
    assert _fact_line(SGL_FROM_0_5_16, "- archs:") in sources, sources


def test_sglang_cutlass_fp8_block_not_touched():
    """The nvfp4 rows and the nvfp4 EP fact leave SGLang's block-FP8 CUTLASS MoE alone: Qwen3-30B block FP8 at TP 2 on
    an H200 under 0.5.19 is still planned with cutlass (its own ep == 1 assert is the older fp8_block constraint)."""
    r = _explain(engine="sglang", engine_version="0.5.19", gpu="H200", quant="fp8_block", model=QWEN3_30B, tp=2, ep=1,
                 a2a="none", runner="cutlass")
    assert planned(r, "cutlass"), [(x.code, x.detail) for x in r.reasons]


def test_both_engines_refuse_nvfp4_cutlass_under_ep():
    """With engine any, NVFP4 at EP 8 on a B200 with cutlass (engines at the versions checked when this was written,
    declared: vLLM 0.29.0, SGLang 0.5.19): each engine's evidence is refused, vLLM's by the EP fact and SGLang's by the
    0.5.16 row. From vLLM 0.32.0 CutlassExpertsFp4 takes an expert map (allgather/reducescatter EP: vllm-0.32.0
    experts/cutlass_moe.py:CutlassExpertsFp4._supports_parallel_config, run_cutlass_moe_fp4 expert_map), so with no
    all-to-all vLLM's evidence is supported there and the plan holds for vLLM only."""
    r = _explain(engine="any", gpu="B200", quant="nvfp4", model=R1, tp=8, ep=8, a2a="none", runner="cutlass",
                 packages={"vllm": "0.29.0", "sglang": "0.5.19"})
    assert r.plan is None
    c = cand(r, "cutlass")
    assert c.evidence_by_engine == {"sglang": "refused", "vllm": "refused"}, c.evidence_by_engine
    assert set(refusals(r, "cutlass")) == {"parallelism_unsupported", "quant_unsupported"}
    r = _explain(engine="any", gpu="B200", quant="nvfp4", model=R1, tp=8, ep=8, a2a="none", runner="cutlass",
                 packages={"vllm": "0.32.0", "sglang": "0.5.19"})
    assert r.plan is not None and r.plan.runner == "cutlass"
    assert cand(r, "cutlass").evidence_by_engine == {"sglang": "refused", "vllm": "supported"}

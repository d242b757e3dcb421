"""Field round 21 of issue 21 (tests/cases/field_round_21.yaml), four AMD cases fixed as kinds: each kind tested on
other deployments than the round's case (another model, GPU, release or parallel layout), on both sides of each bound.

1. AITER's W4A4 MXFP4 CK MoE (vLLM's AITER_MXFP4_MXFP4) corrupts decode under HIP-graph capture on gfx950
   (vllm-project/vllm#44988 closed unmerged, ROCm/aiter#3632 open): a cuda_graph fact with supported: false for vLLM
   from 0.22.0, gfx950, MXFP4 weights with MXFP4 activations (backends/aiter.yaml); eager and W4A16 untouched.
2. AITER from 0.1.16 strips a top-k column whenever an expert mask is given (get_2stage_cfgs, ROCm/aiter#5595):
   vLLM's fused shared expert under EP is refused (parallelism_unsupported, backends/aiter.yaml); AITER 0.1.15.post3,
   EP 1 and no fusion untouched.
3. SGLang 0.5.12 .. 0.5.14 weights the fused shared expert 1/routed_scaling_factor over MoRI on the aiter path
   (sgl-project/sglang#28237, fixed in 0.5.15): refused (parallelism_unsupported, backends/aiter.yaml).
4. vLLM's MoRI finalize hands combine the dispatched top-k ids (vllm-project/vllm#52639, open): MoRI refused above
   EP 16 under vLLM from 0.25.0 (parallelism_unsupported, backends/a2a/mori.yaml).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import cand, planned, refusals

BACKENDS = Path(__file__).resolve().parent.parent / "backends"
CONFIGS = Path(__file__).resolve().parent.parent / "examples" / "model_configs"

# DeepSeek-R1's MoE shape (256 experts, top 8, 8 groups / top 4, one shared expert): not the round's Kimi-K2.6.
R1 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
      "routing": "deepseek_v3", "n_group": 8, "topk_group": 4, "num_shared_experts": 1}


def _explain(**dep: Any) -> Any:
    return moe_select.explain(dep)


def _line(file: str, marker: str) -> int:
    """The 1-based line of ``backends/<file>``'s first line containing ``marker``."""
    with open(BACKENDS / file, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if marker in line)


# ------------------------------------------------------------ kind 1: AITER W4A4 MXFP4 x HIP graphs (vLLM, gfx950)
W4A4 = dict(gpu="MI355X", engine="vllm", quant="mxfp4", quant_config={"activation_precision": "mxfp4"}, model=R1,
            tp=8, ep=1, a2a="none", runner="aiter")


@pytest.mark.parametrize("version", ["0.22.0", "0.29.0"])
def test_w4a4_mxfp4_with_graphs_refused(version):
    """DeepSeek-R1 as W4A4 MXFP4 at TP 8 on MI355X with CUDA graphs under vLLM 0.22.0 and 0.29.0 (both carry the
    AITER_MXFP4_MXFP4 backend with no graph guard): refused with cuda_graph_unsupported, citing the aiter.yaml fact."""
    r = _explain(**W4A4, engine_version=version, cuda_graph=True)
    assert not planned(r, "aiter")
    codes = refusals(r, "aiter")
    assert codes.get("cuda_graph_unsupported") == \
        f"backends/aiter.yaml:{_line('aiter.yaml', 'activation_precision: [mxfp4]}') - 1}", codes


def test_w4a4_mxfp4_eager_not_refused_for_graphs():
    """The same deployment in eager mode (cuda_graph false, the report's clean run) gets no graph refusal."""
    r = _explain(**W4A4, engine_version="0.29.0", cuda_graph=False)
    assert refusals(r, "aiter") == {}
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


def test_w4a4_mxfp4_with_graphs_before_0_22_not_refused():
    """vLLM 0.21.0 (before the releases the fact covers; not read): no graph refusal, aiter planned."""
    r = _explain(**W4A4, engine_version="0.21.0", cuda_graph=True)
    assert refusals(r, "aiter") == {}
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


def test_w4a16_mxfp4_with_graphs_not_refused():
    """MXFP4 weights with bf16 activations (a16w4, another kernel) with graphs: no graph refusal."""
    r = _explain(**{**W4A4, "quant_config": {"activation_precision": "bf16"}}, engine_version="0.29.0",
                 cuda_graph=True)
    assert refusals(r, "aiter") == {}
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------------------ kind 2: AITER >= 0.1.16 top-k strip x fused shared expert
FSE = dict(gpu="MI300X", engine="vllm", engine_version="0.28.0",
           model_config=str(CONFIGS / "deepseek-ai__DeepSeek-R1"), a2a="none", runner="aiter")


def _fse_refusal(r: Any) -> None:
    assert not planned(r, "aiter")
    codes = refusals(r, "aiter")
    row = _line("aiter.yaml", 'requires: {amd-aiter: ">=0.1.16"}') - 3  # the '- field: fused_shared_experts' line
    assert codes.get("parallelism_unsupported") == f"backends/aiter.yaml:{row}", codes
    detail = next(x.detail for x in cand(r, "aiter").reasons if x.code == "parallelism_unsupported")
    assert "ROCm/aiter#5595" in detail


@pytest.mark.parametrize("aiter", ["0.1.16", "0.1.20.post1"])
@pytest.mark.parametrize(("tp", "ep"), [(8, 8), (4, 4)])
def test_vllm_fused_shared_expert_ep_refused(aiter, tp, ep):
    """DeepSeek-R1 block FP8 on MI300X under vLLM 0.28.0, shared expert fused, EP 8 or EP 4, AITER 0.1.16 (the first
    tag with the strip) and 0.1.20.post1 (newest read): refused."""
    _fse_refusal(_explain(**FSE, tp=tp, ep=ep, shared_expert_fusion=True, packages={"amd-aiter": aiter}))


def _not_fse_refused(r: Any) -> None:
    row = _line("aiter.yaml", 'requires: {amd-aiter: ">=0.1.16"}') - 3
    assert f"backends/aiter.yaml:{row}" not in refusals(r, "aiter").values()


def test_vllm_fused_shared_expert_ep_before_0_1_16_not_refused():
    """AITER 0.1.15.post3 (no strip in get_2stage_cfgs): the same EP 8 deployment is not refused by the row."""
    r = _explain(**FSE, tp=8, ep=8, shared_expert_fusion=True, packages={"amd-aiter": "0.1.15.post3"})
    _not_fse_refused(r)
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("ep", "fusion"), [(1, True), (8, False)])
def test_vllm_fused_shared_expert_without_ep_or_fusion_planned(ep, fusion):
    """No expert parallelism (no expert mask, no strip) or no fusion: planned with aiter 0.1.20.post1."""
    r = _explain(**FSE, tp=8, ep=ep, shared_expert_fusion=fusion, packages={"amd-aiter": "0.1.20.post1"})
    _not_fse_refused(r)
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------------------ kind 3: SGLang mori x fused shared expert x aiter scaling
SGL = dict(gpu="MI300X", engine="sglang", model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), tp=8, dp=8, ep=8,
           runner="aiter")


@pytest.mark.parametrize("version", ["0.5.12", "0.5.14"])
def test_sglang_mori_fused_shared_refused(version):
    """DeepSeek-V3 on MI300X under SGLang 0.5.12 and 0.5.14, TP/DP/EP 8 over MoRI with the shared expert fused:
    refused, citing sgl-project/sglang#28237."""
    r = _explain(**SGL, engine_version=version, a2a="mori", shared_expert_fusion=True)
    assert not planned(r, "aiter")
    codes = refusals(r, "aiter")
    row = _line("aiter.yaml", 'requires: {sglang: ">=0.5.12,<0.5.15"}') - 3
    assert codes.get("parallelism_unsupported") == f"backends/aiter.yaml:{row}", codes
    detail = next(x.detail for x in cand(r, "aiter").reasons if x.code == "parallelism_unsupported")
    assert "sgl-project/sglang#28237" in detail


@pytest.mark.parametrize(("version", "a2a", "fusion"), [("0.5.15", "mori", True), ("0.5.14", "mori", False),
                                                        ("0.5.14", "none", True)])
def test_sglang_mori_fused_shared_other_sides_not_refused(version, a2a, fusion):
    """0.5.15 (the fix), no fusion, or no MoRI (no DeepEP-class remap): not refused by the row."""
    r = _explain(**SGL, engine_version=version, a2a=a2a, shared_expert_fusion=fusion)
    assert refusals(r, "aiter") == {}
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]


# ------------------------------------------------------------ kind 4: vLLM MoRI combine top-k ids x EP > 16
MORI = dict(gpu="MI300X", engine="vllm", model_config=str(CONFIGS / "deepseek-ai__DeepSeek-V3"), tp=1, a2a="mori",
            a2a_mode="normal", runner="aiter")


def _mori_row() -> str:
    return f"backends/a2a/mori.yaml:{_line('a2a/mori.yaml', '    max: 16') - 1}"


@pytest.mark.parametrize("version", ["0.25.0", "0.29.0"])
@pytest.mark.parametrize("ep", [32, 64])
def test_vllm_mori_ep_above_16_refused(version, ep):
    """DeepSeek-V3 block FP8 on MI300X, DP = EP = 32 or 64 over MoRI under vLLM 0.25.0 and 0.29.0: refused."""
    r = _explain(**MORI, dp=ep, ep=ep, engine_version=version)
    assert r.plan is None
    assert refusals(r, "aiter").get("parallelism_unsupported") == _mori_row(), refusals(r, "aiter")


@pytest.mark.parametrize(("version", "ep"), [("0.29.0", 16), ("0.29.0", 8), ("0.24.0", 32)])
def test_vllm_mori_other_sides_not_refused(version, ep):
    """EP 16 and EP 8 (measured correct by the PR) and vLLM 0.24.0 (before the releases read): not refused by it."""
    r = _explain(**MORI, dp=ep, ep=ep, engine_version=version)
    assert refusals(r, "aiter") == {}
    assert planned(r, "aiter"), [(x.code, x.detail) for x in r.reasons]

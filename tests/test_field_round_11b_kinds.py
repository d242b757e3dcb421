"""Field round 11 of issue 21 (tests/cases/field_round_11.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case.

1. vLLM's monolithic AITER MXFP4 W4A16 experts ignore the expert map (vllm-project/vllm#57866): aiter refused for MXFP4
   on gfx942 under vLLM at EP > 1.
2. AITER's CK-Tile MXFP4 stage 2 gives wrong output unless the per-rank intermediate is a multiple of 256
   (ROCm/aiter#5232, #5233): aiter refused for gfx950 MXFP4 at other widths with amd-aiter >= 0.1.19, any engine.
4. MoRI corrupts the output below ~256 dispatch tokens per rank (sgl-project/sglang#27194, ROCm/mori#356): a capacity
   floor on mori under SGLang 0.5.12.post1 at EP 8.
5. SGLang's Kimi-K3 MoE does not treat deepep_v2 as an EP all-to-all (sgl-project/sglang#37516): deepep_v2 refused
   under SGLang for architecture KimiK3ForConditionalGeneration; unverified where the architecture is not stated.
6. DeepEP V2's ElasticBuffer under vLLM reuses torch's not-yet-created NCCL communicator (EP_REUSE_NCCL_COMM=1 by default)
   and segfaults (deepseek-ai/DeepEP#726): deepep_v2 refused under vLLM at 16 EP ranks and more with deep_ep >= 2.1.0
   (a version-bounded ``unavailable`` entry: a2a_unsupported).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
QWEN235 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "renormalize"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _source_of(r: Any) -> set[str]:
    return {x.source.split(":")[0] for x in r.reasons}


def _why(r: Any) -> list[tuple[str, str]]:
    return [(x.code, x.source) for x in r.reasons]


# --------------------------------------------------------------------------------- kind 1: vLLM AITER MXFP4 W4A16 and EP
@pytest.mark.parametrize(("tp", "ep", "ok"), [(8, 1, True), (8, 8, False), (4, 4, False), (2, 2, False)])
def test_vllm_aiter_mxfp4_gfx942_refuses_expert_parallelism(tp, ep, ok):
    """Qwen3-235B-shaped MXFP4 on MI325X (gfx942) under vLLM with aiter: TP only is planned; any EP > 1 is refused
    (parallelism_unsupported, aiter.yaml), since the monolithic W4A16 experts ignore the expert map.

    Pinned to vLLM 0.31.0, the first release with the report's fix (vllm-project/vllm#57866: vllm-0.31.0
    experts/aiter_mxfp4_w4a16_moe.py:AiterW4A16ExpertsMonolithic._supports_parallel_config, `not use_ep`). Not 0.29.0
    (the release assumed when this was written): the 2026-12-05 release delta found that 0.29.0 has no gfx942 AITER
    MXFP4 class at all (vllm-0.29.0 experts/aiter_mxfp4_w4a8_moe.py:AiterW4A16ExpertsMonolithic._supports_current_device:
    gfx950 / gfx1250), so TP only is refused there too. From 0.33.0 the forward masks other ranks' experts (vllm-0.33.0
    experts/aiter_mxfp4_w4a16_moe.py:aiter_triton_kernel_w4a16_moe_forward, gate_valid from expert_map) and EP is
    planned (below)."""
    r = _explain(gpu="MI325X", engine="vllm", engine_version="0.31.0", quant="mxfp4", model=QWEN235, tp=tp, ep=ep,
                 runner="aiter")
    assert (r.plan is not None) is ok, _why(r)
    if ok:
        assert r.plan.runner == "aiter"
    else:
        assert _codes(r) == {"parallelism_unsupported"}, _why(r)
        assert _source_of(r) == {"backends/aiter.yaml"}
        assert any("expert map" in x.detail for x in r.reasons)
    new = _explain(gpu="MI325X", engine="vllm", engine_version="0.33.0", quant="mxfp4", model=QWEN235, tp=tp, ep=ep,
                   runner="aiter")
    assert new.plan is not None and new.plan.runner == "aiter", _why(new)


def test_vllm_aiter_mxfp4_ep_refusal_is_gfx942_only():
    """gfx950 MXFP4 under vLLM runs AITER's CK experts (the expert mask), not the monolithic W4A16 path: EP 8 is not
    refused by this fact."""
    r = _explain(gpu="MI355X", engine="vllm", quant="mxfp4", model=QWEN235, tp=8, ep=8, runner="aiter")
    assert not any("expert map" in x.detail for x in r.reasons), _why(r)
    assert r.plan is not None and r.plan.runner == "aiter", _why(r)


# --------------------------------------------------------------------------------- kind 2: AITER CK-Tile MXFP4 stage 2
MXFP4_2560 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 2560, "activation": "silu",
              "routing": "renormalize"}


@pytest.mark.parametrize(("tp", "ok"), [(1, True), (2, True), (4, False), (8, False), (5, True)])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_aiter_cktile_mxfp4_needs_256_aligned_intermediate(tp, ok, engine):
    """A 2560-wide SiLU MXFP4 MoE on MI355X (gfx950) with aiter at the newest AITER checked: per-rank 2560 and 1280
    are planned, 640 (TP 4) and 320 (TP 8) refused with shape_unaligned from aiter.yaml under SGLang; 512 (TP 5) is
    aligned. vLLM rounds the per-rank intermediate up to 256 on ROCm (mxfp4_round_up_hidden_size_and_intermediate_size)
    so CK-Tile never sees 640 or 320 there: planned, never refused by this row."""
    r = _explain(gpu="MI355X", engine=engine, quant="mxfp4", model=MXFP4_2560, tp=tp, runner="aiter")
    cktile = [x for x in r.reasons if "CK-Tile" in x.detail]
    if engine == "vllm":
        assert not cktile and r.plan is not None and r.plan.runner == "aiter", _why(r)
    elif ok:
        assert not cktile, _why(r)
    else:
        assert r.plan is None and _codes(r) == {"shape_unaligned"}, _why(r)
        assert _source_of(r) == {"backends/aiter.yaml"} and cktile


@pytest.mark.parametrize(("version", "refused"), [("0.1.18", False), ("0.1.19", True), ("0.1.20.post1", True)])
def test_aiter_cktile_mxfp4_refusal_is_version_bounded(version, refused):
    """The refusal holds from the measured release (amd-aiter 0.1.19) on: 0.1.18 was not measured and is planned."""
    r = _explain(gpu="MI355X", engine="sglang", quant="mxfp4", model=MXFP4_2560, tp=4, runner="aiter",
                 packages={"amd-aiter": version})
    assert any("CK-Tile" in x.detail for x in r.reasons) is refused, _why(r)
    assert (r.plan is None) is refused


def test_aiter_cktile_refusal_leaves_other_formats():
    """A bf16 layer of the same width on gfx950 is not refused by the CK-Tile MXFP4 fact."""
    r = _explain(gpu="MI355X", engine="sglang", quant="bf16", model=MXFP4_2560, tp=4, runner="aiter")
    assert not any("CK-Tile" in x.detail for x in r.reasons), _why(r)


# --------------------------------------------------------------------------------- kind 4: MoRI dispatch capacity floor
DSV3_BF16 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
             "routing": "deepseek_v3", "num_shared_experts": 1}


def _mori(**kw: Any) -> Any:
    dep = dict(gpu="MI300X", engine="sglang", engine_version="0.5.12.post1", quant="fp8_block", model=DSV3_BF16,
               phase="decode", tp=8, ep=8, dp=8, a2a="mori", a2a_mode="normal", runner="aiter")
    return _explain(**{**dep, **kw})


def _mori_floor(r: Any) -> list[Any]:
    return [x for x in r.reasons if "max_num_inp_token_per_rank" in x.detail]


@pytest.mark.parametrize(("capacity", "refused"), [(16, True), (64, True), (255, True), (256, False), (1024, False)])
def test_mori_capacity_floor(capacity, refused):
    """DeepSeek-V3 block-FP8 decode worker on MI300X under SGLang 0.5.12.post1, TP 8 / EP 8 / DP 8, MoRI normal with
    aiter: a per-rank dispatch capacity below 256 is refused (parallelism_unsupported, mori.yaml), 256 and above not."""
    r = _mori(a2a_capacity=capacity)
    assert bool(_mori_floor(r)) is refused, _why(r)
    if refused:
        assert r.plan is None and {x.source.split(":")[0] for x in _mori_floor(r)} == {"backends/a2a/mori.yaml"}
        assert {x.code for x in _mori_floor(r)} == {"parallelism_unsupported"}


@pytest.mark.parametrize("kw", [{"engine_version": "0.5.14"}, {"engine": "vllm"}, {"tp": 4, "ep": 4, "dp": 4}])
def test_mori_capacity_floor_bounds(kw):
    """Outside what was measured (a later SGLang, vLLM, an EP group of 4) a capacity of 32 is not refused by the floor."""
    if kw.get("engine") == "vllm":
        kw = {"engine": "vllm", "engine_version": None}
    dep = dict(gpu="MI300X", engine="sglang", engine_version="0.5.12.post1", quant="fp8_block", model=DSV3_BF16,
               phase="decode", tp=8, ep=8, dp=8, a2a="mori", a2a_mode="normal", runner="aiter", a2a_capacity=32)
    dep.update(kw)
    r = _explain(**{k: v for k, v in dep.items() if v is not None})
    assert not _mori_floor(r), _why(r)


# --------------------------------------------------------------------------------- kind 5: Kimi-K3 x deepep_v2 (SGLang)
K3_NVFP4 = {"num_experts": 896, "top_k": 16, "hidden_size": 3584, "moe_intermediate_size": 3072, "activation": "situ",
            "routing": "custom", "num_shared_experts": 2}


def _k3_v2(architecture: str | None, **kw: Any) -> Any:
    model = dict(K3_NVFP4, **({"architecture": architecture} if architecture else {}))
    # SGLang 0.5.21: 0.5.19 (assumed without engine_version) and 0.5.20 fail DeepEP V2's prefill into DeepGEMM
    # (sgl-project/sglang#38160, backends/a2a/deepep_v2.yaml), another fact than this kind's.
    # The checkpoint's layout stated compressed-tensors: SGLang's ModelOpt NVFP4 method (nvfp4's default layout) builds
    # no deep_gemm at all (backends/common.yaml methods, ModelOptNvFp4FusedMoEMethod.apply), another fact than this kind's.
    dep = dict(gpu="B300", engine="sglang", engine_version="0.5.21", quant="nvfp4", model=model, tp=4, ep=4,
               a2a="deepep_v2", runner="deep_gemm", quant_config={"layout": "compressed-tensors"})
    return _explain(**{**dep, **kw})


def _k3_fact(items: Any) -> list[Any]:
    return [x for x in items if "_ep_a2a" in x.detail]


def test_kimi_k3_deepep_v2_refused_under_sglang():
    """Kimi K3 NVFP4 on B300 at TP 4 / EP 4 under SGLang with deepep_v2 and its architecture stated: refused
    (parallelism_unsupported, deepep_v2.yaml)."""
    r = _k3_v2("KimiK3ForConditionalGeneration")
    assert r.plan is None, _why(r)
    assert {(x.code, x.source.split(":")[0]) for x in _k3_fact(r.reasons)} == {
        ("parallelism_unsupported", "backends/a2a/deepep_v2.yaml")}


def test_kimi_k3_deepep_v2_unstated_architecture_is_unverified():
    """Without model.architecture the refusal cannot be decided: not a reason, an unknown that says to state it."""
    r = _k3_v2(None)
    assert not _k3_fact(r.reasons), _why(r)
    assert r.plan is not None and r.evidence == "unverified", _why(r)
    unknowns = _k3_fact(r.plan.unknowns)
    assert unknowns and all("model.architecture" in (u.settle or "") for u in unknowns)


@pytest.mark.parametrize("kw", [{"architecture": "DeepseekV3ForCausalLM"}, {"a2a": "deepep"},
                                {"engine": "vllm", "runner": "auto", "engine_version": "0.33.0"}])
def test_kimi_k3_deepep_v2_refusal_scope(kw):
    """Another architecture with deepep_v2, Kimi K3 with DeepEP V1 (which _ep_a2a counts), and vLLM's deepep_v2 are not
    refused by this fact."""
    arch = kw.pop("architecture", "KimiK3ForConditionalGeneration")
    r = _k3_v2(arch, **kw)
    assert not _k3_fact(r.reasons), _why(r)


# --------------------------------------------------------------------------------- kind 6: DeepEP V2 x vLLM null comm
def _v2_vllm(**kw: Any) -> Any:
    dep = dict(gpu="H200", engine="vllm", quant="fp8_block", model=QWEN235, tp=1, ep=16, dp=16, a2a="deepep_v2",
               runner="auto")
    return _explain(**{**dep, **kw})


def _null_comm(r: Any) -> list[Any]:
    return [x for x in r.reasons if "EP_REUSE_NCCL_COMM" in x.detail]


@pytest.mark.parametrize(("version", "refused"), [(None, True), ("2.1.0", True), ("2.0.0", False)])
def test_deepep_v2_refused_under_vllm_by_deep_ep_version(version, refused):
    """Qwen3-235B-shaped block-FP8 on H200 under vLLM at DP 16 / EP 16 with deepep_v2: refused (a2a_unsupported,
    deepep_v2.yaml) with deep_ep 2.1.0 and when its version is not declared (decided at the newest checked, 2.1.0);
    2.0.0 (whose first V2 commit defaulted EP_REUSE_NCCL_COMM to 0) is not refused by this fact."""
    r = _v2_vllm(**({"packages": {"deep_ep": version}} if version else {}))
    hits = _null_comm(r)
    assert bool(hits) is refused, _why(r)
    if refused:
        assert r.plan is None
        assert {(x.code, x.source.split(":")[0]) for x in hits} == {("a2a_unsupported", "backends/a2a/deepep_v2.yaml")}
        assert all("deep_ep >=2.1.0 where ep >= 16" in x.detail and "vllm" in x.detail for x in hits)
    else:
        assert r.plan is not None, _why(r)


@pytest.mark.parametrize("kw", [
    {"engine": "sglang", "tp": 16, "runner": "deep_gemm"},  # SGLang sets EP_REUSE_NCCL_COMM=0 for its V2 buffer
    {"ep": 8, "dp": 8},  # below the reported topology (round 8's r8-vllm51824 ran DP 2 / EP 2)
])
def test_deepep_v2_null_comm_scope(kw):
    """Outside the reported interaction (SGLang; vLLM with fewer than 16 EP ranks) deep_ep 2.1.0 is not refused."""
    r = _v2_vllm(packages={"deep_ep": "2.1.0"}, **kw)
    assert not _null_comm(r), _why(r)

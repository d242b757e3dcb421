"""Field round 15 of issue 21 (tests/cases/field_round_15.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. SGLang's DeepGEMM MoE runner and bf16 experts, by release (read in the PyPI wheels): FP8-only before 0.5.12
   (sgl-project/sglang#8110's init check from 0.4.9.post3; no bf16 deep_gemm runner in 0.5.6 .. 0.5.11), the bf16
   grouped GEMMs from 0.5.12, and the standard (a2a none) path quantizing activations to FP8 in 0.5.12 and
   0.5.12.post1 (sgl-project/sglang#27056, fixed in 0.5.13 by PR #26473).
2. SGLang's MoRI all-to-all with the Qwen MoE blocks before 0.5.18 (sgl-project/sglang#34006, #35170): the blocks
   pick their all-to-all path with is_deepep() alone, so mori runs the non-all-to-all path (an EP all-reduce on top of
   MoRI's combine, or a TP-sharded shared expert with no MoRI dispatch): wrong output. backends/a2a/mori.yaml refuses
   mori for the architectures built on Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock under SGLang < 0.5.18 (read in
   the 0.5.16, 0.5.17 and 0.5.18 wheels); an unstated architecture leaves the plan unverified.
3. vLLM's FlashInfer CUTLASS BF16 MoE and Qwen3-Next under CUDA-graph capture on sm90 (vllm-project/vllm#39288, open,
   one reporter, deterministic at TP 4 and 8): a reported cuda_graph negative in backends/flashinfer_cutlass.yaml
   scoped to where it was reproduced (Qwen3NextForCausalLM, bf16, sm90, TP 4/8, vLLM after 0.18.1).
4. vLLM's FlashInfer TRT-LLM BF16 MoE and non-gated relu2 by release (vllm-project/vllm#36146, #43853; read in the
   sdists): refused before 0.24.0 (0.16.0 and 0.18.0 .. 0.23.0 refuse it, 0.17.0/0.17.1 admitted it into a Swiglu-only
   kernel call and crashed), admitted from 0.24.0; gated bf16, SGLang and FP8 relu2 are not touched by the row.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import cand
from report_helpers import report_codes as _codes


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# --------------------------------------- kind 1: SGLang deep_gemm x bf16 by release (sglang#8110, #27056)
# Qwen3-30B-A3B (not the round cases' Qwen3-235B / Qwen1.5-MoE) on H200.
QWEN3_30B = "examples/model_configs/Qwen__Qwen3-30B-A3B"


def _dg(version: str, a2a: str, gpu: str = "H200") -> Any:
    ep = 1 if a2a == "none" else 4
    # sgl-deep-gemm declared at the newest version checked: 0.5.12's own pin (0.1.0) has no BF16 grouped GEMM, which
    # deep_gemm.yaml's >=0.1.1 need refuses on its own (tests/test_field_round_57_kinds.py); this file tests the rows
    return moe_select.explain({"gpu": gpu, "engine": "sglang", "engine_version": version, "model_config": QWEN3_30B,
                               "quant": "bf16", "tp": 4, "ep": ep, "a2a": a2a, "runner": "deep_gemm",
                               "packages": {"sgl-deep-gemm": "0.1.7"}})


def _deep_gemm_row(r: Any) -> set[str]:
    return {x.source for x in r.reasons if x.source.startswith("backends/deep_gemm.yaml:")}


@pytest.mark.parametrize(("version", "a2a"), [("0.4.9.post1", "deepep"), ("0.4.10", "deepep"), ("0.5.6", "none"),
                                              ("0.5.11", "deepep"), ("0.5.11", "none")])
def test_sglang_deep_gemm_bf16_refused_before_0512(version, a2a):
    """Before SGLang 0.5.12 the DeepGEMM MoE path is FP8-only: bf16 experts are refused as quant_unsupported by the
    deep_gemm.yaml negative row (the only reason), over DeepEP and without an all-to-all alike."""
    r = _dg(version, a2a)
    assert r.plan is None, _why(r)
    assert _codes(r) == {"quant_unsupported"}, _why(r)
    assert len(_deep_gemm_row(r)) == 1, _why(r)


def test_sglang_deep_gemm_bf16_standard_path_refused_in_0512_only():
    """0.5.12 and 0.5.12.post1 quantize the standard path's activations to FP8 before the bf16 GEMM: a2a none is
    refused there (another deep_gemm.yaml row than the <0.5.12 one), DeepEP plans; 0.5.13 plans a2a none."""
    old = _dg("0.5.11", "none")
    for version in ("0.5.12", "0.5.12.post1"):
        r = _dg(version, "none")
        assert r.plan is None, _why(r)
        assert _codes(r) == {"quant_unsupported"}, _why(r)
        assert _deep_gemm_row(r) and _deep_gemm_row(r) != _deep_gemm_row(old), _why(r)
        over_deepep = _dg(version, "deepep")
        assert over_deepep.plan is not None and over_deepep.plan.runner == "deep_gemm", _why(over_deepep)
    for version in ("0.5.13", "0.5.23"):
        ok = _dg(version, "none")
        assert ok.plan is not None and ok.plan.runner == "deep_gemm", _why(ok)


def test_sglang_deep_gemm_bound_leaves_fp8_block_and_vllm_alone():
    """The bound is bf16's: block-FP8 experts plan with deep_gemm under SGLang 0.4.9.post1 (DeepEP) and 0.5.6, and
    vLLM's bf16 deep_gemm answer does not come from the SGLang rows."""
    for version, a2a, ep in (("0.4.9.post1", "deepep", 4), ("0.5.6", "none", 1)):
        r = moe_select.explain({"gpu": "H200", "engine": "sglang", "engine_version": version,
                                "model_config": "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8", "tp": ep, "ep": ep,
                                "a2a": a2a, "runner": "deep_gemm"})
        assert not _deep_gemm_row(r) or all(x.code != "quant_unsupported" for x in r.reasons), _why(r)
        assert r.plan is not None and r.plan.runner == "deep_gemm", _why(r)
    v = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.11.0", "model_config": QWEN3_30B,
                            "quant": "bf16", "tp": 4, "ep": 1, "a2a": "none", "runner": "deep_gemm"})
    rows = {x.source for x in v.reasons}
    sglang_rows = _deep_gemm_row(_dg("0.5.11", "none")) | _deep_gemm_row(_dg("0.5.12", "none"))
    assert not rows & sglang_rows, _why(v)


# ------------------------------------------ kind 2: SGLang mori x Qwen MoE blocks before 0.5.18 (sglang#34006, #35170)
# A Qwen3-Next-shaped bf16 MoE (512 experts, top 10, hidden 2048, width 512, 1 shared) on 8 x MI300X (gfx942) at EP 8:
# another model class (Qwen2MoeSparseMoeBlock via Qwen3-Next), GPU, format and EP size than the round's two cases.
QNEXT = {"num_experts": 512, "top_k": 10, "hidden_size": 2048, "moe_intermediate_size": 512, "activation": "silu",
         "routing": "renormalize", "num_shared_experts": 1}
MORI_ROW = "backends/a2a/mori.yaml:"


def _mori(version: str, architecture: str | None, engine: str = "sglang") -> Any:
    model = dict(QNEXT) if architecture is None else {**QNEXT, "architecture": architecture}
    return moe_select.explain({"gpu": "MI300X", "engine": engine, "engine_version": version, "quant": "bf16",
                               "model": model, "tp": 8, "ep": 8, "a2a": "mori", "runner": "auto"})


def _mori_refusals(r: Any) -> set[tuple[str, str]]:
    return {(x.code, x.source.split(":")[0]) for x in r.reasons
            if x.source.startswith(MORI_ROW) and "is_deepep()" in x.detail}


def test_sglang_0517_refuses_mori_for_qwen3_next():
    """SGLang 0.5.17 (the last release whose Qwen2MoeSparseMoeBlock.forward gates on is_deepep() only), Qwen3-Next:
    every candidate is refused by the mori.yaml row, parallelism_unsupported, and no plan is made."""
    r = _mori("0.5.17", "Qwen3NextForCausalLM")
    assert r.status == "rejected" and r.plan is None, _why(r)
    assert _mori_refusals(r) == {("parallelism_unsupported", "backends/a2a/mori.yaml")}, _why(r)
    reason = next(x for x in r.reasons if x.source.startswith(MORI_ROW) and "is_deepep()" in x.detail)
    assert "0.5.18" in reason.detail and "wrong output" in reason.detail, reason.detail


def test_sglang_0518_plans_mori_for_qwen3_next():
    """SGLang 0.5.18 routes mori through the all-to-all path (is_mori() beside is_deepep() in qwen2_moe.py): the same
    deployment plans, with no refusal from the row."""
    r = _mori("0.5.18", "Qwen3NextForCausalLM")
    assert r.status == "ok" and r.plan is not None, _why(r)
    assert not _mori_refusals(r), _why(r)


def test_qwen3_moe_block_models_refused_before_0518():
    """Qwen3MoeSparseMoeBlock users other than the round's Qwen3-30B (Qwen3-VL-MoE's text model) are refused at 0.5.16;
    the Qwen2-MoE class too."""
    for arch in ("Qwen3VLMoeForConditionalGeneration", "Qwen2MoeForCausalLM"):
        r = _mori("0.5.16", arch)
        assert r.status == "rejected", (arch, _why(r))
        assert _mori_refusals(r) == {("parallelism_unsupported", "backends/a2a/mori.yaml")}, (arch, _why(r))


def test_other_architectures_and_vllm_not_refused_by_the_row():
    """The row is scoped: a DeepSeek-V3 model class under SGLang 0.5.17 and Qwen3-Next under vLLM's MoRI all-to-all
    are not refused by it (vLLM 0.23.0: MoRI ships from 0.15.0, its low-latency kernels from 0.23.0, backends/a2a/mori.yaml)."""
    for r in (_mori("0.5.17", "DeepseekV3ForCausalLM"), _mori("0.23.0", "Qwen3NextForCausalLM", engine="vllm")):
        assert not _mori_refusals(r), _why(r)
        assert r.status == "ok", _why(r)


def test_unstated_architecture_leaves_the_plan_unverified():
    """An inline model without architecture under SGLang 0.5.17: the row can neither refuse nor be passed, so the plan
    is unverified and its unknown names the row (the unstated-input rule, tests/test_evidence_unstated.py)."""
    r = _mori("0.5.17", None)
    assert r.status == "ok" and r.plan is not None, _why(r)
    assert r.plan.evidence == "unverified"
    unknowns = [u for u in cand(r, r.plan.runner).unknowns if u.source.startswith(MORI_ROW)]
    assert len(unknowns) == 1 and "architecture" in unknowns[0].detail, unknowns


# ------------------------------ kind 3: vLLM FlashInfer CUTLASS BF16 MoE x Qwen3-Next x CUDA graphs on sm90 (vllm#39288)
# The reported failure at TP 8 on an H200 (sm90, the other TP size the reporter reproduced; not the round's TP 4 H100).
FI_ROW = "backends/flashinfer_cutlass.yaml:"


def _fi(architecture: str | None = "Qwen3NextForCausalLM", version: str = "0.19.0", tp: int = 8,
        graph: bool = True, model: dict[str, Any] | None = None) -> Any:
    m = dict(QNEXT if model is None else model)
    if architecture is not None:
        m["architecture"] = architecture
    return moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": version, "quant": "bf16",
                               "model": m, "tp": tp, "ep": 1, "a2a": "none", "cuda_graph": graph,
                               "runner": "flashinfer_cutlass"})


def _fi_graph_refusals(r: Any) -> set[str]:
    return {x.source.split(":")[0] for x in r.reasons if x.code == "cuda_graph_unsupported" and x.source.startswith(FI_ROW)}


def test_vllm_fi_cutlass_bf16_qwen3_next_graphs_refused_on_sm90():
    """Qwen3-Next at TP 8 on an H200 under vLLM 0.19.0 with CUDA graphs: flashinfer_cutlass refused by the reported
    capture failure, cuda_graph_unsupported, no plan; with graphs off the same deployment plans it."""
    r = _fi()
    assert r.status == "rejected" and r.plan is None, _why(r)
    assert _fi_graph_refusals(r) == {"backends/flashinfer_cutlass.yaml"}, _why(r)
    eager = _fi(graph=False)
    assert eager.status == "ok" and eager.plan is not None and eager.plan.runner == "flashinfer_cutlass", _why(eager)


def test_vllm_fi_cutlass_bf16_row_is_scoped_where_reproduced():
    """Not refused by the row: another model class on the same GPU (Qwen3-30B-A3B's Qwen3MoeForCausalLM, which runs on
    it on H100 per vllm#54742), TP 2 (not reproduced), vLLM 0.18.1 (before the reporter's first failing build)."""
    q3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
          "routing": "renormalize"}
    for r in (_fi("Qwen3MoeForCausalLM", model=q3), _fi(tp=2), _fi(version="0.18.1")):
        assert not _fi_graph_refusals(r), _why(r)
        assert r.status == "ok" and r.plan is not None and r.plan.runner == "flashinfer_cutlass", _why(r)


def test_vllm_fi_cutlass_bf16_unstated_architecture_unverified():
    """The Qwen3-Next shape without architecture: the row could hold, so the plan is unverified and names the row."""
    r = _fi(architecture=None)
    assert r.status == "ok" and r.plan is not None and r.plan.evidence == "unverified", _why(r)
    unknowns = [u for u in cand(r, "flashinfer_cutlass").unknowns if u.source.startswith(FI_ROW)]
    assert [u.code for u in unknowns] == ["cuda_graph_unsupported"], unknowns


# ------------------------------ kind 4: vLLM FlashInfer TRT-LLM BF16 MoE x non-gated relu2 by release (vllm#36146)
# A Nemotron-3-Super-like shape (512 experts, top 22, hidden 4096, width 2688; not the round's Nano shape) at TP 2 on
# B300 (sm103) and GB200 (sm100), not the round's single B200.
TRT_ROW = "backends/flashinfer_trtllm.yaml:"
SUPER = {"num_experts": 512, "top_k": 22, "hidden_size": 4096, "moe_intermediate_size": 2688, "activation": "relu2",
         "routing": "renormalize"}


def _trt(version: str, gpu: str = "B300", activation: str = "relu2", engine: str = "vllm", quant: str = "bf16") -> Any:
    # FlashInfer declared at the newest version checked: the releases' own pins (backends/engines/pins.yaml) are older
    # than the BF16 TRT-LLM-gen launcher's fix (flashinfer_trtllm.yaml's >=0.6.18rc2 need refuses them on its own);
    # this file tests the engines' activation window
    return moe_select.explain({"gpu": gpu, "engine": engine, "engine_version": version, "quant": quant,
                               "model": dict(SUPER, activation=activation), "tp": 2, "ep": 1, "a2a": "none",
                               "runner": "flashinfer_trtllm", "packages": {"flashinfer-python": "0.6.18"}})


def _trt_refusals(r: Any) -> set[str]:
    return {x.code for x in r.reasons if x.source.startswith(TRT_ROW)}


@pytest.mark.parametrize(("version", "gpu"), [("0.16.0", "B300"), ("0.17.0", "GB200"), ("0.17.1", "B300"),
                                              ("0.18.0", "GB200"), ("0.20.0", "B300"), ("0.23.0", "B300")])
def test_vllm_trtllm_bf16_relu2_refused_before_0240(version, gpu):
    """Before vLLM 0.24.0 bf16 relu2 on the TRT-LLM MoE is refused by flashinfer_trtllm.yaml (the negative bf16 row,
    quant_unsupported, and the vLLM relu2 row's version gate, activation_unsupported), and by nothing else."""
    r = _trt(version, gpu)
    assert r.status == "rejected" and r.plan is None, _why(r)
    assert _trt_refusals(r) == {"quant_unsupported", "activation_unsupported"}, _why(r)
    assert _codes(r) == {"quant_unsupported", "activation_unsupported"}, _why(r)


@pytest.mark.parametrize("version", ["0.24.0", "0.29.0"])
def test_vllm_trtllm_bf16_relu2_supported_from_0240(version):
    """From vLLM 0.24.0 (#43853) the same deployment plans flashinfer_trtllm with supported evidence (the activation is
    verified by the vLLM relu2 row, renormalize routing by its row): nothing refused, nothing unknown."""
    r = _trt(version)
    assert r.status == "ok" and r.plan is not None and r.plan.runner == "flashinfer_trtllm", _why(r)
    assert r.plan.evidence == "supported", [(u.code, u.source) for u in cand(r, "flashinfer_trtllm").unknowns]


def test_vllm_trtllm_relu2_window_leaves_gated_sglang_and_fp8_alone():
    """The window is bf16 relu2 under vLLM only: gated SiLU bf16 under vLLM 0.20.0, bf16 relu2 under SGLang 0.5.12 and
    per-tensor FP8 relu2 under vLLM 0.20.0 all plan flashinfer_trtllm with no refusal from the file."""
    for r in (_trt("0.20.0", activation="silu"), _trt("0.5.12", engine="sglang"), _trt("0.20.0", quant="fp8_tensor")):
        assert not _trt_refusals(r), _why(r)
        assert r.status == "ok" and r.plan is not None and r.plan.runner == "flashinfer_trtllm", _why(r)

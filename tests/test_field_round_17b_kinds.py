"""Field round 17 of issue 21 (tests/cases/field_round_17.yaml), fixed as kinds (the second helper's share): each kind a
round case missed, tested on other deployments of the same kind than the round's case.

1. vLLM 0.10.1 / 0.10.1.1 and the FlashInfer CUTLASS NVFP4 MoE on a single rank (vllm-project/vllm#23094, fixed by
   #23125 in 0.10.2): the FlashInfer modular kernel is built only from the EP group's device communicator, which a
   group of one rank does not have, while the w13 halves were already swapped for FlashInfer; vLLM's own
   cutlass_moe_fp4 then runs on them (wrong output). backends/flashinfer_cutlass.yaml refuses tp x dp = 1 under
   vllm >=0.10.1,<0.10.2 (read in the 0.10.0, 0.10.1, 0.10.1.1 and 0.10.2 sdists); an unstated dp leaves tp 1
   unverified.
2. SGLang's W4AFP8 (int4_w4a8) MoE over DeepEP normal mode in 0.5.16 and 0.5.17 (sgl-project/sglang#33660, fixed by PR
   #33669 in 0.5.18): cutlass_w4a8_moe_deepep_normal launches deepep_post_reorder_triton_kernel without the
   routed_scaling_factor argument the kernel gained in 0.5.16 (TypeError at the first prefill). backends/a2a/deepep.yaml
   marks DeepEP unavailable to SGLang for int4_w4a8 in normal mode (auto included: prefill runs normal) under
   sglang >=0.5.16,<0.5.18 (read in the 0.5.14 .. 0.5.18 wheels).
3. SGLang's DeepGEMM MoE and per-tensor FP8 on Blackwell (sgl-project/sglang#26306, closed unmerged): DeepGEMM on
   sm100 takes UE8M0 weight scales, SGLang requantizes only block-FP8 weights to them, and Fp8MoEMethod.apply repeats
   per-tensor float32 scales into 128x128 blocks as they are (garbled output). backends/deep_gemm.yaml refuses
   fp8_tensor on sm100/sm103 under sglang >=0.5.6 (the branch is unchanged in every wheel read, 0.5.6 .. 0.5.23).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select

from report_helpers import cand


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# --------------------------------------- kind 1: vLLM 0.10.1 FlashInfer CUTLASS NVFP4 on one rank (vllm#23094)
# Qwen3-235B-A22B's MoE shape (not the round case's Qwen3-30B-A3B checkpoint) in NVFP4 on GB200 / B300.
QWEN3_235B = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
              "routing": "renormalize"}


def _fi(version: str, tp: int = 1, dp: int | None = 1, gpu: str = "GB200", engine: str = "vllm",
        quant: str = "nvfp4", runner: str = "flashinfer_cutlass") -> Any:
    d: dict[str, Any] = {"gpu": gpu, "engine": engine, "engine_version": version, "quant": quant, "model": QWEN3_235B,
                         "tp": tp, "ep": 1, "a2a": "none", "runner": runner}
    if dp is not None:
        d["dp"] = dp
    return moe_select.explain(d)


def _row_reasons(r: Any) -> list[Any]:
    return [x for x in r.reasons if x.source.startswith("backends/flashinfer_cutlass.yaml:")
            and "tp_dp" in x.detail]


@pytest.mark.parametrize("version", ["0.10.1", "0.10.1.1"])
@pytest.mark.parametrize("gpu", ["GB200", "B300"])
def test_vllm_0101_fi_cutlass_nvfp4_single_rank_refused(version, gpu):
    """One rank (tp 1, dp 1) under vLLM 0.10.1 / 0.10.1.1: flashinfer_cutlass is refused as parallelism_unsupported by
    the tp_dp row alone (its detail names the cause), on GB200 and B300 alike."""
    r = _fi(version, gpu=gpu)
    assert r.plan is None, _why(r)
    rows = _row_reasons(r)
    assert [x.code for x in r.reasons if x.backend == "flashinfer_cutlass"] == ["parallelism_unsupported"], _why(r)
    assert len(rows) == 1 and "cutlass_moe_fp4" in rows[0].detail, _why(r)


@pytest.mark.parametrize("version", ["0.10.0", "0.10.2", "0.11.0"])
def test_vllm_fi_cutlass_nvfp4_single_rank_planned_outside_the_window(version):
    """0.10.0 built the FlashInfer kernel in FusedMoE.__init__ at any size and 0.10.2 calls flashinfer_cutlass_moe_fp4
    without a modular kernel (vllm#23125): one rank plans flashinfer_cutlass, with no tp_dp reason."""
    r = _fi(version)
    assert r.plan is not None and r.plan.runner == "flashinfer_cutlass", _why(r)
    assert not _row_reasons(r), _why(r)


@pytest.mark.parametrize(("tp", "dp"), [(1, 2), (2, 1), (4, 2), (2, None)])
def test_vllm_0101_fi_cutlass_nvfp4_several_ranks_planned(tp, dp):
    """More than one rank in the MoE group (dp 2 at tp 1, tp 2, or tp 2 with dp unstated: every dp gives tp x dp >= 2)
    has the EP group's communicator build the FlashInfer kernel: planned, and no unknown from the row."""
    r = _fi("0.10.1", tp=tp, dp=dp)
    assert r.plan is not None and r.plan.runner == "flashinfer_cutlass", _why(r)
    assert not _row_reasons(r), _why(r)
    assert not [u for u in cand(r, "flashinfer_cutlass").unknowns if "tp_dp" in u.detail]


def test_vllm_0101_fi_cutlass_nvfp4_tp1_unstated_dp_unverified():
    """tp 1 without dp: the row refuses at dp 1 and not at dp 2, so the plan is unverified with an unknown naming dp
    (parallelism_unsupported), not refused and not supported."""
    r = _fi("0.10.1", dp=None)
    assert r.plan is not None and r.plan.runner == "flashinfer_cutlass", _why(r)
    assert r.plan.evidence == "unverified"
    unknowns = [u for u in cand(r, "flashinfer_cutlass").unknowns if "tp_dp" in u.detail]
    assert [u.code for u in unknowns] == ["parallelism_unsupported"], unknowns
    assert "does not state dp" in unknowns[0].detail and "dp" in unknowns[0].settle, unknowns


def test_vllm_0101_row_leaves_other_formats_engines_and_runners_alone():
    """The row is NVFP4's under vLLM: it gives no reason for bf16 on one rank under 0.10.1 nor for SGLang's NVFP4 on
    one rank, and vLLM's auto answer on one rank picks another runner than flashinfer_cutlass (the row its reason)."""
    bf16 = _fi("0.10.1", quant="bf16")
    assert not _row_reasons(bf16), _why(bf16)
    sgl = _fi("0.5.12", engine="sglang")
    assert not _row_reasons(sgl), _why(sgl)
    auto = _fi("0.10.1", runner="auto")
    assert auto.plan is not None and auto.plan.runner != "flashinfer_cutlass", _why(auto)
    assert len(_row_reasons(auto)) == 1, _why(auto)


# --------------------------------------- kind 2: SGLang W4AFP8 over DeepEP normal, 0.5.16 / 0.5.17 (sglang#33660)
# DeepSeek-R1's MoE shape in W4AFP8 (not the round case's GLM-5.2) on H20 at TP 8 / EP 8.
DSR1 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3"}
W4A8_ROW = "a2a deepep fails under sglang with sglang >=0.5.16,<0.5.18"


def _w4a8(version: str, mode: str, engine: str = "sglang", quant: str = "int4_w4a8", runner: str = "cutlass") -> Any:
    d: dict[str, Any] = {"gpu": "H20", "engine": engine, "engine_version": version, "quant": quant, "model": DSR1,
                         "tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": mode, "runner": runner}
    if mode == "low_latency":
        d["max_tokens_per_rank"] = 128
    return moe_select.explain(d)


def _w4a8_reasons(r: Any) -> list[Any]:
    return [x for x in r.reasons if x.source.startswith("backends/a2a/deepep.yaml:") and W4A8_ROW in x.detail]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
@pytest.mark.parametrize("mode", ["normal", "auto"])
def test_sglang_w4afp8_deepep_normal_refused_in_0516_0517(version, mode):
    """Normal mode, and auto (prefill runs normal), under 0.5.16 / 0.5.17: refused as a2a_unsupported by the deepep.yaml
    row alone, whose detail names the missing argument."""
    r = _w4a8(version, mode)
    assert r.plan is None, _why(r)
    rows = _w4a8_reasons(r)
    assert len(rows) == 1 and rows[0].code == "a2a_unsupported", _why(r)
    assert "routed_scaling_factor" in rows[0].detail, _why(r)
    assert {x.code for x in r.reasons if x.backend in (None, "cutlass")} == {"a2a_unsupported"}, _why(r)


@pytest.mark.parametrize(("version", "mode"), [("0.5.15", "normal"), ("0.5.15.post1", "auto"), ("0.5.18", "normal"),
                                               ("0.5.18", "auto"), ("0.5.16", "low_latency"),
                                               ("0.5.17", "low_latency")])
def test_sglang_w4afp8_deepep_planned_outside_the_row(version, mode):
    """0.5.15.x's kernel takes no such argument, 0.5.18 passes 1.0 (#33669), and low-latency mode never runs the normal
    path: cutlass is planned with no reason from the row."""
    r = _w4a8(version, mode)
    assert r.plan is not None and r.plan.runner == "cutlass", _why(r)
    assert not _w4a8_reasons(r), _why(r)


def test_sglang_w4afp8_row_leaves_other_formats_and_vllm_alone():
    """The row is SGLang's W4AFP8: block-FP8 over DeepEP normal under 0.5.16 and vLLM's W4A8 over DeepEP normal get no
    reason from it."""
    fp8 = _w4a8("0.5.16", "normal", quant="fp8_block", runner="auto")
    assert not _w4a8_reasons(fp8), _why(fp8)
    assert fp8.plan is not None, _why(fp8)
    vllm = _w4a8("0.24.0", "normal", engine="vllm", runner="auto")
    assert not _w4a8_reasons(vllm), _why(vllm)


# --------------------------------------- kind 3: SGLang deep_gemm x per-tensor FP8 on sm100 (sglang#26306)
# Qwen3-30B-A3B's MoE shape in per-tensor FP8 (not the round case's GLM-4.5-Air) on B300 / GB200, EP 4.
QWEN3_30B = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}


def _dgt(version: str, gpu: str = "B300", a2a: str = "deepep", quant: str = "fp8_tensor", engine: str = "sglang",
         runner: str = "deep_gemm") -> Any:
    ep = 4 if a2a == "deepep" else 1
    d: dict[str, Any] = {"gpu": gpu, "engine": engine, "engine_version": version, "quant": quant, "model": QWEN3_30B,
                         "tp": 4, "ep": ep, "a2a": a2a, "runner": runner}
    if a2a == "deepep":
        d["a2a_mode"] = "normal"
    return moe_select.explain(d)


def _dgt_row(r: Any) -> list[Any]:
    return [x for x in r.reasons if x.source.startswith("backends/deep_gemm.yaml:")
            and "does not run fp8_tensor" in x.detail]


@pytest.mark.parametrize("version", ["0.5.6", "0.5.12", "0.5.17", "0.5.23"])
@pytest.mark.parametrize(("gpu", "a2a"), [("B300", "deepep"), ("GB200", "deepep"), ("B300", "none")])
def test_sglang_deep_gemm_fp8_tensor_refused_on_sm100(version, gpu, a2a):
    """Per-tensor FP8 with deep_gemm on sm100/sm103, over DeepEP or without an all-to-all, from 0.5.6 to the newest
    wheel read: refused as quant_unsupported by the one deep_gemm.yaml row."""
    r = _dgt(version, gpu=gpu, a2a=a2a)
    assert r.plan is None, _why(r)
    rows = _dgt_row(r)
    assert len(rows) == 1 and rows[0].code == "quant_unsupported", _why(r)
    assert {x.code for x in r.reasons if x.backend == "deep_gemm"} == {"quant_unsupported"}, _why(r)


def test_sglang_deep_gemm_fp8_tensor_row_leaves_hopper_block_fp8_vllm_and_old_releases_alone():
    """The row is sm100's and SGLang's from 0.5.6: per-tensor FP8 on H200, block FP8 on B300, vLLM's per-tensor FP8 on
    B300 and SGLang 0.5.5 get no reason from it (block FP8 on B300 plans deep_gemm)."""
    for r in (_dgt("0.5.12", gpu="H200"), _dgt("0.5.12", quant="fp8_block"), _dgt("0.24.0", engine="vllm"),
              _dgt("0.5.5")):
        assert not _dgt_row(r), _why(r)
    block = _dgt("0.5.12", quant="fp8_block")
    assert block.plan is not None and block.plan.runner == "deep_gemm", _why(block)


def test_sglang_auto_fp8_tensor_on_sm100_does_not_pick_deep_gemm():
    """Under auto, SGLang 0.5.12 per-tensor FP8 on B300 over DeepEP plans a runner other than deep_gemm, and deep_gemm's
    candidate carries the row's refusal."""
    r = _dgt("0.5.12", runner="auto")
    assert r.plan is None or r.plan.runner != "deep_gemm", _why(r)
    assert len(_dgt_row(r)) == 1, _why(r)

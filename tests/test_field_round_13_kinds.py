"""Field round 13 of issue 21 (tests/cases/field_round_13.yaml), fixed as kinds: each kind a round case missed, tested on
other deployments of the same kind than the round's case.

1. nvidia-cutlass-dsl 4.5.0 lowers CuTe-DSL's warp-level FP4 block-scaled MMA (the SM120/121 b12x kernels) to PTX that
   ptxas rejects on sm_120a/121a; 4.5.1 fixes it (NVIDIA/cutlass#3227). Before 4.5.0 the op admits sm_120a only, so
   SM121 needs 4.5.0 or later. A package need on every runner that runs FlashInfer's b12x kernels on SM12x
   (flashinfer_b12x, trtllm_cutedsl's SM120/121 path), refused as dependency_missing.
3. FlashInfer's CuTe-DSL fused MoE (flashinfer_cutedsl) builds tcgen05 block-scaled MMAs, which CuTe-DSL admits on the
   SM100 family only (NVIDIA/cutlass#2800): a negative support row (arch_unsupported) for SM12x, SM9x and older.
2. (left open, judged) AITER's gfx950 1-stage block-FP8 default at per-rank intermediate 1536 (ROCm/aiter#2187) is the
   32x384 asm kernel of ROCm/aiter#3471, already refused by aiter.yaml for amd-aiter >=0.1.8,<0.1.15.post1; the round
   case names no AITER version and is judged at checked_up_to (planned, xfail kept). Tests pin both sides.
4. FlashInfer 0.2.10's FP4 block-scale MoE launcher (trtllm_fp4_block_scale_moe, NVFP4 and MXFP4) computed the weight
   scale vector size from the global expert count and raises 'unsupported weight_scale_vec_size' under expert
   parallelism (flashinfer-ai/flashinfer#1422; fixed by #1398, first in 0.2.11): a flashinfer-python !=0.2.10 need where
   ep >= 2 on the runners that call it (flashinfer_mxfp4's SM100 path, flashinfer_trtllm, flashinfer_trtllm_routed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
# Qwen3-30B-A3B's routed experts (another deployment than the round's model_config case: an inline model).
QWEN30 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
          "routing": "renormalize"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# ------------------------------------------------- kind 1: nvidia-cutlass-dsl 4.5.0 x SM12x FP4 MMA (cutlass#3227)
def _b12x(gpu: str, runner: str, engine: str, cutlass_dsl: str) -> Any:
    return _explain(gpu=gpu, engine=engine, quant="nvfp4", model=QWEN30, runner=runner,
                    packages={"flashinfer-python": "0.6.11", "nvidia-cutlass-dsl": cutlass_dsl})


@pytest.mark.parametrize(("runner", "engine", "yaml"), [("flashinfer_b12x", "vllm", "flashinfer_b12x.yaml"),
                                                         ("trtllm_cutedsl", "trtllm", "trtllm_cutedsl.yaml")])
@pytest.mark.parametrize("gpu", ["RTX PRO 6000", "GB10"])
def test_b12x_refused_on_cutlass_dsl_450(runner, engine, yaml, gpu):
    """NVFP4 Qwen3-30B-shaped MoE on SM120 and SM121 with FlashInfer's b12x kernels (vLLM flashinfer_b12x, TensorRT-LLM
    CUTEDSL) and nvidia-cutlass-dsl 4.5.0: refused (dependency_missing at the runner's !=4.5.0 need, naming the installed
    version); 4.5.1 plans."""
    r = _b12x(gpu, runner, engine, "4.5.0")
    assert r.plan is None, _why(r)
    assert _codes(r) == {"dependency_missing"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith(f"backends/{yaml}:")
    assert "nvidia-cutlass-dsl !=4.5.0; 4.5.0 is installed" in reason.detail
    ok = _b12x(gpu, runner, engine, "4.5.1")
    assert ok.plan is not None and ok.plan.runner == runner, _why(ok)


@pytest.mark.parametrize(("runner", "engine"), [("flashinfer_b12x", "vllm"), ("trtllm_cutedsl", "trtllm")])
def test_b12x_sm121_needs_cutlass_dsl_450(runner, engine):
    """Before 4.5.0 the DSL's SM120 block-scaled MMA admits sm_120a only: 4.4.2 is refused on GB10 (sm121, naming the
    >=4.5.0 need) and planned on an RTX PRO 6000 (sm120)."""
    r = _b12x("GB10", runner, engine, "4.4.2")
    assert _codes(r) == {"dependency_missing"}, _why(r)
    (reason,) = r.reasons
    assert "nvidia-cutlass-dsl >=4.5.0; 4.4.2 is installed" in reason.detail
    ok = _b12x("RTX PRO 6000", runner, engine, "4.4.2")
    assert ok.plan is not None and ok.plan.runner == runner, _why(ok)


def test_cutlass_dsl_450_bound_is_sm12x_only():
    """trtllm_cutedsl's SM100 path (tcgen05 CuTe-DSL kernels, not the b12x ones) plans with 4.5.0; an undeclared
    nvidia-cutlass-dsl is assumed, not refused."""
    r = _b12x("B200", "trtllm_cutedsl", "trtllm", "4.5.0")
    assert r.plan is not None and r.plan.runner == "trtllm_cutedsl", _why(r)
    r = _explain(gpu="GB10", engine="vllm", quant="nvfp4", model=QWEN30, runner="flashinfer_b12x",
                 packages={"flashinfer-python": "0.6.11"})
    assert r.plan is not None and r.plan.runner == "flashinfer_b12x", _why(r)


# --------------------------------- kind 4: FlashInfer 0.2.10 FP4 block-scale MoE under expert parallelism (flashinfer#1422)
GPTOSS = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880, "activation": "swiglu_oai",
          "routing": "renormalize"}
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "num_shared_experts": 1, "n_group": 8, "topk_group": 4}


@pytest.mark.parametrize(("runner", "yaml", "engine", "gpu", "quant", "model", "tp", "ep"), [
    ("flashinfer_mxfp4", "flashinfer_mxfp4.yaml", "sglang", "B300", "mxfp4", GPTOSS, 8, 8),
    ("flashinfer_trtllm", "flashinfer_trtllm.yaml", "vllm", "B300", "nvfp4", DSV3, 8, 8),
    ("flashinfer_trtllm", "flashinfer_trtllm.yaml", "sglang", "B200", "nvfp4", DSV3, 4, 4),
    ("flashinfer_trtllm_routed", "flashinfer_trtllm_routed.yaml", "vllm", "B200", "mxfp4", GPTOSS, 2, 2),
])
def test_fp4_block_scale_moe_refused_on_flashinfer_0210_with_ep(runner, yaml, engine, gpu, quant, model, tp, ep):
    """FP4 MoE on the TRT-LLM-gen block-scale launcher with expert parallelism and flashinfer-python 0.2.10: refused
    (dependency_missing at the runner's !=0.2.10 need, which holds where ep >= 2); 0.2.9 and 0.2.11 plan, and so does
    0.2.10 without expert parallelism (the launcher's expert count is then the local one)."""
    def run(version: str, ep_: int) -> Any:
        return _explain(gpu=gpu, engine=engine, quant=quant, model=model, tp=tp, ep=ep_, runner=runner,
                        packages={"flashinfer-python": version})
    r = run("0.2.10", ep)
    assert _codes(r) == {"dependency_missing"}, _why(r)
    (reason,) = r.reasons
    assert reason.source.startswith(f"backends/{yaml}:")
    assert "flashinfer-python !=0.2.10; 0.2.10 is installed" in reason.detail
    for version, ep_ in (("0.2.11", ep), ("0.2.10", 1)) + ((("0.2.9", ep),) if quant == "nvfp4" else ()):
        ok = run(version, ep_)
        assert ok.plan is not None and ok.plan.runner == runner, (version, ep_, _why(ok))


def test_flashinfer_0210_bound_is_the_fp4_launcher_only():
    """The 0.2.10 bound is the FP4 launcher's: block FP8 on flashinfer_trtllm (trtllm_fp8_block_scale_moe) with
    flashinfer-python 0.2.10 at EP 8 plans; flashinfer_mxfp4's SM90 CUTLASS path is not touched by it (refused there for
    its own minimum, 0.6.10, not for 0.2.10)."""
    r = _explain(gpu="B200", engine="vllm", quant="fp8_block", model=DSV3, tp=8, ep=8, runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.2.10"})
    assert r.plan is not None and r.plan.runner == "flashinfer_trtllm", _why(r)
    r = _explain(gpu="H200", engine="sglang", quant="mxfp4", model=GPTOSS, tp=4, ep=2, runner="flashinfer_mxfp4",
                 packages={"flashinfer-python": "0.2.10"})
    assert not any("!=0.2.10" in x.detail for x in r.reasons), _why(r)


# ------------------------------------ kind 3: FlashInfer's CuTe-DSL fused MoE is tcgen05 (SM100 family) only (cutlass#2800)
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize(("gpu", "arch"), [("RTX PRO 6000", "sm120"), ("GB10", "sm121"), ("H200", "sm90"), ("A100", "sm80")])
def test_cutedsl_refused_off_the_tcgen05_archs(engine, gpu, arch):
    """DeepSeek-V3-shaped NVFP4 at TP 4 / EP 4 with flashinfer_cutedsl on a GPU without tcgen05: refused as
    arch_unsupported at flashinfer_cutedsl.yaml's negative support row (the tcgen05 BlockScaledMmaOp's admissible
    archs), under both engines, whatever nvidia-cutlass-dsl; before it was 'eligible, unverified'."""
    r = _explain(gpu=gpu, engine=engine, quant="nvfp4", model=DSV3, tp=4, ep=4, runner="flashinfer_cutedsl",
                 packages={"flashinfer-python": "0.6.18", "nvidia-cutlass-dsl": "4.7.1"})
    assert r.plan is None, _why(r)
    assert "arch_unsupported" in _codes(r), _why(r)
    (reason,) = [x for x in r.reasons if x.code == "arch_unsupported"]
    assert reason.source.startswith("backends/flashinfer_cutedsl.yaml:")
    assert f"does not run nvfp4 on {arch}" in reason.detail


@pytest.mark.parametrize("gpu", ["B200", "B300"])
def test_cutedsl_still_planned_on_sm100_family(gpu):
    """The tcgen05 archs keep their plan (the negative row names none of the SM100 family)."""
    r = _explain(gpu=gpu, engine="sglang", quant="nvfp4", model=DSV3, tp=4, ep=4, runner="flashinfer_cutedsl",
                 packages={"flashinfer-python": "0.6.18", "nvidia-cutlass-dsl": "4.7.1"})
    assert r.plan is not None and r.plan.runner == "flashinfer_cutedsl", _why(r)


# ----------------------- kind 2 (left open, judged): AITER's gfx950 1-stage block-FP8 default at inter 1536 (aiter#2187)
QWEN235_FP8 = "examples/model_configs/Qwen__Qwen3-235B-A22B-FP8"
QWEN235 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "renormalize"}


@pytest.mark.parametrize(("aiter", "refused"), [("0.1.11", True), ("0.1.11.post1", True), ("0.1.15.post1", False),
                                                 ("0.1.20", False), (None, False)])
def test_aiter2187_is_the_32x384_fact_judged_at_checked_up_to(aiter, refused):
    """The round case's deployment (Qwen3-235B block FP8 on 8 x MI350X under vLLM, TP 8 / EP 8, aiter): with the AITER
    releases of the report's week (0.1.11, 0.1.11.post1) it is refused by aiter.yaml's 32x384 asm-kernel row (per-rank
    intermediate 1536, a multiple of 384); from the rebuilt kernel (0.1.15.post1) and undeclared (checked_up_to 0.1.20)
    it plans, which is why the case stays xfail."""
    dep: dict[str, Any] = {"gpu": "MI350X", "engine": "vllm", "tp": 8, "ep": 8, "runner": "aiter",
                           "model_config": str(Path(__file__).resolve().parents[1] / QWEN235_FP8)}
    if aiter is not None:
        dep["packages"] = {"amd-aiter": aiter}
    r = _explain(**dep)
    assert (r.plan is None) is refused, _why(r)
    if refused:
        assert _codes(r) == {"quant_unsupported"}, _why(r)
        (reason,) = r.reasons
        assert reason.source.startswith("backends/aiter.yaml:")
        assert "amd-aiter >=0.1.8,<0.1.15.post1" in reason.detail


@pytest.mark.parametrize(("inter", "tp", "ep", "refused"), [(1536, 8, 8, True), (1536, 2, 1, True), (1536, 4, 1, True),
                                                            (2048, 8, 8, False), (1280, 8, 8, False)])
def test_aiter_32x384_row_follows_the_per_rank_intermediate(inter, tp, ep, refused):
    """The same kind under SGLang on MI355X with amd-aiter 0.1.11: refused where 384 divides the per-rank intermediate
    (1536 at EP 8, 768 at TP 2, 384 at TP 4), planned where it does not (2048 or 1280 per rank at EP 8)."""
    model = {**QWEN235, "moe_intermediate_size": inter}
    r = _explain(gpu="MI355X", engine="sglang", quant="fp8_block", model=model, tp=tp, ep=ep, runner="aiter",
                 packages={"amd-aiter": "0.1.11"})
    assert (r.plan is None) is refused, _why(r)
    if refused:
        assert _codes(r) == {"quant_unsupported"}, _why(r)
    else:
        assert r.plan.runner == "aiter"

"""Field round 12 of issue 21 (tests/cases/field_round_12.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case.

1. sgl-kernel's default wheel is built with CUDA 12.9 from 0.3.9 and its W4A8 grouped GEMM (cutlass_w4a8_moe_mm) fails on
   CUDA 12.4 / 12.6 runtimes (sgl-project/sglang#10215): a ``toolchain`` entry of tool ``cuda`` (the deployment's
   ``cuda``, the CUDA runtime) on SGLang's cutlass W4A8 with sglang-kernel >= 0.3.9, refused as toolchain_unsupported.
3. FlashInfer's CuTe-DSL fused MoE (flashinfer_cutedsl) breaks with nvidia-cutlass-dsl >= 4.4.0 in FlashInfer 0.6.4 ..
   0.6.6 (flashinfer-ai/flashinfer#2693, fixed by #2735 in 0.6.7): a package need bounded by another package's versions
   (``requires`` on a ``packages`` entry), refused as dependency_missing.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.capability import PackageNeedFact, Toolchain

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
# DeepSeek-V3's routed experts in NVFP4 (another deployment than the round's Qwen3-30B-A3B-NVFP4 case).
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "num_shared_experts": 1, "n_group": 8, "topk_group": 4}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


# ------------------------------------------------------------ kind 1: sgl-kernel cu129 wheel x CUDA runtime, W4A8
QWEN235 = {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536, "activation": "silu",
           "routing": "renormalize"}


def _w4a8(engine: str = "sglang", cuda: str | None = None, kernel: str | None = "0.4.5") -> Any:
    env: dict[str, Any] = {"packages": {"sglang-kernel": kernel}} if kernel else {"packages": {}}
    if cuda is not None:
        env["cuda"] = cuda
    return _explain(gpu="H200", engine=engine, quant="int4_w4a8", model=QWEN235, tp=4, runner="cutlass", **env)


@pytest.mark.parametrize(("cuda", "ok"), [("12.4", False), ("12.6", False), ("12.8", True), ("12.9", True), ("13.0", True)])
def test_sglang_w4a8_cutlass_needs_cuda_128_runtime(cuda, ok):
    """Qwen3-235B-shaped W4A8 on H200 at TP 4 under SGLang with sglang-kernel 0.4.5 and runner cutlass: refused on a
    CUDA 12.4 / 12.6 runtime (toolchain_unsupported at cutlass.yaml's cuda entry, naming the runtime), planned on 12.8
    and newer."""
    r = _w4a8(cuda=cuda)
    assert (r.plan is not None) is ok, _why(r)
    if ok:
        assert r.plan.runner == "cutlass"
        assert not any("CUDA runtime" in a for a in r.plan.assumptions)
    else:
        assert _codes(r) == {"toolchain_unsupported"}, _why(r)
        (reason,) = r.reasons
        assert reason.source.startswith("backends/cutlass.yaml:")
        assert f"CUDA runtime >= 12.8; cuda is {cuda}" in reason.detail


def test_sglang_w4a8_cuda_gate_bounded_by_kernel_version_and_engine():
    """The gate holds from sglang-kernel 0.3.9 (the cu129 default): 0.3.8 on CUDA 12.6 is planned; vLLM's own CUTLASS
    W4A8 (compiled into vLLM) is not touched by it."""
    assert _w4a8(cuda="12.6", kernel="0.3.8").plan is not None
    r = _w4a8(cuda="12.6", kernel="0.3.9")
    assert _codes(r) == {"toolchain_unsupported"}, _why(r)
    r = _w4a8(engine="vllm", cuda="12.6", kernel=None)
    assert r.plan is not None and r.plan.runner == "cutlass", _why(r)


def test_sglang_w4a8_cuda_not_declared_is_an_assumption():
    """No cuda declared: planned, and the plan's assumptions say the CUDA runtime minimum was assumed (with the fact's
    file:line), rather than passing silently."""
    r = _w4a8()
    assert r.plan is not None, _why(r)
    (said,) = [a for a in r.plan.assumptions if "CUDA runtime" in a]
    assert "CUDA runtime >= 12.8 assumed" in said and "backends/cutlass.yaml:" in said


def test_toolchain_tool_is_closed():
    """A toolchain entry names nvcc or cuda; another tool is a load error."""
    assert Toolchain(tool="cuda", min="12.8", source="a/b#1").tool == "cuda"
    with pytest.raises(ValueError, match="tool"):
        Toolchain(tool="gcc", min="12", source="a/b#1")


# ------------------------------------------------------------------- kind 3: FlashInfer CuTe-DSL x nvidia-cutlass-dsl
def _cutedsl(packages: dict[str, str | None], engine: str = "sglang") -> Any:
    return _explain(gpu="B300", engine=engine, quant="nvfp4", model=DSV3, tp=4, ep=4, packages=packages,
                    runner="flashinfer_cutedsl")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize(("flashinfer", "cutlass_dsl", "ok"), [
    ("0.6.4", "4.4.0", False), ("0.6.6", "4.4.1", False), ("0.6.5", "4.7.1", False),  # the bad pairs
    ("0.6.5", "4.3.5", True), ("0.6.6", "4.3.0", True),                                 # older cutlass-dsl works
    ("0.6.7", "4.4.0", True), ("0.6.18", "4.7.1", True),                                # the fixed releases
])
def test_cutedsl_refused_on_cutlass_dsl_440_before_flashinfer_067(engine, flashinfer, cutlass_dsl, ok):
    """DeepSeek-V3-shaped NVFP4 on B300 at TP 4 / EP 4 with flashinfer_cutedsl: refused (dependency_missing, at the
    requires-bounded nvidia-cutlass-dsl need of flashinfer_cutedsl.yaml) exactly where FlashInfer is 0.6.4 .. 0.6.6 and
    nvidia-cutlass-dsl is 4.4.0 or later; planned on either side of both bounds."""
    r = _cutedsl({"flashinfer-python": flashinfer, "nvidia-cutlass-dsl": cutlass_dsl}, engine)
    assert (r.plan is not None) is ok, _why(r)
    if ok:
        assert r.plan.runner == "flashinfer_cutedsl"
    else:
        assert _codes(r) == {"dependency_missing"}, _why(r)
        (reason,) = r.reasons
        assert reason.source.startswith("backends/flashinfer_cutedsl.yaml:")
        assert "nvidia-cutlass-dsl <4.4.0 with flashinfer-python >=0.6.4,<0.6.7" in reason.detail
        assert f"{cutlass_dsl} is installed" in reason.detail


def test_cutedsl_interaction_undeclared_flashinfer_is_the_newest_checked():
    """FlashInfer not declared is taken at its checked_up_to (0.6.18, past the fix): nvidia-cutlass-dsl 4.4.0 alone is
    not refused, and the interaction need is not listed among the plan's packages (it does not apply)."""
    r = _cutedsl({"nvidia-cutlass-dsl": "4.4.0"})
    assert r.plan is not None, _why(r)
    assert [p.version for p in r.plan.packages if p.name == "nvidia-cutlass-dsl"] == [None]


def test_cutedsl_interaction_cutlass_dsl_not_installed_names_the_bound():
    """nvidia-cutlass-dsl declared absent with FlashInfer 0.6.5: refused by the unconditional need and by the bounded
    one, whose text names the FlashInfer versions it holds for."""
    r = _cutedsl({"flashinfer-python": "0.6.5", "nvidia-cutlass-dsl": None})
    assert r.plan is None
    details = [x.detail for x in r.reasons if x.code == "dependency_missing"]
    assert any("with flashinfer-python >=0.6.4,<0.6.7" in d and "not installed" in d for d in details), details


def test_package_need_requires_is_validated():
    """A package need's requires takes PEP 440 specifiers only (a typo is a load error naming the package)."""
    PackageNeedFact(name="nvidia-cutlass-dsl", version="<4.4.0", requires={"flashinfer-python": "<0.6.7"}, source="a/b#1")
    with pytest.raises(ValueError, match="flashinfer-python"):
        PackageNeedFact(name="nvidia-cutlass-dsl", version="<4.4.0", requires={"flashinfer-python": "before 0.6.7"},
                        source="a/b#1")

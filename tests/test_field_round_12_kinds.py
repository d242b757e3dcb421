"""Field round 12 of issue 21 (tests/cases/field_round_12.yaml), fixed as kinds: each kind a round case missed, tested on
another deployment of the same kind than the round's case.

3. FlashInfer's CuTe-DSL fused MoE (flashinfer_cutedsl) breaks with nvidia-cutlass-dsl >= 4.4.0 in FlashInfer 0.6.4 ..
   0.6.6 (flashinfer-ai/flashinfer#2693, fixed by #2735 in 0.6.7): a package need bounded by another package's versions
   (``requires`` on a ``packages`` entry), refused as dependency_missing.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.capability import PackageNeedFact

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
# DeepSeek-V3's routed experts in NVFP4 (another deployment than the round's Qwen3-30B-A3B-NVFP4 case).
DSV3 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
        "routing": "deepseek_v3", "num_shared_experts": 1, "n_group": 8, "topk_group": 4}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _why(r: Any) -> list[tuple[str, str, str]]:
    return [(x.code, x.source, x.detail) for x in r.reasons]


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

"""Issue 21, small correctness fixes.

1. TensorRT-LLM's runners (backends/trtllm_*.yaml) are refused under vLLM: their engines list is exhaustive for vLLM
   too (vLLM's --moe-backend values are the MoEBackend literal, vllm-project/vllm@00634b8acf93:vllm/config/kernel.py,
   which names no TensorRT-LLM backend); under engine trtllm their verdicts are those before the change.
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.catalog import default_catalog

from conftest import CONFIGS

NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
GPT_OSS = str(CONFIGS / "openai__gpt-oss-120b")
TRTLLM_RUNNERS = {"trtllm_cutedsl", "trtllm_cutlass", "trtllm_deepgemm", "trtllm_densegemm", "trtllm_gen",
                  "trtllm_marlin", "trtllm_megamoe_cutedsl", "trtllm_megamoe_deepgemm", "trtllm_triton",
                  "trtllm_vanilla"}


def _explain(**dep: Any) -> Any:
    d: dict[str, Any] = dict(tp=1, ep=1)
    d.update(dep)
    return moe_select.explain(d)


def test_trtllm_runner_set_is_the_catalogs():
    """The ten runners named here are exactly the catalog's trtllm_* runners (a new one is not silently skipped)."""
    cat = default_catalog()
    assert {n for n in cat.runners if n.startswith("trtllm_")} == TRTLLM_RUNNERS


@pytest.mark.parametrize("gpu", ["L40", "H200", "B200", "RTX PRO 6000"])
@pytest.mark.parametrize("model", [NVFP4, BF16, FP8, GPT_OSS])
def test_trtllm_runners_refused_under_vllm(gpu, model):
    """Under engine vllm on an NVIDIA GPU no trtllm_* runner is eligible (before: 7-9 of them were 'eligible,
    unverified'); each is refused as engine_unsupported citing its own file's engines decision (vLLM's MoEBackend)."""
    r = _explain(gpu=gpu, engine="vllm", model_config=model)
    cands = {c.backend: c for c in r.candidates if c.backend in TRTLLM_RUNNERS}
    assert set(cands) == TRTLLM_RUNNERS
    assert not [n for n, c in cands.items() if c.eligible]
    for name in TRTLLM_RUNNERS:
        eng = [x for x in r.reasons if x.backend == name and x.code == "engine_unsupported"]
        assert eng, name
        assert any(x.source.startswith(f"backends/{name}.yaml:") and "MoEBackend literal" in x.detail for x in eng), \
            [(x.source, x.detail) for x in eng]


# Measured with the catalog before the change (commit 1b0f02b): plan and eligible trtllm_* runners under engine trtllm.
TRTLLM_BEFORE = [
    ("H200", NVFP4, "trtllm_marlin", {"trtllm_marlin": "supported", "trtllm_vanilla": "unverified"}),
    ("H200", GPT_OSS, "trtllm_triton", {"trtllm_cutlass": "supported", "trtllm_triton": "supported"}),
    ("B200", NVFP4, "trtllm_cutlass", {"trtllm_cutedsl": "supported", "trtllm_cutlass": "supported",
                                       "trtllm_densegemm": "supported", "trtllm_gen": "supported",
                                       "trtllm_megamoe_cutedsl": "supported", "trtllm_vanilla": "unverified"}),
    ("B200", FP8, "trtllm_gen", {"trtllm_deepgemm": "supported", "trtllm_gen": "supported",
                                 "trtllm_vanilla": "unverified"}),
    ("RTX PRO 6000", NVFP4, "trtllm_cutlass", {"trtllm_cutedsl": "unverified", "trtllm_cutlass": "supported",
                                               "trtllm_vanilla": "unverified"}),
    ("L40", FP8, None, {"trtllm_vanilla": "unverified"}),
]


@pytest.mark.parametrize("gpu,model,plan,eligible", TRTLLM_BEFORE)
def test_trtllm_runners_unchanged_under_trtllm(gpu, model, plan, eligible):
    """Under engine trtllm the plan and the eligible trtllm_* runners (with their evidence) are as before, and no
    trtllm_* runner carries an engine_unsupported reason."""
    r = _explain(gpu=gpu, engine="trtllm", model_config=model)
    assert (r.plan.runner if r.plan else None) == plan
    assert {c.backend: c.evidence for c in r.candidates if c.eligible and c.backend in TRTLLM_RUNNERS} == eligible
    assert not [x for x in r.reasons if x.backend in TRTLLM_RUNNERS and x.code == "engine_unsupported"]

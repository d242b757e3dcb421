"""Field round 34 (tests/cases/field_round_34.yaml), fixed as kinds: the engines' rules for the MoE layers of a
speculative-decoding draft (the ``mtp`` layer kind).

1. vLLM's ``--moe-backend`` is the draft's too (the draft's VllmConfig inherits kernel_config.moe_backend unless the
   speculative config names its own): a runner named for the deployment is the MTP kind's, as TensorRT-LLM's
   moe_config.backend already was (vllm-project/vllm#51960).
2. vLLM 0.29.x's Model Runner V2 loads the draft with the target's config and ignores the draft's own moe_backend
   (vllm-project/vllm#54788, fixed in 0.30.0): ``layer_runners.mtp`` there is planned as the target's runner, with a
   note.
3. SGLang 0.5.7 .. 0.5.11 never run flashinfer_trtllm on a draft's MoE layers (sgl-project/sglang#15002): a fact on
   the new condition ``layer_kind``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
NVFP4 = str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4")     # bf16 MTP layer beside NVFP4


def _mtp(r):
    return next(k for k in r.plan.layers if k.deployment.layer_kind == "mtp") if r.plan is not None else None


@pytest.mark.parametrize("version", ["0.25.1", "0.28.0", "0.30.0"])
def test_vllm_moe_backend_is_the_drafts_too(version):
    r = moe_select.explain({"gpu": "GB10", "engine": "vllm", "engine_version": version, "model_config": NVFP4,
                            "runner": "flashinfer_b12x"})
    assert r.plan is None and "no runner for the mtp layers (quant_unsupported)" in r.summary(), r.summary()
    ok = moe_select.explain({"gpu": "GB10", "engine": "vllm", "engine_version": version, "model_config": NVFP4,
                             "runner": "flashinfer_cutlass"})
    assert ok.plan is not None and _mtp(ok).runner == "flashinfer_cutlass", ok.summary()


@pytest.mark.parametrize("version, refused", [("0.28.0", False), ("0.29.0", True), ("0.30.0", False)])
def test_vllm_029_ignores_the_drafts_own_moe_backend(version, refused):
    dep = {"gpu": "RTX PRO 6000", "engine": "vllm", "engine_version": version, "model_config": NVFP4,
           "runner": "flashinfer_b12x", "layer_runners": {"mtp": "flashinfer_cutlass"}}
    r = moe_select.explain(dep)
    assert (r.plan is None) == refused, r.summary()
    noted = any("Model Runner V2" in n for n in r.deployment.notes)
    assert noted == refused, r.deployment.notes
    if not refused:
        assert _mtp(r).runner == "flashinfer_cutlass"


@pytest.mark.parametrize("version, refused", [("0.5.6.post2", False), ("0.5.9", True), ("0.5.11", True),
                                              ("0.5.12", False)])
def test_sglang_drafts_never_run_flashinfer_trtllm_in_0_5_7_to_0_5_11(version, refused):
    # FlashInfer declared past the BF16 launcher's fix: these releases' own pins are refused by flashinfer_trtllm.yaml's
    # >=0.6.18rc2 need on their own (tests/test_field_round_57_kinds.py); this test is the engine's window
    dep = {"gpu": "B200", "engine": "sglang", "engine_version": version, "model_config": NVFP4, "tp": 4,
           "runner": "flashinfer_trtllm", "layer_runners": {"mtp": "flashinfer_trtllm"},
           "packages": {"flashinfer-python": "0.6.18"}}
    r = moe_select.explain(dep)
    assert (r.plan is None) == refused, r.summary()
    if refused:
        assert "no runner for the mtp layers (engine_unsupported)" in r.summary(), r.summary()
    main = moe_select.explain({**dep, "layer_runners": {"mtp": "triton"}})
    assert main.plan is not None and main.plan.runner == "flashinfer_trtllm", main.summary()   # the main layers still run it

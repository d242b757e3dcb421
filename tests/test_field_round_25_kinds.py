"""Field round 25 (2026-12-03; tests/cases/field_round_25.yaml), its two wrong answers fixed as kinds, tested on both
sides of each bound. The expectations are written by hand from the SGLang wheels the fact cites (PyPI 0.5.9 .. 0.5.23), not computed
from the facts.

SGLang 0.5.11 .. 0.5.22 on ROCm (gfx942, gfx950) under SGLANG_USE_AITER (its ROCm images' setting) shuffle block-FP8
expert weights into AITER's layout whatever the MoE runner, keep an explicit ``--moe-runner-backend triton``, and call
AITER only for the aiter runner: Triton computes on shuffled weights, wrong output (AMD-AGI/Hyperloom#1459). 0.5.10.post1
and before run AITER whenever the variable is set (the shuffle matches); 0.5.23 shuffles only for the aiter runner.

Kind 2: SGLang's MXFP4 weights-and-activations MoE (Quark's W4A4 scheme) builds a runner only for aiter from 0.5.11:
another runner crashes at the first forward (0.5.11 .. 0.5.22) or is refused at startup (0.5.23)
(AMD-AGI/Hyperloom#1036).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import refusals

QWEN3_NEXT = {"num_experts": 512, "top_k": 10, "hidden_size": 2048, "moe_intermediate_size": 512, "activation": "silu"}
DEP = dict(engine="sglang", quant="fp8_block", model=QWEN3_NEXT, tp=4, runner="triton")


def _explain(**over: Any) -> Any:
    return moe_select.explain({**DEP, **over})


@pytest.mark.parametrize("version", ["0.5.11", "0.5.16", "0.5.22"])
@pytest.mark.parametrize("gpu", ["MI300X", "MI355X"])
def test_sglang_triton_on_aiter_shuffled_block_fp8_is_refused(gpu, version):
    """The row holds under SGLANG_USE_AITER (the deployment's vendor_library): refused with it on, planned with it off,
    unverified (strict refuses) when the deployment does not say (a new user's trial: a launch with SGLANG_USE_AITER=0
    was refused, the variable not read)."""
    r = _explain(gpu=gpu, engine_version=version, vendor_library=True)
    assert r.plan is None
    codes = refusals(r, "triton")
    assert set(codes) == {"quant_unsupported"}, codes
    assert codes["quant_unsupported"].startswith("backends/triton.yaml:")
    r = _explain(gpu=gpu, engine_version=version, vendor_library=False)
    assert r.plan is not None and r.plan.runner == "triton", r.summary()
    assert not any("vendor_library" in u.detail for u in r.plan.unknowns), r.plan.unknowns
    r = _explain(gpu=gpu, engine_version=version)
    assert r.plan is not None and r.plan.runner == "triton" and r.plan.evidence == "unverified"
    assert any("does not state vendor_library" in u.detail and "SGLANG_USE_AITER" in u.settle for u in r.plan.unknowns)
    assert _explain(gpu=gpu, engine_version=version, strict=True).plan is None


@pytest.mark.parametrize("value, planned", [("0", True), ("false", True), ("1", False), ("true", False)])
def test_sglang_use_aiter_in_a_launch_line_decides(value, planned):
    """SGLANG_USE_AITER in a launch line is read (an EnvBool) as the deployment's vendor_library."""
    from moe_select.launch_line import from_command

    launch = from_command(f"SGLANG_USE_AITER={value} python -m sglang.launch_server --model-path M --tp 2 "
                          "--moe-runner-backend triton", engine_version="0.5.22",
                          model_config=str(Path(__file__).resolve().parents[1] / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8"))
    assert launch.deployment["vendor_library"] is (value in ("1", "true"))
    r = launch.explain(deployment={"gpu": "MI300X"})
    assert (r.plan is not None) is planned, r.summary()


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.23"])
def test_sglang_triton_block_fp8_outside_the_bounds_is_planned(version):
    """Before 0.5.11 AITER computes whatever the runner (the shuffle matches: no wrong output, but Triton does not run,
    so triton is refused as engine_unsupported there: tests/test_sglang_aiter_switch.py); 0.5.23 shuffles only for aiter."""
    r = _explain(gpu="MI300X", engine_version=version, vendor_library=True)
    assert "quant_unsupported" not in refusals(r, "triton")
    if version == "0.5.23":
        assert r.plan is not None and r.plan.runner == "triton"
    else:
        assert r.plan is None and set(refusals(r, "triton")) == {"engine_unsupported"}


def test_the_row_leaves_auto_other_formats_engines_and_gpus_alone():
    """auto plans aiter (what SGLang's auto picks without an all-to-all); per-channel FP8, vLLM and CUDA GPUs are outside
    the row."""
    r = _explain(gpu="MI300X", engine_version="0.5.22", runner="auto")
    assert r.plan is not None and r.plan.runner == "aiter"
    assert "quant_unsupported" not in refusals(_explain(gpu="MI300X", engine_version="0.5.22", quant="fp8_channel"),
                                               "triton")
    r = _explain(gpu="MI300X", engine="vllm", engine_version="0.28.0")
    assert r.plan is not None and r.plan.runner == "triton"
    r = _explain(gpu="H100", engine_version="0.5.22")
    assert r.plan is not None and r.plan.runner == "triton"


# ------------------------------------------- kind 2: SGLang's Quark W4A4 MXFP4 MoE builds a runner only for aiter
W4A4 = dict(engine="sglang", gpu="MI355X", quant="mxfp4", quant_config={"activation_precision": "mxfp4"},
            model={"num_experts": 512, "top_k": 10, "hidden_size": 4096, "moe_intermediate_size": 1024,
                   "activation": "silu"}, tp=4, runner="triton")


@pytest.mark.parametrize("version", ["0.5.11", "0.5.19", "0.5.23"])
def test_sglang_triton_on_w4a4_mxfp4_is_refused_from_0_5_11(version):
    """0.5.11 .. 0.5.22: no runner, AttributeError at the first forward; 0.5.23: NotImplementedError at startup."""
    r = moe_select.explain({**W4A4, "engine_version": version})
    assert r.plan is None
    codes = refusals(r, "triton")
    assert set(codes) == {"quant_unsupported"}, codes


def test_w4a4_row_leaves_older_versions_aiter_and_w4a16_alone():
    """0.5.10.post1 calls AITER whatever the runner (triton is then no refusal of this row); auto plans aiter; MXFP4
    weights with bf16 activations (W4A16) are outside the row."""
    r = moe_select.explain({**W4A4, "engine_version": "0.5.10.post1"})
    assert "quant_unsupported" not in refusals(r, "triton")
    r = moe_select.explain({**W4A4, "engine_version": "0.5.22", "runner": "auto"})
    assert r.plan is not None and r.plan.runner == "aiter"
    r = moe_select.explain({**W4A4, "engine_version": "0.5.22", "quant_config": {}})
    assert "quant_unsupported" not in refusals(r, "triton")


# --------------------------------- the checker's note on recipes#838: say when nothing eligible is supported
KIMI_K3 = dict(engine="vllm", engine_version="0.1.dev19253+g5f76ae224.d20260727", gpu="MI325X", quant="mxfp4",
               model={"num_experts": 896, "top_k": 16, "hidden_size": 3584, "moe_intermediate_size": 3072,
                      "activation": "situ", "routing": "deepseek_v3"}, tp=8)


def test_refusal_headline_says_no_runner_is_supported_when_only_unverified_ones_are_left():
    """Kimi-K3's MXFP4 SiTU MoE on gfx942 under that vLLM build: every runner a rule prefers is refused and the eligible
    ones are all unverified; the headline said 'No runner a matching rule prefers is eligible', which read as a rule
    problem. It now says no runner is supported; with one eligible runner supported the headline stays as it was."""
    r = moe_select.explain(KIMI_K3)
    assert r.plan is None
    # Since vLLM's OAI triton_kernels activation list is exhaustive (SwiGLU-OAI only, 2026-12-05) no runner is eligible
    # for SiTU here; the headline renders the report's candidates and not_preferred reasons, so the case this kind is
    # about is restored as it was before: triton_kernel eligible, unverified, preferred by no rule.
    if not any(c.eligible for c in r.candidates):
        from moe_select.plans import Reason

        c = next(c for c in r.candidates if c.backend == "triton_kernel")
        c.eligible, c.evidence, c.reasons = True, "unverified", []
        r.reasons.append(Reason(code="not_preferred", backend="triton_kernel", detail="triton_kernel: no matching rule prefers it",
                                source="rules/20-amd.yaml"))
    eligible = [c for c in r.candidates if c.eligible]
    assert eligible and all(c.evidence == "unverified" for c in eligible)
    text = r.render_text()
    assert "Refused: no plan. No runner is supported here:" in text, text[:600]
    eligible[0].evidence = "supported"
    text = r.render_text()
    assert "Refused: no plan. No runner a matching rule prefers is eligible; eligible but preferred by no rule:" in text

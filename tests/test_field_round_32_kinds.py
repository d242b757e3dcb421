"""Field round 32 (tests/cases/field_round_32.yaml), fixed as kinds:

1. sgl-project/sglang#12782 (NVFP4 with flashinfer_cutedsl over DeepEP low_latency, BF16 dispatch): SGLang's
   low-latency DeepEP dispatcher sends BF16 where SGLANG_DEEPEP_BF16_DISPATCH is set from 0.5.3 (0.5.2: FP8 always), long
   before --deepep-dispatcher-output-dtype (0.5.13); the normal-mode dispatcher does not read it before 0.5.13.
2. sgl-project/sglang#8247 / #8464 (W4AFP8 over DeepEP): DeepEPMoE has no W4AFP8 path in normal mode before 0.5.3.post2
   nor in low_latency mode before 0.5.4.post1 (it asserts DeepGEMM with FP8 W8A8).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"

R1_NVFP4 = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048, "activation": "silu",
            "routing": "deepseek_v3", "num_shared_experts": 1}
R1_W4A8 = {**R1_NVFP4, "architecture": "DeepseekV3ForCausalLM"}


def _cand(r, backend):
    return next(c for c in r.candidates if c.backend == backend)


def _codes(r, backend):
    return {x.code for x in _cand(r, backend).reasons}


def _cutedsl(version, mode="low_latency", precision="bf16"):
    return moe_select.explain({"gpu": "GB200", "engine": "sglang", "engine_version": version, "quant": "nvfp4",
                               "model": R1_NVFP4, "phase": "decode", "tp": 8, "ep": 8, "dp": 8, "a2a": "deepep",
                               "a2a_mode": mode, "a2a_capacity": 1024, "dispatch_precision": precision,
                               "max_tokens_per_rank": 192, "runner": "flashinfer_cutedsl"})


@pytest.mark.parametrize("version", ["0.5.3", "0.5.5.post1", "0.5.12"])
def test_sglang_bf16_low_latency_dispatch_before_the_flag(version):
    r = _cutedsl(version)
    assert "a2a_unsupported" not in _codes(r, "flashinfer_cutedsl"), [
        (x.code, x.detail, x.source) for x in _cand(r, "flashinfer_cutedsl").reasons]


def test_sglang_bf16_low_latency_dispatch_not_before_0_5_3():
    r = _cutedsl("0.5.2")
    assert r.plan is None and "a2a_unsupported" in _codes(r, "flashinfer_cutedsl")


def test_sglang_bf16_normal_dispatch_still_from_the_flag_only():
    """Before 0.5.13 the variable is read by the low-latency dispatcher only: BF16 stated for normal mode stays refused."""
    r = moe_select.explain({"gpu": "H100", "engine": "sglang", "engine_version": "0.5.5.post1", "quant": "fp8_block",
                            "model": R1_NVFP4, "tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": "normal",
                            "dispatch_precision": "bf16"})
    assert r.plan is None
    assert any(x.code == "a2a_unsupported" and x.source.startswith("backends/a2a/deepep.yaml:")
               for c in r.candidates for x in c.reasons)


def test_the_report_launch_line_with_the_variable():
    from moe_select.launch_line import from_command

    launch = from_command("SGLANG_DEEPEP_BF16_DISPATCH=1 python -m sglang.launch_server --model-path M --tp 8 --ep 8 "
                          "--dp 8 --enable-dp-attention --moe-a2a-backend deepep --deepep-mode low_latency "
                          "--moe-runner-backend flashinfer_cutedsl --quantization modelopt_fp4",
                          engine_version="0.5.5.post1", model_config=str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4"))
    assert "bf16" in str(launch.deployment.get("dispatch_precision")), launch.deployment
    r = launch.explain(deployment={"gpu": "GB200", "phase": "decode", "a2a_capacity": 1024, "max_tokens_per_rank": 192})
    assert "a2a_unsupported" not in _codes(r, "flashinfer_cutedsl"), r.summary()


def _w4a8(version, mode, precision="auto"):
    return moe_select.explain({"gpu": "H20", "engine": "sglang", "engine_version": version, "quant": "int4_w4a8",
                               "model": R1_W4A8, "tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": mode,
                               "dispatch_precision": precision, "cuda_graph": mode == "low_latency",
                               "runner": "cutlass"})


@pytest.mark.parametrize("version, mode", [("0.4.10", "normal"), ("0.5.3.post1", "normal"), ("0.5.3.post1", "low_latency"),
                                           ("0.5.4", "low_latency")])
def test_sglang_w4afp8_over_deepep_before_its_paths(version, mode):
    r = _w4a8(version, mode)
    assert r.plan is None
    assert any(x.source.startswith("backends/a2a/deepep.yaml:") and "W4AFP8" in x.detail
               for c in r.candidates for x in c.reasons), r.summary()


@pytest.mark.parametrize("version, mode", [("0.5.3.post2", "normal"), ("0.5.4.post1", "low_latency")])
def test_sglang_w4afp8_over_deepep_from_its_paths(version, mode):
    r = _w4a8(version, mode, "bf16" if mode == "low_latency" else "auto")
    assert not any("W4AFP8 path" in x.detail for c in r.candidates for x in c.reasons), r.summary()

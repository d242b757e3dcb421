"""``--quantization`` on an FP8 checkpoint (the eleventh new user's trial left these, 2026-12-05):

1. A method of another family that no override maps to the checkpoint's (vLLM ``mxfp4`` / ``modelopt_fp4``, SGLang
   ``w4afp8`` / ``mxfp4``) was ignored with exit 0; both engines raise 'does not match' in
   ``ModelConfig._verify_quantization`` (backends/engines/*.yaml ``quant_mismatch``).
2. SGLang's ``--quantization modelopt_fp4`` on an FP8 checkpoint was planned as the FP8 checkpoint; from 0.5.19 (read in
   the wheels; sgl-project/sglang#33115) SGLang converts the experts to NVFP4 at load with per-tensor activation
   scales (backends/formats.yaml, nvfp4's ``online`` row with ``from``), so the plan is NVFP4, the emitted line keeps
   the flag, and a release without the fact refuses (no fact says it makes NVFP4 there).
"""
from __future__ import annotations

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.formats import lookup, online_clause
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command

from conftest import CONFIGS

FP8 = CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"
BF16 = CONFIGS / "Qwen__Qwen3-30B-A3B"


def _line(engine: str, value: str, model=FP8) -> str:
    if engine == "vllm":
        return f"vllm serve {model} --quantization {value}"
    return f"python -m sglang.launch_server --model-path {model} --quantization {value}"


@pytest.mark.parametrize("engine, value, raises", [
    ("vllm", "mxfp4", True), ("vllm", "modelopt_fp4", True),
    ("sglang", "w4afp8", True), ("sglang", "mxfp4", True),
    ("vllm", "humming", False),        # HummingConfig's override takes any checkpoint when asked by name
    ("sglang", "modelopt_fp4", False),  # compatible with quant_method fp8: online NVFP4 (below)
    ("vllm", "fp8", False), ("sglang", "fp8", False)])
def test_a_method_no_override_maps_to_the_fp8_checkpoint_is_an_engine_error(engine, value, raises):
    launch = from_command(_line(engine, value))
    errs = [f for f in launch.found("engine_error") if f.token.startswith("--quantization")]
    assert bool(errs) == raises, [(f.kind, f.token, f.message) for f in launch.findings]
    if raises:
        assert "does not match" in errs[0].message and "fp8" in errs[0].message
        assert ("override_quantization_method" in errs[0].source) if engine == "vllm" else ("v0.5.23" in errs[0].source)


def test_sglang_modelopt_fp4_on_an_fp8_checkpoint_is_planned_as_online_nvfp4():
    launch = from_command(_line("sglang", "modelopt_fp4"), engine_version="0.5.23")
    assert launch.deployment["quant"] == "nvfp4" and not launch.found("engine_error")
    report = launch.explain(deployment={"gpu": "B200"})
    assert report.plan is not None and report.plan.quant == "nvfp4", report.summary()
    qp = report.deployment.quant_params
    assert qp["online"] is True and qp["online_from"] == "fp8_block" and qp["online_engines"] == ["sglang"]
    assert qp.get("activation_scale", "per_tensor") == "per_tensor"
    out = emit(report.plan, "sglang", launch=launch)
    i = out.argv.index("--quantization")
    assert out.argv[i + 1] == "modelopt_fp4", out.argv
    assert any("from the fp8_block checkpoint" in c for c in out.comments), out.comments


def test_sglang_modelopt_fp4_on_an_fp8_checkpoint_before_the_fact_is_refused_naming_it():
    launch = from_command(_line("sglang", "modelopt_fp4"), engine_version="0.5.18")
    report = launch.explain(deployment={"gpu": "B200"})
    assert report.plan is None
    details = [r.detail for c in report.candidates for r in c.reasons if r.code == "quant_unsupported"]
    assert any("from the fp8_block checkpoint" in d and ">=0.5.19" in d for d in details), details


def test_vllm_has_no_fact_converting_an_fp8_checkpoint():
    """quant nvfp4 for an FP8 checkpoint with engine vllm: no vLLM fact takes FP8 (its nvfp4_per_token row converts a
    16-bit checkpoint), so the deployment is refused, not planned as online NVFP4."""
    with pytest.raises(InputError) as exc:
        moe_select.explain({"gpu": "B200", "model_config": str(FP8), "quant": "nvfp4", "engine": "vllm",
                            "engine_version": "0.34.0"})
    assert any(i.field == "quant" for i in exc.value.issues), exc.value.issues


def test_the_fp8_fact_does_not_speak_for_a_16_bit_checkpoint_and_back():
    fmt = lookup("nvfp4")
    assert fmt is not None
    from_fp8 = [w for w in fmt.online_ways if w.from_formats]
    assert from_fp8 and all(w.takes("fp8_block") and not w.takes("bf16") and not w.takes(None) for w in from_fp8)
    sixteen = [w for w in fmt.online_ways if not w.from_formats]
    assert sixteen and all(w.takes("bf16") and w.takes(None) and not w.takes("fp8_block") for w in sixteen)
    makes16, _, _ = online_clause(fmt, "sglang", "0.5.23", "sm100", None)
    makes8, words8, _ = online_clause(fmt, "sglang", "0.5.23", "sm100", None, "fp8_channel")
    assert makes16 and makes8 and "on an FP8 checkpoint" in words8
    assert not online_clause(fmt, "sglang", "0.5.23", "sm100", None, "mxfp4")[0]


def test_a_16_bit_checkpoint_still_reads_modelopt_fp4_through_its_own_row():
    launch = from_command(_line("sglang", "modelopt_fp4", BF16), engine_version="0.5.23")
    assert launch.deployment["quant"] == "nvfp4"
    report = launch.explain(deployment={"gpu": "B200"})
    assert report.plan is not None and "online_from" not in report.deployment.quant_params


# ------------------------------------------------------------------ vLLM MXFP4: map_mxfp4_backend is a closed dict
@pytest.mark.parametrize("value, ours, planned", [
    ("cutlass", "cutlass", False), ("hpc", "hpc_ops", False), ("flashinfer_cutedsl", "flashinfer_cutedsl", False),
    ("triton", "triton_kernel", True), ("marlin", "marlin", True), ("flashinfer_cutlass", "flashinfer_cutlass", True)])
def test_vllm_mxfp4_moe_backend_outside_its_map_is_refused(value, ours, planned):
    """vLLM's MXFP4 MoE method raises ValueError for a --moe-backend its map_mxfp4_backend lacks (read 0.29.0 .. 0.34.0;
    an eleventh-trial leftover planned cutlass and hpc as unverified): refused on the common.yaml methods row."""
    launch = from_command(f"vllm serve {CONFIGS / 'openai__gpt-oss-20b'} --moe-backend {value}", engine_version="0.34.0")
    report = launch.explain(deployment={"gpu": "H200"})
    if planned:
        assert report.plan is not None and report.plan.runner == ours, report.summary()
    else:
        assert report.plan is None
        why = [r for c in report.candidates if c.backend == ours for r in c.reasons if r.code == "quant_unsupported"]
        assert why and "map_mxfp4_backend" in why[0].source + why[0].detail, why

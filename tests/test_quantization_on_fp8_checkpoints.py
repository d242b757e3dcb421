"""``--quantization`` on an FP8 checkpoint (the eleventh new user's trial left these, 2026-12-05):

1. A method of another family that no override maps to the checkpoint's (vLLM ``mxfp4`` / ``modelopt_fp4``, SGLang
   ``w4afp8`` / ``mxfp4``) was ignored with exit 0; both engines raise 'does not match' in
   ``ModelConfig._verify_quantization`` (backends/engines/*.yaml ``quant_mismatch``).
2. SGLang's ``--quantization modelopt_fp4`` on an FP8 checkpoint was planned as the FP8 checkpoint; from 0.5.18 (read in
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
    """At 0.5.17 (which has neither the fp8 pairing nor make_modelopt_fp4_online_config_from_fp8) no fact says SGLang
    converts the FP8 checkpoint: the deployment check refuses quant nvfp4 (field quant), naming the fact and the release
    it starts at (0.5.18: a trial of 2026-12-05 read it there; the fact started at 0.5.19 before)."""
    launch = from_command(_line("sglang", "modelopt_fp4"), engine_version="0.5.17")
    with pytest.raises(InputError) as exc:
        launch.explain(deployment={"gpu": "B200"})
    said = " ".join(i.message for i in exc.value.issues if i.field == "quant")
    assert "fp8_block" in said and ">=0.5.18" in said and "no fact says it makes it" in said, exc.value.issues
    # 0.5.18 converts it
    assert from_command(_line("sglang", "modelopt_fp4"), engine_version="0.5.18").deployment["quant"] == "nvfp4"


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


# ------------------------------------------------------------------ the serializations the facts speak of (a review)
def _modelopt_fp8(tmp_path):
    import json
    import shutil

    d = tmp_path / "modelopt-fp8"
    shutil.copytree(BF16, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8"}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("engine, value", [("sglang", "modelopt_fp4"), ("sglang", "w4afp8"), ("vllm", "mxfp4"),
                                           ("vllm", "modelopt_fp4"), ("vllm", "awq")])
def test_a_modelopt_fp8_checkpoint_is_overridden_not_refused_nor_converted(tmp_path, engine, value):
    """A ModelOpt FP8 checkpoint: SGLang's _modelopt_override_quantization_method maps any name but nvfp4_online and
    quark_mxfp4 back to modelopt_fp8, vLLM's ModelOptFp8Config.override_quantization_method returns modelopt for
    quant_algo FP8 whatever is named: no engine error, and served as the checkpoint's FP8 (no online NVFP4)."""
    launch = from_command(_line(engine, value, _modelopt_fp8(tmp_path)), engine_version="0.5.23" if engine == "sglang"
                          else "0.34.0")
    assert not [f for f in launch.found("engine_error") if f.token.startswith("--quantization")], launch.findings
    assert "quant" not in launch.deployment, launch.deployment


def test_sglang_modelopt_fp4_on_a_compressed_tensors_fp8_checkpoint_is_not_online_nvfp4():
    """compressed-tensors FP8: no override maps it and compatible_quantization_methods pairs modelopt_fp4 with quant_method
    fp8 / modelopt only, so SGLang raises 'does not match' rather than converting; the from fact (from_layout fp8) does
    not take it, and a deployment asking nvfp4 for it is refused."""
    ct = CONFIGS / "llm-compressor__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
    launch = from_command(_line("sglang", "modelopt_fp4", ct), engine_version="0.5.23")
    assert "quant" not in launch.deployment
    with pytest.raises(InputError):
        moe_select.explain({"gpu": "B200", "model_config": str(ct), "quant": "nvfp4", "engine": "sglang",
                            "engine_version": "0.5.23"})


def test_vllm_deepseek_v4_fp8_takes_any_quantization_name(tmp_path):
    """vLLM's DeepseekV4FP8Config.override_quantization_method returns deepseek_v4_fp8 on a deepseek_v4 model whatever is
    named (read in the 0.29.0 .. 0.34.0 wheels): no 'does not match' there."""
    import json
    import shutil

    d = tmp_path / "dsv4"
    shutil.copytree(CONFIGS / "deepseek-ai__DeepSeek-V3", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "deepseek_v4"
    (d / "config.json").write_text(json.dumps(cfg))
    launch = from_command(_line("vllm", "mxfp4", d), engine_version="0.34.0")
    assert not [f for f in launch.found("engine_error") if f.token.startswith("--quantization")], launch.findings
    plain = from_command(_line("vllm", "mxfp4", CONFIGS / "deepseek-ai__DeepSeek-V3"), engine_version="0.34.0")
    assert [f for f in plain.found("engine_error") if f.token.startswith("--quantization")], plain.findings


def test_per_token_nvfp4_from_an_fp8_checkpoint_is_sglangs_alone():
    """quant nvfp4 with per-token activation scales over an FP8 checkpoint: SGLang's nvfp4_online (its FP8 fact), not
    vLLM's nvfp4_per_token, which converts 16-bit checkpoints only (vLLM raises 'does not match' on an FP8 one): engine vllm
    is refused at the deployment check, engine any plans for sglang alone (a review found both planned for vLLM)."""
    dep = {"gpu": "B200", "model_config": str(FP8), "quant": "nvfp4", "quant_config": {"activation_scale": "per_token"}}
    with pytest.raises(InputError) as exc:
        moe_select.explain({**dep, "engine": "vllm", "engine_version": "0.34.0"})
    assert any(i.field == "quant" and "vllm 0.34.0" in i.message for i in exc.value.issues), exc.value.issues
    r = moe_select.explain({**dep, "engine": "any"})
    assert r.plan is not None and r.plan.engines == ["sglang"], r.summary()
    assert r.deployment.quant_params["online_engines"] == ["sglang"]

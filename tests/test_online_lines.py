"""Online quantization in the engines' own language, and ``engine: any`` narrowed to the engines that make it (issue 21).

A 16-bit checkpoint served in a quantized format is made at load by the engine's ``--quantization`` value that
backends/formats.yaml's ``online`` column names per engine and release. ``plan --emit`` writes that value, and
``--from-command`` reads it back through the same rows into ``quant`` (vLLM ``fp8_per_block`` -> fp8_block, SGLang
``fp8`` -> fp8_tensor); vLLM's ``fp8`` on a bf16 checkpoint from 0.31.0 is what vLLM raises on (an engine_error
finding). With ``engine: any`` only the engines whose facts make the format at their version carry the plan; the
others are refused with the online column's evidence (``quant_unsupported``, backends/formats.yaml:LINE).
"""
from __future__ import annotations

from typing import Any

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.formats import lookup, online_clause, online_engines
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import from_command

from conftest import CONFIGS

BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")


def _plan(engine: str, version: str, quant: str, gpu: str = "H200", **extra: Any) -> Any:
    report = moe_select.explain(dict(gpu=gpu, engine=engine, engine_version=version, model_config=BF16, quant=quant, tp=4,
                                     ep=1, a2a="none", **extra))
    assert report.plan is not None, report.summary()
    return report.plan


def _value(argv: list[str]) -> str | None:
    return argv[argv.index("--quantization") + 1] if "--quantization" in argv else None


def _line(engine: str, value: str, model: str = BF16) -> str:
    if engine == "vllm":
        return f"vllm serve {model} --tensor-parallel-size 4 --quantization {value}"
    return f"python3 -m sglang.launch_server --model-path {model} --tp 4 --quantization {value}"


# --------------------------------------------------------------------------------------------- emit, then read back
@pytest.mark.parametrize("engine, version, quant, value, gpu", [
    ("vllm", "0.25.0", "fp8_block", "fp8_per_block", "H200"),
    ("vllm", "0.25.0", "fp8_tensor", "fp8_per_tensor", "H200"),  # fp8 works until 0.31.0; the flag no makes:false fact names
    ("vllm", "0.31.0", "fp8_tensor", "fp8_per_tensor", "H200"),  # fp8 raises there
    ("vllm", "0.25.0", "fp8_channel", "fp8_per_channel", "H200"),
    ("sglang", "0.5.23", "fp8_tensor", "fp8", "H200"),
    ("sglang", "0.5.23", "mxfp8", "mxfp8", "B200"),
])
def test_emit_writes_the_online_flag_and_reads_back_the_same_plan(engine, version, quant, value, gpu):
    plan = _plan(engine, version, quant, gpu=gpu)
    assert plan.quant_params.get("online") is True
    out = emit(plan, engine, engine_version=version)
    assert _value(out.argv) == value
    assert any(f"--quantization {value}" in c and "backends/formats.yaml:" in c for c in out.comments)
    back = from_command(out.argv, engine_version=version)
    assert back.deployment["quant"] == quant
    assert "formats.yaml:" in back.provenance["quant"]
    assert not back.found("engine_error")
    report = back.explain(deployment={"gpu": gpu})
    assert report.plan is not None, report.summary()
    assert (report.plan.quant, report.plan.runner, report.plan.engines) == (plan.quant, plan.runner, plan.engines)
    assert report.plan.quant_params == plan.quant_params
    assert report.plan.deployment.tp == plan.deployment.tp and report.plan.deployment.ep == plan.deployment.ep


def test_emit_writes_no_quantization_for_the_checkpoints_own_format():
    report = moe_select.explain(dict(gpu="H200", engine="vllm", engine_version="0.25.0", model_config=FP8, tp=2, ep=1, a2a="none"))
    assert report.plan is not None and "online" not in report.plan.quant_params
    assert _value(emit(report.plan, "vllm", engine_version="0.25.0").argv) is None


def test_emit_refuses_an_online_plan_at_a_version_without_the_flag():
    """A plan made at vLLM 0.25.0 written for 0.19.0 (no fp8_per_block before 0.20.0): refused naming the facts."""
    plan = _plan("vllm", "0.25.0", "fp8_block")
    with pytest.raises(EmitError, match=r"fp8_block is made at load.*vllm 0\.19\.0.*backends/formats\.yaml:\d+"):
        emit(plan, "vllm", engine_version="0.19.0")


def test_emit_nvfp4_per_token_on_sglang_writes_nvfp4_online():
    plan = _plan("sglang", "0.5.23", "nvfp4", gpu="B200", quant_config={"activation_scale": "per_token"})
    out = emit(plan, "sglang", engine_version="0.5.23")
    assert _value(out.argv) == "nvfp4_online"
    back = from_command(out.argv, engine_version="0.5.23")
    assert back.deployment["quant"] == "nvfp4" and back.deployment["quant_config"] == {"activation_scale": "per_token"}


# --------------------------------------------------------------------------------------------- the values read
@pytest.mark.parametrize("engine, value, version, quant, scale", [
    ("vllm", "fp8_per_block", "0.25.0", "fp8_block", None),
    ("vllm", "fp8_per_block", None, "fp8_block", None),
    ("vllm", "fp8", "0.30.0", "fp8_tensor", None),
    ("vllm", "fp8_per_tensor", "0.31.0", "fp8_tensor", None),
    ("vllm", "fp8_per_channel", "0.25.0", "fp8_channel", None),
    ("vllm", "mxfp8", "0.25.0", "mxfp8", None),
    ("vllm", "nvfp4_per_token", "0.26.0", "nvfp4", "per_token"),
    ("sglang", "fp8", "0.5.23", "fp8_tensor", None),
    ("sglang", "modelopt_fp4", "0.5.23", "nvfp4", None),  # per-tensor activation scales: the default, nothing set
    ("sglang", "nvfp4_online", "0.5.23", "nvfp4", "per_token"),
])
def test_quantization_value_on_a_bf16_checkpoint_is_read_through_the_online_rows(engine, value, version, quant, scale):
    launch = from_command(_line(engine, value), engine_version=version)
    assert launch.deployment["quant"] == quant
    assert (launch.deployment.get("quant_config") or {}).get("activation_scale") == scale
    assert not launch.found("engine_error")


def test_vllm_fp8_from_0_31_on_a_bf16_checkpoint_is_an_engine_error():
    """formats.yaml: Fp8Config raises for online fp8 from 0.31.0 (the fact's source and file:line in the finding); the
    format meant is still read (fp8_tensor, as fp8_per_tensor makes it), never the checkpoint's bf16."""
    launch = from_command(_line("vllm", "fp8"), engine_version="0.31.0")
    errors = launch.found("engine_error")
    assert len(errors) == 1 and errors[0].token == "--quantization fp8"
    assert "no longer supports online quantization" in errors[0].message and "backends/formats.yaml:" in errors[0].message
    assert errors[0].source is not None and "vllm@v0.31.0" in errors[0].source
    assert launch.deployment["quant"] == "fp8_tensor"
    assert not from_command(_line("vllm", "fp8"), engine_version="0.30.0").found("engine_error")


def test_sglang_w8a8_fp8_on_a_bf16_checkpoint_is_refused_on_evidence():
    """Only a makes: false fact names w8a8_fp8 (its MoE experts are not quantized): read as fp8_channel, so the
    deployment check refuses it with that fact, not a bf16 plan."""
    launch = from_command(_line("sglang", "w8a8_fp8"), engine_version="0.5.23")
    assert launch.deployment["quant"] == "fp8_channel"
    with pytest.raises(InputError, match="W8A8FP8MoEMethod") as exc:
        launch.explain(deployment={"gpu": "H200"})
    assert any(i.field == "quant" for i in exc.value.issues)


def test_quantization_of_a_quantized_checkpoint_or_an_unknown_value_is_not_read():
    serialized = from_command(_line("vllm", "fp8", FP8), engine_version="0.31.0")
    assert "quant" not in serialized.deployment and not serialized.found("engine_error")
    assert any("read from the checkpoint (fp8_block" in f.message for f in serialized.found("note"))
    unknown = from_command(_line("vllm", "awq"), engine_version="0.25.0")
    assert "quant" not in unknown.deployment
    assert any("no online fact of vllm names awq" in f.message for f in unknown.found("note"))


# --------------------------------------------------------------------------------------------- engine: any narrowed
def _any(gpu: str, quant: str, **extra: Any) -> Any:
    return moe_select.explain(dict(gpu=gpu, model_config=BF16, quant=quant, tp=4, **extra))


def test_engine_any_fp8_block_holds_for_vllm_only():
    r = _any("H200", "fp8_block")
    assert r.plan is not None and r.plan.engines == ["vllm"]
    assert r.deployment.quant_params["online_engines"] == ["vllm"]
    assert all(set(c.engines) <= {"vllm"} for c in r.candidates)
    row = lookup("fp8_block")
    assert row is not None
    sglang_line = next(w.where() for w in row.online_ways if w.engine == "sglang")
    said = [x for c in r.candidates for x in c.reasons if x.code == "quant_unsupported" and x.source == sglang_line]
    assert said and all("block-wise quantization only supports fp8-serialized" in x.detail for x in said)


def test_engine_any_fp8_block_with_vllm_0_24_is_refused_not_sglang():
    """vLLM 0.24.0 makes block FP8 but does not pad 192 rows (refused there); SGLang does not make it: no plan."""
    r = _any("H200", "fp8_block", packages={"vllm": "0.24.0"})
    assert r.plan is None
    assert not any("sglang" in c.engines for c in r.candidates)


def test_engine_any_per_tensor_nvfp4_on_b200_holds_for_sglang_only():
    r = _any("B200", "nvfp4")
    assert r.plan is not None and r.plan.engines == ["sglang"]
    said = [x for c in r.candidates for x in c.reasons if x.code == "quant_unsupported" and x.engines == ["vllm"]
            and "made at load" in x.detail]
    assert said and all("nvfp4_per_token" in x.detail and x.source.startswith("backends/formats.yaml:") for x in said)


def test_engine_any_of_the_checkpoints_own_format_is_not_narrowed():
    r = moe_select.explain(dict(gpu="H200", model_config=FP8, tp=2))
    assert r.plan is not None and "online_engines" not in r.deployment.quant_params
    assert len(r.plan.engines) > 1


def test_online_engines_and_clause_read_the_versions():
    fmt = lookup("fp8_tensor")
    assert fmt is not None
    assert online_engines(fmt, ["sglang", "vllm", "trtllm"], {"vllm": "0.31.0"}, "sm90", None) == ["sglang", "vllm"]
    makes, words, where = online_clause(fmt, "trtllm", "1.0.0", "sm90", None)
    assert not makes and "no fact says it makes it" in words and where == fmt.where("online")
    block = lookup("fp8_block")
    assert block is not None
    assert online_engines(block, ["sglang", "vllm"], {"vllm": "0.19.0"}, "sm90", None) == []
    assert online_engines(block, ["sglang", "vllm"], {}, "sm90", None) == ["vllm"]  # version unknown: it may

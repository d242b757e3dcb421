"""The eighth new user's trial, items its session left (tests/test_trial_2026_12_04d_kinds.py has the others), fixed as
kinds in the twenty-second session.

- A float32 checkpoint (``torch_dtype: float32``, no quantization) was invalid input; vLLM and SGLang serve it by
  casting at load under ``--dtype auto`` (vLLM ``vllm/config/model.py:_resolve_auto_dtype`` at v0.24.0: the platform's
  first supported dtype, bf16 on sm80+; SGLang ``srt/configs/model_config.py:_get_and_verify_dtype`` at v0.5.23:
  float16, bfloat16 for Gemma). Now read as that engine's cast with a note; TensorRT-LLM (its cast not in the facts)
  stays an input error that says so.
- ``quantization_config: {}`` was read as no quantization without a word: now a note says so.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_select.errors import InputError
from moe_select.model_config import read_model_config

ROOT = Path(__file__).resolve().parents[1]
QWEN = ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B" / "config.json"


def _config(tmp_path: Path, **over) -> Path:
    c = json.loads(QWEN.read_text())
    for k, v in over.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(c, indent=2))
    return d


@pytest.mark.parametrize("engine, model_type, want", [
    ("vllm", "qwen3_moe", "bf16"), ("sglang", "qwen3_moe", "fp16"), ("sglang", "gemma3", "bf16"),
    ("any", "qwen3_moe", "fp16")])
def test_a_float32_checkpoint_is_read_as_the_engines_cast_with_a_note(tmp_path, engine, model_type, want):
    info = read_model_config(_config(tmp_path, torch_dtype="float32", model_type=model_type), engine=engine)
    assert info.quant == want, (engine, model_type, info.quant)
    assert "float32, cast to " + want in info.provenance["quant"] and "(torch_dtype)" in info.provenance["quant"]
    note = next(n for n in info.notes if "a float32 checkpoint" in n)
    assert f"planned as {want}" in note and "--dtype" in note
    if engine in ("vllm", "any"):
        assert "_resolve_auto_dtype at v0.24.0" in note
    if engine in ("sglang", "any"):
        assert "_get_and_verify_dtype at v0.5.23" in note
    if engine == "any":
        assert "engine any plans SGLang's" in note
    if engine == "vllm":
        assert "sglang" not in note


def test_a_float32_checkpoint_under_trtllm_is_an_input_error_naming_the_line(tmp_path):
    path = _config(tmp_path, torch_dtype="float32")
    with pytest.raises(InputError) as info:
        read_model_config(path, engine="trtllm")
    msg = str(info.value)
    line = next(i for i, s in enumerate((path / "config.json").read_text().splitlines(), 1) if '"torch_dtype"' in s)
    assert f"config.json:{line}" in msg and "TensorRT-LLM's cast" in msg and "torch_dtype" in msg


def test_other_dtypes_stay_refused(tmp_path):
    with pytest.raises(InputError, match=r"torch_dtype 'float64' with no quantization_config: .* not a supported format"):
        read_model_config(_config(tmp_path, torch_dtype="float64"), engine="vllm")


def test_an_empty_quantization_config_is_said(tmp_path):
    path = _config(tmp_path, quantization_config={})
    info = read_model_config(path, engine="vllm")
    assert info.quant == "bf16"
    line = next(i for i, s in enumerate((path / "config.json").read_text().splitlines(), 1) if "quantization_config" in s)
    assert any(f"config.json:{line} (quantization_config {{}}): an empty mapping" in n for n in info.notes), info.notes
    # a bf16 checkpoint with no such key has no such note
    assert not any("empty mapping" in n for n in read_model_config(_config(tmp_path, quantization_config=None)).notes)


# --- facts an operator edits: did-you-mean, quoted numbers, a module that is not there ----------------------------

BACKENDS = ROOT / "backends"


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (BACKENDS / name).read_text()
    assert old in text, (name, old)
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return p


def _check_issues(path: Path) -> str:
    from moe_select.lint import check

    with pytest.raises(InputError) as info:
        check([path])
    return str(info.value)


def test_an_arch_typo_in_a_support_row_gets_a_did_you_mean(tmp_path):
    msg = _check_issues(_edited(tmp_path, "triton.yaml", "archs: [sm90]", "archs: [sm9O]"))
    assert "'sm9O' is not an arch, family or range (did you mean 'sm90'?)" in msg and "triton.yaml:" in msg
    msg = _check_issues(_edited(tmp_path, "triton.yaml", "archs: [sm90]", "archs: [sm91]"))
    assert "architecture 'sm91' is not declared in a vocabulary (did you mean 'sm90'?)" in msg
    msg = _check_issues(_edited(tmp_path, "triton.yaml", "archs: [sm90]", "archs: [zz]"))
    assert "did you mean" not in msg


def test_a_quoted_number_where_an_integer_or_a_quantity_goes_says_so(tmp_path):
    path = _edited(tmp_path, "marlin.yaml", "multiple_of: 128\n    when: {quant: [int4_w4a16, int8_w8a16]}",
                   "multiple_of: \"2\"\n    when: {quant: [int4_w4a16, int8_w8a16]}")
    msg = _check_issues(path)
    assert "constraints[0].multiple_of: '2' is a string: write the integer 2 without quotes" in msg
    assert "marlin.yaml:" in msg


def test_a_runner_file_whose_module_is_not_there_is_a_check_warning_once(tmp_path):
    from moe_select.lint import check

    path = _edited(tmp_path, "torch_native.yaml", "module: moe_select.backends.torch_native",
                   "module: moe_select.backends.no_such_module")
    findings, _ = check([path])
    hits = [f for f in findings if "no_such_module" in f.message]
    assert len(hits) == 1 and hits[0].severity == "warning" and "not found on this machine" in hits[0].message
    assert hits[0].where.endswith("torch_native.yaml:13") or "torch_native.yaml:" in hits[0].where
    # an operator folder naming it: linted with the catalog, reported once
    op = tmp_path / "op"
    op.mkdir()
    (op / "my_native.yaml").write_text(path.read_text().replace("runner: torch_native", "runner: my_native", 1))
    findings, _ = check([op])
    assert len([f for f in findings if "no_such_module" in f.message]) == 1
    # the bundled files: every module is found
    findings, _ = check([])
    assert not [f for f in findings if "adapter module" in f.message]


# --- AMD Quark checkpoints (quant_method: quark) ------------------------------------------------------------------

def _quark(tmp_path: Path, weight: dict, inputs: dict | None, **extra) -> Path:
    return _config(tmp_path, quantization_config={"quant_method": "quark", "export": {"pack_method": "reorder"},
                                                  "global_quant_config": {"weight": weight, **({"input_tensors": inputs}
                                                                                               if inputs else {})},
                                                  **extra})


MXFP4_W = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": False}


@pytest.mark.parametrize("inputs, said", [(dict(MXFP4_W, is_dynamic=True), "MXFP4 activations (W4A4)"),
                                          (None, "16-bit activations (W4A16)")])
def test_a_quark_mxfp4_checkpoint_is_read_as_mxfp4_with_its_layout(tmp_path, inputs, said):
    info = read_model_config(_quark(tmp_path, MXFP4_W, inputs, layer_quant_config={"model.layers.0.*": {}}), engine="vllm")
    assert info.quant == "mxfp4" and info.quant_params["layout"] == "quark"
    assert any(said in n and "QuarkOCP_MX_MoEMethod" in n for n in info.notes), info.notes
    assert any("1 per-layer entries not read" in n for n in info.notes)


def test_a_quark_fp8_checkpoint_and_the_formats_it_does_not_read(tmp_path):
    fp8 = {"dtype": "fp8_e4m3", "qscheme": "per_channel", "is_dynamic": False}
    info = read_model_config(_quark(tmp_path, fp8, {"dtype": "fp8_e4m3", "qscheme": "per_tensor"}), engine="vllm")
    assert info.quant == "fp8_channel" and info.quant_params["layout"] == "quark"
    with pytest.raises(InputError, match=r"global_quant_config.weight.dtype: Quark weight dtype 'int4' qscheme "
                                         r"'per_group' group_size 128 .* is not a supported format"):
        read_model_config(_quark(tmp_path, {"dtype": "int4", "qscheme": "per_group", "group_size": 128}, None))
    with pytest.raises(InputError, match="weight given as a list"):
        read_model_config(_quark(tmp_path, [fp8, {"dtype": "int4"}], None))

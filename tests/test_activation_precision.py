"""The experts' activation precision as a deployment input (issue 21: "MXFP4 activation precision is a choice of
runner, engine and flag ... with its default per engine").

The input is ``quant_config.activation_precision`` (a precision name: ``bf16`` is W4A16, ``fp8_token`` W4A8 with
per-token FP8, ``mxfp8``); not given, each runner runs the precision of its support row that needs no request (the
engine's default). Facts under ``when: {activation_precision: [...]}`` hold only when it is asked. Sources:
- SGLang ``--flashinfer-mxfp4-moe-precision default|bf16|fp8`` (fp8 from v0.5.19, sgl-project/sglang#34967; v0.5.18 takes
  default and bf16), read by flashinfer_mxfp4 only: sm90 fp8 runs MXFP4 x FP8 (Humming) with FlashInfer >= 0.6.18;
  sm100 takes bf16 or default (MXFP8) and raises NotImplementedError for fp8 (v0.5.23 moe_runner/flashinfer_trtllm.py);
  sm120 never reads it (v0.5.23 quantization/mxfp4.py Mxfp4MoEMethod.__init__).
- vLLM: FlashInfer TRT-LLM-gen MXFP4 experts keep bf16 by default and run MXFP8 on request
  (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 from 0.10.1, ignored from 0.24.0; v0.33.0 oracle/mxfp4.py _filter_by_activation).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select
from moe_select import engine_tables
from moe_select.errors import InputError
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import from_command

from conftest import CONFIGS
from report_helpers import reason_of

GPT_OSS = str(CONFIGS / "openai__gpt-oss-20b")
BF16 = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
NVFP4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
SGL_OK = {"flashinfer-python": "0.6.18", "sglang": "0.5.19"}


def _explain(gpu: str = "H200", precision: str | None = None, *, engine: str = "sglang", runner: str = "flashinfer_mxfp4",
             packages: dict[str, str] | None = None, model_config: str = GPT_OSS) -> Any:
    d: dict[str, Any] = dict(gpu=gpu, engine=engine, model_config=model_config, tp=1, ep=1, a2a="none", runner=runner,
                             packages=dict(SGL_OK if packages is None else packages))
    if precision is not None:
        d["quant_config"] = {"activation_precision": precision}
    return moe_select.explain(d)


def _row(file: str, needle: str) -> str:
    """``backends/<file>:<line>`` of the support row (its ``- archs:`` line) whose text holds ``needle`` (the fact a
    reason must cite)."""
    lines = (Path(__file__).resolve().parents[1] / "backends" / file).read_text().splitlines()
    hit = next(i for i, text in enumerate(lines) if needle in text)
    start = next(i for i in range(hit, -1, -1) if lines[i].startswith("  - archs:"))
    return f"backends/{file}:{start + 1}"


# ------------------------------------------------------------------------------------------------- defaults
@pytest.mark.parametrize("gpu, want", [("H200", "bf16"), ("B200", "mxfp8"), ("RTX PRO 6000", "mxfp8")])
def test_unasked_precision_is_the_runners_default(gpu, want):
    """Not asked: SGLang's flashinfer_mxfp4 runs W4A16 on sm90, MXFP8 activations on sm100 and sm120; the on-request
    rows (fp8 on sm90, bf16 on sm100) do not hold, and nothing is written into the deployment."""
    r = _explain(gpu)
    assert r.plan is not None and r.plan.activation_precision == want
    assert "activation_precision" not in r.deployment.quant_params


# ------------------------------------------------------------------------------------------------- SGLang sm90 fp8
def test_sm90_fp8_on_request_is_planned_from_sglang_0_5_19():
    r = _explain("H200", "fp8_token")
    assert r.status == "ok" and r.plan is not None and r.plan.runner == "flashinfer_mxfp4"
    assert r.plan.activation_precision == "fp8_token"
    assert r.plan.deployment.quant_params["activation_precision"] == "fp8_token"


def test_sm90_fp8_before_sglang_0_5_19_is_a_version_gate():
    r = _explain("H200", "fp8_token", packages={"flashinfer-python": "0.6.18", "sglang": "0.5.18"})
    assert r.plan is None
    why = reason_of(r, "quant_unsupported", "flashinfer_mxfp4")
    assert "sglang >=0.5.19" in why.detail and "sglang is 0.5.18" in why.detail
    assert why.source == _row("flashinfer_mxfp4.yaml", "when: {engine: [sglang], activation_precision: [fp8_token]}")


def test_sm90_fp8_with_an_older_flashinfer_is_a_version_gate():
    r = _explain("H200", "fp8_token", packages={"flashinfer-python": "0.6.16rc1", "sglang": "0.5.19"})
    why = reason_of(r, "quant_unsupported", "flashinfer_mxfp4")
    assert r.plan is None and "flashinfer-python >=0.6.18" in why.detail and "pip install 'flashinfer-python>=0.6.18'" in why.fix


def test_sm90_bf16_asked_is_the_default_row():
    r = _explain("H200", "bf16")
    assert r.status == "ok" and r.plan is not None and r.plan.activation_precision == "bf16"


# ------------------------------------------------------------------------------------------------- SGLang Blackwell
@pytest.mark.parametrize("gpu", ["B200", "B300"])
def test_sm100_fp8_is_refused_on_the_runners_raise(gpu):
    r = _explain(gpu, "fp8_token")
    why = reason_of(r, "quant_unsupported", "flashinfer_mxfp4")
    assert r.plan is None and "with fp8_token activations" in why.detail
    assert why.source == _row("flashinfer_mxfp4.yaml", "activation_precision: [fp8_token, fp8_tensor, fp8_group]}")


def test_sm100_fp8_before_the_flag_had_fp8_is_not_that_refusal():
    """The sm100 refusal is SGLang's >= 0.5.19 code (0.5.18's argparse has no fp8): not claimed for 0.5.18."""
    r = _explain("B200", "fp8_token", packages={"flashinfer-python": "0.6.18", "sglang": "0.5.18"})
    src = _row("flashinfer_mxfp4.yaml", "activation_precision: [fp8_token, fp8_tensor, fp8_group]}")
    assert not [x for x in r.reasons if x.source == src]


def test_sm100_bf16_on_request_is_planned():
    r = _explain("B200", "bf16")
    assert r.status == "ok" and r.plan is not None and r.plan.activation_precision == "bf16"


@pytest.mark.parametrize("precision", ["bf16", "fp8_token"])
def test_sm120_never_reads_the_flag_so_a_request_is_refused(precision):
    r = _explain("RTX PRO 6000", precision)
    why = reason_of(r, "quant_unsupported", "flashinfer_mxfp4")
    assert r.plan is None and f"with {precision} activations" in why.detail
    assert why.source == _row("flashinfer_mxfp4.yaml", "activation_precision: [bf16, fp16, fp8_token, fp8_tensor, fp8_group]}")


def test_a_precision_no_fact_gives_is_unverified_not_refused():
    """mxfp8 asked on sm90: no row of flashinfer_mxfp4 runs it there and its support list is open: unverified (no
    evidence either way), the plan says what was asked and names the row of the precision it does run."""
    r = _explain("H200", "mxfp8")
    assert r.plan is not None and r.plan.activation_precision == "mxfp8"
    assert r.plan.evidence == "unverified"
    strict = moe_select.explain(dict(gpu="H200", engine="sglang", model_config=GPT_OSS, tp=1, ep=1, a2a="none",
                                     runner="flashinfer_mxfp4", packages=SGL_OK, strict=True,
                                     quant_config={"activation_precision": "mxfp8"}))
    assert strict.plan is None


# ------------------------------------------------------------------------------------------------- vLLM
def test_vllm_trtllm_mxfp4_keeps_bf16_unless_mxfp8_is_asked():
    pk = {"flashinfer-python": "0.6.18", "vllm": "0.23.0"}
    default = _explain("B200", engine="vllm", runner="flashinfer_trtllm", packages=pk)
    assert default.plan is not None and default.plan.activation_precision == "bf16"
    asked = _explain("B200", "mxfp8", engine="vllm", runner="flashinfer_trtllm", packages=pk)
    assert asked.status == "ok" and asked.plan is not None and asked.plan.activation_precision == "mxfp8"
    old = _explain("B200", "mxfp8", engine="vllm", runner="flashinfer_trtllm",
                   packages={"flashinfer-python": "0.6.18", "vllm": "0.10.0"})
    why = reason_of(old, "quant_unsupported", "flashinfer_trtllm")
    assert old.plan is None and "vllm >=0.10.1" in why.detail


# ------------------------------------------------------------------------------------------------- input errors
def _write(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "dep.yaml"
    f.write_text(body)
    return f


@pytest.mark.parametrize("model, extra, says", [
    (BF16, "", "has unquantized weights"),
    (NVFP4, "  weight_only: true\n", "a weight-only checkpoint"),
])
def test_activation_precision_on_the_wrong_checkpoint_names_the_line(tmp_path, model, extra, says):
    body = (f"gpu: H200\nmodel_config: {model}\nquant_config:\n{extra}  activation_precision: fp8_token\n")
    if "NVFP4" in model:
        body = body.replace("gpu: H200", "gpu: B200")
    f = _write(tmp_path, body)
    with pytest.raises(InputError) as exc:
        moe_select.explain(str(f))
    line = body.splitlines().index("  activation_precision: fp8_token") + 1
    assert f"{f}:{line}" in str(exc.value) and "quant_config.activation_precision" in str(exc.value) and says in str(exc.value)


def test_an_unknown_precision_name_is_a_typed_error(tmp_path):
    f = _write(tmp_path, f"gpu: H200\nmodel_config: {GPT_OSS}\nquant_config:\n  activation_precision: fp7\n")
    with pytest.raises(InputError) as exc:
        moe_select.explain(str(f))
    assert f"{f}:4" in str(exc.value) and "activation_precision" in str(exc.value)


def test_the_checkpoint_never_contradicts_the_asked_precision():
    """A run-time choice beside a checkpoint's own quant parameters: added, not a contradiction."""
    r = _explain("H200", "fp8_token")
    assert r.deployment.quant_params["activation_precision"] == "fp8_token"


# ------------------------------------------------------------------------------------------------- launch lines
@pytest.mark.parametrize("value, want", [("fp8", "fp8_token"), ("bf16", "bf16"), ("default", None)])
def test_sglang_flag_is_read(value, want):
    launch = from_command(f"python -m sglang.launch_server --model-path {GPT_OSS} --moe-runner-backend flashinfer_mxfp4 "
                          f"--flashinfer-mxfp4-moe-precision {value}", {})
    assert (launch.deployment.get("quant_config") or {}).get("activation_precision") == want


def test_sglang_flag_value_the_engine_refuses_is_an_engine_error():
    launch = from_command(f"python -m sglang.launch_server --model-path {GPT_OSS} --flashinfer-mxfp4-moe-precision fp4", {})
    assert "quant_config" not in launch.deployment
    assert any(f.kind == "engine_error" and "'fp4' is not one of default, bf16, fp8" in f.message for f in launch.findings)


@pytest.mark.parametrize("version, want", [("0.23.0", "mxfp8"), ("0.24.0", None)])
def test_vllm_variable_is_read_until_it_is_ignored(version, want):
    launch = from_command(f"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 vllm serve {GPT_OSS}", {}, engine_version=version)
    assert (launch.deployment.get("quant_config") or {}).get("activation_precision") == want


def test_the_read_launch_plans_and_emits_the_flag_back():
    launch = from_command(f"python -m sglang.launch_server --model-path {GPT_OSS} --moe-runner-backend flashinfer_mxfp4 "
                          f"--flashinfer-mxfp4-moe-precision fp8", {})
    d = dict(launch.deployment, gpu="H200", packages=SGL_OK)
    r = moe_select.explain(d)
    assert r.plan is not None and r.plan.activation_precision == "fp8_token"
    argv = emit(r.plan, "sglang", engine_version="0.5.19").argv
    i = argv.index("--flashinfer-mxfp4-moe-precision")
    assert argv[i + 1] == "fp8"
    # written back and read again: the same request
    again = from_command(" ".join(argv), {})
    assert again.deployment["quant_config"] == {"activation_precision": "fp8_token",
                                             "activation_precision_runners": ["flashinfer_mxfp4"]}


def test_an_engine_without_a_flag_for_the_precision_cannot_emit_it():
    # vLLM 0.24.0 on reads no MXFP4 precision variable (ignored from 0.24.0) and has no flag for it
    r = _explain("B200", "mxfp8", engine="vllm", runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.6.18", "vllm": "0.24.0"})
    assert r.plan is not None
    with pytest.raises(EmitError, match="no flag asking runner flashinfer_trtllm on mxfp4 for activation precision mxfp8"):
        emit(r.plan, "vllm", engine_version="0.24.0")


def test_a_release_that_reads_the_precision_variable_gets_it_without_a_runner_option():
    # vLLM 0.23.0 still reads VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 where it picks the backend itself, and its pick under
    # it is FlashInfer's TRT-LLM-gen experts (the variable's picks): written, with no --moe-backend (break51)
    r = _explain("B200", "mxfp8", engine="vllm", runner="flashinfer_trtllm",
                 packages={"flashinfer-python": "0.6.18", "vllm": "0.23.0"})
    out = emit(r.plan, "vllm", engine_version="0.23.0")
    assert out.env == {"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "1"} and "--moe-backend" not in out.argv


# ------------------------------------------------------------------------------------------------- the tables
def test_a_table_entry_for_the_precision_needs_a_value_map_of_precision_names():
    base = {"name": "SOME_VAR", "means": "activation_precision", "checked": "x", "source": "a/b#1"}
    with pytest.raises(ValueError, match="needs values"):
        engine_tables.EnvEntry.model_validate(base)
    with pytest.raises(ValueError, match="'fp7' is not a precision name"):
        engine_tables.EnvEntry.model_validate({**base, "values": {"1": "fp7"}})
    with pytest.raises(ValueError, match="values maps the engine's names"):
        engine_tables.EnvEntry.model_validate({**base, "means": "tp", "values": {"1": "bf16"}})
    ok = engine_tables.EnvEntry.model_validate({**base, "values": {"1": "mxfp8", "0": None}})
    assert ok.values == {"1": "mxfp8", "0": None}


# ------------------------------------------------------------------------------------------------- command line
def test_cli_flag_asks_the_precision(capsys):
    from moe_select.cli import main

    argv = ["explain", "--gpu", "H200", "--model-config", GPT_OSS, "--engine", "sglang", "--runner", "flashinfer_mxfp4",
            "--package", "flashinfer-python=0.6.18", "--package", "sglang=0.5.18", "--activation-precision", "fp8_token"]
    assert main(argv) == 1  # refused: sglang 0.5.18 has no fp8 (the version gate)
    assert "sglang >=0.5.19" in capsys.readouterr().out
    assert main(argv[:-5] + ["sglang=0.5.19", "--activation-precision", "fp8_token", "--json"]) == 0
    assert '"activation_precision": "fp8_token"' in capsys.readouterr().out


def test_cli_flag_keeps_the_files_quant_config_and_its_lines(tmp_path, capsys):
    from moe_select.cli import main

    f = _write(tmp_path, f"gpu: H200\nmodel_config: {BF16}\nquant_config:\n  block: [128, 128]\n")
    assert main(["explain", "-d", str(f), "--activation-precision", "fp8_token"]) == 2
    err = capsys.readouterr().err
    assert f"{f}:3: quant_config.activation_precision" in err and "command line (--activation-precision)" in err
    assert main(["explain", "--gpu", "H200", "--model-config", GPT_OSS, "--activation-precision", "fp9"]) == 2
    assert "'fp9' is not one of" in capsys.readouterr().err


def test_cli_dispatch_flag_reads_one_precision_or_per_kind(capsys):
    from moe_select.cli import _dispatch_flag, main

    assert _dispatch_flag("nvfp4") == "nvfp4"
    assert _dispatch_flag("main=nvfp4, mtp=bf16") == {"main": "nvfp4", "mtp": "bf16"}
    for bad, says in (("main=", "is not KIND=PRECISION"), ("main=bf16,main=fp8_group", "given twice")):
        with pytest.raises(InputError, match=says):
            _dispatch_flag(bad)
    fp8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
    assert main(["explain", "--gpu", "H200", "--model-config", fp8, "--tp", "8", "--ep", "8", "--a2a", "deepep",
                 "--dispatch-precision", "main=fp8_group,mtp=bf16"]) == 2
    assert "layer kind 'mtp' is not in this checkpoint" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- break-it round (2026-12-02)
AWQ = str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ")


def test_a_w4a16_checkpoint_refuses_a_quantizing_precision():
    """int4_w4a16 (AWQ) is weight-only by its name (W4A16): fp8 activations asked of it are an input error, not an
    unverified plan 'with None activations'."""
    with pytest.raises(InputError, match=r"int4_w4a16: W\*A16\) keeps 16-bit activations"):
        _explain("H200", "fp8_token", engine="vllm", runner="auto", packages={}, model_config=AWQ)
    r = _explain("H200", "bf16", engine="vllm", runner="auto", packages={}, model_config=AWQ)
    assert r.plan is not None


def test_the_sglang_flag_is_emitted_only_for_flashinfer_mxfp4_on_mxfp4():
    """SGLang reads --flashinfer-mxfp4-moe-precision in its MXFP4 method with flashinfer_mxfp4 only (v0.5.23
    quantization/mxfp4.py): an NVFP4 plan asking fp8_token cannot be written with it."""
    r = moe_select.explain(dict(gpu="B200", engine="sglang", model_config=str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"),
                                tp=1, ep=1, a2a="none", quant_config={"activation_precision": "fp8_token"}))
    assert r.plan is not None and r.plan.runner != "flashinfer_mxfp4"
    with pytest.raises(EmitError, match="is read with runner flashinfer_mxfp4 or auto on mxfp4 only"):
        emit(r.plan, "sglang", engine_version="0.5.23")


@pytest.mark.parametrize("line, says", [
    ("--moe-runner-backend triton_kernel --flashinfer-mxfp4-moe-precision fp8", "the line's runner is triton_kernel"),
])
def test_the_sglang_flag_with_another_runner_is_not_read(line, says):
    launch = from_command(f"python -m sglang.launch_server --model-path {GPT_OSS} {line}", {})
    assert "quant_config" not in launch.deployment
    assert any(f.kind == "note" and says in f.message for f in launch.findings)


def test_the_sglang_flag_on_another_format_is_not_read():
    launch = from_command(f"python -m sglang.launch_server --model-path {CONFIGS / 'nvidia__Qwen3-30B-A3B-NVFP4'} "
                          "--flashinfer-mxfp4-moe-precision fp8", {})
    assert "quant_config" not in launch.deployment
    assert any("for mxfp4 checkpoints only; this one is nvfp4" in f.message for f in launch.findings)


@pytest.mark.parametrize("value, want", [("2", "mxfp8"), ("01", "mxfp8"), ("0", None)])
def test_vllm_variables_are_read_as_bool_of_int(value, want):
    launch = from_command(f"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8={value} vllm serve {GPT_OSS}", {}, engine_version="0.23.0")
    assert (launch.deployment.get("quant_config") or {}).get("activation_precision") == want


def test_vllm_variable_that_int_cannot_read_is_an_engine_error():
    launch = from_command(f"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=true vllm serve {GPT_OSS}", {}, engine_version="0.23.0")
    assert "quant_config" not in launch.deployment
    assert any(f.kind == "engine_error" for f in launch.findings if "MXFP4_MXFP8" in f.token)


def test_vllm_variables_are_not_read_with_an_explicit_moe_backend():
    """vLLM 0.23's select_mxfp4_moe_backend returns early for an explicit --moe-backend: the variables are not read."""
    launch = from_command(f"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS=1 vllm serve {GPT_OSS} --moe-backend flashinfer_trtllm",
                          {}, engine_version="0.23.0")
    assert "quant_config" not in launch.deployment
    assert any("when it picks the MoE runner itself" in f.message for f in launch.findings)
    auto = from_command(f"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS=1 vllm serve {GPT_OSS}", {}, engine_version="0.23.0")
    assert auto.deployment["quant_config"] == {"activation_precision": "mxfp8"}


def test_cli_dispatch_flag_refuses_an_empty_entry():
    from moe_select.cli import _dispatch_flag

    with pytest.raises(InputError, match="is not KIND=PRECISION"):
        _dispatch_flag("main=nvfp4,,mtp=bf16")

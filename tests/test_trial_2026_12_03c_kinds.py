"""A third new user's trial (2026-12-03: an operator editing facts and rules, an engine author on the Python API),
its findings fixed as kinds (vLLM's AITER switch is in tests/test_sglang_aiter_switch.py):

1. ``check`` passed a rule id defined in two files of one directory (one rule silently dropped), which ``explain
   --rules`` refuses;
2. a misspelt package in a fact's ``requires`` became 'assumed (version not known)' and the gate never decided;
3. a version range no version meets (``>=0.5,<0.4``) passed;
4. vLLM on a CPU was predicted from the CUDA list (and RDNA GPUs from it too: vLLM's list is is_rocm()'s);
5. ``when: {tp: 8}`` gave pydantic's two-branch union message; ``prefer: [triton, triton]`` was taken silently.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

import moe_select
from moe_select.catalog import load_catalog
from moe_select.conditions import When, _check_requires
from moe_select.errors import InputError
from moe_select.lint import check
from moe_select.policy import Rule

ROOT = Path(__file__).resolve().parent.parent
RULE = "schema_version: 1\nrules:\n  - id: my-rule\n    when: {{arch: [{arch}]}}\n    prefer: [{runner}]\n"


def test_check_refuses_a_rule_id_twice_in_one_directory_as_explain_does(tmp_path):
    (tmp_path / "a.yaml").write_text(RULE.format(arch="sm90", runner="triton"))
    (tmp_path / "b.yaml").write_text(RULE.format(arch="sm100", runner="flashinfer_cutlass"))
    with pytest.raises(InputError) as exc:
        check([tmp_path])
    assert f"{tmp_path}/b.yaml:3: id: duplicate rule id 'my-rule' (first at {tmp_path}/a.yaml:3)" in str(exc.value)
    with pytest.raises(InputError, match="duplicate rule id 'my-rule'"):
        load_catalog([tmp_path])
    # two separate files given one by one are layers: the later one overrides (as --rules a --rules b does)
    findings, catalog = check([tmp_path / "a.yaml", tmp_path / "b.yaml"])
    assert [r.when.arch for r in catalog.rules if r.id == "my-rule"] == [["sm100"]]


def _backends_with(tmp_path: Path, requires: str) -> Path:
    bk = tmp_path / "backends"
    shutil.copytree(ROOT / "backends", bk)
    p = bk / "hpc_ops.yaml"
    text = p.read_text()
    i = text.index("  - archs:")
    j = text.index("\n", text.index("source:", i))
    p.write_text(text[:j] + f"\n    requires: {requires}" + text[j:])
    return bk


def test_a_misspelt_package_in_a_version_gate_is_refused_with_a_close_match(tmp_path):
    bk = _backends_with(tmp_path, '{sglangg: ">=0.5"}')
    with pytest.raises(InputError) as exc:
        load_catalog([], backends_dir=bk)
    text = str(exc.value)
    assert "backends/hpc_ops.yaml:" in text and "requires.sglangg: unknown package 'sglangg' in a version gate" in text
    assert "did you mean 'sglang'?" in text
    load_catalog([], backends_dir=_backends_with(tmp_path / "ok", '{sglang: ">=0.5"}'))  # the real name loads


@pytest.mark.parametrize("spec", [">=0.5,<0.4", ">0.5,<0.5", "==1.0,==2.0", ">=0.5.23,<0.5.11"])
def test_a_version_range_no_version_meets_is_refused(spec):
    with pytest.raises(ValueError, match="admits no version"):
        _check_requires({"sglang": spec})


@pytest.mark.parametrize("spec", [">=0.5.11,<0.5.23", "<0.4.10", ">0.5,<0.5.1", "==0.5.*", ">=1.0,!=1.0", ">=0.5,<=0.5",
                                  ">=0.5.10.post1,<0.5.11", "~=1.2", ">0.5.23"])
def test_ranges_some_version_meets_load(spec):
    assert _check_requires({"sglang": spec}) == {"sglang": spec}


def test_an_impossible_gate_in_a_fact_file_is_a_load_error(tmp_path):
    with pytest.raises(InputError, match="admits no version"):
        load_catalog([], backends_dir=_backends_with(tmp_path, '{sglang: ">=0.5,<0.4"}'))


def _vllm(arch: str):
    r = moe_select.explain({"arch": arch, "engine": "vllm", "model_config": str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B")})
    return next(c for c in r.engine_choices if c.engine == "vllm")


def test_vllm_on_a_cpu_runs_its_cpu_experts_not_the_cuda_list():
    ch = _vllm("cpu")
    assert ch.runner is None and ch.engine_name == "CPU" and "no runner of moe-select stands for" in ch.how
    assert ch.log == "Using CPU Unquantized MoE backend out of potential backends: ['CPU']."


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1151", "gfx942"])
def test_vllm_on_any_rocm_gpu_takes_the_rocm_list(arch):
    ch = _vllm(arch)
    assert ch.runner == "triton" and "['ROCm AITER', 'TRITON', 'BATCHED_TRITON']" in ch.how


def test_a_bare_quantity_in_when_says_how_to_write_it():
    with pytest.raises(ValidationError, match=r"write a list \(\[8\]\) or a range \(\{min: 8, max: 8\}\), not a bare value"):
        When(tp=8)
    assert When(tp=[8]).tp == [8] and When(arch=["sm90"]).arch == ["sm90"]


def test_a_runner_named_twice_in_a_rule_is_refused():
    with pytest.raises(ValidationError, match="triton named twice"):
        Rule(id="x", when=When(), prefer=["triton", "marlin", "triton"])
    with pytest.raises(ValidationError, match="marlin named twice"):
        Rule(id="x", when=When(), disable=["marlin", "marlin"], reason="r")


# ------------------------------------------------------------------ a launch line the engine refuses at startup
V3 = str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3")
NEWER = (f"python3 -m sglang.launch_server --model-path {V3} --tp 8 --ep 8 --moe-a2a-backend deepep "
         "--deepep-dispatcher-output-dtype bf16")


def test_a_line_with_a_flag_the_release_lacks_exits_1_and_emit_writes_it_without(capsys, tmp_path):
    """A flag newer than the declared release (argparse: unrecognized arguments) is an engine error, as a removed one is;
    explain and plan still show the plan of the deployment the line describes but exit 1 (the line as written does not
    start); plan --emit writes the line without it (exit 0, a comment says what was left out)."""
    from moe_select.cli import main

    rc = main(["explain", "--gpu", "H200", "--engine-version", "0.5.12", "--from-command", NEWER])
    out = capsys.readouterr()
    assert rc == 1 and "Plan: " in out.out
    assert "the launch line fails at startup as written (1 engine error(s): --deepep-dispatcher-output-dtype bf16)" in out.err
    assert main(["plan", "--gpu", "H200", "--engine-version", "0.5.12", "--from-command", NEWER, "-o", str(tmp_path / "p.json")]) == 1
    capsys.readouterr()
    rc = main(["plan", "--gpu", "H200", "--engine-version", "0.5.12", "--from-command", NEWER, "--emit", "sglang"])
    out = capsys.readouterr()
    command = [line for line in out.out.splitlines() if not line.startswith("#")]
    assert rc == 0 and command and not any("--deepep-dispatcher-output-dtype" in line for line in command)
    assert "not written: --deepep-dispatcher-output-dtype bf16" in out.out
    assert main(["explain", "--gpu", "H200", "--engine-version", "0.5.13", "--from-command", NEWER]) == 0


# ------------------------------------------------------------------ docker run -e NAME takes the host's value
ROCM_LINE = ("docker run -e SGLANG_USE_AITER lmsysorg/sglang:v0.5.12-rocm python3 -m sglang.launch_server "
             f"--model-path {ROOT / 'examples' / 'model_configs' / 'Qwen__Qwen3-30B-A3B'} --tp 1")


@pytest.mark.parametrize("host, want", [("0", False), ("1", True)])
def test_docker_e_name_passes_the_host_value_over_the_image(host, want):
    """-e NAME passes the value of the environment docker runs in (the shell, or the --env file given), which wins over
    the image's ENV: the shell's SGLANG_USE_AITER=0 was read as the image's 1 (labelled '--env file')."""
    from moe_select.launch_line import from_command

    launch = from_command(ROCM_LINE, {"SGLANG_USE_AITER": host})
    assert launch.deployment["vendor_library"] is want
    assert launch.env_from["SGLANG_USE_AITER"] == "docker run -e SGLANG_USE_AITER: the host environment given"


def test_a_host_variable_docker_does_not_pass_is_reported_not_read():
    from moe_select.launch_line import from_command

    launch = from_command(ROCM_LINE.replace("-e SGLANG_USE_AITER ", ""), {"SGLANG_USE_AITER": "0", "HOME": "/root"})
    assert launch.deployment["vendor_library"] is True  # the image's ENV
    assert launch.env_from["SGLANG_USE_AITER"] == "image lmsysorg/sglang:v0.5.12-rocm"
    notes = {f.token: f.message for f in launch.findings if f.kind == "note"}
    assert "only with -e/--env: not read" in notes["SGLANG_USE_AITER"] and "HOME" not in launch.env


# ------------------------------------------------------------------ a release without the runner option
def test_emit_for_a_release_without_the_runner_option_leaves_it_out_when_the_engine_picks_the_plan(capsys):
    """vLLM before 0.17.0 has no --moe-backend: a plan of runner auto whose runner vLLM's own selection picks is written
    without the option (a comment says why and what to check); an asked runner (the prediction presumes the option) is
    still refused, as is a plan the engine would not pick itself."""
    from moe_select.cli import main

    # (NVFP4 on B200: vLLM's NvFp4 oracle is replayed from 0.15.1, the release it was read in; the FP8 oracle of the
    # earlier form of this test is read from 0.18.0 only, the ninth trial)
    nvfp4 = str(ROOT / "examples" / "model_configs" / "nvidia__Qwen3-30B-A3B-NVFP4")
    base = ["plan", "--gpu", "B200", "--engine", "vllm", "--engine-version", "0.16.0", "--model-config", nvfp4, "--emit", "vllm"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "--moe-backend" not in "".join(line for line in out.splitlines() if not line.startswith("#"))
    assert "no runner option written: --moe-backend was added in" in out and "vllm picks flashinfer_trtllm itself" in out
    assert main([*base, "--runner", "flashinfer_cutlass"]) == 1
    assert "vllm 0.16.0 does not have it" in capsys.readouterr().err
    assert main([*base[:-2], "--engine-version", "0.17.0", "--emit", "vllm"]) == 0
    assert "--moe-backend flashinfer_trtllm" in capsys.readouterr().out
    # a release the engine's oracle was not read in: not predicted, so the option the plan needs is missing: refused
    fp8 = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8")
    assert main(["plan", "--gpu", "H200", "--engine", "vllm", "--engine-version", "0.16.0", "--model-config", fp8,
                 "--emit", "vllm"]) == 1
    assert "vllm 0.16.0 does not have it" in capsys.readouterr().err


# ------------------------------------------------------------------ vLLM --moe-backend values by release
@pytest.mark.parametrize("value, version, ok", [("hpc", "0.24.0", False), ("hpc", "0.25.0", True),
                                                ("humming", "0.20.2", False), ("humming", "0.21.0", True),
                                                ("Flashinfer-B12x", "0.21.0", False), ("flashinfer_b12x", "0.22.0", True),
                                                ("triton", "0.17.0", True),
                                                ("flashinfer_moe_ep_mega_cutedsl", "0.31.0", True),
                                                ("flashinfer_moe_ep_mega_cutedsl", "0.32.0", False),
                                                ("aiter_mega_moe", "0.34.0", True)])
def test_vllm_moe_backend_values_follow_their_releases(value, version, ok):
    """The MoEBackend Literal read in every vLLM sdist 0.17.0-0.34.0 (names.yaml choices since / removed): a value the
    declared release does not take is refused as the engine refuses it at startup."""
    from moe_select.launch_line import from_command

    line = f"vllm serve M --moe-backend {value}"
    cfg = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8")
    launch = from_command(line, model_config=cfg, engine_version=version)
    said = [f for f in launch.found("engine_error") if re.search("first shipped in vllm|was removed in vllm 0.32.0", f.message)]
    assert bool(said) == (not ok), launch.findings


def test_emit_vllm_refuses_a_runner_value_the_release_lacks():
    from moe_select.launch_emit import EmitError, emit

    plan = moe_select.explain({"gpu": "H100", "engine": "vllm", "runner": "humming",
                               "model_config": str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-AWQ")}).plan
    assert plan is not None
    with pytest.raises(EmitError, match="humming first shipped in vllm 0.21.0"):
        emit(plan, "vllm", engine_version="0.20.0")
    assert "--moe-backend humming" in " ".join(emit(plan, "vllm", engine_version="0.21.0").argv)

"""A fleet planner's trial (2026-12-06, break55: deployment files gated in CI, launch lines round-tripped), the defects
fixed as kinds: TensorRT-LLM's moe_config keys checked against MoeConfig's (a strict model: an unknown key fails at
startup) and their own lines named; `check` on a deployment file says what gates deployments; `--json` usage errors
print the invalid_input JSON; an engine's package declared at a version that is no release is refused as engine_version
is; the checkpoint's MTP layers in its main format are planned as their own kind where the deployment names them; a GPU
product written where an arch belongs is answered with its arch; SGLang's removed --cuda-graph-max-bs is read as plan
--emit writes it, and its parser's refusal is the ambiguous-prefix one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
DSV3 = str(ROOT / "examples/model_configs/deepseek-ai__DeepSeek-V3")
QWEN3 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B")


def _trt(tmp_path, text: str, gpu: str = "B200"):
    f = tmp_path / "extra.yaml"
    f.write_text(text)
    launch = from_command(f"trtllm-serve {DSV3} --tp_size 8 --ep_size 8 --extra_llm_api_options {f}")
    return launch, launch.explain(deployment={"gpu": gpu})


@pytest.mark.parametrize("key", ["backnd", "max_num_token"])
def test_an_unknown_moe_config_key_is_an_engine_error_and_not_written(tmp_path, key):
    launch, report = _trt(tmp_path, f"moe_config:\n  {key}: DEEPGEMM\n")
    errors = [f for f in launch.findings if f.kind == "engine_error"]
    assert [f.token for f in errors] == [f"moe_config.{key}"], [(f.kind, f.token) for f in launch.findings]
    assert "Extra inputs are not permitted" in errors[0].message and "MoeConfig" in (errors[0].source or "")
    out = emit(report.plan, "trtllm", launch=launch)
    assert out.yaml is not None and key not in json.dumps(out.yaml), out.yaml
    assert any(f"moe_config.{key}" in c for c in out.comments), out.comments   # said, not dropped silently


def test_known_moe_config_keys_pass(tmp_path):
    launch, _ = _trt(tmp_path, "moe_config:\n  backend: DEEPGEMM\n  max_num_tokens: 8192\n  disable_finalize_fusion: true\n")
    assert not [f for f in launch.findings if f.kind == "engine_error"], [(f.kind, f.token) for f in launch.findings]


def test_a_nested_keys_provenance_names_its_own_line(tmp_path):
    launch, report = _trt(tmp_path, "moe_config:\n  backend: DEEPGEMM\ncuda_graph_config:\n  enable_padding: true\n"
                          "  max_batch_size: 256\n")
    prov = report.deployment.provenance
    assert "extra.yaml:2: moe_config.backend" in prov["runner"], prov["runner"]
    assert "extra.yaml:5: cuda_graph_config.max_batch_size" in prov["decode_tokens_per_rank"], prov


def test_check_on_a_deployment_file_names_the_gate(tmp_path):
    from moe_select.lint import _kind

    f = tmp_path / "dep.yaml"
    f.write_text(f"gpu: H200\nengine: sglang\nmodel_config: {DSV3}\ntp: 8\nep: 8\na2a: deepep\nrunner: deep_gemm\n")
    with pytest.raises(InputError) as exc:
        _kind(f)
    msg = str(exc.value)
    assert "a deployment file" in msg and "explain -d" in msg and "--strict" in msg and "schema_version" not in msg


@pytest.mark.parametrize("argv, field", [(["--tp", "abc"], "--tp"), (["--tp", "2", "--tp", "4"], "--tp")])
def test_json_usage_errors_print_invalid_input(capsys, argv, field):
    from moe_select.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["explain", "--gpu", "H100", "--model-config", QWEN3, *argv, "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 2
    doc = json.loads(out.out)
    assert doc["status"] == "invalid_input" and doc["issues"][0]["field"] == field, doc
    assert "error:" in out.err
    # without --json: stdout stays empty, the usage and error on stderr as argparse prints them
    with pytest.raises(SystemExit):
        main(["explain", "--gpu", "H100", "--model-config", QWEN3, *argv])
    out = capsys.readouterr()
    assert out.out == "" and "usage:" in out.err


@pytest.mark.parametrize("version, bad", [("0.16.5", True), ("0.16.0", False)])
def test_an_engine_package_that_is_no_release_is_refused(version, bad):
    dep = {"gpu": "H100", "engine": "vllm", "model_config": QWEN3, "packages": {"vllm": version}}
    if bad:
        with pytest.raises(InputError, match="packages.vllm.*0.16.5 is not a release of vllm"):
            moe_select.explain(dep)
    else:
        assert moe_select.explain(dep).plan is not None


def test_mtp_layers_in_the_main_format_are_planned_when_named():
    r = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": DSV3, "tp": 8, "runner": "deep_gemm",
                            "layer_runners": {"mtp": "triton"}, "speculative": True})
    kinds = {sub.deployment.layer_kind: sub for sub in r.layers}
    assert "mtp" in kinds and kinds["mtp"].deployment.layers == [61], report_codes(r)
    assert kinds["mtp"].plan is not None and kinds["mtp"].plan.runner == "triton"
    assert 61 not in r.deployment.layers
    # not named: the MTP layer stays a main layer
    plain = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": DSV3, "tp": 8})
    assert 61 in plain.deployment.layers and not plain.layers


def test_the_draft_runner_flag_is_read_and_written_back():
    line = (f"python -m sglang.launch_server --model-path {DSV3} --tp 8 --speculative-algorithm EAGLE "
            "--speculative-moe-runner-backend triton --moe-runner-backend deep_gemm")
    launch = from_command(line)
    assert launch.deployment["layer_runners"] == {"mtp": "triton"}, [f.message for f in launch.findings]
    r = launch.explain(deployment={"gpu": "H200"})
    out = emit(r.plan, "sglang", launch=launch)
    i = out.argv.index("--speculative-moe-runner-backend")
    assert out.argv[i + 1] == "triton", out.argv


@pytest.mark.parametrize("spec", ["H100", "h100"])
def test_a_gpu_name_where_an_arch_belongs_gets_its_arch(tmp_path, spec):
    from moe_select.lint import check

    d = tmp_path / "rules"
    d.mkdir()
    (d / "90-x.yaml").write_text(f"schema_version: 1\nrules:\n  - id: x\n    when: {{arch: [{spec}]}}\n"
                                 "    disable: [deep_gemm]\n    reason: test\n")
    with pytest.raises(InputError) as exc:
        check([d], use_env=False)
    msg = str(exc.value)
    assert "is a GPU product, not an arch" in msg and "'sm90'" in msg and "sm100" not in msg, msg


def test_sglangs_removed_capture_limit_is_read_as_emit_writes_it():
    line = f"python -m sglang.launch_server --model-path {QWEN3} --tp 4 --cuda-graph-max-bs 128"
    launch = from_command(line, engine_version="0.5.23")
    err = next(f for f in launch.findings if f.kind == "engine_error")
    assert "ambiguous option" in err.message and "--cuda-graph-max-bs-decode" in err.message, err.message
    r = launch.explain(deployment={"gpu": "H200"})
    assert r.deployment.decode_tokens_per_rank == 128, r.deployment.provenance
    out = emit(r.plan, "sglang", launch=launch, engine_version="0.5.23")
    back = from_command(" ".join(out.argv), engine_version="0.5.23").explain(deployment={"gpu": "H200"})
    assert back.deployment.decode_tokens_per_rank == 128
    # a release that still has the alias reads it as before
    old = from_command(line, engine_version="0.5.19")
    assert not [f for f in old.findings if f.kind == "engine_error"]


def test_the_trtllm_emit_reads_back(tmp_path):
    """plan --emit trtllm writes its options file with a here-document before the command: the script reads back."""
    r = moe_select.explain({"gpu": "B200", "engine": "trtllm", "model_config": QWEN3, "tp": 4, "ep": 4})
    script = emit(r.plan, "trtllm").script()
    launch = from_command(script)
    assert launch.deployment["tp"] == 4 and launch.deployment["ep"] == 4, launch.deployment
    back = launch.explain(deployment={"gpu": "B200"})
    assert back.plan is not None and back.plan.runner == r.plan.runner, (back.plan, r.plan.runner)
    # a file named by the line and written by no here-document is still read from disk (and refused when absent)
    with pytest.raises(InputError, match="no such file"):
        from_command(script.replace("--extra_llm_api_options moe-select-llm-api.yaml", "--extra_llm_api_options other.yaml"),
                     base_dir=tmp_path)


def test_a_misspelt_plan_deciding_flag_is_refused_under_strict(capsys):
    from moe_select.cli import main

    line = f"vllm serve {QWEN3} --tensor-paralel-size 4 --max-model-len 4096"
    launch = from_command(line)
    assert launch.misspelt() == [("--tensor-paralel-size", "--tensor-parallel-size", "tp")]
    assert main(["explain", "--gpu", "H100", "--brief", "--strict", "--from-command", line]) == 1
    assert "did you mean --tensor-parallel-size" in capsys.readouterr().err
    assert main(["explain", "--gpu", "H100", "--brief", "--from-command", line]) == 0       # a warning only
    assert "warning" in capsys.readouterr().err
    # flags the table does not list and that are close to none that decides the plan: nothing said
    assert not from_command(f"vllm serve {QWEN3} -tp 4 --port 8000 --served-model-name x").misspelt()
    out = emit(launch.explain(deployment={"gpu": "H100"}).plan, "vllm", launch=launch)
    assert any("--tensor-paralel-size kept as the line gave it" in c for c in out.comments), out.comments


def test_ep_above_tp_without_dp_names_the_dp_that_makes_it():
    from moe_select.launch_emit import EmitError

    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "model_config": QWEN3, "tp": 2, "ep": 4})
    with pytest.raises(EmitError, match="state dp 2"):
        emit(r.plan, "vllm")


# --- the review of session 34's change (helper, 2026-12-06)
@pytest.mark.parametrize("line, flagged", [
    ("python -m sglang.launch_server --model-path {m} --tp 8 --ep 8 --moe-a2a-backend deepep --deepep-config /x.json", False),
    ("python -m sglang.launch_server --model-path {m} --tp 8 --enable-lora --lora-backend triton --max-loras-per-batch 4", False),
    ("vllm serve {m} -tp 2 --enable-lora --enable-lora-bias --data-parallel-start-rank 0", False),
    ("vllm serve {m} --tensor-paralel-size 4", True),
])
def test_only_typos_of_plan_deciding_flags_count(line, flagged):
    assert bool(from_command(line.format(m=QWEN3)).misspelt()) is flagged


def test_a_negated_flag_is_written_as_given():
    line = f"vllm serve {QWEN3} -tp 2 --no-allow-deprecated-quantization"
    launch = from_command(line, engine_version="0.20.0")
    out = emit(launch.explain(deployment={"gpu": "H100"}).plan, "vllm", launch=launch, engine_version="0.20.0")
    assert "--no-allow-deprecated-quantization" in out.argv and "--allow-deprecated-quantization" not in out.argv, out.argv


def test_trtllm_cannot_give_the_draft_its_own_runner():
    dsv31 = str(ROOT / "examples/model_configs/nvidia__DeepSeek-V3.1-NVFP4")
    with pytest.raises(InputError, match="layer_runners.mtp .*model-wide"):
        moe_select.explain({"gpu": "B200", "engine": "trtllm", "model_config": dsv31, "tp": 8, "ep": 8,
                            "runner": "trtllm_gen", "layer_runners": {"mtp": "trtllm_cutlass"}, "speculative": True})


def test_here_documents_as_the_shell_reads_them(tmp_path):
    tab = "\t"
    script = ("export B=DEEPGEMM\n"
              f"cat > ./x.yaml <<-EOF\n{tab}moe_config:\n{tab}  backend: $B\n{tab}EOF\n"
              f"trtllm-serve {DSV3} --tp_size 8 --ep_size 8 --extra_llm_api_options x.yaml\n")
    launch = from_command(script, base_dir=tmp_path)
    assert launch.values["moe_config"].value == {"backend": "DEEPGEMM"}, launch.values["moe_config"].value
    # a quoted terminator leaves $B as written (the shell does not expand it): a backend TensorRT-LLM refuses
    quoted = script.replace("<<-EOF", "<<-'EOF'")
    with pytest.raises(InputError, match="'\\$B' is not a runner value trtllm takes"):
        from_command(quoted, base_dir=tmp_path)

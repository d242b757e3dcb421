"""A new user's trial of 2026-12-06 (break51): launch lines and ``plan --emit`` round trips that lost or added
something. SGLang data-parallel replicas (``--dp-size`` without attention DP) are written back as given; attention DP
is written only where the plan has it (dp above 1) or the line enabled it; a parallel size of 0 is refused, not read
as 1."""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_select.errors import InputError
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"
QWEN = str(CONFIGS / "Qwen__Qwen3-30B-A3B")
SGL = "python3 -m sglang.launch_server --model-path x "


def _emitted(line: str, version: str | None = None) -> list[str]:
    launch = from_command(line, model_config=QWEN, engine_version=version)
    report = launch.explain(deployment={"gpu": "H100"})
    assert report.plan is not None, report.summary()
    return emit(report.plan, launch.engine, launch=launch, engine_version=version).argv


@pytest.mark.parametrize("version", [None, "0.5.4.post1", "0.5.23"])
def test_sglang_replicas_are_written_back(version):
    argv = _emitted(SGL + "--tp 4 --dp-size 2 --mem-fraction-static 0.8", version)
    i = argv.index("--dp-size")
    assert argv[i + 1] == "2" and "--enable-dp-attention" not in argv and "--attn-dp-size" not in argv, argv
    back = from_command(argv, model_config=QWEN, engine_version=version)
    assert back.deployment["dp"] == 1 and ["--dp-size", "2"] in back.kept, back.kept


@pytest.mark.parametrize("version", [None, "0.5.4.post1"])
def test_no_attention_dp_is_added_to_a_line_without_it(version):
    argv = _emitted(SGL + "--tp 8", version)
    assert not {"--enable-dp-attention", "--attn-dp-size", "--dp-size"} & set(argv), argv


def test_attention_dp_the_line_asked_for_is_kept():
    argv = _emitted(SGL + "--tp 8 --enable-dp-attention --dp-size 4", "0.5.4.post1")
    assert "--enable-dp-attention" in argv and argv[argv.index("--dp-size") + 1] == "4", argv


@pytest.mark.parametrize("line", ["vllm serve x -tp 0", "vllm serve x -tp 2 -dp 0", SGL + "--tp 0", SGL + "--tp 4 --dp-size 0"])
def test_a_parallel_size_of_zero_is_refused(line):
    with pytest.raises(InputError, match="at least 1"):
        from_command(line, model_config=QWEN)


@pytest.mark.parametrize("tp, ep, dp, refused", [
    (8, 8, 3, True), (8, 8, 16, True), (24, 24, 16, True),
    (8, 8, 2, False), (4, 8, 2, False), (16, 1, 16, False), (8, 1, 1, False),
    (8, 1, 3, False)])    # no expert parallelism: vLLM's -tp 8 -dp 3 (tp read beside dp), not checked
def test_vllm_group_is_a_multiple_of_dp(tp, ep, dp, refused):
    """vLLM's expert-parallel group is its tensor-parallel size times dp: an ep that dp does not divide was planned with
    exit 0 and refused only by plan --emit (break51); now an input error naming dp, as SGLang's tp % dp is."""
    import moe_select

    dep = {"gpu": "H100", "engine": "vllm", "model_config": QWEN, "tp": tp, "ep": ep, "dp": dp}
    if refused:
        with pytest.raises(InputError, match="vLLM's MoE group is its tensor-parallel size times"):
            moe_select.explain(dep)
    else:
        assert moe_select.explain(dep).plan is not None


def test_a_runner_value_the_engine_takes_without_a_row_is_written_back():
    """vLLM's --moe-backend batched_triton (a value since 0.27.0 that names.yaml maps to no runner of ours) planned from
    a line is emitted as the line gave it, with a comment, instead of refused (break51)."""
    launch = from_command("vllm serve x -tp 2 --moe-backend batched_triton", model_config=QWEN)
    report = launch.explain(deployment={"gpu": "H100"})
    assert report.plan is not None and report.plan.runner == "batched_triton"
    out = emit(report.plan, "vllm", launch=launch)
    assert out.argv[out.argv.index("--moe-backend") + 1] == "batched_triton"
    assert any("written as the line gave it" in c for c in out.comments)


def test_the_readme_says_what_mpirun_does():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "(`mpirun`, `bash -c`) is refused" not in text
    launch = from_command("mpirun -np 8 vllm serve x", model_config=QWEN)
    assert any("mpirun" in f.token for f in launch.findings if f.kind == "note")


def test_a_removed_flag_is_written_as_its_replacement_with_the_lines_value():
    """SGLang's --cuda-graph-max-bs (gone in 0.5.20; the table names --cuda-graph-max-bs-decode) was dropped to a comment
    by plan --emit although the refusal named the replacement (break51); the finding no longer reads 'removed by this
    project'."""
    launch = from_command(SGL + "--tp 8 --cuda-graph-max-bs 128", model_config=QWEN, engine_version="0.5.23")
    f = next(x for x in launch.findings if x.kind == "engine_error")
    assert "removed in v0.5.20" in f.message and "removed by this project" not in f.message
    report = launch.explain(deployment={"gpu": "H100"})
    argv = emit(report.plan, "sglang", launch=launch, engine_version="0.5.23").argv
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "128" and "--cuda-graph-max-bs" not in argv
    # at a release that still takes the old name, nothing is replaced
    launch = from_command(SGL + "--tp 8 --cuda-graph-max-bs 128", model_config=QWEN, engine_version="0.5.13")
    assert not any(x.kind == "engine_error" for x in launch.findings)


@pytest.mark.parametrize("gpu, folder, precision", [
    ("B200", "nvidia__Qwen3-30B-A3B-NVFP4", "nvfp4"), ("H100", "nvidia__Qwen3-30B-A3B-NVFP4", "nvfp4"),
    ("L40S", "nvidia__Qwen3-30B-A3B-NVFP4", "nvfp4"), ("H100", "openai__gpt-oss-20b", "bf16")])
def test_vllm_emulation_plans_fp4_checkpoints_on_nvidia_gpus(gpu, folder, precision):
    """vLLM's --moe-backend emulation (our triton on mxfp4 / nvfp4) was refused on every GPU by the FP8 / int8
    Triton-experts list (break51): the NVFP4 oracle's emulation experts (NVFP4 activations) and gpt-oss's OCP-MX ones
    (bf16, needing amd-quark) are support rows now; an undeclared amd-quark is an assumption."""
    launch = from_command("vllm serve x -tp 2 --moe-backend emulation", model_config=str(CONFIGS / folder),
                          engine_version="0.25.0")
    report = launch.explain(deployment={"gpu": gpu})
    assert report.plan is not None and report.plan.runner == "triton", report.summary()
    assert report.plan.activation_precision == precision
    if folder.startswith("openai"):
        assert any(a.startswith("amd-quark") for a in report.plan.assumptions), report.plan.assumptions
    before = from_command("vllm serve x -tp 2 --moe-backend emulation", model_config=str(CONFIGS / folder),
                          engine_version="0.19.1")
    r = before.explain(deployment={"gpu": gpu})       # 0.19.1: no --moe-backend emulation (EMULATION from 0.20.0)
    assert r.plan is None, r.summary()


@pytest.mark.parametrize("version", ["0.11.0", "0.20.0"])
@pytest.mark.parametrize("var", ["VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16"])
def test_vllm_mxfp4_precision_variables_are_written_back(version, var):
    """A line whose MXFP4 precision came from VLLM_USE_FLASHINFER_MOE_MXFP4_* (read only where vLLM picks the backend
    itself, 0.10.1 .. 0.23.x) planned flashinfer_trtllm and could not be emitted (break51): the variable is written, with
    no --moe-backend (which would turn it off)."""
    gptoss = str(CONFIGS / "openai__gpt-oss-120b")
    launch = from_command(f"{var}=1 vllm serve x --tensor-parallel-size 4", model_config=gptoss, engine_version=version)
    report = launch.explain(deployment={"gpu": "B200"})
    assert report.plan is not None and report.plan.runner == "flashinfer_trtllm"
    out = emit(report.plan, "vllm", launch=launch, engine_version=version)
    assert out.env.get(var) == "1" and "--moe-backend" not in out.argv, (out.env, out.argv)


@pytest.mark.parametrize("folder", ["nvidia__Qwen3-30B-A3B-NVFP4"])
def test_vllm_triton_on_nvfp4_is_refused_as_a_launch_line(folder):
    """vLLM's own --moe-backend triton on an NVFP4 checkpoint raises (map_nvfp4_backend: 'moe_backend='triton' is not
    supported for NvFP4 MoE'; field round 27's NVFP4 reports): an engine error as the line is read, while a plan of our
    triton there is written as emulation."""
    launch = from_command("vllm serve x -tp 1 --moe-backend triton", model_config=str(CONFIGS / folder),
                          engine_version="0.20.0")
    f = [x for x in launch.findings if x.kind == "engine_error" and "--moe-backend" in x.token]
    assert f and "not supported for NvFP4 MoE" in f[0].message
    # the plan is the line without it (the engine's own choice), never our triton written back as emulation
    assert launch.deployment["runner"] == "auto"
    report = launch.explain(deployment={"gpu": "H100"})
    out = emit(report.plan, "vllm", launch=launch, engine_version="0.20.0")
    assert "emulation" not in out.argv and "triton" not in out.argv, out.argv
    ok = from_command("vllm serve x -tp 1 --moe-backend emulation", model_config=str(CONFIGS / folder),
                      engine_version="0.20.0")
    assert not [x for x in ok.findings if x.kind == "engine_error"]


def test_check_reports_every_error_class_of_a_rules_folder_in_one_run(tmp_path):
    """A duplicate rule id used to stop `check` before the catalog's own checks (unknown runner, undeclared arch), which
    `explain --rules` reports in the same pass (break51)."""
    from moe_select.lint import check

    d = tmp_path / "rules1"
    d.mkdir()
    (d / "a.yaml").write_text("schema_version: 1\nrules:\n"
                              "  - {id: dup, when: {arch: [sm900]}, prefer: [triton, tritonn], note: x}\n"
                              "  - {id: dup, when: {arch: [sm90]}, prefer: [triton], note: y}\n")
    with pytest.raises(InputError) as exc:
        check([d], use_env=False)
    text = "\n".join(str(i) for i in exc.value.issues)
    assert len(set(exc.value.issues)) == len(exc.value.issues), text    # each issue once (the catalog reports ids too)
    assert "duplicate rule id" in text and "unknown runner 'tritonn'" in text and "'sm900' is not declared" in text, text


def test_an_emit_that_regroups_the_lines_tp_says_so():
    """-tp 4 -dp 2 with a dp of 4 given beside the line keeps the MoE group of 8 and writes -tp 2 -dp 4: a comment says
    the line's tp was rewritten (break51: silent before); a plain round trip writes no such comment."""
    launch = from_command("vllm serve x -tp 4 -dp 2 --enable-expert-parallel", model_config=QWEN)
    report = launch.explain(deployment={"gpu": "H100", "dp": 4})
    out = emit(report.plan, "vllm", launch=launch)
    assert out.argv[out.argv.index("--tensor-parallel-size") + 1] == "2"
    assert any("-tp 4 written as 2" in c for c in out.comments), out.comments
    plain = from_command("vllm serve x -tp 4 -dp 2 --enable-expert-parallel", model_config=QWEN)
    out = emit(plain.explain(deployment={"gpu": "H100"}).plan, "vllm", launch=plain)
    assert out.argv[out.argv.index("--tensor-parallel-size") + 1] == "4"
    assert not any("written as" in c and "-tp" in c for c in out.comments), out.comments


def test_a_precision_variable_is_written_only_for_a_runner_it_picks():
    """VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 steers vLLM to FlashInfer's TRT-LLM-gen experts: never written for a plan of
    flashinfer_cutlass (its CUTLASS twin is) or marlin, whatever the prediction says (a review, 2026-12-06)."""
    from moe_select.launch_emit import _precision_env

    assert _precision_env("vllm", "mxfp8", "0.20.0", "flashinfer_cutlass", "flashinfer_cutlass") \
        == "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS"
    assert _precision_env("vllm", "mxfp8", "0.20.0", "flashinfer_trtllm", None) == "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8"
    assert _precision_env("vllm", "bf16", "0.20.0", "marlin", "marlin") is None
    assert _precision_env("vllm", "mxfp8", "0.20.0", "flashinfer_trtllm", "marlin") is None
    assert _precision_env("vllm", "mxfp8", "0.24.0", "flashinfer_trtllm", None) is None     # ignored from 0.24.0


def test_a_plans_attention_dp_and_the_lines_replicas_cannot_both_be_written():
    from moe_select.launch_emit import EmitError

    launch = from_command(SGL + "--tp 4 --dp-size 2", model_config=QWEN, engine_version="0.5.4.post1")
    report = launch.explain(deployment={"gpu": "H100", "dp": 4})
    with pytest.raises(EmitError, match="replicas"):
        emit(report.plan, "sglang", launch=launch, engine_version="0.5.4.post1")


def test_a_trtllm_yaml_parallel_size_of_zero_is_refused(tmp_path):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("tensor_parallel_size: 0\n")
    with pytest.raises(InputError, match="at least 1"):
        from_command(f"trtllm-serve x --tp_size 2 --extra_llm_api_options {cfg}", model_config=QWEN)


def test_an_allow_list_holds_at_its_post_releases():
    from moe_select.launch_line import from_command as fc

    awq = str(CONFIGS / "Qwen__Qwen3-30B-A3B-AWQ")
    for v in ("0.5.15", "0.5.15.post1", "0.5.16"):
        launch = fc(SGL + "--tp 1 --quantization w8a8_int8", model_config=awq, engine_version=v)
        assert any(f.kind == "engine_error" for f in launch.findings if f.token.startswith("--quantization")), v

"""Kinds from a fifth new user's trial (2026-12-04): each a class of defect, tested by behaviour."""
from __future__ import annotations

import pytest
from pathlib import Path
import torch

import moe_select
from moe_select.errors import InputError

DEP = dict(arch="auto", quant="bf16", engine="moe_select", runner="torch_grouped_mm",
           model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu",
                      routing="renormalize"))


@pytest.mark.parametrize("strict", ["no", "false", 1, 0.0])
def test_resolve_takes_strict_as_a_bool_only(strict):
    """``strict="no"`` read as true (a non-empty string) and refused the plan as unverified: nothing is coerced, so a
    non-bool is an InputError naming the argument, before anything is built."""
    p = moe_select.plan(DEP)
    with pytest.raises(InputError, match=r"strict must be True, False or None") as e:
        moe_select.resolve(p, strict=strict)
    assert e.value.issues[0].field == "strict"


@pytest.mark.parametrize("bad, where", [([{"a": 1}], r"measurements\[0\]"), (3, "measurements"), ({"a": 1}, "measurements")])
def test_explain_measurements_of_the_wrong_type_are_an_input_error(bad, where):
    """A dict in ``measurements`` raised a bare TypeError from os.fspath: now an InputError naming the entry."""
    with pytest.raises(InputError, match=where):
        moe_select.explain(DEP, measurements=bad)


def _cli(args, capsys):
    from moe_select.cli import main

    rc = main(args)
    return rc, capsys.readouterr().out


def test_engine_config_files_read_yaml_1_1_booleans_as_the_engines_do(tmp_path, capsys):
    """vLLM's ``--config`` and TensorRT-LLM's ``--extra_llm_api_options`` are read by the engines with
    ``yaml.safe_load`` (YAML 1.1: ``yes``/``on`` are true): ``enable_attention_dp: yes`` was refused ('takes true or
    false, got yes') and ``enable-expert-parallel: yes`` in a vLLM config was taken as the model path."""
    trt = tmp_path / "ex.yaml"
    trt.write_text("enable_attention_dp: yes\n")
    rc, out = _cli(["explain", "--gpu", "B200", "--from-command", f"trtllm-serve examples/model_configs/deepseek-ai__DeepSeek-V3 "
                    f"--tp_size 8 --extra_llm_api_options {trt}"], capsys)
    assert rc == 0 and "enable_attention_dp: true: dp_attention" in out, out[:3000]
    v = tmp_path / "v.yaml"
    v.write_text("tensor-parallel-size: 4\nenable-expert-parallel: on\n")
    rc, out = _cli(["explain", "--gpu", "H100", "--from-command", f"vllm serve examples/model_configs/Qwen__Qwen3-30B-A3B "
                    f"--config {v}"], capsys)
    assert rc == 0, out[:2000]
    ep_line = next(ln for ln in out.splitlines() if ln.strip().startswith("ep "))
    assert " 4 " in ep_line, ep_line


def test_a_runner_name_no_closed_engine_option_takes_is_refused_under_that_engine():
    """``--runner tritn --engine sglang`` planned tritn (unverified) while a launch line with the same value is an input
    error: SGLang's runner choices are closed (names.yaml choices). At a declared release the tables read it is now
    refused (engine_unsupported, citing the choices row, with the did-you-mean as fix); a name the engine takes but no
    capability file describes stays unverified, and so does any name where no release is declared."""
    base = dict(arch="sm90", quant="bf16", engine="sglang", engine_version="0.5.12",
                model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu"))
    r = moe_select.explain({**base, "runner": "tritn"})
    assert r.plan is None
    c = next(c for c in r.candidates if c.backend == "tritn")
    reason = next(x for x in c.reasons if x.code == "engine_unsupported")
    assert reason.source.startswith("backends/engines/names.yaml:") and reason.fix == "runner: triton", reason
    r = moe_select.explain({**base, "runner": "megamoe"})          # in SGLang's choices, no capability file here
    assert r.plan is not None and r.plan.runner == "megamoe" and r.plan.evidence == "unverified"
    for engine, version in (("vllm", "0.20.0"), ("trtllm", "1.2.0")):
        r = moe_select.explain({**base, "engine": engine, "engine_version": version, "runner": "tritn"})
        assert r.plan is None, engine
    # no version declared: read at the newest checked, as every version-scoped fact (a sixth trial: exit 0 for a typo
    # only without a version), and the refusal says so; a declared release newer than the tables read may take the
    # name: unverified, and the unknown says that the read releases refuse it
    undeclared = {k: v for k, v in base.items() if k != "engine_version"}
    r = moe_select.explain({**undeclared, "runner": "tritn"})
    assert r.plan is None
    reason = next(x for c in r.candidates if c.backend == "tritn" for x in c.reasons if x.code == "engine_unsupported")
    assert "not given (engine_version)" in reason.detail and reason.fix == "runner: triton"
    r = moe_select.explain({**base, "engine_version": "0.9.0", "runner": "tritn"})
    assert r.plan is not None and r.plan.evidence == "unverified"
    assert any("takes no such value" in x.detail and "did you mean 'triton'" in x.detail for x in r.plan.unknowns)


def test_trtllm_refuses_an_ep_that_does_not_divide_tp():
    """``--emit trtllm`` wrote moe_expert_parallel_size 4 with tensor_parallel_size 2 (moe_tensor_parallel_size 0),
    planned as supported: TensorRT-LLM's Mapping raises unless moe_tp x moe_ep = tp (common.yaml)."""
    base = dict(gpu="H100", quant="bf16", engine="trtllm",
                model=dict(num_experts=128, top_k=8, hidden_size=2048, moe_intermediate_size=768, activation="silu"))
    for tp, ep in ((2, 4), (6, 4)):
        r = moe_select.explain({**base, "tp": tp, "ep": ep})
        assert r.plan is None, (tp, ep)
        assert any(x.code == "parallelism_unsupported" and x.source.startswith("backends/common.yaml:")
                   for c in r.candidates for x in c.reasons), (tp, ep)
    assert moe_select.explain({**base, "tp": 8, "ep": 4}).plan is not None


SGL_OLD = ("python -m sglang.launch_server --model-path examples/model_configs/deepseek-ai__DeepSeek-V3 --tp 8 "
           "--enable-deepep-moe --deepep-mode low_latency --enable-dp-attention --dp 8")


def test_a_flag_known_by_date_is_judged_by_the_release_date():
    """Flags whose change the tables know by a PR's merge date only were judged at every declared version: SGLang 0.4.9
    (released 2025-07-06) was told --enable-deepep-moe was removed (sglang#10770, 2025-09-23) and took
    --moe-a2a-backend (sglang#8658, 2025-08-01) without a word; the DeepEP line then planned pure TP. Now each is judged
    by the release dates (backends/engines/releases.yaml): at 0.4.9 the old switch is read (a2a deepep, ep = tp) and the
    new flag is an engine error; at 0.5.23 the reverse."""
    from moe_select.launch_line import from_command

    old = from_command(SGL_OLD, engine_version="0.4.9")
    assert old.deployment["a2a"] == "deepep" and old.deployment["ep"] == 8, old.deployment
    assert not [f for f in old.findings if f.kind in ("engine_error", "removed")], old.findings
    new = from_command(SGL_OLD.replace("--enable-deepep-moe", "--moe-a2a-backend deepep"), engine_version="0.4.9")
    errs = [f.message for f in new.findings if f.kind == "engine_error"]
    assert any("--moe-a2a-backend" in m or "2025-08-01" in m for m in errs), errs
    # a change known by date only is judged by the release date, and the finding names it (--moe-runner-backend's
    # since is a version; the deprecation of --enable-deepep-moe is pinned too, so use a date-only entry: -pcp has a
    # version now as well; the vLLM variable's deprecation by #26732 is date-only)
    v11 = from_command("VLLM_ALL2ALL_BACKEND=naive vllm serve examples/model_configs/Qwen__Qwen3-30B-A3B -tp 8 "
                       "--enable-expert-parallel", engine_version="0.11.1")
    dep = [f.message for f in v11.findings if f.kind == "deprecated"]
    assert dep and "was released 2025-1" in dep[0] and "judged by the dates" in dep[0], dep
    assert not [f for f in from_command(SGL_OLD.replace("--enable-deepep-moe", "--moe-a2a-backend deepep"),
                                        engine_version="0.4.10.post2").findings if f.kind == "engine_error"]
    late = from_command(SGL_OLD, engine_version="0.5.23")
    assert [f for f in late.findings if f.kind == "engine_error" and "--enable-deepep-moe" in f.token], late.findings


def test_emit_for_an_old_sglang_writes_its_switches_or_refuses():
    """``--emit sglang`` at 0.4.9 wrote --moe-a2a-backend and --moe-runner-backend, which that release lacks (read in
    the PyPI wheels: --moe-a2a-backend from 0.4.10.post2, --moe-runner-backend from 0.5.1): the a2a is written as the
    release's own switch (--enable-deepep-moe), and a runner flag the release lacks is refused (not written)."""
    from moe_select.errors import MoeSelectError
    from moe_select.launch_emit import emit
    from moe_select.launch_line import from_command

    launch = from_command(SGL_OLD, engine_version="0.4.9")
    plan = launch.explain(deployment={"gpu": "H200"}).plan
    assert plan is not None and plan.a2a == "deepep"
    with pytest.raises(MoeSelectError, match=r"--moe-runner-backend was added in .*0\.5\.1.*sglang 0\.4\.9 does not have it"):
        emit(plan, "sglang", engine_version="0.4.9", launch=launch)
    launch = from_command(SGL_OLD, engine_version="0.5.0rc2")
    plan = launch.explain(deployment={"gpu": "H200"}).plan
    with pytest.raises(MoeSelectError, match="--moe-runner-backend"):
        emit(plan, "sglang", engine_version="0.5.0rc2", launch=launch)


def test_vllm_0_11_0_env_variables_are_not_deprecated_there():
    """At vLLM 0.11.0 VLLM_ALL2ALL_BACKEND was the way to choose the all-to-all (deprecated by #26732 after that
    release; --all2all-backend arrived in 0.11.1): no deprecation advising a flag the release lacks."""
    from moe_select.launch_line import from_command

    line = ("VLLM_ALL2ALL_BACKEND=deepep_low_latency vllm serve examples/model_configs/deepseek-ai__DeepSeek-V3 "
            "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel")
    launch = from_command(line, engine_version="0.11.0")
    assert not [f for f in launch.findings if f.kind in ("deprecated", "engine_error")], launch.findings
    assert launch.deployment["a2a"] == "deepep"


def test_deepep_low_latency_limit_is_not_checked_on_the_default_token_budget():
    """The low-latency 1024-token limit refused every runner on this project's default max_tokens_per_rank (8192), not
    on anything the line said; a given chunk (--chunked-prefill-size 16384 over dp 8: 2048 per rank) is still refused."""
    from moe_select.launch_line import from_command

    line = ("python3 -m sglang.launch_server --model-path examples/model_configs/deepseek-ai__DeepSeek-V3 --tp 8 "
            "--moe-a2a-backend deepep --deepep-mode low_latency --enable-dp-attention --dp 8 --cuda-graph-max-bs-decode 128")
    assert from_command(line).explain(deployment={"gpu": "H200"}).plan is not None
    r = from_command(line + " --chunked-prefill-size 16384").explain(deployment={"gpu": "H200"})
    assert r.plan is None


def test_vllm_emit_before_all2all_backend_writes_the_variable():
    """``--emit vllm`` at 0.11.0 refused an expert-parallel plan ('--all2all-backend was added in v0.11.1'): that release
    read the all-to-all from VLLM_ALL2ALL_BACKEND (removed in 0.16.0), which the emitted line now sets."""
    from moe_select.launch_emit import emit
    from moe_select.launch_line import from_command

    line = ("VLLM_ALL2ALL_BACKEND=deepep_low_latency vllm serve examples/model_configs/deepseek-ai__DeepSeek-V3 "
            "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel")
    launch = from_command(line, engine_version="0.11.0")
    report = launch.explain(deployment={"gpu": "H200"})
    plan = report.plan
    # the engine's own pick is what emit is told (launch_cli passes the prediction): vLLM 0.11.0's is not predicted
    # (no oracle read there, the ninth trial), so this test says the engine picks the plan's runner, as it must for a
    # line without a runner option, and looks at the all-to-all only
    choice = next(c for c in report.engine_choices if c.engine == "vllm")
    assert choice.runner is None
    out = emit(plan, "vllm", engine_version="0.11.0", launch=launch, predicted=plan.runner)
    assert out.env.get("VLLM_ALL2ALL_BACKEND") == "deepep_low_latency" and "--all2all-backend" not in out.argv, out
    new = emit(plan, "vllm", engine_version="0.12.0", launch=from_command(line.split(" ", 1)[1], engine_version="0.12.0"),
               predicted=plan.runner)
    assert "--all2all-backend" in new.argv and "VLLM_ALL2ALL_BACKEND" not in new.env, new


def test_trtllm_emit_keeps_the_lines_other_flags_and_refuses_the_tensorrt_backend():
    """``--emit trtllm`` dropped ``--max_batch_size 64`` (read, no plan field) and kept a ``--backend tensorrt`` plan
    whose moe_config that backend does not read: the first is written back as given, the second is an input error."""
    from moe_select.launch_emit import emit
    from moe_select.launch_line import from_command

    launch = from_command("trtllm-serve examples/model_configs/Qwen__Qwen3-30B-A3B --tp_size 2 --max_batch_size 64")
    plan = launch.explain(deployment={"gpu": "H100"}).plan
    out = emit(plan, "trtllm", launch=launch)
    i = out.argv.index("--max_batch_size")
    assert out.argv[i + 1] == "64", out.argv
    with pytest.raises(InputError, match="PyTorch backend"):
        from_command("trtllm-serve examples/model_configs/Qwen__Qwen3-30B-A3B --backend tensorrt --tp_size 2")
    assert from_command("trtllm-serve examples/model_configs/Qwen__Qwen3-30B-A3B --backend pytorch --tp_size 2").deployment["tp"] == 2


def test_tune_check_takes_flags_over_the_recorded_deployment(tmp_path, capsys):
    """``tune --check FILE --max-tokens-per-rank 128`` said 'give model ... or model_config': a flag threw away the
    file's recorded deployment. The README: the file's deployment, flags override it; a flag that changes the layer
    (tp 2) is then refused as another layer (exit 2), not as a missing model."""
    f = tmp_path / "tune.json"
    rc, _ = _cli(["tune", "--model", "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=64,activation=silu,"
                  "routing=renormalize", "--quant", "bf16", "--tokens", "1,16", "--budget-s", "0.05", "-o", str(f)], capsys)
    assert rc == 0 and f.exists()
    rc, out = _cli(["tune", "--check", str(f), "--max-tokens-per-rank", "16"], capsys)
    assert rc in (0, 1) and "drift threshold" in out, out          # 1 would be a drift on a loaded machine
    rc, out = _cli(["tune", "--check", str(f), "--tp", "2"], capsys)
    err = capsys.readouterr().err
    assert rc == 2, (out, err)


def test_docker_e_name_without_a_host_environment_says_it_was_not_read(monkeypatch):
    """``docker run -e VAR`` passes the host's VAR; planning another machine without --shell-env reads no shell, so
    the capacity check said 'not set: default 128' and advised setting the variable the line passes. A note now says
    the value was not given and how to give it."""
    from moe_select.launch_line import from_command

    monkeypatch.setenv("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "64")
    line = ("docker run --gpus all -e SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK lmsysorg/sglang:v0.5.9 python3 -m "
            "sglang.launch_server --model-path examples/model_configs/deepseek-ai__DeepSeek-V3 --tp 8 --moe-a2a-backend deepep")
    launch = from_command(line)                       # no host environment given (the CLI gives it with --shell-env)
    notes = [f.message for f in launch.findings if f.kind == "note" and "SGLANG_DEEPEP_NUM_MAX" in f.token]
    assert notes and "--shell-env" in notes[0], launch.findings
    given = from_command(line, {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "64"})
    assert given.env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "64"


def test_a_plan_mismatch_across_ranks_names_the_deployment_field():
    """Two ranks whose plans differ only in max_tokens_per_rank were told 'fingerprint ... vs ...': the agreement now
    compares the whole deployment as understood, so the line names the field and both values."""
    from moe_select.parallel import compare, plan_fields

    d = dict(arch="cpu", quant="bf16", engine="moe_select", tp=2, ep=2, a2a="torch",
             model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu"))
    a, b = plan_fields(moe_select.plan(d)), plan_fields(moe_select.plan({**d, "max_tokens_per_rank": 64}))
    assert compare([{"rank": 0, "fields": a}, {"rank": 1, "fields": b}]) == ["rank 1: max_tokens_per_rank 64 vs 8192 on rank 0"]
    assert compare([{"rank": 0, "fields": a}, {"rank": 1, "fields": dict(a)}]) == []


def test_check_warns_on_sources_that_cannot_be_checked(monkeypatch):
    """``moe-select check`` passed ``this project: nowhere/nothing.py`` and ``vllm-project/vllm@main:...``: a path this
    checkout lacks and a moving branch are warnings now; this project's real paths and upstream segments of a mixed
    source are not."""
    from moe_select import lint

    monkeypatch.setattr(lint, "iter_sources", lambda catalog: [
        ("a.yaml:1", "this project: nowhere/nothing.py"),
        ("b.yaml:2", "vllm-project/vllm@main:vllm/x.py"),
        ("c.yaml:3", "this project: moe_select/lint.py, tests/test_cli.py; sgl-project/sglang@v0.5.23:python/sglang/x.py"),
        ("d.yaml:4", "this project: backends/torch_native.py; deepseek-ai/DeepGEMM (PyPI wheel, deep_gemm/__init__.py)")])
    got = [(f.where, f.severity) for f in lint._source_findings(None)]
    assert got == [("b.yaml:2", "warning"), ("a.yaml:1", "warning")], got


def test_prepare_weights_names_unknown_arguments_and_checks_float32_scales():
    """``prepare_weights(w13, w2, foo=1)`` said 'foo must be a torch.Tensor'; fp8_block scales in bf16 were converted
    silently and NaN scales accepted: an unknown argument is named as such with what the format takes, a float32 scale
    of another dtype or with NaN/inf is refused."""
    from moe_select.errors import RunnerInputError
    from moe_select.ops import quantize

    dep = dict(arch="cpu", quant="fp8_block", engine="moe_select", runner="torch_native", quant_config={"block": [32, 32]},
               model=dict(num_experts=4, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu"))
    r = moe_select.resolve(moe_select.plan(dep))
    g = torch.Generator().manual_seed(7)
    w13, w2 = torch.randn(4, 64, 64, generator=g), torch.randn(4, 64, 32, generator=g)
    (q13, s13), (q2, s2) = quantize(w13, "fp8_block", block=(32, 32)), quantize(w2, "fp8_block", block=(32, 32))
    with pytest.raises(RunnerInputError, match=r"unknown argument foo; fp8_block takes w13_scale/w2_scale"):
        r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, foo=1)
    with pytest.raises(RunnerInputError, match=r"w13_scale: fp8_block scales must be float32 .*bfloat16"):
        r.prepare_weights(q13, q2, w13_scale=s13.bfloat16(), w2_scale=s2)
    bad = s2.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(RunnerInputError, match="w2_scale holds NaN or infinite values"):
        r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=bad)
    assert r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2) is not None


def test_the_tune_table_names_the_fastest_runner_and_ties():
    """The tune table listed times only: it now ends with the fastest runner per token count and the runners whose
    95 % intervals overlap it (a tie), as explain --measurements judges them."""
    from moe_select.measurements import Measurements
    from moe_select.tune import render_points

    f = sorted((Path(__file__).parent / "fixtures").rglob("*.json"))
    m = None
    for path in f:
        try:
            m = Measurements.model_validate_json(path.read_text())
            break
        except Exception:  # noqa: BLE001 - other fixtures are other JSON
            continue
    if m is None:
        pytest.skip("no measurement fixture")
    text = render_points(m)
    assert "per token count:" in text
    for t, row in m.table().items():
        best = min(row.values(), key=lambda q: q.median_us)
        assert f"{t:>7}  fastest {best.runner}" in text


# ---- a breaker's round on the above (2026-12-04, a helper who did not write them)

M30 = "examples/model_configs/Qwen__Qwen3-30B-A3B"


def test_emitted_list_flags_are_words_and_read_back_the_same():
    """``--cuda-graph-bs 1 2 4 8`` was written back as ``'[1, 2, 4, 8]'`` (JSON), which the engine refuses and the
    reader crashed on; list flags are now written word by word, and a non-integer size is an input error."""
    from moe_select.launch_emit import emit
    from moe_select.launch_line import from_command

    # 0.5.19: the last release whose parser takes --cuda-graph-bs (a deprecated alias of --cuda-graph-bs-decode; gone
    # in 0.5.20, backends/engines/sglang.yaml); the new spelling is a list flag too
    for flag, version in (("--cuda-graph-bs", "0.5.19"), ("--cuda-graph-bs-decode", "0.5.20")):
        line = f"python -m sglang.launch_server --model-path {M30} --tp 2 {flag} 1 2 4 8 --moe-runner-backend triton"
        launch = from_command(line, engine_version=version)
        out = emit(launch.explain(deployment={"gpu": "H200"}).plan, "sglang", engine_version=version, launch=launch)
        i = out.argv.index(flag)
        assert out.argv[i + 1:i + 5] == ["1", "2", "4", "8"], out.argv
        back = from_command(out.script(), engine_version=version)
        assert back.deployment.get("decode_tokens_per_rank") == launch.deployment.get("decode_tokens_per_rank") == 8
        with pytest.raises(InputError, match="capture sizes are integers"):
            from_command(f"python -m sglang.launch_server --model-path {M30} --tp 2 {flag} 1 2 x", engine_version=version)


def test_a_retired_switch_wins_over_the_flag_beside_it():
    """SGLang 0.5.2's ServerArgs.__post_init__ sets moe_a2a_backend from --enable-deepep-moe (and ep_size from
    --enable-ep-moe) after parsing: the switch wins, and the flag it overwrites is reported rewritten."""
    from moe_select.launch_line import from_command

    launch = from_command(f"python -m sglang.launch_server --model-path {M30} --tp 8 --enable-deepep-moe "
                          "--moe-a2a-backend none", engine_version="0.5.2")
    assert launch.deployment["a2a"] == "deepep" and launch.deployment["ep"] == 8
    assert any(f.kind == "rewritten" and "--moe-a2a-backend none" in f.token for f in launch.findings), launch.findings
    ep = from_command(f"python -m sglang.launch_server --model-path {M30} --tp 8 --enable-ep-moe --ep-size 2",
                      engine_version="0.5.2")
    assert ep.deployment["ep"] == 8 and any(f.kind == "rewritten" for f in ep.findings)


@pytest.mark.parametrize("line, version, has_error", [
    # released on #8658's merge day (2025-08-01): read in the wheel, it lacks --moe-a2a-backend (first in 0.4.10.post2)
    (f"python -m sglang.launch_server --model-path {M30} --tp 8 --moe-a2a-backend deepep", "0.4.10.post1", True),
    (f"python -m sglang.launch_server --model-path {M30} --tp 8 --moe-a2a-backend deepep", "0.4.10.post2", False),
    # -pcp: merged 2025-11-14, absent from the 0.11.1 / 0.11.2 sdists (their branches were cut before), in 0.12.0
    (f"vllm serve {M30} -tp 4 -pcp 2 --enable-expert-parallel", "0.11.2", True),
    (f"vllm serve {M30} -tp 4 -pcp 2 --enable-expert-parallel", "0.12.0", False),
    # VLLM_ALL2ALL_BACKEND: first in the 0.9.0 envs.py
    (f"VLLM_ALL2ALL_BACKEND=naive vllm serve {M30} -tp 8 --enable-expert-parallel", "0.8.5", True),
    (f"VLLM_ALL2ALL_BACKEND=naive vllm serve {M30} -tp 8 --enable-expert-parallel", "0.9.0", False)])
def test_release_boundaries_read_in_the_wheels(line, version, has_error):
    """Boundaries a helper read in the PyPI wheels and sdists: pinned as versions where a merge date alone misjudged
    them (a release of the merge day, release branches cut before a merge)."""
    from moe_select.launch_line import from_command

    launch = from_command(line, engine_version=version)
    # a flag the release lacks is an engine error; a variable it does not read is reported newer (and not read)
    errs = [f for f in launch.findings if f.kind in ("engine_error", "newer")]
    assert bool(errs) is has_error, (version, launch.findings)


def test_an_unknown_runner_is_refused_up_to_the_release_the_choices_were_read_at():
    """names.yaml's SGLang choices were read up to 0.5.23 (packages.yaml's facts only to 0.5.19): a declared 0.5.23
    refuses ``tritn``; a release newer than 0.5.23 leaves it unverified."""
    base = dict(gpu="H200", quant="bf16", engine="sglang", runner="tritn",
                model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu"))
    assert moe_select.explain({**base, "engine_version": "0.5.23"}).plan is None
    r = moe_select.explain({**base, "engine_version": "0.5.30"})
    assert r.plan is not None and r.plan.evidence == "unverified"


def test_a_retired_runner_switch_is_read_where_live():
    """``--enable-flashinfer-cutlass-moe`` at SGLang 0.5.2 (still read: ServerArgs.__post_init__ sets the runner from
    it) was dropped with no finding and the plan took the default runner; it is now the runner its table replacement
    names, and from the removal (sglang#10770) an engine error."""
    from moe_select.launch_line import from_command

    line = ("python -m sglang.launch_server --model-path examples/model_configs/nvidia__Qwen3-30B-A3B-NVFP4 --tp 4 "
            "--enable-flashinfer-cutlass-moe --quantization modelopt_fp4")
    old = from_command(line, engine_version="0.5.2")
    assert old.deployment["runner"] == "flashinfer_cutlass", old.deployment
    new = from_command(line, engine_version="0.5.23")
    assert any(f.kind == "engine_error" and "--enable-flashinfer-cutlass-moe" in f.token for f in new.findings)


def test_a_release_of_a_changes_merge_day_is_judged_without_it():
    """Judged by dates, a release published on the day a change merged is taken to lack it (its branch may have been
    cut before: SGLang 0.4.10.post1, 2025-08-01, lacks sglang#8658 of that day); the next day's release has it."""
    from moe_select.engine_tables import Change, FlagEntry, release_date
    from moe_select.launch_line import _changes

    assert release_date("sglang", "0.4.10.post1") == "2025-08-01" < release_date("sglang", "0.4.10.post2")
    entry = FlagEntry(names=["--x"], takes="switch", means="not_moe", checked="test", source="sgl-project/sglang#8658",
                      since=Change(by="sgl-project/sglang#8658", date="2025-08-01"))
    found, live = _changes(entry, "--x", "0.4.10.post1", "sglang")
    assert not live and [f.kind for f in found] == ["newer"], found
    found, live = _changes(entry, "--x", "0.4.10.post2", "sglang")
    assert live and not found, found

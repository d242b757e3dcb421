"""A sixth new user's trial (helper, 2026-12-04; 15 defects reported), fixed as kinds:

1. vLLM runs an unquantized MoE layer only through its unquantized oracle's backends (triton, batched_triton,
   flashinfer_trtllm, flashinfer_cutlass, aiter: map_unquantized_backend raises for any other --moe-backend); cutlass,
   deep_gemm, flashinfer_cutedsl and hpc_ops were planned (unverified) and emitted for bf16 under vLLM.
2. A runner name no engine takes was refused at a declared engine version but planned (unverified, exit 0) when no
   version was given: an undeclared version is now read at the newest checked, as every version-scoped fact is.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import moe_select

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B")


@pytest.mark.parametrize("runner", ["cutlass", "deep_gemm", "flashinfer_cutedsl", "hpc_ops"])
def test_vllm_unquantized_only_through_its_oracle_backends(runner):
    r = moe_select.explain({"gpu": "H100", "model_config": QWEN3, "engine": "vllm", "runner": runner})
    assert r.plan is None
    c = next(c for c in r.candidates if c.backend == runner)
    assert any(x.code == "quant_unsupported" and x.source.startswith(f"backends/{runner}.yaml:")
               and "bf16" in x.detail for x in c.reasons), [(x.code, x.detail, x.source) for x in c.reasons]


@pytest.mark.parametrize("runner", ["triton", "flashinfer_cutlass"])
def test_vllm_unquantized_oracle_backends_still_plan(runner):
    r = moe_select.explain({"gpu": "H100" if runner == "triton" else "B200", "model_config": QWEN3, "engine": "vllm",
                            "runner": runner})
    assert r.plan is not None and r.plan.runner == runner, r.summary()


def test_sglang_unquantized_cutlass_is_not_touched():
    r = moe_select.explain({"gpu": "H100", "model_config": QWEN3, "engine": "sglang", "runner": "cutlass"})
    c = next(c for c in r.candidates if c.backend == "cutlass")
    assert not any("unquantized oracle" in x.detail or "map_unquantized_backend" in x.source for x in c.reasons)


def test_emit_vllm_refuses_a_backend_vllm_rejects_for_bf16():
    out = subprocess.run([sys.executable, "-m", "moe_select", "plan", "--gpu", "H100", "--model-config", QWEN3,
                          "--engine", "vllm", "--runner", "deep_gemm", "--emit", "vllm"], capture_output=True, text=True)
    assert out.returncode == 1 and "--moe-backend deep_gemm" not in out.stdout, (out.stdout, out.stderr)


@pytest.mark.parametrize("version", [None, "0.5.19"])
def test_a_misspelled_runner_is_refused_with_or_without_a_version(version):
    dep = {"gpu": "H100", "model_config": QWEN3, "engine": "sglang", "runner": "tritn"}
    if version:
        dep["engine_version"] = version
    r = moe_select.explain(dep)
    assert r.plan is None
    [c] = [c for c in r.candidates if c.backend == "tritn"]
    hit = [x for x in c.reasons if x.code == "engine_unsupported"]
    assert hit and "did you mean 'triton'?" in hit[0].detail and (hit[0].fix or "").startswith("runner: triton")
    assert ("not given (engine_version)" in hit[0].detail) is (version is None)


@pytest.mark.parametrize("engine, version", [("vllm", "0.16.5"), ("sglang", "0.5.0"), ("trtllm", "1.0.7")])
def test_an_engine_version_that_is_no_release_is_an_input_error(engine, version):
    """releases.yaml lists every PyPI release (read 2026-12-04): a final version below the newest that is not among them
    is a typed error naming the field and the nearest releases."""
    from moe_select.errors import InputError

    with pytest.raises(InputError) as err:
        moe_select.explain({"gpu": "H100", "model_config": QWEN3, "engine": engine, "engine_version": version})
    text = str(err.value)
    assert "engine_version" in text and f"{engine} {version} is not a release" in text and "nearest" in text


@pytest.mark.parametrize("version", ["0.5.5.post1", "0.5.6.dev0", "0.5.19+cu128", "0.5.13rc1"])
def test_releases_and_builds_of_them_pass(version):
    r = moe_select.explain({"gpu": "H100", "model_config": QWEN3, "engine": "sglang", "engine_version": version})
    assert r.plan is not None


def test_a_version_newer_than_every_release_is_noted():
    r = moe_select.explain({"gpu": "H100", "model_config": QWEN3, "engine": "sglang", "engine_version": "0.11.0"})
    assert any("newer than every release" in n and "0.5.23" in n for n in r.deployment.notes)


@pytest.mark.parametrize("twice", [["--gpu", "H200", "--gpu", "B200"], ["--tp", "8", "--tp", "4"],
                                   ["--cuda-graph", "--no-cuda-graph"], ["--strict", "--strict"]])
def test_a_flag_given_twice_is_an_error(twice):
    """As a duplicate key of a deployment file: exit 2 naming both, never the last one silently."""
    args = ["--gpu", "H200"] if twice[0] != "--gpu" else []
    out = subprocess.run([sys.executable, "-m", "moe_select", "explain", *args, "--quant", "bf16", "--model",
                          "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32", *twice],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "given twice" in out.stderr, out.stderr[-300:]


def test_repeatable_flags_stay_repeatable_and_false_says_its_flag():
    out = subprocess.run([sys.executable, "-m", "moe_select", "explain", "--gpu", "H200", "--quant", "bf16", "--model",
                          "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32", "--package", "torch=2.9",
                          "--package", "triton=3.4", "--no-cuda-graph"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-300:]
    assert "command line (--no-cuda-graph)" in out.stdout


@pytest.mark.parametrize("engine, image, version", [
    ("sglang", "lmsysorg/sglang:v0.4.6.post1-cu124", "0.4.6.post1"), ("sglang", "lmsysorg/sglang:v0.5.3rc0-cu126", "0.5.3rc0"),
    ("vllm", "vllm/vllm-openai:v0.11.0", "0.11.0"), ("vllm", "docker.io/vllm/vllm-openai:v0.10.1.1", "0.10.1.1"),
    ("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:1.0.0rc4", "1.0.0rc4"),
    ("sglang", "lmsysorg/sglang:latest", None), ("vllm", "vllm/vllm-openai:nightly", None),
    ("vllm", "myorg/vllm-custom:v0.11.0", None), ("trtllm", "nvcr.io/nvidia/other/release:1.0.0", None),
    ("sglang", "lmsysorg/sglang@sha256:abcd", None)])
def test_the_engine_release_an_image_tag_names(engine, image, version):
    from moe_select.launch_line import image_version

    assert image_version(engine, image) == version


def test_a_docker_line_is_judged_at_its_image_tag_unless_a_version_is_given():
    from moe_select.launch_line import from_command

    line = ("docker run --gpus all lmsysorg/sglang:v0.4.6.post1-cu124 python3 -m sglang.launch_server --model-path M "
            "--tp 8 --enable-deepep-moe --deepep-mode low_latency")
    cfg = str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3")
    launch = from_command(line, model_config=cfg)
    assert launch.engine_version == "0.4.6.post1" and launch.deployment["engine_version"] == "0.4.6.post1"
    assert "image tag" in launch.provenance["engine_version"]
    assert not [f for f in launch.findings if f.kind in ("removed", "engine_error")], [f.render() for f in launch.findings]
    given = from_command(line, model_config=cfg, engine_version="0.5.19")
    assert given.engine_version == "0.5.19"
    assert any("over 0.4.6.post1" in f.message for f in given.findings)


def test_undeclared_arch_activation_routing_are_noted_with_a_did_you_mean():
    r = moe_select.explain({"arch": "sm91", "quant": "bf16", "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64,
                            "moe_intermediate_size": 32, "activation": "sillu", "routing": "renormalise"}})
    notes = " | ".join(r.deployment.notes)
    for what, value, meant in (("arch", "sm91", "sm90"), ("activation", "sillu", "silu"), ("routing", "renormalise", "renormalize")):
        assert f"{what} {value} is declared in no vocabulary" in notes and f"did you mean '{meant}'?" in notes, notes
    plain = moe_select.explain({"arch": "sm90", "quant": "bf16", "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64,
                                "moe_intermediate_size": 32}})
    assert not any("declared in no vocabulary" in n for n in plain.deployment.notes)


def test_emit_vllm_takes_tp_as_vllms_own_beside_dp_when_ep_is_tp_times_dp():
    """explain accepts vLLM tp 2, dp 2, ep 4 (ep = tp x dp: backends/common.yaml one_of [tp, tp_dp]); --emit now writes it
    (--tensor-parallel-size 2 --data-parallel-size 2 --enable-expert-parallel) instead of refusing, with a comment."""
    out = subprocess.run([sys.executable, "-m", "moe_select", "plan", "--gpu", "H100", "--model-config", QWEN3, "--tp", "2",
                          "--ep", "4", "--dp", "2", "--engine", "vllm", "--emit", "vllm"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-400:]
    assert "--tensor-parallel-size 2" in out.stdout and "--data-parallel-size 2" in out.stdout
    assert "--enable-expert-parallel" in out.stdout and "read as vLLM's tensor-parallel size" in out.stdout
    whole = subprocess.run([sys.executable, "-m", "moe_select", "plan", "--gpu", "H100", "--model-config", QWEN3, "--tp", "4",
                            "--ep", "4", "--dp", "2", "--engine", "vllm", "--emit", "vllm"], capture_output=True, text=True)
    assert whole.returncode == 0 and "--tensor-parallel-size 2" in whole.stdout, whole.stderr[-400:]


def test_emit_keeps_the_values_docker_run_passes_and_says_the_wrapper_is_not_written(tmp_path):
    line = tmp_path / "l.sh"
    line.write_text("export VLLM_USE_DEEP_GEMM=0\ndocker run --gpus all -e VLLM_USE_DEEP_GEMM -e HF_TOKEN=xxx "
                    "vllm/vllm-openai:latest --model Qwen/Qwen3-30B-A3B --tensor-parallel-size 4 --enable-expert-parallel\n")
    out = subprocess.run([sys.executable, "-m", "moe_select", "plan", "--gpu", "H100", "--from-command", f"@{line}",
                          "--model-config", QWEN3, "--emit", "vllm"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-400:]
    assert "VLLM_USE_DEEP_GEMM=0" in out.stdout and "HF_TOKEN=xxx" in out.stdout
    assert "docker run wrapper" in out.stdout


@pytest.mark.parametrize("quant, meant", [("bf61", "bf16"), ("int4_awq", "int4_w4a16")])
def test_a_quant_typo_on_an_unquantized_checkpoint_is_an_input_error(quant, meant):
    from moe_select.errors import InputError

    with pytest.raises(InputError) as err:
        moe_select.explain({"gpu": "H100", "model_config": QWEN3, "quant": quant})
    assert f"did you mean '{meant}'?" in str(err.value) and "quant" in str(err.value)


def test_a_new_format_name_far_from_every_format_is_still_judged():
    r = moe_select.explain({"gpu": "H100", "model_config": QWEN3, "quant": "newfmt_xyz"})
    assert r.plan is not None and r.plan.evidence == "unverified"


def test_refusal_line_leads_with_the_code_that_refuses_most_candidates():
    r = moe_select.explain({"gpu": "H100", "model_config": str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8"),
                            "tp": 8, "engine": "sglang"})     # vLLM from 0.29.0 runs it (test_trial_2026_12_05b_kinds.py)
    assert r.plan is None
    line = r.summary()
    assert line.split("rejected (", 1)[1].startswith("shape_unaligned"), line


def test_triton_on_the_cpu_is_an_arch_refusal():
    r = moe_select.explain({"arch": "cpu", "model_config": QWEN3, "engine": "moe_select", "runner": "triton"})
    assert any(x.code == "arch_unsupported" and x.source.startswith("backends/triton.yaml:")
               for c in r.candidates if c.backend == "triton" for x in c.reasons)


def test_an_sgl_variable_is_read_as_its_sglang_name():
    """SGLang's environ renames SGL_ variables to SGLANG_ at import (0.5.4 on); 0.4.10 .. 0.5.3 read
    SGL_ENABLE_JIT_DEEPGEMM by that name: not a typo of SGLANG_ENABLE_JIT_DEEPGEMM."""
    from moe_select.launch_line import from_command

    launch = from_command("SGL_ENABLE_JIT_DEEPGEMM=0 python3 -m sglang.launch_server --model-path M --tp 8",
                          engine_version="0.4.10", model_config=str(ROOT / "examples" / "model_configs" / "deepseek-ai__DeepSeek-V3"))
    assert not [f for f in launch.findings if f.kind == "unknown"], [f.render() for f in launch.findings]
    assert any(f.kind == "note" and "read as SGLANG_ENABLE_JIT_DEEPGEMM" in f.message for f in launch.findings)
    assert any(r.entry.name == "SGLANG_ENABLE_JIT_DEEPGEMM" for r in launch.values.values())


def test_trtllm_moe_config_backend_is_every_layer_kinds(tmp_path):
    """TensorRT-LLM's moe_config.backend is model-wide (get_moe_cls reads the one model config for every MoE layer): the
    MTP layer takes the launch line's backend, not auto."""
    extra = tmp_path / "extra.yaml"
    extra.write_text("moe_config:\n  backend: TRTLLM\nspeculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: 1\n")
    from moe_select.launch_line import from_command

    launch = from_command(f"trtllm-serve nvidia/DeepSeek-V3.1-NVFP4 --tp_size 8 --extra_llm_api_options {extra}",
                          model_config=str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4"))
    r = launch.explain(deployment={"gpu": "B200"})
    assert r.plan is not None and r.plan.runner == "trtllm_gen"
    mtp = [sub for sub in r.layers if sub.deployment.layer_kind == "mtp"]
    assert mtp and mtp[0].plan is not None and mtp[0].plan.runner == "trtllm_gen", [s.summary() for s in mtp]
    sglang = moe_select.explain({"gpu": "B200", "engine": "sglang", "runner": "flashinfer_trtllm",
                                 "model_config": str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4")})
    # SGLang's draft takes the target's resolved runner too (layers/moe/utils.py initialize_moe_config; field round 41)
    assert all(sub.deployment.runner == "flashinfer_trtllm" for sub in sglang.layers if sub.deployment.layer_kind == "mtp")
    auto = moe_select.explain({"gpu": "B200", "engine": "sglang",
                               "model_config": str(ROOT / "examples" / "model_configs" / "nvidia__DeepSeek-V3.1-NVFP4")})
    assert all(sub.deployment.runner == "auto" for sub in auto.layers if sub.deployment.layer_kind == "mtp")

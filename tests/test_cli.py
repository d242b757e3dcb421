"""The command line: exit codes, text and JSON reports, plan files, run, schemas."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moe_select.cli import main

from conftest import CONFIGS


def test_explain_text_says_why(capsys):
    # vLLM 0.28.0 declared: from 0.29.0 vLLM refines the split block scales and runs the Triton experts (common.yaml)
    rc = main(["explain", "--gpu", "H100", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "--tp", "8",
               "--package", "vllm=0.28.0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "intermediate_per_rank = 96" in out
    # the engines' own fixes, each labeled: ep 4 at tp 8 is no vLLM configuration (vLLM spans EP over TP x DP)
    assert "(sglang only) [backends/common.yaml:" in out and "Fix: ep in {4, 8} (tp 8), or tp in {1, 2} (ep 1); trtllm also: tp in {3, 6} (ep 1)." in out
    assert "(vllm only) [backends/common.yaml:" in out and "Fix: set ep: 8 (tp 8), or tp in {1, 2} (ep 1)." in out
    assert "config.json:9 (num_experts)" in out and "moe-select: refused" in out


def test_explain_ok_names_rule_and_alternatives(capsys):
    rc = main(["explain", "--gpu", "H100", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "--tp", "8", "--ep", "8"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Plan: triton  chosen by rule hopper-fp8-block (rules/10-nvidia.yaml:" in out
    assert "other eligible: deep_gemm" in out and "triton assumed installed" in out
    # with a DeepEP-class all-to-all, DeepGEMM first (SGLang's Fp8MoEMethod auto choice)
    rc = main(["explain", "--gpu", "H100", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "--tp", "8", "--ep", "8",
               "--a2a", "deepep", "--engine", "sglang", "--a2a-mode", "low_latency", "--phase", "decode"])
    out = capsys.readouterr().out
    assert rc == 0 and "Plan: deep_gemm  chosen by rule hopper-fp8-block-ep-a2a" in out and "sgl-deep-gemm assumed installed" in out


def test_explain_brief_is_the_summary_line_alone(capsys):
    """``explain --brief``: one line, the plan's runner and rule (or the refusal and its codes), the exit code as the
    full report's; refused together with --json."""
    cfg = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
    rc = main(["explain", "--brief", "--gpu", "H100", "--model-config", cfg, "--tp", "8", "--ep", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("\n") == 1
    assert out.startswith("moe-select: using triton (rule hopper-fp8-block at rules/10-nvidia.yaml:") and "other eligible: " in out
    rc = main(["explain", "--brief", "--gpu", "H100", "--model-config", cfg, "--tp", "8", "--engine", "sglang"])
    out = capsys.readouterr().out
    assert rc == 1 and out.count("\n") == 1 and out.startswith("moe-select: refused ") and "Fix:" not in out
    with pytest.raises(SystemExit):
        main(["explain", "--brief", "--json", "--gpu", "H100", "--model-config", cfg])
    assert "not allowed with argument" in capsys.readouterr().err


def test_explain_json_shape(capsys):
    rc = main(["explain", "--gpu", "B200", "--quant", "nvfp4", "--model",
               "num_experts=256,top_k=8,hidden_size=7168,moe_intermediate_size=2048,routing=deepseek_v3", "--tp", "8", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "ok" and out["plan"]["runner"] == "flashinfer_trtllm"
    d = out["deployment"]
    for key in ("arch", "quant", "tp", "ep", "a2a", "runner", "num_experts", "top_k", "hidden_size",
                "moe_intermediate_size", "activation", "routing"):
        assert key in d
    assert d["arch"] == "sm100" and d["routing"] == "deepseek_v3"
    for c in out["candidates"]:
        assert set(c) >= {"backend", "eligible", "reasons"}
        for r in c["reasons"]:
            assert set(r) >= {"code", "detail", "source", "fix"}


def test_invalid_input_exit_2(capsys, tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("gpu: H200\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\ntp: 0\n")
    assert main(["explain", "-d", str(f)]) == 2
    assert f"{f}:4: tp:" in capsys.readouterr().err
    assert main(["explain"]) == 2


def test_flags_override_file(capsys, tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("gpu: H200\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n")
    rc = main(["explain", "-d", str(f), "--runner", "triton", "--package", "triton=none", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out["deployment"]["runner"] == "triton"
    assert [r["code"] for r in out["reasons"]] == ["dependency_missing"]


def test_plan_refusal_goes_to_stderr(capsys, tmp_path):
    rc = main(["plan", "--gpu", "H200", "--quant", "bf16", "--model", "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32",
               "--runner", "flashinfer_trtllm", "-o", str(tmp_path / "p.json")])
    cap = capsys.readouterr()
    assert rc == 1 and "arch_unsupported" in cap.err and not (tmp_path / "p.json").exists()


def test_schemas_in_sync(capsys):
    from moe_select.schema_gen import text_differs

    if text_differs():  # CI's lowest-supported-versions step: this pydantic writes other JSON text
        assert main(["schemas"]) == 1 and "can neither check nor rewrite them" in capsys.readouterr().err
        return
    assert main(["schemas"]) == 0


def test_run_bundled_config_small(capsys):
    rc = main(["run", "--model-config", str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--tokens", "8",
               "--device", "cpu", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "using torch_native" in out and "E=40 K=8 H=1536 I=512" in out
    assert "max relative error vs float64 reference" in out and "OK" in out


def test_run_real_fp8_block_checkpoint(capsys):
    rc = main(["run", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "--tokens", "4", "--device", "cpu", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "fp8_block" in out and "E=128 K=8 H=2048 I=768" in out and "OK" in out


def test_run_online_fp8_channel(capsys):
    rc = main(["run", "--model-config", str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--quant", "fp8_channel",
               "--tokens", "4", "--device", "cpu", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "fp8_channel" in out and "OK" in out


def test_online_quantization_only_to_fp8_rowwise(capsys):
    """A bf16 checkpoint run in int8_w8a8, a format no engine makes at load (no online column): refused, naming the
    formats some engine makes (corrected, issue 21: nvfp4, which SGLang makes at load from 0.5.18 with
    --quantization modelopt_fp4, was the refused example and fp8_block, mxfp8, mxfp4 were missing)."""
    rc = main(["run", "--model-config", str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--quant", "int8_w8a8",
               "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "engines quantize online only to fp8_tensor, fp8_channel, fp8_block, mxfp8, nvfp4, mxfp4" in err, err


def test_run_refuses_a_format_no_local_runner_has(capsys):
    rc = main(["run", "--model-config", str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4"), "--tokens", "4", "--device", "cpu",
               "--runner", "flashinfer_trtllm"])
    out = capsys.readouterr().out
    assert rc == 1 and "arch_unsupported" in out and "no_adapter" in out


def test_run_refuses_what_does_not_fit_in_memory(capsys, monkeypatch):
    import moe_select.harness.run as runmod

    monkeypatch.setattr(runmod, "available_host_bytes", lambda: 16 << 30)  # the same answer on every machine
    rc = main(["run", "--model-config", str(CONFIGS / "deepseek-ai__DeepSeek-V3"), "--quant", "fp8_block", "--tokens", "4", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and "the weights alone do not fit, whatever --tokens" in err and "16.0 GiB is available" in err
    assert "use --tokens" not in err  # splitting or fewer tokens would not help: no such advice
    rc = main(["run", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "--tokens", "1000000", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and "temporaries for 1000000 tokens" in err
    fit = int(err.split("use --tokens ")[1].split()[0])
    assert 10_000 < fit < 1_000_000


def test_advised_token_count_fits_and_is_the_largest(monkeypatch):
    """The --tokens N that a memory refusal advises must itself fit, and N + 1 must not (found missing by an
    independent planted-bug check: advice that left out the weights' bytes passed the range check above)."""
    import moe_select.harness.run as runmod
    from moe_select.layer import LayerSpec

    spec = LayerSpec(num_experts=128, top_k=8, hidden_size=2048, intermediate_size=768, quant="bf16")  # ~1.1 GiB of weights
    monkeypatch.setattr(runmod, "available_host_bytes", lambda: 2 << 30)
    why = runmod.memory_refusal(spec, "bf16", 1_000_000, "cpu")
    assert why is not None and "use --tokens" in why
    fit = int(why.split("use --tokens ")[1].split()[0])
    assert runmod.memory_refusal(spec, "bf16", fit, "cpu") is None, f"--tokens {fit} was advised but is refused"
    assert runmod.memory_refusal(spec, "bf16", fit + 1, "cpu") is not None


def test_memory_refusal_on_a_gpu_counts_device_memory(monkeypatch):
    import moe_select.harness.run as runmod
    from moe_select.layer import LayerSpec

    spec = LayerSpec(num_experts=256, top_k=8, hidden_size=7168, intermediate_size=2048, quant="fp8_block")
    monkeypatch.setattr(runmod, "available_host_bytes", lambda: 64 << 30)
    monkeypatch.setattr(runmod, "device_free_bytes", lambda device: 139 << 30)   # an H200
    assert runmod.memory_refusal(spec, "fp8_block", 256, "cuda") is None
    monkeypatch.setattr(runmod, "device_free_bytes", lambda device: 24 << 30)    # a smaller GPU
    why = runmod.memory_refusal(spec, "fp8_block", 256, "cuda")
    assert "24.0 GiB is free on the GPU" in why and "weights alone do not fit" in why
    assert "of which run plans on 80% (19.2 GiB" in why       # the headroom said (a new user's trial: 22.0 vs 22.7 GiB)
    monkeypatch.setattr(runmod, "device_free_bytes", lambda device: 139 << 30)
    why = runmod.memory_refusal(spec, "fp8_block", 2_000_000, "cuda")
    assert "use --tokens" in why


def test_python_dash_m_and_console_script():
    p = subprocess.run([sys.executable, "-m", "moe_select", "check"], capture_output=True, text=True)
    assert p.returncode == 0 and "0 error(s), 0 warning(s)" in p.stdout


def test_run_argument_errors_exit_2(capsys):
    cfg = str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct")
    with pytest.raises(SystemExit) as exc:
        main(["run", "--model-config", cfg, "--tokens", "0"])
    assert exc.value.code == 2
    assert main(["run", "--model-config", cfg, "--nproc", "3", "--tp", "2"]) == 2
    assert main(["run", "--model-config", cfg, "--device", "cuda"]) == (2 if not __import__("torch").cuda.is_available() else 0)


def test_run_nproc_text(capsys):
    rc = main(["run", "--model-config", str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--nproc", "2", "--ep", "2",
               "--a2a", "torch", "--tokens", "4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 processes (gloo), tp 2, ep 2, a2a torch" in out and "OK" in out


def test_package_flag_needs_a_version_or_none(capsys):
    model = "num_experts=8,top_k=2,hidden_size=128,moe_intermediate_size=128"
    assert main(["explain", "--gpu", "H200", "--quant", "bf16", "--model", model, "--package", "deep_gemm="]) == 2
    assert "NAME=none for not installed" in capsys.readouterr().err
    # In SGLang (whose fork is imported as deep_gemm) the package is then missing; for the other engines bf16
    # DeepGEMM is unverified since issue 18, so engine any plans it (exit 0).
    assert main(["explain", "--gpu", "H200", "--quant", "bf16", "--model", model, "--package", "deep_gemm=none",
                 "--runner", "deep_gemm", "--engine", "sglang", "--json"]) == 1
    assert '"dependency_missing"' in capsys.readouterr().out


def test_matrix_is_committed_and_in_sync(capsys):
    """docs/matrix.md and docs/matrix.json are generated from the capability files (moe-select matrix --write)."""
    from conftest import ROOT

    assert main(["matrix", "--check", "--root", str(ROOT)]) == 0, capsys.readouterr().out
    assert main(["matrix"]) == 0
    md = capsys.readouterr().out
    assert "## torch_native" in md and "| cpu | bf16 |" in md and "## All-to-all backends" in md
    assert main(["matrix", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cell = next(c for r in data["runners"] if r["runner"] == "torch_native" for c in r["cells"] if c["arch"] == "cpu" and c["quant"] == "bf16")
    assert cell["source"] and cell["engines"]


def test_matrix_check_finds_drift(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "matrix.md").write_text("stale\n")
    (tmp_path / "README.md").write_text("# a checkout\n")
    assert main(["matrix", "--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "docs/matrix.md differs" in out and "docs/matrix.json: not found under" in out   # a missing file is said so


def test_matrix_write_and_check_outside_the_repository_are_refused(tmp_path, capsys):
    """A fourth new user's trial ran matrix --check in another folder: told to --write, which created docs/ there, and
    --check failed again on the README it does not write (a loop). Without a README.md at --root both are refused."""
    for flag in ("--check", "--write"):
        assert main(["matrix", flag, "--root", str(tmp_path)]) == 2
        assert "is not the repository's root (no README.md there)" in capsys.readouterr().err
    assert not (tmp_path / "docs").exists()


def test_the_readme_explain_excerpt_is_what_explain_prints(capsys):
    """The README quotes a refusal with its file:line: the command it shows must still print those reasons
    at those lines (a break-it session found the quoted line number stale)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("$ moe-select explain --gpu H100 --model-config examples/model_configs/Qwen__Qwen3-30B-A3B-FP8 --tp 8 --engine sglang\n", 1)[1]
    block = block.split("```", 1)[0]
    quoted = re.findall(r"\[(backends/[\w./-]+:\d+)\]", block)
    assert quoted, block
    main(["explain", "--gpu", "H100", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8"), "--tp", "8", "--engine", "sglang"])
    out = capsys.readouterr().out
    printed = re.findall(r"\[(backends/[\w./-]+:\d+)\]", out)
    for where in quoted:
        assert where in printed, f"README quotes {where}; explain prints {printed}"
    fix = re.search(r"Fix: (.+)", block).group(1).strip()
    assert f"Fix: {fix}" in out


def test_flags_that_would_be_ignored_are_refused(capsys):
    """run --json without --nproc was silently ignored; matrix --write --check wrote the files (break-it session)."""
    assert main(["run", "--model-config", str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "--json"]) == 2
    assert "--json prints the result of a --nproc run" in capsys.readouterr().err
    assert main(["matrix", "--write", "--check"]) == 2
    assert "--write and --check exclude each other" in capsys.readouterr().err


def test_every_seed_the_cli_accepts_runs(capsys):
    """--seed takes (-2**62, 2**62); a seed above about 1.8e10 overflowed torch's generator seed in the weight
    draw (a traceback, break-it session)."""
    from moe_select.harness.weights import seed64

    for s in (2**62 - 1, -(2**62) + 1, 20_000_000_000_000):
        assert -(1 << 63) <= seed64((s * 1_000_003 + 255) * 1_009 + 7) < (1 << 63)
    assert seed64(12345) == 12345 and seed64(-5) == -5  # seeds that fit are unchanged (the same weights as before)
    rc = main(["run", "--model-config", str(CONFIGS / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--tokens", "2",
               "--seed", str(2**62 - 1), "--device", "cpu", "--repeat", "1"])
    assert rc == 0, capsys.readouterr().err


def _tiny_gpt_oss(tmp_path):
    """A gpt-oss config (model_type gpt_oss: swiglu_oai, limit 7, expert biases) at a tiny shape, bf16."""
    import json

    d = tmp_path / "tiny-gpt-oss"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
        "num_local_experts": 8, "num_experts_per_tok": 2, "swiglu_limit": 7.0, "torch_dtype": "bfloat16"}))
    return str(d)


def test_run_gpt_oss_with_expert_biases(capsys, tmp_path):
    """gpt-oss runs with its expert biases (torch_native on the CPU), checked against the float64 reference
    that adds the same biases (moe_select.harness.weights)."""
    rc = main(["run", "--model-config", _tiny_gpt_oss(tmp_path), "--tokens", "6", "--device", "cpu", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "using torch_native" in out and "swiglu_oai" in out and "+ expert biases" in out and "OK" in out


def test_run_nproc_gpt_oss_tp_split_biases(capsys, tmp_path):
    """tp 2: each expert's intermediate split over two ranks; ``w2_bias`` is carried by slice 0 only, so the
    all-reduced output adds it once (the reference's bias is the sum over slices)."""
    import torch

    from moe_select.harness.weights import expert_bias

    model = {"hidden_size": 64, "moe_intermediate_size": 32, "activation": "swiglu_oai"}
    b13_0, b2_0 = expert_bias(model, 2, 0, 3, 0)
    b13_1, b2_1 = expert_bias(model, 2, 0, 3, 1)
    assert b13_0.shape == (1, 32) and b2_0.abs().max() > 0 and (b2_1 == 0).all() and not torch.equal(b13_0, b13_1)
    rc = main(["run", "--model-config", _tiny_gpt_oss(tmp_path), "--nproc", "2", "--tp", "2", "--tokens", "4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 processes (gloo), tp 2, ep 1" in out and "OK" in out

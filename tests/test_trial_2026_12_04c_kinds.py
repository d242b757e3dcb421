"""A seventh new user's trial (helper, 2026-12-04; 12 defects reported), fixed as kinds (the tile-file key check is in
tests/test_triton_moe.py, TensorRT-LLM YAML lines and retired runner names in tests/test_launch_line.py):

1. ``--emit`` dropped the line's ``--quantization`` (for AWQ it picks the MoE method: awq, awq_marlin, moe_wna16).
2. ``--emit vllm`` wrote ``--enforce-eager`` for a CUDA-graph default that SGLang's DeepEP normal-mode fact gave: a
   default is the engine's own behaviour there, so no switch is written (a comment says why); one the deployment or
   the line asked for still is.
3. An unverified plan's script said nothing of it (the warning went to stderr only).
4. ``--vendor-library false`` was answered with an error about --from-command.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import moe_select
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"


def _emit_from(line: str, engine: str, gpu: str = "H200"):
    launch = from_command(line)
    report = launch.explain(deployment={"gpu": gpu})
    assert report.plan is not None, report.summary()
    return emit(report.plan, engine, launch=launch), report.plan


@pytest.mark.parametrize("line, engine, flag", [
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-AWQ --quantization moe_wna16 --max-model-len 32768", "vllm", "--quantization"),
    (f"python3 -m sglang.launch_server --model-path {CONFIGS}/Qwen__Qwen3-30B-A3B-AWQ --quantization awq_marlin --tp 1",
     "sglang", "--quantization")])
def test_emit_keeps_the_quantization_method_as_written(line, engine, flag):
    out, _ = _emit_from(line, engine)
    value = line.split(flag + " ", 1)[1].split()[0]
    i = out.argv.index(flag)
    assert out.argv[i + 1] == value, out.argv
    assert any(f"{flag} {value} kept" in c for c in out.comments), out.comments


def test_a_defaulted_cuda_graph_off_writes_no_switch_an_asked_one_does():
    line = (f"vllm serve {CONFIGS}/deepseek-ai__DeepSeek-V3 --tensor-parallel-size 1 --data-parallel-size 8 "
            f"--enable-expert-parallel --all2all-backend deepep_high_throughput")
    out, plan = _emit_from(line, "vllm")
    assert not plan.cuda_graph and "--enforce-eager" not in out.argv, out.argv
    assert any("no switch written" in c for c in out.comments), out.comments
    out, plan = _emit_from(line + " --enforce-eager", "vllm")
    assert not plan.cuda_graph and "--enforce-eager" in out.argv, out.argv
    r = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"),
                            "tp": 2, "cuda_graph": False})
    assert "--disable-cuda-graph" in emit(r.plan, "sglang").argv


def test_an_unverified_plan_says_so_in_its_script():
    # SGLang 0.5.18: from 0.5.19 its ModelOpt NVFP4 method is read to build no runner DeepEP takes here (refused)
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": "0.5.18",
                            "model_config": str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4"), "tp": 8, "ep": 8, "a2a": "deepep"})
    assert r.plan is not None and r.plan.evidence == "unverified", r.summary()
    script = emit(r.plan, "sglang").script()
    assert "# UNVERIFIED: no fact says this runs" in script
    assert all(f"#   - {u.detail}" in script for u in r.plan.unknowns), script
    ok = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "tp": 2})
    assert ok.plan.evidence == "supported" and "UNVERIFIED" not in emit(ok.plan, "sglang").script()


def test_a_value_after_a_switch_is_named_with_the_switch():
    r = subprocess.run([sys.executable, "-m", "moe_select", "explain", "--gpu", "MI300X", "--model-config",
                        str(CONFIGS / "deepseek-ai__DeepSeek-R1"), "--engine", "vllm", "--tp", "8", "--vendor-library",
                        "false"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "--no-vendor-library" in r.stderr and "from-command" not in r.stderr, r.stderr


def test_low_latency_only_tokens_left_at_the_default_are_not_decided():
    """DeepEP low-latency as the only mode, max_tokens_per_rank left at this project's default: the fact that caps the
    tokens a rank sends in that mode is not decided (unverified, the unknown naming max_tokens_per_rank), where it was
    silently unchecked (supported) though the same number typed is refused; strict refuses."""
    dep = {"gpu": "H200", "model_config": str(CONFIGS / "deepseek-ai__DeepSeek-V3"), "engine": "sglang", "tp": 16, "ep": 16,
           "a2a": "deepep", "a2a_mode": "low_latency"}
    r = moe_select.explain(dep)
    assert r.plan is not None and r.plan.evidence == "unverified", r.summary()
    assert any("low_latency_tokens_per_rank" in u.detail and "max_tokens_per_rank" in u.settle for u in r.plan.unknowns)
    assert moe_select.explain({**dep, "strict": True}).plan is None
    assert moe_select.explain({**dep, "max_tokens_per_rank": 8192}).plan is None
    ok = moe_select.explain({**dep, "max_tokens_per_rank": 128})
    assert ok.plan is not None and ok.plan.evidence == "supported", ok.summary()
    normal = moe_select.explain({**dep, "a2a_mode": "normal"})
    assert normal.plan is not None and normal.plan.evidence == "supported", normal.summary()


def test_check_lints_an_operator_capability_folder_whole(tmp_path):
    """``moe-select check DIR`` on a folder of runner files (or ``--backends DIR``) lints it with the bundled files, as
    ``explain --backends`` reads it: a fact without a checkable source is an error (exit 1), where the folder was
    skipped (0 errors, the runner not counted)."""
    src = (ROOT / "backends" / "humming.yaml").read_text()
    (tmp_path / "lintrunner.yaml").write_text(
        src.replace("runner: humming", "runner: lintrunner").replace('source: "vllm-project', 'source: "trust me vllm-project', 1))
    for argv in ([str(tmp_path)], ["--backends", str(tmp_path)]):
        r = subprocess.run([sys.executable, "-m", "moe_select", "check", *argv], capture_output=True, text=True)
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr
        assert "lintrunner.yaml:" in r.stdout and "trust me" in r.stdout, r.stdout[-2000:]
        assert "and 32 runner" in r.stdout, r.stdout.splitlines()[-1]


def test_a_version_fix_beyond_the_checked_release_says_so():
    """A package version that is assumed (not declared) is said to be assumed, not 'is'; a ``pip install`` fix whose
    versions all lie beyond the newest release the facts were checked at says that no fact was checked there."""
    r = moe_select.explain({"gpu": "H200", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "engine": "vllm", "tp": 8,
                            "ep": 4})
    c = next(c for c in r.candidates if c.backend == "trtllm_triton")
    gate = [x for x in c.reasons if x.code == "activation_unsupported"]
    assert gate and "tensorrt-llm assumed" in gate[0].detail and "tensorrt-llm is " not in gate[0].detail, gate
    assert "the newest tensorrt-llm the facts were checked at" in (gate[0].fix or ""), gate[0].fix


def test_run_nproc_prints_half_open_shards():
    """``run --nproc``'s table writes each rank's experts, intermediate rows and tokens as the half-open ranges they are."""
    from moe_select.cli import _render_distributed

    rank = {"rank": 0, "ep_rank": 0, "tp_rank": 0, "experts": [0, 20], "intermediate": [0, 768], "token_range": [0, 8],
            "resolve_s": 0.1, "build_s": 0.2, "forward_s": 0.003}
    text = _render_distributed({"nproc": 2, "tp": 2, "ep": 2, "a2a": "torch", "token_layout": "replicated", "tokens": 16,
                                "dtype": "bfloat16", "ranks": [rank], "max_rel_error": 1e-3, "tolerance": 0.01, "ok": True,
                                "wall_s": 1.0})
    assert "[0, 20)" in text and "[0, 768)" in text and "[0, 8)" in text and "[0, 20]" not in text, text


@pytest.mark.parametrize("line, bad", [
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-FP8 --quantization awq", True),
    (f"python -m sglang.launch_server --model-path {CONFIGS}/Qwen__Qwen3-30B-A3B-FP8 --quantization awq", True),
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-AWQ --quantization gptq", True),
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-AWQ --quantization awq_marlin", False),
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-AWQ --quantization moe_wna16", False),
    (f"vllm serve {CONFIGS}/Qwen__Qwen3-30B-A3B-FP8 --quantization fp8", False)])
def test_a_quantization_method_of_another_family_is_an_engine_error(line, bad):
    """A --quantization naming another family's method than the checkpoint's (an FP8 checkpoint with awq, an AWQ one
    with gptq) is refused by the engine at startup ('does not match'): an engine error (exit 1), and --emit leaves the
    flag out; a method of the checkpoint's own family (awq_marlin, moe_wna16 on AWQ; fp8 on FP8) is not."""
    launch = from_command(line)
    errs = [f for f in launch.findings if f.kind == "engine_error" and f.token.startswith("--quantization")]
    assert bool(errs) == bad, [(f.kind, f.token, f.message) for f in launch.findings]
    if bad:
        assert "does not match" in errs[0].message and "_verify_quantization" in errs[0].source
        report = launch.explain(deployment={"gpu": "H200"})
        out = emit(report.plan, launch.engine, launch=launch)
        assert "--quantization" not in out.argv, out.argv

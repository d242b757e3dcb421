"""Field round 58 (LoRA on the MoE layers) fixed as a kind: the deployment key ``lora`` (vLLM's ``--enable-lora``,
SGLang's ``--enable-lora`` / ``--lora-paths``), and vLLM's MoE LoRA facts in backends/common.yaml: expert parallelism
refused in 0.11.1 .. 0.20.x (FusedMoEWithLoRA's assert, vllm-project/vllm#38021), allowed from 0.21.0 over
allgather_reducescatter only (_ep_check), and 0.11.1 .. 0.12.x's align kernel bounded by the GPU's opt-in shared memory
per block: at most 203 local experts on sm80, 158 on sm86 / sm89, 240 on sm90 (vllm-project/vllm#30026)."""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.launch_line import from_command
from report_helpers import report_codes

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B")


def _align_bytes(e: int) -> int:
    """The MoE LoRA align kernel's shared memory for ``e`` local experts (csrc/moe/moe_lora_align_sum_kernels.cu)."""
    return (max(e, 128) + 1) * e * 4 + (e + 1) * 4


@pytest.mark.parametrize("limit, most", [(163 * 1024, 203), (99 * 1024, 158), (227 * 1024, 240)])
def test_the_expert_bounds_are_the_kernels_formula_at_each_opt_in_limit(limit, most):
    # the facts' max per arch: the largest count whose bytes fit, the next one does not
    assert _align_bytes(most) <= limit < _align_bytes(most + 1)


def _dep(gpu: str, experts: int, version: str, lora: bool = True, **kw):
    return {"gpu": gpu, "engine": "vllm", "engine_version": version, "quant": "bf16",
            "model": {"num_experts": experts, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 512,
                      "activation": "silu", "routing": "renormalize", "architecture": "Qwen3MoeForCausalLM"},
            "tp": kw.pop("tp", 8), "ep": kw.pop("ep", 1), "runner": "auto", "cuda_graph": True, "lora": lora, **kw}


def _lora_refusals(report) -> list[str]:
    return [x.detail for x in report.reasons if "LoRA" in x.detail and x.code == "parallelism_unsupported"]


@pytest.mark.parametrize("gpu, fits, overflows", [("H100", 240, 256), ("A100", 192, 256), ("L40S", 128, 160)])
def test_vllm_0_12_refuses_more_local_experts_than_the_align_kernel_holds(gpu, fits, overflows):
    ok = moe_select.explain(_dep(gpu, fits, "0.12.0"))
    assert ok.plan is not None and not _lora_refusals(ok), report_codes(ok)
    bad = moe_select.explain(_dep(gpu, overflows, "0.12.0"))
    assert bad.plan is None and _lora_refusals(bad), report_codes(bad)
    # the rewritten kernel of 0.13.0 has no such bound, and without LoRA the kernel never runs
    assert moe_select.explain(_dep(gpu, overflows, "0.13.0")).plan is not None
    assert moe_select.explain(_dep(gpu, overflows, "0.12.0", lora=False)).plan is not None


@pytest.mark.parametrize("version, refused", [("0.11.1", True), ("0.18.0", True), ("0.20.0", True), ("0.21.0", False),
                                              ("0.34.0", False)])
def test_vllm_lora_under_expert_parallelism_until_0_21(version, refused):
    r = moe_select.explain({"gpu": "H100", "engine": "vllm", "engine_version": version, "model_config": QWEN3,
                            "tp": 4, "ep": 4, "a2a": "none", "lora": True})
    assert bool(_lora_refusals(r)) is refused and (r.plan is None) is refused, report_codes(r)


def test_vllm_lora_under_expert_parallelism_needs_allgather_reducescatter():
    dep = {"gpu": "H100", "engine": "vllm", "engine_version": "0.21.0", "model_config": QWEN3, "tp": 4, "ep": 4,
           "a2a": "deepep", "lora": True}
    r = moe_select.explain(dep)
    assert r.plan is None and any("allgather_reducescatter" in x.detail for x in r.reasons), report_codes(r)
    assert moe_select.explain({**dep, "lora": False}).plan is not None


@pytest.mark.parametrize("line, lora", [
    ("vllm serve Qwen/Qwen3-30B-A3B -tp 4 --enable-lora --lora-modules a=/x --max-lora-rank 64", True),
    ("vllm serve Qwen/Qwen3-30B-A3B -tp 4 --no-enable-lora", False),
    ("vllm serve Qwen/Qwen3-30B-A3B -tp 4", False),
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --enable-lora", True),
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --lora-paths a=/x b=/y", True),
])
def test_the_launch_line_reads_lora(line, lora):
    launch = from_command(line, model_config=QWEN3)
    assert bool(launch.deployment.get("lora")) is lora, (launch.deployment, [f.message for f in launch.findings])


def test_the_report_line_is_refused_when_read():
    launch = from_command("vllm serve Qwen/Qwen3-30B-A3B --tensor-parallel-size 4 --enable-expert-parallel --enable-lora "
                          "--lora-modules a=/x", model_config=QWEN3, engine_version="0.18.0")
    r = launch.explain(deployment={"gpu": "H100"})
    assert r.plan is None and _lora_refusals(r), report_codes(r)


@pytest.mark.parametrize("engine, line, words", [
    ("vllm", "vllm serve Qwen/Qwen3-30B-A3B -tp 4 --enable-lora --lora-modules a=/x", ["--enable-lora", "--lora-modules"]),
    ("sglang", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --lora-paths a=/x",
     ["--lora-paths", "a=/x"]),
])
def test_emit_keeps_lora_on(engine, line, words):
    from moe_select.launch_emit import emit

    launch = from_command(line, model_config=QWEN3)
    r = launch.explain(deployment={"gpu": "H100"})
    out = emit(r.plan, engine, launch=launch)
    assert all(w in out.argv for w in words), out.argv
    # planned without a line: the engine's switch
    plan = moe_select.explain({"gpu": "H100", "engine": engine, "model_config": QWEN3, "tp": 4, "lora": True}).plan
    assert "--enable-lora" in emit(plan, engine).argv


def test_emit_refuses_lora_for_tensorrt_llm():
    from moe_select.launch_emit import EmitError, emit

    plan = moe_select.explain({"gpu": "H100", "engine": "trtllm", "model_config": QWEN3, "tp": 4, "lora": True}).plan
    assert plan is not None
    with pytest.raises(EmitError, match="LoRA"):
        emit(plan, "trtllm")


# --- what runs under LoRA (backends/common.yaml methods rows; read in the vLLM and SGLang wheels by a helper)
QWEN3_FP8 = str(ROOT / "examples/model_configs/Qwen__Qwen3-30B-A3B-FP8")


def _runner(engine: str, version: str, cfg: str, runner: str = "auto", lora: bool = True, gpu: str = "H100"):
    return moe_select.explain({"gpu": gpu, "engine": engine, "engine_version": version, "model_config": cfg, "tp": 2,
                               "runner": runner, "lora": lora})


def _lora_refused(report, runner: str) -> bool:
    c = next((c for c in report.candidates if c.backend == runner), None)
    return c is not None and any("LoRA" in r.detail for r in c.reasons if r.code == "engine_unsupported")


@pytest.mark.parametrize("version, allowed", [("0.11.1", {"triton"}), ("0.13.0", {"triton"}), ("0.19.0", {"triton"}),
                                              ("0.20.0", {"triton", "marlin"}), ("0.34.0", {"triton", "marlin"})])
def test_vllm_fp8_under_lora_runs_lora_capable_experts_only(version, allowed):
    r = _runner("vllm", version, QWEN3_FP8)
    assert r.plan is not None and r.plan.runner in allowed, report_codes(r)
    for name in ("deep_gemm", "flashinfer_cutlass", "cutlass"):
        assert _lora_refused(r, name), (name, report_codes(r))
    # without LoRA the same release does not refuse them for that reason
    off = _runner("vllm", version, QWEN3_FP8, lora=False)
    assert not any(_lora_refused(off, n) for n in ("deep_gemm", "flashinfer_cutlass"))


def test_vllm_0_12_fp8_under_lora_builds_no_runner():
    r = _runner("vllm", "0.12.0", QWEN3_FP8)
    assert r.plan is None and _lora_refused(r, "triton"), report_codes(r)


@pytest.mark.parametrize("version, runner, refused", [("0.20.0", "flashinfer_cutlass", True), ("0.20.0", "triton", False),
                                                      ("0.26.0", "flashinfer_trtllm", False)])
def test_vllm_16_bit_layers_under_lora(version, runner, refused):
    r = _runner("vllm", version, QWEN3, runner=runner, gpu="B200")
    assert _lora_refused(r, runner) is refused, report_codes(r)


@pytest.mark.parametrize("version, runner, refused", [("0.5.15", "deep_gemm", True), ("0.5.15", "triton", False),
                                                      ("0.5.18", "flashinfer_cutlass", True), ("0.5.19", "deep_gemm", False)])
def test_sglang_moe_lora_runs_triton_or_marlin(version, runner, refused):
    # 0.5.19 was not read: no fact, so not refused for LoRA
    r = _runner("sglang", version, QWEN3_FP8, runner=runner)
    assert _lora_refused(r, runner) is refused, report_codes(r)

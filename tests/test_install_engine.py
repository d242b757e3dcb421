"""This install as an engine of its own (issue 18): ``engine: moe_select`` plans with the facts of this install's
adapters (``backends/<runner>.py``) and dispatchers (``backends/a2a/dispatch_<name>.py``); the serving engines'
facts do not apply to them, nor theirs to the serving engines; ``engine: any`` means the serving engines;
``moe-select run`` and ``require_adapter`` plan for this install; ``resolve`` builds this install's adapter for
a plan made for a serving engine only where this install runs it too (``no_adapter`` otherwise)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import SelectionError
from moe_select.catalog import load_catalog
from moe_select.errors import ResolveError
from moe_select.vocab import ALL_ENGINES, ENGINES, INSTALL_ENGINE

QWEN3 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}
# The 2-GPU expert-parallel check's block-FP8 case with this project's torch all-to-all (issue 18: it fell back
# to torch_native because SGLang's and vLLM's facts about the triton runner were applied to this install's).
EP_FP8_BLOCK = {"gpu": "H200", "model": QWEN3, "quant": "fp8_block", "tp": 2, "ep": 2, "a2a": "torch", "cuda_graph": False}
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 64, "activation": "silu",
         "routing": "renormalize"}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_env=False)


def line_of(path: str, text: str) -> int:
    """1-based line of the first line of ``path`` (under the repository) that starts with ``text``."""
    lines = (Path(__file__).resolve().parents[1] / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(text))


# ------------------------------------------------------------------------------------------ the engine
def test_this_install_is_an_engine_that_any_does_not_include(catalog):
    assert INSTALL_ENGINE == "moe_select" and ALL_ENGINES == ENGINES + ("moe_select",)
    assert "moe_select" not in ENGINES
    assert [e.name for e in catalog.vocabulary.engines] == list(ALL_ENGINES)


@pytest.mark.parametrize("dep", [
    {"arch": "cpu", "model": SMALL, "quant": "bf16"},
    {"gpu": "H200", "model": QWEN3, "quant": "bf16"},
    {"gpu": "H200", "model": QWEN3, "quant": "fp8_block", "tp": 2, "ep": 2, "cuda_graph": False},
    {"gpu": "B200", "model": QWEN3, "quant": "nvfp4"},
], ids=["cpu", "h200-bf16", "h200-fp8-block-ep", "b200-nvfp4"])
def test_engine_any_means_the_serving_engines(dep):
    report = moe_select.explain(dep)
    assert report.deployment.engine == "any"
    seen = set(report.plan.engines) | set(report.plan.evidence_by_engine) if report.plan else set()
    for c in report.candidates:
        seen |= set(c.engines) | set(c.evidence_by_engine)
        seen |= {e for r in c.reasons for e in r.engines or []} | {e for x in c.unknowns for e in x.engines or []}
    assert seen and seen <= set(ENGINES), seen


# ------------------------------------------------------------------------------------------ the facts
def test_triton_with_torch_all_to_all_is_planned_for_this_install():
    """The issue's case: planned for this install with the triton runner (supported: this install's facts), where
    the serving engines refuse this project's all-to-all (backends/a2a/torch.yaml unavailable:)."""
    here = moe_select.explain({**EP_FP8_BLOCK, "engine": "moe_select"})
    assert here.plan is not None and here.plan.runner == "triton" and here.plan.evidence == "supported"
    assert here.plan.engines == ["moe_select"] and here.plan.module == "moe_select.backends.triton_moe"
    # the first matching Hopper FP8 rule (largest forward 8192 on 128 experts) ranks deep_gemm first, but deep_gemm
    # is unverified with this all-to-all (no fact pairs it with torch) and supported candidates come first
    assert here.plan.chosen_by.rule == "hopper-fp8-large-batches" and here.plan.ranges == []
    dg = next(c for c in here.candidates if c.backend == "deep_gemm")
    assert dg.eligible and dg.evidence == "unverified" and dg.unknowns[0].code == "a2a_unsupported"
    for engine in ("sglang", "vllm", "trtllm"):
        served = moe_select.explain({**EP_FP8_BLOCK, "engine": engine, "runner": "triton"})
        assert served.plan is None
        gone = [r for r in served.reasons if r.code == "a2a_unsupported" and r.source.startswith("backends/a2a/torch.yaml:")]
        assert gone and f"not shipped by {engine}" in gone[0].detail, [r.line() for r in served.reasons]


def test_serving_engine_facts_do_not_apply_to_this_install():
    # SGLang's Triton runner serves int8 W8A8 (the engines' support rows); this install's triton adapter has no
    # int8_w8a8 path (its adapter formats; it runs mxfp4 and nvfp4 as W4A16 since issue 24).
    dep = {"gpu": "H200", "model": QWEN3, "quant": "int8_w8a8", "runner": "triton", "cuda_graph": False}
    assert moe_select.explain({**dep, "engine": "sglang"}).plan.evidence == "supported"
    here = moe_select.explain({**dep, "engine": "moe_select"})
    assert here.plan is None and [r.code for r in here.reasons] == ["no_adapter"]
    adapter = line_of("backends/triton.yaml", "  formats: [bf16, fp16, fp8_tensor, fp8_channel, fp8_block, int4_w4a16")
    assert adapter > line_of("backends/triton.yaml", "adapter:") and here.reasons[0].source == f"backends/triton.yaml:{adapter}"
    # ...nor this install's to the serving engines: torch_native is no SGLang, TensorRT-LLM or vLLM runner (their
    # backend tables refuse the name; vLLM's MoEBackend literal since a 2026-12-06 trial: it was left open before).
    cpu = {"arch": "cpu", "model": SMALL, "quant": "bf16"}
    assert moe_select.explain({**cpu, "engine": "moe_select"}).plan.evidence == "supported"
    for engine in ("sglang", "trtllm", "vllm"):
        refused = moe_select.explain({**cpu, "engine": engine, "runner": "torch_native"})
        assert [r.code for r in refused.reasons] == ["engine_unsupported"], engine
        assert "MoEBackend" in refused.reasons[0].detail or engine != "vllm"


def test_what_this_install_cannot_build_is_refused_under_its_engine():
    base = {"gpu": "H200", "model": QWEN3, "quant": "fp8_block", "engine": "moe_select", "cuda_graph": False}
    plan_only = moe_select.explain({**base, "runner": "marlin"})  # (deep_gemm has an adapter since issue 26)
    assert [r.code for r in plan_only.reasons] == ["no_adapter"] and "marlin has no adapter" in plan_only.reasons[0].detail
    deepep = moe_select.explain({**base, "tp": 8, "ep": 8, "a2a": "deepep", "a2a_mode": "normal", "runner": "triton"})
    assert {r.code for r in deepep.reasons} == {"no_adapter"}
    assert any("a2a deepep has no dispatcher in this install" in r.detail for r in deepep.reasons)
    # An all-to-all no file describes: judged (unverified) for a serving engine, refused here (nothing dispatches it).
    new = {**base, "tp": 2, "ep": 2, "a2a": "shmem_a2a", "runner": "triton"}
    assert moe_select.explain({**new, "engine": "vllm"}).plan.evidence == "unverified"
    refused = moe_select.explain(new)
    assert refused.plan is None and any("no dispatcher for it" in r.detail for r in refused.reasons)
    # The core's own refusal: fp8_block's K block is the GEMM's K tile, a power of two.
    odd = moe_select.explain({**base, "runner": "triton", "quant_config": {"block": [128, 96]}})
    assert [r.code for r in odd.reasons] == ["shape_unaligned"]
    assert odd.reasons[0].source.startswith("backends/triton.yaml:")


def test_torch_cannot_capture_this_projects_all_to_all():
    dep = {**EP_FP8_BLOCK, "engine": "moe_select", "runner": "triton", "cuda_graph": True}
    report = moe_select.explain(dep)
    assert report.plan is None and [r.code for r in report.reasons] == ["cuda_graph_unsupported"]
    assert report.reasons[0].source.startswith("backends/a2a/torch.yaml:")


# ------------------------------------------------------------------------------------------ require_adapter and run
def test_require_adapter_plans_for_this_install():
    report = moe_select.explain({**EP_FP8_BLOCK, "require_adapter": True})
    assert report.deployment.engine == "moe_select" and "require_adapter" in report.deployment.provenance["engine"]
    assert report.plan.runner == "triton" and report.plan.engine == "moe_select"


def test_require_adapter_with_a_serving_engine_refuses_what_this_install_cannot_run():
    """SGLang's facts leave the triton runner on a CPU open (unverified); this install's triton core refuses a CPU
    device (outside Triton's interpreter): with require_adapter the candidate is refused, naming that fact."""
    dep = {"arch": "cpu", "model": SMALL, "quant": "bf16", "engine": "sglang", "runner": "triton"}
    assert moe_select.explain(dep).plan.evidence == "unverified"
    refused = moe_select.explain({**dep, "require_adapter": True})
    assert refused.plan is None and [r.code for r in refused.reasons] == ["no_adapter"]
    assert "this install (engine moe_select) does not run it: arch_unsupported" in refused.reasons[0].detail
    assert refused.reasons[0].source == f"backends/triton.yaml:{line_of('backends/triton.yaml', '  - archs: [cpu]')}"


def test_run_plans_for_this_install(tmp_path, monkeypatch, capsys):
    import moe_select.selector as selector
    from moe_select.cli import main

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu", "norm_topk_prob": True, "torch_dtype": "bfloat16"}))
    seen = []
    real = selector.explain

    def spy(dep, **kwargs):
        report = real(dep, **kwargs)
        seen.append(report.deployment.engine)
        return report

    monkeypatch.setattr(selector, "explain", spy)
    assert main(["run", "--model-config", str(tmp_path), "--tokens", "4", "--device", "cpu"]) == 0
    assert seen == ["moe_select"], capsys.readouterr().out


def test_run_distributed_plans_for_this_install(tmp_path, monkeypatch):
    import moe_select.selector as selector
    from moe_select.harness.launch import run_distributed

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu", "norm_topk_prob": True, "torch_dtype": "bfloat16"}))
    seen = []

    class Stop(Exception):
        pass

    def spy(dep, **kwargs):
        seen.append(dep)
        raise Stop  # the deployment is what is tested: nothing is spawned

    monkeypatch.setattr(selector, "explain", spy)
    with pytest.raises(Stop):
        run_distributed(model_config=str(tmp_path), tokens=4, nproc=2, tp=2, ep=2, a2a="torch", seed=1, dtype="bfloat16",
                        timeout_s=30)
    assert seen[0]["engine"] == "moe_select" and seen[0]["require_adapter"] is True


# ------------------------------------------------------------------------------------------ resolve
def test_resolve_builds_a_serving_engines_plan_only_where_this_install_runs_it():
    """A plan made for SGLang with the triton runner on this CPU (unverified there) says what SGLang would run;
    this install's triton core refuses a CPU device: resolve refuses it (no_adapter, naming that fact) before
    importing anything. No vLLM plan is made with torch_native, which vLLM cannot be told to run."""
    sglang = moe_select.plan({"arch": "auto", "model": SMALL, "quant": "bf16", "engine": "sglang", "runner": "triton"})
    assert sglang.engine == "sglang" and sglang.module == "moe_select.backends.triton_moe"
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(sglang)
    assert exc.value.codes == ["no_adapter"], str(exc.value)
    reason = next(r for r in exc.value.reasons if r.code == "no_adapter")
    assert "this install (engine moe_select) does not run it: arch_unsupported" in reason.detail
    assert reason.source == f"backends/triton.yaml:{line_of('backends/triton.yaml', '  - archs: [cpu]')}"
    with pytest.raises(SelectionError):
        moe_select.plan({"arch": "auto", "model": SMALL, "quant": "bf16", "engine": "vllm", "runner": "torch_native"})


# ------------------------------------------------------------------------------------------ triton x a2a torch, run
INTERP_MODEL = {"num_experts": 8, "top_k": 2, "hidden_size": 128, "moe_intermediate_size": 128, "activation": "silu",
                "routing": "renormalize"}
INTERP_TOKENS, INTERP_SEED = 12, 20261130


def _interp_rank(rank: int, size: int, plan_json: str, env_json: str) -> dict:
    """One gloo rank: resolve the triton plan with the group (device cpu: Triton's interpreter), build this rank's
    shard of the seeded fp8_block layer, pass this rank's own tokens through the torch all-to-all."""
    import torch.distributed as dist

    from moe_select.environment import Environment
    from moe_select.harness.launch import token_range
    from moe_select.harness.weights import layer_weights, routed_tokens

    runner = moe_select.resolve(json.loads(plan_json), group=dist.group.WORLD, device="cpu",
                                environment=Environment.model_validate_json(env_json), timeout_s=60)
    w = layer_weights(runner.spec, INTERP_MODEL, INTERP_SEED)
    weights = runner.prepare_weights(w.pop("w13"), w.pop("w2"), **w)
    x, ids, wts = routed_tokens(INTERP_MODEL, INTERP_TOKENS, INTERP_SEED)
    lo, hi = token_range(rank, size, INTERP_TOKENS)
    y = runner.run(x[lo:hi], ids[lo:hi], wts[lo:hi], weights)
    return {"y": y.float().tolist(), "core": type(runner.core).__name__, "dispatcher": type(runner.dispatcher).__name__,
            "output": runner.dispatcher.output}


def interpreter_main() -> dict:
    """In a process with TRITON_INTERPRET=1: plan the issue's case for an H200 (engine moe_select), run it on two
    gloo ranks and compare the assembled output with the float64 reference."""
    import torch

    from moe_select.environment import Environment
    from moe_select.formats import tolerance
    from moe_select.harness.launch import spawn
    from moe_select.harness.weights import reference_output, routed_tokens
    from moe_select.reference import rel_error

    plan = moe_select.plan({"gpu": "H200", "model": INTERP_MODEL, "quant": "fp8_block", "tp": 2, "ep": 2, "a2a": "torch",
                            "cuda_graph": False, "engine": "moe_select"})
    here = moe_select.explain({"arch": "auto", "model": INTERP_MODEL, "quant": "bf16"}).environment.packages
    env = Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages=dict(here))
    ranks = spawn(_interp_rank, 2, (plan.to_json(), env.model_dump_json()), timeout_s=240, start_method="fork")
    y = torch.cat([torch.tensor(r["y"]) for r in ranks])
    x, ids, wts = routed_tokens(INTERP_MODEL, INTERP_TOKENS, INTERP_SEED)
    ref, _ = reference_output(INTERP_MODEL, "fp8_block", 1, INTERP_SEED, x, ids, wts)
    return {"runner": plan.runner, "evidence": plan.evidence, "cores": [r["core"] for r in ranks],
            "dispatchers": [r["dispatcher"] for r in ranks], "outputs": [r["output"] for r in ranks],
            "error": rel_error(y, ref), "tolerance": tolerance(plan.activation_precision, "bf16")}


@pytest.mark.slow
def test_triton_with_a2a_torch_matches_float64():
    """The pairing backends/triton.yaml claims for this install (a2a torch) run: two gloo ranks, the triton core
    through Triton's interpreter, each rank its own tokens, against the float64 reference."""
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_install_engine as t; "
            "print('RESULT ' + json.dumps(t.interpreter_main()))")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(line[len("RESULT "):])
    assert (r["runner"], r["evidence"]) == ("triton", "supported")
    assert r["cores"] == ["TritonMoeCore"] * 2 and r["outputs"] == ["complete"] * 2, r
    assert r["error"] <= r["tolerance"], r

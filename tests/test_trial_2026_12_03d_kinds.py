"""A fourth new user's trial (2026-12-03, an engine author on the Python API and measurements), fixed as kinds (the
fp8_block block shape is in tests/test_fp8_block_shapes.py):

1. ``explain``/``plan`` used a measurement table whose torch (or Triton, or moe-select) differed from this machine's,
   and ``resolve`` on the same machine then dropped it (a MeasurementsWarning): planning now compares those keys too,
   as ``resolve`` and ``tune --check`` do.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import moe_select

FIX = Path(__file__).parent / "fixtures" / "measurements"
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
DEP = {"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}


@pytest.mark.parametrize("key, value", [("torch", "2.12.0"), ("triton", "3.5.0"), ("moe_select", "0.0.9")])
def test_a_table_of_another_torch_triton_or_moe_select_does_not_apply_here(tmp_path, key, value):
    base = json.loads((FIX / "cpu_small.json").read_text())
    same = moe_select.explain(DEP, measurements=[FIX / "cpu_small.json"])
    assert same.measured.applied  # the fixture was taken with this install's versions (CI installs the same)
    base["machine"][key] = value
    (tmp_path / "t.json").write_text(json.dumps(base))
    other = moe_select.explain(DEP, measurements=[tmp_path / "t.json"])
    assert not other.measured.applied and other.plan.ranges == []
    assert any(f"machine differs in {key} (" in n and f", {value} there)" in n for n in other.measured.notes), other.measured.notes


def test_a_deployment_for_another_machine_takes_the_tables_torch_as_assumed():
    h200 = {"gpu": "H200", "quant": "bf16", "model": SMALL, "engine": "moe_select", "cuda_graph": True}
    r = moe_select.explain(h200, measurements=[FIX / "h200_small.json"])
    assert r.measured.applied and r.plan.ranges
    declared = moe_select.explain({**h200, "packages": {"torch": "2.12.0"}}, measurements=[FIX / "h200_small.json"])
    assert any("machine differs in torch (2.12.0 here, 2.13.0 there)" in n for n in declared.measured.notes)


def test_emit_for_the_plans_own_engine_does_not_advise_planning_for_it():
    """A vLLM plan on a runner vLLM has no name for cannot be written as a vLLM launch: the refusal said 'plan with
    --engine vllm', which it was; now it says vLLM's own choice is what explain's prediction names. (torch_native is
    refused under vLLM since 2026-12-06, so such a plan is a plan file of an older moe-select: this install's CPU plan
    with its engine set to vllm.)"""
    from moe_select.launch_emit import EmitError, emit

    here = moe_select.explain({"arch": "cpu", "engine": "moe_select", "model": SMALL, "quant": "bf16"}).plan
    assert here is not None and here.runner == "torch_native"
    plan = here.model_copy(update={"engine": "vllm", "engines": ["vllm"],
                                   "deployment": here.deployment.model_copy(update={"engine": "vllm"})})
    with pytest.raises(EmitError) as exc:
        emit(plan, "vllm")
    assert "plan with --engine vllm" not in str(exc.value) and "the plan is already for vllm" in str(exc.value)
    with pytest.raises(EmitError, match="plan with --engine sglang"):   # a plan for another engine: plan for this one
        emit(here, "sglang")


def test_a_runner_without_a_file_is_refused_for_this_install_with_a_close_match():
    """Planned for this install (engine moe_select), a runner no capability file describes has no adapter here: refused
    at planning with the close match (a fourth trial: 'torch_nativ' was planned, then failed at resolve citing a file
    that does not exist); for a serving engine whose runner option is closed it is refused too (read at the newest
    checked release when no version is given: a sixth trial), and a declared release newer than the tables read leaves
    it unverified (that release may take the name)."""
    dep = {"arch": "cpu", "quant": "bf16", "model": SMALL, "runner": "torch_nativ"}
    here = moe_select.explain({**dep, "engine": "moe_select"})
    assert here.plan is None
    reason = next(r for c in here.candidates if c.backend == "torch_nativ" for r in c.reasons)
    assert reason.code == "no_adapter" and "did you mean 'torch_native'?" in reason.detail and reason.fix == "runner: torch_native"
    served = moe_select.explain({**dep, "engine": "vllm"})
    assert served.plan is None
    newer = moe_select.explain({**dep, "engine": "vllm", "engine_version": "0.40.0"})
    assert newer.plan is not None and newer.plan.evidence == "unverified"


def test_a_single_measured_range_reads_as_every_forward(tmp_path):
    base = json.loads((FIX / "cpu_small.json").read_text())
    base["points"] = [p for p in base["points"] if p["runner"] == "torch_native"]
    (tmp_path / "one.json").write_text(json.dumps(base))
    r = moe_select.explain(DEP, measurements=[tmp_path / "one.json"])
    assert r.measured.applied and len(r.plan.ranges) == 1
    text = r.render_text()
    assert "token ranges: every forward: torch_native" in text and "above:" not in text


def test_an_edited_plan_names_the_first_place_that_differs():
    """Derived fields that differ were shown as two truncated reprs that read the same (a fourth trial); now the first
    differing place is named with its two values, and an edit of the inputs is one fingerprint message."""
    from moe_select.errors import ResolveError

    data = json.loads(moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": SMALL}).to_json())
    edited = json.loads(json.dumps(data))
    edited["notes"] = [*edited["notes"], "added by hand"]
    with pytest.raises(ResolveError, match=r"notes: the plan says \[.*'added by hand'\], selection over its own inputs gives"):
        moe_select.resolve(edited)
    inputs = json.loads(json.dumps(data))
    inputs["deployment"]["model"]["top_k"] = 3
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(inputs)
    assert str(exc.value).count("plan_mismatch") == 1 and "fingerprint: the plan's inputs" in str(exc.value)
    pkgs = json.loads(json.dumps(data))
    assert pkgs["packages"] and pkgs["packages"][0]["name"] == "torch"  # torch_native needs torch
    pkgs["packages"][0]["name"] = "torchx"
    with pytest.raises(ResolveError, match=r"packages\[0\]\.name: the plan says 'torchx', selection over its own inputs "
                                           r"gives 'torch'"):
        moe_select.resolve(pkgs)


def test_a_moved_checkpoint_says_the_plan_reads_it_at_its_planned_path(tmp_path):
    from moe_select.errors import ResolveError

    cfg = tmp_path / "mc"
    cfg.mkdir()
    (cfg / "config.json").write_text((Path(__file__).resolve().parent.parent / "examples" / "model_configs" /
                                      "Qwen__Qwen3-30B-A3B" / "config.json").read_text())
    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "model_config": str(cfg)})
    cfg.rename(tmp_path / "mc2")
    with pytest.raises(ResolveError, match="the plan reads it at the path it was planned with") as exc:
        moe_select.resolve(plan)
    assert "mount it at the planned path" in str(exc.value)


def test_a_gptq_v1_zero_out_of_range_names_the_v2_route():
    import torch

    from moe_select import quant_int as qi

    e, k, n, bits, g = 1, 64, 8, 4, 32
    qweight = torch.zeros(e, k * bits // 32, n, dtype=torch.int32)
    qzeros = torch.full((e, k // g, n * bits // 32), -1, dtype=torch.int32)  # every 4-bit code 15: zero point 16 in v1
    scales = torch.rand(e, k // g, n) + 0.5
    with pytest.raises(ValueError, match=r"from_gptq\(\.\.\., zeros_minus_one=False\), then quant_int\.to_kernel"):
        qi.from_gptq(qweight, qzeros, scales, bits)
    assert qi.from_gptq(qweight, qzeros, scales, bits, zeros_minus_one=False).zeros is not None

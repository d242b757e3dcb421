"""moe_select.parallel and the dispatchers' contracts, in one process (no process group needed):
disagreement messages, capability files vs registered dispatchers, DeepEP refusals, promised pairs."""
from __future__ import annotations

import sys
import types

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.environment import Environment
from moe_select.errors import ResolveError
from moe_select.parallel import DispatchError, all_reduce, compare, plan_fields, set_tokens
from moe_select.registry import Registry
from moe_select.plans import Reason

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 128, "moe_intermediate_size": 128, "activation": "silu",
         "routing": "renormalize"}


def cpu_plan(**kw):
    return moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True, **kw})


def rec(rank, **fields):
    base = {"arch": "sm90", "gpu": "H200", "file:rules/10-nvidia.yaml": "a" * 64, "package:torch": "2.13.0", "fingerprint": "f0"}
    return {"rank": rank, "fields": {**base, **fields}, "reasons": []}


def test_compare_names_the_odd_rank_and_the_majority():
    lines = compare([rec(0), rec(1, gpu="H100", fingerprint="f1"), rec(2), rec(3)])
    assert lines == ["rank 1: gpu H100 vs H200 on ranks 0, 2, 3"]  # the fingerprint follows from the gpu


def test_compare_files_packages_and_ties():
    lines = compare([rec(0), rec(1, **{"package:torch": "2.12.0"}), rec(2), rec(3, **{"file:rules/10-nvidia.yaml": "b" * 64})])
    assert "rank 1: package torch 2.12.0 vs 2.13.0 on ranks 0, 2, 3" in lines
    assert "rank 3: rules/10-nvidia.yaml hash differs (bbbbbbbbbbbb vs aaaaaaaaaaaa on ranks 0, 1, 2)" in lines
    two = compare([rec(0), rec(1, arch="sm100", gpu="B200")])
    assert two == ["rank 1: arch sm100 vs sm90 on rank 0", "rank 1: gpu B200 vs H200 on rank 0"]
    absent = {"rank": 1, "fields": {k: v for k, v in rec(1)["fields"].items() if not k.startswith("file:")}, "reasons": []}
    assert compare([rec(0), absent]) == ["rank 1: rules/10-nvidia.yaml is absent (present on rank 0)"]
    extra = rec(1, **{"package:triton": "3.6.0"})
    assert compare([rec(0), extra]) == ["rank 1: package triton 3.6.0 vs (not recorded) on rank 0"]


def test_compare_falls_back_to_the_fingerprint_and_skips_unreadable_plans():
    assert compare([rec(0), rec(1, fingerprint="f1")]) == ["rank 1: fingerprint f1 vs f0 on rank 0"]
    assert compare([rec(0), {"rank": 1, "fields": None, "reasons": []}]) == []


def test_plan_fields_cover_the_key_fields():
    plan = cpu_plan()
    f = plan_fields(plan, plan.environment)
    detected = sorted(k for k in f if k.startswith("detected package:"))
    assert detected == sorted(f"detected package:{n.name}" for n in plan.packages)  # the plan's needs only
    for key in ("arch", "gpu", "runner", "quant", "tp", "ep", "a2a", "fingerprint", "package:torch", "detected arch",
                "rules/90-fallback.yaml", "backends/a2a/none.yaml"):
        assert key in f or f"file:{key}" in f, key


def test_dispatchers_match_their_capability_files():
    """Each a2a capability file with a module registers its dispatcher under its name, and the dispatcher
    states the same output format; each runner's module registers exactly the pairs its file promises."""
    cat = load_catalog(use_env=False)
    shipped = {name: cap for name, cap in cat.a2a.items() if cap.module}
    assert set(shipped) == {"none", "torch"}
    for name, cap in shipped.items():
        reg = Registry()
        __import__(cap.module, fromlist=["register"]).register(reg)
        assert reg.dispatcher(name).format == cap.format, name
    cap = cat.runners["torch_native"]
    reg = Registry()
    __import__(cap.module, fromlist=["register"]).register(reg)
    assert reg.pairs() == {("torch_native", f) for f in cap.registers} == {("torch_native", "standard")}


def test_resolve_refuses_a_promised_pair_the_module_does_not_register():
    mod = types.ModuleType("moe_select_test_half_adapter")
    from moe_select.backends.torch_native import TorchNativeCore

    mod.register = lambda registry: registry.register_core("torch_native", "batched", TorchNativeCore)
    sys.modules[mod.__name__] = mod
    try:
        import dataclasses

        from moe_select.catalog import load_catalog

        cat = load_catalog(use_env=False)
        cat = dataclasses.replace(cat, runners={**cat.runners, "torch_native": cat.runners["torch_native"].model_copy(
            update={"module": mod.__name__})})
        plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
        assert plan.registers == ["standard"] and plan.dispatch_formats == ["standard"] and plan.module == mod.__name__
        with pytest.raises(ResolveError) as exc:
            moe_select.resolve(plan, registry=Registry(), catalog=cat)
        assert exc.value.codes == ["no_adapter"] and "did not register a torch_native core for standard dispatch" in str(exc.value)
    finally:
        del sys.modules[mod.__name__]


def deepep_plan():
    return moe_select.plan({"gpu": "H200", "quant": "bf16", "model": SMALL, "tp": 8, "ep": 8, "a2a": "deepep",
                            "deepep_mode": "normal", "cuda_graph": False})


def test_deepep_is_planned_with_its_package_and_formats():
    plan = deepep_plan()
    assert plan.a2a == "deepep" and plan.a2a_module is None
    assert [(n.name, n.module, n.needed_by) for n in plan.packages if n.name == "deep_ep"] == [("deep_ep", "deep_ep", "a2a deepep")]
    assert plan.a2a_modes == ["normal"] and plan.dispatch_formats == ["standard"]
    cap = load_catalog(use_env=False).a2a["deepep"]
    assert cap.format is None
    assert {m: f.format for m, f in cap.modes.items()} == {"normal": "standard", "low_latency": "batched"}


def test_deepep_without_deep_ep_is_dependency_missing():
    plan = deepep_plan()
    with pytest.raises(ResolveError) as exc:  # this machine: a CPU, and no deep_ep
        moe_select.resolve(plan)
    assert "dependency_missing" in exc.value.codes and "import deep_ep" in str(exc.value)
    hopper = Environment(detected=True, arch="sm90", gpu="H200", packages={"torch": "2.13.0", "deep_ep": None})
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=hopper, registry=Registry())
    # every reason at once: the missing package, and this install's own check of the plan (made for the serving
    # engines) under engine moe_select: no DeepEP dispatcher here (issue 18)
    assert set(exc.value.codes) == {"dependency_missing", "no_adapter"} and "a2a deepep needs deep_ep" in str(exc.value)
    assert "a2a deepep has no dispatcher in this install" in str(exc.value)
    with_it = Environment(detected=True, arch="sm90", gpu="H200", packages={"torch": "2.13.0", "deep_ep": "1.2.1"})
    with pytest.raises(ResolveError) as exc:  # installed, but this project ships no DeepEP dispatcher
        moe_select.resolve(plan, environment=with_it, registry=Registry())
    assert "no_adapter" in exc.value.codes and "a2a deepep has no dispatcher" in str(exc.value)


def test_torch_a2a_without_a_group_and_token_layouts_are_refused():
    plan = cpu_plan(tp=2, ep=2, a2a="torch")
    with pytest.raises(ResolveError, match="a2a torch needs the MoE process group") as exc:  # resolve's contract
        moe_select.resolve(plan)
    assert exc.value.codes == ["parallelism_unsupported"]
    runner = moe_select.resolve(cpu_plan(tp=2, ep=2))
    assert runner.dispatcher.tokens == "replicated" and runner.dispatcher.output == "partial"
    with pytest.raises(DispatchError, match="tokens must be one of replicated, sharded"):
        set_tokens(runner, "scattered")
    with pytest.raises(DispatchError, match="a2a none \\(sharded tokens\\) needs the MoE process group"):
        set_tokens(runner, "sharded")  # sharded needs the group
    assert runner.dispatcher.tokens == "replicated"  # unchanged after the refusal
    with pytest.raises(DispatchError, match="not initialized"):
        all_reduce(None, None)


def test_refusals_are_merged_and_prefixed():
    from moe_select.parallel import _refusals

    r = Reason(code="dependency_missing", detail="x needs y", source="s").model_dump()
    out = _refusals([{"rank": 0, "reasons": [r]}, {"rank": 1, "reasons": [r]}, {"rank": 2, "reasons": []}], 3)
    assert [x.detail for x in out] == ["ranks 0, 1: x needs y"]
    out = _refusals([{"rank": 0, "reasons": [r]}, {"rank": 1, "reasons": [r]}], 2)
    assert [x.detail for x in out] == ["every rank: x needs y"]

"""Capability files agree with the adapters that ship: what a module registers and implements is what
its file promises, and formats beyond the adapter are plan-only (no_adapter), never silently run."""
from __future__ import annotations

import importlib

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.environment import Environment
from moe_select.errors import ResolveError
from moe_select.registry import Registry

CAT = load_catalog(use_env=False)
WITH_MODULE = sorted(n for n, c in CAT.runners.items() if c.module)


@pytest.mark.parametrize("name", WITH_MODULE)
def test_module_registers_exactly_what_the_file_promises(name):
    cap = CAT.runners[name]
    mod = importlib.import_module(cap.module)
    reg = Registry()
    mod.register(reg)
    assert reg.pairs() == {(name, f) for f in cap.registers}


@pytest.mark.parametrize("name", WITH_MODULE)
def test_adapter_formats_are_implemented(name):
    cap = CAT.runners[name]
    formats = getattr(importlib.import_module(cap.module), "FORMATS", None)
    assert formats is not None, f"{cap.module} should state FORMATS"
    claimed = cap.adapter.formats if cap.adapter else {f for s in cap.support for f in s.formats}
    assert set(claimed) <= set(formats), (name, set(claimed) - set(formats))


def test_plan_only_format_of_a_runner_with_an_adapter():
    dep = {"gpu": "B200", "quant": "nvfp4", "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048,
                                                      "moe_intermediate_size": 768}, "runner": "flashinfer_cutlass"}
    plan = moe_select.plan(dep)
    assert plan.runner == "flashinfer_cutlass" and plan.module is None  # FlashInfer runs it; this install cannot
    env = Environment(detected=True, arch="sm100", gpu="B200", packages={"flashinfer-python": "0.6.4"},
                      prebuilt={"flashinfer-python": True})
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env, registry=Registry())
    assert "no_adapter" in exc.value.codes
    report = moe_select.explain({**dep, "require_adapter": True})
    assert report.status == "rejected"
    assert "nvfp4 with silu is plan-only here" in report.reasons[0].detail

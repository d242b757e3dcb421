"""An engine author's trial (2026-12-06, break53), the defects fixed as kinds: a core's constructor raising past
``resolve`` (and after the ranks agreed); a
core without the runner contract's methods; a core returning another shape or dtype; a core's own TypeError reported as
the caller's scales; a verification failing on one rank only."""
from __future__ import annotations

import pytest
import torch

import moe_select
from moe_select.environment import Environment, detect_package
from moe_select.errors import ResolveError, RunnerOutputError
from moe_select.registry import Registry
from moe_select.backends.torch_native import TorchNativeCore

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
def _plan_and_env():
    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": SMALL, "runner": "torch_native"})
    env = Environment(detected=True, arch="cpu", packages={n.name: detect_package(n.name, n.module) for n in plan.packages})
    return plan, env


def _registry(factory, monkeypatch) -> Registry:
    """A fresh registry into which torch_native's own register() puts ``factory`` (the plan stays as selected)."""
    from moe_select.backends import torch_native

    monkeypatch.setattr(torch_native, "register", lambda reg: reg.register_core("torch_native", "standard", factory))
    return Registry()


class _Boom(Exception):
    pass


def _raises(exc):
    def make(spec, dev):
        raise exc
    return make


@pytest.mark.parametrize("factory, says", [
    (_raises(AssertionError("no kernel for this shape")), "raised AssertionError: no kernel for this shape"),
    (_raises(_Boom("plugin says no")), "raised _Boom: plugin says no"),
    (_raises(OSError("libacme.so: cannot open")), "raised OSError: libacme.so: cannot open"),
    (lambda spec, dev: None, "built a NoneType, which has no prepare_weights or forward"),
    (lambda spec, dev: object(), "which has no prepare_weights or forward"),
])
def test_a_core_that_cannot_be_built_is_refused_at_resolve(monkeypatch, factory, says):
    plan, env = _plan_and_env()
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env, device="cpu", registry=_registry(factory, monkeypatch))
    assert exc.value.codes == ["no_adapter"] and says in str(exc.value), str(exc.value)


class _WrongShape(TorchNativeCore):
    def forward(self, *args, **kw):
        out = super().forward(*args, **kw)
        return out[:, : out.shape[1] // 2]


class _WrongDtype(TorchNativeCore):
    def forward(self, *args, **kw):
        return super().forward(*args, **kw).float()


class _OwnTypeError(TorchNativeCore):
    def prepare_weights(self, w13, w2, **scales):
        return w13 + "x"   # the core's own bug


def _weights(runner):
    spec = runner.spec
    w13 = torch.randn(spec.num_local_experts, 2 * spec.intermediate_size, spec.hidden_size, dtype=torch.bfloat16)
    w2 = torch.randn(spec.num_local_experts, spec.hidden_size, spec.intermediate_size, dtype=torch.bfloat16)
    return w13, w2


@pytest.mark.parametrize("core, says", [(_WrongShape, r"returned \[4, 32\] torch.bfloat16"),
                                        (_WrongDtype, r"returned \[4, 64\] torch.float32")])
def test_a_core_returning_another_shape_or_dtype_is_its_error(monkeypatch, core, says):
    plan, env = _plan_and_env()
    runner = moe_select.resolve(plan, environment=env, device="cpu", registry=_registry(core, monkeypatch))
    pw = runner.prepare_weights(*_weights(runner))
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    with pytest.raises(RunnerOutputError, match=says):
        runner.run(x, ids, torch.full((4, 2), 0.5), pw)
    with pytest.raises(ResolveError, match="returned"):   # resolve(verify=True) refuses it before serving
        moe_select.resolve(plan, environment=env, device="cpu", registry=_registry(core, monkeypatch), verify=True)


def test_a_cores_own_type_error_is_not_blamed_on_the_scales(monkeypatch):
    plan, env = _plan_and_env()
    runner = moe_select.resolve(plan, environment=env, device="cpu", registry=_registry(_OwnTypeError, monkeypatch))
    with pytest.raises(TypeError, match="unsupported operand") as exc:
        runner.prepare_weights(*_weights(runner))
    assert not isinstance(exc.value, moe_select.RunnerInputError)
    from moe_select.errors import RunnerInputError

    with pytest.raises(RunnerInputError, match="unknown argument"):   # the caller's own error still is the caller's
        runner.prepare_weights(*_weights(runner), w13_scale=torch.ones(1))


def test_resolve_flags_are_booleans_and_a_plan_text_is_not_a_path():
    plan, env = _plan_and_env()
    for flag in ("verify", "require_prebuilt"):
        with pytest.raises(moe_select.InputError, match=f"{flag} must be True or False, got 'no'"):
            moe_select.resolve(plan, environment=env, device="cpu", **{flag: "no"})
    with pytest.raises(moe_select.InputError, match="a plan given as JSON text") as exc:
        moe_select.resolve(plan.to_json(), environment=env, device="cpu")
    assert len(str(exc.value)) < 300


@pytest.mark.parametrize("planned, found, same", [
    ("2.13.0", "2.13.0+cpu", True), ("2.13.0+cpu", "2.13.0", True), ("2.13.0+cu130", "2.13.0+cpu", False),
    ("2.13.0", "2.13.1", False), ("2.13.0", "2.13.0", True)])
def test_a_local_build_label_alone_is_the_same_version(planned, found, same):
    from moe_select.resolver import _same_version

    assert _same_version(planned, found) is same

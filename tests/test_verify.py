"""moe_select.verify: a correct runner passes, a runner with wrong numbers is refused (CPU)."""
from __future__ import annotations

import pytest
import torch

import moe_select
from moe_select.backends.torch_native import TorchNativeCore
from moe_select.environment import Environment, detect_package
from moe_select.errors import ResolveError
from moe_select.registry import Registry
from moe_select.formats import tolerance
from moe_select.verify import verify_runner

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}


def _plan(quant="bf16", model=SMALL, **kw):
    return moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": quant, "model": model, "runner": "torch_native", **kw})


def _resolve(plan, **kw):
    """resolve on the CPU whatever this machine has (the plan is for arch cpu; a GPU machine runs these too)."""
    env = Environment(detected=True, arch="cpu", packages={n.name: detect_package(n.name, n.module) for n in plan.packages})
    return moe_select.resolve(plan, environment=env, device="cpu", registry=Registry(), **kw)


@pytest.mark.parametrize("quant", ["bf16", "fp16", "fp8_channel", "fp8_tensor", "fp8_block"])
def test_torch_native_passes(quant):
    model = dict(SMALL, hidden_size=256, moe_intermediate_size=128) if quant == "fp8_block" else SMALL
    runner = _resolve(_plan(quant, model))
    err = verify_runner(runner, tokens=8, seed=3)
    assert 0 <= err <= tolerance(runner.plan.activation_precision, "fp16" if quant == "fp16" else "bf16")


def test_resolve_verify_true_passes_and_ep_rank_is_checked():
    runner = _resolve(_plan(ep=2, tp=2), ep_rank=1, verify=True)
    assert runner.spec.ep_rank == 1


def test_large_rank_is_checked_with_a_twin():
    big = dict(SMALL, num_experts=256, hidden_size=512, moe_intermediate_size=256)
    runner = _resolve(_plan(model=big))
    assert verify_runner(runner, tokens=4, max_weight_bytes=1 << 20) <= tolerance("bf16")


class OffByOneExpert(TorchNativeCore):
    """Broken on purpose: uses the next expert's weights."""

    def prepare_weights(self, w13, w2, **kw):
        w = super().prepare_weights(w13, w2, **kw)
        w.w13, w.w2 = w.w13.roll(1, 0), w.w2.roll(1, 0)
        return w


class Raises(TorchNativeCore):
    def forward(self, *a):
        raise RuntimeError("kernel exploded")


def _broken_adapter(monkeypatch, core):
    """Make torch_native's own register() register ``core`` (the plan stays as selected)."""
    from moe_select.backends import torch_native

    plan = _plan()
    monkeypatch.setattr(torch_native, "register", lambda reg: [reg.register_core("torch_native", a, core) for a in plan.registers])
    return plan


@pytest.mark.parametrize("core,match", [(OffByOneExpert, "differs from the float64 reference by"),
                                        (Raises, "raised RuntimeError: kernel exploded")])
def test_broken_core_is_refused(monkeypatch, core, match):
    plan = _broken_adapter(monkeypatch, core)
    runner = _resolve(plan)                                          # resolves: only verify can tell
    assert isinstance(runner.core, core)
    with pytest.raises(ResolveError, match=match) as err:
        verify_runner(runner)
    assert err.value.codes == ["plan_mismatch"]
    with pytest.raises(ResolveError, match=match):
        _resolve(plan, verify=True)


def test_format_without_generator_is_refused():
    runner = _resolve(_plan())
    runner.spec = type(runner.spec)(**{**runner.spec.__dict__, "quant": "int4_w4a16"})
    with pytest.raises(ResolveError) as err:
        verify_runner(runner)
    assert err.value.codes == ["quant_unsupported"]


def test_nan_is_refused(monkeypatch):
    class NaNCore(TorchNativeCore):
        def forward(self, x, *a):
            return torch.full_like(x, float("nan"))

    runner = _resolve(_broken_adapter(monkeypatch, NaNCore))
    with pytest.raises(ResolveError, match="by nan"):
        verify_runner(runner)


def test_verify_passes_torch_native_mxfp4():
    import moe_select
    from moe_select.registry import Registry

    plan = moe_select.plan({"arch": "auto", "quant": "mxfp4", "require_adapter": True, "model": {
        "num_experts": 8, "top_k": 2, "hidden_size": 128, "moe_intermediate_size": 64, "activation": "silu"}})
    runner = moe_select.resolve(plan, verify=True, registry=Registry())
    assert runner.spec.quant == "mxfp4"


def test_verify_passes_torch_native_nvfp4():
    import moe_select
    from moe_select.registry import Registry

    plan = moe_select.plan({"arch": "auto", "quant": "nvfp4", "require_adapter": True, "model": {
        "num_experts": 8, "top_k": 2, "hidden_size": 128, "moe_intermediate_size": 64}})
    assert moe_select.resolve(plan, verify=True, registry=Registry()).spec.quant == "nvfp4"

"""The engine author's trial (break53), its registry defects fixed as kinds: the registration check reads what the
plan's module registered, not what the process happens to hold (D7: a core registered as a side effect of importing
another module passed only where something had imported that module first); a module may register cores only for the
runners whose capability files name it, and one whose ``register`` fails takes back what it added (D7: a plugin that
registered under another runner's name took that runner for the rest of the process); a misspelt ``module:`` is not a
missing dependency (D9)."""
from __future__ import annotations

import sys

import pytest

import moe_select
from moe_select.errors import ResolveError
from moe_select.registry import Registry, RegistrationError
from moe_select.backends.torch_native import TorchNativeCore

from test_break53_kinds import _plan_and_env


class _Core(TorchNativeCore):
    pass


def test_a_core_someone_else_registered_is_not_the_modules(monkeypatch):
    """The plan's module registers nothing itself; the core sits in the registry because another module put it there
    (as importing a self-registering module does). Refused in every process, whatever was imported before."""
    from moe_select.backends import torch_native

    monkeypatch.setattr(torch_native, "register", lambda reg: None)
    reg = Registry()
    reg.register_core("torch_native", "standard", _Core)   # a side effect of some other import
    plan, env = _plan_and_env()
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env, device="cpu", registry=reg)
    assert exc.value.codes == ["no_adapter"]
    assert "did not register a torch_native core for standard dispatch (registered: [])" in str(exc.value)


def test_the_modules_own_registration_resolves():
    plan, env = _plan_and_env()
    runner = moe_select.resolve(plan, environment=env, device="cpu", registry=Registry())
    assert type(runner.core).__name__ == "TorchNativeCore"


def test_a_module_cannot_register_a_runner_it_does_not_own(monkeypatch):
    """torch_native's module registering a core under triton's name is refused (naming the runner and the module), and
    takes back the core it registered before, so the registry holds nothing of it afterwards."""
    from moe_select.backends import torch_native

    def hijack(reg):
        reg.register_core("torch_native", "standard", _Core)
        reg.register_core("triton", "standard", _Core)

    monkeypatch.setattr(torch_native, "register", hijack)
    reg = Registry()
    plan, env = _plan_and_env()
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env, device="cpu", registry=reg)
    said = str(exc.value)
    assert exc.value.codes == ["no_adapter"] and "runner 'triton'" in said and "moe_select.backends.torch_native" in said
    assert reg.pairs() == set()   # the torch_native core it added first is taken back too


def test_a_failed_register_takes_back_only_what_it_added():
    reg = Registry()
    reg.register_core("a", "standard", _Core)          # held before, by the same factory
    rec = reg.recording("m", frozenset({"a", "b"}))
    rec.register_core("a", "standard", _Core)          # idempotent: not this registrar's to take back
    rec.register_core("b", "standard", _Core)
    rec.register_dispatcher("x2x", lambda spec, group: None)
    rec.undo()
    assert reg.pairs() == {("a", "standard")} and reg.dispatcher("x2x") is None
    assert reg.registered_by["m"] == []


def test_owns_none_takes_any_runner():
    reg = Registry()
    reg.recording("m").register_core("anything", "standard", _Core)
    assert reg.core("anything", "standard") is _Core
    with pytest.raises(RegistrationError, match="does not name module m"):
        reg.recording("m", frozenset({"a"})).register_core("b", "standard", _Core)


def test_a_misspelt_module_is_not_a_missing_dependency():
    from moe_select.resolver import _load_adapter

    # the package is installed, the module is not: the capability file's module is wrong
    [r] = _load_adapter("moe_select.backends.torch_nativ", "runner torch_native", Registry())
    assert r.code == "no_adapter" and "spelt right" in r.detail and r.fix
    # the package itself is missing: install it
    [r] = _load_adapter("acme_not_installed_pkg.kernels", "runner acme", Registry())
    assert r.code == "dependency_missing" and "package acme_not_installed_pkg is not installed" in r.detail


def test_a_dependency_the_module_imports_is_missing(monkeypatch, tmp_path):
    (tmp_path / "acme_dep_mod.py").write_text("import acme_missing_third_party\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from moe_select.resolver import _load_adapter

    [r] = _load_adapter("acme_dep_mod", "runner acme", Registry())
    assert r.code == "dependency_missing" and "acme_missing_third_party" in r.detail
    sys.modules.pop("acme_dep_mod", None)


def test_an_edited_input_file_path_is_refused(tmp_path):
    """D8: the plan's model-config files are one folder's; an entry moved elsewhere (the absent hf_quant_config.json
    pointed at a path that never exists, then an NVFP4 one written beside config.json) is refused, not skipped."""
    import json
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "examples/model_configs/Qwen__Qwen3-30B-A3B"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes((src / "config.json").read_bytes())
    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "model_config": str(tmp_path / "m"),
                            "runner": "torch_native"})
    d = json.loads(plan.model_dump_json())
    files = d["deployment"]["input_files"]
    absent = next(k for k in files if k.endswith("hf_quant_config.json"))
    files["/nonexistent/hf_quant_config.json"] = files.pop(absent)
    (tmp_path / "m" / "hf_quant_config.json").write_text('{"producer": {"name": "modelopt"}, "quantization": '
                                                         '{"quant_algo": "NVFP4", "group_size": 16}}')
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(d, device="cpu")
    assert "plan_mismatch" in exc.value.codes and "not in one folder" in str(exc.value)
    with pytest.raises(ResolveError) as exc:   # the unedited plan: the file that appeared is named
        moe_select.resolve(plan, device="cpu")
    assert "appeared since the plan was made" in str(exc.value)

"""resolve(plan): refuses at startup what would fail later, and returns a working runner otherwise."""
from __future__ import annotations

import json
import sys
import threading

import pytest
import torch

import moe_select
from moe_select.environment import Environment
from moe_select.errors import InputError, ResolveError
from moe_select.registry import Registry, RegistrationError

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu", "routing": "renormalize"}


def cpu_plan(**kw):
    return moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True, **kw})


def env_like(plan, **changes) -> Environment:
    data = plan.environment.model_dump()
    data.update(changes)
    return Environment(**data)


def test_resolve_on_this_machine_gives_a_working_runner():
    plan = cpu_plan()
    assert plan.runner == "torch_native" and plan.arch == "cpu"
    runner = moe_select.resolve(plan)
    w13 = torch.randn(8, 64, 64, dtype=torch.bfloat16)
    w2 = torch.randn(8, 64, 32, dtype=torch.bfloat16)
    out = runner.run(torch.randn(3, 64, dtype=torch.bfloat16), torch.tensor([[0, 1], [2, 3], [7, 0]]),
                     torch.full((3, 2), 0.5), runner.prepare_weights(w13, w2))
    assert out.shape == (3, 64) and out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_plan_file_round_trip(tmp_path):
    from moe_select.cli import main

    f = tmp_path / "plan.json"
    assert main(["plan", "--arch", "auto", "--quant", "bf16", "--model", "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32",
                 "--require-adapter", "-o", str(f)]) == 0
    data = json.loads(f.read_text())
    assert data["runner"] == "torch_native" and data["fingerprint"].startswith("sha256:")
    assert moe_select.resolve(f).name == "torch_native"


def test_invalid_plan_file_names_line_and_field(tmp_path):
    f = tmp_path / "plan.json"
    data = json.loads(cpu_plan().to_json())
    data["runnr"] = data.pop("runner")
    f.write_text(json.dumps(data, indent=2))
    with pytest.raises(InputError) as exc:
        moe_select.resolve(f)
    assert "runnr" in str(exc.value) and f"{f}:" in str(exc.value)


def test_plan_for_another_arch_is_refused():
    plan = moe_select.plan({"gpu": "H200", "engine": "moe_select", "quant": "bf16", "model": SMALL, "runner": "torch_native",
                            "cuda_graph": False})
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan)
    assert exc.value.codes == ["plan_mismatch"]
    assert "sm90 (H200)" in str(exc.value) and "cpu" in str(exc.value)


def test_changed_rule_file_is_a_plan_mismatch(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("schema_version: 1\nrules:\n  - id: mine\n    when: {arch: [cpu]}\n    prefer: [torch_native]\n")
    plan = moe_select.plan({"arch": "auto", "engine": "moe_select", "quant": "bf16", "model": SMALL}, rules_dirs=[tmp_path])
    assert plan.chosen_by.rule == "mine"
    rules.write_text(rules.read_text() + "    note: edited\n")
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan)
    assert "plan_mismatch" in exc.value.codes and "rules.yaml changed" in str(exc.value)


def test_package_version_change_and_absence():
    plan = cpu_plan()
    torch_need = next(n for n in plan.packages if n.name == "torch")
    assert torch_need.state == "present"
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env_like(plan, packages={"torch": "2.4.0"}))
    # 2.4.0 still meets the runner's >=2.4: the refusal is the version change itself, said as such (a
    # planted-bug check found this branch could go with only the re-selection's generic mismatch left)
    assert "plan_mismatch" in exc.value.codes
    assert f"torch: {torch_need.found} when planned, 2.4.0 on this machine" in str(exc.value), str(exc.value)
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env_like(plan, packages={"torch": None}))
    assert exc.value.codes == ["dependency_missing"] and "torch >=2.4" in str(exc.value)


# A runner the engines ship that has no adapter in this install (deep_gemm was this example until it got one, issue 26).
PLAN_ONLY = {"gpu": "H200", "quant": "fp8_block", "runner": "marlin",
             "model": {**SMALL, "hidden_size": 256, "moe_intermediate_size": 256}}
PLAN_ONLY_ENV = Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages={"vllm": "0.33.0"})


def test_plan_only_runner_is_no_adapter():
    plan = moe_select.plan(PLAN_ONLY)
    assert plan.runner == "marlin" and plan.module is None
    env = PLAN_ONLY_ENV
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=env)
    assert exc.value.codes == ["no_adapter"] and "moe_select.adapters" in str(exc.value)


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    (tmp_path / "adapter_registers_nothing.py").write_text("def register(registry):\n    pass\n")
    (tmp_path / "adapter_without_register.py").write_text("X = 1\n")
    (tmp_path / "adapter_broken_import.py").write_text("import not_a_real_package_xyz\n")
    # found by a break-it session: these escaped resolve() as raw exceptions (a traceback in the CLI)
    (tmp_path / "adapter_raises_at_import.py").write_text("raise RuntimeError('no GPU driver')\n")
    (tmp_path / "adapter_exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "adapter_register_raises.py").write_text("def register(registry):\n    raise KeyError('torch_native')\n")
    (tmp_path / "adapter_register_wrong_signature.py").write_text("def register():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for m in ("adapter_registers_nothing", "adapter_without_register", "adapter_broken_import", "adapter_raises_at_import",
              "adapter_exits_at_import", "adapter_register_raises", "adapter_register_wrong_signature"):
        sys.modules.pop(m, None)


@pytest.mark.parametrize("module, code, text", [
    ("adapter_registers_nothing", "no_adapter", "did not register a torch_native core for standard dispatch"),
    ("adapter_without_register", "no_adapter", "has no register(registry)"),
    ("adapter_broken_import", "dependency_missing", "not_a_real_package_xyz"),
    ("adapter_raises_at_import", "no_adapter", "raised RuntimeError: no GPU driver"),
    ("adapter_exits_at_import", "no_adapter", "raised SystemExit: 3"),
    ("adapter_register_raises", "no_adapter", "register(registry) raised KeyError"),
    ("adapter_register_wrong_signature", "no_adapter", "register(registry) raised TypeError"),
])
def test_adapter_module_problems_are_startup_errors(fake_modules, module, code, text):
    import dataclasses

    from moe_select.catalog import load_catalog

    cat = load_catalog(use_env=False)
    cap = cat.runners["torch_native"].model_copy(update={"module": module})
    cat = dataclasses.replace(cat, runners={**cat.runners, "torch_native": cap})
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    assert plan.module == module
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, registry=Registry(), catalog=cat)
    assert exc.value.codes == [code] and text in str(exc.value) and module in str(exc.value)


def test_registration_is_explicit_idempotent_and_guarded():
    from moe_select.backends import torch_native

    reg = Registry()
    assert reg.pairs() == set()  # importing the module registered nothing
    torch_native.register(reg)
    torch_native.register(reg)
    assert reg.pairs() == {("torch_native", "standard")}
    with pytest.raises(RegistrationError, match="torch_native"):
        reg.register_core("torch_native", "standard", object)
    with pytest.raises(RegistrationError, match="dispatch format 'none' is not one of standard, padded_standard, batched, fused"):
        reg.register_core("torch_native", "none", object)


def test_concurrent_resolves_are_safe():
    plan = cpu_plan()
    reg = Registry()
    results, errors = [], []

    def go():
        try:
            results.append(moe_select.resolve(plan, registry=reg))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8
    assert len({type(r.core) for r in results}) == 1


def test_plugin_adapter_from_entry_point(tmp_path, monkeypatch):
    """A plan-only runner gets an adapter from a plugin registered under the moe_select.adapters group."""
    (tmp_path / "my_marlin_plugin.py").write_text(
        "from moe_select.backends.torch_native import TorchNativeCore\n"
        "class Core(TorchNativeCore):\n    pass\n"
        "def register(registry):\n    registry.register_core('marlin', 'standard', Core)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("moe_select.catalog.plugin_adapters", lambda: {"marlin": "my_marlin_plugin"})
    from moe_select.catalog import load_catalog

    cat = load_catalog(use_env=False)  # entry points are read once, when a catalog loads
    assert cat.plugins == {"marlin": "my_marlin_plugin"}
    plan = moe_select.plan(PLAN_ONLY, catalog=cat)
    assert plan.module == "my_marlin_plugin"
    runner = moe_select.resolve(plan, environment=PLAN_ONLY_ENV, device="cpu", registry=Registry(), catalog=cat)
    assert type(runner.core).__name__ == "Core" and runner.name == "marlin"
    sys.modules.pop("my_marlin_plugin", None)


@pytest.mark.parametrize("field, value", [("module", "os"), ("quant", "fp8_block"), ("cuda_graph", True),
                                          ("fingerprint", "sha256:00"), ("a2a_module", "json")])
def test_hand_edited_plan_is_refused(tmp_path, field, value):
    data = json.loads(cpu_plan().to_json())
    data[field] = value
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(f, registry=Registry())
    said = "fingerprint: the plan's inputs" if field == "fingerprint" else f"{field}: the plan says"
    assert "plan_mismatch" in exc.value.codes and said in str(exc.value)


def test_edited_deployment_inside_the_plan_is_refused(tmp_path):
    data = json.loads(cpu_plan().to_json())
    data["deployment"]["model"]["num_experts"] = 16
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(f, registry=Registry())
    assert "fingerprint: the plan's inputs (deployment or environment) differ" in str(exc.value)


def test_unavailable_device_and_bad_rank_are_resolve_errors():
    plan = cpu_plan()
    with pytest.raises(ResolveError, match="device cuda is not available"):
        moe_select.resolve(plan, device="cuda", registry=Registry())
    with pytest.raises(ResolveError, match="device 'tpu:7'"):
        moe_select.resolve(plan, device="tpu:7", registry=Registry())
    with pytest.raises(ResolveError, match="ep_rank 5 outside"):
        moe_select.resolve(plan, ep_rank=5, registry=Registry())


def test_refusal_lists_no_adapter_with_the_other_reasons():
    plan = moe_select.plan({"gpu": "H200", "quant": "fp8_block", "model": {**SMALL, "hidden_size": 128,
                            "moe_intermediate_size": 128}, "runner": "marlin"})
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan)
    assert {"plan_mismatch", "no_adapter"} <= set(exc.value.codes)


@pytest.mark.parametrize("edit", [
    lambda d: d.update(jit="x"), lambda d: d.update(packages=[]), lambda d: d.update(alternatives=["triton"]),
    lambda d: d.update(notes=["ok"]), lambda d: d["chosen_by"].update(rule="other"),
    lambda d: d["deployment"].update(tp="1"), lambda d: d["deployment"].update(tp=True),
    lambda d: d["deployment"]["model"].update(num_experts=8.0),
])
def test_any_edit_of_a_plan_is_refused(tmp_path, edit):
    data = json.loads(cpu_plan().to_json())
    edit(data)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(data))
    with pytest.raises((ResolveError, InputError)) as exc:
        moe_select.resolve(f, registry=Registry())
    assert isinstance(exc.value, InputError) or "plan_mismatch" in exc.value.codes


def test_resolves_hold_one_lock(tmp_path, monkeypatch):
    """Registration and building run under one lock: a second thread's register() never overlaps."""
    (tmp_path / "slow_register_adapter.py").write_text(
        "import threading, time\n"
        "from moe_select.backends.torch_native import TorchNativeCore\n"
        "inside, most, guard = 0, 0, threading.Lock()\n"
        "def register(registry):\n"
        "    global inside, most\n"
        "    with guard:\n        inside += 1\n        most = max(most, inside)\n"
        "    time.sleep(0.05)\n"
        "    registry.register_core('torch_native', 'standard', TorchNativeCore)\n"
        "    with guard:\n        inside -= 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dataclasses

    from moe_select.catalog import load_catalog

    cat = load_catalog(use_env=False)
    cap = cat.runners["torch_native"].model_copy(update={"module": "slow_register_adapter"})
    cat = dataclasses.replace(cat, runners={**cat.runners, "torch_native": cap})
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    reg, errors = Registry(), []
    env = moe_select.resolver.detect([(n.name, n.module) for n in plan.packages], arch=("cpu", None), need_nvcc=False)

    def go():
        try:
            moe_select.resolve(plan, registry=reg, catalog=cat, environment=env)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    mod = sys.modules.pop("slow_register_adapter")
    assert mod.most == 1


def test_fingerprint_covers_capability_file_contents(tmp_path):
    import shutil

    from moe_select.catalog import bundled_dirs, load_catalog

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(bundled_dirs()[0], a)
    shutil.copytree(bundled_dirs()[0], b)
    dep = {"gpu": "H200", "quant": "bf16", "model": SMALL}
    fa = moe_select.plan(dep, catalog=load_catalog(use_env=False, backends_dir=a)).fingerprint
    assert moe_select.plan(dep, catalog=load_catalog(use_env=False, backends_dir=b)).fingerprint == fa
    y = b / "triton.yaml"  # not the chosen runner's file, and no fact changes: a comment only
    y.write_text(y.read_text() + "# an operator's note\n")
    assert moe_select.plan(dep, catalog=load_catalog(use_env=False, backends_dir=b)).fingerprint != fa


def test_dispatcher_module_that_registers_nothing_is_no_adapter(tmp_path, monkeypatch):
    """The a2a module is imported and its registration checked at resolve, like a runner's (found by an
    independent planted-bug check: without the check, the first forward failed with a TypeError)."""
    import dataclasses

    from moe_select.catalog import load_catalog

    (tmp_path / "disp_registers_nothing.py").write_text("def register(registry):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cat = load_catalog(use_env=False)
    cat = dataclasses.replace(cat, a2a={**cat.a2a, "none": cat.a2a["none"].model_copy(update={"module": "disp_registers_nothing"})})
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    try:
        with pytest.raises(ResolveError) as exc:
            moe_select.resolve(plan, registry=Registry(), catalog=cat)
        assert exc.value.codes == ["no_adapter"] and "did not register dispatcher none" in str(exc.value)
    finally:
        sys.modules.pop("disp_registers_nothing", None)


def test_fingerprint_covers_the_quantization_parameters():
    m = {**SMALL, "hidden_size": 256, "moe_intermediate_size": 256}
    fps = {moe_select.plan({"gpu": "H200", "quant": "fp8_block", "quant_config": {"block": b}, "model": m}).fingerprint
           for b in ([128, 128], [64, 128])}
    assert len(fps) == 2


def test_resolve_arguments_outside_the_contract_are_typed_errors():
    """A non-group, a NaN timeout or a fractional rank raised ValueError/TypeError or failed at the first forward
    (break-it session): resolve raises ResolveError or InputError, naming the argument."""
    from moe_select.errors import InputError

    plan = cpu_plan()
    with pytest.raises(ResolveError, match="group:") as exc:
        moe_select.resolve(plan, group=object())
    assert exc.value.codes == ["parallelism_unsupported"]
    for bad in (float("nan"), 0, -1.0, float("inf"), True):
        with pytest.raises(InputError, match="timeout_s"):
            moe_select.resolve(plan, timeout_s=bad)
    for kw in ({"ep_rank": 0.5}, {"tp_rank": "0"}, {"ep_rank": True}):
        with pytest.raises(ResolveError, match="must be an integer"):
            moe_select.resolve(plan, **kw)

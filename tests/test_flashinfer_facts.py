"""flashinfer_cutlass facts that need no FlashInfer install: registration, the JIT fact in plans,
``require_prebuilt`` refusals and the prebuilt-module detection (FlashInfer 0.6.4's lookup order)."""
from __future__ import annotations

import pytest

import moe_select
from moe_select.backends import flashinfer_cutlass as fic
from moe_select.backends import flashinfer_jit
from moe_select.environment import Environment
from moe_select.errors import ResolveError
from moe_select.registry import Registry
from moe_select.resolver import check_environment


def test_register():
    reg = Registry()
    fic.register(reg)
    assert reg.pairs() == {("flashinfer_cutlass", "standard")}


MODEL = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
         "routing": "renormalize"}


def _plan(prebuilt):
    return moe_select.plan({"gpu": "H200", "quant": "bf16", "model": MODEL, "runner": "flashinfer_cutlass",
                            "prebuilt": {"flashinfer-python": prebuilt}, "packages": {"flashinfer-python": "0.6.4", "torch": "2.11.0"}})


def _env(prebuilt):
    return Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages={"flashinfer-python": "0.6.4", "torch": "2.11.0"},
                       prebuilt={"flashinfer-python": prebuilt})


def test_plan_says_first_call_compiles_and_require_prebuilt_refuses():
    plan = _plan(False)
    assert plan.jit is not None and "JIT-compiles" in plan.jit and "50 minutes" in plan.jit
    reasons = check_environment(plan, _env(False), require_prebuilt=True)
    assert [r.code for r in reasons] == ["dependency_missing"] and "require_prebuilt" in reasons[0].detail
    assert check_environment(plan, _env(False)) == []
    with pytest.raises(ResolveError) as err:
        moe_select.resolve(plan, environment=_env(False), require_prebuilt=True, device="cpu", registry=Registry())
    assert err.value.codes == ["dependency_missing"]



def test_detect_prebuilt_follows_flashinfers_lookup(tmp_path, monkeypatch):
    versions = {"flashinfer-python": "0.6.4", "flashinfer-jit-cache": None}
    monkeypatch.setattr(flashinfer_jit, "detect_package", lambda name, module: versions.get(name))
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    assert flashinfer_jit.detect_prebuilt("sm90") is False
    so = tmp_path / ".cache" / "flashinfer" / "0.6.4" / "90a" / "cached_ops" / "fused_moe_90" / "fused_moe_90.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"")
    assert flashinfer_jit.detect_prebuilt("sm90") is True         # built here before
    assert flashinfer_jit.detect_prebuilt("sm100") is False        # another module
    assert flashinfer_jit.detect_prebuilt("cpu") is False
    versions["flashinfer-jit-cache"] = "0.6.3+cu129"                   # FlashInfer refuses this mismatch
    assert flashinfer_jit.detect_prebuilt("sm90") is False
    versions["flashinfer-python"] = None
    assert flashinfer_jit.detect_prebuilt("sm90") is False


def test_detection_runs_through_the_jit_fact_and_is_keyed_by_package(monkeypatch):
    monkeypatch.setattr(flashinfer_jit, "detect_prebuilt", lambda arch: arch == "sm90")
    env = moe_select.environment.detect([], arch=("sm90", "H200"), need_nvcc=False,
                                        jit=[("flashinfer-python", "moe_select.backends.flashinfer_jit")])
    assert env.prebuilt == {"flashinfer-python": True}
    broken = moe_select.environment.detect([], arch=("sm90", "H200"), need_nvcc=False, jit=[("x", "no_such_module_xyz")])
    assert broken.prebuilt == {"x": None}  # a detector that cannot load means "not known", never a crash


def test_prebuilt_keys_must_be_jit_packages():
    import pytest as _pytest

    from moe_select.errors import InputError

    with _pytest.raises(InputError, match="'deep_gemm' is no runner's JIT package"):
        moe_select.plan({"gpu": "H200", "quant": "bf16", "model": MODEL, "prebuilt": {"deep_gemm": True}})


def test_run_prefers_a_runner_that_needs_no_build_and_says_so(tmp_path):
    """``moe-select run`` never starts a silent JIT build: with runner auto the next eligible runner in rule
    order whose first call builds nothing is taken, and the plan without that alternative is refused."""
    from moe_select.catalog import default_catalog
    from moe_select.harness.run import no_build_alternative

    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: fi-first\n    when: {arch: [sm90], quant: [bf16]}\n"
                                  "    prefer: [flashinfer_cutlass, torch_grouped_mm]\n")
    # as `run` plans (engine moe_select), eager: FlashInfer's capture under this install is not claimed
    dep = {"gpu": "H200", "quant": "bf16", "model": MODEL, "engine": "moe_select", "cuda_graph": False}
    built = moe_select.explain(dep, environment=_env(False), rules_dirs=[ops])
    assert built.plan.runner == "flashinfer_cutlass" and built.plan.jit is not None
    assert no_build_alternative(built, default_catalog([ops])) == "torch_grouped_mm"
    ready = moe_select.explain(dep, environment=_env(True), rules_dirs=[ops])
    assert ready.plan.runner == "flashinfer_cutlass" and ready.plan.jit is None

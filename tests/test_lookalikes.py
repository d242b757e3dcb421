"""Issue 21 part B.1: detection tells a kernel package from a look-alike without importing either.

``importlib.metadata`` normalises names, so a distribution ``deep-gemm`` is found for ``deep_gemm``, ``triton-kernels``
for ``triton_kernels``, ``deep-ep`` for ``deep_ep``; the module fallback finds any ``aiter`` module for AMD's AITER, and
AITER 0.1.7 was itself published as distribution ``aiter``. The markers in ``backends/packages.yaml`` (files the real
RECORD lists, text its METADATA names, other names it was published under) decide. Each test builds stub
distributions (a ``*.dist-info`` folder with METADATA and RECORD, and the files RECORD names) in a temporary folder
and searches only that folder (``path=``), or puts it on ``sys.path`` for the end-to-end checks.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import moe_select
from moe_select.catalog import default_catalog
from moe_select.environment import detect, inspect_package

SO = f"cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"


def make_dist(site: Path, name: str, version: str, files: list[str], *, meta: tuple[str, ...] = (),
              record: list[str] | None = None) -> Path:
    """A stub installed distribution in ``site``: each path of ``files`` written (empty), a ``<name>-<version>.dist-info``
    folder with METADATA (``meta``: extra header lines) and a RECORD listing ``record`` (default: ``files``) and the
    dist-info's own files. Returns the dist-info folder."""
    for rel in files:
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *meta]) + "\n")
    listed = (files if record is None else record) + [f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in listed))
    return info


@pytest.fixture(scope="module")
def markers():
    return default_catalog().package_markers()


def test_the_bundled_table_marks_the_four_packages_with_look_alikes(markers):
    assert {"deep_gemm", "sgl-deep-gemm", "deep_ep", "triton_kernels", "amd-aiter"} <= set(markers)
    assert markers["amd-aiter"].distributions == ["aiter"]
    for m in markers.values():
        assert m.source and (m.files or m.metadata)


def test_without_markers_a_normalised_name_passes_for_the_package(tmp_path):
    # what issue 21 found: PyPI's deep-gemm is deep_gemm to importlib.metadata
    make_dist(tmp_path, "deep-gemm", "1.0.0", ["deep_gemm/__init__.py", "deep_gemm/jit/compiler.py"])
    assert inspect_package("deep_gemm", "deep_gemm", None, path=[str(tmp_path)]).version == "1.0.0"


def test_pypi_deep_gemm_is_a_look_alike(tmp_path, markers):
    make_dist(tmp_path, "deep-gemm", "1.0.0", ["deep_gemm/__init__.py", "deep_gemm/jit/compiler.py",
                                                "deep_gemm/jit_kernels/gemm.py"])
    found = inspect_package("deep_gemm", "deep_gemm", markers["deep_gemm"], path=[str(tmp_path)])
    assert found.version is None
    assert "deep-gemm 1.0.0" in found.lookalike and "which is not deep_gemm" in found.lookalike
    assert "deep_gemm/_C*" in found.lookalike and "backends/packages.yaml" in found.lookalike
    assert str(tmp_path) in found.lookalike  # where it was found


@pytest.mark.parametrize("files", [
    ["deep_gemm/__init__.py", f"deep_gemm/_C.{SO}", "deep_gemm/include/deep_gemm/common/utils.cuh"],  # 2.x
    ["deep_gemm/__init__.py", f"deep_gemm_cpp.{SO}"],  # early 2.x: the extension at top level
    ["deep_gemm/__init__.py", "deep_gemm/include/deep_gemm/fp8_gemm.cuh"],  # 1.x: JIT headers only
])
def test_deep_gemm_with_its_markers_is_real(tmp_path, markers, files):
    make_dist(tmp_path, "deep_gemm", "2.6.1", files)
    found = inspect_package("deep_gemm", "deep_gemm", markers["deep_gemm"], path=[str(tmp_path)])
    assert found == found.__class__("2.6.1")


def test_pypi_triton_kernels_is_kernelize_not_openai(tmp_path, markers):
    make_dist(tmp_path, "triton-kernels", "0.1.0", ["triton_kernels/__init__.py", "triton_kernels/add_vectors.py",
                                                     "triton_kernels/rotary_embedding.py"],
              meta=("Author-email: Matthew Leone <matt@kernelize.ai>",
                    "Project-URL: Homepage, https://github.com/kernelize-ai/triton-kernels"))
    found = inspect_package("triton_kernels", "triton_kernels", markers["triton_kernels"], path=[str(tmp_path)])
    assert found.version is None and "triton-kernels 0.1.0" in found.lookalike and "Kernelize" in found.lookalike


def test_openai_triton_kernels_is_real(tmp_path, markers):
    make_dist(tmp_path, "triton_kernels", "1.0.0", ["triton_kernels/__init__.py", "triton_kernels/matmul_ogs.py",
                                                     "triton_kernels/numerics_details/mxfp.py"])
    assert inspect_package("triton_kernels", "triton_kernels", markers["triton_kernels"],
                           path=[str(tmp_path)]).version == "1.0.0"


def test_the_module_fallback_of_sglangs_fork_does_not_take_pypi_deep_gemm(tmp_path, markers):
    make_dist(tmp_path, "deep-gemm", "1.0.0", ["deep_gemm/__init__.py", "deep_gemm/jit/compiler.py"])
    assert inspect_package("sgl-deep-gemm", "deep_gemm", None, path=[str(tmp_path)]).version == "unknown"  # before
    found = inspect_package("sgl-deep-gemm", "deep_gemm", markers["sgl-deep-gemm"], path=[str(tmp_path)])
    assert found.version is None and "deep-gemm 1.0.0" in found.lookalike and "not sgl-deep-gemm" in found.lookalike
    make_dist(tmp_path / "fork", "sgl-deep-gemm", "0.1.7", ["deep_gemm/__init__.py", f"deep_gemm/_C.{SO}"])
    assert inspect_package("sgl-deep-gemm", "deep_gemm", markers["sgl-deep-gemm"],
                           path=[str(tmp_path / "fork")]).version == "0.1.7"


def test_deep_ep_without_its_extension_is_a_look_alike_and_with_it_real(tmp_path, markers):
    fake, real = tmp_path / "fake", tmp_path / "real"
    make_dist(fake, "deep-ep", "1.0.0", ["deep_ep/__init__.py", "deep_ep/buffer.py"])
    make_dist(real, "deep_ep", "1.2.1", ["deep_ep/__init__.py", "deep_ep/buffer.py", f"deep_ep_cpp.{SO}"])
    found = inspect_package("deep_ep", "deep_ep", markers["deep_ep"], path=[str(fake)])
    assert found.version is None and "deep-ep 1.0.0" in found.lookalike
    assert inspect_package("deep_ep", "deep_ep", markers["deep_ep"], path=[str(real)]).version == "1.2.1"
    v2 = tmp_path / "v2"
    make_dist(v2, "deep_ep", "2.1.0", ["deep_ep/__init__.py", f"deep_ep/_C.{SO}"])
    assert inspect_package("deep_ep", "deep_ep", markers["deep_ep"], path=[str(v2)]).version == "2.1.0"


def test_the_async_iterator_aiter_is_not_amd_aiter(tmp_path, markers):
    make_dist(tmp_path, "aiter", "0.13.20191203", ["aiter/__init__.py", "aiter/join_aiters.py", "aiter/push_aiter.py"],
              meta=("Home-page: https://github.com/richardkiss/aiter", "Author: Richard Kiss"))
    found = inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(tmp_path)])
    assert found.version is None
    assert "aiter 0.13.20191203" in found.lookalike and "which is not amd-aiter" in found.lookalike
    assert "async-iterator" in found.lookalike


def test_aiter_0_1_7_published_as_aiter_is_amd_aiter_at_its_version(tmp_path, markers):
    make_dist(tmp_path, "aiter", "0.1.7", ["aiter/__init__.py", "aiter/jit/core.py", "aiter/fused_moe.py",
                                            "aiter_meta/__init__.py"])
    assert inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(tmp_path)]).version == "0.1.7"


def test_amd_aiter_under_its_own_name(tmp_path, markers):
    make_dist(tmp_path, "amd-aiter", "0.1.20", ["aiter/__init__.py", "aiter/jit/core.py"])
    assert inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(tmp_path)]).version == "0.1.20"


def test_an_editable_install_is_judged_by_the_files_next_to_the_module(tmp_path, markers):
    # pip install -e: RECORD lists a .pth, the sources stay in the checkout (here on the search path too)
    site, checkout = tmp_path / "site", tmp_path / "aiter-src"
    make_dist(site, "amd-aiter", "0.1.20", ["__editable__.amd_aiter-0.1.20.pth"])
    for rel in ("aiter/__init__.py", "aiter/jit/core.py"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("")
    assert inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(site), str(checkout)]).version == "0.1.20"
    (checkout / "aiter/jit/core.py").unlink()
    assert inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(site), str(checkout)]).version is None


def test_a_module_without_a_distribution(tmp_path, markers):
    (tmp_path / "aiter").mkdir()
    (tmp_path / "aiter/__init__.py").write_text("")
    found = inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(tmp_path)])
    assert found.version is None and "found module aiter" in found.lookalike and "without a distribution" in found.lookalike
    (tmp_path / "aiter/jit").mkdir()
    (tmp_path / "aiter/jit/core.py").write_text("")
    assert inspect_package("amd-aiter", "aiter", markers["amd-aiter"], path=[str(tmp_path)]).version == "unknown"


def test_another_distribution_that_installed_the_module_with_the_markers(tmp_path, markers):
    # a fork under its own name that the row does not name (SGLang's sgl-deep-gemm installs deep_gemm): present,
    # its version not taken for the package's
    make_dist(tmp_path, "sgl-deep-gemm", "0.1.7", ["deep_gemm/__init__.py", f"deep_gemm/_C.{SO}"])
    assert inspect_package("deep_gemm", "deep_gemm", markers["deep_gemm"], path=[str(tmp_path)]).version == "unknown"


def test_nothing_installed_is_absent_without_a_look_alike(tmp_path, markers):
    assert inspect_package("deep_gemm", "deep_gemm", markers["deep_gemm"], path=[str(tmp_path)]) == \
        inspect_package("deep_gemm", "deep_gemm", None, path=[str(tmp_path)])


# ------------------------------------------------------------------ end to end: detect, explain, resolve's check
AITER_192 = {"arch": "gfx942", "quant": "bf16", "engine": "vllm", "runner": "aiter", "tp": 8,
             "model": {"num_experts": 128, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1536}}


def _detected(site: Path, monkeypatch) -> moe_select.environment.Environment:
    monkeypatch.syspath_prepend(str(site))
    catalog = default_catalog()
    return detect(catalog.packages(), arch=("gfx942", "MI300X"), need_nvcc=False, markers=catalog.package_markers())


def test_explain_names_the_look_alike_and_treats_the_package_as_absent(tmp_path, monkeypatch):
    make_dist(tmp_path, "aiter", "0.13.20191203", ["aiter/__init__.py", "aiter/join_aiters.py"],
              meta=("Home-page: https://github.com/richardkiss/aiter",))
    env = _detected(tmp_path, monkeypatch)
    assert env.packages["amd-aiter"] is None and "aiter 0.13.20191203" in env.lookalike("amd-aiter")
    report = moe_select.explain(AITER_192, environment=env)
    assert report.plan is None
    [reason] = [r for c in report.candidates if c.backend == "aiter" for r in c.reasons if r.code == "dependency_missing"]
    assert "amd-aiter" in reason.detail and "aiter 0.13.20191203" in reason.detail and "not amd-aiter" in reason.detail
    text = report.render_text()
    assert "amd-aiter absent (a look-alike was found)" in text and "note: amd-aiter is absent: found distribution aiter" in text


def test_aiter_0_1_7_as_aiter_meets_the_version_gated_facts(tmp_path, monkeypatch):
    # AITER 0.1.7 (distribution aiter) on gfx942: the <0.1.8 bf16 tiling fact applies (192 rows per rank refused),
    # where before it the module fallback gave no version and the facts were decided at the newest version checked
    make_dist(tmp_path, "aiter", "0.1.7", ["aiter/__init__.py", "aiter/jit/core.py", "aiter_meta/__init__.py"])
    env = _detected(tmp_path, monkeypatch)
    assert env.packages["amd-aiter"] == "0.1.7" and env.lookalike("amd-aiter") is None
    report = moe_select.explain(AITER_192, environment=env)
    [cand] = [c for c in report.candidates if c.backend == "aiter"]
    assert any(r.code == "shape_unaligned" and "before 0.1.8" in r.detail for r in cand.reasons), cand.reasons


def test_resolve_check_names_the_look_alike(tmp_path, monkeypatch):
    from moe_select.plans import PackageNeed
    from moe_select.resolver import check_environment

    make_dist(tmp_path, "deep-gemm", "1.0.0", ["deep_gemm/__init__.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog = default_catalog()
    env = detect([("deep_gemm", "deep_gemm"), ("sgl-deep-gemm", "deep_gemm")], arch=("sm90", "H200"), need_nvcc=False,
                 markers=catalog.package_markers())
    assert env.packages == {"deep_gemm": None, "sgl-deep-gemm": None}
    assert "deep-gemm 1.0.0" in env.lookalike("deep_gemm") and "deep-gemm 1.0.0" in env.lookalike("sgl-deep-gemm")
    plan = moe_select.plan({"arch": "cpu", "quant": "bf16", "engine": "moe_select",
                            "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}})
    need = PackageNeed(name="deep_gemm", module="deep_gemm", version=None, state="assumed", found=None, needed_by="a test",
                       source="tests/test_lookalikes.py")
    reasons = check_environment(plan.model_copy(update={"packages": [need]}), env)
    assert any(r.code == "dependency_missing" and "deep-gemm 1.0.0" in r.detail for r in reasons), reasons

"""The wheel ships backends/, rules/ and schemas/ inside moe_select, works without the source tree,
and installs no bare top-level `backends` module."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from moe_select.catalog import bundled_dirs
from moe_select.schema_gen import drift

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return next(out.glob("moe_select-*.whl"))


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert not any(n.startswith(("backends/", "rules/", "schemas/")) for n in names)
    for must in ("moe_select/backends/torch_native.yaml", "moe_select/backends/torch_native.py",
                 "moe_select/backends/a2a/none.yaml", "moe_select/backends/common.yaml",
                 "moe_select/rules/10-nvidia.yaml", "moe_select/schemas/rules.schema.json"):
        assert must in names, must
    assert any(n.endswith("entry_points.txt") for n in names)


def test_wheel_works_without_the_source_tree(wheel, tmp_path):
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    code = ("import moe_select, sys; "
            "r = moe_select.explain({'gpu': 'H200', 'quant': 'fp8_tensor', 'engine': 'moe_select', 'model': {'num_experts': 8, "
            "'top_k': 2, 'hidden_size': 64, 'moe_intermediate_size': 32}}); "
            "assert moe_select.__file__.startswith(sys.argv[1]), moe_select.__file__; print(r.plan.runner)\n"
            "try:\n    import backends\nexcept ImportError:\n    print('no-top-level-backends')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    p = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["torch_grouped_mm", "no-top-level-backends"]


def test_no_bare_backends_even_from_the_repo_root():
    p = subprocess.run([sys.executable, "-c", "import backends"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode != 0 and "import moe_select.backends" in p.stderr


def test_schemas_match_the_models():
    from moe_select.schema_gen import text_differs

    if text_differs():
        pytest.skip(text_differs())
    assert drift() == []


def test_every_bundled_yaml_references_its_schema():
    bdir, rdir = bundled_dirs()
    for f in [*bdir.glob("*.yaml"), *(bdir / "a2a").glob("*.yaml"), *rdir.glob("*.yaml")]:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema=") and "schemas/" in first, f
        schema = (f.parent / first.split("$schema=")[1]).resolve()
        assert schema.is_file(), (f, schema)

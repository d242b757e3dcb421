"""A temporary plugin distribution for tests: a package of files registered under moe-select's entry-point
group ``moe_select.backends``, installed with pip into a folder of its own (``--target``, no network, no
build isolation) and put on ``PYTHONPATH`` of a child process. Nothing of this repository or of the test
environment changes: the install tests/test_plugin.py does, as a function (tests/test_recipes.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"

[project.entry-points."moe_select.backends"]
{entry} = "{package}"

[tool.setuptools]
packages = [{packages}]

[tool.setuptools.package-data]
{package} = ["*.yaml", "rules/*.yaml", "a2a/*.yaml"]
"""

#: The files every plugin package has besides the recipe's own (packaging, not moe-select's): its
#: ``pyproject.toml`` and the package's ``__init__.py``.
SCAFFOLD = ("pyproject.toml", "__init__.py")


def install_plugin(tmp_path: Path, package: str, files: dict[str, str], *, dist: str | None = None,
                   entry: str = "toy") -> dict[str, str]:
    """Write ``files`` (path inside the package -> text) into package ``package`` with the :data:`SCAFFOLD`,
    pip-install it into ``tmp_path/site`` and return the environment of a child process that sees it (the
    current environment with ``site`` first on ``PYTHONPATH``). Raises AssertionError with pip's output when
    the install fails."""
    src = tmp_path / "src"
    pkg = src / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (src / "pyproject.toml").write_text(PYPROJECT.format(dist=dist or package.replace("_", "-") + "-plugin", entry=entry,
                                                         package=package, packages=f'"{package}"'), encoding="utf-8")
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                          "--target", str(site), str(src)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))


def run_json(script: str, env: dict[str, str] | None, cwd: Path) -> dict:
    """Run ``script`` with this Python in ``cwd`` (``env``: None for the current one); return the JSON object it
    prints last. Raises AssertionError with its stderr when it fails."""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])

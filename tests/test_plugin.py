"""An out-of-tree runner: a tiny plugin package with its own capability file, rule and adapter, installed
into a temporary environment (pip --target, no network), is planned, resolved and run without any file
of this repository changing; its facts show their origin and enter the plan's fingerprint."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

CAPABILITY = """\
schema_version: 2
runner: toy_runner
summary: a toy runner shipped by a plugin (the reference core under another name)
source: "this project: tests/test_plugin.py"
module: toy_moe.adapter
registers: [standard]
support:
  - {archs: [cpu], formats: [bf16], source: "this project: tests/test_plugin.py"}
activations: {values: [silu], source: "this project: tests/test_plugin.py"}
routing: {values: any, source: "this project: tests/test_plugin.py"}
dispatch: {formats: [standard], source: "this project: tests/test_plugin.py"}
cuda_graph: {supported: false, source: "this project: tests/test_plugin.py"}
"""
RULE = """\
schema_version: 1
rules:
  - id: toy-first-on-cpu
    when: {arch: [toy_host]}
    prefer: [toy_runner]
"""
# The plugin's own vocabulary (issue 18): a family its rule names, which no bundled file declares.
VOCABULARY = """\
schema_version: 3
families:
  - {name: toy_host, members: [cpu], source: "this project: tests/test_plugin.py"}
"""
ADAPTER = """\
from moe_select.backends.torch_native import TorchNativeCore


class ToyCore(TorchNativeCore):
    pass


def register(registry):
    registry.register_core("toy_runner", "standard", ToyCore)
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "toy-moe-plugin"
version = "0.1.0"

[project.entry-points."moe_select.backends"]
toy = "toy_moe"

[tool.setuptools]
packages = ["toy_moe"]

[tool.setuptools.package-data]
toy_moe = ["*.yaml", "rules/*.yaml"]
"""
SCRIPT = """\
import json, sys
import torch
import moe_select
from moe_select.harness.weights import layer_weights
from moe_select.reference import reference_moe, rel_error

model = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
report = moe_select.explain({"arch": "auto", "quant": "bf16", "model": model, "require_adapter": True})
plan = report.plan
runner = moe_select.resolve(plan)
w = layer_weights(runner.spec, model, seed=1)
x = torch.randn(5, 64, dtype=torch.bfloat16)
ids = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7], [1, 2]], dtype=torch.int32)
wts = torch.full((5, 2), 0.5)
out = runner.run(x, ids, wts, runner.prepare_weights(w.pop("w13"), w.pop("w2")))
ref = reference_moe(x, ids, wts, layer_weights(runner.spec, model, seed=1)["w13"], layer_weights(runner.spec, model, seed=1)["w2"])
print(json.dumps({"runner": plan.runner, "rule": plan.chosen_by.rule, "module": plan.module, "core": type(runner.core).__name__,
                  "origins": report.origins, "files": sorted(plan.files), "fingerprint": plan.fingerprint,
                  "error": rel_error(out, ref)}))
"""


def test_plugin_brings_its_facts_rule_and_adapter(tmp_path):
    src = tmp_path / "src"
    pkg = src / "toy_moe"
    (pkg / "rules").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "adapter.py").write_text(ADAPTER)
    (pkg / "toy_runner.yaml").write_text(CAPABILITY)
    (pkg / "rules" / "10-toy.yaml").write_text(RULE)
    (pkg / "vocabulary.yaml").write_text(VOCABULARY)
    (src / "pyproject.toml").write_text(PYPROJECT)
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                          "--target", str(site), str(src)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["runner"] == "toy_runner" and got["rule"] == "toy-first-on-cpu" and got["module"] == "toy_moe.adapter"
    assert got["core"] == "ToyCore" and got["error"] < 2e-2
    yaml_file = str((site / "toy_moe" / "toy_runner.yaml").resolve())
    assert any(f.endswith("toy_moe/toy_runner.yaml") for f in got["files"])  # hashed into the plan
    assert any(f.endswith("toy_moe/vocabulary.yaml") for f in got["files"])  # its family decided the rule
    assert any("plugin toy-moe-plugin" in origin for origin in got["origins"].values()), got["origins"]
    # `moe-select check` sees the plugin's files too, and the bundled ones are untouched
    chk = subprocess.run([sys.executable, "-m", "moe_select", "check"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "toy_runner" not in chk.stdout or "error" not in chk.stdout.split("toy_runner")[1].split("\n")[0], chk.stdout
    # the same deployment without the plugin plans the bundled reference: the plugin changed nothing here
    plain = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode == 0 and json.loads(plain.stdout.strip().splitlines()[-1])["runner"] == "torch_native"
    assert textwrap.dedent(yaml_file)  # the path is real

"""The README's recipes ("Hand-edited files to add": (a) a runner, (b) a quantization format, (c) a GPU
architecture, (d) an all-to-all backend), each done for real: in a temporary plugin distribution where a
plugin can do it (tests/plugin_kit.py, the install tests/test_plugin.py does), else in a copy of the bundled
capability folder. Each asserts that the new thing is planned with the evidence level the facts give it,
and that the README's file count for the recipe is the number of files the test writes (a plugin's
packaging, ``pyproject.toml`` and ``__init__.py``, is not the recipe's)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_kit import install_plugin, run_json

from conftest import ROOT

pytestmark = pytest.mark.slow

SRC = '"this project: tests/test_recipes.py"'


def readme_count(label: str) -> int:
    """The file count the README's recipe ``label`` (``a`` ... ``d``) states: its first bold number."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"- **({label}) ")
    end = text.find("\n- **(", start + 1)
    m = re.search(r"\*\*(\d+)\*\*", text[start:end if end > 0 else None])
    assert m, f"README recipe ({label}) states no **N** file count"
    return int(m.group(1))


# ----------------------------------------------------------------------------------------- (a) a runner
RUNNER = f"""\
schema_version: 3
runner: toy_runner
summary: a toy runner shipped by a plugin (the reference core under another name)
source: {SRC}
module: toy_runner_pkg.adapter
registers: [standard]
support:
  - {{archs: [cpu], formats: [bf16], source: {SRC}}}
activations: {{values: [silu], source: {SRC}}}
routing: {{values: any, source: {SRC}}}
dispatch: {{formats: [standard], source: {SRC}}}
a2a: {{values: [none], source: {SRC}}}
cuda_graph: {{supported: false, source: {SRC}}}
lists: {{archs: open, formats: open, support: open, activations: open, routing: open, dispatch: open, a2a: open,
        cuda_graph: open, engines: open}}
"""
ADAPTER = """\
from moe_select.backends.torch_native import TorchNativeCore


class ToyCore(TorchNativeCore):
    pass


def register(registry):
    registry.register_core("toy_runner", "standard", ToyCore)
"""
RULE = """\
schema_version: 1
rules:
  - id: toy-first-on-cpu
    when: {arch: [cpu], quant: [bf16]}
    prefer: [toy_runner]
"""
PLAN_AND_RESOLVE = """\
import json, moe_select
model = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}
report = moe_select.explain({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": model})
p = report.plan
runner = moe_select.resolve(p)
print(json.dumps({"runner": p.runner, "evidence": p.evidence, "rule": p.chosen_by.rule, "module": p.module,
                  "core": type(runner.core).__name__}))
"""


def test_recipe_a_runner(tmp_path):
    """(a): a capability file, an adapter and a rule naming it: the runner is chosen on its rule's cells with
    evidence supported (every part of the deployment is a fact of its file) and resolves to its core. Planned for this
    install (engine moe_select): a serving engine's closed runner option refuses a name it does not take."""
    recipe = {"toy_runner.yaml": RUNNER, "adapter.py": ADAPTER, "rules/10-toy.yaml": RULE}
    assert len(recipe) == readme_count("a")
    env = install_plugin(tmp_path, "toy_runner_pkg", recipe)
    got = run_json(PLAN_AND_RESOLVE, env, tmp_path)
    assert got == {"runner": "toy_runner", "evidence": "supported", "rule": "toy-first-on-cpu", "module": "toy_runner_pkg.adapter",
                   "core": "ToyCore"}


# ------------------------------------------------------------------------------- (b) a quantization format
FORMAT_ROW = f"""\
  - name: int4_w4a8_tensor
    summary: int4 weights in groups of 128, FP8 per-tensor activations (a toy row for the recipe)
    source: {SRC}
    dtype: uint8
    bits: 4
    activation: fp8_tensor
    scales:
      - {{name: scale, shape: "[E, N, K/group]", dtype: float32, per: 128}}
    params: {{group_size: 128}}
"""
SUPPORT_ROW = f"""\
  - archs: [sm90]
    formats: [int4_w4a8_tensor]
    when: {{engine: [sglang]}}
    source: {SRC}
"""
PLAN_FORMAT = """\
import json, sys
from pathlib import Path
import moe_select
from moe_select.catalog import load_catalog

model = {"num_experts": 8, "top_k": 2, "hidden_size": 256, "moe_intermediate_size": 128}
dep = {"arch": "sm90", "engine": "sglang", "runner": "triton", "quant": "int4_w4a8_tensor", "model": model}
out = {}
for name, folder, quant in (("before", None, "int4_w4a8_tensor"), ("after", Path(sys.argv[1]), "int4_w4a8_tensor"), ("bf16", None, "bf16")):
    cat = load_catalog(backends_dir=folder, use_env=False, plugins=False)
    report = moe_select.explain({**dep, "quant": quant}, catalog=cat)
    p = report.plan
    out[name] = {"evidence": report.evidence, "runner": p and p.runner, "precision": p and p.activation_precision,
                 "unknowns": sorted(u.code for u in p.unknowns) if p else None}
print(json.dumps(out))
"""


def test_recipe_b_format(tmp_path):
    """(b): a row in backends/formats.yaml and a support row in the capability file of the runner that runs it
    (here SGLang's triton on sm90, plan-only in this install), done in a copy of the bundled capability folder (format
    rows are bundled only: a plugin cannot add one yet). Before, the format is planned unverified (no row, no fact:
    one unknown more than bf16 on the same deployment); after, with bf16's evidence level and unknowns, at the
    activation precision its row fixes. A runner with an adapter here (torch_native under this install) would also need
    the adapter's code to compute it (it refuses the format as no_adapter until then); a plan-only runner needs none."""
    from moe_select.catalog import bundled_dirs

    folder = tmp_path / "backends"
    shutil.copytree(bundled_dirs()[0], folder, ignore=shutil.ignore_patterns("__pycache__", "*.py", "triton_configs"))
    edited = {folder / "formats.yaml": FORMAT_ROW, folder / "triton.yaml": SUPPORT_ROW}
    assert len(edited) == readme_count("b")
    fmt = folder / "formats.yaml"
    fmt.write_text(fmt.read_text(encoding="utf-8") + FORMAT_ROW, encoding="utf-8")
    tn = folder / "triton.yaml"
    text = tn.read_text(encoding="utf-8")
    at = text.index("\nactivations:") + 1  # the support list ends where the activations begin
    tn.write_text(text[:at] + SUPPORT_ROW + text[at:], encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", PLAN_FORMAT, str(folder)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    import json

    got = json.loads(run.stdout.strip().splitlines()[-1])
    before, after, bf16 = got["before"], got["after"], got["bf16"]
    assert (before["evidence"], before["runner"]) == ("unverified", "triton")
    assert before["unknowns"] == sorted(bf16["unknowns"] + ["quant_unsupported"])  # the format is what no fact covers
    # after: the format is as settled as bf16 is for the same runner (the rest of the facts decide the level)
    assert after == {**bf16, "precision": "fp8_tensor"} and after["runner"] == "triton"


# ---------------------------------------------------------------------------------- (c) a GPU architecture
VOCABULARY = f"""\
schema_version: 3
archs:
  - {{name: sm105, vendor: nvidia, products: [TOY B999], source: {SRC}}}
"""
PLAN_ARCH = """\
import json, moe_select
from moe_select.errors import InputError
model = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768}
try:
    report = moe_select.explain({"gpu": "Toy B999", "quant": "nvfp4", "model": model})
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    p = report.plan
    print(json.dumps({"arch": report.deployment.arch, "evidence": report.evidence, "runner": p and p.runner,
                      "rule": p and p.chosen_by.rule,
                      "unknowns": sorted({u.code for u in p.unknowns if "sm105" in u.detail}) if p else None}))
"""


def test_recipe_c_architecture(tmp_path):
    """(c): one data file, a vocabulary.yaml declaring the arch and its product name. A deployment naming the
    product plans for it through the rules of its family (sm10x: every compute capability 10.x), unverified:
    no support row names sm105 yet (the unknowns say so). Without the file the product is unknown input."""
    recipe = {"vocabulary.yaml": VOCABULARY}
    assert len(recipe) == readme_count("c")
    without = run_json(PLAN_ARCH, None, tmp_path)
    assert "unknown GPU 'Toy B999'" in without["error"]
    env = install_plugin(tmp_path, "toy_arch_pkg", recipe)
    got = run_json(PLAN_ARCH, env, tmp_path)
    assert got["arch"] == "sm105" and got["evidence"] == "unverified"
    assert got["rule"] == "blackwell-nvfp4" and got["runner"]
    assert "arch_unsupported" in got["unknowns"]


# ------------------------------------------------------------------------------ (d) an all-to-all backend
A2A = f"""\
schema_version: 3
a2a: toy_a2a
summary: a toy all-to-all shipped by a plugin (torch.distributed all_to_all_single under another name)
source: {SRC}
module: toy_a2a_pkg.dispatch_toy_a2a
archs: {{values: [cpu], source: {SRC}}}
format: standard
cuda_graph: {{supported: false, source: {SRC}}}
constraints:
  - {{field: ep, min: 2, code: parallelism_unsupported, why: "an all-to-all implies expert parallelism", source: {SRC}}}
lists: {{archs: open}}
"""
DISPATCHER = """\
from moe_select.backends.a2a.dispatch_torch import TorchAllToAll


def register(registry):
    registry.register_dispatcher("toy_a2a", TorchAllToAll)
"""
PLAN_A2A = """\
import json, moe_select
model = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}
report = moe_select.explain({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": model, "tp": 2, "ep": 2,
                             "a2a": "toy_a2a"})
p = report.plan
try:
    moe_select.resolve(p, ep_rank=0, tp_rank=0)
    resolved = "resolved"
except moe_select.ResolveError as exc:
    resolved = str(exc)
print(json.dumps({"evidence": report.evidence, "runner": p.runner, "a2a_module": p.a2a_module, "formats": p.dispatch_formats,
                  "unknowns": [(u.code, u.source.split(":")[0], "toy_a2a" in u.detail) for u in p.unknowns], "resolved": resolved}))
"""


def test_recipe_d_all_to_all(tmp_path):
    """(d): a capability file and a dispatcher. A deployment with it plans with the runner its rules choose,
    unverified where that runner's a2a list is open and does not name it (torch_native: none, torch), with
    the plugin's dispatcher module; resolve loads that module and finds the dispatcher registered (it then asks
    for the process group, which a single process does not give)."""
    recipe = {"a2a/toy_a2a.yaml": A2A, "dispatch_toy_a2a.py": DISPATCHER}
    assert len(recipe) == readme_count("d")
    env = install_plugin(tmp_path, "toy_a2a_pkg", recipe)
    got = run_json(PLAN_A2A, env, tmp_path)
    assert got["evidence"] == "unverified" and got["runner"] == "torch_native"
    assert got["a2a_module"] == "toy_a2a_pkg.dispatch_toy_a2a" and got["formats"] == ["standard"]
    assert ["a2a_unsupported", "backends/torch_native.yaml", True] in got["unknowns"], got["unknowns"]
    assert "no_adapter" not in got["resolved"] and "process group" in got["resolved"], got["resolved"]


def test_readme_counts_are_read():
    """The counts this file checks, as the README states them."""
    assert [readme_count(x) for x in "abcd"] == [3, 2, 1, 2]
    assert Path(__file__).name == "test_recipes.py"

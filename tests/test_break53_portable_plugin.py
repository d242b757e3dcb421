"""The engine author's trial (break53, D5): a plan made where a plugin is installed in one environment resolves where
the same plugin sits under another install prefix. Plugin files were keyed in ``plan.files`` by their absolute path,
so every plugin file was 'gone' and 'new' (plan_mismatch) on any host with another prefix; they are keyed by their
path below the ``sys.path`` entry that holds them."""
from __future__ import annotations

import json
import subprocess
import sys

from plugin_kit import install_plugin
from test_recipes import ADAPTER, RULE, RUNNER

PLAN = """\
import json, sys, moe_select
model = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}
p = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": model})
open(sys.argv[1], "w").write(p.model_dump_json())
print(json.dumps({"runner": p.runner, "files": sorted(p.files)}))
"""

RESOLVE = """\
import json, sys, moe_select
try:
    r = moe_select.resolve(sys.argv[1])
    print(json.dumps({"core": type(r.core).__name__}))
except moe_select.ResolveError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def test_a_plugin_plan_resolves_under_another_install_prefix(tmp_path):
    recipe = {"toy_runner.yaml": RUNNER, "adapter.py": ADAPTER, "rules/10-toy.yaml": RULE}
    env_a = install_plugin(tmp_path / "a", "toy_runner_pkg", recipe)
    env_b = install_plugin(tmp_path / "b", "toy_runner_pkg", recipe)
    plan = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-c", PLAN, str(plan)], capture_output=True, text=True, env=env_a, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    made = json.loads(run.stdout.strip().splitlines()[-1])
    assert made["runner"] == "toy_runner"
    plugin_files = [f for f in made["files"] if "toy_runner_pkg" in f]
    assert sorted(plugin_files) == ["toy_runner_pkg/rules/10-toy.yaml", "toy_runner_pkg/toy_runner.yaml"]
    assert not any(f.startswith("/") for f in plugin_files), plugin_files
    got = json.loads(subprocess.run([sys.executable, "-c", RESOLVE, str(plan)], capture_output=True, text=True,
                                    env=env_b, cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert got == {"core": "ToyCore"}, got

"""The fast paths of planning give the answers of the plain ones: the layers a quantization config leaves
unquantized (found without testing every module name of every layer), tp/ep fix suggestions with their
verdicts shared between engines, and plugin discovery that skips importlib.metadata when nothing is
declared. (Latency itself is measured by benchmarks/explain_latency.py, not asserted here.)"""
from __future__ import annotations

import json
import random
import sys

import pytest

from moe_select import entrypoints
from moe_select.conditions import facts_of, parallel_fixes
from moe_select.model_config import _EXPERT_TAILS, _LAYER_PREFIXES, _Exclusions, _expert_modules, _runs


def _brute(ex: _Exclusions, layers: list[int]) -> set[int]:
    return {i for i in layers if ex.covers(_expert_modules(i))}


def _random_entries(rng: random.Random, n: int) -> list[str]:
    """Entries of the kinds real configs list: runs of real expert module names (any layer), other
    modules of a layer, bare names, and near misses."""
    out = []
    for _ in range(n):
        name = f"{rng.choice(_LAYER_PREFIXES)}.{rng.randrange(70)}.{rng.choice(_EXPERT_TAILS)}"
        seg = name.split(".")
        i = rng.randrange(len(seg))
        j = rng.randrange(i + 1, len(seg) + 1)
        kind = rng.randrange(6)
        if kind == 0:
            out.append(".".join(seg[i:j]))
        elif kind == 1:
            out.append(f"model.layers.{rng.randrange(70)}.{rng.choice(['mlp.gate', 'self_attn.q_proj', 'input_layernorm'])}")
        elif kind == 2:
            out.append(rng.choice(["lm_head", "gate", "experts", "0", "mlp", "model", "layers", "w1", "down_proj", ""]))
        elif kind == 3:
            out.append(".".join(seg[i:j]) + rng.choice(["x", ".x", "_proj"]))
        elif kind == 4:
            out.append(f"{rng.randrange(70)}.{'.'.join(seg[i:j])}")
        else:
            out.append(f"layers.{rng.randrange(70)}")
    return out


def test_covered_layers_matches_testing_every_name(seed):
    rng = random.Random(seed)
    layers = list(range(64))
    for _ in range(300):
        segments = _random_entries(rng, rng.randrange(0, 12))
        exact = _random_entries(rng, rng.randrange(0, 3))
        globs = rng.choice([[], ["*.7.mlp.experts*"], ["model.layers.1?.mlp.experts.0"]])
        ignore = exact + rng.choice([[], ["re:.*\\.3\\.mlp\\.experts.*"], ["re:["]])
        ex = _Exclusions(globs, ignore, segments)
        assert ex.covered_layers(layers) == _brute(ex, layers), (segments, globs, ignore)


def test_covered_layers_on_the_bundled_configs(configs):
    for cfg in sorted(configs.glob("*/config.json")):
        data = json.loads(cfg.read_text())
        q = data.get("quantization_config") or (data.get("text_config") or {}).get("quantization_config") or {}
        ex = _Exclusions(q.get("exclude_modules") or [], q.get("ignore") or [], q.get("modules_to_not_convert") or [])
        layers = list(range(100))
        assert ex.covered_layers(layers) == _brute(ex, layers), cfg


def test_runs_are_whole_segments():
    assert _runs("a.b.c") == {"a", "b", "c", "a.b", "b.c", "a.b.c"}
    ex = _Exclusions([], [], ["gate"])
    assert not ex.covered_layers([0, 1])  # gate is not gate_proj


def _reference_fixes(constraint, facts, max_tp=64, also=()):
    """parallel_fixes as first written (every pair tested, no memo, every match sorted): the oracle."""
    from moe_select.conditions import with_parallelism

    def ok(tp, ep):
        f = with_parallelism(facts, tp, ep)
        return tp % ep == 0 and all(not c.applies(f) or c.violation(f) is None for c in (constraint, *also))

    tp, ep = facts["tp"], facts["ep"]
    eps = [e for e in range(1, tp + 1) if tp % e == 0 and e != ep and ok(tp, e)]
    tps = [t for t in range(1, max_tp + 1) if t % ep == 0 and t != tp and ok(t, ep)]
    parts = []
    if eps:
        parts.append(f"ep in {{{', '.join(map(str, eps))}}} (tp {tp})" if len(eps) > 1 else f"set ep: {eps[0]} (tp {tp})")
    if tps:
        parts.append(f"tp in {{{', '.join(map(str, tps[:8]))}{', ...' if len(tps) > 8 else ''}}} (ep {ep})")
    if not parts:
        pairs = sorted(((t, e) for t in range(1, max_tp + 1) for e in range(1, t + 1) if t % e == 0 and ok(t, e)),
                       key=lambda p: (abs(p[0] - tp), p[0], abs(p[1] - ep)))[:4]
        if pairs:
            parts.append("(tp, ep) in {" + ", ".join(f"({t}, {e})" for t, e in pairs) + "}")
    return ", or ".join(parts) or None


def test_parallel_fixes_give_the_fixes_of_the_plain_search(seed):
    """With verdicts shared between the engines of one deployment (the selector's memo) and the nearest
    pairs found nearest first, every fix is the one the plain search gives."""
    from moe_select.catalog import default_catalog

    catalog = default_catalog()
    common = catalog.common.constraints
    constraints = [*common, *(c for r in catalog.runners.values() for c in r.constraints),
                   *(c for a in catalog.a2a.values() for c in a.constraints)]
    rng = random.Random(seed)
    seen = {"pairs": 0, "single": 0}
    for _ in range(25):
        tp = rng.choice([1, 2, 3, 4, 6, 8, 16])
        ep = rng.choice([e for e in (1, 2, 4, 8) if tp % e == 0])
        base = dict(arch="sm90", quant=rng.choice(["fp8_block", "bf16", "int4_w4a16"]), a2a=rng.choice(["none", "deepep"]),
                    activation="silu", routing="renormalize", cuda_graph=True, tp=tp, ep=ep,
                    num_experts=rng.choice([60, 64, 128, 256]), top_k=8, hidden_size=rng.choice([2048, 4096, 7168]),
                    moe_intermediate_size=rng.choice([768, 1408, 2048, 96 * 7]), block=(128, 128), group_size=128,
                    dp=rng.choice([None, 1, 2]))
        memo: dict = {}
        for engine in ("sglang", "vllm", "trtllm"):
            facts = facts_of(engine=engine, **base)
            for c in constraints:
                if c.applies(facts) and c.violation(facts) is not None:
                    got = parallel_fixes(c, facts, also=common, memo=memo)
                    assert got == _reference_fixes(c, facts, also=common), (c.where(), base, engine)
                    seen["pairs" if got and got.startswith("(tp, ep)") else "single"] += 1
    assert seen["single"] > 0


def test_entry_points_found_without_importlib_metadata_when_none_is_declared(tmp_path, monkeypatch):
    import importlib.metadata as md

    site = tmp_path / "site"
    info = site / "toy_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    monkeypatch.syspath_prepend(str(site))
    for group in ("moe_select.backends", "moe_select.adapters"):
        assert entrypoints.entry_points(group) == list(md.entry_points(group=group))
    (info / "entry_points.txt").write_text("[moe_select.adapters]\ntoy_runner = toy_plugin.adapter\n")
    assert entrypoints.may_declare("moe_select.adapters")
    found = entrypoints.entry_points("moe_select.adapters")
    assert [(e.name, e.value) for e in found] == [("toy_runner", "toy_plugin.adapter")]
    assert found == list(md.entry_points(group="moe_select.adapters"))
    # a header with spaces is another group for importlib.metadata; the quick look defers to it either way
    (info / "entry_points.txt").write_text("[ moe_select.adapters ]\ntoy_runner = toy_plugin.adapter\n")
    assert entrypoints.entry_points("moe_select.adapters") == list(md.entry_points(group="moe_select.adapters"))


def test_entry_points_defer_to_importlib_metadata_for_what_they_do_not_read(tmp_path, monkeypatch):
    (tmp_path / "plugins.zip").write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an (empty) zip on sys.path
    monkeypatch.syspath_prepend(str(tmp_path / "plugins.zip"))
    assert entrypoints.may_declare("moe_select.backends")

    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter(())

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert entrypoints.may_declare("moe_select.backends")


@pytest.mark.parametrize("group", ["moe_select.backends", "moe_select.adapters"])
def test_entry_points_agree_with_importlib_metadata_here(group):
    import importlib.metadata as md

    assert entrypoints.entry_points(group) == list(md.entry_points(group=group))


def test_holds_is_violation_is_none(seed):
    """Constraint.holds (the fix search's test) answers as violation() does, on every constraint of the
    catalog at random parallel layouts."""
    from moe_select.catalog import default_catalog
    from moe_select.conditions import with_parallelism

    catalog = default_catalog()
    constraints = [*catalog.common.constraints, *(c for r in catalog.runners.values() for c in r.constraints),
                   *(c for a in catalog.a2a.values() for c in a.constraints)]
    rng = random.Random(seed)
    facts = facts_of(arch="sm90", quant="fp8_block", a2a="deepep", activation="silu", routing="renormalize", cuda_graph=True,
                     tp=8, ep=8, num_experts=256, top_k=8, hidden_size=7168, moe_intermediate_size=2048, block=(128, 128),
                     group_size=128, dp=2, shared_intermediate_size=2048, dense_intermediate_size=18432)
    checked = 0
    for _ in range(200):
        tp = rng.randrange(1, 65)
        f = with_parallelism(facts, tp, rng.choice([e for e in range(1, tp + 1) if tp % e == 0]))
        for c in constraints:
            if c.applies(f):
                assert c.holds(f) == (c.violation(f) is None), (c.where(), f)
                checked += 1
    assert checked > 100


def test_the_command_line_keeps_pydantic_plugins_that_are_installed(tmp_path):
    """moe-select skips pydantic's plugin scan only when no distribution declares a pydantic plugin: one
    that is installed still runs."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    info = site / "toy_pydantic_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-pydantic-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pydantic]\ntoy = toy_pydantic_plugin:plugin\n")
    marker = tmp_path / "loaded"
    (site / "toy_pydantic_plugin.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "class Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Plugin()\n")
    dep = tmp_path / "d.yaml"
    dep.write_text("gpu: H100\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 256, moe_intermediate_size: 128,"
                   " activation: silu, routing: renormalize}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-m", "moe_select", "explain", "-d", str(dep), "--json"], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert marker.read_text() == "yes"

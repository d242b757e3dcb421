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


def _fresh_python(code: str, **env_changes: str | None) -> str:
    import os
    import subprocess

    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


MODEL = ("from pydantic import BaseModel\n"
         "class M(BaseModel):\n    x: int\n"
         "assert M.model_validate({'x': 3}).x == 3\n")


def test_plugins_off_no_plugin_loader_import_and_pydantic_still_validates():
    """With no pydantic plugin declared, the planning commands' stand-in keeps pydantic's plugin loader (and
    importlib.metadata, which it imports) out of the process; models still build and validate."""
    out = _fresh_python("import sys\nfrom moe_select.pydantic_plugins import skip_plugin_lookup\n"
                        "print(skip_plugin_lookup())\n" + MODEL +
                        "print('importlib.metadata' in sys.modules, type(sys.modules['pydantic.plugin._loader']).__name__)",
                        PYDANTIC_DISABLE_PLUGINS=None)
    assert out.split() == ["True", "False", "_PluginsOff"]


def test_plugins_switched_back_on_get_pydantic_own_loader():
    """The stand-in only answers while the switch says every plugin is off: switched back on (or to a list
    of names), pydantic's own get_plugins answers, and any other name loads pydantic's module."""
    out = _fresh_python("import os, sys\nfrom moe_select.pydantic_plugins import skip_plugin_lookup\n"
                        "skip_plugin_lookup()\n"
                        "stub = sys.modules['pydantic.plugin._loader']\n"
                        "assert tuple(stub.get_plugins()) == ()\n"
                        "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'some_plugin'\n"
                        "plugins = stub.get_plugins()\n"
                        "real = sys.modules['pydantic.plugin._loader']\n"
                        "print(real is not stub, type(real).__name__, 'importlib.metadata' in sys.modules)\n"
                        "print(real.PYDANTIC_ENTRY_POINT_GROUP)\n" + MODEL,
                        PYDANTIC_DISABLE_PLUGINS=None)
    assert out.split() == ["True", "module", "True", "pydantic"]


def test_a_user_setting_of_the_plugin_switch_is_kept():
    """A user's PYDANTIC_DISABLE_PLUGINS that names some plugins is not overridden, and no stand-in is used."""
    out = _fresh_python("import os, sys\nfrom moe_select.pydantic_plugins import skip_plugin_lookup\n"
                        "print(skip_plugin_lookup(), os.environ['PYDANTIC_DISABLE_PLUGINS'])",
                        PYDANTIC_DISABLE_PLUGINS="logfire")
    assert out.split() == ["False", "logfire"]


def test_catalog_version_verdicts_are_packaging_verdicts():
    """The verdicts a catalog carries (every specifier its files name x its package table's assumed version)
    are exactly packaging's, and cover the specifiers of the bundled files."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from moe_select.catalog import _oracle_specifiers, _specifiers, load_catalog

    cat = load_catalog()
    assert len(cat.version_verdicts) >= 10
    for (version, spec), verdict in cat.version_verdicts.items():
        assert verdict == SpecifierSet(spec).contains(Version(version), prereleases=True), (version, spec)
    named = {(n, s) for n, s in _specifiers([cat.runners, cat.a2a, cat.common, cat.rules])}
    named |= set(_oracle_specifiers())  # the engine oracles' dated environment rules (resolution.yaml)
    assert any(n == "vllm" for n, _ in _oracle_specifiers())
    assumed = {(cat.packages_table[n].checked_up_to, s) for n, s in named
               if n in cat.packages_table and cat.packages_table[n].checked_up_to}
    # ... and every version an engine release pins (backends/engines/pins.yaml: package needs are judged at it)
    from moe_select.releases import pins

    pinned = {(v, s) for n, s in named for rels in pins().engines.values() for row in rels.values()
              for name, v in row.items() if name == n}
    assert assumed | pinned == set(cat.version_verdicts)


def test_a_cached_catalog_plans_without_packaging_specifiers(tmp_path):
    """A second process plans from the cached catalog and decides the specifiers from its verdicts: it does
    not import packaging.specifiers, and its plan is the same as the first's."""
    import os

    dep = tmp_path / "d.yaml"
    dep.write_text("gpu: B200\nquant: nvfp4\ntp: 4\n"
                   "model: {num_experts: 256, top_k: 8, hidden_size: 7168, moe_intermediate_size: 2048,"
                   " activation: silu, routing: deepseek_v3}\n")
    code = ("import io, contextlib, sys, json\nimport moe_select.cli\nbuf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            f"    rc = moe_select.cli.main(['explain', '-d', {str(dep)!r}, '--json'])\n"
            "print(json.dumps([rc, 'packaging.specifiers' in sys.modules, json.loads(buf.getvalue())['plan']]))")
    cache = str(tmp_path / "cache")
    first = json.loads(_fresh_python(code, MOE_SELECT_CACHE_DIR=cache))
    second = json.loads(_fresh_python(code, MOE_SELECT_CACHE_DIR=cache))
    assert first[0] == second[0] == 0 and first[2] == second[2] and first[2] is not None
    assert first[1] is True and second[1] is False
    assert os.listdir(cache)


def test_catalog_cache_key_names_packaging(monkeypatch):
    """Another packaging (whose verdicts the cached catalog carries) gives another cache key."""
    import packaging

    from moe_select.catalog import _inputs
    from moe_select.catalog_cache import catalog_key

    inputs = _inputs((), ())
    before = catalog_key(inputs)
    monkeypatch.setattr(packaging, "__version__", "0.0.1")
    assert catalog_key(inputs) != before


@pytest.mark.parametrize("argv", [
    ["explain", "-d", "f.yaml", "--json", "--tp", "4"], ["plan", "--gpu", "H200", "-o", "p.json"], ["check", "a", "b"],
    ["run", "--model-config", "m", "--tokens", "3", "--no-cuda-graph"], ["matrix", "--check"], ["schemas", "--write"]])
def test_the_parser_of_one_command_parses_as_the_full_parser(argv):
    from moe_select.cli import build_parser

    assert vars(build_parser(argv[0]).parse_args(argv)) == vars(build_parser().parse_args(argv))

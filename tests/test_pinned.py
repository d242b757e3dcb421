"""Promises of the README that planted bugs showed no test held (issue 19): one test (or a few) per promise,
each against an oracle computed by hand here (numbers worked out in the comments, file:line found by a plain
text scan of the file, never by the product's YAML reader), each seen failing with a one-line bug planted in
exactly that spot:

1. the notes "an installed version is newer than the facts were checked against" (``versions.newer``,
   ``selector._version_notes``);
2. the per-TP-rank widths of shared experts and dense layers, and how a tp/ep change rescales them
   (``conditions.facts_of`` / ``with_parallelism``: ``shared_intermediate_per_tp``, ``dense_intermediate_per_tp``),
   seen through the fixes ``explain`` prints;
3. operator rules layered by id over two ``--rules`` folders (``catalog.load_catalog``);
4. the on-disk catalog cache missing an edit to an operator ``.yml`` or ``.json`` rule file (``catalog_cache``);
5. a compressed-tensors checkpoint's group size (``model_config._quant_from_compressed_tensors``);
6. resolve's check that every registration a plan promises was made (``resolver._adapter_reasons``);
7. the exit code of ``moe-select run`` when resolve refuses (``cli.main``);
8. the line reported for a key whose value is a block on the following lines (``yamlio``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import moe_select
from moe_select.environment import Environment

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ROOT / "backends"
QWEN3_30B = ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B" / "config.json"


def line_of(path: Path, text: str, nth: int = 1) -> int:
    """1-based number of the ``nth`` line of ``path`` whose stripped text is ``text`` (a plain text scan)."""
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == text]
    assert len(hits) >= nth, f"{path.name}: no line {text!r} (#{nth}); the oracle of this test needs updating"
    return hits[nth - 1]


def reasons_of(report, backend: str) -> list:
    return next(c for c in report.candidates if c.backend == backend).reasons


# ============================================================ 1. newer than the facts were checked against
# backends/packages.yaml's checked_up_to, as this table was written (guarded below: an edit of the file asks
# for this table to be redone, never silently changes what is checked).
CHECKED = {"sgl-deep-gemm": "0.1.7", "flashinfer-python": "0.6.18", "torch": "2.13.0", "deep_gemm": "2.6.1"}
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}


def test_checked_versions_are_the_ones_this_table_was_written_for():
    text = (BACKENDS / "packages.yaml").read_text().splitlines()
    for name, version in CHECKED.items():
        i = text.index(f"  - name: {name}")
        entry = text[i + 1:next(j for j in range(i + 1, len(text)) if text[j].startswith("  - name:"))]
        assert f'    checked_up_to: "{version}"' in entry, name


# (package, declared version, newer than checked_up_to?), each decided by hand from PEP 440
NEWER = [
    ("sgl-deep-gemm", "0.1.10", True),         # release 0.1.10 > 0.1.7 (as text, "0.1.10" < "0.1.7")
    ("sgl-deep-gemm", "0.1.7", False),         # the same version
    ("sgl-deep-gemm", "0.1.6", False),         # older
    ("sgl-deep-gemm", "0.2", True),
    ("flashinfer-python", "0.6.18.post1", True),   # a post-release of the checked one is newer
    ("flashinfer-python", "0.6.18+cu128", False),  # a local build of the checked one is not
    ("flashinfer-python", "0.6.18rc7", False),     # its release candidate is older
    ("flashinfer-python", "0.6.19rc1", True),      # a candidate of the next release is newer
    ("torch", "2.13.0+cu128", False),
    ("torch", "2.14.0+cu128", True),               # local part ignored, release newer
    ("deep_gemm", "10.0", True),                   # 10 > 2 (as text, "10.0" < "2.6.1")
    # 2.6.1.0 is 2.6.1 (PEP 440 pads releases with zeros); versions.newer compared the release tuples
    # (2, 6, 1, 0) > (2, 6, 1) and called it newer: a real bug found while writing this table (fixed)
    ("deep_gemm", "2.6.1.0", False),
]


@pytest.mark.parametrize("name, version, noted", NEWER)
def test_versions_newer(name, version, noted):
    from moe_select.versions import newer

    assert newer(version, CHECKED[name]) is noted


@pytest.mark.parametrize("name, version, noted", NEWER)
def test_a_declared_version_newer_than_checked_is_noted(name, version, noted):
    report = moe_select.explain({"gpu": "H200", "quant": "bf16", "model": SMALL, "packages": {name: version}})
    line = line_of(BACKENDS / "packages.yaml", f"- name: {name}")
    want = [f"{name}: facts checked up to {CHECKED[name]}; {version} is declared (newer: facts may have changed) "
            f"[backends/packages.yaml:{line}]"] if noted else []
    assert report.version_notes == want
    assert report.to_dict()["version_notes"] == want


def test_an_installed_newer_version_is_noted_as_installed_and_printed():
    env = Environment(detected=True, arch="sm90", gpu="NVIDIA H200",
                      packages={"sgl-deep-gemm": "0.1.10", "torch": "2.13.0", "flashinfer-python": "0.6.17"})
    report = moe_select.explain({"gpu": "H200", "quant": "bf16", "model": SMALL}, environment=env)
    line = line_of(BACKENDS / "packages.yaml", "- name: sgl-deep-gemm")
    note = (f"sgl-deep-gemm: facts checked up to 0.1.7; 0.1.10 is installed (newer: facts may have changed) "
            f"[backends/packages.yaml:{line}]")
    assert report.version_notes == [note]
    assert f"  note: {note}" in report.render_text().splitlines()


# ============================================================ 2. shared-expert and dense widths per TP rank
def _facts(**kw):
    from moe_select.conditions import facts_of

    base = dict(arch="sm90", quant="fp8_block", a2a="none", activation="silu", routing="renormalize", cuda_graph=True,
                tp=8, ep=8, num_experts=64, top_k=8, hidden_size=2048, moe_intermediate_size=512, block=(128, 128))
    return facts_of(**{**base, **kw})


def test_facts_and_with_parallelism_split_shared_and_dense_widths_over_tp():
    from moe_select.conditions import with_parallelism

    f = _facts(ep=2, shared_intermediate_size=1536, dense_intermediate_size=2304)
    assert f["shared_intermediate_per_tp"] == Fraction(192)        # 1536 / tp 8 (ep 2 plays no part)
    assert f["dense_intermediate_per_tp"] == Fraction(288)         # 2304 / 8
    assert (f["moe_tp"], f["intermediate_per_rank"], f["experts_per_rank"]) == (4, 128, 32)  # 8/2, 512/4, 64/2
    g = with_parallelism(f, 4, 2)
    assert (g["shared_intermediate_per_tp"], g["dense_intermediate_per_tp"]) == (384, 576)   # / 4
    assert (g["moe_tp"], g["intermediate_per_rank"], g["experts_per_rank"]) == (2, 256, 32)  # 512 / (4/2), 64 / 2
    h = with_parallelism(g, 16, 16)
    assert (h["shared_intermediate_per_tp"], h["dense_intermediate_per_tp"]) == (96, 144)    # / 16
    assert with_parallelism(f, 8, 1)["shared_intermediate_per_tp"] == 192                    # ep alone: unchanged
    none = _facts()
    assert none["shared_intermediate_per_tp"] is None and with_parallelism(none, 2, 1)["dense_intermediate_per_tp"] is None


FP8_BLOCK = {"gpu": "H200", "engine": "sglang", "dp": 1, "quant": "fp8_block", "quant_config": {"block": [128, 128]}}
MODEL_64 = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 512, "activation": "silu",
            "routing": "renormalize"}


def test_shared_expert_width_per_tp_rank_and_its_fix():
    """1536-wide shared experts at tp 8 ep 8: 192 rows per TP rank, not a multiple of the 128 block.
    Fix by hand: no ep helps at tp 8 (the shared width splits over tp only), and no tp at ep 8 (tp a
    multiple of 8 gives 1536/8k <= 192). Pairs (t, e), nearest t first, e nearest 8: 1536/t a multiple of 128
    -> t in {1, 2, 3, 4, 6, 12}; 512/(t/e) a multiple of 128 -> t/e in {1, 2, 4}; 64 % e == 0. t 6: e 6, 3
    fail 64 % e; t 4: e 4, 2, 1 hold; t 12: e 12, 6, 3 fail 64 % e (e 4: t/e 3); t 3: e 3 fails, e 1: t/e 3;
    t 2: e 2 holds -> (4, 4), (4, 2), (4, 1), (2, 2)."""
    d = {**FP8_BLOCK, "model": {**MODEL_64, "num_shared_experts": 1, "shared_expert_intermediate_size": 1536},
         "tp": 8, "ep": 8}
    report = moe_select.explain(d)
    assert report.status == "rejected"
    common = BACKENDS / "common.yaml"
    at_n, at_k = line_of(common, "- field: shared_intermediate_per_tp", 1), line_of(common, "- field: shared_intermediate_per_tp", 2)
    got = [(r.source, r.detail.split(": ", 1)[1].split(" (")[0], r.fix) for r in reasons_of(report, "triton")]
    fix = "(tp, ep) in {(4, 4), (4, 2), (4, 1), (2, 2)}"
    assert got == [(f"backends/common.yaml:{at_n}", "shared_intermediate_per_tp = 192 is not a multiple of quant_block_n", fix),
                   (f"backends/common.yaml:{at_k}", "shared_intermediate_per_tp = 192 is not a multiple of quant_block_k", fix)]
    for tp, ep in ((4, 4), (4, 2), (4, 1), (2, 2)):   # each suggestion plans (1536/4 = 384, 1536/2 = 768 rows)
        assert moe_select.explain({**d, "tp": tp, "ep": ep}).status == "ok", (tp, ep)


def test_dense_layer_width_per_tp_rank_and_its_fix():
    """2304-wide dense layers at tp 4 ep 4: 576 rows per TP rank, 4.5 blocks of 128. By hand: 2304/t a
    multiple of 128 -> t in {1, 2, 3, 6, 9, 18}; with t/e in {1, 2, 4} and 64 % e == 0, nearest t to 4
    first: t 3 (e 3: 64 % 3; e 1: t/e 3), t 2 (e 2, e 1 hold), t 6 (e 3, 2, 6, 1: 64 % e or t/e 3, 6), t 1 (e 1)
    -> (2, 2), (2, 1), (1, 1), and nothing further up to tp 64 (t 9, 18: e would be 9 or 18)."""
    d = {**FP8_BLOCK, "model": {**MODEL_64, "dense_intermediate_size": 2304}, "tp": 4, "ep": 4}
    report = moe_select.explain(d)
    assert report.status == "rejected"
    common = BACKENDS / "common.yaml"
    at_n, at_k = line_of(common, "- field: dense_intermediate_per_tp", 1), line_of(common, "- field: dense_intermediate_per_tp", 2)
    got = [(r.source, r.detail.split(": ", 1)[1].split(" (")[0], r.fix) for r in reasons_of(report, "triton")]
    fix = "(tp, ep) in {(2, 2), (2, 1), (1, 1)}"
    assert got == [(f"backends/common.yaml:{at_n}", "dense_intermediate_per_tp = 576 is not a multiple of quant_block_n", fix),
                   (f"backends/common.yaml:{at_k}", "dense_intermediate_per_tp = 576 is not a multiple of quant_block_k", fix)]
    assert moe_select.explain({**d, "tp": 2, "ep": 2}).status == "ok"   # 1152 = 9 x 128


# ============================================================ 3. operator rules layered by id
def _rule(rid: str, prefer: list[str], quant: str = "bf16") -> str:
    return f"  - id: {rid}\n    when: {{arch: [sm90], quant: [{quant}]}}\n    prefer: [{', '.join(prefer)}]\n"


def test_two_rules_folders_layer_by_id(tmp_path, monkeypatch):
    """Folder A adds site-a and replaces the bundled hopper-fp8-block; folder B (layered after A) adds
    site-b and replaces A's site-a. Expected, by the README's rule: a replacing rule takes the replaced one's
    place; new rules of a layer go before everything layered so far."""
    from moe_select.catalog import load_catalog

    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "r.yaml").write_text("schema_version: 1\nrules:\n" + _rule("site-a", ["triton"])
                              + _rule("hopper-fp8-block", ["deep_gemm", "triton"], "fp8_block"))
    (b / "r.yaml").write_text("schema_version: 1\nrules:\n" + _rule("site-b", ["triton"], "fp16")
                              + _rule("site-a", ["triton", "torch_grouped_mm"]))
    bundled = [r.id for r in load_catalog(use_env=False).rules]
    cat = load_catalog([a, b], use_env=False)
    assert [r.id for r in cat.rules] == ["site-b", "site-a", *bundled]
    assert [(r.id, r.where(), r.prefer) for r in cat.rules[:2]] == [("site-b", f"{b / 'r.yaml'}:3", ["triton"]),
                                                                    ("site-a", f"{b / 'r.yaml'}:6", ["triton", "torch_grouped_mm"])]
    i = bundled.index("hopper-fp8-block") + 2
    assert (cat.rules[i].where(), cat.rules[i].prefer) == (f"{a / 'r.yaml'}:6", ["deep_gemm", "triton"])
    nvidia = ROOT / "rules" / "10-nvidia.yaml"
    assert cat.overridden == {"hopper-fp8-block": f"rules/10-nvidia.yaml:{line_of(nvidia, '- id: hopper-fp8-block')}",
                              "site-a": f"{a / 'r.yaml'}:3"}
    # the plan names the rule of the last layer, from its file and line (triton, supported on sm90 bf16, first
    # in both versions of site-a: the runner is the same, the rule's file and line tell which one chose it)
    d = {"gpu": "H200", "quant": "bf16", "model": SMALL, "max_tokens_per_rank": 8192}
    plan = moe_select.plan(d, rules_dirs=[a, b])
    assert (plan.runner, plan.chosen_by.rule, plan.chosen_by.source) == ("triton", "site-a", f"{b / 'r.yaml'}:6")
    plan = moe_select.plan(d, rules_dirs=[b, a])                         # the other order: A's site-a is last
    assert (plan.runner, plan.chosen_by.rule, plan.chosen_by.source) == ("triton", "site-a", f"{a / 'r.yaml'}:3")


# ============================================================ 4. the catalog cache sees edits of .yml and .json rules
@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
    return folder


def _rule_text(suffix: str, runner: str) -> str:
    if suffix == ".json":
        return json.dumps({"schema_version": 1, "rules": [{"id": "site", "when": {"arch": ["sm90"]}, "prefer": [runner]}]})
    return f"schema_version: 1\nrules:\n  - id: site\n    when: {{arch: [sm90]}}\n    prefer: [{runner}]\n"


@pytest.mark.parametrize("suffix", [".yml", ".json"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_an_edit_of_an_operator_yml_or_json_rule_file_is_seen(cache, tmp_path, monkeypatch, suffix, given):
    from moe_select import catalog as catmod
    from moe_select.catalog import cached_load_catalog

    folder = tmp_path / "oprules"
    folder.mkdir()
    path = folder / f"50-site{suffix}"
    path.write_text(_rule_text(suffix, "triton"))
    arg = folder if given == "folder" else path
    assert cached_load_catalog([arg]).rules[0].prefer == ["triton"]
    assert len(list(cache.glob("catalog-*.json"))) == 1                  # stored
    real = catmod.load_catalog
    with monkeypatch.context() as m:                                     # the next load is the cache's
        m.setattr(catmod, "load_catalog", lambda *a, **k: pytest.fail("not read from the cache"))
        assert cached_load_catalog([arg]).rules[0].prefer == ["triton"]
    path.write_text(_rule_text(suffix, "marlin"))                        # same size, same name: only the bytes differ
    assert catmod.load_catalog is real
    assert cached_load_catalog([arg]).rules[0].prefer == ["marlin"]


# ============================================================ 5. compressed-tensors group size
def _ct_config(tmp_path: Path, group_size: int, key: str = "quantization_config", bits: int = 4) -> Path:
    cfg = json.loads(QWEN3_30B.read_text())                   # moe_intermediate_size 768
    cfg[key] = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "weights": {
                    "num_bits": bits, "type": "int", "strategy": "group", "group_size": group_size, "symmetric": True}}}}
    folder = tmp_path / f"ct-{key}-{bits}-{group_size}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


@pytest.mark.parametrize("key", ["quantization_config", "compression_config"])
def test_a_group_32_compressed_tensors_checkpoint_plans_at_tp_8(tmp_path, key):
    """768 / tp 8 = 96 rows per rank = 3 groups of 32 (not a multiple of 128: the default group would refuse)."""
    plan = moe_select.plan({"gpu": "H200", "model_config": str(_ct_config(tmp_path, 32, key)), "tp": 8})
    assert (plan.quant, plan.quant_params["group_size"]) == ("int4_w4a16", 32)


@pytest.mark.parametrize("group, tp, rows", [(32, 16, 48), (128, 8, 96), (64, 4, 192)])
def test_a_compressed_tensors_group_that_does_not_divide_the_rank_is_refused_naming_it(tmp_path, group, tp, rows):
    """768/16 = 48 is not a multiple of 32; 768/8 = 96 not of 128; 768/4 = 192 = 3 x 64 plans (control)."""
    report = moe_select.explain({"gpu": "H200", "model_config": str(_ct_config(tmp_path, group)), "tp": tp})
    details = [r.detail for r in reasons_of(report, "triton")]
    if rows % group:
        assert report.status == "rejected"
        assert any(f"intermediate_per_rank = {rows} is not a multiple of quant_group_size ({group})" in d for d in details), details
    else:
        assert report.status == "ok" and report.plan.quant_params["group_size"] == group


# ============================================================ 6. every registration a plan promises
@pytest.fixture
def adapters(tmp_path, monkeypatch):
    bodies = {
        "pin_only_batched": "registry.register_core('torch_native', 'batched', TorchNativeCore)",
        "pin_other_runner": "registry.register_core('triton', 'standard', TorchNativeCore)",
        "pin_only_standard": "registry.register_core('torch_native', 'standard', TorchNativeCore)",
        "pin_both": "registry.register_core('torch_native', 'standard', TorchNativeCore)\n"
                    "    registry.register_core('torch_native', 'batched', TorchNativeCore)",
    }
    for name, body in bodies.items():
        (tmp_path / f"{name}.py").write_text("from moe_select.backends.torch_native import TorchNativeCore\n\n\n"
                                             f"def register(registry):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in bodies:
        sys.modules.pop(name, None)


def _catalog_with(module: str, registers: list[str]):
    from moe_select.catalog import load_catalog

    cat = load_catalog(use_env=False)
    cap = cat.runners["torch_native"].model_copy(update={"module": module, "registers": registers})
    return dataclasses.replace(cat, runners={**cat.runners, "torch_native": cap})


@pytest.mark.parametrize("module, registers, missing, registered", [
    ("pin_only_batched", ["standard"], ["standard"], "[('torch_native', 'batched')]"),
    ("pin_only_standard", ["standard", "batched"], ["batched"], "[('torch_native', 'standard')]"),
])
def test_a_promised_registration_that_was_not_made_is_refused_at_resolve(adapters, module, registers, missing, registered):
    from moe_select.errors import ResolveError
    from moe_select.registry import Registry

    cat = _catalog_with(module, registers)
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    assert (plan.module, plan.registers) == (module, registers)
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, registry=Registry(), catalog=cat)
    (reason,) = exc.value.reasons
    assert reason.code == "no_adapter"
    assert reason.detail == (f"module {module} did not register a torch_native core for "
                             + ", ".join(f"{f} dispatch" for f in missing) + f" (registered: {registered})")
    assert reason.source == f"backends/torch_native.yaml:{line_of(BACKENDS / 'torch_native.yaml', 'registers: [standard]')}"


def test_a_module_registering_another_runners_core_is_refused_at_resolve(adapters):
    """A module that registers a core under a runner whose capability file does not name it (here triton's) is refused
    for that, naming both; nothing it registered stays (break53, D7)."""
    from moe_select.errors import ResolveError
    from moe_select.registry import Registry

    cat = _catalog_with("pin_other_runner", ["standard"])
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    reg = Registry()
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, registry=reg, catalog=cat)
    (reason,) = exc.value.reasons
    assert reason.code == "no_adapter" and "module pin_other_runner could not register" in reason.detail
    assert "runner 'triton', whose capability file does not name module pin_other_runner" in reason.detail
    assert reg.pairs() == set()


def test_every_promised_registration_made_resolves(adapters):
    import torch

    from moe_select.registry import Registry

    cat = _catalog_with("pin_both", ["standard", "batched"])
    plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}, catalog=cat)
    reg = Registry()
    runner = moe_select.resolve(plan, registry=reg, catalog=cat)
    assert reg.pairs() == {("torch_native", "standard"), ("torch_native", "batched")}
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    out = runner.run(x, torch.tensor([[0, 1], [2, 3]]), torch.full((2, 2), 0.5),
                     runner.prepare_weights(torch.ones(8, 64, 64, dtype=torch.bfloat16), torch.ones(8, 64, 32, dtype=torch.bfloat16)))
    assert torch.equal(out, torch.zeros(2, 64, dtype=torch.bfloat16))   # silu(0) * 0 = 0


# ============================================================ 7. `moe-select run` refused at resolve: exit 1
@pytest.fixture
def site_runner(tmp_path, monkeypatch):
    """An operator capability folder ($MOE_SELECT_BACKENDS) describing ``site_runner`` (torch_native's facts)
    whose adapter module registers nothing: planning takes it (it names a module), resolve refuses it."""
    caps = tmp_path / "caps"
    (caps / "a2a").mkdir(parents=True)
    text = (BACKENDS / "torch_native.yaml").read_text()
    text = text.replace("runner: torch_native", "runner: site_runner").replace(
        "module: moe_select.backends.torch_native", "module: pin_site_adapter")
    (caps / "site_runner.yaml").write_text(text)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "pin_site_adapter.py").write_text("def register(registry):\n    pass\n")
    model = tmp_path / "model"
    model.mkdir()
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 256,
           "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
           "hidden_act": "silu", "norm_topk_prob": True, "torch_dtype": "bfloat16"}
    (model / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("MOE_SELECT_BACKENDS", str(caps))
    monkeypatch.syspath_prepend(str(mods))
    yield caps, mods, model
    sys.modules.pop("pin_site_adapter", None)


def test_run_refused_by_resolve_exits_1_naming_the_reason(site_runner, capsys):
    from moe_select.cli import main

    caps, _, model = site_runner
    rc = main(["run", "--model-config", str(model), "--device", "cpu", "--runner", "site_runner", "--tokens", "2"])
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    assert "using site_runner (asked for explicitly)" in out          # planned; then resolve refused
    where = f"{caps / 'site_runner.yaml'}:{line_of(caps / 'site_runner.yaml', 'registers: [standard]')}"
    assert err.splitlines() == ["cannot resolve the plan:",
                                f"  - no_adapter: module pin_site_adapter did not register a site_runner core for "
                                f"standard dispatch (registered: []) [{where}]"]
    assert "runner:" not in out and "forward:" not in out


def test_run_refused_by_resolve_exits_1_as_a_process(site_runner):
    caps, mods, model = site_runner
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(mods), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "moe_select", "run", "--model-config", str(model), "--device", "cpu",
                           "--runner", "site_runner", "--tokens", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("cannot resolve the plan:\n  - no_adapter: module pin_site_adapter")


# ============================================================ 8. the line of a key whose value is a block
BLOCKS = """\
gpu: H200
model:
  num_experts: 8
  hidden_size: 64

packages:
  torch: "2.13.0"
layer_runners: {mtp: auto}
rules:
  - id: x
    prefer:
      - triton
"""


def test_key_lines_of_block_values_are_the_keys_own_lines():
    from moe_select.yamlio import load_text

    data = load_text(BLOCKS, "blocks.yaml")
    assert data.key_lines == {"gpu": 1, "model": 2, "packages": 6, "layer_runners": 8, "rules": 9}
    assert data["model"].key_lines == {"num_experts": 3, "hidden_size": 4}
    assert data["rules"][0].key_lines == {"id": 10, "prefer": 11}
    assert (data["model"].line, data["rules"].item_lines, data["rules"][0]["prefer"].item_lines) == (3, [10], [12])


def test_an_error_about_a_block_valued_key_names_the_keys_line(tmp_path, capsys):
    from moe_select.cli import main

    dep = tmp_path / "d.yaml"
    dep.write_text("gpu: H200\nquant: bf16\n\nmodel:\n  num_experts: 8\n  hidden_size: 64\n  moe_intermediate_size: 32\n")
    assert main(["explain", "-d", str(dep)]) == 2
    assert f"{dep}:4: model.top_k: Field required" in capsys.readouterr().err   # `model:` is line 4
    dep.write_text("gpu: H200\nquant: bf16\npackages:\n  - torch\n")
    assert main(["explain", "-d", str(dep)]) == 2
    err = capsys.readouterr().err
    assert f"{dep}:3: packages" in err, err                                       # `packages:` is line 3

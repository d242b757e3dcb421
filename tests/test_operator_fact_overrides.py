"""An operator's correction of a bundled fact (the ninth new user's trial: copying backends/ into a --backends folder
failed for every file, "a plugin adds runners, it does not replace them", so a bundled fact could not be corrected or
version-bounded without editing the installed package).

An operator capability folder (``--backends``, ``$MOE_SELECT_BACKENDS``) may now replace a bundled runner or a2a file by
a file of the same name: the operator's file is read whole, the bundled one not, and ``explain`` (the file's origin) and
``check`` (a note) say so. A byte-for-byte copy of a bundled file (a copied folder) is the bundled file. Its
``common.yaml`` is added to the bundled one (was silently not read); ``packages.yaml`` is refused, as ``formats.yaml``
is. A plugin still only adds; two operator folders may not both replace one file."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import moe_select
from moe_select.catalog import load_catalog
from moe_select.errors import InputError
from moe_select.lint import check, lint_catalog

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ROOT / "backends"
GEMMA4 = {"num_experts": 128, "top_k": 8, "hidden_size": 2816, "moe_intermediate_size": 704, "activation": "gelu",
          "routing": "renormalize"}
DEP = {"gpu": "RTX 3090", "engine": "vllm", "engine_version": "0.26.0", "model": GEMMA4, "quant": "fp8_tensor", "tp": 2}
BOUND = 'requires: {vllm: "<0.25.0"}\n    code: shape_unaligned\n    why: "vLLM before 0.25.0 repacks FP8'


def _fp8_marlin_refused(r) -> bool:
    return any(x.code == "shape_unaligned" and "FP8 MoE weights for Marlin" in x.detail
               for c in r.candidates if c.backend == "marlin" for x in c.reasons)


def _edited_marlin(folder: Path) -> Path:
    text = (BACKENDS / "marlin.yaml").read_text()
    assert BOUND in text
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "marlin.yaml").write_text(text.replace(BOUND, BOUND.replace("<0.25.0", "<0.27.0"), 1))
    return folder


def test_an_operator_file_replaces_the_bundled_one_and_says_so(tmp_path):
    assert not _fp8_marlin_refused(moe_select.explain(DEP))          # bundled: padded from 0.25.0
    ops = _edited_marlin(tmp_path / "ops")
    r = moe_select.explain(DEP, backends_dirs=[ops])
    assert _fp8_marlin_refused(r), r.summary()                        # the operator's bound: < 0.27.0
    origin = r.origins[f"{ops.absolute()}/marlin.yaml"]
    assert "replaces backends/marlin.yaml:" in origin
    findings, _ = check([ops])
    assert any(f.severity == "note" and "replaces the bundled backends/marlin.yaml" in f.message for f in findings)


def test_a_copied_bundled_folder_with_one_file_edited(tmp_path):
    ops = tmp_path / "copy"
    shutil.copytree(BACKENDS, ops, ignore=shutil.ignore_patterns("*.py", "__pycache__", "triton_configs"))
    _edited_marlin(ops)
    cat = load_catalog(backends_dirs=[ops], use_env=False)
    bundled = load_catalog(use_env=False)
    replaced = [d for d, o in cat.origins.items() if "replaces" in o]
    assert replaced == [f"{ops.absolute()}/marlin.yaml"], replaced    # the copies are the bundled files
    assert len(cat.common.constraints) == len(bundled.common.constraints)   # common.yaml's copy: not added twice
    assert len(cat.common.methods) == len(bundled.common.methods)
    findings, _ = check([ops])
    assert not [f for f in findings if f.severity == "error"]


def test_an_operator_common_yaml_is_added(tmp_path):
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "common.yaml").write_text(
        "schema_version: 3\nsource: \"this operator\"\nmethods:\n"
        "  - runners: [triton]\n    when: {engine: [vllm], quant: [fp8_tensor]}\n"
        "    why: \"our vLLM build's FP8 method (a local patch)\"\n    source: \"(reported) example/fork#1\"\n")
    r = moe_select.explain({**DEP, "gpu": "H100", "engine_version": "0.24.0", "tp": 1}, backends_dirs=[ops])
    hits = [x for c in r.candidates if c.backend == "flashinfer_cutlass" for x in c.reasons
            if "our vLLM build's FP8 method" in x.detail]
    assert hits and str(ops.absolute()) in hits[0].source, r.summary()
    assert "added to backends/common.yaml" in r.origins[f"{ops.absolute()}/common.yaml"]


def test_an_operator_packages_yaml_is_refused(tmp_path):
    ops = tmp_path / "ops"
    ops.mkdir()
    shutil.copy(BACKENDS / "packages.yaml", ops / "packages.yaml")
    (ops / "packages.yaml").write_text((ops / "packages.yaml").read_text() + "\n")     # not a copy: edited
    with pytest.raises(InputError, match="the package table is bundled only"):
        load_catalog(backends_dirs=[ops], use_env=False)


def test_two_operator_folders_may_not_both_replace_one_file(tmp_path):
    a, b = _edited_marlin(tmp_path / "a"), _edited_marlin(tmp_path / "b")
    with pytest.raises(InputError, match=r"runner 'marlin' is already defined by .*/a/marlin\.yaml:\d+: two operator "
                                         r"folders give it: keep one"):
        load_catalog(backends_dirs=[a, b], use_env=False)


# ----------------------------------------------------------------- what an operator folder holds that would not be read
def _issues(**kw) -> str:
    with pytest.raises(InputError) as e:
        load_catalog(use_env=False, plugins=False, **kw)
    return str(e.value)


def test_a_capability_file_not_named_yaml_is_an_error_not_ignored(tmp_path):
    """A new operator's trial: a corrected hpc_ops.yml was silently not read (the bundled fact stayed in force, check
    clean). A .yml file with a top-level runner: or a2a: key is an error naming it; other files (data, dotfiles, editor
    backups) are not (a review: a plugin's tuned.json and a .yamllint.yml were refused); engines' tables that differ from
    the bundled ones are errors, naming the file; a copy of the bundled folder with junk beside its tables is fine."""
    (tmp_path / "b" / "a2a").mkdir(parents=True)
    shutil.copy(BACKENDS / "hpc_ops.yaml", tmp_path / "b" / "hpc_ops.yml")
    shutil.copy(BACKENDS / "a2a" / "deepep.yaml", tmp_path / "b" / "a2a" / "deepep.yml")
    (tmp_path / "b" / "tuned_H100.json").write_text("{}")
    (tmp_path / "b" / ".yamllint.yml").write_text("extends: default\n")
    text = _issues(backends_dirs=[tmp_path / "b"])
    assert "hpc_ops.yml: runner capability files are read as *.yaml only" in text and "rename it hpc_ops.yaml" in text
    assert "a2a/deepep.yml: a2a capability files are read as *.yaml only" in text
    assert "tuned_H100" not in text and "yamllint" not in text
    (tmp_path / "t" / "engines").mkdir(parents=True)
    (tmp_path / "t" / "engines" / "names.yaml").write_text("runners:\n  - {ours: acme_moe, sglang: acme_moe}\n")
    shutil.copy(BACKENDS / "hpc_ops.yaml", tmp_path / "t" / "hpc_ops.yaml")
    assert "t/engines/names.yaml: the engines' tables" in _issues(backends_dirs=[tmp_path / "t"])
    copy = tmp_path / "copy"
    shutil.copytree(BACKENDS, copy)
    for junk in ("engines/.DS_Store", "engines/names.yaml~", "engines/README.md", ".DS_Store"):
        (copy / junk).write_text("x")
    load_catalog(use_env=False, plugins=False, backends_dirs=[copy])


def test_an_empty_operator_folder_plans_as_bundled_and_check_warns(tmp_path):
    """A placeholder folder refuses nothing (a review: the load error blocked deployments that plan exactly as bundled);
    check warns that it holds no capability file."""
    (tmp_path / "empty").mkdir()
    cat = load_catalog(use_env=False, plugins=False, backends_dirs=[tmp_path / "empty"])
    assert [f for f in lint_catalog(cat) if f.severity == "warning" and "no capability file" in f.message]


def test_check_warns_of_a_rule_with_no_conditions_ahead_of_others(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "c.yaml").write_text("schema_version: 1\nrules:\n  - id: acme-all\n    prefer: [triton]\n")
    found = lint_catalog(load_catalog([tmp_path / "r"], use_env=False, plugins=False))
    warn = [f for f in found if f.severity == "warning" and "acme-all has no when" in f.message]
    assert len(warn) == 1 and warn[0].where.endswith("c.yaml:3")
    # the bundled catch-all (the last rule) is no such warning
    assert not [f for f in lint_catalog(load_catalog(use_env=False, plugins=False)) if "has no when" in f.message]


# ------------------------------------------------------------- an operator's runner in an engine build that registers it
ACME = Path(__file__).resolve().parent / "fixtures" / "operator" / "acme_moe.yaml"
QWEN_FP8 = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8")


def test_an_operator_runner_gives_its_engine_option_value_in_its_own_file(tmp_path, capsys):
    """A new operator's trial: an SGLang-only runner from a --backends folder stayed unverified under SGLang (no row of
    the bundled names.yaml, which no folder can extend), so its rule never picked it and --emit refused it. The file's
    ``engines.options`` gives the value the engine build's runner option takes: supported, chosen, written."""
    from moe_select.cli import main

    (tmp_path / "b").mkdir()
    shutil.copy(ACME, tmp_path / "b" / "acme_moe.yaml")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "acme.yaml").write_text("schema_version: 1\nrules:\n  - id: acme-hopper\n"
                                              "    when: {arch: [sm90], quant: [fp8_block], engine: [sglang]}\n"
                                              "    prefer: [acme_moe, triton]\n")
    dep = {"gpu": "H100", "engine": "sglang", "model_config": QWEN_FP8}
    r = moe_select.explain(dep, backends_dirs=[tmp_path / "b"], rules_dirs=[tmp_path / "r"])
    assert r.plan is not None and (r.plan.runner, r.plan.evidence) == ("acme_moe", "supported"), r.summary()
    assert r.plan.runner_option_values == {"sglang": "acme_moe"}
    assert main(["plan", "--gpu", "H100", "--model-config", QWEN_FP8, "--engine", "sglang", "--backends",
                 str(tmp_path / "b"), "--rules", str(tmp_path / "r"), "--emit", "sglang"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("--moe-runner-backend acme_moe")
    # without it: unverified, and the settle names the field
    (tmp_path / "b2").mkdir()
    (tmp_path / "b2" / "acme_moe.yaml").write_text(ACME.read_text().replace("  options: {sglang: acme_moe}\n", ""))
    r = moe_select.explain(dep, backends_dirs=[tmp_path / "b2"], rules_dirs=[tmp_path / "r"])
    assert r.plan is not None and r.plan.runner == "triton"
    assert any("engines.options" in (u.settle or "") for c in r.candidates if c.backend == "acme_moe" for u in c.unknowns)


def test_engines_options_is_for_runners_names_yaml_does_not_name(tmp_path):
    (tmp_path / "b").mkdir()
    text = (BACKENDS / "hpc_ops.yaml").read_text()
    line = "  values: [sglang, vllm]\n"
    assert line in text
    (tmp_path / "b" / "hpc_ops.yaml").write_text(text.replace(line, line + "  options: {sglang: hpc}\n", 1))
    assert "already names hpc_ops in sglang" in _issues(backends_dirs=[tmp_path / "b"])
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "hpc_ops.yaml").write_text(text.replace(line, line + "  options: {trtllm: hpc}\n", 1))
    assert "options names trtllm, which values does not" in _issues(backends_dirs=[tmp_path / "c"])


def test_an_nvidia_generation_name_as_an_arch_says_its_arch_names():
    """A new operator's trial wrote ``archs: [hopper]`` and got no hint; the families and archs it names are declared."""
    from moe_select.vocabulary import VocabularyIndex

    v = VocabularyIndex(load_catalog(use_env=False, plugins=False).vocabulary)
    assert v.arch_spec_problem("hopper") == "unknown arch or family 'hopper': NVIDIA's hopper is sm9x (sm90)"
    assert all(v.arch_spec_problem(a) is None for a in ("sm9x", "sm90", "sm8x", "sm80", "sm86", "sm89", "sm75", "sm70"))


@pytest.mark.parametrize("options, why", [("{sglang: triton}", "is sglang's name for triton"),
                                          ("{sglang: auto}", "takes for its own choice"),
                                          ("{sglang: flashinfer_cutlass}", "is sglang's name for flashinfer_cutlass")])
def test_engines_options_may_not_be_another_runners_value(tmp_path, options, why):
    """A value that is another runner's in that engine (or its auto) would have --emit write a line that runs that one
    while the plan says this one (a review wrote {sglang: triton} and read the line back as triton)."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "acme_moe.yaml").write_text(ACME.read_text().replace("{sglang: acme_moe}", options))
    assert why in _issues(backends_dirs=[tmp_path / "b"])


def test_engines_options_of_two_operator_runners_may_not_share_a_value(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "acme_moe.yaml").write_text(ACME.read_text())
    (tmp_path / "b" / "acme_two.yaml").write_text(ACME.read_text().replace("runner: acme_moe", "runner: acme_two"))
    assert "'acme_moe' is also acme_moe's sglang value" in _issues(backends_dirs=[tmp_path / "b"])

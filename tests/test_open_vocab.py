"""The open vocabulary (issue 18, "refuse on evidence, not on silence"): a deployment may name any well-formed
arch, format, activation, routing, runner or a2a backend and is judged, never refused as invalid input (exit 2);
an unknown GPU product name is an error that says to give ``arch:``. Facts and rules may only use names a
vocabulary file declares (``backends/vocabulary.yaml``, a plugin's, an operator folder's): a typo there is a
load and ``check`` error naming file:line. Architectures are ordered by compute capability, in families kept as
data, each citing the upstream function it mirrors."""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import moe_select
from moe_select import vocab
from moe_select.catalog import load_catalog
from moe_select.cli import main
from moe_select.errors import InputError
from moe_select.formats import QUANTS

MODEL = {"num_experts": 8, "top_k": 2, "hidden_size": 256, "moe_intermediate_size": 128}
MODEL_FLAG = "num_experts=8,top_k=2,hidden_size=256,moe_intermediate_size=128"


def error_of(fn, *a, **kw) -> str:
    with pytest.raises(InputError) as exc:
        fn(*a, **kw)
    return str(exc.value)


@pytest.fixture(scope="module")
def catalog():
    """The bundled catalog (its vocabulary becomes the active one)."""
    return load_catalog(use_env=False)


# ------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize("text, base", [
    ("sm90", "sm90"), ("SM90", "sm90"), ("sm90a", "sm90"), ("sm_90a", "sm90"), ("sm100f", "sm100"),
    ("sm_100", "sm100"), ("sm75", "sm75"), (" sm121 ", "sm121"), ("sm130", "sm130"), ("gfx90a", "gfx90a"),
    ("GFX942", "gfx942"), ("gfx1201", "gfx1201"), ("cpu", "cpu"), ("CPU", "cpu"),
])
def test_normalize_arch(text, base):
    assert vocab.normalize_arch(text) == base


@pytest.mark.parametrize("text", ["sm9", "sm090", "sm1000", "gfx9", "gfx94", "gfx94200", "h100", "sm10x", "sm80+",
                                  "sm90b", "", "sm 90", "gfxz42"])
def test_ill_formed_arch_is_a_value_error(text):
    with pytest.raises(ValueError, match="not an architecture name"):
        vocab.normalize_arch(text)


def test_the_deployment_schema_pattern_reads_what_normalize_arch_reads():
    from moe_select.schema_gen import generate

    pattern = generate()["deployment.schema.json"]["properties"]["arch"]["anyOf"][0]["pattern"]
    for text in ["sm90", "SM90A", "sm_100f", "gfx90a", "GFX1201", "cpu", "auto", "sm9", "gfx9", "sm10x", "sm80+", "h100"]:
        try:
            ok = text == "auto" or bool(vocab.normalize_arch(text))
        except ValueError:
            ok = False
        assert bool(re.match(pattern, text)) == ok, text


@pytest.mark.parametrize("arch, cap", [("sm121", (12, 1)), ("sm90", (9, 0)), ("sm75", (7, 5)), ("sm130", (13, 0)),
                                       ("sm100", (10, 0)), ("gfx942", None), ("cpu", None), ("sm90a", None)])
def test_capability_from_the_name(arch, cap):
    assert vocab.capability(arch) == cap


def test_arch_in_names_families_and_ranges(catalog):
    assert vocab.arch_in("sm90", ["sm90"]) and not vocab.arch_in("sm90", ["sm100"])
    # a range: compute capability at least X.Y, any future arch included; never AMD or cpu
    for arch in ("sm75", "sm80", "sm90", "sm121", "sm130"):
        assert vocab.arch_in(arch, ["sm75+"]), arch
    for arch in ("sm70", "sm72", "gfx942", "gfx90a", "cpu"):
        assert not vocab.arch_in(arch, ["sm75+"]), arch
    # families: majors hold undeclared archs of that major; members are exactly those archs
    assert vocab.arch_in("sm107", ["sm10x"]) and vocab.arch_in("sm103", ["sm10x"]) and not vocab.arch_in("sm120", ["sm10x"])
    assert vocab.arch_in("gfx90a", ["gfx9"]) and not vocab.arch_in("gfx908", ["gfx9"]) and not vocab.arch_in("gfx1201", ["gfx9"])
    assert vocab.arch_in("sm121", ["sm90", "blackwell"]) and not vocab.arch_in("sm90", ["blackwell", "sm100+"])
    assert not vocab.arch_in("sm90", ["no_such_family", "gfx9+"])  # an unknown specifier names nothing


#: Each bundled family and the declared archs it holds (a family of majors also holds undeclared ones).
FAMILIES = {
    "sm7x": {"sm70", "sm75"}, "sm8x": {"sm80", "sm86", "sm89"}, "sm9x": {"sm90"}, "sm10x": {"sm100", "sm103", "sm107"},
    "sm11x": {"sm110"}, "sm12x": {"sm120", "sm121"}, "blackwell": {"sm100", "sm103", "sm107", "sm110", "sm120", "sm121"},
    "gfx9": {"gfx90a", "gfx942", "gfx950"}, "mi3xx": {"gfx942", "gfx950"},
    "rocm": {"gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_holds_its_members_and_cites_upstream_code(catalog, family):
    idx = vocab.active()
    fam = idx.families[family]
    assert {a for a in vocab.declared_archs() if vocab.arch_in(a, [family])} == FAMILIES[family]
    # the function it mirrors, in upstream code at a commit or a release tag: owner/repo@commit:path:symbol
    assert re.match(r"^[\w.-]+/[\w.-]+@([0-9a-f]{12,40}|v[\w.]+):[\w/.]+\.py:[\w.]+$", fam.source), fam.source


def test_bundled_families_are_the_expected_ones(catalog):
    assert set(vocab.active().families) == set(FAMILIES)


@pytest.mark.parametrize("product, arch", [
    ("T4", "sm75"), ("Tesla T4", "sm75"), ("NVIDIA T4", "sm75"), ("T10", "sm75"), ("V100", "sm70"),
    ("Tesla V100-SXM2-16GB", "sm70"), ("MI210", "gfx90a"), ("MI250", "gfx90a"), ("AMD Instinct MI250X", "gfx90a"),
    ("MI308X", "gfx942"), ("mi300x", "gfx942"), ("H200", "sm90"), ("rtx-pro-6000", "sm120"), ("GB10", "sm121"),
])
def test_product_names(catalog, product, arch):
    assert vocab.gpu_arch(product) == arch


def test_unknown_product_asks_for_arch(tmp_path, capsys):
    msg = error_of(moe_select.explain, {"gpu": "Z9000", "quant": "bf16", "model": MODEL})
    assert "unknown GPU 'Z9000'" in msg and "arch:" in msg
    assert main(["explain", "--gpu", "Z9000", "--quant", "bf16", "--model", MODEL_FLAG]) == 2
    assert "arch:" in capsys.readouterr().err


@pytest.mark.parametrize("arch, bf16", [("sm70", False), ("sm75", False), ("sm72", False), ("sm80", True),
                                        ("sm90", True), ("sm130", True), ("gfx90a", True), ("gfx1201", True), ("cpu", True)])
def test_has_bf16(catalog, arch, bf16):
    assert vocab.has_bf16(arch) is bf16


def test_bundled_vocabulary_agrees_with_the_code(catalog):
    from moe_select.vocabulary import check_bundled

    assert check_bundled(catalog.vocabulary) == []
    assert tuple(e.name for e in catalog.vocabulary.engines) == vocab.ALL_ENGINES == vocab.ENGINES + (vocab.INSTALL_ENGINE,)


# ------------------------------------------------------------------------------------------ deployments
def test_undeclared_arch_is_planned_not_invalid():
    for arch in ("sm130", "gfx1201", "sm105"):
        report = moe_select.explain({"arch": arch, "quant": "bf16", "model": MODEL})
        assert report.deployment.arch == arch and report.status in ("ok", "rejected")


def test_arch_spelling_is_normalised_and_said():
    report = moe_select.explain({"arch": "SM_90a", "quant": "bf16", "model": MODEL})
    assert report.deployment.arch == "sm90"
    assert "read as sm90" in report.deployment.provenance["arch"]


def test_family_or_range_is_no_deployment_arch():
    assert "not an architecture name" in error_of(moe_select.explain, {"arch": "sm10x", "quant": "bf16", "model": MODEL})
    assert "not an architecture name" in error_of(moe_select.explain, {"arch": "sm80+", "quant": "bf16", "model": MODEL})


def test_unknown_format_is_judged_with_a_did_you_mean():
    report = moe_select.explain({"gpu": "H200", "quant": "fp8_blok", "model": MODEL})
    assert report.deployment.quant == "fp8_blok"
    assert any("did you mean 'fp8_block'" in n for n in report.deployment.notes)


def test_unknown_a2a_is_judged_with_a_did_you_mean():
    report = moe_select.explain({"gpu": "H200", "quant": "bf16", "model": MODEL, "tp": 2, "ep": 2, "a2a": "deepp"})
    assert report.deployment.a2a == "deepp"
    assert any("did you mean 'deepep'" in n for n in report.deployment.notes)


def _config(tmp_path: Path, hidden_act: str) -> Path:
    d = tmp_path / "tiny-moe"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 8,
        "num_experts_per_tok": 2, "hidden_act": hidden_act, "norm_topk_prob": True, "torch_dtype": "bfloat16"}))
    return d


def test_a_checkpoint_activation_without_facts_is_judged(tmp_path):
    report = moe_select.explain({"gpu": "H200", "model_config": str(_config(tmp_path, "geglu"))})
    assert report.deployment.model.activation == "geglu"
    assert "kept as geglu and judged" in report.deployment.provenance["model.activation"]
    msg = error_of(moe_select.explain, {"gpu": "H200", "model_config": str(_config(tmp_path / "b", "GeLU-New"))})
    assert "hidden_act 'GeLU-New' is not an activation name" in msg


def test_weight_only_plan_without_bf16_computes_in_fp16():
    t4 = moe_select.explain({"gpu": "T4", "quant": "int4_w4a16", "model": MODEL, "runner": "triton"})
    a100 = moe_select.explain({"gpu": "A100", "quant": "int4_w4a16", "model": MODEL, "runner": "triton"})
    assert a100.plan is not None and a100.plan.activation_precision == "bf16"
    assert t4.plan is not None and t4.plan.activation_precision == "fp16"


# ------------------------------------------------------------------------------------------ detection
def _fake_smi(tmp_path: Path, monkeypatch, line: str) -> None:
    import os

    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{line}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("line, arch", [("NVIDIA Z9000, 13.0", "sm130"), ("Tesla T4, 7.5", "sm75"), ("NVIDIA H200, 9.0", "sm90")])
def test_detection_returns_an_undeclared_arch(tmp_path, monkeypatch, line, arch):
    from moe_select import environment

    _fake_smi(tmp_path, monkeypatch, line)
    assert environment.detect_gpu() == (arch, line.split(",")[0])


def test_torch_arch_reads_an_undeclared_arch(monkeypatch):
    torch = pytest.importorskip("torch")
    from moe_select.resolver import torch_arch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (13, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA Z9000")
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert torch_arch() == ("sm130", "NVIDIA Z9000")


# ------------------------------------------------------------------------------------------ facts and rules
def _rules(tmp_path: Path, when: str) -> Path:
    f = tmp_path / "r.yaml"
    f.write_text(f"schema_version: 1\nrules:\n  - id: mine\n    when: {when}\n    prefer: [triton]\n")
    return f


@pytest.mark.parametrize("when, says", [
    ("{arch: [sm09]}", "unknown arch or family 'sm09'"),
    ("{arch: [blackwel]}", "did you mean 'blackwell'"),
    ("{arch: [sm90a]}", "write the base architecture 'sm90'"),
    ("{arch: [sm130]}", "architecture 'sm130' is not declared"),
    ("{arch: [gfx9+]}", "is not a range"),
    ("{activation: [slu]}", "unknown activation 'slu' (did you mean 'silu'?)"),
    ("{routing: [renormalise]}", "unknown routing 'renormalise' (did you mean 'renormalize'?)"),
])
def test_a_rule_naming_an_undeclared_name_is_a_load_and_check_error(tmp_path, capsys, when, says):
    f = _rules(tmp_path, when)
    msg = error_of(load_catalog, [f], use_env=False)
    assert f"{f}:4: when." in msg and says in msg
    assert main(["check", str(f)]) == 2
    assert says in capsys.readouterr().err


def test_rules_take_families_and_ranges(tmp_path, catalog):
    from moe_select.lint import choice

    blackwell = next(r for r in catalog.rules if r.id == "blackwell")
    assert blackwell.when.matches({"arch": "sm107"}) and not blackwell.when.matches({"arch": "sm120"})
    assert choice(catalog, catalog.rules, "sm103", "nvfp4") == ("flashinfer_trtllm", "blackwell-nvfp4")
    mine = load_catalog([_rules(tmp_path, "{arch: [sm90+, gfx9]}")], use_env=False)
    rule = next(r for r in mine.rules if r.id == "mine")
    assert all(rule.when.matches({"arch": a}) for a in ("sm90", "sm130", "gfx90a"))
    assert not any(rule.when.matches({"arch": a}) for a in ("sm89", "gfx1201", "cpu"))


RUNNER = """\
schema_version: 2
runner: toy_future
summary: a runner an operator describes
source: "this project: tests/test_open_vocab.py"
support:
  - {{archs: [{archs}], formats: [bf16], source: "this project: tests/test_open_vocab.py"}}
activations: {{values: [{activation}], source: "this project: tests/test_open_vocab.py"}}
routing: {{values: any, source: "this project: tests/test_open_vocab.py"}}
dispatch: {{formats: [standard], source: "this project: tests/test_open_vocab.py"}}
cuda_graph: {{supported: true, source: "this project: tests/test_open_vocab.py"}}
"""


def _folder(tmp_path: Path, archs: str = "sm80+", activation: str = "silu", vocabulary: str | None = None) -> Path:
    d = tmp_path / "operator"
    d.mkdir(exist_ok=True)
    (d / "toy_future.yaml").write_text(RUNNER.format(archs=archs, activation=activation))
    if vocabulary is not None:
        (d / "vocabulary.yaml").write_text(vocabulary)
    return d


def test_a_fact_naming_an_undeclared_name_is_a_load_and_check_error(tmp_path, capsys):
    d = _folder(tmp_path, archs="sm80+, sm9o", activation="gelu_tanh")
    msg = error_of(load_catalog, use_env=False, backends_dirs=[d])
    assert f"{d}/toy_future.yaml:6: support[0].archs: unknown arch or family 'sm9o'" in msg
    assert f"{d}/toy_future.yaml:7: activations[0].values: unknown activation 'gelu_tanh'" in msg
    assert main(["check", str(d / "toy_future.yaml")]) == 2
    assert "unknown arch or family 'sm9o'" in capsys.readouterr().err


def test_a_range_in_a_fact_holds_future_archs(tmp_path):
    cap = load_catalog(use_env=False, backends_dirs=[_folder(tmp_path)]).runners["toy_future"]
    assert cap.formats_on("sm130") == ["bf16"] and cap.has_arch("sm80") and not cap.has_arch("sm75")
    assert cap.formats_on("gfx942") == []


OPERATOR_VOCABULARY = """\
schema_version: 3
archs:
  - {name: sm130, vendor: nvidia, products: [Z9000], source: "this project: tests/test_open_vocab.py"}
families:
  - {name: zeta, majors: [13], source: "this project: tests/test_open_vocab.py"}
activations:
  - {name: gelu_tanh, gated: true, source: "this project: tests/test_open_vocab.py"}
"""


def test_an_operator_vocabulary_adds_names(tmp_path):
    d = _folder(tmp_path, archs="zeta", activation="gelu_tanh", vocabulary=OPERATOR_VOCABULARY)
    cat = load_catalog(use_env=False, backends_dirs=[d])
    assert f"{d}/vocabulary.yaml" in cat.files and cat.runners["toy_future"].has_arch("sm131")
    assert vocab.gpu_arch("Z9000", cat.vocabulary) == "sm130"
    report = moe_select.explain({"gpu": "Z9000", "quant": "bf16", "model": MODEL}, catalog=cat)
    assert report.deployment.arch == "sm130"
    vocab.use(load_catalog(use_env=False).vocabulary)  # leave the bundled vocabulary active for other tests


@pytest.mark.parametrize("text, says", [
    ("schema_version: 3\narchs:\n  - {name: sm90, vendor: nvidia, source: \"this project: x\"}\n",
     "arch 'sm90' is already declared at backends/vocabulary.yaml:"),
    ("schema_version: 3\narchs:\n  - {name: sm130, vendor: nvidia, products: [H200], source: \"this project: x\"}\n",
     "product 'H200' is already declared"),
    ("schema_version: 3\nengines:\n  - {name: tgi, source: \"this project: x\"}\n", "only the bundled vocabulary declares engines"),
    ("schema_version: 3\nfamilies:\n  - {name: sm140, majors: [14], source: \"this project: x\"}\n", "reads as an architecture name"),
    ("schema_version: 3\nfamilies:\n  - {name: odd, members: [gfx1250], source: \"this project: x\"}\n",
     "member 'gfx1250' is not a declared arch"),
    ("schema_version: 3\narchs:\n  - {name: gfx1250, vendor: nvidia, source: \"this project: x\"}\n", "is a amd name, not nvidia"),
    ("schema_version: 3\narchs:\n  - {name: sm130, vendor: nvidia, source: \"a blog\"}\n", "source"),
])
def test_operator_vocabulary_mistakes(tmp_path, text, says):
    d = _folder(tmp_path, vocabulary=text)
    msg = error_of(load_catalog, use_env=False, backends_dirs=[d])
    assert f"{d}/vocabulary.yaml:" in msg and says in msg


def test_the_cached_catalog_keeps_its_vocabulary(tmp_path, monkeypatch):
    from moe_select.catalog import cached_load_catalog

    monkeypatch.setenv("MOE_SELECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MOE_SELECT_RULES", raising=False)
    monkeypatch.delenv("MOE_SELECT_BACKENDS", raising=False)
    first = cached_load_catalog()
    assert list((tmp_path / "cache").glob("catalog-*.json"))
    again = cached_load_catalog()  # read back from the entry just written
    assert again is not first and again.vocabulary is not None
    assert [a.name for a in again.vocabulary.archs] == [a.name for a in first.vocabulary.archs]
    assert vocab.arch_in("sm107", ["sm10x"], again.vocabulary) and vocab.gpu_arch("T4", again.vocabulary) == "sm75"


# ------------------------------------------------------------------------------------------ never exit 2
def _cli_explain(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["explain", "--json", *args])
    return rc, out.getvalue(), err.getvalue()


def _judged(dep: dict, args: list[str]) -> None:
    """``dep`` through the Python API and the same through the CLI: judged (exit 0 or 1), never invalid input."""
    report = moe_select.explain(dep)
    assert report.status in ("ok", "rejected")
    rc, out, err = _cli_explain(args)
    assert rc in (0, 1), err
    assert json.loads(out)["status"] in ("ok", "rejected")


NAMES = st.from_regex(r"\A[a-z][a-z0-9_]{0,14}\Z")
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.one_of(st.from_regex(r"\A(sm|SM|sm_)[1-9][0-9]{1,2}[af]?\Z"), st.from_regex(r"\Agfx[0-9][0-9a-f]{2,3}\Z")))
def test_any_well_formed_arch_is_judged(arch):
    _judged({"arch": arch, "quant": "bf16", "model": MODEL},
            ["--arch", arch, "--quant", "bf16", "--model", MODEL_FLAG])


@FAST
@given(st.from_regex(r"\A[A-Z][A-Z0-9]{2,7}\Z"))
def test_any_unknown_product_asks_for_arch(product):
    assume(vocab.gpu_arch(product) is None)
    assert "arch:" in error_of(moe_select.explain, {"gpu": product, "quant": "bf16", "model": MODEL})
    rc, _, err = _cli_explain(["--gpu", product, "--quant", "bf16", "--model", MODEL_FLAG])
    assert rc == 2 and "arch:" in err


@FAST
@given(NAMES)
def test_any_well_formed_format_is_judged(quant):
    assume(quant not in QUANTS and quant != "auto")
    _judged({"gpu": "H200", "quant": quant, "model": MODEL}, ["--gpu", "H200", "--quant", quant, "--model", MODEL_FLAG])


@FAST
@given(NAMES)
def test_any_well_formed_activation_is_judged(activation):
    _judged({"gpu": "H200", "quant": "bf16", "model": {**MODEL, "activation": activation}},
            ["--gpu", "H200", "--quant", "bf16", "--model", f"{MODEL_FLAG},activation={activation}"])


@FAST
@given(NAMES)
def test_any_well_formed_routing_is_judged(routing):
    _judged({"gpu": "H200", "quant": "bf16", "model": {**MODEL, "routing": routing}},
            ["--gpu", "H200", "--quant", "bf16", "--model", f"{MODEL_FLAG},routing={routing}"])


@FAST
@given(NAMES)
def test_any_well_formed_a2a_is_judged(a2a):
    _judged({"gpu": "H200", "quant": "bf16", "model": MODEL, "tp": 2, "ep": 2, "a2a": a2a},
            ["--gpu", "H200", "--quant", "bf16", "--model", MODEL_FLAG, "--tp", "2", "--ep", "2", "--a2a", a2a])


@FAST
@given(NAMES)
def test_any_well_formed_runner_is_judged(runner):
    assume(runner != "auto")
    _judged({"gpu": "H200", "quant": "bf16", "model": MODEL, "runner": runner},
            ["--gpu", "H200", "--quant", "bf16", "--model", MODEL_FLAG, "--runner", runner])


@pytest.mark.parametrize("flags", [
    ["--arch", "sm130"], ["--arch", "gfx1201"], ["--gpu", "T4"], ["--gpu", "MI250"],
    ["--gpu", "H200", "--quant", "mxfp6"], ["--gpu", "H200", "--a2a", "zeta", "--tp", "2", "--ep", "2"],
])
def test_cli_process_judges_unknown_names_without_a_traceback(flags):
    args = ["--quant", "bf16", *flags] if "--quant" not in flags else flags
    proc = subprocess.run([sys.executable, "-m", "moe_select", "explain", "--json", *args, "--model",
                           f"{MODEL_FLAG},activation=geglu,routing=expert_choice"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["status"] in ("ok", "rejected")

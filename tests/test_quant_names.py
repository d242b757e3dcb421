"""The quantization method flag's names per release (backends/engines/names.yaml ``choices`` ``of: quant``).

vLLM's ModelConfig._verify_quantization raises 'Unknown quantization method' for a ``--quantization`` outside
QUANTIZATION_METHODS, and from 0.14.0 'The quantization method ... is deprecated' for a name of
DEPRECATED_QUANTIZATION_METHODS without --allow-deprecated-quantization; SGLang's parser takes QUANTIZATION_CHOICES
only. The tables were read in every vLLM wheel 0.7.3 .. 0.34.0 and every SGLang release 0.4.0 .. 0.5.23 (PyPI,
2026-12-05). Before them a misspelt or retired name (``--quantization nvfp4`` on vLLM, which dropped it in 0.9.0) was
planned as the checkpoint's format with a note, exit 0, and the engine died at startup.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from moe_select.cli import main
from moe_select.engine_tables import NamesTable, names, table
from moe_select.errors import InputError
from moe_select.launch_line import Launch, from_command
from moe_select.yamlio import load_text, validate

ROOT = Path(__file__).resolve().parents[1]
QWEN = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B")
VLLM = "vllm serve Qwen/Qwen3-30B-A3B -tp 2 "
SGLANG = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 2 "


def found(launch: Launch, kind: str) -> dict[str, str]:
    return {f.token: f.message for f in launch.found(kind)}


@pytest.mark.parametrize("line, needle", [
    (VLLM + "--quantization foo_bar", "'foo_bar' is not a quantization method value vllm takes: it refuses it at startup"),
    # SGLang has no plain nvfp4 name (nvfp4_online, modelopt_fp4): its parser refuses the choice
    (SGLANG + "--quantization nvfp4", "'nvfp4' is not a quantization method value sglang takes"),
    # SGLang matches choices exactly: upper case is refused
    (SGLANG + "--quantization FP8", "(did you mean fp8"),
])
def test_a_name_no_release_takes_is_refused(line: str, needle: str) -> None:
    with pytest.raises(InputError, match=None) as info:
        from_command(line, model_config=QWEN)
    msg = str(info.value)
    assert needle in msg and "give the format with --quant" in msg, msg


def test_the_names_offered_are_the_declared_releases():
    with pytest.raises(InputError) as info:
        from_command(VLLM + "--quantization fp8_per_blok", model_config=QWEN, engine_version="0.28.0")
    msg = str(info.value)
    assert "did you mean fp8_per_block" in msg and "bitsandbytes" not in msg   # gone in 0.28.0
    with pytest.raises(InputError) as info:
        from_command(VLLM + "--quantization fp8_per_blok", model_config=QWEN, engine_version="0.15.0")
    msg = str(info.value)
    assert "bitsandbytes" in msg and "fp8_per_block" not in msg   # 0.15.0 takes bitsandbytes, not fp8_per_block yet


@pytest.mark.parametrize("line, version, kind, needle", [
    (VLLM + "--quantization nvfp4", "0.28.0", "engine_error", "'nvfp4' was removed in vllm 0.9.0"),
    (VLLM + "--quantization bitsandbytes", "0.28.0", "engine_error", "'bitsandbytes' was removed in vllm 0.28.0"),
    (VLLM + "--quantization mxfp4_hadamard32", "0.33.0", "engine_error", "first shipped in vllm 0.34.0"),
    (SGLANG + "--quantization marlin", "0.5.20", "engine_error", "'marlin' was removed in sglang 0.5.20"),
    (SGLANG + "--quantization humming", "0.5.15", "engine_error", "first shipped in sglang 0.5.16"),
])
def test_a_name_of_other_releases_is_an_engine_error_at_the_declared_one(line, version, kind, needle):
    launch = from_command(line, model_config=QWEN, engine_version=version)
    msgs = found(launch, kind)
    flag = line.split(" --quantization ")[1]
    assert needle in msgs.get(f"--quantization {flag}", ""), msgs


@pytest.mark.parametrize("line, version", [
    (VLLM + "--quantization bitsandbytes", "0.27.1"), (VLLM + "--quantization mxfp4_hadamard32", "0.34.0"),
    (SGLANG + "--quantization marlin", "0.5.19"), (SGLANG + "--quantization humming", "0.5.16"),
])
def test_the_release_that_takes_the_name_has_no_error(line, version):
    launch = from_command(line, model_config=QWEN, engine_version=version)
    assert not any("--quantization" in t for t in found(launch, "engine_error")), found(launch, "engine_error")


def test_vllm_deprecated_names_raise_without_the_switch():
    # experts_int8 was deprecated 0.14.0 .. 0.19.x (DEPRECATED_QUANTIZATION_METHODS), taken plainly before and after
    for version, errs in (("0.13.0", False), ("0.14.0", True), ("0.19.1", True), ("0.20.0", False)):
        launch = from_command(VLLM + "--quantization experts_int8", model_config=QWEN, engine_version=version)
        msg = found(launch, "engine_error").get("--quantization experts_int8", "")
        assert ("deprecated in vllm" in msg and "--allow-deprecated-quantization" in msg) is errs, (version, msg)
    launch = from_command(VLLM + "--quantization experts_int8 --allow-deprecated-quantization", model_config=QWEN,
                          engine_version="0.15.0")
    assert "--quantization experts_int8" not in found(launch, "engine_error")
    # --no-allow-deprecated-quantization (BooleanOptionalAction) does not allow it
    launch = from_command(VLLM + "--quantization fbgemm_fp8 --no-allow-deprecated-quantization", model_config=QWEN,
                          engine_version="0.34.0")
    assert "deprecated" in found(launch, "engine_error").get("--quantization fbgemm_fp8", "")
    # the switch itself came in 0.14.0: the 0.13.0 parser does not know it
    launch = from_command(VLLM + "--quantization fp8 --allow-deprecated-quantization", model_config=QWEN,
                          engine_version="0.13.0")
    assert "--allow-deprecated-quantization" in found(launch, "engine_error")


def test_vllm_lower_cases_the_name():
    # ModelConfig.validate_quantization_before lower-cases it; the online fact reads the lower-case name
    launch = from_command(VLLM + "--quantization FP8_PER_BLOCK", model_config=QWEN, engine_version="0.28.0")
    assert launch.deployment["quant"] == "fp8_block"
    assert not found(launch, "engine_error")


def test_a_release_newer_than_the_ones_read_is_not_refused():
    launch = from_command(VLLM + "--quantization foo_bar", model_config=QWEN, engine_version="0.35.0")
    notes = [f.message for f in launch.found("note") if f.token == "--quantization foo_bar"]
    assert any("up to 0.34.0" in n and "may take it" in n for n in notes), notes
    assert not launch.found("engine_error")
    launch = from_command(SGLANG + "--quantization foo_bar", model_config=QWEN, engine_version="0.5.24")
    assert any("up to 0.5.23" in f.message for f in launch.found("note")), launch.found("note")


def test_explain_exits_nonzero_on_a_refused_name(capsys):
    rc = main(["explain", "--from-command", VLLM + "--quantization nvfp4", "--model-config", QWEN, "--gpu", "H200",
               "--engine-version", "0.28.0"])
    out = capsys.readouterr().out
    assert rc == 1 and "'nvfp4' was removed in vllm 0.9.0" in out, out
    rc = main(["explain", "--from-command", VLLM + "--quantization foo", "--model-config", QWEN, "--gpu", "H200"])
    assert rc == 2 and "is not a quantization method value vllm takes" in capsys.readouterr().err


def test_every_online_flag_of_the_formats_is_a_name_its_release_takes():
    """backends/formats.yaml's online facts write ``--quantization X`` at a version range: X is a name the engine took
    then (the two tables agree; a format fact naming a method its release lacks would emit a line the engine refuses)."""
    from packaging.specifiers import SpecifierSet

    from moe_select.formats import table as formats
    from moe_select.launch_line import online_flag

    checked = 0
    for f in formats().values():
        for w in f.online_ways:
            fv = online_flag(w.how, w.engine)
            c = names().choices_of(w.engine, "quant")
            if fv is None or c is None or not w.version:
                continue
            low = min((s.version for s in SpecifierSet(w.version) if s.operator in (">=", "==")), default=None)
            if low is None:
                continue
            assert c.norm(fv[1]) in names().accepted(w.engine, "quant"), (f.name, w.how)
            assert c.first_release(fv[1], low) is None and c.removed_in(fv[1], low) is None, (f.name, w.how, low)
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("extra, msg", [
    ("since: {nope: \"0.2.0\"}", "since names nope, which the option does not take"),
    ("deprecated: {a: [\"0.2.0\"]}", "deprecated is read for of: quant only"),
])
def test_the_quant_row_is_validated(extra, msg):
    head = ("schema_version: 1\nrunners: []\na2a: []\nchoices:\n"
            "  - {engine: vllm, of: runner, closed: true, also: [a, b], source: \"a/b#1\", " + extra + "}\n")
    with pytest.raises(InputError, match=msg) as e:
        validate(NamesTable, load_text(head, "n.yaml"), "n.yaml")
    assert "n.yaml:" in str(e.value)
    quant = head.replace("of: runner", "of: quant")
    for bad, why in (("deprecated: {a: [\"0.3.0\", \"0.2.0\"]}, deprecated_source: \"a/b#2\"", "0.3.0 is not older than 0.2.0"),
                     ("deprecated: {a: []}, deprecated_source: \"a/b#2\"", "give \\[first\\] or \\[first, end\\]"),
                     ("deprecated: {a: [\"x.y\"]}, deprecated_source: \"a/b#2\"", "PEP 440"),
                     ("deprecated: {zz: [\"0.2.0\"]}, deprecated_source: \"a/b#2\"", "deprecated names zz")):
        with pytest.raises(InputError, match=why):
            validate(NamesTable, load_text(quant.replace(extra, bad), "n.yaml"), "n.yaml")
    ok = quant.replace(extra, "deprecated: {a: [\"0.2.0\", \"0.3.0\"]}, deprecated_source: \"a/b#2\", since: {b: \"0.2.0\"}")
    c = validate(NamesTable, load_text(ok, "n.yaml"), "n.yaml").choices_of("vllm", "quant")
    assert c is not None and c.deprecated_at("a", "0.2.5") == "from 0.2.0 until 0.3.0" and c.deprecated_at("a", "0.3.0") is None
    assert c.deprecated_at("a", "0.2.5rc1") is None   # a pre-release: not read
    assert c.first_release("b", "0.1.0") == "0.2.0" and c.first_release("b", "0.2.0rc1") is None


def test_vllm_names_are_not_judged_on_a_quantized_checkpoint():
    """A trial of this change (2026-12-05): vLLM's _verify_quantization runs the checkpoint's overrides before its name
    check, and AutoAWQConfig / AutoGPTQConfig take 'marlin' (0.28.0, 0.34.0), ModelOpt NVFP4's and gpt-oss MXFP4's
    overrides ignore the name: those lines start, so a removed or unknown name is not refused there."""
    awq = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-AWQ")
    nvfp4 = str(ROOT / "examples" / "model_configs" / "nvidia__Qwen3-30B-A3B-NVFP4")
    for line, cfg in (("vllm serve Qwen/Qwen3-30B-A3B-AWQ --quantization marlin", awq),
                      ("vllm serve nvidia/Qwen3-30B-A3B-NVFP4 --quantization nvfp4", nvfp4),
                      ("vllm serve nvidia/Qwen3-30B-A3B-NVFP4 --quantization whatever", nvfp4)):
        launch = from_command(line, model_config=cfg, engine_version="0.28.0")
        assert not any("--quantization" in t for t in found(launch, "engine_error")), (line, found(launch, "engine_error"))
    # the known mismatches still raise (vllm.yaml quant_mismatch): an FP8 checkpoint named AWQ
    fp8 = str(ROOT / "examples" / "model_configs" / "Qwen__Qwen3-30B-A3B-FP8")
    launch = from_command("vllm serve Qwen/Qwen3-30B-A3B-FP8 --quantization awq", model_config=fp8, engine_version="0.28.0")
    assert "does not match" in found(launch, "engine_error").get("--quantization awq", "")


@pytest.mark.parametrize("value", ["None", "none", "''"])
def test_vllm_none_means_no_method(value):
    launch = from_command(VLLM + f"--quantization {value}", model_config=QWEN, engine_version="0.28.0")
    assert "quant" not in launch.values and launch.deployment.get("quant") in (None, "bf16")
    assert any("no quantization method" in f.message for f in launch.found("note"))


def test_pre_releases_are_not_judged_by_final_release_bounds():
    # SGLang 0.5.0rc2's choices list mxfp4 (first among the finals in 0.5.1): a pre-release is not refused
    launch = from_command(SGLANG + "--quantization mxfp4", model_config=QWEN, engine_version="0.5.0rc2")
    assert not any("--quantization" in t for t in found(launch, "engine_error")), found(launch, "engine_error")
    launch = from_command(SGLANG + "--quantization mxfp4", model_config=QWEN, engine_version="0.4.10")
    assert "first shipped in sglang 0.5.1" in found(launch, "engine_error")["--quantization mxfp4"]


def test_the_allow_switch_is_in_the_vllm_table():
    entry = next(e for e in table("vllm").flags if e.means == "allow_deprecated_quant")
    assert entry.names == ["--allow-deprecated-quantization"] and entry.since is not None and entry.since.version == "0.14.0"


def test_emit_keeps_the_allow_deprecated_switch():
    """A trial of this change: the emitted line kept --quantization experts_int8 but dropped the switch, and did not
    start at 0.17.0."""
    from moe_select.launch_emit import emit

    launch = from_command(VLLM + "--quantization experts_int8 --allow-deprecated-quantization", model_config=QWEN,
                          engine_version="0.17.0")
    report = launch.explain(deployment={"gpu": "H200"})
    out = emit(report.plan, "vllm", launch=launch, engine_version="0.17.0")
    assert "--allow-deprecated-quantization" in out.argv and "--quantization" in out.argv, out.argv
    again = from_command(" ".join(out.argv), model_config=QWEN, engine_version="0.17.0")
    assert not found(again, "engine_error"), found(again, "engine_error")


def test_sglang_makes_mxfp8_online_from_0_5_9():
    """A trial of this change: the online fact started at 0.5.10.post1 (older releases not read); the 0.5.9 wheel's
    get_quant_config gives --quantization mxfp8 an unserialized Fp8Config(use_mxfp8) and Fp8MoEMethod quantizes the
    experts (_process_mxfp8_moe_weights)."""
    launch = from_command(SGLANG + "--quantization mxfp8", model_config=QWEN, engine_version="0.5.9")
    assert launch.deployment["quant"] == "mxfp8"
    launch = from_command(SGLANG + "--quantization mxfp8", model_config=QWEN, engine_version="0.5.8")
    assert "first shipped in sglang 0.5.9" in found(launch, "engine_error")["--quantization mxfp8"]


def test_vllm_quantization_config_is_a_flag_from_0_22():
    """A trial of this change: --quantization-config (ModelConfig.quantization_config, 0.22.0 on) was answered 'did you
    mean --quantization'; it is read (not planned) from 0.22.0, and a release before it does not have it."""
    line = VLLM + "--quantization fp8_per_block --quantization-config '{\"moe\": {\"activation\": \"fp8\"}}'"
    launch = from_command(line, model_config=QWEN, engine_version="0.28.0")
    assert not found(launch, "engine_error") and not found(launch, "unknown"), found(launch, "unknown")
    assert any(f.token.startswith("--quantization-config") for f in launch.found("understood"))
    launch = from_command(line, model_config=QWEN, engine_version="0.21.0")
    assert any(t.startswith("--quantization-config") for t in found(launch, "engine_error"))


@pytest.mark.parametrize("version, ambiguous", [("0.21.0", False), ("0.22.0", True), (None, True)])
def test_vllm_quant_abbreviation_by_release(version, ambiguous):
    """argparse reads ``--quant`` as a prefix of the options the release declares: --quantization alone before 0.22.0,
    also --quantization-config from 0.22.0 (vllm/engine/arg_utils.py EngineArgs.add_cli_args), where the parser exits
    with 'ambiguous option'."""
    launch = from_command("vllm serve Qwen/Qwen3-30B-A3B --quant fp8 --tensor-parallel-size 2", model_config=QWEN,
                          engine_version=version)
    errors = [f for f in launch.findings if f.kind == "engine_error" and f.token == "--quant"]
    if ambiguous:
        assert errors and "--quantization-config" in errors[0].message
        assert "quant" not in launch.deployment
    else:
        assert not errors and launch.deployment["quant"] == "fp8_tensor"


def test_vllm_short_option_with_its_value_in_one_word():
    """argparse splits a single-dash option from a value written in the same word: -qfp8 is -q fp8."""
    launch = from_command("vllm serve Qwen/Qwen3-30B-A3B -qfp8", model_config=QWEN)
    assert launch.deployment["quant"] == "fp8_tensor"
    assert not [f for f in launch.findings if f.kind == "unknown"]

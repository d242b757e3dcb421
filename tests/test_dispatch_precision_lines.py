"""Issue 21: the dispatch precision in the engines' own launch language (backends/engines/*.yaml ``means:
dispatch_precision``): each flag and variable read into the deployment's ``dispatch_precision`` (its values, its default,
a value the engine refuses or ignores, the releases that have it), the precedence between two that disagree, a launch
line planned end to end, and a plan written back as a launch that reads back the same.

Facts (the table entries' ``checked:`` fields): SGLang ``--deepep-dispatcher-output-dtype`` auto|bf16|fp8|int8|nvfp4 (first
in 0.5.13), ``--flashinfer-a2a-dispatch-type`` auto|bf16|nvfp4|mxfp8 (first in 0.5.20, the main layers only), the
variable SGLANG_MORI_DISPATCH_DTYPE (lower-cased, from 0.5.10; an unknown value ignored up to 0.5.21, raised for from
0.5.22), the deprecated SGLANG_MORI_FP4_DISP / SGLANG_MORI_FP8_DISP (read up to 0.5.20) and SGLANG_DEEPEP_BF16_DISPATCH
(still read by 0.5.23); vLLM VLLM_DEEPEPLL_NVFP4_DISPATCH (``bool(int(v))``, from 0.12.0, DeepEP low-latency).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select import engine_tables
from moe_select.catalog import default_catalog
from moe_select.errors import InputError
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
V3 = str(CONFIGS / "deepseek-ai__DeepSeek-V3")
NVFP4 = str(CONFIGS / "nvidia__DeepSeek-V3.1-NVFP4")
SGL = "python -m sglang.launch_server --model-path"


def _read(line: str, version: str | None = None, **kw):
    return from_command(line, {}, engine_version=version, **kw)


def _kinds(launch, kind: str, token: str) -> list[str]:
    """Messages of the findings of ``kind`` whose token starts with ``token``."""
    return [f.message for f in launch.findings if f.kind == kind and f.token.startswith(token)]


# ------------------------------------------------------------------------------------------------- the tables
def test_every_dispatch_entry_names_known_all_to_alls_and_cites():
    a2a = default_catalog().a2a
    seen = []
    for engine in ("sglang", "vllm"):
        t = engine_tables.table(engine)
        for e in [*t.flags, *t.env]:
            if e.means == "dispatch_precision":
                seen.append(e.name)
                assert e.layers in ("main", "all") and e.values and t.cite(e) and e.checked
                assert set(e.a2a or []) <= set(a2a), f"{e.name}: {e.a2a} not all in backends/a2a"
    assert set(seen) == {"--deepep-dispatcher-output-dtype", "--flashinfer-a2a-dispatch-type", "SGLANG_MORI_DISPATCH_DTYPE",
                         "SGLANG_MORI_FP4_DISP", "SGLANG_MORI_FP8_DISP", "SGLANG_DEEPEP_BF16_DISPATCH", "VLLM_DEEPEPLL_NVFP4_DISPATCH"}


BASE = {"name": "SOME_VAR", "means": "dispatch_precision", "checked": "x", "source": "a/b#1", "values": {"auto": None, "bf16": "bf16"},
        "layers": "all", "a2a": ["deepep"]}


@pytest.mark.parametrize("change, says", [
    ({"layers": None}, "needs layers"),
    ({"a2a": None}, "needs a2a"),
    ({"a2a": []}, "name at least one all-to-all"),
    ({"a2a": ["Deep-EP"]}, "not an all-to-all backend name"),
    ({"values": {"auto": None, "bf16": "bfloat16"}}, "'bfloat16' is not a precision name"),
    ({"parse": "env_bool", "values": {"true": "bf16"}}, "values can name only those"),
    ({"parse": "lower", "values": {"BF16": "bf16"}}, "keys must be lower case"),
    ({"unknown_refused_since": {"by": "a/b#2", "version": "1.0"}}, "unknown: ignored only"),
    ({"means": "tp", "values": None}, "for means: dispatch_precision only"),
    ({"means": "tp", "values": None, "layers": None, "a2a": None, "parse": "lower"}, "means activation_precision or dispatch_precision only"),
])
def test_a_dispatch_entry_that_does_not_fit_is_refused(change, says):
    with pytest.raises(ValueError, match=says):
        engine_tables.EnvEntry.model_validate({k: v for k, v in {**BASE, **change}.items() if v is not None})


def test_a_bad_dispatch_entry_in_the_table_names_file_and_line(tmp_path, monkeypatch):
    text = (ROOT / "backends/engines/sglang.yaml").read_text()
    assert text.count("layers: main, a2a: [flashinfer]") == 1
    (tmp_path / "sglang.yaml").write_text(text.replace("layers: main, a2a: [flashinfer]", "layers: mtp, a2a: [flashinfer]"))
    monkeypatch.setattr(engine_tables, "engines_dir", lambda: tmp_path)
    engine_tables.table.cache_clear()
    try:
        with pytest.raises(InputError, match=r"backends/engines/sglang.yaml:\d+.*layers"):
            engine_tables.table("sglang")
    finally:
        engine_tables.table.cache_clear()


@pytest.mark.parametrize("parse, raw, want", [
    ("exact", "bf16", ("bf16", None)), ("exact", "BF16", (None, None)),
    ("lower", "BF16", ("bf16", "'BF16' read as 'bf16'")), ("lower", "fp16", (None, None)),
    ("env_bool", "Yes", ("1", "'Yes' read as '1'")), ("env_bool", "n", ("0", "'n' read as '0'")), ("env_bool", "on", (None, None)),
    ("bool_env_var", "TRUE", ("1", "'TRUE' read as '1'")), ("bool_env_var", "yes", ("0", "'yes' is neither true/1 nor false/0: read as false (the engine warns)")),
    ("int_bool", "2", ("1", "'2' read as '1'")), ("int_bool", "0", ("0", None)), ("int_bool", "x", (None, None)),
])
def test_the_engine_reads_a_raw_value_as_its_parser_does(parse, raw, want):
    values = {"0": None, "1": "bf16"} if parse in ("env_bool", "bool_env_var", "int_bool") else {"auto": None, "bf16": "bf16"}
    e = engine_tables.EnvEntry.model_validate({**BASE, "parse": parse, "values": values})
    assert e.engine_value(raw) == want


# ---------------------------------------------------------------------------- SGLang --deepep-dispatcher-output-dtype
DEEPEP = f"{SGL} {V3} --tp 8 --moe-a2a-backend deepep"


@pytest.mark.parametrize("value, want", [("bf16", "bf16"), ("fp8", "fp8_group"), ("int8", "fp8_group"), ("nvfp4", "nvfp4")])
def test_deepep_flag_values(value, want):
    launch = _read(f"{DEEPEP} --deepep-dispatcher-output-dtype {value}", "0.5.23")
    assert launch.deployment["dispatch_precision"] == want  # every MoE layer kind: the scalar
    assert "every MoE layer kind" in launch.provenance["dispatch_precision"]


def test_deepep_flag_auto_is_the_default_nothing_set():
    launch = _read(f"{DEEPEP} --deepep-dispatcher-output-dtype auto", "0.5.23")
    assert "dispatch_precision" not in launch.deployment
    assert _kinds(launch, "note", "--deepep-dispatcher-output-dtype") == ["auto: auto (the engine chooses per layer from its weights)"]


def test_deepep_flag_value_the_parser_refuses_is_an_engine_error():
    launch = _read(f"{DEEPEP} --deepep-dispatcher-output-dtype fp4", "0.5.23")
    assert "dispatch_precision" not in launch.deployment
    assert _kinds(launch, "engine_error", "--deepep-dispatcher-output-dtype") == [
        "'fp4' is not one of auto, bf16, fp8, int8, nvfp4: sglang refuses it (not read)"]


@pytest.mark.parametrize("version, read", [("0.5.12", False), ("0.5.13", True)])
def test_deepep_flag_first_in_0_5_13(version, read):
    launch = _read(f"{DEEPEP} --deepep-dispatcher-output-dtype bf16", version)
    assert launch.deployment.get("dispatch_precision") == ("bf16" if read else None)
    # a flag the declared release's parser lacks: it exits at startup (an engine error, explain exits 1)
    assert bool(_kinds(launch, "engine_error", "--deepep-dispatcher-output-dtype")) is not read


def test_deepep_flag_with_another_all_to_all_has_no_effect():
    launch = _read(f"{SGL} {V3} --tp 8 --moe-a2a-backend mori --deepep-dispatcher-output-dtype bf16", "0.5.23")
    assert "dispatch_precision" not in launch.deployment
    assert _kinds(launch, "note", "--deepep-dispatcher-output-dtype") == [
        "sets the dispatch of deepep, deepep_v2, pplx only: no effect with a2a mori (not read)"]


# ------------------------------------------------------------------------------- SGLang SGLANG_DEEPEP_BF16_DISPATCH
def test_deprecated_bf16_variable_is_read_where_the_flag_is_auto():
    for flag in ("", " --deepep-dispatcher-output-dtype auto"):
        launch = _read(f"SGLANG_DEEPEP_BF16_DISPATCH=1 {DEEPEP}{flag}", "0.5.23")
        assert launch.deployment["dispatch_precision"] == "bf16"
        assert _kinds(launch, "deprecated", "SGLANG_DEEPEP_BF16_DISPATCH")


def test_the_flag_wins_over_the_deprecated_variable_and_says_so():
    launch = _read(f"SGLANG_DEEPEP_BF16_DISPATCH=true {DEEPEP} --deepep-dispatcher-output-dtype fp8", "0.5.23")
    assert launch.deployment["dispatch_precision"] == "fp8_group"
    assert [m for m in _kinds(launch, "note", "SGLANG_DEEPEP_BF16_DISPATCH") if m.startswith("not read")] == [
        "not read: --deepep-dispatcher-output-dtype fp8 decides (sglang reads it first); this one says bf16, that one fp8_group"]


def test_deprecated_bf16_variable_not_a_boolean_is_an_engine_error():
    launch = _read(f"SGLANG_DEEPEP_BF16_DISPATCH=maybe {DEEPEP}", "0.5.23")
    assert "dispatch_precision" not in launch.deployment and _kinds(launch, "engine_error", "SGLANG_DEEPEP_BF16_DISPATCH")


# ---------------------------------------------------------------------------- SGLang --flashinfer-a2a-dispatch-type
FI = f"{SGL} {NVFP4} --tp 8 --moe-a2a-backend flashinfer"


@pytest.mark.parametrize("value, want", [("bf16", {"main": "bf16"}), ("nvfp4", {"main": "nvfp4"}), ("mxfp8", {"main": "mxfp8"}),
                                         ("auto", None)])
def test_flashinfer_flag_values_set_the_main_layers(value, want):
    launch = _read(f"{FI} --flashinfer-a2a-dispatch-type {value}", "0.5.23")
    assert launch.deployment.get("dispatch_precision") == want


@pytest.mark.parametrize("version, read", [("0.5.19", False), ("0.5.20", True)])
def test_flashinfer_flag_first_in_0_5_20(version, read):
    launch = _read(f"{FI} --flashinfer-a2a-dispatch-type nvfp4", version)
    assert launch.deployment.get("dispatch_precision") == ({"main": "nvfp4"} if read else None)


def test_flashinfer_flag_with_another_all_to_all_is_an_engine_error_unless_auto():
    bad = _read(f"{SGL} {NVFP4} --tp 8 --moe-a2a-backend deepep --flashinfer-a2a-dispatch-type nvfp4", "0.5.23")
    assert "dispatch_precision" not in bad.deployment
    assert _kinds(bad, "engine_error", "--flashinfer-a2a-dispatch-type") == [
        "sets the dispatch of flashinfer only: sglang raises for it with a2a deepep at startup"]
    ok = _read(f"{SGL} {NVFP4} --tp 8 --moe-a2a-backend deepep --flashinfer-a2a-dispatch-type auto", "0.5.23")
    assert not _kinds(ok, "engine_error", "--flashinfer-a2a-dispatch-type")


def test_both_sglang_flags_are_kept_apart():
    launch = _read(f"{DEEPEP} --deepep-dispatcher-output-dtype bf16 --flashinfer-a2a-dispatch-type bf16", "0.5.23")
    assert launch.deployment["dispatch_precision"] == "bf16"
    assert not _kinds(launch, "note", "--flashinfer-a2a-dispatch-type bf16: given again")
    assert _kinds(launch, "engine_error", "--flashinfer-a2a-dispatch-type")


# --------------------------------------------------------------------------------------------------- SGLang MoRI
MORI = f"{SGL} {V3} --tp 8 --moe-a2a-backend mori"


@pytest.mark.parametrize("value, want", [("bf16", "bf16"), ("fp8", "fp8_group"), ("FP4", "mxfp4"), ("mxfp8", "mxfp8"), ("auto", None)])
def test_mori_variable_values(value, want):
    launch = _read(f"SGLANG_MORI_DISPATCH_DTYPE={value} {MORI}", "0.5.23")
    assert launch.deployment.get("dispatch_precision") == want


@pytest.mark.parametrize("version, kind", [("0.5.21", "ignored"), ("0.5.22", "engine_error"), ("0.5.23", "engine_error")])
def test_mori_unknown_value_ignored_then_refused(version, kind):
    launch = _read(f"SGLANG_MORI_DISPATCH_DTYPE=fp16 {MORI}", version)
    assert "dispatch_precision" not in launch.deployment
    assert _kinds(launch, kind, "SGLANG_MORI_DISPATCH_DTYPE")


def test_mori_variable_first_in_0_5_10():
    assert "dispatch_precision" not in _read(f"SGLANG_MORI_DISPATCH_DTYPE=fp8 {MORI}", "0.5.9").deployment
    assert _read(f"SGLANG_MORI_DISPATCH_DTYPE=fp8 {MORI}", "0.5.10").deployment["dispatch_precision"] == "fp8_group"


@pytest.mark.parametrize("version, want, kind", [("0.5.9", "fp8_group", None), ("0.5.20", "fp8_group", "deprecated"),
                                                 ("0.5.21", None, "ignored")])
def test_mori_fp8_variable_deprecated_then_ignored(version, want, kind):
    launch = _read(f"SGLANG_MORI_FP8_DISP=1 {MORI}", version)
    assert launch.deployment.get("dispatch_precision") == want
    if kind:
        assert _kinds(launch, kind, "SGLANG_MORI_FP8_DISP")


def test_mori_fp4_wins_over_fp8_and_the_new_variable_over_both():
    both = _read(f"SGLANG_MORI_FP8_DISP=1 SGLANG_MORI_FP4_DISP=1 {MORI}", "0.5.20")
    assert both.deployment["dispatch_precision"] == "mxfp4"
    assert any(m.startswith("not read: SGLANG_MORI_FP4_DISP=1 decides") for m in _kinds(both, "note", "SGLANG_MORI_FP8_DISP"))
    shadowed = _read(f"SGLANG_MORI_DISPATCH_DTYPE=auto SGLANG_MORI_FP8_DISP=1 {MORI}", "0.5.20")
    assert "dispatch_precision" not in shadowed.deployment  # an explicit auto decides: the deprecated one is not read
    assert _kinds(shadowed, "note", "SGLANG_MORI_FP8_DISP") == [
        "not read: SGLANG_MORI_DISPATCH_DTYPE=auto decides (sglang reads it first); this one says fp8_group, that one auto"]


def test_mori_fp8_variable_not_a_boolean_is_read_as_false():
    launch = _read(f"SGLANG_MORI_FP8_DISP=on {MORI}", "0.5.20")
    assert "dispatch_precision" not in launch.deployment
    assert "'on' is neither true/1 nor false/0: read as false (the engine warns)" in _kinds(launch, "note", "SGLANG_MORI_FP8_DISP")


# ---------------------------------------------------------------------------------------- vLLM DeepEP low latency
VLLM_LL = f"vllm serve {NVFP4} --tensor-parallel-size 8 --enable-expert-parallel --all2all-backend deepep_low_latency"


@pytest.mark.parametrize("value, want", [("1", {"main": "nvfp4"}), ("2", {"main": "nvfp4"}), ("0", None)])
def test_vllm_nvfp4_variable_values(value, want):
    launch = _read(f"VLLM_DEEPEPLL_NVFP4_DISPATCH={value} {VLLM_LL}", "0.33.0")
    assert launch.deployment.get("dispatch_precision") == want


def test_vllm_nvfp4_variable_not_an_integer_is_an_engine_error():
    launch = _read(f"VLLM_DEEPEPLL_NVFP4_DISPATCH=yes {VLLM_LL}", "0.33.0")
    assert "dispatch_precision" not in launch.deployment and _kinds(launch, "engine_error", "VLLM_DEEPEPLL_NVFP4_DISPATCH")


@pytest.mark.parametrize("version, read", [("0.11.2", False), ("0.12.0", True)])
def test_vllm_nvfp4_variable_first_in_0_12_0(version, read):
    launch = _read(f"VLLM_DEEPEPLL_NVFP4_DISPATCH=1 {VLLM_LL}", version)
    assert ("dispatch_precision" in launch.deployment) is read


def test_vllm_nvfp4_variable_is_low_latency_only():
    line = VLLM_LL.replace("deepep_low_latency", "deepep_high_throughput")
    launch = _read(f"VLLM_DEEPEPLL_NVFP4_DISPATCH=1 {line}", "0.33.0")
    assert "dispatch_precision" not in launch.deployment
    assert _kinds(launch, "note", "VLLM_DEEPEPLL_NVFP4_DISPATCH") == [
        "sets the dispatch of deepep (low_latency) only: no effect with a2a deepep (normal) (not read)"]


# ------------------------------------------------------------------------------------ planned, emitted, read back
@pytest.mark.parametrize("line, version, gpu, engine, want, written", [
    (f"{DEEPEP} --deepep-dispatcher-output-dtype bf16", "0.5.23", "H200", "sglang", "bf16",
     ["--deepep-dispatcher-output-dtype", "bf16"]),
    (f"{SGL} {NVFP4} --tp 8 --enable-dp-attention --dp 8 --moe-a2a-backend flashinfer --flashinfer-a2a-dispatch-type nvfp4", "0.5.23",
     "B200", "sglang", {"main": "nvfp4"}, ["--flashinfer-a2a-dispatch-type", "nvfp4"]),
    # the plan's aiter runs only under SGLANG_USE_AITER (backends/aiter.yaml), which the line does not state: written on
    (f"SGLANG_MORI_DISPATCH_DTYPE=fp8 {MORI}", "0.5.23", "MI355X", "sglang", "fp8_group",
     {"SGLANG_MORI_DISPATCH_DTYPE": "fp8", "SGLANG_USE_AITER": "1"}),
    (f"VLLM_DEEPEPLL_NVFP4_DISPATCH=1 {VLLM_LL}", "0.33.0", "B200", "vllm", {"main": "nvfp4"}, {"VLLM_DEEPEPLL_NVFP4_DISPATCH": "1"}),
])
def test_a_launch_line_is_planned_emitted_and_read_back(line, version, gpu, engine, want, written):
    launch = _read(line, version)
    assert launch.deployment["dispatch_precision"] == want
    r = moe_select.explain(dict(launch.deployment, gpu=gpu))
    assert r.plan is not None, r.summary()
    main = want if isinstance(want, str) else want["main"]
    assert r.plan.deployment.dispatch_precision == main
    assert all(k.deployment.dispatch_precision == (main if isinstance(want, str) else "auto") for k in r.plan.layers)
    out = emit(r.plan, engine, engine_version=version)  # no launch given: only what the plan asks is written
    if isinstance(written, list):
        i = out.argv.index(written[0])
        assert out.argv[i:i + 2] == written and not out.env
    else:
        assert out.env == written
    again = _read(" ".join([*(f"{k}={v}" for k, v in out.env.items()), *out.argv]), version)
    assert again.deployment["dispatch_precision"] == want


def test_an_auto_plan_writes_no_dispatch_flag():
    r = moe_select.explain(dict(_read(DEEPEP, "0.5.23").deployment, gpu="H200"))
    assert r.plan is not None
    out = emit(r.plan, "sglang", engine_version="0.5.23")
    assert "--deepep-dispatcher-output-dtype" not in out.argv and not out.env


def test_a_mori_line_forcing_fp4_on_every_layer_is_refused_for_the_bf16_mtp_layer(mxfp4_mtp):
    """SGLANG_MORI_DISPATCH_DTYPE sets every MoE layer kind: read as the scalar, the BF16 MTP layer gets FP4 activations
    (sgl-project/sglang#20453), refused citing backends/a2a/mori.yaml."""
    launch = _read(f"SGLANG_MORI_DISPATCH_DTYPE=fp4 {SGL} {mxfp4_mtp} --tp 8 --moe-a2a-backend mori "
                   "--speculative-algorithm EAGLE", "0.5.23")   # the draft runs the MTP layer
    assert launch.deployment["dispatch_precision"] == "mxfp4"
    r = moe_select.explain(dict(launch.deployment, gpu="MI355X"))
    assert r.plan is None and r.refused_layer_kinds() == ["mtp"]
    assert any(reason.source.startswith("backends/a2a/mori.yaml:") for c in r.layers[0].candidates for reason in c.reasons
               if "dispatch_precision" in reason.detail or "does not send" in reason.detail)


def test_a_per_kind_request_a_variable_for_every_kind_cannot_say_is_an_emit_error(mxfp4_mtp):
    r = moe_select.explain({"gpu": "MI355X", "engine": "sglang", "engine_version": "0.5.23", "tp": 8, "ep": 8, "a2a": "mori",
                            "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "mxfp4", "mtp": "bf16"}})
    assert r.plan is not None
    with pytest.raises(EmitError, match=r"SGLANG_MORI_DISPATCH_DTYPE sets every MoE layer kind alike: it cannot say mtp bf16"):
        emit(r.plan, "sglang", engine_version="0.5.23")


def test_a_main_layers_flag_cannot_say_a_non_auto_mtp_kind():
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": "0.5.23", "tp": 8, "ep": 8, "dp": 8, "a2a": "flashinfer",
                            "model_config": NVFP4, "dispatch_precision": {"main": "nvfp4", "mtp": "bf16"}})
    assert r.plan is not None, r.summary()
    with pytest.raises(EmitError, match=r"--flashinfer-a2a-dispatch-type sets the main layers only .*: it cannot say mtp bf16"):
        emit(r.plan, "sglang", engine_version="0.5.23")


def test_a_flag_newer_than_the_declared_engine_cannot_be_written():
    r = moe_select.explain({"gpu": "B200", "engine": "sglang", "engine_version": "0.5.19", "tp": 8, "ep": 8, "dp": 8, "a2a": "flashinfer",
                            "model_config": NVFP4, "dispatch_precision": {"main": "nvfp4"}})
    assert r.plan is not None, r.summary()
    with pytest.raises(EmitError, match=r"--flashinfer-a2a-dispatch-type: added in .*0\.5\.20"):
        emit(r.plan, "sglang", engine_version="0.5.19")
    assert "--flashinfer-a2a-dispatch-type" in emit(r.plan, "sglang", engine_version="0.5.20").argv


def test_emit_names_a_refused_flag_it_does_not_write():
    """A flag of the line that the engine refuses (here the FlashInfer dispatch type with DeepEP: SGLang raises) is not
    written back, and the emitted launch says so in a comment instead of dropping it silently (break-it review)."""
    line = (f"python -m sglang.launch_server --model-path {CONFIGS / 'Qwen__Qwen3-30B-A3B-FP8'} --tp-size 8 --ep-size 8 "
            "--moe-a2a-backend deepep --flashinfer-a2a-dispatch-type nvfp4")
    launch = from_command(line, {})
    refused = [f for f in launch.findings if f.kind == "engine_error"]
    assert refused, [(f.kind, f.token) for f in launch.findings]
    r = moe_select.explain(dict(launch.deployment, gpu="H200"))
    assert r.plan is not None
    out = emit(r.plan, "sglang", engine_version="0.5.23", launch=launch)
    assert "--flashinfer-a2a-dispatch-type" not in out.argv
    assert any(c.startswith(f"not written: {refused[0].token}") for c in out.comments)

"""Tests that kill the mutants a sampled mutation run (benchmarks/mutation.py ``--sample 50 --seed 19``, issue 19,
mutmut 3.8.1) left surviving in deployment, yamlio and model_config.

Each test names the mutant(s) it kills as mutmut prints them (``module.x_function__mutmut_N``) and the change;
the expectations are worked out by hand from the inputs (the files written here, backends/formats.yaml, the
vocabulary), not by re-running the code under test. Each kill was checked by applying the mutant's diff to a
scratch worktree and running this file there. Results: benchmarks/results/mutation_sampled_local_2026-12-02/
(deployment at 7aef0b7: 26 survivors, all killed here; yamlio at 2e72eda: 23 survivors, 18 killed here, 4
equivalent, 1 not killed (below); model_config at 9bacce7: 20 survivors and 1 "no tests", 19 killed here, 1
equivalent, 1 not killed). Some tests, written while the runs went on, also name mutants the selection turned out
to kill (deployment's x_understand 836, 992, 997, 1012, 1063, 1069, 1116; yamlio's _compose_collection 82 and 98,
compose_node 23, _tag 15).

Equivalent mutants (no input can tell them apart), one line each:

- yamlio.x__field_path__mutmut_1 (the default ``kind="missing"`` -> ``"XXmissingXX"``): the one caller,
  validation_issues, always passes the error's type as ``kind``, so the default is never read.
- yamlio.x_validation_issues__mutmut_139 (``n=1`` left out of get_close_matches: difflib's default n=3): only
  ``close[0]`` is read, the best match for every n >= 1 (as catalog's did-you-mean in test_mutants_b.py).
- yamlio.x_load_text__mutmut_93 (``InputError(Issue(...))`` -> ``InputError(None)``) and __mutmut_94 (the issue's
  file -> None), both in the ``except yaml.YAMLError`` branch: loading raises no YAMLError that is neither a
  MarkedYAMLError nor a ReaderError (caught before it): libyaml's parser raises ReaderError, ScannerError or
  ParserError (yaml/_yaml.pyx, CParser._parser_error), the composer ComposerError, the constructor ConstructorError.
- model_config.x__check_shape__mutmut_5 (``loc = err.get("loc") or ()`` -> ``loc = None``): it reads the same as an
  empty loc, and only the shape's model-level check (loc ``()``) can fail there: every field read_model_config puts
  in the shape is checked before to that field's own bounds (experts, widths and groups by _int, limits by _number,
  the activation by the same name pattern, architecture by the same class-name pattern).

Two fixed after this file found them (moe_select changed, the mutants' code with it):

- yamlio.x_load_text__mutmut_41 (``0 <= exc.position <= len(text)`` -> ``< len(text)``): libyaml's ReaderError
  position is a byte offset into the UTF-8 text, so with non-ASCII characters before a control character the line
  and column were wrong. load_text now places the refused character by its first occurrence in the text (the
  reader stops at the first one it refuses) and reads the position only when that fails, where the mutant is
  equivalent; test_a_control_character_after_non_ascii_text_is_placed_by_character pins the place.
- model_config.x__issue__mutmut_48 (the default file ``"config.json"``): an hf_quant_config.json holding a JSON
  scalar is now refused at load, naming that file; _issue's default is no longer reached from a file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from moe_select.deployment import Deployment, deployment_from_dict, load_deployment, understand
from moe_select.errors import InputError, Issue
from moe_select.model_config import read_model_config
from moe_select.yamlio import MarkedDict, load_file, load_text, read_input, validate

SHAPE = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}
SHAPE_LINE = "model: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n"


def _issues(fn: Any, *args: Any, **kwargs: Any) -> list[Issue]:
    with pytest.raises(InputError) as exc:
        fn(*args, **kwargs)
    return exc.value.issues


def _file(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "d.yaml"
    f.write_text(text)
    return f


def _marked(values: dict[str, Any], *, key_lines: dict[str, int] | None = None,
            key_sources: dict[str, str] | None = None, file: str = "<test>") -> Deployment:
    """A deployment from a marked mapping whose keys carry the given lines and sources (as the CLI and the launch
    line build them), validated as every deployment is."""
    data = MarkedDict(values)
    data.file = file
    data.key_lines = dict(key_lines or {})
    data.key_sources = dict(key_sources or {})
    return validate(Deployment, data, file)


# ---------------------------------------------------------------------------------------------- deployment
def test_a_deployment_file_holding_a_list_is_refused_at_the_lists_line(tmp_path):
    """Kills deployment.x_load_deployment__mutmut_21 (``getattr(data, "line", 0)`` -> ``getattr(None, ...)``: the
    issue's line would read 0). The list starts on line 3, after a comment and a blank line."""
    f = _file(tmp_path, "# a deployment\n\n- gpu: H200\n- quant: bf16\n")
    assert _issues(load_deployment, f) == [Issue(str(f), 3, "", "a deployment file holds a mapping")]


def test_an_unknown_gpu_names_its_close_products_and_what_to_write_instead(tmp_path):
    """Kills deployment.x_understand__mutmut_42 (the products joined with ``' OR '``) and __mutmut_50 (the message's
    tail ``"planned), or declare the product in a vocabulary.yaml"`` wrapped in ``XX``). H201 is one edit from H20
    and H200 and two from GH200, the vocabulary's closest products."""
    f = _file(tmp_path, "gpu: H201\nquant: bf16\n" + SHAPE_LINE)
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(f), 1, "gpu", "unknown GPU 'H201' (did you mean 'H20' or 'H200' or 'GH200'?); give its architecture "
        "instead, arch: (e.g. sm90, sm130, gfx942, gfx1201; any well-formed name is planned), or declare the product "
        "in a vocabulary.yaml")]


def test_a_shape_without_quant_is_refused_under_the_quant_field(tmp_path):
    """Kills deployment.x_understand__mutmut_355 (``bad("quant", ...)`` -> ``bad(None, ...)``: the issue would name no
    field). quant is not in the file, so the issue sits on the mapping's own line, 1."""
    f = _file(tmp_path, "gpu: H200\n" + SHAPE_LINE)
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [
        Issue(str(f), 1, "quant", "quant not given and no model_config to read it from")]


def test_dispatch_precision_for_a_layer_kind_the_model_lacks_is_refused_under_its_field(tmp_path):
    """Kills deployment.x_understand__mutmut_478 (``bad("dispatch_precision", ...)`` -> ``bad(None, ...)``: the issue
    would name no field and sit on the mapping's line 1 instead of line 5). A shape given as ``model`` has only the
    main kind, so ``mtp`` is in no checkpoint here."""
    f = _file(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE + "a2a: deepep\ndispatch_precision: {main: bf16, mtp: bf16}\n")
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [
        Issue(str(f), 5, "dispatch_precision", "layer kind 'mtp' is not in this checkpoint (its kinds: main)")]


def test_dispatch_precision_without_an_all_to_all_is_refused(tmp_path):
    """Kills deployment.x_understand__mutmut_526 (``bad(field, msg)`` -> ``bad(msg)``: a TypeError instead of the
    issue). dispatch_precision is on line 4 and a2a is not given (its default, none)."""
    f = _file(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE + "dispatch_precision: bf16\n")
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(f), 4, "dispatch_precision", f"dispatch_precision ({f}:4) is the precision an all-to-all sends activations "
        "in; a2a is none (default): give an a2a backend, or dispatch_precision: auto")]


def test_activation_scale_of_another_format_is_refused_at_its_own_line(tmp_path):
    """Kills deployment.x_understand__mutmut_642 (the key looked up as ``"XXactivation_scaleXX"``: the issue would sit
    on quant_config's line 4, not activation_scale's line 6) and __mutmut_651 (the field in upper case)."""
    f = _file(tmp_path, "gpu: H200\nquant: fp8_block\n" + SHAPE_LINE
              + "quant_config:\n  block: [128, 128]\n  activation_scale: per_token\n")
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(f), 6, "quant_config.activation_scale", f"activation_scale ({f}:6) applies to nvfp4 only (per-tensor or "
        "per-token FP32 activation scales of NVFP4 activations); the format is fp8_block")]


def test_activation_scale_given_without_its_own_line_is_refused_at_quant_configs_line():
    """Kills deployment.x_understand__mutmut_646 (the fallback ``dep._lines.get("quant_config", dep._line)`` ->
    ``dep._lines.get(dep._line)``: the line would be None). quant_config is a plain mapping (no line per key), given
    on line 7 of its caller's input."""
    dep = _marked({"gpu": "H200", "quant": "fp8_block", "model": SHAPE, "quant_config": {"activation_scale": "per_token"}},
                  key_lines={"gpu": 1, "quant": 2, "model": 3, "quant_config": 7})
    [issue] = _issues(understand, dep)
    assert (issue.file, issue.line, issue.field) == ("<test>", 7, "quant_config.activation_scale")


def test_a_relative_model_config_without_a_base_folder_is_read_from_the_working_folder(monkeypatch, configs):
    """Kills deployment.x_understand__mutmut_149 (``not p.is_absolute() and base_dir is not None`` -> ``or``: the
    relative path would be joined to ``None``, a TypeError). Qwen3-30B-A3B is a bf16 checkpoint of 128 experts, top 8."""
    monkeypatch.chdir(configs)
    u = understand(deployment_from_dict({"gpu": "H200", "model_config": "Qwen__Qwen3-30B-A3B"}))
    assert u.model_config_path == "Qwen__Qwen3-30B-A3B"
    assert (u.quant, u.model.num_experts, u.model.top_k) == ("bf16", 128, 8)


def test_a_shape_given_by_a_caller_is_credited_to_that_caller_field_by_field():
    """Kills deployment.x_understand__mutmut_136 (``dep._sources.get("model")`` -> ``.get("MODEL")``: every given field
    of the shape would read ``default``). The shape is a plain mapping (no marks of its own), so the source of the
    ``model`` key is each given field's provenance; routing was not given."""
    u = understand(_marked({"gpu": "H200", "quant": "bf16", "model": SHAPE},
                           key_sources={"gpu": "python", "quant": "python", "model": "python (deployment=)"}))
    assert {k: u.provenance[f"model.{k}"] for k in SHAPE} == dict.fromkeys(SHAPE, "python (deployment=)")
    assert u.provenance["model.routing"] == "default"


def test_online_nvfp4_engines_follow_the_asked_activation_scale(configs):
    """Kills deployment.x_understand__mutmut_294 (``online_engines(..., scale)`` -> ``(..., None)``). nvfp4's online
    column (backends/formats.yaml): sglang makes it per token (nvfp4_online, >= 0.5.14) and per tensor (modelopt_fp4,
    >= 0.5.18), vllm per token only and on sm100/sm103 (nvfp4_per_token), trtllm not at all; versions not given count
    as making it. On a B200 (sm100) per token: sglang and vllm; per tensor (the mutant's reading of None): sglang."""
    ckpt = str(configs / "Qwen__Qwen3-30B-A3B")
    per_token = understand(deployment_from_dict({"gpu": "B200", "quant": "nvfp4", "model_config": ckpt,
                                                 "quant_config": {"activation_scale": "per_token"}}))
    assert per_token.quant_params["online_engines"] == ["sglang", "vllm"]
    per_tensor = understand(deployment_from_dict({"gpu": "B200", "quant": "nvfp4", "model_config": ckpt}))
    assert per_tensor.quant_params["online_engines"] == ["sglang"]


def test_per_token_activation_scales_of_a_weight_only_nvfp4_checkpoint_are_refused(tmp_path):
    """Kills deployment.x_understand__mutmut_657 (``quant_params["activation_scale"]`` read as
    ``["ACTIVATION_SCALE"]``: a KeyError) and __mutmut_686 (the message's tail in upper case). Per-token scales
    quantize activations to NVFP4; weight_only keeps them 16-bit. activation_scale is on line 6."""
    f = _file(tmp_path, "gpu: B200\nquant: nvfp4\n" + SHAPE_LINE
              + "quant_config:\n  weight_only: true\n  activation_scale: per_token\n")
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(f), 6, "quant_config.activation_scale", f"activation_scale per_token ({f}:6) quantizes activations to "
        "NVFP4; a weight-only checkpoint (weight_only) keeps 16-bit activations")]


def test_weight_only_per_token_refusal_without_a_line_of_its_own_sits_at_quant_configs_line():
    """Kills deployment.x_understand__mutmut_676 (the fallback ``dep._lines.get("quant_config", dep._line)`` ->
    ``dep._lines.get(None, dep._line)``: the mapping's line 0 instead of quant_config's line 7)."""
    dep = _marked({"gpu": "B200", "quant": "nvfp4", "model": SHAPE,
                   "quant_config": {"weight_only": True, "activation_scale": "per_token"}},
                  key_lines={"gpu": 1, "quant": 2, "model": 3, "quant_config": 7})
    [issue] = _issues(understand, dep)
    assert (issue.file, issue.line, issue.field) == ("<test>", 7, "quant_config.activation_scale")


def test_activation_precision_of_an_unquantized_format_is_refused_at_its_line(tmp_path):
    """Kills deployment.x_understand__mutmut_690 (``quant_params.get("activation_precision")`` read as
    ``.get("ACTIVATION_PRECISION")``: the check skipped, the deployment accepted) and __mutmut_706 (the Issue's line
    argument left out: a TypeError). bf16's weights are not quantized; activation_precision is on line 5."""
    f = _file(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE + "quant_config:\n  activation_precision: fp8_token\n")
    dep, base = load_deployment(f)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(f), 5, "quant_config.activation_precision", f"activation_precision ({f}:5) is the precision of a quantized "
        "format's activations (W4A16 vs W4A8); bf16 has unquantized weights")]


def test_a_w4a16_format_keeps_16_bit_activations_and_refuses_8_bit_ones(tmp_path):
    """Kills deployment.x_understand__mutmut_738 (``not in ("bf16", "fp16")`` -> ``in``: bf16 refused, fp8_token
    accepted) and __mutmut_767 (``quant_params['ACTIVATION_PRECISION']`` in the message: a KeyError). int4_w4a16's
    name ends in ``_w4a16``, a weight-only format; its parameters default to group_size 128 (formats.yaml)."""
    bf16 = _file(tmp_path, "gpu: H200\nquant: int4_w4a16\n" + SHAPE_LINE + "quant_config:\n  activation_precision: bf16\n")
    dep, base = load_deployment(bf16)
    assert understand(dep, base_dir=base).quant_params == {"activation_precision": "bf16", "group_size": 128}
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text("gpu: H200\nquant: int4_w4a16\n" + SHAPE_LINE + "quant_config:\n  activation_precision: fp8_token\n")
    dep, base = load_deployment(fp8)
    assert _issues(understand, dep, base_dir=base) == [Issue(
        str(fp8), 5, "quant_config.activation_precision", f"activation_precision fp8_token ({fp8}:5) quantizes "
        "activations; a weight-only checkpoint (int4_w4a16: W*A16) keeps 16-bit activations")]


# The 14 mutants of the sample that the first 25 minutes of the run left unchecked (deployment.x_understand__mutmut_836,
# 852, 886, 901, 926, 931, 976, 992, 997, 1012, 1063, 1069, 1114, 1116), written before the resumed run checked them:
# it found 852, 886, 901, 926, 931, 976 and 1114 surviving; the selection already killed the other seven.
def test_a_decode_mode_that_cannot_be_captured_turns_cuda_graphs_off_by_default(tmp_path):
    """Kills deployment.x_understand__mutmut_1012 (``cuda_graph = False`` -> ``True`` there), __mutmut_976 (the
    mode's provenance ``here(mode_key)`` -> ``here(None)``: the mapping's line 1, not a2a_mode's line 7) and
    __mutmut_992 (``modes_used`` called without its phases: a TypeError). DeepEP's normal mode has
    ``cuda_graph: false`` (backends/a2a/deepep.yaml, the mapping of ``normal`` starting on line 21); a2a_mode normal
    uses it in both phases, decode included."""
    from moe_select.catalog import default_catalog

    f = _file(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE + "tp: 8\nep: 8\na2a: deepep\na2a_mode: normal\n")
    dep, base = load_deployment(f)
    u = understand(dep, base_dir=base, a2a_backends=default_catalog().a2a)
    assert (u.cuda_graph, u.a2a_mode, u.a2a_modes) == (False, "normal", ["normal"])
    assert u.provenance["cuda_graph"] == ("default (off: a2a deepep normal mode, used for decode, cannot be captured "
                                          "[backends/a2a/deepep.yaml:21]; SGLang disables CUDA graphs there too)")
    assert u.provenance["a2a_mode"] == f"{f}:7"


def test_a_capturable_decode_mode_keeps_cuda_graphs_on_by_default():
    """Kills deployment.x_understand__mutmut_997 (``next(..., None)`` -> ``next(...)``: StopIteration when every
    decode mode can be captured). DeepEP's low_latency mode has ``cuda_graph: true``."""
    from moe_select.catalog import default_catalog

    dep = deployment_from_dict({"gpu": "H200", "quant": "bf16", "model": SHAPE, "tp": 8, "ep": 8, "a2a": "deepep",
                                "a2a_mode": "low_latency"})
    u = understand(dep, a2a_backends=default_catalog().a2a)
    assert (u.cuda_graph, u.a2a_modes) == (True, ["low_latency"])
    assert u.provenance["cuda_graph"] == "default (on for GPUs that decode, as SGLang)"


def test_deepep_mode_given_by_a_launch_line_is_credited_to_it():
    """Kills deployment.x_understand__mutmut_901 (``"deepep_mode" in dep._sources`` -> ``"DEEPEP_MODE" in ...``: the
    key would read as a2a_mode, which has no source, and the provenance would be the bare file name)."""
    from moe_select.catalog import default_catalog

    dep = _marked({"gpu": "H200", "quant": "bf16", "model": SHAPE, "tp": 8, "ep": 8, "a2a": "deepep",
                   "deepep_mode": "low_latency"}, key_sources={"deepep_mode": "launch line (--deepep-mode low_latency)"})
    u = understand(dep, a2a_backends=default_catalog().a2a)
    assert u.provenance["a2a_mode"] == "launch line (--deepep-mode low_latency)"


def test_an_a2a_backend_without_a_capability_file_is_noted_with_the_closest_one():
    """Kills deployment.x_understand__mutmut_926 (the did-you-mean dropped: ``if (close) and False``) and
    __mutmut_931 (the backends joined with ``'XX, XX'``). The backends given are deepep and pplx; deepepp is one
    letter from deepep."""
    dep = deployment_from_dict({"gpu": "H200", "quant": "bf16", "model": SHAPE, "tp": 8, "ep": 8, "a2a": "deepepp"})
    u = understand(dep, a2a_backends={"deepep": None, "pplx": None})
    assert u.notes == ["a2a deepepp has no capability file (did you mean 'deepep'?); a2a backends with facts: deepep, pplx"]


def test_require_adapter_plans_for_this_install_and_says_why(tmp_path):
    """Kills deployment.x_understand__mutmut_836 (the engine's provenance stored under ``"ENGINE"``: ``engine`` would
    keep ``default``). require_adapter is on line 3, engine is not given (any)."""
    f = _file(tmp_path, "gpu: H200\nquant: bf16\nrequire_adapter: true\n" + SHAPE_LINE)
    dep, base = load_deployment(f)
    u = understand(dep, base_dir=base)
    assert (u.engine, u.require_adapter) == ("moe_select", True)
    assert u.provenance["engine"] == f"moe_select: require_adapter ({f}:3) plans for this install's adapters"


def test_default_token_budgets_say_which_phase_they_come_from():
    """Kills deployment.x_understand__mutmut_852 (``dep.phase == "decode"`` -> ``!=``: the two reasons swapped).
    DEFAULT_TOKENS: decode 256 (a CUDA-graph batch), prefill 8192 (a chunk of chunked prefill)."""
    def budget(phase: str) -> tuple[int, str]:
        u = understand(deployment_from_dict({"gpu": "H200", "quant": "bf16", "model": SHAPE, "phase": phase}))
        return u.max_tokens_per_rank, u.provenance["max_tokens_per_rank"]

    assert budget("decode") == (256, "default (256: a typical CUDA-graph batch per rank; give yours)")
    assert budget("prefill") == (8192, "default (8192: a typical chunked-prefill size; give yours)")


def test_a_given_a2a_capacity_and_dispatch_precision_are_kept_with_their_lines(tmp_path):
    """Kills deployment.x_understand__mutmut_886 (the capacity's provenance stored under ``"XXa2a_capacityXX"``) and
    __mutmut_1114 (``dispatch_precision=dispatch_main`` left out of Understood: its default auto). Lines: a2a 4,
    a2a_capacity 5, dispatch_precision 6."""
    f = _file(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE
              + "a2a: deepep\na2a_capacity: 512\ndispatch_precision: bf16\ntp: 8\nep: 8\n")
    dep, base = load_deployment(f)
    u = understand(dep, base_dir=base)
    assert (u.a2a_capacity, u.provenance["a2a_capacity"]) == (512, f"{f}:5")
    assert (u.dispatch_precision, u.provenance["dispatch_precision"]) == ("bf16", f"{f}:6 (every MoE layer kind)")


def test_understood_keeps_the_arch_layer_kinds_and_require_adapter_it_was_given():
    """Kills deployment.x_understand__mutmut_1063 (``arch=None``), __mutmut_1069 (``layer_kinds=None``) and
    __mutmut_1116 (``require_adapter`` left out): each makes Understood's validation fail (a required or strictly
    typed field). B200 is sm100; a shape has no layer kinds besides main."""
    u = understand(deployment_from_dict({"gpu": "B200", "quant": "bf16", "model": SHAPE}))
    assert (u.arch, u.layer_kinds, u.require_adapter) == ("sm100", [], False)


# ---------------------------------------------------------------------------------------------- yamlio
class _Choice(BaseModel):
    """A model of its own (independent of the product's files): a literal of three names and an int-or-auto union."""

    model_config = ConfigDict(extra="forbid", strict=True)
    n: int | Literal["auto"] = 1
    mode: Literal["alpha", "beta", "gamma"] = "alpha"


class _Range(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    lo: int = 0


class _Union(BaseModel):
    """A list-or-mapping union (as rule files' ``values: [..] | {min, max}``) and a default that is validated."""

    model_config = ConfigDict(extra="forbid", strict=True)
    r: list[int] | _Range = []
    k: int = Field(default="eight", validate_default=True)


class _Named(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = ""


def test_a_literal_error_lists_the_literals_choices_and_the_closest():
    """Kills yamlio.x__choices__mutmut_8 (``str(expected)`` -> ``str(None)``: the choices would read ``None``) and
    yamlio.x_validation_issues__mutmut_10 (``unread = max(0, ...)`` -> ``max(1, ...)``: every error list would end in
    "... and about 1 more issues")."""
    assert _issues(validate, _Choice, load_text("mode: alpah\n", "f.yaml"), "f.yaml") == [
        Issue("f.yaml", 1, "mode", "'alpah' is not one of alpha, beta, gamma (did you mean 'alpha'?)")]


def test_a_union_value_that_fits_no_branch_is_one_issue_under_its_field():
    """Kills yamlio.x__field_path__mutmut_21 (``i == len(loc) - 1 and isinstance(cur, dict) and ...`` -> ``or``: the
    union's branch tags ``int`` and ``literal['auto']``, last parts of the errors' locs under a string, would be kept
    as fields, ``n.int`` and ``n.literal['auto']``: two issues). The two branch errors of ``n`` merge into one, worded
    by the literal's choices."""
    assert _issues(validate, _Choice, load_text("mode: beta\nn: x\n", "f.yaml"), "f.yaml") == [
        Issue("f.yaml", 2, "n", "'x' is not one of auto")]


def test_a_float_tag_on_a_word_is_refused_at_its_line():
    """Kills yamlio.x__construct_float__mutmut_8 (``_scalar_error(loader, node, ...)`` -> ``(loader, None, ...)``: an
    AttributeError instead of the issue). ``!!float`` on ``abc`` on line 2, under key x."""
    assert _issues(load_text, "a: 1\nx: !!float abc\n", "f.yaml") == [Issue("f.yaml", 2, "x", "'abc' is not a number")]


def test_a_socket_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    """Kills yamlio.x__special_kind__mutmut_9 (``"a socket"`` -> ``"A SOCKET"``). The socket is bound by a relative
    name in tmp_path (a Unix socket's path is limited to about 108 bytes)."""
    import socket

    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("s")
        assert _issues(read_input, "s", kind="deployment file") == [Issue(
            "s", 0, "", "the deployment file is a socket, not a regular file: refused (reading it could block or never end)")]


def test_a_union_value_that_went_into_one_branch_reports_only_that_branch():
    """Kills yamlio.x_validation_issues__mutmut_71 (``str(e.get("type", ""))`` -> ``str(None)`` in the test for the
    other branch's "not a list" noise: it would be kept). The mapping went into the _Range branch (unknown key hi on
    line 4); the list branch's list_type error on ``r`` is dropped. k's default is valid here."""
    data = load_text("k: 8\nr:\n  lo: 1\n  hi: 2\n", "f.yaml")
    assert _issues(validate, _Union, data, "f.yaml") == [Issue("f.yaml", 4, "r.hi", "unknown key 'hi'; allowed here: lo")]


def test_an_error_on_a_key_the_file_lacks_is_named_by_its_field():
    """Kills yamlio.x_validation_issues__mutmut_54 (the fallback field ``".".join(_cut(str(p)) ...)`` ->
    ``_cut(str(None))``: the field would read ``None``). k is not in the file and its default is validated (not an
    integer): the error's loc ``("k",)`` reaches no node, so the issue sits on the mapping's line 2 and is named from
    the loc; its message is pydantic's int_type message."""
    data = load_text("# r only\nr: [1, 2]\n", "f.yaml")
    assert _issues(validate, _Union, data, "f.yaml") == [Issue("f.yaml", 2, "k", "Input should be a valid integer")]


def test_a_number_where_a_string_is_due_gets_the_quoting_hint_only_when_it_is_a_float():
    """Kills yamlio.x_validation_issues__mutmut_215 (``type == "string_type" and isinstance(input, float)`` -> ``or``:
    the integer 5 would get the hint about 12.10 reading as 12.1 too). The float 12.10 reads as 12.1 and gets it."""
    assert _issues(validate, _Named, load_text("name: 5\n", "f.yaml"), "f.yaml") == [
        Issue("f.yaml", 1, "name", "Input should be a valid string")]
    assert _issues(validate, _Named, load_text("name: 12.10\n", "f.yaml"), "f.yaml") == [
        Issue("f.yaml", 1, "name", "Input should be a valid string (got the number 12.1: quote versions, e.g. \"12.8\", "
              "so 12.10 does not read as 12.1)")]


def test_load_file_names_a_missing_file_an_input_file_by_default(tmp_path):
    """Kills yamlio.x_load_file__mutmut_1 (the default ``kind="input file"`` -> ``"XXinput fileXX"``)."""
    missing = tmp_path / "missing.yaml"
    assert _issues(load_file, missing) == [Issue(str(missing), 0, "", "input file not found")]


def test_a_file_of_exactly_the_bound_is_read(tmp_path):
    """Kills yamlio.x_read_input__mutmut_212 (``total > max_bytes`` -> ``>=``: a file of exactly ``max_bytes`` would be
    refused as grown). Ten bytes under a ten-byte bound; the digest is hashlib's sha256 of the same bytes."""
    import hashlib

    f = tmp_path / "ten"
    f.write_bytes(b"0123456789")
    assert read_input(f, max_bytes=10) == (b"0123456789", hashlib.sha256(b"0123456789").hexdigest())


def test_a_proc_file_larger_than_the_bound_is_cut_off_while_read():
    """Kills yamlio.x_read_input__mutmut_216 (the issue's field ``""`` -> ``None``). /proc/self/status stats as a
    regular file of size 0, so only the read finds it longer than 16 bytes (its Name: line alone is longer)."""
    assert _issues(read_input, "/proc/self/status", max_bytes=16) == [Issue(
        "/proc/self/status", 0, "", "the input file is larger than the 16 bytes bound on input files (it grew while read)")]


def test_a_path_with_a_nul_byte_cannot_be_read():
    """Kills yamlio.x_read_input__mutmut_45 (``Issue(name, 0, "", ...)`` -> ``Issue(0, "", ...)``: a TypeError instead
    of the issue). os.stat refuses the path with ValueError("embedded null byte")."""
    assert _issues(read_input, "a\0b") == [Issue("a\0b", 0, "", "cannot read the input file: embedded null byte")]


def test_a_file_that_cannot_be_opened_is_an_input_error(tmp_path, monkeypatch):
    """Kills yamlio.x_read_input__mutmut_146 (``InputError(Issue(...))`` -> ``InputError(None)``: a TypeError). This
    runs as root, which opens any mode, so ``os.open`` refuses this one file (EACCES) as it would refuse another user."""
    import errno
    import os

    f = tmp_path / "d.yaml"
    f.write_text("a: 1\n")
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any) -> int:
        if os.fspath(path) == str(f):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    assert _issues(read_input, f) == [Issue(str(f), 0, "", "cannot read the input file: Permission denied")]


def test_a_file_swapped_for_a_fifo_after_its_check_is_refused_by_fstat(tmp_path, monkeypatch):
    """Kills yamlio.x_read_input__mutmut_164 (the fstat refusal's line 0 -> None). os.stat answers for a regular file
    (the swap after the check), the path is a FIFO: the open with O_NONBLOCK returns at once and fstat refuses it."""
    import os

    fifo, regular = tmp_path / "p", tmp_path / "r"
    os.mkfifo(fifo)
    regular.write_text("a: 1\n")
    real_stat = os.stat

    def swapped_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        return real_stat(regular if os.fspath(path) == str(fifo) else path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", swapped_stat)
    assert _issues(read_input, fifo) == [Issue(str(fifo), 0, "", "the input file is a FIFO (named pipe), not a regular "
                                                                   "file: refused (reading it could block or never end)")]


def test_a_mapping_key_that_is_a_list_is_refused():
    """Kills yamlio.x__construct_mapping__mutmut_16 (the field ``""`` -> ``None``) and __mutmut_21 (the message left
    out: a TypeError). ``? [a, b]`` is a complex key on line 1."""
    assert _issues(load_text, "? [a, b]\n: 1\n", "f.yaml") == [Issue("f.yaml", 1, "", "a mapping key must be a scalar")]


def test_an_alias_bomb_is_refused_where_it_passes_the_node_bound():
    """Kills yamlio.xǁ_BoundedComposerǁ_compose_collection__mutmut_82 (the message's tail wrapped in ``XX``). Node
    counts: a 1 + 10 = 11, b 1 + 10 x 11 = 111, c 1111, d 11111; e passes 50,000 at its fifth alias (1 + 5 x 11111 =
    55556), item [4] on line 5."""
    bomb = "".join(f"{k}: &{k} [{', '.join([v] * 10)}]\n" for k, v in (("a", "x"), ("b", "*a"), ("c", "*b"), ("d", "*c")))
    bomb += f"e: [{', '.join(['*d'] * 10)}]\n"
    assert _issues(load_text, bomb, "f.yaml") == [Issue(
        "f.yaml", 5, "e[4]", "the file expands to more than 50000 nodes (aliases repeat what their anchor holds): refused")]


def test_an_alias_to_a_finished_anchor_is_not_recursive_but_one_inside_it_is():
    """Kills yamlio.xǁ_BoundedComposerǁ_compose_collection__mutmut_98 (``self._open.discard(id(node))`` ->
    ``discard(None)``: a finished collection would stay open, and a later alias to it read as recursive) and
    yamlio.xǁ_BoundedComposerǁcompose_node__mutmut_23 (the recursive alias refused at mark ``None``: line 0, not 1)."""
    assert load_text("a: &x [1]\nb: *x\n", "f.yaml") == {"a": [1], "b": [1]}
    assert _issues(load_text, "a: &x [1, *x]\n", "f.yaml") == [
        Issue("f.yaml", 1, "a[1]", "alias *x is inside its own anchor (a recursive structure): refused")]


def test_a_tag_outside_the_core_schema_is_not_supported():
    """Kills yamlio.xǁ_BoundedComposerǁ_tag__mutmut_15 (``any(tag in tags ...)`` -> ``not in``: an unknown tag would be
    called a core tag that does not fit a scalar). A core tag on the wrong kind of node does not fit."""
    assert _issues(load_text, "a: !foo 1\n", "f.yaml") == [Issue("f.yaml", 1, "a", "tag '!foo' is not supported: only "
                                                                 "the YAML 1.2 core schema (strings, numbers, true/false, null, lists, mappings)")]
    assert _issues(load_text, "a: !!str [1]\n", "f.yaml") == [
        Issue("f.yaml", 1, "a", "tag 'tag:yaml.org,2002:str' does not fit a list")]


def test_a_second_document_is_refused_with_both_documents_lines():
    """Kills yamlio.xǁ_BoundedComposerǁget_single_node__mutmut_8 (the ComposerError's context ``"expected a single
    document in the stream"`` -> None: the message would keep only "but found another document"). The first document
    starts on line 1, the second's ``---`` is on line 2."""
    assert _issues(load_text, "a: 1\n---\nb: 2\n", "f.yaml") == [Issue(
        "f.yaml", 2, "", "not valid YAML: expected a single document in the stream (line 1), but found another document")]


# ---------------------------------------------------------------------------------------------- model_config
#: A Qwen3-MoE-like config.json: 8 experts, top 2, renormalized (norm_topk_prob true), no quantization (bf16).
BASE = {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "hidden_size": 64,
        "moe_intermediate_size": 32, "norm_topk_prob": True}


def _checkpoint(tmp_path: Path, config: Any, hf_quant: Any = None) -> Path:
    """A checkpoint folder: config.json (a mapping written one key per line, ``json.dumps(indent=1)``, or the text
    given) and, when given, hf_quant_config.json."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config, indent=1))
    if hf_quant is not None:
        (folder / "hf_quant_config.json").write_text(hf_quant if isinstance(hf_quant, str) else json.dumps(hf_quant, indent=1))
    return folder


def _line(folder: Path, key: str) -> int:
    """The line of the first ``"key":`` in config.json (a text search: the expected line, not the reader's)."""
    lines = (folder / "config.json").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if f'"{key}":' in text)


def test_a_kept_activation_that_needs_a_clamp_is_refused_with_the_shapes_message(tmp_path):
    """Kills model_config.x__check_shape__mutmut_27 (the message read from ``err["XXmsgXX"]``: ``invalid``). hidden_act
    silu_clamped is a well-formed name, kept; the shape then needs swiglu_limit (ModelShape's cross-field check,
    reported at the config's own line 1 under no field)."""
    folder = _checkpoint(tmp_path, {**BASE, "hidden_act": "silu_clamped"})
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "config.json"), 1, "", "model: activation silu_clamped needs swiglu_limit (the clamp of gate and up; "
        "DeepSeek-V4's and MiniMax-M3's config.json swiglu_limit)")]


def test_a_deepseek_v4_checkpoint_without_expert_dtype_reads_fp4_experts_and_says_why(tmp_path):
    """Kills model_config.x__dsv4_fp4_experts__mutmut_45 (the note's "missing expert_dtype as fp4; SGLang's
    is_fp4_experts is on for DeepSeek-V4 unless " in upper case; "no tests" in the run: no selected test file reads a
    DeepSeek-V4 config without expert_dtype). quant_method fp8 is on line 12."""
    folder = _checkpoint(tmp_path, {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
                                    "hidden_size": 64, "moe_intermediate_size": 32, "n_routed_experts": 8,
                                    "num_experts_per_tok": 2, "scoring_func": "sqrtsoftplus",
                                    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    cfg = folder / "config.json"
    assert _line(folder, "quant_method") == 12
    info = read_model_config(folder)
    assert info.quant == "mxfp4"
    assert info.notes == [
        f"DeepSeek-V4 checkpoint (architectures[0] DeepseekV4ForCausalLM): its routed experts are MXFP4 (packed e2m1, an "
        f"e8m0 scale per 32 along K) inside an FP8 checkpoint whose quantization_config ({cfg}:12) describes the other "
        f"linear layers; {cfg} gives no expert_dtype: fp4, both engines' default (vLLM's DeepseekV4FP8Config reads a "
        "missing expert_dtype as fp4; SGLang's is_fp4_experts is on for DeepSeek-V4 unless SGLANG_DSV4_FP4_EXPERTS or the "
        "safetensors header of a routed expert (F8_E4M3) says FP8, which moe-select does not read). Planned mxfp4; "
        "SGLang loads these experts through Fp8Config (is_fp4_experts), not Mxfp4Config, so runner facts that hold for "
        "gpt-oss-style MXFP4 checkpoints only do not apply (facts scoped by architecture)"]


def test_an_hf_quant_config_without_a_quantization_mapping_is_refused(tmp_path):
    """Kills model_config.x__hf_quant_mapping__mutmut_18 (the message -> None). config.json has no
    quantization_config, so every engine reads hf_quant_config.json; its mapping starts on line 1."""
    folder = _checkpoint(tmp_path, BASE, {"producer": {"name": "modelopt"}})
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "hf_quant_config.json"), 1, "quantization",
        "hf_quant_config.json has no quantization mapping (ModelOpt writes quantization.quant_algo)")]


def test_an_hf_quant_config_holding_a_number_is_refused(tmp_path):
    """An hf_quant_config.json holding a JSON scalar is refused naming that file (it named config.json, the
    default of model_config._issue for a value without marks, until the load checked it)."""
    [issue] = _issues(read_model_config, _checkpoint(tmp_path, BASE, "5"))
    assert (issue.line, issue.field, issue.message) == (0, "", "hf_quant_config.json must hold a JSON object, got the number 5")
    assert Path(issue.file).name == "hf_quant_config.json", issue.file


def test_compressed_tensors_fp4_weights_without_input_activations_are_weight_only_nvfp4(tmp_path):
    """Kills model_config.x__quant_from_compressed_tensors__mutmut_228 (``weight_only.add(not a)`` -> ``add(None)``:
    weight_only would not be set), __mutmut_235 (the note's middle wrapped in ``XX``) and __mutmut_239 ("to FP4" ->
    "to fp4"). The group group_0 (its mapping's ``{`` on line 12) has 4-bit float weights and no input_activations."""
    folder = _checkpoint(tmp_path, {**BASE, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}}})
    assert _line(folder, "group_0") == 12
    info = read_model_config(folder)
    assert (info.quant, info.quant_params) == ("nvfp4", {"weight_only": True})
    assert info.notes == [f"{folder / 'config.json'}:12 (quantization_config.config_groups.group_0): 4-bit float weights "
                          "with no input_activations: weight-only NVFP4 (NVFP4A16), no activation scales; runners that "
                          "quantize activations to FP4 cannot run it (weight_only)"]


def test_sources_that_disagree_name_the_engine_that_reads_none_of_them(tmp_path):
    """Kills model_config.x__quant_of__mutmut_73 (``... if name else f"{e} reads none of them"`` -> ``if (name) or
    True``: a KeyError for the engine that reads no source). compression_config (FP8 per channel) and
    text_config.compression_config (FP8 per tensor) disagree; SGLang and vLLM read compression_config first, TensorRT-LLM
    reads neither (QUANT_SOURCE_ORDER: hf_quant_config.json and quantization_config only)."""
    def fp8(strategy: str) -> dict[str, Any]:
        return {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": strategy},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}

    folder = _checkpoint(tmp_path, {"model_type": "qwen3_moe", "compression_config": fp8("channel"),
                                    "text_config": {**BASE, "compression_config": fp8("tensor")}})
    info = read_model_config(folder)
    assert info.quant == "fp8_channel"
    [disagree] = [n for n in info.notes if n.startswith("quantization sources disagree")]
    assert disagree.endswith("as sglang (engine any plans in SGLang's order) reads them (compression_config, then "
                             "text_config.compression_config); trtllm reads none of them")


def test_a_null_norm_topk_prob_is_named_null(tmp_path):
    """Kills model_config.x__what__mutmut_3 (``"null"`` -> ``"NULL"``). norm_topk_prob is on line 7."""
    folder = _checkpoint(tmp_path, {**BASE, "norm_topk_prob": None})
    assert _issues(read_model_config, folder) == [
        Issue(str(folder / "config.json"), 7, "norm_topk_prob", "norm_topk_prob must be true or false, got null")]


def test_llama4_interleaved_dense_layers_read_intermediate_size_mlp(tmp_path):
    """Kills model_config.x__widths__mutmut_86 (``dense_key = "intermediate_size_mlp"`` -> None: no dense width).
    interleave_moe_layer_step 2: every other layer is dense, its MLP width intermediate_size_mlp (128, line 7)."""
    folder = _checkpoint(tmp_path, {"model_type": "llama4_text", "num_local_experts": 16, "num_experts_per_tok": 1,
                                    "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 128,
                                    "interleave_moe_layer_step": 2})
    info = read_model_config(folder)
    assert (info.shape["dense_intermediate_size"], info.provenance["dense_intermediate_size"]) == (
        128, f"{folder / 'config.json'}:7 (intermediate_size_mlp)")


def test_a_config_json_holding_a_list_is_refused_under_no_field(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_24 (the issue's field ``""`` -> None)."""
    folder = _checkpoint(tmp_path, "[1]")
    assert _issues(read_model_config, folder) == [
        Issue(str(folder / "config.json"), 1, "", "config.json does not hold a JSON object")]


def test_hidden_act_swish_is_silu_credited_to_its_line(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_353 (``"swish": "silu"`` -> ``"XXsiluXX"``) and __mutmut_489
    (``_present(text, "hidden_act")`` -> ``"HIDDEN_ACT"``: a given hidden_act credited as absent). hidden_act is on
    line 8; without it the activation is silu by default."""
    folder = _checkpoint(tmp_path, {**BASE, "hidden_act": "swish"})
    info = read_model_config(folder)
    assert (info.shape["activation"], info.provenance["activation"]) == ("silu", f"{folder / 'config.json'}:8 (hidden_act)")
    (tmp_path / "plain").mkdir()
    plain = _checkpoint(tmp_path / "plain", BASE)
    info = read_model_config(plain)
    assert (info.shape["activation"], info.provenance["activation"]) == ("silu", f"{plain / 'config.json'} (no hidden_act: silu)")


def test_minimax_m3_swigluoai_is_swiglu_oai_split_with_its_limit(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_452 (``shape["XXactivationXX"]``: the activation would stay
    unset and the shape refused) and __mutmut_458 (the provenance stored under ``"ACTIVATION"``). hidden_act on line
    8, swiglu_limit on line 9."""
    folder = _checkpoint(tmp_path, {**BASE, "hidden_act": "swigluoai", "swiglu_limit": 7.0})
    info = read_model_config(folder)
    cfg = folder / "config.json"
    assert (info.shape["activation"], info.shape["swiglu_limit"]) == ("swiglu_oai_split", 7.0)
    assert info.provenance["activation"] == (f"{cfg}:8 (hidden_act); {cfg}:9 (swiglu_limit) (MiniMax-M3's clamped "
                                             "SwiGLU-OAI on split gate/up halves: swiglu_oai_split)")


def test_swiglu_limit_with_gelu_is_refused_at_its_key(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_509 (the issue's key ``"XXswiglu_limitXX"``: the mapping's line
    1 and that field). swiglu_limit is on line 9."""
    folder = _checkpoint(tmp_path, {**BASE, "hidden_act": "gelu", "swiglu_limit": 7.0})
    assert _issues(read_model_config, folder) == [Issue(
        str(folder / "config.json"), 9, "swiglu_limit", "swiglu_limit with hidden_act 'gelu': no clamped variant of it "
        "is known (read: silu with swiglu_limit, as silu_clamped)")]


def test_topk_group_above_n_group_is_refused_with_both_numbers(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_702 (the message replaced by ``tp``, here ""). DeepSeek-V3
    routing (sigmoid, noaux_tc) over 8 experts in n_group 2, topk_group 4 on line 11."""
    folder = _checkpoint(tmp_path, {**BASE, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 2,
                                    "topk_group": 4})
    assert _issues(read_model_config, folder) == [
        Issue(str(folder / "config.json"), 11, "topk_group", "topk_group 4 exceeds n_group 2")]


def test_norm_topk_prob_routing_is_credited_to_its_line(tmp_path):
    """Kills model_config.x_read_model_config__mutmut_850 (``_at(text, "NORM_TOPK_PROB")``: the mapping's line 1 and
    the key in upper case). norm_topk_prob true (line 7): renormalize."""
    folder = _checkpoint(tmp_path, BASE)
    info = read_model_config(folder)
    assert (info.shape["routing"], info.provenance["routing"]) == ("renormalize", f"{folder / 'config.json'}:7 (norm_topk_prob)")


def test_a_folder_without_config_json_is_refused_under_model_config(tmp_path):
    """Kills model_config.x_resolve_config_path__mutmut_49 (the field ``"model_config"`` -> ``"XXmodel_configXX"``)."""
    assert _issues(read_model_config, tmp_path) == [Issue(str(tmp_path), 0, "model_config", "the folder has no config.json")]


def test_a_control_character_after_non_ascii_text_is_placed_by_character():
    """A control character after non-ASCII text is reported at its line and column in characters (libyaml's
    position counts UTF-8 bytes: three 'é' on line 1 moved it past the text's end, reported as line 4, column 1)."""
    for text, want in (('a: "ééé"\nb: 1\nc: "xy\x01"\n', (3, 7, "U+0001")), ('éé: "\x07"\n', (1, 6, "U+0007")),
                       ('a: 1\nb: "\x1b"\n', (2, 5, "U+001B"))):
        with pytest.raises(InputError) as exc:
            load_text(text, "d.yaml")
        line, col, char = want
        assert exc.value.issues[0].line == line and f"control character {char} at column {col} " in str(exc.value), (
            text, str(exc.value))

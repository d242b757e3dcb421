"""Tests that kill the mutants of moe_select/deployment.py that the local sampled run of 2026-12-02 (eighth session;
seed 19, 50 mutants per module, tree 352b298; benchmarks/results/mutation_sampled_local_2026-12-02_s8.json) left
alive: 15 survived, all in :func:`moe_select.deployment.understand`. Each test names the mutants it kills
(``deployment.x_understand__mutmut_N``, numbered at 352b298); the expectations are written by hand from the inputs.

Equivalent, so not tested (the reason in one line):

- x_understand__mutmut_573 (``difflib.get_close_matches(quant, names(), n=1)`` -> the default ``n=3``): only
  ``close[0]`` is read, and get_close_matches returns ``heapq.nlargest(n, (score, name))``, whose first element is
  the same largest (score, name) for any n >= 1 (format names are distinct, so no tie is ordered differently).

The local sampled run s9 at e527d0d (seed 19, 50 mutants per module;
benchmarks/results/mutation_sampled_local_2026-12-02_s9.json) left 9 alive, all in ``understand``: _90, _122, _198,
_298, _306, _458, _565, _924, _974 (numbered at e527d0d). The tests after the s9 banner below kill all but one.
Equivalent, so not tested:

- x_understand__mutmut_924 (``difflib.get_close_matches(dep.a2a, list(a2a_backends), n=1)`` -> ``n=2``): only
  ``close[0]`` is read, and the first of ``heapq.nlargest(n, (score, name))`` is the same largest pair for any
  n >= 1 (the catalog's a2a names are distinct keys of a mapping); the same reason as _573 above.
"""
from __future__ import annotations

from pathlib import Path

from moe_select import cli
from moe_select.deployment import load_deployment, understand
from moe_select.errors import Issue

from test_mutants_c import BASE, SHAPE_LINE, _checkpoint, _file, _issues


def _understood(tmp_path: Path, text: str, **kwargs):
    f = _file(tmp_path, text)
    dep, base = load_deployment(f)
    return understand(dep, base_dir=base, **kwargs)


def _refused(tmp_path: Path, text: str, **kwargs) -> tuple[Path, list[Issue]]:
    f = _file(tmp_path, text)
    dep, base = load_deployment(f)
    return f, _issues(understand, dep, base_dir=base, **kwargs)


# ---------------------------------------------------------------------------------------- quant from a checkpoint
def test_the_checkpoints_quant_is_said_to_come_from_model_config(tmp_path):
    """x_understand__mutmut_180 (the provenance's prefix ``"model_config "`` wrapped in ``XX``): a config.json with
    neither quantization_config nor torch_dtype is bf16, and its provenance says so after ``model_config``."""
    ckpt = _checkpoint(tmp_path, BASE)
    u = _understood(tmp_path, "arch: sm90\nmodel_config: ckpt\n")
    assert u.quant == "bf16"
    assert u.provenance["quant"] == (f"model_config {ckpt / 'config.json'} (no quantization_config and no torch_dtype: "
                                     "unquantized, taken as bf16)")


def test_nvfp4_per_token_of_an_fp8_checkpoint_is_online_nvfp4(tmp_path):
    """x_understand__mutmut_224 (``activation_scale == "PER_TOKEN"``: never true, so the FP8 checkpoint's quant
    nvfp4 was refused as a contradiction): quant nvfp4 with activation_scale per_token over a block-FP8 checkpoint
    is SGLang's nvfp4_online, planned with a note and ``online`` in the parameters (judged by the online column's FP8
    fact since 2026-12-05: SGLang makes it, from a quant_method fp8 or ModelOpt FP8 checkpoint)."""
    _checkpoint(tmp_path, {**BASE, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    u = _understood(tmp_path, "arch: sm100\nmodel_config: ckpt\nquant: nvfp4\nquant_config: {activation_scale: per_token}\n")
    assert u.quant == "nvfp4"
    assert len(u.notes) == 2, u.notes
    assert u.notes[0].startswith("quant nvfp4 for a (fp8_block) checkpoint: online quantization at load") \
        and "--quantization nvfp4_online (on an FP8 checkpoint)" in u.notes[0], u.notes
    assert u.notes[1] == ("the checkpoint's fp8_block parameters (block [128, 128], layout fp8) describe its weights "
                          "before online quantization: the served nvfp4 layer takes nvfp4's own")
    assert u.quant_params["online"] is True and u.quant_params["activation_scale"] == "per_token"


def test_online_nvfp4_makers_are_judged_on_the_deployments_arch(tmp_path):
    """x_understand__mutmut_286 (online_engines asked with arch None, where an arch-bound fact holds): vLLM's
    nvfp4_per_token holds on sm100/sm103 only (backends/formats.yaml), SGLang's nvfp4_online on any arch; so with
    engine any the engines that make online NVFP4 with per-token scales are sglang alone on sm90, both on sm100."""
    _checkpoint(tmp_path, BASE)
    text = "model_config: ckpt\nquant: nvfp4\nquant_config: {activation_scale: per_token}\n"
    u = _understood(tmp_path, "arch: sm90\n" + text)
    assert u.quant_params["online_engines"] == ["sglang"]
    assert u.quant_params["online"] is True
    u = _understood(tmp_path, "arch: sm100\n" + text)
    assert u.quant_params["online_engines"] == ["sglang", "vllm"]


def test_a_format_without_a_row_over_a_bf16_checkpoint_is_made_online(tmp_path):
    """x_understand__mutmut_314 (``made_online = None``) and _773 (the key written ``"ONLINE"``): quant foo8, a
    well-formed name of no format, over a bf16 checkpoint: its parameters are exactly ``{"online": True}``, and the
    notes say it is online quantization to a format without a row."""
    _checkpoint(tmp_path, BASE)
    u = _understood(tmp_path, "arch: sm90\nmodel_config: ckpt\nquant: foo8\n")
    assert u.quant_params == {"online": True}
    assert u.notes[0] == ("quant foo8 given for an unquantized (bf16) checkpoint: online quantization to a format "
                          "without a row in backends/formats.yaml (no fact says an engine makes it)")


# ------------------------------------------------------------------------------------------- layer kinds
def test_an_extra_layer_kinds_runner_is_auto_unless_layer_runners_names_it(tmp_path, mxfp4_mtp):
    """x_understand__mutmut_412 / _413 (``"auto"`` written ``"XXautoXX"`` / ``"AUTO"``): the MTP layer 61 that the
    MXFP4 config leaves unquantized is planned with runner auto, and the provenance ends so."""
    u = _understood(tmp_path, f"arch: sm100\nmodel_config: {mxfp4_mtp}\n")
    assert u.provenance["layers.mtp"] == (f"{mxfp4_mtp} (multi-token-prediction layers the quantization config leaves "
                                          "unquantized; layers 61, bf16; runner auto)")
    u = _understood(tmp_path, f"arch: sm100\nmodel_config: {mxfp4_mtp}\nlayer_runners: {{mtp: triton}}\n")
    assert u.provenance["layers.mtp"].endswith("; layers 61, bf16; runner triton from layer_runners)")


def test_layer_runners_for_a_kind_the_checkpoint_lacks_names_its_kinds(tmp_path, mxfp4_mtp):
    """x_understand__mutmut_426 (``+`` -> ``-`` between the message's parts: a TypeError instead of the issue):
    ``layer_runners: {draft: ...}`` names the checkpoint's other kinds, or none, under layer_runners at its line."""
    f, issues = _refused(tmp_path, f"arch: sm100\nmodel_config: {mxfp4_mtp}\nlayer_runners: {{draft: triton}}\n")
    assert issues == [Issue(str(f), 3, "layer_runners",
                            "layer kind 'draft' is not in this checkpoint (its kinds besides main: mtp)")]
    _checkpoint(tmp_path, BASE)
    f, issues = _refused(tmp_path, "arch: sm100\nmodel_config: ckpt\nlayer_runners: {draft: triton}\n")
    assert issues == [Issue(str(f), 3, "layer_runners",
                            "layer kind 'draft' is not in this checkpoint (its kinds besides main: none)")]


# ------------------------------------------------------------------------------------------- dispatch precision
def test_dispatch_precision_not_given_is_said_to_be_the_default(tmp_path):
    """x_understand__mutmut_506 (the default's provenance upper-cased)."""
    u = _understood(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE)
    assert u.provenance["dispatch_precision"] == "default (auto: the engine chooses per layer from the layer's weights)"


def test_dispatch_precision_with_a2a_none_written_names_a2as_line(tmp_path):
    """x_understand__mutmut_532 (``'A2A' in dep.model_fields_set``: never, so ``default``): ``a2a: none`` written on
    line 4 is named by its place, not called the default."""
    f, issues = _refused(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "a2a: none\ndispatch_precision: bf16\n")
    assert issues == [Issue(str(f), 5, "dispatch_precision",
                            f"dispatch_precision ({f}:5) is the precision an all-to-all sends activations in; a2a is "
                            f"none ({f}:4): give an a2a backend, or dispatch_precision: auto")]


# ---------------------------------------------------------------------------------------- activation_precision
def test_activation_precision_from_the_flag_is_refused_at_the_files_quant_config_line(tmp_path, capsys):
    """x_understand__mutmut_712 (the fallback key looked up as ``"XXquant_configXX"``: the issue on line 1): the
    flag's activation_precision has no line of its own, so both its refusals (a 16-bit format; a weight-only nvfp4
    checkpoint) sit on the line of the file's quant_config, 4."""
    f = _file(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "quant_config:\n  group_size: 32\n")
    assert cli.main(["explain", "--deployment", str(f), "--activation-precision", "fp8_token"]) == 2
    assert capsys.readouterr().err == (   # (group_size on bf16 is refused too, on its own line: the ninth trial)
        f"invalid input:\n  {f}:5: quant_config.group_size: group_size is a parameter of quantized formats (their "
        "scales and serialization); bf16 has none: leave it out, or give the quantized quant\n"
        f"  {f}:4: quant_config.activation_precision: activation_precision (command line "
        "(--activation-precision)) is the precision of a quantized format's activations (W4A16 vs W4A8); bf16 has "
        "unquantized weights\n")
    f = _file(tmp_path, "arch: sm100\nquant: nvfp4\n" + SHAPE_LINE + "quant_config:\n  weight_only: true\n")
    assert cli.main(["explain", "--deployment", str(f), "--activation-precision", "fp8_token"]) == 2
    assert capsys.readouterr().err == (
        f"invalid input:\n  {f}:4: quant_config.activation_precision: activation_precision fp8_token (command line "
        "(--activation-precision)) quantizes activations; a weight-only checkpoint (weight_only: W*A16) keeps 16-bit "
        "activations\n")


# ------------------------------------------------------------------------------------------- token budget
def test_decode_tokens_per_rank_given_is_kept_with_its_line(tmp_path):
    """x_understand__mutmut_859 (``decode_tokens is None``): given as 32 on line 6 beside max_tokens_per_rank 64 of
    a decode deployment, it stays 32 (not max_tokens_per_rank) with its place; not given (phase both) it is unknown
    and has no provenance."""
    u = _understood(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE
                    + "phase: decode\nmax_tokens_per_rank: 64\ndecode_tokens_per_rank: 32\n")
    assert u.decode_tokens_per_rank == 32
    assert u.provenance["decode_tokens_per_rank"] == f"{tmp_path / 'd.yaml'}:6"
    u = _understood(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE)
    assert u.decode_tokens_per_rank is None and "decode_tokens_per_rank" not in u.provenance


# ------------------------------------------------------------------------------------------- all-to-all modes
def test_the_mode_of_an_a2a_without_a_capability_file_is_the_mode_used(tmp_path):
    """x_understand__mutmut_932 (the mode list always empty): a2a ``mine``, which no capability file describes, with
    a2a_mode low_latency uses that mode; with auto, no mode is known."""
    backends = {"deepep": None, "mori": None}  # names only: understand reads the capability of dep.a2a alone
    u = _understood(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "tp: 2\nep: 2\na2a: mine\na2a_mode: low_latency\n",
                    a2a_backends=backends)
    assert (u.a2a_mode, u.a2a_modes) == ("low_latency", ["low_latency"])
    assert u.notes == ["a2a mine has no capability file; a2a backends with facts: deepep, mori"]
    u = _understood(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "tp: 2\nep: 2\na2a: mine\na2a_mode: auto\n",
                    a2a_backends=backends)
    assert (u.a2a_mode, u.a2a_modes) == ("auto", [])


def test_a_mode_for_an_a2a_without_modes_is_refused_under_the_key_as_written(tmp_path):
    """x_understand__mutmut_997 (``bad(mode_key, ...)`` -> ``bad(None, ...)``): a2a_mode, or SGLang's deepep_mode, on
    line 4 with a2a none -> the issue names that key at its line."""
    f, issues = _refused(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "a2a_mode: low_latency\n")
    assert issues == [Issue(str(f), 4, "a2a_mode", "a2a_mode is given but a2a none has no modes")]
    f, issues = _refused(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "deepep_mode: low_latency\n")
    assert issues == [Issue(str(f), 4, "deepep_mode", "deepep_mode is given but a2a none has no modes")]



# =================================================================================================================
# The local sampled run s9 at e527d0d (benchmarks/results/mutation_sampled_local_2026-12-02_s9.json): its survivors.
# ------------------------------------------------------------------------------------------- arch and model refusals
def test_no_arch_given_and_none_detected_is_refused_under_arch(tmp_path):
    """x_understand__mutmut_90 (the issue filed under ``"ARCH"``): neither gpu nor arch is given and this machine's
    arch was not detected, so the deployment is refused under the field arch, at the mapping's line 1."""
    f, issues = _refused(tmp_path, "quant: bf16\n" + SHAPE_LINE, detected_arch=None)
    assert issues == [Issue(str(f), 1, "arch", "no gpu or arch given, and this machine's arch was not detected")]


def test_model_and_model_config_together_are_refused_with_their_message(tmp_path):
    """x_understand__mutmut_122 (the message wrapped in ``XX``): a shape and a checkpoint both given -> one issue at
    model_config's line 4 saying to give one of them."""
    _checkpoint(tmp_path, BASE)
    f, issues = _refused(tmp_path, "arch: sm90\nquant: bf16\n" + SHAPE_LINE + "model_config: ckpt\n")
    assert issues == [Issue(str(f), 4, "model_config", "give model (shape) or model_config, not both")]


def test_neither_model_nor_model_config_is_refused_with_the_shape_keys_named(tmp_path):
    """x_understand__mutmut_198 (the message upper-cased): no shape and no checkpoint -> one issue under model
    naming the shape's keys."""
    f, issues = _refused(tmp_path, "arch: sm90\nquant: bf16\n")
    assert issues == [Issue(str(f), 1, "model", "give model (num_experts, top_k, hidden_size, moe_intermediate_size, "
                                                "...) or model_config")]


# ---------------------------------------------------------------------------------------- online quantization
def test_a_format_no_engine_makes_at_load_is_refused_at_the_quant_line(tmp_path):
    """x_understand__mutmut_298 (``bad("QUANT", text)``: the issue under QUANT, at the mapping's line 1): fp8_block
    over a bf16 checkpoint with engine sglang; backends/formats.yaml's fp8_block row says sglang does not make it
    (``makes: false``, its why and source), so the deployment is refused under quant at its line 4."""
    _checkpoint(tmp_path, BASE)
    f, issues = _refused(tmp_path, "arch: sm90\nmodel_config: ckpt\nengine: sglang\nquant: fp8_block\n")
    assert issues == [Issue(str(f), 4, "quant", (
        "quant fp8_block for an unquantized (bf16) checkpoint: no engine makes fp8_block at load (backends/formats.yaml, "
        "fp8_block's online column): sglang does not: --quantization fp8: a bf16 checkpoint gets per-tensor FP8 "
        "experts, and Fp8Config raises 'The block-wise quantization only supports fp8-serialized checkpoint for now.' "
        "when blocks are asked of an unserialized checkpoint "
        "[sgl-project/sglang@v0.5.23:python/sglang/srt/layers/quantization/fp8.py:Fp8Config.__init__]; use a "
        "checkpoint in fp8_block"))]


def test_the_other_16_bit_format_over_a_bf16_checkpoint_has_a_row_so_no_row_is_not_said(tmp_path):
    """x_understand__mutmut_306 (the suffix "to a format without a row in backends/formats.yaml" always added): fp16
    over a bf16 checkpoint is a format with a row (unquantized), so the note stops at "online quantization" and
    the parameters are not marked online."""
    _checkpoint(tmp_path, BASE)
    u = _understood(tmp_path, "arch: sm90\nmodel_config: ckpt\nquant: fp16\n")
    assert u.quant == "fp16"
    assert u.notes == ["quant fp16 given for an unquantized (bf16) checkpoint: online quantization"]
    assert u.quant_params == {}


# ------------------------------------------------------------------------------------------- dispatch precision
def test_a_dispatch_precision_mapping_without_main_leaves_main_on_auto(tmp_path, mxfp4_mtp):
    """x_understand__mutmut_458 (main's default in a mapping written ``"XXautoXX"``): dispatch_precision
    ``{mtp: auto}`` names the MTP kind only, so the main layers' dispatch precision is auto, and with a2a none
    (the default) nothing is refused."""
    u = _understood(tmp_path, f"arch: sm100\nmodel_config: {mxfp4_mtp}\ndispatch_precision: {{mtp: auto}}\n")
    assert u.dispatch_precision == "auto"
    assert u.provenance["dispatch_precision"] == f"{tmp_path / 'd.yaml'}:3 (mtp: auto; kinds not named: auto)"


# ------------------------------------------------------------------------------------------- quant_config
def test_quant_config_given_is_the_provenance_of_the_parameters(tmp_path):
    """x_understand__mutmut_565 (the provenance stored under ``"QUANT_PARAMS"``: quant_params would read as nvfp4's
    defaults): quant_config on line 4 of an nvfp4 deployment is where its parameters come from; block 16 and layout
    modelopt are nvfp4's defaults, group_size 32 the file's."""
    u = _understood(tmp_path, "arch: sm100\nquant: nvfp4\n" + SHAPE_LINE + "quant_config:\n  group_size: 32\n")
    assert u.provenance["quant_params"] == f"{tmp_path / 'd.yaml'}:4"
    assert u.quant_params == {"block": 16, "group_size": 32, "layout": "modelopt"}


# ------------------------------------------------------------------------------------------- all-to-all modes
def test_deepeps_default_mode_is_auto_as_sglang(tmp_path):
    """x_understand__mutmut_974 (``'SGLang'`` written ``'SGLANG'``): backends/a2a/deepep.yaml has modes and no
    ``auto:`` of its own, so a2a_mode not given is auto, normal for prefill and low_latency for decode, as SGLang."""
    from moe_select.catalog import default_catalog

    u = _understood(tmp_path, "gpu: H200\nquant: bf16\n" + SHAPE_LINE + "tp: 8\nep: 8\na2a: deepep\n",
                    a2a_backends=default_catalog().a2a)
    assert u.a2a_mode == "auto"
    assert u.provenance["a2a_mode"] == "default (auto: normal for prefill, low_latency for decode, as SGLang)"

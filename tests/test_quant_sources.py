"""Issue 17, rows 2-4: where a checkpoint's quantization is read from, in each engine's order.

Rows (input -> exit code -> message):

2. a folder whose ``config.json:quantization_config`` (FP8 block) and ``hf_quant_config.json`` (NVFP4)
   disagree -> exit 0, planned from the source the engine reads (SGLang and vLLM: ``quantization_config``;
   TensorRT-LLM: ``hf_quant_config.json``), with a note naming both files and lines.
3. a config with ``compression_config`` (compressed-tensors <= 0.6 exports) -> read: an FP8 checkpoint is
   planned as ``fp8_channel``, not ``bf16``, its provenance naming ``compression_config.quant_method``.
4. an AWQ/GPTQ config with ``group_size: -1`` (per output channel) -> exit 0 at tp 8, planned per channel
   (``group_size -1``, no group constraint), not as group 128 and refused.

The fixtures (``tests/fixtures/models/quant-sources__*``) and their public sources are listed in
``tests/fixtures/README.md``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_select.cli import main
from moe_select.errors import InputError
from moe_select.formats import group_size
from moe_select.model_config import read_model_config

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
DISAGREE = MODELS / "quant-sources__Qwen3-30B-A3B-FP8-with-NVFP4-hf_quant_config"
COMPRESSION = MODELS / "quant-sources__Mixtral-8x7B-FP8-dynamic-compression_config"
PER_CHANNEL = MODELS / "quant-sources__Qwen3-30B-A3B-AWQ-per-channel"
FP8_ONLY = MODELS / "Qwen__Qwen3-30B-A3B-FP8"              # quantization_config only
NVFP4_ONLY = MODELS / "nvidia__Qwen3-30B-A3B-NVFP4"        # hf_quant_config.json only


def line_of(path: Path, needle: str, after: str | None = None) -> int:
    """1-based line of the first line of ``path`` containing ``needle`` (after the line containing ``after``)."""
    lines = path.read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if after in s) if after else 0
    return next(i for i, s in enumerate(lines) if i >= start and needle in s) + 1


def explain(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["explain", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def row(out: str, name: str) -> str:
    """The explain row of the deployment field ``name`` (``  quant   fp8_block   ...``)."""
    return next(s for s in out.splitlines() if s.split()[:1] == [name])


def notes(out: str) -> list[str]:
    return [s.strip() for s in out.splitlines() if s.strip().startswith("note:")]


# --- row 2: two sources that disagree ------------------------------------------------------------------

Q_LINE = line_of(DISAGREE / "config.json", '"quant_method"')
H_LINE = line_of(DISAGREE / "hf_quant_config.json", '"quant_algo"')


@pytest.mark.parametrize("engine", ["sglang", "vllm", "any"])
def test_row2_sglang_and_vllm_read_quantization_config_before_hf_quant_config(engine):
    info = read_model_config(DISAGREE, engine=engine)
    assert info.quant == "fp8_block" and info.quant_params["block"] == [128, 128]
    assert info.provenance["quant"] == f"{DISAGREE / 'config.json'}:{Q_LINE} (quant_method)"
    [note] = [n for n in info.notes if "disagree" in n]
    assert f"config.json:{Q_LINE}" in note and f"hf_quant_config.json:{H_LINE}" in note
    assert "fp8_block" in note and "nvfp4" in note and "trtllm" in note


def test_row2_trtllm_reads_hf_quant_config_json_first():
    info = read_model_config(DISAGREE, engine="trtllm")
    assert info.quant == "nvfp4" and info.quant_params == {"block": 16, "layout": "modelopt"}
    assert info.provenance["quant"] == f"{DISAGREE / 'hf_quant_config.json'}:{H_LINE} (quant_algo)"
    [note] = [n for n in info.notes if "disagree" in n]
    assert f"config.json:{Q_LINE}" in note and f"hf_quant_config.json:{H_LINE}" in note


def test_row2_cli_explain_plans_the_engines_source_and_names_both_files(capsys):
    rc, out, _ = explain(capsys, "--gpu", "B200", "--model-config", str(DISAGREE), "--tp", "2", "--engine", "sglang")
    assert rc == 0
    assert "fp8_block" in row(out, "quant") and f"config.json:{Q_LINE} (quant_method)" in row(out, "quant")
    [note] = {n for n in notes(out) if "disagree" in n}      # the deployment's note (the plan repeats it)
    assert f"{DISAGREE / 'config.json'}:{Q_LINE}" in note and f"{DISAGREE / 'hf_quant_config.json'}:{H_LINE}" in note
    # TensorRT-LLM reads hf_quant_config.json: NVFP4, planned or refused by the catalog's TensorRT-LLM NVFP4 facts
    # (0 or 1), never an input error (2)
    rc, out, _ = explain(capsys, "--gpu", "B200", "--model-config", str(DISAGREE), "--tp", "2", "--engine", "trtllm")
    assert rc in (0, 1) and "nvfp4" in row(out, "quant") and f"hf_quant_config.json:{H_LINE} (quant_algo)" in row(out, "quant")
    assert any("disagree" in n for n in notes(out))


def test_row2_sources_that_agree_give_no_note(tmp_path):
    """ModelOpt >= 0.31 writes its config into config.json and hf_quant_config.json: the same format from
    both is not a disagreement (and a single source never is)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cfg = json.loads((NVFP4_ONLY / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2))
    (ckpt / "hf_quant_config.json").write_text((NVFP4_ONLY / "hf_quant_config.json").read_text())
    for engine in ("sglang", "vllm", "trtllm", "any"):
        info = read_model_config(ckpt, engine=engine)
        assert info.quant == "nvfp4" and not info.notes, (engine, info.notes)
    for path in (FP8_ONLY, NVFP4_ONLY):
        for engine in ("sglang", "vllm", "trtllm", "any"):
            assert not read_model_config(path, engine=engine).notes


def test_row2_a_source_the_engine_does_not_read_is_reported_not_refused(tmp_path):
    """An unsupported hf_quant_config.json beside a supported quantization_config: SGLang plans the
    quantization_config and the note says what TensorRT-LLM would read; for TensorRT-LLM it is an error
    naming the file and line."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((DISAGREE / "config.json").read_text())
    (ckpt / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "W8A8_SQ_PER_CHANNEL"}}, indent=2))
    info = read_model_config(ckpt, engine="sglang")
    assert info.quant == "fp8_block"
    [note] = [n for n in info.notes if "disagree" in n]
    assert "hf_quant_config.json:3" in note and "W8A8_SQ_PER_CHANNEL" in note
    with pytest.raises(InputError) as exc:
        read_model_config(ckpt, engine="trtllm")
    assert exc.value.issues[0].file.endswith("hf_quant_config.json") and exc.value.issues[0].line == 3


def test_row2_exclusions_come_from_the_source_read(tmp_path):
    """Layers left unquantized are those the source read excludes: an hf_quant_config.json that sglang
    does not read excludes nothing from the plan (before: its exclude_modules applied whatever was read)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((DISAGREE / "config.json").read_text())
    hfq = json.loads((DISAGREE / "hf_quant_config.json").read_text())
    hfq["quantization"]["exclude_modules"] = ["model.layers.0.mlp.experts*"]
    (ckpt / "hf_quant_config.json").write_text(json.dumps(hfq, indent=2))
    assert [k["kind"] for k in read_model_config(ckpt, engine="sglang").layer_kinds] == ["main"]
    kinds = read_model_config(ckpt, engine="trtllm").layer_kinds
    assert [k["kind"] for k in kinds] == ["main", "unquantized"] and kinds[1]["layers"] == [0]


# --- row 3: compression_config ---------------------------------------------------------------------------

C_LINE = line_of(COMPRESSION / "config.json", '"quant_method"')


@pytest.mark.parametrize("engine", ["sglang", "vllm", "any"])
def test_row3_compression_config_is_read(engine):
    info = read_model_config(COMPRESSION, engine=engine)
    assert info.quant == "fp8_channel"
    assert info.provenance["quant"] == f"{COMPRESSION / 'config.json'}:{C_LINE} (compression_config.quant_method)"
    assert [k["kind"] for k in info.layer_kinds] == ["main"] and len(info.layer_kinds[0]["layers"]) == 32


def test_row3_trtllm_does_not_read_compression_config_and_says_so():
    info = read_model_config(COMPRESSION, engine="trtllm")
    assert info.quant == "fp8_channel"       # the weights' format, planned; the note says TRT-LLM will not read it
    [note] = [n for n in info.notes if "compression_config" in n]
    assert "trtllm" in note and f"config.json:{C_LINE}" in note and "quantization_config" in note
    assert any("trtllm" in n and "compression_config" in n for n in read_model_config(COMPRESSION, engine="any").notes)
    assert not read_model_config(COMPRESSION, engine="sglang").notes


def test_row3_quantization_config_is_read_before_compression_config(tmp_path):
    """Both in config.json: every engine reads quantization_config (SGLang and vLLM try it first)."""
    cfg = json.loads((COMPRESSION / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    for engine in ("sglang", "vllm", "trtllm", "any"):
        info = read_model_config(tmp_path, engine=engine)
        assert info.quant == "fp8_block", engine
        assert any("compression_config" in n and "disagree" in n for n in info.notes), engine


def test_row3_cli_explain_plans_fp8_not_bf16(capsys):
    rc, out, _ = explain(capsys, "--gpu", "H100", "--model-config", str(COMPRESSION), "--tp", "8", "--engine", "sglang")
    assert rc == 0
    assert "fp8_channel" in row(out, "quant") and f"config.json:{C_LINE} (compression_config.quant_method)" in row(out, "quant")


# --- row 4: group_size -1 (per output channel) ------------------------------------------------------------

def _with_quant(tmp_path: Path, quant: dict) -> Path:
    cfg = json.loads((PER_CHANNEL / "config.json").read_text())
    cfg["quantization_config"] = quant
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    return tmp_path


def test_row4_awq_group_size_minus_one_is_per_channel():
    info = read_model_config(PER_CHANNEL)
    assert info.quant == "int4_w4a16" and info.quant_params["group_size"] == -1
    assert group_size(info.quant, info.quant_params) is None          # no groups along K: no group constraint
    assert group_size("int4_w4a16", {"group_size": 128}) == 128 and group_size("int4_w4a16", {}) == 128
    g_line = line_of(PER_CHANNEL / "config.json", '"group_size"')
    assert any("per output channel" in n and f"config.json:{g_line}" in n for n in info.notes)


@pytest.mark.parametrize("quant, want", [
    ({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": False, "sym": True}, ("int4_w4a16", -1)),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": True, "sym": True}, ("int8_w8a16", -1)),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": -1, "zero_point": True}, ("int4_w4a16", -1)),
    ({"quant_method": "gptq", "bits": 4, "group_size": 64}, ("int4_w4a16", 64)),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": True}}}},
     ("int4_w4a16", -1)),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                                           "symmetric": True}}}}, ("int4_w4a16", 32)),
])
def test_row4_every_weight_only_reader_keeps_per_channel(tmp_path, quant, want):
    info = read_model_config(_with_quant(tmp_path, quant))
    assert (info.quant, info.quant_params.get("group_size")) == want


def test_compressed_tensors_reads_int_symmetry_and_states_fp8_serialization(tmp_path):
    """An int group's ``symmetric`` is kept (its zero points), for int groups only; an FP8 group states its
    serialization (``layout: compressed-tensors``: vLLM's compressed-tensors FP8 method keeps whole scale blocks where
    its Fp8Config method refines them)."""
    cfg = lambda w: {"quant_method": "compressed-tensors", "format": "pack-quantized",    # noqa: E731
                     "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}}}
    for sub in ("a", "f"):
        (tmp_path / sub).mkdir()
    asym = read_model_config(_with_quant(tmp_path / "a", cfg({"num_bits": 4, "type": "int", "strategy": "group",
                                                              "group_size": 128, "symmetric": False})))
    assert asym.quant_params["symmetric"] is False and asym.quant_params["layout"] == "compressed-tensors"
    fp8 = read_model_config(_with_quant(tmp_path / "f", {**cfg({"num_bits": 8, "type": "float", "strategy": "block",
                                                               "block_structure": [128, 128], "symmetric": True}),
                                                          "format": "float-quantized"}))
    assert fp8.quant == "fp8_block" and fp8.quant_params["layout"] == "compressed-tensors"
    assert "symmetric" not in fp8.quant_params


def test_row4_cli_explain_plans_per_channel_at_tp_8(capsys):
    rc, out, err = explain(capsys, "--gpu", "H100", "--model-config", str(PER_CHANNEL), "--tp", "8")
    assert rc == 0, out + err
    assert "group_size -1" in row(out, "quant_params")
    assert "quant_group_size" not in out and any("per output channel" in n for n in notes(out))


def test_row4_quant_config_contradicting_per_channel_is_refused(tmp_path, capsys):
    dep = tmp_path / "d.yaml"
    dep.write_text(f"gpu: H100\nmodel_config: {PER_CHANNEL}\nquant_config: {{group_size: 128}}\ntp: 8\n")
    rc, _, err = explain(capsys, "-d", str(dep))
    assert rc == 2 and "contradicts the checkpoint's" in err and "'group_size': -1" in err


def test_row4_layer_spec_of_a_per_channel_plan_has_no_group():
    import moe_select
    from moe_select.layer import LayerSpec

    plan = moe_select.plan({"gpu": "H100", "model_config": str(PER_CHANNEL), "tp": 8, "runner": "triton"})
    assert plan.quant_params["group_size"] == -1
    assert LayerSpec.from_plan(plan).group_size is None


_PER_CHANNEL_RUN = r"""
import sys
sys.path.insert(0, sys.argv[1])
import test_triton_moe as T
from moe_select import quant_int as qi
spec = T.spec_of("int4_w4a16")
layer = T.Layer(spec, 11, groups=(spec.hidden_size, spec.intermediate_size))   # one group = all of K
assert layer.kwargs["w13_scale"].shape[-1] == 1 and layer.kwargs["w2_scale"].shape[-1] == 1
core, pw = T.core_for(spec, layer)
x, ids, w = T.routing(spec, 8, 11)
out = core.forward(x, ids, w, pw)
T.check(spec, layer, x, ids, w, out, "per-channel kernel layout", 11)
(a13, z13, s13), (a2, z2, s2) = qi.to_awq(layer.i13), qi.to_awq(layer.i2)
got = core.forward(x, ids, w, core.prepare_weights(a13, a2, w13_scale=s13, w2_scale=s2, w13_zeros=z13, w2_zeros=z2))
assert (got == out).all(), "AWQ per-channel layout differs from the kernel layout"
print("ok")
"""


def test_row4_triton_runner_computes_per_channel_int4():
    """The triton runner takes its group from the scales' shape (``K / G``), so per-channel scales
    (``G = 1``) run, in the kernel and AWQ layouts, within the int formats' tolerance (Triton interpreter)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", _PER_CHANNEL_RUN, str(ROOT / "tests")], capture_output=True, text=True,
                         env=env, cwd=str(ROOT), timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout[-2000:] + res.stderr[-4000:]

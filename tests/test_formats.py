"""The formats table (backends/formats.yaml, moe_select.formats): one row per format, read by everything that
needs a format's facts; a format without a row is planned unverified and refused by verify/run/resolve with
no_adapter (issue 18)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import moe_select
from moe_select import formats
from moe_select.cli import main
from moe_select.environment import Environment, detect_package
from moe_select.errors import InputError, ResolveError, RunnerInputError
from moe_select.formats import Format, load_table, lookup, missing_row, names
from moe_select.harness import memory
from moe_select.layer import LayerSpec
from moe_select.ops import quantize_named
from moe_select.registry import Registry
from moe_select.weight_checks import weights_refusal
from moe_select.verify import verify_runner

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
HEADER = "schema_version: 1\nformats:\n"
ROW = "  - {name: f8, summary: s, source: x, dtype: float8_e4m3fn, bits: 8, scales: [{name: scale, shape: '[E]', dtype: float32}]}\n"


def _row(name: str) -> Format:
    row = lookup(name)
    assert row is not None, name
    return row


# ------------------------------------------------------------------------------------------ the table

def test_every_format_a_fact_or_adapter_names_has_a_row():
    """Capability files validate against the table (an unknown name is a load error); the adapters' FORMATS too."""
    from moe_select.backends import flashinfer_cutlass, torch_grouped_mm, torch_native, triton_moe

    for mod in (torch_native, torch_grouped_mm, triton_moe, flashinfer_cutlass):
        assert set(mod.FORMATS) <= set(names()), mod.__name__
    from moe_select.catalog import default_catalog

    cat = default_catalog()
    assert tuple(cat.formats) == names()
    for cap in cat.runners.values():
        for row in cap.support:
            assert set(row.formats) <= set(names()), cap.where()


@pytest.mark.parametrize("name,pack_k,stored", [
    ("bf16", 1, 2.0), ("fp8_channel", 1, 1.0), ("fp8_block", 1, 1 + 4 / (128 * 128)), ("mxfp8", 1, 1 + 1 / 32),
    ("nvfp4", 2, 0.5 + 1 / 16), ("mxfp4", 2, 0.5 + 1 / 32), ("int4_w4a16", 2, 0.5 + 4 / 128 + 1 / 128),
])
def test_derived_columns(name, pack_k, stored):
    """pack_k from the element dtype and bits; stored bytes = bits/8 + each counted scale's dtype bytes / per (exact)."""
    row = _row(name)
    assert row.pack_k == pack_k
    assert row.stored_bytes == pytest.approx(stored, rel=0, abs=1e-15)


@pytest.mark.parametrize("name", [n for n in formats.names() if formats.lookup(n).generated])  # type: ignore[union-attr]
def test_generated_formats_are_what_ops_makes(name):
    """For each format the harness generates, quantize_named returns the row's stored dtype, packing and
    scale names and dtypes (the table and the code that makes the weights agree)."""
    row = _row(name)
    w = torch.randn(2, 128, 256)
    q, scales = quantize_named(w, name)
    assert str(q.dtype).removeprefix("torch.") == row.dtype
    assert q.shape == (2, 128, 256 // row.pack_k)
    assert tuple(scales) == row.scale_names
    for s in row.scales:
        assert str(scales[s.name].dtype).removeprefix("torch.") == s.dtype, s.name
        if s.per is not None:  # the memory estimate's elements per scale value are what ops makes
            assert scales[s.name].numel() * s.per == w.numel(), s.name


def test_ops_block_constants_are_the_rows_parameters():
    """ops implements the layouts with its own constants; they must be the rows' defaults."""
    from moe_select import ops

    assert formats.block_shape("fp8_block") == (ops.BLOCK, ops.BLOCK)
    assert formats.group_size("mxfp4") == ops.MX_BLOCK and formats.group_size("nvfp4") == ops.NV_BLOCK


@pytest.mark.parametrize("name", [n for n in formats.names() if not formats.lookup(n).generated])  # type: ignore[union-attr]
def test_formats_not_generated_are_not_made_by_ops(name):
    with pytest.raises(ValueError, match="does not handle"):
        quantize_named(torch.randn(1, 32, 64), name)


def test_online_column_is_what_deployment_accepts(tmp_path, configs):
    """A bf16 checkpoint served in fp8_channel (vLLM fp8_per_channel) is a note; in fp8_block under SGLang (its online
    column says SGLang does not make it) an error naming the evidence (corrected, issue 21: the column was a bare
    true/false and named no engine); in int8_w8a8 (no online column) an error listing the formats some engine
    makes; in a format without a row a note (no fact either way)."""
    cfg = str(configs / "ibm-granite__granite-3.1-3b-a800m-instruct")
    rep = moe_select.explain({"arch": "cpu", "model_config": cfg, "quant": "fp8_channel"})
    assert any("online quantization" in n and "fp8_per_channel" in n for n in rep.deployment.notes)
    with pytest.raises(InputError, match="no engine makes fp8_block at load"):
        moe_select.explain({"arch": "cpu", "model_config": cfg, "quant": "fp8_block", "engine": "sglang"})
    with pytest.raises(InputError, match="online only to fp8_tensor, fp8_channel, fp8_block, mxfp8, nvfp4, mxfp4"):
        moe_select.explain({"arch": "cpu", "model_config": cfg, "quant": "int8_w8a8"})
    rep = moe_select.explain({"arch": "cpu", "model_config": cfg, "quant": "w4a8_foo"})
    assert any("format without a row" in n for n in rep.deployment.notes)


def test_memory_estimates_read_the_row():
    assert memory.stored_bytes("nvfp4") == _row("nvfp4").stored_bytes == 0.5 + 1 / 16
    assert memory.build_bytes("nvfp4") == 0.5 + 1 / 16 + 4  # plus torch_native's float32 copy
    assert memory.build_bytes("bf16") == 2  # unquantized: no copy
    with pytest.raises(ValueError, match="no format row: no scales, no tolerance for quant 'w4a8_foo'"):
        memory.stored_bytes("w4a8_foo")


def test_block_and_group_defaults_come_from_the_row():
    assert formats.block_shape("fp8_block") == (128, 128)
    assert formats.block_shape("fp8_block", {"block": [64, 128]}) == (64, 128)
    assert formats.block_shape("mxfp4") is None and formats.block_shape("w4a8_foo") is None
    assert formats.group_size("mxfp4") == 32 and formats.group_size("nvfp4") == 16
    assert formats.group_size("int4_w4a16") == 128 and formats.group_size("int4_w4a16", {"group_size": -1}) is None
    assert formats.group_size("w4a8_foo") is None


# ------------------------------------------------------------------------------------- file errors

@pytest.mark.parametrize("text,where,words", [
    (ROW.replace("bits: 8", "bits: 8, colour: red"), ":3", "unknown key 'colour'"),
    (ROW.replace("float8_e4m3fn", "float7"), ":3", "dtype 'float7' is not one of"),
    (ROW + ROW, ":2", "format 'f8' has two rows"),
    (ROW.replace("dtype: float8_e4m3fn, bits: 8", "dtype: int32, bits: 8"), ":3", "do not pack into int32"),
    (ROW.replace("{name: scale", "{name: scale, per: 0"), ":3", "greater than or equal to 1"),
    (ROW.replace("bits: 8,", "bits: 8, params: {block: [1, 2, 3]},"), ":3", "block is [bn, bk]"),
    (ROW.replace("bits: 8,", "bits: 8, params: {groups: 4},"), ":3", "unknown key 'groups'"),
])
def test_an_invalid_table_names_file_line_and_field(tmp_path, text, where, words):
    f = tmp_path / "formats.yaml"
    f.write_text(HEADER + text)
    with pytest.raises(InputError) as exc:
        load_table(f, "formats.yaml")
    msg = str(exc.value)
    assert f"formats.yaml{where}" in msg and words in msg, msg


def test_a_valid_row_loads_with_its_marks(tmp_path):
    f = tmp_path / "formats.yaml"
    f.write_text(HEADER + ROW)
    rows = load_table(f, "formats.yaml")
    assert list(rows) == ["f8"] and rows["f8"].where() == "formats.yaml:3" and rows["f8"].scale_names == ("scale",)


def test_a_capability_file_naming_a_format_without_a_row_is_a_load_error(tmp_path):
    import shutil

    from moe_select.catalog import bundled_dirs, load_catalog

    bdir, _ = bundled_dirs()
    shutil.copytree(bdir, tmp_path / "backends", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    f = tmp_path / "backends" / "torch_native.yaml"
    assert "mxfp4" in f.read_text()
    f.write_text(f.read_text().replace("mxfp4", "mxfp5", 1))
    with pytest.raises(InputError) as exc:
        load_catalog(backends_dir=tmp_path / "backends", use_env=False, plugins=False)
    assert "backends/torch_native.yaml:" in str(exc.value) and "'mxfp5' is not one of" in str(exc.value)


def test_a_formats_file_in_an_operator_folder_is_an_error_not_ignored(tmp_path):
    from moe_select.catalog import load_catalog

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "formats.yaml").write_text(HEADER + ROW)
    with pytest.raises(InputError, match="format rows are bundled only"):
        load_catalog(backends_dirs=[folder], use_env=False, plugins=False)


def test_a_planning_process_reads_the_table_from_the_cached_catalog(tmp_path):
    """The table is validated with the catalog and cached with it: a second process plans without parsing or
    validating backends/formats.yaml (no cost per explain), and lookups answer from the cached rows."""
    code = textwrap.dedent("""
        import moe_select, moe_select.formats as F
        seen = []
        real = F.FormatsFile.model_validate
        F.FormatsFile.model_validate = lambda data, **k: (seen.append(1), real(data, **k))[1]
        rep = moe_select.explain({"arch": "sm90", "quant": "fp8_block", "model": {"num_experts": 128, "top_k": 8,
                                  "hidden_size": 2048, "moe_intermediate_size": 768}})
        print(len(seen), rep.plan.activation_precision, F.lookup("nvfp4").pack_k)
    """)
    env = {**os.environ, "MOE_SELECT_CACHE_DIR": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    first, second = (r.stdout.split() for r in runs)
    assert first == ["1", "fp8_group", "2"]  # a cache miss: validated once, with the catalog
    assert second == ["0", "fp8_group", "2"]  # a hit: never parsed nor validated (the cache key only hashes it)


# ------------------------------------------------------------------------- a format without a row

def _env(plan, arch="cpu"):
    return Environment(detected=True, arch=arch, packages={n.name: detect_package(n.name, n.module) for n in plan.packages})


def test_a_format_without_a_row_is_planned_unverified():
    # int4_w4a4: no row (int4_w4a8 has one since issue 21: the did-you-mean names it); a serving engine's plan (this
    # install's own adapters refuse a format they do not implement: no_adapter)
    rep = moe_select.explain({"gpu": "H200", "engine": "sglang", "quant": "int4_w4a4", "model": SMALL})
    assert rep.plan is not None and rep.plan.evidence == "unverified"
    assert any("no row in backends/formats.yaml" in n and "'int4_w4a8'" in n for n in rep.deployment.notes)


@pytest.mark.parametrize("verify", [False, True])
def test_resolve_refuses_a_format_without_a_row_with_no_adapter(verify):
    # a serving engine's plan (SGLang's triton, unverified on a format without a row), resolved on its GPU
    plan = moe_select.plan({"gpu": "H200", "engine": "sglang", "quant": "w4a8_foo", "model": SMALL, "runner": "triton"})
    with pytest.raises(ResolveError) as exc:
        moe_select.resolve(plan, environment=_env(plan, "sm90"), device="cpu", registry=Registry(), verify=verify)
    assert set(exc.value.codes) == {"no_adapter"}  # the adapter's own facts may add theirs (plan-only for w4a8_foo)
    ours = [r for r in exc.value.reasons if r.source == "backends/formats.yaml"]
    assert len(ours) == 1 and "no format row: no scales, no tolerance for quant 'w4a8_foo'" in ours[0].detail


def test_verify_refuses_a_format_without_a_row_with_no_adapter():
    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "bf16", "model": SMALL, "runner": "torch_native"})
    runner = moe_select.resolve(plan, environment=_env(plan), device="cpu", registry=Registry())
    runner.spec = type(runner.spec)(**{**runner.spec.__dict__, "quant": "int4_w4a4"})
    with pytest.raises(ResolveError) as exc:
        verify_runner(runner)
    assert exc.value.codes == ["no_adapter"] and "verify: no format row" in exc.value.reasons[0].detail


def test_weights_refusal_codes():
    assert weights_refusal("fp8_block", "x") is None
    no_row = weights_refusal("w4a8_foo", "x")
    assert no_row is not None and no_row.code == "no_adapter" and no_row.detail.startswith("x: no format row")
    not_made = weights_refusal("int4_w4a16", "x")
    assert not_made is not None and not_made.code == "quant_unsupported" and "backends/formats.yaml:" in not_made.source


def test_run_refuses_a_format_without_a_row_with_no_adapter(capsys, configs):
    """Through the command line: refused (no_adapter, naming the format), no traceback, no weight built."""
    rc = main(["run", "--model-config", str(configs / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--quant", "int4_w4a4",
               "--device", "cpu", "--tokens", "2", "--repeat", "1"])
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert rc == 1 and "no_adapter" in text and "int4_w4a4" in text, text
    assert "Traceback" not in text and "layer:" not in captured.out


def test_run_refuses_a_planned_format_without_a_row_before_building(capsys, configs, monkeypatch):
    """A plan in a format without a row that planning let through (a plugin adapter claiming it): run refuses it
    with no_adapter, naming the missing row, before the memory estimate and any weight."""
    import types

    import moe_select.selector as selector

    real = selector.explain

    def planned(dep, **kw):
        rep = real(dep, **kw)
        plan = rep.plan.model_copy(update={"quant": "int4_w4a4"})
        return types.SimpleNamespace(plan=plan, summary=lambda: f"planned {plan.runner} for int4_w4a4")

    monkeypatch.setattr(selector, "explain", planned)
    rc = main(["run", "--model-config", str(configs / "ibm-granite__granite-3.1-3b-a800m-instruct"), "--device", "cpu",
               "--tokens", "2", "--repeat", "1"])
    captured = capsys.readouterr()
    assert rc == 1, captured
    assert "no_adapter: moe-select run: no format row: no scales, no tolerance for quant 'int4_w4a4'" in captured.err
    assert "Traceback" not in captured.err + captured.out and "layer:" not in captured.out


def test_layer_spec_of_a_format_without_a_row_is_a_typed_error():
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=32, quant="w4a8_foo")
    with pytest.raises(RunnerInputError, match="no format row"):
        _ = spec.k_pack
    assert missing_row("bf16") is None

"""A new user's trial (2026-12-06, break52), each defect fixed as a kind and tested here: this install's runner planned
for vLLM, an exhaustive arch list refusing GPUs its cited gate admits, the Python API's path lists, YAML merge keys,
the duplicate-runner message, ``tune --tokens ""``, measurement points with too few samples, a runner given lists, an
operator product name that changes what a declared one means, and ``check``'s duplicate report."""
from __future__ import annotations

import json

import pytest

import moe_select
from moe_select.cli import main
from moe_select.errors import InputError, RunnerInputError
from moe_select.measurements import Point
from moe_select.yamlio import load_text
from report_helpers import report_codes

SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
OSS = {"num_experts": 32, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880, "activation": "swiglu_oai",
       "routing": "renormalize"}


def test_this_installs_runners_are_refused_under_vllm():
    for runner in ("torch_native", "torch_grouped_mm"):
        r = moe_select.explain({"arch": "sm90", "engine": "vllm", "model": SMALL, "quant": "bf16", "runner": runner})
        assert r.plan is None and "engine_unsupported" in [x.code for x in r.reasons], report_codes(r)
        assert any("MoEBackend" in x.detail for x in r.reasons if x.code == "engine_unsupported")


@pytest.mark.parametrize("arch, version, refused", [
    ("gfx1100", "0.21.0", True), ("gfx1100", "0.22.0", False), ("gfx1201", "0.34.0", False), ("gfx1151", "0.24.0", False),
    ("sm107", "0.20.0", False), ("sm120", "0.31.0", True), ("gfx908", "0.34.0", True)])
def test_triton_kernel_under_vllm_follows_its_device_gate(arch, version, refused):
    r = moe_select.explain({"arch": arch, "engine": "vllm", "engine_version": version, "model": OSS, "quant": "mxfp4",
                            "runner": "triton_kernel"})
    tk = next(c for c in r.candidates if c.backend == "triton_kernel")
    assert any(x.code == "arch_unsupported" for x in tk.reasons) is refused, report_codes(r)


@pytest.mark.parametrize("value, says", [
    ([""], r"rules_dirs\[1\]: is empty"), ("rules", "not one path as a string"), ([3], r"rules_dirs\[1\]: '3' is not a path")])
def test_the_apis_rule_folders_are_a_list_of_paths(value, says):
    with pytest.raises(InputError, match=says):
        moe_select.explain({"arch": "cpu", "model": SMALL, "quant": "bf16"}, rules_dirs=value)
    with pytest.raises(InputError, match=says.replace("rules_dirs", "backends_dirs")):
        moe_select.explain({"arch": "cpu", "model": SMALL, "quant": "bf16"}, backends_dirs=value)


def test_yaml_merge_keys_follow_yaml():
    text = "a: &a {x: 1, y: 2}\nb: &b {x: 3, z: 4}\nc:\n  <<: [*a, *b]\n  y: 9\n"
    assert load_text(text, "t.yaml")["c"] == {"x": 1, "y": 9, "z": 4}   # the first merged mapping wins; y overrides
    with pytest.raises(InputError, match=r"t.yaml:5: c.y: duplicate key \(first given on line 4\)"):
        load_text("a: &a {x: 1}\nc:\n  <<: *a\n  y: 1\n  y: 2\n", "t.yaml")


def test_a_runner_file_given_twice_in_one_folder(tmp_path):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "backends/torch_native.yaml").read_text()
    text = text.replace("runner: torch_native", "runner: acme_moe")
    line = text.splitlines().index("runner: acme_moe") + 1
    for name in ("acme_moe.yaml", "acme_moe2.yaml"):   # the second also differs from its file name: reported too
        (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as exc:
        moe_select.explain({"arch": "cpu", "model": SMALL, "quant": "bf16"}, backends_dirs=[str(tmp_path)])
    said = [str(i) for i in exc.value.issues if "already defined" in i.message]
    assert said and f"acme_moe.yaml:{line}: two files of one operator folder give it" in said[0], said
    assert said[0].startswith(f"{tmp_path / 'acme_moe2.yaml'}:{line}:")


def test_tune_refuses_empty_token_counts(capsys):
    assert main(["tune", "--quant", "bf16", "--model", "num_experts=8,top_k=2,hidden_size=64,moe_intermediate_size=32",
                 "--engine", "moe_select", "--device", "cpu", "--tokens", "", "-o", "/dev/null"]) == 2
    assert "--tokens" in capsys.readouterr().err


def test_a_point_needs_six_samples():
    p = dict(runner="torch_native", tokens=1, median_us=10.0, p10_us=9.0, p90_us=11.0, ci_low_us=9.5, ci_high_us=10.5,
             stopped="narrow")
    assert Point(samples=6, **p).samples == 6
    with pytest.raises(Exception, match="greater than or equal to 6"):
        Point(samples=5, **p)


def test_a_runner_given_lists_is_refused_with_a_typed_error():
    import torch

    runner = moe_select.resolve(moe_select.plan({"arch": "auto", "model": SMALL, "quant": "bf16", "engine": "moe_select"}))
    ids, tw = torch.zeros(4, 2, dtype=torch.int64), torch.full((4, 2), 0.5)
    with pytest.raises(RunnerInputError, match="hidden_states must be a torch.Tensor, got list"):
        runner.run([[1.0] * 64] * 4, ids, tw, None)
    with pytest.raises(RunnerInputError, match="topk_ids must be a torch.Tensor, got list"):
        runner.run(torch.randn(4, 64), ids.tolist(), tw, None)


def test_an_operator_product_may_not_extend_a_declared_one(tmp_path):
    (tmp_path / "vocabulary.yaml").write_text(
        "schema_version: 3\narchs:\n  - {name: sm131, vendor: nvidia, products: [H100 NVL], source: 'https://example.com/a'}\n")
    with pytest.raises(InputError, match="product 'H100 NVL' extends 'H100'"):
        moe_select.explain({"gpu": "H100 NVL", "model": SMALL, "quant": "bf16"}, backends_dirs=[str(tmp_path)])
    # a product of the same arch extending another (RX 9070 XT, RX 9070) is no change of meaning
    assert moe_select.explain({"gpu": "RX 9070 XT", "model": SMALL, "quant": "bf16"}).deployment.arch == "gfx1201"


def test_check_reports_a_duplicate_rule_id_once(tmp_path, monkeypatch, capsys):
    rule = "  - id: my-rule\n    when: {arch: [sm90], quant: [%s]}\n    prefer: [triton]\n    reason: test\n"
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n" + rule % "bf16" + rule % "fp16")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "ops.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("duplicate rule id 'my-rule'") == 1, err
    json.dumps(err)


@pytest.mark.parametrize("extra, says", [(", activation: [silu]", "changes activation: [silu] (bundled: any)"),
                                         (", engine: [vllm]", "changes engine: [vllm] (bundled: any)")])
def test_check_warns_of_an_override_narrowing_another_condition(tmp_path, capsys, extra, says):
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: hopper-mxfp4\n"
                                       f"    when: {{arch: [sm90], quant: [mxfp4]{extra}}}\n"
                                       "    prefer: [triton_kernel, flashinfer_mxfp4, flashinfer_cutlass, marlin]\n")
    main(["check", str(tmp_path)])
    out = capsys.readouterr()
    assert "overriding rule hopper-mxfp4 (bundled at rules/10-nvidia.yaml:" in out.out + out.err
    assert says in out.out + out.err


def test_check_does_not_warn_of_an_override_keeping_the_other_conditions(tmp_path, capsys):
    (tmp_path / "ops.yaml").write_text("schema_version: 1\nrules:\n  - id: hopper-mxfp4\n"
                                       "    when: {arch: [sm90], quant: [mxfp4]}\n    prefer: [marlin, triton_kernel]\n")
    main(["check", str(tmp_path)])
    out = capsys.readouterr()
    assert "check compares arch x format cells only" not in out.out + out.err

"""An eighth new user's trial (helper, 2026-12-04: an engine author's Python integration, an operator editing facts
and rules, inputs at the edges), fixed as kinds:

1. vLLM's expert parallelism over tp x dp written as tp beside dp (tp 2, ep 4, dp 2): the experts are whole on each
   rank (moe_tp 1), not split over half a rank; the same verdict as the launch line that reads tp as the whole group.
2. SGLang's dp that does not divide tp (with dp attention) is an input error from a deployment as from a launch line.
3. ``check``: a rule preferring a runner whose lists are open where no support row names the cell is not "never
   fires" (explain plans it, unverified).
4. A capability constraint that admits no value (min > max, an empty one_of) is an error at load.
5. ``check FILE`` on one capability file lints its facts' sources, as a folder's.
6. Under this install's engine, a runner without an adapter is refused by no_adapter, not by an engines list that
   cites TensorRT-LLM's code.
7. An operator runner whose own engines fact does not name an engine with a closed runner option is refused there
   (names.yaml), as the same name without a file is, not planned unverified.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_line import from_command
from moe_select.lint import check

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "model_configs"
SRC = '"acme/moe-kernels@0123456789ab:kernels/sm90.cu"'
MY_MOE = f"""schema_version: 3
runner: my_moe
summary: an in-house MoE kernel
source: {SRC}
engines:
  values: [sglang]
  source: {SRC}
support:
  - archs: [sm90]
    formats: [bf16, fp8_block]
    source: {SRC}
activations: {{values: [silu], source: {SRC}}}
routing: {{values: any, source: {SRC}}}
dispatch: {{formats: [standard], source: {SRC}}}
a2a: {{values: [none], source: {SRC}}}
cuda_graph: {{supported: true, source: {SRC}}}
lists:
  archs: open
  formats: open
  support: open
  activations: open
  routing: open
  dispatch: open
  a2a: open
  cuda_graph: open
  engines: open
"""


def _fp8_i192(tmp_path: Path) -> str:
    """Qwen3-30B-A3B-FP8's config with moe_intermediate_size 192 (one and a half 128-blocks)."""
    cfg = json.loads((CONFIGS / "Qwen__Qwen3-30B-A3B-FP8" / "config.json").read_text())
    cfg["moe_intermediate_size"] = 192
    d = tmp_path / "fp8_i192"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def _per_rank(r) -> set:
    """The per-rank widths the refusals name (``intermediate_per_rank = N``)."""
    import re

    return {m.group(0) for c in r.candidates for x in c.reasons for m in re.finditer(r"intermediate_per_rank = \d+", x.detail)}


def test_vllm_ep_over_tp_x_dp_keeps_whole_experts(tmp_path):
    model = _fp8_i192(tmp_path)
    # vLLM 0.28.0: from 0.29.0 vLLM refines the split blocks for its Triton experts (test_trial_2026_12_05b_kinds.py)
    both = moe_select.explain({"gpu": "H200", "engine": "vllm", "engine_version": "0.28.0", "model_config": model, "tp": 2,
                               "ep": 4, "dp": 2})
    line = from_command(f"vllm serve {model} -tp 2 -dp 2 --enable-expert-parallel", engine_version="0.28.0")
    read = line.explain(deployment={"gpu": "H200"})
    assert both.plan is None and read.plan is None, both.summary()
    assert _per_rank(both) == {"intermediate_per_rank = 192"} == _per_rank(read)
    # the experts' per-rank width never grows past the model's
    small = moe_select.explain({"gpu": "H200", "engine": "vllm", "tp": 2, "ep": 4, "dp": 2, "quant": "bf16",
                                "model": {"num_experts": 8, "top_k": 2, "hidden_size": 256, "moe_intermediate_size": 32}})
    assert not any("= 64" in d for d in _per_rank(small)), small.summary()


def test_sglang_dp_must_divide_tp_in_a_deployment_too():
    """An input error naming dp and the upstream assert, as the launch line's; a dp that divides tp plans. (Not a
    capability fact: an unstated dp, no dp attention, would leave every SGLang plan unverified at the dps it refuses.)"""
    dep = {"gpu": "H100", "engine": "sglang", "model_config": str(CONFIGS / "mistralai__Mixtral-8x7B-v0.1"),
           "tp": 4, "ep": 4, "dp": 3}
    with pytest.raises(InputError, match=r"dp: tp 4 with dp 3 .*SGLang asserts tp_size % dp_size == 0 .*"
                                         r"handle_data_parallelism\]; give a dp that divides tp"):
        moe_select.explain(dep)
    with pytest.raises(InputError, match=r"SGLang asserts tp_size % dp_size == 0"):
        from_command(f"python -m sglang.launch_server --model-path {dep['model_config']} --tp 4 --dp 3 "
                     "--enable-dp-attention").explain(deployment={"gpu": "H100"})
    assert moe_select.explain({**dep, "dp": 2}).plan is not None
    assert moe_select.explain({k: v for k, v in dep.items() if k != "dp"}).plan.evidence == "supported"


def test_check_does_not_call_a_rule_dead_that_explain_uses(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "50-ops.yaml").write_text("schema_version: 1\nrules:\n  - id: blackwell-rtx-grouped\n"
                                       "    when: {arch: [sm120], quant: [bf16], engine: [moe_select]}\n"
                                       "    prefer: [torch_grouped_mm]\n")
    findings, _ = check([rules], use_env=False)
    assert not [f for f in findings if f.severity == "error"], [str(f) for f in findings]
    r = moe_select.explain({"arch": "sm120", "engine": "moe_select", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B")},
                           rules_dirs=[rules])
    assert r.plan is not None and r.plan.runner == "torch_grouped_mm" and r.plan.evidence == "unverified"


@pytest.mark.parametrize("constraint, msg", [("{field: hidden_size, min: 4096, max: 1024", "min 4096 > max 1024"),
                                             ("{field: tp, one_of: []", "one_of is empty")])
def test_a_constraint_that_admits_nothing_is_an_error(tmp_path, constraint, msg):
    d = tmp_path / "ops"
    d.mkdir()
    (d / "my_moe.yaml").write_text(MY_MOE + f"constraints:\n  - {constraint}, source: {SRC}}}\n")
    with pytest.raises(InputError, match=msg) as info:
        check([d], use_env=False)
    assert "my_moe.yaml:28: constraints[0]" in str(info.value)


def test_check_of_one_capability_file_lints_its_sources(tmp_path):
    f = tmp_path / "my_moe.yaml"
    f.write_text(MY_MOE.replace("    source: " + SRC, '    source: "trust me"', 1))
    alone, _ = check([f], use_env=False)
    folder, _ = check([tmp_path], use_env=False)
    want = f"{f}:9: fact without a checkable source: 'trust me'"
    assert any(str(x).startswith(want) and x.severity == "error" for x in alone), [str(x) for x in alone]
    assert any(str(x).startswith(want) for x in folder)


def test_this_install_refuses_a_runner_without_an_adapter_by_no_adapter_only():
    r = moe_select.explain({"engine": "moe_select", "arch": "cpu", "quant": "bf16", "tp": 1, "ep": 1,
                            "model": {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32}})
    for name in ("aiter", "flashinfer_trtllm", "flashinfer_cutedsl"):
        c = next(c for c in r.candidates if c.backend == name)
        codes = {x.code for x in c.reasons}
        assert "no_adapter" in codes and "engine_unsupported" not in codes, (name, [x.detail for x in c.reasons])
        assert not any("TensorRT-LLM" in x.detail for x in c.reasons)


def test_an_operator_runner_is_refused_under_an_engine_that_cannot_name_it(tmp_path):
    ops = tmp_path / "op"
    ops.mkdir()
    (ops / "my_moe.yaml").write_text(MY_MOE)
    dep = {"gpu": "H200", "model_config": str(CONFIGS / "Qwen__Qwen3-30B-A3B"), "runner": "my_moe"}
    for engine in ("trtllm", "vllm"):
        r = moe_select.explain({**dep, "engine": engine}, backends_dirs=[ops])
        assert r.plan is None, r.summary()
        [why] = [x for c in r.candidates if c.backend == "my_moe" for x in c.reasons if x.code == "engine_unsupported"]
        assert "names.yaml" in why.source and f"{engine}'s runner option takes no such value" in why.detail
    # the engine its own file names: the operator's fact stands against the engine's closed option as an unverified
    # plan (the ninth trial: it was supported, and --emit then refused it): strict refuses it, the unknown says how
    ok = moe_select.explain({**dep, "engine": "sglang"}, backends_dirs=[ops])
    assert ok.plan is not None and ok.plan.runner == "my_moe" and ok.evidence == "unverified", ok.summary()
    [u] = [x for c in ok.candidates if c.backend == "my_moe" for x in c.unknowns if x.code == "engine_unsupported"]
    assert "says sglang ships my_moe" in u.detail and "--emit cannot write it" in u.detail and "engines.options" in u.settle
    strict = moe_select.explain({**dep, "engine": "sglang", "strict": True}, backends_dirs=[ops])
    assert strict.plan is None, strict.summary()
    shutil.rmtree(ops)


def test_smaller_messages(tmp_path, monkeypatch, capsys):
    """A deployment's note is printed once (not again among the plan's); matrix says it does not read the operator
    variables; a rule's bare runner name where a list goes says to write a list."""
    from moe_select.cli import main

    cfg = json.loads((CONFIGS / "Qwen__Qwen3-30B-A3B" / "config.json").read_text())
    cfg["hidden_act"] = "foo_act"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    text = moe_select.explain({"gpu": "H200", "model_config": str(tmp_path / "m")}).render_text()
    assert text.count("activation foo_act is declared in no vocabulary") == 1, text
    monkeypatch.setenv("MOE_SELECT_RULES", str(tmp_path))
    main(["matrix", "--json"])
    assert "MOE_SELECT_RULES is not read" in capsys.readouterr().err
    monkeypatch.delenv("MOE_SELECT_RULES")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text("schema_version: 1\nrules:\n  - id: x\n    when: {arch: [sm90]}\n    prefer: triton\n")
    with pytest.raises(InputError, match=r"r.yaml:5: rules\[0\].prefer: prefer takes a list of runner names or measured: "
                                         r"write \[triton\]"):
        check([rules], use_env=False)


def test_invalid_input_with_json_prints_the_issues_as_json(tmp_path, capsys):
    """Exit 2 with --json: stdout holds the issues (file, line, field, message), not nothing."""
    from moe_select.cli import main

    f = tmp_path / "dp3.yaml"
    f.write_text(f"gpu: H100\nengine: sglang\nmodel_config: {CONFIGS / 'mistralai__Mixtral-8x7B-v0.1'}\ntp: 4\nep: 4\ndp: 3\n")
    assert main(["explain", "--json", "-d", str(f)]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "invalid_input"
    [issue] = out["issues"]
    assert issue["file"] == str(f) and issue["line"] == 6 and issue["field"] == "dp" and "tp_size % dp_size" in issue["message"]

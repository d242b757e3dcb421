"""Kinds from a fifth new user's trial (2026-12-04): each a class of defect, tested by behaviour."""
from __future__ import annotations

import pytest

import moe_select
from moe_select.errors import InputError

DEP = dict(arch="auto", quant="bf16", engine="moe_select", runner="torch_grouped_mm",
           model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu",
                      routing="renormalize"))


@pytest.mark.parametrize("strict", ["no", "false", 1, 0.0])
def test_resolve_takes_strict_as_a_bool_only(strict):
    """``strict="no"`` read as true (a non-empty string) and refused the plan as unverified: nothing is coerced, so a
    non-bool is an InputError naming the argument, before anything is built."""
    p = moe_select.plan(DEP)
    with pytest.raises(InputError, match=r"strict must be True, False or None") as e:
        moe_select.resolve(p, strict=strict)
    assert e.value.issues[0].field == "strict"


@pytest.mark.parametrize("bad, where", [([{"a": 1}], r"measurements\[0\]"), (3, "measurements"), ({"a": 1}, "measurements")])
def test_explain_measurements_of_the_wrong_type_are_an_input_error(bad, where):
    """A dict in ``measurements`` raised a bare TypeError from os.fspath: now an InputError naming the entry."""
    with pytest.raises(InputError, match=where):
        moe_select.explain(DEP, measurements=bad)


def _cli(args, capsys):
    from moe_select.cli import main

    rc = main(args)
    return rc, capsys.readouterr().out


def test_engine_config_files_read_yaml_1_1_booleans_as_the_engines_do(tmp_path, capsys):
    """vLLM's ``--config`` and TensorRT-LLM's ``--extra_llm_api_options`` are read by the engines with
    ``yaml.safe_load`` (YAML 1.1: ``yes``/``on`` are true): ``enable_attention_dp: yes`` was refused ('takes true or
    false, got yes') and ``enable-expert-parallel: yes`` in a vLLM config was taken as the model path."""
    trt = tmp_path / "ex.yaml"
    trt.write_text("enable_attention_dp: yes\n")
    rc, out = _cli(["explain", "--gpu", "B200", "--from-command", f"trtllm-serve examples/model_configs/deepseek-ai__DeepSeek-V3 "
                    f"--tp_size 8 --extra_llm_api_options {trt}"], capsys)
    assert rc == 0 and "enable_attention_dp: true: dp_attention" in out, out[:3000]
    v = tmp_path / "v.yaml"
    v.write_text("tensor-parallel-size: 4\nenable-expert-parallel: on\n")
    rc, out = _cli(["explain", "--gpu", "H100", "--from-command", f"vllm serve examples/model_configs/Qwen__Qwen3-30B-A3B "
                    f"--config {v}"], capsys)
    assert rc == 0, out[:2000]
    ep_line = next(ln for ln in out.splitlines() if ln.strip().startswith("ep "))
    assert " 4 " in ep_line, ep_line


def test_a_runner_name_no_closed_engine_option_takes_is_refused_under_that_engine():
    """``--runner tritn --engine sglang`` planned tritn (unverified) while a launch line with the same value is an input
    error: SGLang's runner choices are closed (names.yaml choices). Now refused (engine_unsupported, citing the choices
    row, with the did-you-mean as fix); a name the engine takes but no capability file describes stays unverified."""
    base = dict(arch="sm90", quant="bf16", engine="sglang",
                model=dict(num_experts=8, top_k=2, hidden_size=64, moe_intermediate_size=32, activation="silu"))
    r = moe_select.explain({**base, "runner": "tritn"})
    assert r.plan is None
    c = next(c for c in r.candidates if c.backend == "tritn")
    reason = next(x for x in c.reasons if x.code == "engine_unsupported")
    assert reason.source.startswith("backends/engines/names.yaml:") and reason.fix == "runner: triton", reason
    r = moe_select.explain({**base, "runner": "megamoe"})          # in SGLang's choices, no capability file here
    assert r.plan is not None and r.plan.runner == "megamoe" and r.plan.evidence == "unverified"
    for engine in ("vllm", "trtllm"):
        r = moe_select.explain({**base, "engine": engine, "runner": "tritn"})
        assert r.plan is None, engine

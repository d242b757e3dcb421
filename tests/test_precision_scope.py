"""An activation-precision request read by some runners only (the seventh new user's trial, item 5): SGLang's
``--flashinfer-mxfp4-moe-precision`` is read by ``flashinfer_mxfp4`` only (backends/engines/sglang.yaml, its
``runners``). With the runner left to the engine, the line asks that precision of flashinfer_mxfp4
(``quant_config.activation_precision_runners``); a plan for another runner runs that runner's own precision, says
so in a note, and ``--emit`` writes no precision flag for it (it used to be planned as an unverified fp8 request of
triton_kernel, and ``--emit`` refused it).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError
from moe_select.launch_emit import emit
from moe_select.launch_line import from_command

ROOT = Path(__file__).resolve().parents[1]
GPT_OSS = ROOT / "examples" / "model_configs" / "openai__gpt-oss-120b"
LINE = f"python -m sglang.launch_server --model-path {GPT_OSS} --flashinfer-mxfp4-moe-precision fp8"
ENV = {"gpu": "H200", "engine_version": "0.5.19", "packages": {"flashinfer-python": "0.6.18"}}


def _explain(line: str, **over):
    launch = from_command(line)
    return launch, launch.explain(deployment={**ENV, **over})


def test_runner_auto_scopes_the_request_to_the_runners_that_read_it():
    launch, r = _explain(LINE)
    assert r.deployment.quant_params["activation_precision"] == "fp8_token"
    assert r.deployment.quant_params["activation_precision_runners"] == ["flashinfer_mxfp4"]
    assert r.plan is not None and r.plan.runner == "triton_kernel", r.summary()
    assert r.plan.evidence == "supported" and not r.plan.unknowns, r.summary()
    assert r.plan.activation_precision == "bf16"
    assert any("asked of flashinfer_mxfp4 only" in n and "triton_kernel runs its own: bf16" in n
               for n in r.plan.notes), r.plan.notes
    script = emit(r.plan, "sglang", launch=launch).script()
    assert "--flashinfer-mxfp4-moe-precision" not in script
    assert "no precision flag written" in script


def test_the_runner_that_reads_it_still_gets_it():
    launch, r = _explain(LINE + " --moe-runner-backend flashinfer_mxfp4")
    assert r.plan is not None and r.plan.runner == "flashinfer_mxfp4", r.summary()
    assert r.plan.activation_precision == "fp8_token"
    script = emit(r.plan, "sglang", launch=launch).script()
    assert "--flashinfer-mxfp4-moe-precision fp8" in script
    # the same request before SGLang 0.5.19 (which takes default and bf16 only): refused for that runner, on its row
    _, old = _explain(LINE + " --moe-runner-backend flashinfer_mxfp4", engine_version="0.5.18")
    assert old.plan is None or old.plan.evidence != "supported", old.summary()


def test_an_unscoped_request_still_binds_every_runner():
    """A deployment file's quant_config.activation_precision without runners is asked of every runner, as before:
    triton_kernel has no fp8 row, so it is not planned as supported for it."""
    r = moe_select.explain({**ENV, "engine": "sglang", "model_config": str(GPT_OSS), "runner": "triton_kernel",
                            "quant_config": {"activation_precision": "fp8_token"}})
    assert r.plan is None or r.plan.evidence != "supported", r.summary()
    scoped = moe_select.explain({**ENV, "engine": "sglang", "model_config": str(GPT_OSS), "runner": "triton_kernel",
                                 "quant_config": {"activation_precision": "fp8_token",
                                                  "activation_precision_runners": ["flashinfer_mxfp4"]}})
    assert scoped.plan is not None and scoped.plan.evidence == "supported", scoped.summary()
    assert scoped.plan.activation_precision == "bf16"


@pytest.mark.parametrize("qc, match", [({"activation_precision_runners": ["flashinfer_mxfp4"]}, "give activation_precision"),
                                       ({"activation_precision": "fp8_token", "activation_precision_runners": ["Bad-Name"]},
                                        "not a runner name")])
def test_bad_scopes_are_input_errors(qc, match):
    with pytest.raises(InputError, match=match):
        moe_select.explain({**ENV, "engine": "sglang", "model_config": str(GPT_OSS), "quant_config": qc})

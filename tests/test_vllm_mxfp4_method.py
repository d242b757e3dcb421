"""vLLM's MXFP4 MoE method (Mxfp4Config, gpt-oss's serialization): which runners it builds, by release and by the MoE
activation asked (backends/common.yaml ``methods``, the map_mxfp4_backend rows).

Read in the vLLM 0.29.0 .. 0.34.0 wheels (oracle/mxfp4.py): map_mxfp4_backend raises ValueError for a --moe-backend it
has no key for (cutlass among them in every release); from 0.32.0 the auto choice for gpt-oss
(_get_priority_backends_for_gpt_oss) lists CUTLASS_MXFP4_MXFP4, whose activation key is kMxfp4Dynamic, so it is
reached with MXFP4 activations asked (quantization_config moe.activation) and the option left at auto.
"""
from __future__ import annotations

from typing import Any

import moe_select

from conftest import CONFIGS

GPT_OSS = str(CONFIGS / "openai__gpt-oss-20b")


def _explain(vllm: str, precision: str | None) -> Any:
    d: dict[str, Any] = dict(gpu="B200", engine="vllm", model_config=GPT_OSS, tp=1, ep=1, a2a="none", runner="cutlass",
                             packages={"vllm": vllm})
    if precision is not None:
        d["quant_config"] = {"activation_precision": precision}
    return moe_select.explain(d)


def _method_refusals(report: Any) -> list[Any]:
    return [r for c in report.candidates if c.backend == "cutlass" for r in c.reasons
            if r.code == "quant_unsupported" and r.source.startswith("backends/common.yaml")]


def test_cutlass_with_mxfp4_activations_is_vllms_auto_choice_from_0_32():
    """MXFP4 activations asked, vLLM 0.33: the method builds cutlass (CUTLASS_MXFP4_MXFP4) with the option at auto, so
    no method row refuses it and the plan says the launch leaves --moe-backend out."""
    report = _explain("0.33.0", "mxfp4")
    assert _method_refusals(report) == []
    assert report.plan is not None and report.plan.runner == "cutlass", report.summary()
    why = report.plan.runner_option_auto.get("vllm", "")
    assert "CUTLASS_MXFP4_MXFP4" in why and "backends/common.yaml:" in why


def test_cutlass_is_refused_without_mxfp4_activations_or_before_0_32():
    """No MXFP4 activation asked (vLLM 0.33), or asked before 0.32.0 (no CUTLASS_MXFP4_MXFP4 in the gpt-oss list): the
    map refuses --moe-backend cutlass, each by its own row."""
    unasked = _method_refusals(_explain("0.33.0", None))
    old = _method_refusals(_explain("0.31.0", "mxfp4"))
    assert len(unasked) == 1 and len(old) == 1
    assert unasked[0].source != old[0].source
    assert "is not supported for MXFP4 MoE" in unasked[0].detail and "activation_precision not in [mxfp4]" in unasked[0].detail
    # another precision asked is not MXFP4: the row that refuses holds there too
    assert [r.source for r in _method_refusals(_explain("0.33.0", "mxfp8"))] == [unasked[0].source]


def test_activation_precision_not_matches_a_deployment_that_asks_none():
    """``activation_precision_not`` holds unless one of its precisions is asked; asking none runs the runner's default,
    which is none of them (unlike ``activation_precision``, which holds only when asked)."""
    from moe_select.conditions import When, facts_of

    base: dict[str, Any] = dict(arch="sm100", quant="mxfp4", engine="vllm", a2a="none", activation="swiglu_oai",
                                routing="softmax_topk", cuda_graph=True, tp=1, ep=1, hidden_size=2880,
                                moe_intermediate_size=2880, num_experts=32, top_k=4)
    not_mxfp4, mxfp4 = When(activation_precision_not=["mxfp4"]), When(activation_precision=["mxfp4"])
    for asked, want in ((None, (True, False)), ("mxfp4", (False, True)), ("bf16", (True, False))):
        f = facts_of(**base, activation_precision=asked)
        assert (not_mxfp4.matches(f), mxfp4.matches(f)) == want, asked
    assert not_mxfp4.describe() == "activation_precision not in [mxfp4]"


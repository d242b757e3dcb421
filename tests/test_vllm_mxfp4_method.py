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



def _refused(vllm: str, precision: str | None, runner: str, gpu: str = "B200", **quant: Any) -> list[str]:
    d: dict[str, Any] = dict(gpu=gpu, engine="vllm", model_config=GPT_OSS, tp=1, ep=1, a2a="none", runner=runner,
                             packages={"vllm": vllm})
    if precision is not None:
        d["quant_config"] = {"activation_precision": precision, **quant}
    r = moe_select.explain(d)
    return [x.source for c in r.candidates if c.backend == runner for x in c.reasons
            if x.code == "quant_unsupported" and x.source.startswith("backends/common.yaml")]


def test_a_named_backend_keeps_only_its_variants_of_the_asked_activation():
    """MXFP4 activations asked of a named --moe-backend: before 0.32.0 only the variants of that activation are kept
    (aiter's AITER_MXFP4_MXFP4; marlin raises 'does not support activation'); from 0.32.0 the BF16 variants follow as a
    fallback (marlin runs), and deep_gemm, whose only variant takes FP8 activations, still raises."""
    assert _refused("0.31.0", "mxfp4", "marlin") and not _refused("0.33.0", "mxfp4", "marlin")
    assert not _refused("0.31.0", "mxfp4", "aiter", gpu="MI355X")
    assert _refused("0.33.0", "mxfp4", "deep_gemm") and not _refused("0.33.0", None, "deep_gemm")


def test_a_precision_asked_of_other_runners_is_not_asked_of_this_one():
    """``activation_precision_runners`` scopes the request: asked of flashinfer_cutlass only, cutlass runs under the
    method as if none were asked, so the map refuses --moe-backend cutlass (a review: neither row held, cutlass passed)."""
    scoped = _refused("0.33.0", "mxfp4", "cutlass", activation_precision_runners=["flashinfer_cutlass"])
    assert scoped == _refused("0.33.0", None, "cutlass") and scoped


def test_vllms_auto_choice_with_mxfp4_activations_is_cutlass_from_0_32():
    """The engine prediction: _filter_by_activation(_get_priority_backends_for_gpt_oss(), kMxfp4Dynamic) puts
    AITER_MXFP4_MXFP4 (ROCm only), CUTLASS_MXFP4_MXFP4 and EMULATION before the BF16 entries from 0.32.0."""
    d = dict(gpu="B200", engine="vllm", model_config=GPT_OSS, tp=1, ep=1, a2a="none")
    asked = moe_select.explain({**d, "packages": {"vllm": "0.33.0"}, "quant_config": {"activation_precision": "mxfp4"}})
    plain = moe_select.explain({**d, "packages": {"vllm": "0.33.0"}})
    pick = {c.engine: (c.runner, c.engine_name) for c in asked.engine_choices}
    assert pick["vllm"] == ("cutlass", "CUTLASS_MXFP4_MXFP4")
    assert {c.engine: c.engine_name for c in plain.engine_choices}["vllm"] == "FLASHINFER_TRTLLM_MXFP4_BF16"


def test_vllm_launch_leaves_the_runner_option_out_where_the_method_builds_it_at_auto():
    """A plan under runner_option_auto for vLLM (the MXFP4 method's auto_only cutlass) is written without
    --moe-backend, with the comment SGLang's AWQ plans get."""
    from moe_select.launch_emit import emit

    plan = _explain("0.33.0", "mxfp4").plan
    assert plan is not None and "vllm" in plan.runner_option_auto
    # vLLM has no flag for the MoE activation (quantization_config moe.activation is not written): the precision is
    # dropped from the copy so the line can be written at all
    qp = {k: v for k, v in plan.deployment.quant_params.items() if k != "activation_precision"}
    copy = plan.model_copy(update={"deployment": plan.deployment.model_copy(update={"quant_params": qp})})
    out = emit(copy, "vllm")
    assert "--moe-backend" not in out.argv
    assert any("no runner option written" in c and "CUTLASS_MXFP4_MXFP4" in c for c in out.comments)


def test_negated_keys_in_unsatisfiable_and_the_rule_lint():
    """``*_not`` keys: an empty list excludes nothing (it can match); a positive list inside the excluded values can never
    match; and one rule covers another only where it excludes no more (the lint's never-fires check)."""
    from moe_select.conditions import When
    from moe_select.lint import _covers

    assert When(activation_precision_not=[]).unsatisfiable() is None
    assert "excludes" in (When(activation_precision=["mxfp4"], activation_precision_not=["mxfp4", "mxfp8"]).unsatisfiable() or "")
    assert When(activation_precision=["mxfp8"], activation_precision_not=["mxfp4"]).unsatisfiable() is None
    wide, narrow = When(activation_precision_not=["mxfp4", "mxfp8"]), When(activation_precision_not=["mxfp4"])
    assert _covers(narrow, wide) and not _covers(wide, narrow)

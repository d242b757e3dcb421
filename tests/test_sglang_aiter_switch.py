"""SGLang's AITER switch (SGLANG_USE_AITER, the deployment's vendor_library) and its MoE runners on ROCm (2026-12-03;
read in the sglang PyPI wheels 0.5.10, 0.5.11 and 0.5.23):

- SGLang builds its AITER MoE only under the switch: without it an unquantized layer runs Triton whatever the runner
  flag says and an FP8 layer with ``--moe-runner-backend aiter`` raises NotImplementedError at the first forward
  (backends/aiter.yaml, a negative row with code engine_unsupported, its why and its fix);
- before 0.5.11 (no ``aiter`` value yet) an FP8 layer calls AITER under the switch whatever the runner, so triton does
  not run there (backends/triton.yaml), and the engine prediction says AITER (resolution.yaml hooks);
- ``plan --emit sglang`` writes the switch the plan needs, and for a release before 0.5.11 writes aiter as ``auto``
  (names.yaml choices ``earlier``).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import moe_select
from moe_select.capability import Support
from moe_select.engine_choice import Hook
from moe_select.engine_tables import CITATION, Choices
from moe_select.launch_emit import EmitError, emit
from moe_select.launch_line import from_command

CFG = Path(__file__).resolve().parent.parent / "examples" / "model_configs"
FP8 = str(CFG / "Qwen__Qwen3-30B-A3B-FP8")
BF16 = str(CFG / "Qwen__Qwen3-30B-A3B")


def _explain(**dep):
    return moe_select.explain({"gpu": "MI300X", "engine": "sglang", "tp": 1, "model_config": FP8, **dep})


def _cand(r, name):
    return next(c for c in r.candidates if c.backend == name)


@pytest.mark.parametrize("model", [FP8, BF16])
def test_aiter_without_the_switch_is_refused_with_why_and_fix(model):
    r = _explain(runner="aiter", vendor_library=False, model_config=model)
    assert r.plan is None
    reason = next(x for x in _cand(r, "aiter").reasons if x.code == "engine_unsupported")
    assert reason.source.startswith("backends/aiter.yaml:")
    assert "only under SGLANG_USE_AITER" in reason.detail and reason.fix.startswith("SGLANG_USE_AITER=1")
    assert "Fix: SGLANG_USE_AITER=1 (vendor_library: true)" in reason.render()


def test_aiter_with_the_switch_is_supported_and_unstated_is_unverified():
    on = _explain(runner="aiter", vendor_library=True)
    assert on.plan is not None and on.plan.runner == "aiter" and on.plan.evidence == "supported"
    unstated = _explain(runner="aiter")
    assert unstated.plan is not None and unstated.plan.evidence == "unverified"
    u = next(x for x in unstated.plan.unknowns if x.refuses_at)
    assert u.refuses_at == {"vendor_library": False} and "SGLANG_USE_AITER" in u.settle
    strict = _explain(runner="aiter", strict=True)
    assert strict.plan is None


def test_the_switch_off_plans_triton():
    r = _explain(vendor_library=False)
    assert r.plan is not None and r.plan.runner == "triton"


# ------------------------------------------------------------------ vLLM's switch: VLLM_ROCM_USE_AITER (a new user's trial)
MIXTRAL = str(CFG / "mistralai__Mixtral-8x7B-v0.1")


def test_vllm_aiter_needs_its_switch():
    """vLLM's AiterExperts support the device only when VLLM_ROCM_USE_AITER=1 (default False): the trial saw aiter
    predicted, planned and written for a vLLM launch without it."""
    off = _explain(engine="vllm", runner="aiter", vendor_library=False)
    reason = next(x for x in _cand(off, "aiter").reasons if x.code == "engine_unsupported")
    assert "VLLM_ROCM_USE_AITER=1" in reason.detail and reason.fix.startswith("VLLM_ROCM_USE_AITER=1")
    assert off.plan is None
    on = _explain(engine="vllm", runner="aiter", vendor_library=True)
    assert on.plan is not None and on.plan.evidence == "supported"


@pytest.mark.parametrize("env, runner, plan", [("", "triton", "triton"), ("VLLM_ROCM_USE_AITER=1 ", "aiter", "aiter"),
                                               ("VLLM_ROCM_USE_AITER=0 ", "triton", "triton"),
                                               ("VLLM_ROCM_USE_AITER=yes ", "triton", "triton")])
def test_vllm_launch_prediction_and_plan_follow_the_switch(env, runner, plan):
    launch = from_command(f"{env}vllm serve M --tensor-parallel-size 2", model_config=MIXTRAL)
    assert launch.deployment.get("vendor_library") == ({"": None, "VLLM_ROCM_USE_AITER=1 ": True}.get(env, False))
    assert not [f for f in launch.findings if f.kind == "engine_error"]  # vLLM reads any value: 'yes' is off
    r = moe_select.explain(dict(launch.deployment, gpu="MI300X"))
    assert r.plan is not None and r.plan.runner == plan
    ch = next(c for c in r.engine_choices if c.engine == "vllm")
    assert ch.runner == runner


def test_vllm_emit_writes_its_switch_for_an_aiter_plan():
    plan = _explain(engine="vllm", runner="aiter", model_config=MIXTRAL, tp=2).plan
    assert plan is not None and plan.evidence == "unverified"
    out = emit(plan, "vllm")
    assert out.env == {"VLLM_ROCM_USE_AITER": "1"} and "--moe-backend aiter" in " ".join(out.argv)


def test_triton_fp8_before_0_5_11_under_the_switch_runs_aiter_so_it_is_refused():
    old = _explain(runner="triton", vendor_library=True, engine_version="0.5.10")
    assert old.plan is None
    reason = next(x for x in _cand(old, "triton").reasons if x.code == "engine_unsupported")
    assert "before 0.5.11" in reason.detail and reason.fix.startswith("SGLANG_USE_AITER=0")
    assert _explain(runner="triton", vendor_library=False, engine_version="0.5.10").plan is not None
    # bf16 is not concerned (AITER only for auto there)
    assert _explain(runner="triton", vendor_library=True, engine_version="0.5.10", model_config=BF16).plan is not None


def _sglang_choice(report):
    return next(c for c in report.engine_choices if c.engine == "sglang")


def test_the_prediction_follows_the_switch_and_the_release():
    line = "python3 -m sglang.launch_server --model-path M --tp 1"
    for env, version, want, hook in [("SGLANG_USE_AITER=1", "0.5.12", "aiter", "sglang-rocm-auto-aiter"),
                                     ("SGLANG_USE_AITER=0", "0.5.12", "triton", "sglang-rocm-auto-triton"),
                                     ("SGLANG_USE_AITER=1", "0.5.10", "aiter", "sglang-rocm-auto-aiter")]:
        launch = from_command(f"{env} {line}", model_config=FP8, engine_version=version)
        ch = _sglang_choice(moe_select.explain(dict(launch.deployment, gpu="MI300X")))
        assert ch.runner == want and ch.how == f"set by {hook}", (env, version, ch.how)
    # asked for triton at 0.5.10 under the switch: the engine silently runs AITER
    launch = from_command(f"SGLANG_USE_AITER=1 {line} --moe-runner-backend triton", model_config=FP8, engine_version="0.5.10")
    ch = _sglang_choice(moe_select.explain(dict(launch.deployment, gpu="MI300X")))
    assert ch.runner == "aiter" and [o.explicit for o in ch.overrides if o.field == "runner"] == [True]
    # the same at 0.5.12: no hook (the runner flag is honoured)
    launch = from_command(f"SGLANG_USE_AITER=1 {line} --moe-runner-backend triton", model_config=FP8, engine_version="0.5.12")
    assert _sglang_choice(moe_select.explain(dict(launch.deployment, gpu="MI300X"))).runner == "triton"


def test_emit_writes_the_switch_the_plan_needs():
    """Written for SGLang 0.5.19 (the release its facts were checked up to then, pinned since the 2026-12-05 release
    delta raised checked_up_to to 0.5.23): with the switch unstated, triton on block FP8 is refused under it
    (backends/triton.yaml, 0.5.11 .. 0.5.22) and aiter is planned. At 0.5.23 Fp8MoEMethod shuffles for AITER only when
    the runner is aiter (runner_is_aiter), so triton is supported either way: planned, and written with no switch."""
    aiter = _explain(engine_version="0.5.19").plan
    assert aiter.runner == "aiter"
    out = emit(aiter, "sglang", engine_version="0.5.23")
    assert out.env == {"SGLANG_USE_AITER": "1"} and "--moe-runner-backend aiter" in " ".join(out.argv)
    old = emit(aiter, "sglang", engine_version="0.5.10")
    assert old.env == {"SGLANG_USE_AITER": "1"} and "--moe-runner-backend auto" in " ".join(old.argv)
    off = _explain(vendor_library=False).plan
    assert emit(off, "sglang", engine_version="0.5.23").env == {"SGLANG_USE_AITER": "0"}
    # unstated, triton on block FP8 at 0.5.12 is refused with the switch on (backends/triton.yaml): written off
    tri = _explain(runner="triton", engine_version="0.5.12").plan
    assert tri is not None and tri.evidence == "unverified"
    out = emit(tri, "sglang", engine_version="0.5.12")
    assert out.env == {"SGLANG_USE_AITER": "0"} and any("SGLANG_USE_AITER=0" in c for c in out.comments)
    # an NVIDIA plan states nothing about it
    cuda = moe_select.explain({"gpu": "H200", "engine": "sglang", "model_config": FP8}).plan
    assert "SGLANG_USE_AITER" not in emit(cuda, "sglang").env
    # 0.5.23: triton runs right whatever the switch says, so the plan needs none
    new = _explain(engine_version="0.5.23").plan
    assert new.runner == "triton" and new.evidence == "supported"
    out = emit(new, "sglang", engine_version="0.5.23")
    assert "SGLANG_USE_AITER" not in out.env and "--moe-runner-backend triton" in " ".join(out.argv)


def test_the_emitted_launch_reads_back_to_the_plan():
    """The aiter plan of SGLang 0.5.19 (pinned: written when 0.5.19 was the newest checked release; unpinned, 0.5.23
    plans triton: test_emit_writes_the_switch_the_plan_needs) emitted for 0.5.10 reads back to aiter, supported."""
    plan = _explain(engine_version="0.5.19").plan
    out = emit(plan, "sglang", engine_version="0.5.10")
    again = from_command(" ".join([*(f"{k}={v}" for k, v in out.env.items()), *out.argv]), engine_version="0.5.10",
                         model_config=FP8)
    r = moe_select.explain(dict(again.deployment, gpu="MI300X"))
    assert r.plan is not None and r.plan.runner == "aiter" and r.plan.evidence == "supported"
    assert _sglang_choice(r).runner == "aiter"


# ------------------------------------------------------------------------------------------- the models' checks
def test_why_and_fix_belong_to_negative_rows():
    with pytest.raises(ValidationError, match="why belongs to a negative row"):
        Support(archs=["gfx942"], formats=["bf16"], why="x", source="a/b#1")
    with pytest.raises(ValidationError, match="fix belongs to a negative row"):
        Support(archs=["gfx942"], formats=["bf16"], fix="x", source="a/b#1")
    row = Support(archs=["gfx942"], formats=["bf16"], supported=False, code="engine_unsupported", why="w", fix="f",
                  source="a/b#1")
    assert (row.code, row.why, row.fix) == ("engine_unsupported", "w", "f")


def test_earlier_needs_since_and_a_source():
    base = dict(engine="sglang", of="runner", closed=True, source="a/b#1", since={"aiter": "0.5.11"})
    with pytest.raises(ValidationError, match="earlier names 'marlin', which has no since"):
        Choices(**base, earlier={"marlin": "auto"}, earlier_source="a/b#2")
    with pytest.raises(ValidationError, match="earlier needs earlier_source"):
        Choices(**base, earlier={"aiter": "auto"})


def test_hook_requires_is_a_specifier_and_citations_take_release_tags():
    with pytest.raises(ValidationError):
        Hook(id="x", engine="sglang", sets={"runner": "aiter"}, requires={"sglang": "0.5.x"}, source="a/b#1")
    assert CITATION.match("sgl-project/sglang@v0.5.10.post1:python/sglang/srt/layers/quantization/fp8.py:Fp8MoEMethod.apply")
    assert CITATION.match("sgl-project/sglang@0003215cf146:python/sglang/srt/environ.py")
    assert not CITATION.match("sgl-project/sglang@main:python/x.py")


def test_emit_still_refuses_a_value_with_no_earlier_way():
    # a GPTQ layer (SGLang's AWQ scheme wants the option at auto, so an AWQ plan writes none: test_trial_2026_12_05b)
    plan = moe_select.explain({"gpu": "H100", "engine": "sglang", "runner": "marlin", "quant": "int4_w4a16",
                               "quant_config": {"group_size": 128, "layout": "gptq"},
                               "model": {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
                                         "activation": "silu", "routing": "renormalize"}}).plan
    with pytest.raises(EmitError, match="marlin first shipped in sglang 0.5.12"):
        emit(plan, "sglang", engine_version="0.5.11", model="M")

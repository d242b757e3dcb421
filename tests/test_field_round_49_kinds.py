"""Field round 49 of issue 21 (tests/cases/field_round_49.yaml), the kind fixed (backends/flashinfer_mxfp4.yaml
constraints), tested on deployments other than the round's case; read in the SGLang PyPI wheels 0.5.11 .. 0.5.23.

SGLang sends DeepSeek-V4's FP4 experts under --moe-runner-backend flashinfer_mxfp4 to Mxfp4FlashinferCutlassMoEMethod on
SM90 (from 0.5.12) and SM120 / SM121 (from 0.5.16), whose create_weights raises ValueError unless hidden_size and the per-rank
intermediate are multiples of 128; SM100/SM103 pad instead.
"""
from __future__ import annotations

import pytest

import moe_select
from report_helpers import report_codes

V4_PRO = {"num_experts": 384, "top_k": 6, "hidden_size": 7168, "moe_intermediate_size": 3072, "activation": "silu_clamped",
          "swiglu_limit": 10.0, "routing": "custom", "num_shared_experts": 1, "architecture": "DeepseekV4ForCausalLM"}
DEP = {"engine": "sglang", "quant": "mxfp4", "model": V4_PRO, "ep": 1, "a2a": "none", "runner": "flashinfer_mxfp4"}


def _unaligned(report) -> bool:
    return any(r.code == "shape_unaligned" and "Mxfp4FlashinferCutlassMoEMethod" in r.detail for r in report.reasons)


@pytest.mark.parametrize("gpu, version, tp, refused", [
    ("H100", "0.5.23", 16, True),    # 192 per rank
    ("H100", "0.5.15", 8, False),    # 384 per rank
    ("H100", "0.5.11", 16, False),   # no such method before 0.5.12
    ("RTX PRO 6000", "0.5.16", 16, True),   # SM120 from 0.5.16
    ("RTX PRO 6000", "0.5.15", 16, False),  # not yet routed there
    ("GB10", "0.5.23", 16, True),           # SM121: is_sm120_supported takes any 12.x
    ("B200", "0.5.23", 16, False),   # SM100 pads
])
def test_sm90_cutlass_mxfp4_needs_128_per_rank(gpu, version, tp, refused):
    r = moe_select.explain({**DEP, "gpu": gpu, "engine_version": version, "tp": tp})
    assert _unaligned(r) is refused, report_codes(r)


def test_other_architectures_and_runners_are_not_refused_by_it():
    r = moe_select.explain({**DEP, "gpu": "H100", "engine_version": "0.5.23", "tp": 16, "runner": "marlin"})
    assert not _unaligned(r), report_codes(r)
    gptoss = {**V4_PRO, "architecture": "GptOssForCausalLM", "activation": "swiglu_oai", "swiglu_limit": 7.0,
              "routing": "renormalize", "num_shared_experts": 0}
    r = moe_select.explain({**DEP, "gpu": "H100", "engine_version": "0.5.23", "tp": 16, "model": gptoss})
    assert not _unaligned(r), report_codes(r)


# --- vllm-project/vllm#43979: --moe-backend emulation is our triton on MXFP4 / NVFP4; gpt-oss's Quark emulation buffer
GPTOSS_120B = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "model_configs" / "openai__gpt-oss-120b")
QUARK_GPTOSS = {"gpu": "MI300X", "engine": "vllm", "quant": "mxfp4",
                "quant_config": {"layout": "quark", "activation_precision": "fp8_tensor"}, "runner": "triton",
                "model": {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
                          "activation": "swiglu_oai", "swiglu_limit": 7.0, "routing": "renormalize",
                          "architecture": "GptOssForCausalLM"}}


def test_vllm_emulation_reads_as_triton_on_mxfp4_only():
    from moe_select.launch_line import from_command

    line = "vllm serve x -tp 4 --moe-backend emulation"
    assert from_command(line, model_config=GPTOSS_120B, engine_version="0.25.0").deployment["runner"] == "triton"
    fp8 = str(__import__("pathlib").Path(GPTOSS_120B).parent / "Qwen__Qwen3-30B-A3B-FP8")
    assert from_command(line, model_config=fp8, engine_version="0.25.0").deployment["runner"] == "emulation"


def test_a_triton_plan_on_vllm_mxfp4_is_written_as_emulation():
    from moe_select.launch_emit import emit

    r = moe_select.explain({"gpu": "MI100", "engine": "vllm", "engine_version": "0.27.0", "model_config": GPTOSS_120B,
                            "tp": 4, "runner": "triton"})
    assert r.plan is not None and r.plan.runner == "triton", report_codes(r)
    argv = emit(r.plan, "vllm", engine_version="0.27.0").argv
    assert argv[argv.index("--moe-backend") + 1] == "emulation"


@pytest.mark.parametrize("version, tp, layout, refused", [
    ("0.25.0", 4, "quark", True), ("0.20.0", 8, "quark", True), ("0.25.0", 2, "quark", False),
    ("0.26.0", 4, "quark", False), ("0.25.0", 4, "mxfp4", False),
])
def test_quark_gptoss_emulation_buffer_block_aligned(version, tp, layout, refused):
    dep = {**QUARK_GPTOSS, "engine_version": version, "tp": tp,
           "quant_config": {**QUARK_GPTOSS["quant_config"], "layout": layout}}
    r = moe_select.explain(dep)
    hit = any(x.code == "shape_unaligned" and "Quark" in x.detail for x in r.reasons)
    assert hit is refused, report_codes(r)


# --- the Quark OCP-MX method's emulation (our triton) on ROCm: backends/triton.yaml support rows (checkpoint_layout quark)
@pytest.mark.parametrize("gpu, version, act, layout, supported", [
    ("MI300X", "0.25.0", "fp8_tensor", "quark", True),    # W4A8 static: the EMULATION fallback (round 49's report)
    ("MI300X", "0.25.0", "bf16", "quark", True),          # W4A16
    ("MI300X", "0.16.0", "fp8_tensor", "quark", True),    # the emulate flag
    ("MI355X", "0.34.0", "bf16", "quark", True),
    ("MI300X", "0.15.0", "fp8_tensor", "quark", False),   # not read before 0.16.0: no row
    ("MI300X", "0.25.0", "fp8_tensor", "mxfp4", False),   # gpt-oss's own layout: Mxfp4MoEMethod, not Quark's
    ("H100", "0.25.0", "fp8_tensor", "quark", False),     # ROCm rows only
])
def test_quark_ocp_mx_emulation_rows(gpu, version, act, layout, supported):
    dep = {**QUARK_GPTOSS, "gpu": gpu, "engine_version": version, "tp": 2,
           "quant_config": {"layout": layout, "activation_precision": act}}
    r = moe_select.explain(dep)
    tri = next(c for c in r.candidates if c.backend == "triton")
    quant_doubt = [x for x in [*tri.reasons, *tri.unknowns] if x.code == "quant_unsupported"]
    assert (not quant_doubt) is supported, report_codes(r)
    if supported:
        assert r.plan is not None and r.plan.runner == "triton", report_codes(r)

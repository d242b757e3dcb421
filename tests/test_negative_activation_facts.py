"""SGLang's FlashInfer paths that drop activation parameters, as negative activation facts (issue 21, field round 19).

Read in the PyPI SGLang wheels 0.5.9 .. 0.5.23 (with the .post1 releases); each row is bounded by the wheels read:

1. A swiglu_limit clamp (``silu_clamped``) on flashinfer_trtllm: bf16 (FlashInferTrtllmBf16MoeQuantInfo has no clamp),
   per-tensor FP8 (trtllm_fp8_per_tensor_scale_moe_wrapper takes no gemm1_*) and MXINT4 (CompressedTensorsMxInt4MoE
   passes gemm1_clamp_limit only) drop it in 0.5.12 .. 0.5.23; NVFP4 before 0.5.14 (ModelOpt reads it from 0.5.14, the
   compressed-tensors scheme never: unverified from 0.5.14). flashinfer_trtllm_routed: bf16 and NVFP4 the same.
2. gpt-oss's SwiGLU (``swiglu_oai``) on flashinfer_trtllm: gpt_oss.py never sets gemm1_beta (FlashInfer's default 0.0,
   gpt-oss needs 1.0), bf16 and per-tensor FP8 pass no gemm1_*, MXINT4 passes gemm1_beta=None, block FP8 / MXFP8 pass
   none before 0.5.18 and no beta from it, NVFP4 passes them from 0.5.17 for ModelOpt only. The positive swiglu_oai
   rows of both TRT-LLM-gen files are vLLM's alone now.
3. ``silu_clamped`` on flashinfer_cutlass: no swiglu_* before 0.5.21 (sgl-project/sglang#39939);
   materialize_swiglu_params_for_cutlass takes swiglu_limit from 0.5.21 (a positive row from 0.5.21).

Expected row lines are found in the fact files by their text (values, quant list, version bound), not by the code
under test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import moe_select

from report_helpers import cand, only_refusal, planned, refusals, unknown_codes

BACKENDS = Path(__file__).resolve().parent.parent / "backends"
TRTLLM, ROUTED, CUTLASS = "flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutlass"
TRTLLM_BOUND = ">=0.5.12,<=0.5.23"
# DeepSeek-V3's routed experts with a DeepSeek-V4-style clamp of 10 and grouped routing (n_group 8: outside the
# no-group routing refusal of FlashInfer 0.6.8rc1 .. 0.6.17).
CLAMPED = {"num_experts": 256, "top_k": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
           "activation": "silu_clamped", "swiglu_limit": 10.0, "routing": "deepseek_v3", "n_group": 8, "topk_group": 4,
           "num_shared_experts": 1}
# gpt-oss's activation and routing on a shape whose sizes divide into 128-wide FP8 blocks (gpt-oss's 2880 does not).
OAI = {"num_experts": 128, "top_k": 4, "hidden_size": 4096, "moe_intermediate_size": 2048, "activation": "swiglu_oai",
       "swiglu_limit": 7.0, "routing": "renormalize"}


def _row(file: str, values: str, quant: str, bound: str, negative: bool = True, engine: str = "sglang") -> int:
    """The 1-based line of the ``- values: [values]`` entry of ``backends/<file>`` whose next lines name the ``engine``'s
    (SGLang's unless told) ``quant`` list and the version ``bound`` (and ``supported: false`` when ``negative``);
    exactly one must match."""
    lines = (BACKENDS / file).read_text(encoding="utf-8").splitlines()
    hits = []
    for i, line in enumerate(lines):
        if line.strip() != f"- values: [{values}]":
            continue
        body = "\n".join(lines[i + 1:i + 4])
        if (f"engine: [{engine}], quant: [{quant}]" in body and f'{engine}: "{bound}"' in body
                and ("supported: false" in body) == negative):
            hits.append(i + 1)
    assert len(hits) == 1, (file, values, quant, bound, hits)
    return hits[0]


def _explain(runner: str, quant: str, model: dict[str, Any], engine: str | None = "sglang",
             version: str | None = None, gpu: str = "B200") -> Any:
    dep: dict[str, Any] = {"gpu": gpu, "quant": quant, "model": model, "tp": 8, "ep": 1, "a2a": "none",
                           "runner": runner, "packages": {"flashinfer-python": "0.6.18"}}
    if engine is not None:
        dep["engine"] = engine
    if version is not None:
        dep["engine_version"] = version
    if quant == "int4_w4a16":
        dep["quant_config"] = {"group_size": 32}
    return moe_select.explain(dep)


def _refused_by(r: Any, runner: str, file: str, line: int, activation: str, bound: str) -> None:
    assert r.plan is None, r.plan
    detail = only_refusal(r, runner, "activation_unsupported", file)
    assert refusals(r, runner)["activation_unsupported"] == f"backends/{file}:{line}"
    assert f"does not apply {activation}" in detail and f"(with sglang {bound})" in detail, detail


def _unverified_activation(r: Any, runner: str) -> None:
    """Planned on ``runner`` with the activation undecided: no fact refuses it, none supports it."""
    assert planned(r, runner), [(x.code, x.detail) for x in r.reasons]
    assert "activation_unsupported" not in refusals(r, runner)
    assert "activation_unsupported" in unknown_codes(r, runner)


# ---------------------------------------------------- 1. silu_clamped on flashinfer_trtllm (and the routed runner)
@pytest.mark.parametrize("quant", ["bf16", "fp8_tensor", "int4_w4a16"])
@pytest.mark.parametrize("version", ["0.5.12", "0.5.15", "0.5.23"])
def test_trtllm_clamp_refused_inside_the_wheels_read(quant, version):
    """bf16, per-tensor FP8 and MXINT4 under SGLang 0.5.12, 0.5.15 and 0.5.23: refused by the format's negative row."""
    r = _explain(TRTLLM, quant, CLAMPED, version=version)
    _refused_by(r, TRTLLM, "flashinfer_trtllm.yaml", _row("flashinfer_trtllm.yaml", "silu_clamped", quant, TRTLLM_BOUND),
                "silu_clamped", TRTLLM_BOUND)


@pytest.mark.parametrize("version", ["0.5.12", "0.5.13"])
def test_trtllm_nvfp4_clamp_refused_before_0_5_14(version):
    """NVFP4 under 0.5.12 / 0.5.13 (neither method reads swiglu_limit): refused by the NVFP4 row."""
    bound = ">=0.5.12,<0.5.14"
    r = _explain(TRTLLM, "nvfp4", CLAMPED, version=version)
    _refused_by(r, TRTLLM, "flashinfer_trtllm.yaml", _row("flashinfer_trtllm.yaml", "silu_clamped", "nvfp4", bound),
                "silu_clamped", bound)


@pytest.mark.parametrize(("quant", "version"), [
    ("bf16", "0.5.11"), ("bf16", "0.5.24"),              # before MoeRunnerConfig.swiglu_limit; a release not read
    ("fp8_tensor", "0.5.11"), ("fp8_tensor", "0.5.24"),
    ("int4_w4a16", "0.5.11"), ("int4_w4a16", "0.5.24"),
    ("nvfp4", "0.5.14"), ("nvfp4", "0.5.23"),            # ModelOpt reads it, compressed-tensors does not
])
def test_trtllm_clamp_unverified_outside_the_bound(quant, version):
    """Just outside each bound no fact decides silu_clamped: planned, the activation an unknown."""
    _unverified_activation(_explain(TRTLLM, quant, CLAMPED, version=version), TRTLLM)


@pytest.mark.parametrize(("quant", "version", "bound"), [
    ("bf16", "0.5.12", TRTLLM_BOUND), ("bf16", "0.5.23", TRTLLM_BOUND), ("nvfp4", "0.5.13", ">=0.5.12,<0.5.14")])
def test_routed_clamp_refused(quant, version, bound):
    """flashinfer_trtllm_routed (trtllm_bf16_routed_moe, trtllm_fp4_block_scale_routed_moe) drops the clamp the same
    way: refused, citing the routed file's row."""
    r = _explain(ROUTED, quant, CLAMPED, version=version)
    _refused_by(r, ROUTED, "flashinfer_trtllm_routed.yaml",
                _row("flashinfer_trtllm_routed.yaml", "silu_clamped", quant, bound), "silu_clamped", bound)


@pytest.mark.parametrize(("quant", "version"), [("bf16", "0.5.11"), ("bf16", "0.5.24"), ("nvfp4", "0.5.14")])
def test_routed_clamp_unverified_outside(quant, version):
    """Outside the routed rows' bounds: planned with the activation unknown."""
    _unverified_activation(_explain(ROUTED, quant, CLAMPED, version=version), ROUTED)


def test_plain_silu_untouched():
    """The same layer without the clamp under SGLang 0.5.20 is planned on both runners: the rows read silu_clamped
    only."""
    plain = {k: v for k, v in CLAMPED.items() if k != "swiglu_limit"} | {"activation": "silu"}
    for runner in (TRTLLM, ROUTED):
        r = _explain(runner, "bf16", plain, version="0.5.20")
        assert planned(r, runner) and "activation_unsupported" not in unknown_codes(r, runner), runner


@pytest.mark.parametrize("quant", ["bf16", "fp8_tensor", "int4_w4a16"])
def test_vllm_clamp_not_refused_by_the_sglang_rows(quant):
    """vLLM (0.29.0) with the same clamp is never refused by SGLang's rows. bf16 and MXINT4 keep silu_clamped an
    unknown. Per-tensor FP8 is refused by vLLM's own row from 0.29.0 (corrected by the release-delta audit, 2026-12-05:
    it was an unknown here): vllm-0.29.0 and vllm-0.34.0
    vllm/model_executor/layers/fused_moe/experts/trtllm_fp8_moe.py:TrtLlmFp8ExpertsBase.is_supported_config refuse
    swiglu_limit / alpha / beta for every weight/activation pair but MXFP8 (0.29.0) or MXFP8 and 128-block FP8 (from
    0.30.0): per-tensor FP8 never. Before 0.29.0 (not re-read) it stays an unknown."""
    r = _explain(TRTLLM, quant, CLAMPED, engine="vllm", version="0.29.0")
    if quant != "fp8_tensor":
        assert "activation_unsupported" not in refusals(r, TRTLLM)
        assert "activation_unsupported" in unknown_codes(r, TRTLLM)
        return
    line = _row("flashinfer_trtllm.yaml", "silu_clamped", "fp8_tensor", ">=0.29.0", engine="vllm")
    for version in ("0.29.0", "0.34.0"):
        r = _explain(TRTLLM, quant, CLAMPED, engine="vllm", version=version)
        assert r.plan is None, r.plan
        detail = only_refusal(r, TRTLLM, "activation_unsupported", "flashinfer_trtllm.yaml")
        assert refusals(r, TRTLLM)["activation_unsupported"] == f"backends/flashinfer_trtllm.yaml:{line}"
        assert "does not apply silu_clamped" in detail and "(with vllm >=0.29.0)" in detail, detail
    old = _explain(TRTLLM, quant, CLAMPED, engine="vllm", version="0.28.0")
    assert "activation_unsupported" not in refusals(old, TRTLLM)
    assert "activation_unsupported" in unknown_codes(old, TRTLLM)


def test_unstated_engine_judged_per_engine():
    """No engine named: SGLang (read at its newest checked release, 0.5.23 since the 2026-12-05 release delta, inside
    the bound) refuses bf16's clamp, vLLM does not."""
    c = cand(_explain(TRTLLM, "bf16", CLAMPED, engine=None), TRTLLM)
    assert c.evidence_by_engine["sglang"] == "refused", c.evidence_by_engine
    assert c.evidence_by_engine["vllm"] != "refused", c.evidence_by_engine


# --------------------------------------------------------------- 2. gpt-oss's swiglu_oai on the TRT-LLM-gen runners
@pytest.mark.parametrize(("quant", "version", "bound"), [
    ("bf16", "0.5.9", ">=0.5.9,<=0.5.23"), ("bf16", "0.5.23", ">=0.5.9,<=0.5.23"),
    ("int4_w4a16", "0.5.10", ">=0.5.9,<=0.5.23"), ("int4_w4a16", "0.5.23", ">=0.5.9,<=0.5.23"),
    ("fp8_tensor", "0.5.10", ">=0.5.10,<=0.5.23"), ("fp8_tensor", "0.5.23", ">=0.5.10,<=0.5.23"),
    ("fp8_block", "0.5.12", TRTLLM_BOUND), ("fp8_block", "0.5.18", TRTLLM_BOUND), ("fp8_block", "0.5.23", TRTLLM_BOUND),
    ("mxfp8", "0.5.12", TRTLLM_BOUND), ("mxfp8", "0.5.20", TRTLLM_BOUND),
    ("nvfp4", "0.5.12", ">=0.5.12,<0.5.17"), ("nvfp4", "0.5.16", ">=0.5.12,<0.5.17"),
])
def test_trtllm_swiglu_oai_refused_for_sglang(quant, version, bound):
    """gpt-oss's SwiGLU under SGLang inside each bound: refused (activation_unsupported) by the format's negative
    row, not planned as before through the engine-less positive row."""
    rows = {"bf16": "bf16, int4_w4a16", "int4_w4a16": "bf16, int4_w4a16", "fp8_block": "fp8_block, mxfp8",
            "mxfp8": "fp8_block, mxfp8"}
    line = _row("flashinfer_trtllm.yaml", "swiglu_oai", rows.get(quant, quant), bound)
    _refused_by(_explain(TRTLLM, quant, OAI, version=version), TRTLLM, "flashinfer_trtllm.yaml", line, "swiglu_oai",
                bound)


@pytest.mark.parametrize(("quant", "version"), [
    ("bf16", "0.5.8"), ("bf16", "0.5.24"), ("fp8_tensor", "0.5.9"), ("fp8_block", "0.5.11"), ("mxfp8", "0.5.24"),
    ("nvfp4", "0.5.11"), ("nvfp4", "0.5.17"),   # 0.5.17: ModelOpt passes alpha/beta/limit, compressed-tensors not
])
def test_trtllm_swiglu_oai_unverified_outside(quant, version):
    """Outside the rows' bounds SGLang's swiglu_oai is undecided (the positive row is vLLM's): planned, unknown."""
    _unverified_activation(_explain(TRTLLM, quant, OAI, version=version), TRTLLM)


@pytest.mark.parametrize(("quant", "version", "bound"), [
    ("bf16", "0.5.10", ">=0.5.10,<=0.5.23"), ("fp8_block", "0.5.23", TRTLLM_BOUND), ("mxfp8", "0.5.12", TRTLLM_BOUND),
    ("nvfp4", "0.5.16", ">=0.5.12,<0.5.17")])
def test_routed_swiglu_oai_refused_for_sglang(quant, version, bound):
    """The routed runner's SGLang calls drop them the same way: refused, citing the routed file."""
    line = _row("flashinfer_trtllm_routed.yaml", "swiglu_oai",
                {"fp8_block": "fp8_block, mxfp8", "mxfp8": "fp8_block, mxfp8"}.get(quant, quant), bound)
    _refused_by(_explain(ROUTED, quant, OAI, version=version), ROUTED, "flashinfer_trtllm_routed.yaml", line,
                "swiglu_oai", bound)


@pytest.mark.parametrize(("runner", "quant"), [(TRTLLM, "bf16"), (TRTLLM, "fp8_block"), (TRTLLM, "mxfp8"),
                                               (TRTLLM, "nvfp4"), (ROUTED, "fp8_block"), (ROUTED, "mxfp8")])
def test_vllm_swiglu_oai_still_supported(runner, quant):
    """vLLM keeps the positive rows (scoped to it) for the releases before 0.29.0, as first read
    (vllm@0390b581472b): planned with the activation decided at 0.28.0. It was asserted at 0.29.0; the release-delta
    audit (2026-12-05) found vLLM 0.29.0 .. 0.34.0's TRT-LLM experts refuse gpt-oss's interleaved SwiGLU for these
    formats (corrected, test_vllm_swiglu_oai_refused_from_0_29_0)."""
    r = _explain(runner, quant, OAI, engine="vllm", version="0.28.0")
    assert planned(r, runner), [(x.code, x.detail) for x in r.reasons]
    assert "activation_unsupported" not in unknown_codes(r, runner)


@pytest.mark.parametrize("version", ["0.29.0", "0.34.0"])
@pytest.mark.parametrize(("runner", "quant"), [(TRTLLM, "bf16"), (TRTLLM, "fp8_block"), (TRTLLM, "mxfp8"),
                                               (TRTLLM, "nvfp4"), (ROUTED, "fp8_block"), (ROUTED, "mxfp8")])
def test_vllm_swiglu_oai_refused_from_0_29_0(runner, quant, version):
    """From vLLM 0.29.0 gpt-oss hands FusedMoE activation "swigluoai" (MoEActivation.SWIGLUOAI, gate/up interleaved:
    vllm/model_executor/models/gpt_oss.py), and the BF16, FP8 (block, MXFP8; the modular class behind the routed
    runner shares the base) and NVFP4 TRT-LLM experts never list it: vllm-0.29.0 / vllm-0.34.0
    vllm/model_executor/layers/fused_moe/experts/trtllm_fp8_moe.py:TrtLlmFp8ExpertsBase._supports_activation (SILU,
    SWIGLUOAI_UNINTERLEAVE, RELU2_NO_MUL), trtllm_bf16_moe.py:TrtLlmBf16ExpertsBase._supports_activation (SILU,
    RELU2_NO_MUL; SWIGLUSTEP in 0.34.0), trtllm_nvfp4_moe.py:TrtLlmNvFp4ExpertsBase._supports_activation (no
    SWIGLUOAI). Refused by vLLM's negative row (the release-delta audit's correction of the positive row this test
    once asserted at 0.29.0)."""
    file = f"{runner}.yaml"
    quants = {TRTLLM: "bf16, fp8_block, mxfp8, nvfp4", ROUTED: "fp8_block, mxfp8"}[runner]
    line = _row(file, "swiglu_oai", quants, ">=0.29.0", engine="vllm")
    r = _explain(runner, quant, OAI, engine="vllm", version=version)
    assert r.plan is None, r.plan
    detail = only_refusal(r, runner, "activation_unsupported", file)
    assert refusals(r, runner)["activation_unsupported"] == f"backends/{file}:{line}"
    assert "does not apply swiglu_oai" in detail and "(with vllm >=0.29.0)" in detail, detail


@pytest.mark.parametrize("runner", [TRTLLM, ROUTED])
@pytest.mark.parametrize("version", ["0.29.0", "0.34.0"])
def test_vllm_swiglu_oai_mxfp4_supported_from_0_29_0(runner, version):
    """MXFP4 keeps gpt-oss's SwiGLU from 0.29.0: vllm-0.29.0 / vllm-0.34.0
    vllm/model_executor/layers/fused_moe/experts/trtllm_mxfp4_moe.py:_supports_activation names SWIGLUOAI."""
    r = _explain(runner, "mxfp4", OAI, engine="vllm", version=version)
    assert planned(r, runner), [(x.code, x.detail) for x in r.reasons]
    assert "activation_unsupported" not in unknown_codes(r, runner)


# -------------------------------------------------------------------------- 3. silu_clamped on flashinfer_cutlass
CUTLASS_CELLS = [("H200", "bf16"), ("H200", "fp16"), ("H200", "fp8_tensor"), ("B200", "nvfp4")]


@pytest.mark.parametrize(("gpu", "quant"), CUTLASS_CELLS)
@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.20"])
def test_cutlass_clamp_refused_before_0_5_21(gpu, quant, version):
    """SGLang 0.5.9 .. 0.5.20 hand cutlass_fused_moe no swiglu_limit: refused by the negative row (sglang#39939)."""
    bound = ">=0.5.9,<0.5.21"
    line = _row("flashinfer_cutlass.yaml", "silu_clamped", "bf16, fp16, fp8_tensor, nvfp4", bound)
    _refused_by(_explain(CUTLASS, quant, CLAMPED, version=version, gpu=gpu), CUTLASS, "flashinfer_cutlass.yaml", line,
                "silu_clamped", bound)


@pytest.mark.parametrize(("gpu", "quant"), CUTLASS_CELLS)
@pytest.mark.parametrize("version", ["0.5.21", "0.5.23"])
def test_cutlass_clamp_planned_from_0_5_21(gpu, quant, version):
    """From 0.5.21 materialize_swiglu_params_for_cutlass passes the clamp (alpha 1, beta 0): planned, the activation
    decided."""
    r = _explain(CUTLASS, quant, CLAMPED, version=version, gpu=gpu)
    assert planned(r, CUTLASS), [(x.code, x.detail) for x in r.reasons]
    assert "activation_unsupported" not in unknown_codes(r, CUTLASS)


def test_cutlass_clamp_below_the_wheels_read_is_the_positive_rows_gate():
    """0.5.8 (no wheel read) is refused by the positive row's version gate (>=0.5.21), not the negative row."""
    r = _explain(CUTLASS, "bf16", CLAMPED, version="0.5.8", gpu="H200")
    assert r.plan is None
    only_refusal(r, CUTLASS, "activation_unsupported", "flashinfer_cutlass.yaml")
    assert refusals(r, CUTLASS)["activation_unsupported"] == "backends/flashinfer_cutlass.yaml:" + str(
        _row("flashinfer_cutlass.yaml", "silu_clamped", "bf16, fp16, fp8_tensor, nvfp4", ">=0.5.21", negative=False))


@pytest.mark.parametrize(("gpu", "quant"), [("H200", "bf16"), ("B200", "nvfp4")])
def test_vllm_cutlass_clamp_not_refused(gpu, quant):
    """vLLM's FlashInferExperts are not decided by SGLang's rows: silu_clamped stays an unknown for bf16; NVFP4 is
    decided by vLLM's own row (the NVFP4 oracle's clamp set holds FLASHINFER_CUTLASS from 0.24.0, field round 30)."""
    r = _explain(CUTLASS, quant, CLAMPED, engine="vllm", version="0.29.0", gpu=gpu)
    assert "activation_unsupported" not in refusals(r, CUTLASS)
    assert ("activation_unsupported" in unknown_codes(r, CUTLASS)) is (quant == "bf16")

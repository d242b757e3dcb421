"""Issue 21: the dispatch precision of an all-to-all, per MoE layer kind (deployment key ``dispatch_precision``).

Each check of backends/a2a/*.yaml ``dispatch_precision`` facts has a deployment it refuses (citing the fact's file:line,
or the exhaustive list's) and one it does not; the per-layer syntax is read on a DeepSeek-V3-shaped MXFP4 checkpoint whose
MTP layer the quantization config leaves in BF16 (sgl-project/sglang#20453's case); bad inputs are errors naming file:line.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import moe_select
from moe_select.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "model_configs"
SMALL = {"num_experts": 64, "top_k": 8, "hidden_size": 4096, "moe_intermediate_size": 1024}


def _dispatch_reasons(report, runner=None):
    """Reasons of the dispatch-precision check (all candidates, or ``runner``'s), as (code, detail, source)."""
    out = []
    for c in report.candidates:
        if runner is None or c.backend == runner:
            out += [(r.code, r.detail, r.source) for r in c.reasons if "dispatch_precision" in r.detail
                    or "does not send" in r.detail]
    return out


def _refused_by(report, runner, file):
    found = _dispatch_reasons(report, runner)
    assert found, f"{runner}: no dispatch precision reason; reasons: {[r.detail for c in report.candidates if c.backend == runner for r in c.reasons]}"
    assert all(code == "a2a_unsupported" for code, _, _ in found)
    assert any(src.startswith(file + ":") for _, _, src in found), found
    return found


MORI = {"gpu": "MI355X", "engine": "sglang", "tp": 8, "ep": 8, "a2a": "mori", "engine_version": "0.5.23"}


# ------------------------------------------------------------------------------------------ per-layer syntax, MoRI
def test_mori_forced_fp4_for_every_layer_refuses_the_bf16_mtp_layer(mxfp4_mtp):
    """SGLANG_MORI_DISPATCH_DTYPE=fp4 applies to every layer: the BF16 MTP layer gets FP4 activations in AITER with BF16
    weights (sgl-project/sglang#20453), refused citing mori.yaml; the main MXFP4 layers are not."""
    r = moe_select.explain({**MORI, "model_config": str(mxfp4_mtp), "dispatch_precision": "mxfp4"})
    assert r.plan is None and r.refused_layer_kinds() == ["mtp"]
    mtp = r.layers[0]
    assert mtp.deployment.layer_kind == "mtp" and mtp.deployment.quant == "bf16" and mtp.deployment.dispatch_precision == "mxfp4"
    found = _refused_by(mtp, "aiter", "backends/a2a/mori.yaml")
    assert "20453" in found[0][1] and "mtp layers" in found[0][1]
    assert not _dispatch_reasons(r, "aiter")  # the main layers (mxfp4) send mxfp4


def test_mori_fp4_for_main_and_bf16_for_mtp_is_planned(mxfp4_mtp):
    r = moe_select.explain({**MORI, "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "mxfp4", "mtp": "bf16"}})
    assert r.plan is not None, [x.detail for x in r.reasons][:3]
    assert r.plan.deployment.dispatch_precision == "mxfp4"
    assert [(k.deployment.layer_kind, k.deployment.dispatch_precision) for k in r.plan.layers] == [("mtp", "bf16")]
    assert not _dispatch_reasons(r) and not _dispatch_reasons(r.layers[0])
    text = r.render_text()
    assert re.search(r"\n  dispatch_precision +main mxfp4, mtp bf16 +<dict> \(main: mxfp4, mtp: bf16; kinds not named: auto\)", text)
    assert "mtp: layers 61, bf16, dispatch_precision bf16" in text


def test_a_kind_not_named_in_the_mapping_is_auto(mxfp4_mtp):
    r = moe_select.explain({**MORI, "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "mxfp4"}})
    assert r.plan is not None and r.plan.layers[0].deployment.dispatch_precision == "auto"


def test_mori_fp4_before_0_5_10_is_refused_on_the_version_gate(mxfp4_mtp):
    """Per-layer MoRI dispatch precisions (SGLANG_MORI_DISPATCH_DTYPE) arrived in 0.5.10 (sgl-project/sglang#21040)."""
    r = moe_select.explain({**MORI, "engine_version": "0.5.9", "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "mxfp4"}})
    assert r.plan is None
    found = _refused_by(r, "aiter", "backends/a2a/mori.yaml")
    assert "sglang >=0.5.10 (sglang is 0.5.9)" in found[0][1]


def test_mori_nvfp4_is_refused_by_the_exhaustive_sglang_list(mxfp4_mtp):
    r = moe_select.explain({**MORI, "model_config": str(mxfp4_mtp), "dispatch_precision": {"main": "nvfp4"}})
    found = _refused_by(r, "aiter", "backends/a2a/mori.yaml")
    assert "exhaustive dispatch_precision list" in found[0][1]


# ---------------------------------------------------------------------------------- SGLang FlashInfer a2a
FI = {"gpu": "B200", "engine": "sglang", "tp": 4, "ep": 4, "dp": 4, "a2a": "flashinfer", "engine_version": "0.5.23",
      "model": SMALL}


def test_flashinfer_mxfp8_needs_quant_mxfp8_and_the_routed_runner():
    ok = moe_select.explain({**FI, "quant": "mxfp8", "dispatch_precision": "mxfp8", "runner": "flashinfer_trtllm_routed"})
    assert not _dispatch_reasons(ok, "flashinfer_trtllm_routed")
    other = moe_select.explain({**FI, "quant": "mxfp8", "dispatch_precision": "mxfp8", "runner": "flashinfer_trtllm"})
    found = _refused_by(other, "flashinfer_trtllm", "backends/a2a/flashinfer.yaml")
    assert "only with runner flashinfer_trtllm_routed" in found[0][1]
    fp8 = moe_select.explain({**FI, "quant": "fp8_block", "dispatch_precision": "mxfp8", "runner": "flashinfer_trtllm_routed"})
    _refused_by(fp8, "flashinfer_trtllm_routed", "backends/a2a/flashinfer.yaml")
    old = moe_select.explain({**FI, "engine_version": "0.5.19", "quant": "mxfp8", "dispatch_precision": "mxfp8",
                              "runner": "flashinfer_trtllm_routed"})
    assert "sglang is 0.5.19" in _refused_by(old, "flashinfer_trtllm_routed", "backends/a2a/flashinfer.yaml")[0][1]


def test_flashinfer_nvfp4_needs_nvfp4_weights():
    ok = moe_select.explain({**FI, "quant": "nvfp4", "dispatch_precision": "nvfp4"})
    assert not _dispatch_reasons(ok)
    bad = moe_select.explain({**FI, "quant": "bf16", "dispatch_precision": "nvfp4"})
    _refused_by(bad, "flashinfer_trtllm", "backends/a2a/flashinfer.yaml")


# --------------------------------------------------------------------------------------- vLLM FlashInfer one-sided
VFI = {"gpu": "B200", "engine": "vllm", "tp": 1, "dp": 4, "ep": 4, "a2a": "flashinfer", "model": SMALL}


def test_vllm_one_sided_block_fp8_from_0_29_0():
    new = moe_select.explain({**VFI, "engine_version": "0.29.0", "quant": "fp8_block", "dispatch_precision": "fp8_group"})
    assert not _dispatch_reasons(new)
    old = moe_select.explain({**VFI, "engine_version": "0.28.0", "quant": "fp8_block", "dispatch_precision": "fp8_group"})
    runner = next(c.backend for c in old.candidates if _dispatch_reasons(old, c.backend))
    assert "vllm is 0.28.0" in _refused_by(old, runner, "backends/a2a/flashinfer.yaml")[0][1]


def test_vllm_one_sided_refuses_what_it_does_not_send():
    r = moe_select.explain({**VFI, "engine_version": "0.33.0", "quant": "mxfp4", "dispatch_precision": "mxfp4"})
    runner = next(c.backend for c in r.candidates if _dispatch_reasons(r, c.backend))
    assert "exhaustive dispatch_precision list" in _refused_by(r, runner, "backends/a2a/flashinfer.yaml")[0][1]


# ------------------------------------------------------------------------------------------------------- DeepEP
DEEPEP = {"gpu": "H200", "tp": 8, "ep": 8, "a2a": "deepep", "model": SMALL}


@pytest.mark.parametrize("mode,bad,good", [("low_latency", "bf16", "fp8_group"), ("normal", "fp8_group", "bf16")])
def test_sglang_w4afp8_over_deepep(mode, bad, good):
    """W4AFP8 DeepEP low-latency requires FP8 dispatch, normal BF16 (w4afp8.py apply_deepep_ll / apply_deepep_normal)."""
    dep = {**DEEPEP, "engine": "sglang", "engine_version": "0.5.23", "quant": "int4_w4a8", "a2a_mode": mode}
    refused = moe_select.explain({**dep, "dispatch_precision": bad})
    runner = next(c.backend for c in refused.candidates if _dispatch_reasons(refused, c.backend))
    assert "W4AFP8" in _refused_by(refused, runner, "backends/a2a/deepep.yaml")[0][1]
    fine = moe_select.explain({**dep, "dispatch_precision": good})
    assert not any("W4AFP8" in d for _, d, _ in _dispatch_reasons(fine))


def test_sglang_deepep_flag_choices():
    r = moe_select.explain({**DEEPEP, "engine": "sglang", "quant": "fp8_block", "dispatch_precision": "mxfp8"})
    runner = next(c.backend for c in r.candidates if _dispatch_reasons(r, c.backend))
    _refused_by(r, runner, "backends/a2a/deepep.yaml")
    ok = moe_select.explain({**DEEPEP, "engine": "sglang", "quant": "fp8_block", "dispatch_precision": "fp8_group"})
    assert not _dispatch_reasons(ok)


def test_sglang_deepep_nvfp4_is_unverified_not_refused():
    """NVFP4 over DeepEP needs a DeepEP build with it (not on DeepEP main): an open list, no fact either way."""
    r = moe_select.explain({**DEEPEP, "gpu": "B200", "engine": "sglang", "quant": "nvfp4", "dispatch_precision": "nvfp4",
                            "a2a_mode": "low_latency", "phase": "decode", "max_tokens_per_rank": 64})
    assert not _dispatch_reasons(r)
    assert any("dispatch_precision is nvfp4" in x.detail for c in r.candidates for x in c.unknowns)


def test_vllm_deepep_low_latency():
    dep = {**DEEPEP, "engine": "vllm", "a2a_mode": "low_latency"}
    bf16 = moe_select.explain({**dep, "quant": "fp8_block", "dispatch_precision": "bf16"})
    runner = next(c.backend for c in bf16.candidates if _dispatch_reasons(bf16, c.backend))
    _refused_by(bf16, runner, "backends/a2a/deepep.yaml")
    assert not _dispatch_reasons(moe_select.explain({**dep, "quant": "fp8_block", "dispatch_precision": "fp8_group"}))
    b200 = {**dep, "gpu": "B200", "quant": "nvfp4", "dispatch_precision": "nvfp4"}
    assert not _dispatch_reasons(moe_select.explain({**b200, "engine_version": "0.12.0"}))
    old = moe_select.explain({**b200, "engine_version": "0.11.0"})
    runner = next(c.backend for c in old.candidates if _dispatch_reasons(old, c.backend))
    assert "vllm is 0.11.0" in _refused_by(old, runner, "backends/a2a/deepep.yaml")[0][1]


# --------------------------------------------------------------------------------------------------------- pplx
def test_pplx_sends_bf16_or_fp8_only():
    dep = {"gpu": "H200", "engine": "sglang", "tp": 8, "ep": 8, "dp": 8, "a2a": "pplx", "quant": "fp8_block", "model": SMALL}
    assert not _dispatch_reasons(moe_select.explain({**dep, "dispatch_precision": "fp8_group"}))
    r = moe_select.explain({**dep, "dispatch_precision": "nvfp4"})
    found = _refused_by(r, "deep_gemm", "backends/a2a/pplx.yaml")
    assert "exhaustive dispatch_precision list" in found[0][1]


# ------------------------------------------------------------------------------------------------------ inputs
def _dep(tmp_path, text):
    p = tmp_path / "d.yaml"
    p.write_text(text)
    return p


def test_unknown_layer_kind_is_an_error_at_its_line(tmp_path, mxfp4_mtp):
    p = _dep(tmp_path, f"gpu: MI355X\nmodel_config: {mxfp4_mtp}\ntp: 8\nep: 8\na2a: mori\ndispatch_precision: {{main: mxfp4, draft: bf16}}\n")
    with pytest.raises(InputError) as e:
        moe_select.explain(p)
    assert f"{p}:6: dispatch_precision: layer kind 'draft' is not in this checkpoint (its kinds: main, mtp)" in str(e.value)


def test_bad_value_is_an_error_with_a_did_you_mean(tmp_path):
    p = _dep(tmp_path, "gpu: H200\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n"
             "a2a: deepep\ndispatch_precision: fp8\n")
    with pytest.raises(InputError) as e:
        moe_select.explain(p)
    assert f"{p}:5: dispatch_precision:" in str(e.value) and "'fp8' is not a dispatch precision" in str(e.value)


def test_non_auto_without_an_all_to_all_is_an_error(tmp_path):
    p = _dep(tmp_path, "gpu: H200\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n"
             "dispatch_precision: {main: bf16}\n")
    with pytest.raises(InputError) as e:
        moe_select.explain(p)
    assert f"{p}:4: dispatch_precision:" in str(e.value) and "a2a is none" in str(e.value)
    p2 = _dep(tmp_path, "gpu: H200\nquant: bf16\nmodel: {num_experts: 8, top_k: 2, hidden_size: 64, moe_intermediate_size: 32}\n"
              "dispatch_precision: auto\n")
    assert moe_select.explain(p2).deployment.dispatch_precision == "auto"

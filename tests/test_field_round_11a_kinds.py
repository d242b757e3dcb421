"""Field round 11 of issue 21 (tests/cases/field_round_11.yaml), kinds 1 and 2 fixed as kinds: each tested on another
deployment of the same kind than the round's case.

1. Kimi K3's SiTU activation (NVIDIA/TensorRT-LLM#18709): ``situ`` in the vocabulary (ops.gated_act and the float64
   reference, checked against each other here), TRT-LLM-gen's fused SiTU cubins (NVFP4 after 1.3.0rc24, W4A8
   MXFP4-MXFP8), its MoE-TP alignment, vLLM's Triton experts from 0.27.0; this install's adapters refuse it.
2. vLLM's ROCm Triton-family fallbacks (vllm-project/vllm#50516, #49747): the MXFP4 EMULATION experts on gfx942 and
   gfx950 from 0.27.0, and the native MXFP8 Triton experts (TRITON_MXFP8) on gfx950 from 0.25.0.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

import moe_select
from moe_select.ops import gated_act
from moe_select.reference import _act64

from report_helpers import report_codes as _codes

BASE = {"tp": 1, "ep": 1, "a2a": "none"}
# Kimi K3's routed experts (vllm-project/vllm#50082's parsed config), another deployment than the round's cases.
K3 = {"num_experts": 896, "top_k": 16, "hidden_size": 3584, "moe_intermediate_size": 3072, "activation": "situ",
      "routing": "custom", "num_shared_experts": 2}
QWEN30 = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
          "routing": "renormalize"}


def _explain(**dep: Any) -> Any:
    return moe_select.explain({**BASE, **dep})


def _by(r: Any, backend: str) -> list[Any]:
    return [x for x in r.reasons if x.backend == backend]


# ---------------------------------------------------------------------------------------------- kind 1: SiTU math
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("linear", [True, False])
def test_situ_gated_act_matches_float64_reference(seed, linear):
    """ops.gated_act('situ') in float32 equals the float64 reference on fresh random inputs (|err| <= 1e-5 + 1e-5 *
    |ref|), with random positive betas, up capped or not; large gate/up values saturate to the caps."""
    g = torch.Generator().manual_seed(1000 + seed)
    h = torch.randn(64, 2 * 48, generator=g, dtype=torch.float64) * 6
    h[0, :4] = torch.tensor([80.0, -80.0, 300.0, -300.0], dtype=torch.float64)  # saturation of the gate caps
    beta = float(torch.rand((), generator=g)) * 8 + 0.5
    lin = float(torch.rand((), generator=g)) * 30 + 1.0 if linear else None
    ref = _act64(h, "situ", None, beta, lin)
    got = gated_act(h.float(), "situ", situ_beta=beta, situ_linear_beta=lin).double()
    assert torch.isfinite(ref).all()
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), (got - ref).abs().max()
    # The formula itself, at one point: b*tanh(g/b)*sigmoid(g) * lb*tanh(u/lb).
    gate, up = 1.5, -40.0
    x = torch.tensor([[gate, up]], dtype=torch.float64)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    want = beta * torch.tanh(t(gate / beta)) * torch.sigmoid(t(gate)) * (lin * torch.tanh(t(up / lin)) if lin else up)
    assert torch.allclose(_act64(x, "situ", None, beta, lin), want.reshape(1, 1), rtol=1e-12)


def test_situ_needs_its_beta():
    """situ without a positive beta is an error in both implementations, never another activation."""
    h = torch.randn(2, 8)
    with pytest.raises(ValueError, match="situ_beta"):
        gated_act(h, "situ")
    with pytest.raises(ValueError, match="situ"):
        gated_act(h, "situ", situ_beta=-1.0)
    with pytest.raises(ValueError, match="situ"):
        _act64(h.double(), "situ", None)


def test_situ_is_gated_in_the_vocabulary():
    """situ is declared gated (w13 holds gate and up), as GATED_ACTIVATIONS says."""
    from moe_select.vocab_names import GATED_ACTIVATIONS
    assert "situ" in GATED_ACTIVATIONS


# ---------------------------------------------------------------------------------------------- kind 1: TRT-LLM-gen
def test_trtllm_gen_situ_mxfp4_planned():
    """Kimi K3 MXFP4 (W4A8_MXFP4_MXFP8) on B300 under TensorRT-LLM, EP 8, trtllm_gen asked for: planned; the SiTU
    activation is no refusal (it was: trtllm_gen's list named no situ)."""
    r = _explain(gpu="B300", engine="trtllm", quant="mxfp4", model=K3, tp=8, ep=8, runner="trtllm_gen")
    assert r.plan is not None and r.plan.runner == "trtllm_gen", [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("version", "ok"), [("1.3.0rc24", False), ("1.3.0rc23", False), ("1.3.0rc29", True)])
def test_trtllm_gen_situ_nvfp4_after_18709(version, ok):
    """Kimi K3 NVFP4 on GB200, trtllm_gen asked for: refused (activation_unsupported) up to 1.3.0rc24 (Kimi K3's runtime
    admitted only MXFP4 on TRTLLM until NVIDIA/TensorRT-LLM#18709), planned after it."""
    r = _explain(gpu="GB200", engine="trtllm", quant="nvfp4", model=K3, tp=8, ep=8, runner="trtllm_gen",
                 packages={"tensorrt-llm": version})
    if ok:
        assert r.plan is not None and r.plan.runner == "trtllm_gen", [(x.code, x.detail) for x in r.reasons]
    else:
        assert r.plan is None and _codes(r) == {"activation_unsupported"}, [(x.code, x.detail) for x in r.reasons]


def test_trtllm_gen_situ_not_fp8_block():
    """SiTU has no FP8 block-scale cubin: refused (activation_unsupported) at any version."""
    r = _explain(gpu="B200", engine="trtllm", quant="fp8_block", model=K3, tp=8, ep=8, runner="trtllm_gen",
                 packages={"tensorrt-llm": "1.3.0rc29"})
    assert r.plan is None and _codes(r) == {"activation_unsupported"}, [(x.code, x.detail) for x in r.reasons]


@pytest.mark.parametrize(("inter", "tp", "ep", "ok"), [(3072, 8, 1, True), (2880, 8, 1, False), (2880, 8, 8, True),
                                                      (3200, 4, 1, False), (3072, 2, 1, True)])
def test_trtllm_gen_situ_moe_tp_alignment(inter, tp, ep, ok):
    """SiTU with MoE TP: a per-rank shard not a multiple of 128 is refused (shape_unaligned); EP (moe_tp 1) is not."""
    r = _explain(gpu="B200", engine="trtllm", quant="mxfp4", model=dict(K3, moe_intermediate_size=inter), tp=tp, ep=ep,
                 runner="trtllm_gen")
    if ok:
        assert "shape_unaligned" not in _codes(r), [(x.code, x.detail) for x in r.reasons]
        assert r.plan is not None
    else:
        assert r.plan is None and _codes(r) == {"shape_unaligned"}, [(x.code, x.detail) for x in r.reasons]


def test_this_install_refuses_situ_no_adapter():
    """Under engine moe_select no adapter computes SiTU: every runner with an adapter is refused no_adapter, none is
    planned as another activation."""
    r = _explain(gpu="H200", engine="moe_select", quant="bf16", model=dict(K3, num_experts=64, top_k=8),
                 runner="torch_native", cuda_graph=False)
    assert r.plan is None and _codes(r) == {"no_adapter"}, [(x.code, x.detail) for x in r.reasons]
    assert "situ" in r.reasons[0].detail
    a = _explain(gpu="H200", engine="moe_select", quant="bf16", model=dict(K3, num_experts=64, top_k=8), runner="auto")
    assert a.plan is None
    for b in ("triton", "torch_native"):
        assert "no_adapter" in {x.code for x in _by(a, b)}, (b, _by(a, b))


# ---------------------------------------------------------------------------------------------- kind 1+2: vLLM ROCm
def test_vllm_emulation_row_is_situ_on_gfx942_only():
    """The EMULATION row is Kimi K3's: gpt-oss MXFP4 on MI300X under vLLM (auto) is not planned on it, and K3 on MI355X
    (gfx950: vLLM's AITER SiTU route where AITER has it) is not planned as triton."""
    gpt_oss = {"num_experts": 128, "top_k": 4, "hidden_size": 2880, "moe_intermediate_size": 2880,
               "activation": "swiglu_oai", "routing": "renormalize"}
    r = _explain(gpu="MI300X", engine="vllm", quant="mxfp4", model=gpt_oss, tp=8)
    assert r.plan is not None and r.plan.runner != "triton"
    k = _explain(gpu="MI355X", engine="vllm", engine_version="0.33.0", quant="mxfp4", model=K3, tp=8, runner="triton")
    assert k.plan is None and "quant_unsupported" in _codes(k)


@pytest.mark.parametrize(("version", "ok"), [("0.26.0", False), ("0.27.0", True), ("0.30.0", True)])
def test_vllm_k3_mxfp4_gfx942_emulation_from_0_27(version, ok):
    """Kimi K3 MXFP4 on MI325X (gfx942), TP 4, triton asked for: planned from 0.27.0 (EMULATION in the ROCm list,
    SITU in TritonExperts), refused at 0.26.0."""
    r = _explain(gpu="MI325X", engine="vllm", engine_version=version, quant="mxfp4", model=K3, tp=4, runner="triton")
    if ok:
        assert r.plan is not None and r.plan.runner == "triton", [(x.code, x.detail) for x in r.reasons]
    else:
        assert r.plan is None and _codes(r) <= {"quant_unsupported", "activation_unsupported"}, r.reasons


def test_vllm_silu_mxfp4_gfx942_aiter_rows_untouched():
    """A SiLU MXFP4 layer on gfx942 under vLLM with aiter asked for stays planned on aiter's rows."""
    r = _explain(gpu="MI300X", engine="vllm", quant="mxfp4", model=QWEN30, runner="aiter")
    assert r.plan is not None and r.plan.runner == "aiter"


@pytest.mark.parametrize(("gpu", "version", "ok"), [("MI350X", "0.33.0", True), ("MI350X", "0.25.0", True),
                                                    ("MI350X", "0.24.0", False), ("MI300X", "0.33.0", False)])
def test_vllm_mxfp8_triton_native_gfx950(gpu, version, ok):
    """A SiLU MXFP8 layer (Qwen3-30B-A3B's shape) with triton asked for under vLLM: TRITON_MXFP8 (dot_scaled) on gfx950
    from 0.25.0; not at 0.24.0 (no `triton` MXFP8 name) and not on gfx942 (the native device check fails there; its
    emulation has no --moe-backend name)."""
    r = _explain(gpu=gpu, engine="vllm", engine_version=version, quant="mxfp8", model=QWEN30, runner="triton")
    if ok:
        assert r.plan is not None and r.plan.runner == "triton", [(x.code, x.detail) for x in r.reasons]
    else:
        assert r.plan is None and _codes(r) & {"quant_unsupported", "arch_unsupported"}, r.reasons

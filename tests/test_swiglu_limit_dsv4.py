"""DeepSeek-V4's clamped SiLU (issue 21): ``swiglu_limit`` read from config.json as activation ``silu_clamped``.

vLLM's DeepseekV4MoE hands ``config.swiglu_limit`` to FusedMoE and its shared-expert MLP uses SiluAndMulWithClamp
(vllm-project/vllm@023da1fc828e, vllm/model_executor/models/deepseek_v4.py): ``silu(min(gate, l)) * clamp(up, -l, l)``.
A runner that computes plain SiLU for such a model is a silent wrong output, so: the config read carries the limit
(typed, as gpt-oss's), runners whose facts name ``silu_clamped`` are planned, a runner that takes SiLU but has no fact
about the clamp is unverified (never supported), and this install's adapters either implement the clamp
(torch_native, against float64 here) or are refused no_adapter naming the limit.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import moe_select
from moe_select.errors import InputError
from moe_select.layer import LayerSpec
from moe_select.model_config import read_model_config
from moe_select.ops import gated_act
from moe_select.reference import TOLERANCE, reference_moe, rel_error
from moe_select.routing import route
from moe_select.shape import ModelShape

from report_helpers import cand, reason_of, refusals, unknown_codes

# A DeepSeek-V4-like config.json: the keys the reader uses (tests/fixtures/models/deepseek-ai__DeepSeek-V4-Flash) and
# a swiglu_limit. The limit's value is this test's, not read from a published checkpoint.
DSV4_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 6, "n_shared_experts": 1,
    "hidden_act": "silu", "swiglu_limit": 10.0, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "n_group": 8, "topk_group": 8,
}
MODEL = {"num_experts": 256, "top_k": 6, "hidden_size": 4096, "moe_intermediate_size": 2048,
         "activation": "silu_clamped", "swiglu_limit": 10.0, "routing": "custom"}


def _write(tmp_path: Path, cfg: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    return tmp_path


# ------------------------------------------------------------------------------------------- the config read
def test_dsv4_config_reads_swiglu_limit_as_silu_clamped(tmp_path):
    info = read_model_config(_write(tmp_path, DSV4_CONFIG))
    assert info.shape["activation"] == "silu_clamped" and info.shape["swiglu_limit"] == 10.0
    assert "swiglu_limit" in info.provenance["activation"] and "config.json:" in info.provenance["swiglu_limit"]


def test_null_or_absent_swiglu_limit_is_plain_silu(tmp_path):
    """vLLM builds SiluAndMul when swiglu_limit is None: null (and a config without it) reads as silu, no limit."""
    info = read_model_config(_write(tmp_path, {**DSV4_CONFIG, "swiglu_limit": None}))
    assert info.shape["activation"] == "silu" and "swiglu_limit" not in info.shape


@pytest.mark.parametrize(("extra", "needle"), [({"hidden_act": "gelu"}, "no clamped variant"),
                                               ({"swiglu_limit": -1}, "finite positive"),
                                               ({"swiglu_limit": "10"}, "must be a number")])
def test_bad_swiglu_limit_is_an_input_error(tmp_path, extra, needle):
    with pytest.raises(InputError, match=needle) as e:
        read_model_config(_write(tmp_path, {**DSV4_CONFIG, **extra}))
    assert "config.json:" in str(e.value)


def test_inline_model_keeps_limit_and_activation_together():
    """An inline silu_clamped without its limit, or a limit with plain silu, is refused (it would run unclamped)."""
    with pytest.raises(ValueError, match="needs swiglu_limit"):
        ModelShape(**{**MODEL, "swiglu_limit": None})
    with pytest.raises(ValueError, match="write activation silu_clamped"):
        ModelShape(**{**MODEL, "activation": "silu"})
    assert ModelShape(**MODEL).swiglu_limit == 10.0


# ------------------------------------------------------------------------------------------- planned / refused
def _explain(**dep) -> object:
    return moe_select.explain({"tp": 8, "ep": 1, "a2a": "none", "model": MODEL, **dep})


def test_vllm_triton_planned_for_clamped_silu():
    """vLLM's apply_moe_activation runs SILU with the limit FusedMoE got (a fact of backends/triton.yaml)."""
    r = _explain(gpu="H200", engine="vllm", quant="bf16", runner="triton")
    assert r.plan is not None and r.plan.runner == "triton"
    assert "activation_unsupported" not in unknown_codes(r, "triton") | set(refusals(r, "triton"))


def test_trtllm_cutlass_planned_and_deepgemm_not_claimed():
    """create_moe_backend passes swiglu_limit to CUTLASS (planned); TRT-LLM's DeepGEMM backend takes silu, but no
    fact says it clamps: unverified for the clamp, never planned as supported on plain silu."""
    r = _explain(gpu="H200", engine="trtllm", quant="fp8_block", runner="trtllm_cutlass")
    assert r.plan is not None and "activation_unsupported" not in unknown_codes(r, "trtllm_cutlass")
    r = _explain(gpu="B200", engine="trtllm", quant="fp8_block")
    c = cand(r, "trtllm_deepgemm")
    assert "activation_unsupported" in unknown_codes(r, "trtllm_deepgemm"), c
    u = next(u for u in c.unknowns if u.code == "activation_unsupported")
    assert "swiglu_limit 10.0" in u.detail and "clamp" in u.detail


def test_exhaustive_base_list_refuses_only_when_base_is_refused():
    """An exhaustive list that takes silu leaves the clamp unverified (the check is of the base); the same deployment
    with plain silu is not reported for the activation at all."""
    r = _explain(gpu="MI300X", engine="vllm", quant="bf16")
    assert "activation_unsupported" not in refusals(r, "aiter")
    assert "activation_unsupported" in unknown_codes(r, "aiter")
    plain = moe_select.explain({"tp": 8, "ep": 1, "a2a": "none", "gpu": "MI300X", "engine": "vllm", "quant": "bf16",
                                "model": {**MODEL, "activation": "silu", "swiglu_limit": None}})
    assert "activation_unsupported" not in unknown_codes(plain, "aiter")


@pytest.mark.parametrize("runner", ["triton", "flashinfer_cutlass", "deep_gemm"])
def test_install_adapters_without_the_clamp_are_refused_no_adapter(runner):
    r = _explain(gpu="H200", engine="moe_select", quant="bf16", runner=runner)
    assert r.plan is None
    detail = reason_of(r, "no_adapter", runner).detail
    assert "silu_clamped" in detail and "swiglu_limit 10.0" in detail, detail


def test_install_torch_native_planned():
    r = moe_select.explain({"tp": 1, "ep": 1, "a2a": "none", "arch": "cpu", "engine": "moe_select", "quant": "bf16",
                            "model": {**MODEL, "num_experts": 8, "hidden_size": 64, "moe_intermediate_size": 32}})
    assert r.plan is not None and r.plan.runner == "torch_native"


# ------------------------------------------------------------------------------------------- numerics
def test_gated_act_matches_float64_formula():
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    h = torch.randn(64, 2 * 40, generator=g, dtype=torch.float64) * 3
    lim = 1.5
    gate, up = h[:, :40], h[:, 40:]
    gc = torch.clamp(gate, max=lim)
    want = gc / (1 + torch.exp(-gc)) * torch.clamp(up, -lim, lim)
    assert torch.allclose(gated_act(h, "silu_clamped", lim), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="swiglu_limit"):
        gated_act(h, "silu_clamped")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_native_clamped_silu_against_float64(dtype):
    """torch_native on fresh random inputs vs the float64 reference at the tolerance table's value for the dtype; the
    limit (0.5) clamps most gates, so plain SiLU misses the reference by far more than the tolerance."""
    from moe_select.backends.a2a.dispatch_none import NoDispatch
    from moe_select.backends.torch_native import TorchNativeCore
    from moe_select.runner import MoeRunner

    class _Plan:
        runner, a2a = "torch_native", "none"

    lim = 0.5
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=48, activation="silu_clamped",
                     swiglu_limit=lim, quant="bf16")
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    w13 = (torch.randn(8, 96, 64, generator=g) * 0.4).to(dtype)
    w2 = (torch.randn(8, 64, 48, generator=g) / 48 ** 0.5).to(dtype)
    x = torch.randn(24, 64, generator=g).to(dtype)
    wts, ids = route(torch.randn(24, 8, generator=g), "renormalize", 2)
    r = MoeRunner(_Plan(), spec, TorchNativeCore(spec, "cpu"), NoDispatch(spec), torch.device("cpu"))
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2))
    ref = reference_moe(x, ids, wts, w13, w2, "silu_clamped", swiglu_limit=lim)
    tol = TOLERANCE[str(dtype).removeprefix("torch.")]
    assert rel_error(out, ref) <= tol
    assert rel_error(reference_moe(x, ids, wts, w13, w2, "silu"), ref) > 10 * tol

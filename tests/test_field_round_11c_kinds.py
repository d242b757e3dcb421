"""Field round 11 of issue 21 (tests/cases/field_round_11.yaml), kind of r11-fi3732: MiniMax-M3's clamped SwiGLU-OAI
on split gate/up halves (vLLM's ``swigluoai_uninterleave``, vllm-project/vllm@v0.24.0 activation.py and
models/minimax_m3/nvidia/model.py) as an activation of its own, ``swiglu_oai_split``, distinct from gpt-oss's
interleaved ``swiglu_oai``: the math against float64, the config read, and runners whose facts name only gpt-oss's
activation refused for it (an exhaustive list), this install's adapters refused no_adapter.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import moe_select
from moe_select.errors import InputError
from moe_select.model_config import read_model_config
from moe_select.ops import gated_act
from moe_select.reference import _act64

from report_helpers import report_codes as _codes

# A MiniMax-M3-like config.json: the keys vLLM's MiniMaxM3MoE reads (hidden_act swigluoai, swiglu_limit, swiglu_alpha,
# swiglu_beta; num_local_experts, num_experts_per_tok, intermediate_size). The shape is MiniMax-M2's (the round's
# stand-in), not read from a published MiniMax-M3 checkpoint.
M3_CONFIG = {
    "architectures": ["MiniMaxM3ForCausalLM"], "model_type": "minimax_m3", "hidden_size": 3072,
    "intermediate_size": 1536, "num_local_experts": 256, "num_experts_per_tok": 8, "hidden_act": "swigluoai",
    "swiglu_limit": 7.0, "swiglu_alpha": 1.702, "swiglu_beta": 1.0, "scoring_func": "sigmoid",
}
MODEL = {"num_experts": 64, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 1024,
         "activation": "swiglu_oai_split", "swiglu_limit": 7.0, "routing": "renormalize"}


def _write(tmp_path: Path, cfg: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    return tmp_path


def _explain(**dep: Any) -> Any:
    return moe_select.explain({"tp": 1, "ep": 1, "a2a": "none", **dep})


# ---------------------------------------------------------------------------------------------- the math
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swiglu_oai_split_matches_float64_reference(seed):
    """ops.gated_act('swiglu_oai_split') in float32 equals the float64 reference on fresh random inputs (|err| <= 1e-5
    + 1e-5 * |ref|) at a random limit and random alpha/beta; values past the limit are clamped (gate above, up both
    sides), and at the defaults (1.702, 1.0) it is gpt-oss's formula on the same split halves."""
    g = torch.Generator().manual_seed(3732 + seed)
    h = torch.randn(64, 2 * 40, generator=g, dtype=torch.float64) * 6
    h[0, :2], h[0, 40:42] = torch.tensor([50.0, -50.0]), torch.tensor([50.0, -50.0])
    limit = float(torch.rand((), generator=g)) * 8 + 1.0
    alpha = float(torch.rand((), generator=g)) * 2 + 0.5
    beta = float(torch.rand((), generator=g)) * 2
    ref = _act64(h, "swiglu_oai_split", limit, swiglu_alpha=alpha, swiglu_beta=beta)
    got = gated_act(h.float(), "swiglu_oai_split", limit, swiglu_alpha=alpha, swiglu_beta=beta).double()
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), (got - ref).abs().max()
    # The formula at one point: min(g,l)*sigmoid(a*min(g,l))*(clamp(u,-l,l)+b), g = u = 50 past the limit.
    gl = torch.tensor(limit, dtype=torch.float64)
    assert torch.allclose(ref[0, 0], gl * torch.sigmoid(alpha * gl) * (gl + beta), rtol=1e-12)
    assert torch.allclose(_act64(h, "swiglu_oai_split", limit), _act64(h, "swiglu_oai", limit), rtol=1e-12)


def test_swiglu_oai_split_needs_its_limit():
    """No default limit (vLLM asserts clamp_limit for SWIGLUOAI_UNINTERLEAVE): both implementations raise."""
    h = torch.randn(2, 8)
    with pytest.raises(ValueError, match="swiglu_limit"):
        gated_act(h, "swiglu_oai_split")
    with pytest.raises(ValueError, match="swiglu_limit"):
        _act64(h.double(), "swiglu_oai_split", None)


def test_swiglu_oai_split_is_gated_and_needs_a_limit_in_the_shape():
    """Gated (w13 holds gate and up halves); an inline swiglu_oai_split without its limit is refused as input."""
    from moe_select.shape import ModelShape
    from moe_select.vocab_names import GATED_ACTIVATIONS
    assert "swiglu_oai_split" in GATED_ACTIVATIONS
    with pytest.raises(ValueError, match="needs swiglu_limit"):
        ModelShape(**{**MODEL, "swiglu_limit": None})
    assert ModelShape(**MODEL).swiglu_limit == 7.0


# ---------------------------------------------------------------------------------------------- the config read
def test_minimax_m3_config_reads_swiglu_oai_split(tmp_path):
    info = read_model_config(_write(tmp_path, M3_CONFIG))
    assert info.shape["activation"] == "swiglu_oai_split" and info.shape["swiglu_limit"] == 7.0
    assert "config.json:" in info.provenance["activation"] and "config.json:" in info.provenance["swiglu_limit"]


@pytest.mark.parametrize(("extra", "needle"), [({"swiglu_limit": None}, "without swiglu_limit"),
                                               ({"swiglu_alpha": 1.0}, "swiglu_alpha 1.0"),
                                               ({"swiglu_beta": 0.5}, "swiglu_beta 0.5")])
def test_minimax_m3_config_errors(tmp_path, extra, needle):
    """No limit, or an alpha/beta the activation is not defined with: an input error naming config.json, never
    another activation."""
    with pytest.raises(InputError, match=needle) as e:
        read_model_config(_write(tmp_path, {**M3_CONFIG, **extra}))
    assert "config.json:" in str(e.value)


# ---------------------------------------------------------------------------------------------- judged
def test_gpt_oss_only_lists_refuse_split_and_still_take_gpt_oss():
    """flashinfer_cutlass under vLLM (exhaustive activations: silu, swiglu_oai, relu2) is refused
    (activation_unsupported) for swiglu_oai_split, while gpt-oss's swiglu_oai is no activation refusal there."""
    r = _explain(gpu="B200", engine="vllm", quant="nvfp4", model=MODEL, runner="flashinfer_cutlass")
    assert r.plan is None and "activation_unsupported" in _codes(r), [(x.code, x.detail) for x in r.reasons]
    g = _explain(gpu="B200", engine="vllm", quant="nvfp4", runner="flashinfer_cutlass",
                 model={**MODEL, "activation": "swiglu_oai"})
    assert "activation_unsupported" not in _codes(g), [(x.code, x.detail) for x in g.reasons]


@pytest.mark.parametrize("runner", ["torch_native", "triton"])
def test_this_install_refuses_split_no_adapter(runner):
    """No adapter of this install claims swiglu_oai_split: refused no_adapter, never planned as gpt-oss's."""
    r = _explain(gpu="H200", engine="moe_select", quant="bf16", model=MODEL, runner=runner, cuda_graph=False)
    assert r.plan is None and "no_adapter" in _codes(r), [(x.code, x.detail) for x in r.reasons]
    assert any("swiglu_oai_split" in x.detail for x in r.reasons if x.code == "no_adapter")

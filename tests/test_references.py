"""The product's routing and dequantization against references written apart from them.

Routing: per token, in float64 and plain Python, from the models' published router code (Hugging Face
transformers: ``MixtralSparseMoeBlock``, ``Qwen3MoeSparseMoeBlock`` / ``OlmoeSparseMoeBlock``
(``norm_topk_prob``), ``DeepseekV3TopkRouter`` (noaux_tc: sigmoid + e_score_correction_bias, group score =
sum of each group's top-2, ``topk_group`` groups kept, weights = unbiased scores renormalised times
``routed_scaling_factor``), ``Llama4TextMoe`` (top-k on the logits, weight sigmoid(logit)), MiniMax-M2
(sigmoid + bias for the choice, no groups, renormalised). Dequantization: :func:`moe_select.ops` against
:func:`moe_select.reference.reference_dequantize` (bit-field e2m1 decode, block-by-block scales).
Fresh random inputs each run (the ``seed`` fixture prints the seed on failure)."""
from __future__ import annotations

import math

import pytest
import torch

from moe_select.ops import dequantize_named, quantize_named
from moe_select.reference import reference_dequantize
from moe_select.routing import route


def _softmax(row):
    m = max(row)
    ex = [math.exp(v - m) for v in row]
    s = sum(ex)
    return [v / s for v in ex]


def _topk(values, k):
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def ref_route(logits, method, k, *, n_group=None, topk_group=None, scale=None, bias=None):
    """Per token, from the published formulas; returns {token: {expert: weight}}."""
    out = []
    for row in logits.double().tolist():
        if method in ("softmax_topk", "renormalize"):
            p = _softmax(row)
            ids = _topk(p, k)
            w = [p[i] for i in ids]
            if method == "renormalize":
                w = [v / sum(w) for v in w]
        elif method == "llama4":
            ids = _topk(row, k)
            w = [1 / (1 + math.exp(-row[i])) for i in ids]
        elif method in ("sigmoid_topk", "deepseek_v3"):
            s = [1 / (1 + math.exp(-v)) for v in row]
            b = bias.double().tolist() if bias is not None else [0.0] * len(row)
            choice = [s[i] + b[i] for i in range(len(row))]
            if method == "deepseek_v3":
                e = len(row)
                per = e // n_group
                gscore = [sum(sorted(choice[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(n_group)]
                keep = set(_topk(gscore, topk_group))
                choice = [c if i // per in keep else -math.inf for i, c in enumerate(choice)]
            ids = _topk(choice, k)
            w = [s[i] for i in ids]
            w = [v / sum(w) for v in w]
            if method == "deepseek_v3":
                w = [v * (scale or 1.0) for v in w]
        else:
            raise ValueError(method)
        out.append(dict(zip(ids, w)))
    return out


def _as_dicts(w, ids):
    return [dict(zip(i.tolist(), x.tolist())) for i, x in zip(ids, w)]


@pytest.mark.parametrize("method", ["softmax_topk", "renormalize", "llama4", "sigmoid_topk"])
def test_routing_matches_the_published_formulas(seed, method):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(37, 64, generator=g) * 2
    bias = torch.randn(64, generator=g) * 0.5 if method == "sigmoid_topk" else None
    w, ids = route(logits, method, 6, correction_bias=bias)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == ids.shape == (37, 6)
    ref = ref_route(logits, method, 6, bias=bias)
    for got, want in zip(_as_dicts(w, ids), ref):
        assert set(got) == set(want)
        for e in want:
            assert got[e] == pytest.approx(want[e], rel=1e-5, abs=1e-7)
    if method in ("renormalize", "sigmoid_topk"):
        assert torch.allclose(w.sum(dim=1), torch.ones(37), atol=1e-5)


def test_deepseek_v3_group_limited_routing(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(29, 256, generator=g)
    bias = torch.randn(256, generator=g) * 0.3
    w, ids = route(logits, "deepseek_v3", 8, n_group=8, topk_group=4, routed_scaling_factor=2.5, correction_bias=bias)
    ref = ref_route(logits, "deepseek_v3", 8, n_group=8, topk_group=4, scale=2.5, bias=bias)
    for got, want in zip(_as_dicts(w, ids), ref):
        assert set(got) == set(want)
        assert sum(got.values()) == pytest.approx(2.5, rel=1e-5)  # renormalised, then scaled
        for e in want:
            assert got[e] == pytest.approx(want[e], rel=1e-5)
    groups = (ids.long() // 32)
    assert all(len(set(r.tolist())) <= 4 for r in groups)  # at most topk_group groups per token


@pytest.mark.parametrize("quant", ["bf16", "fp16", "fp8_tensor", "fp8_channel", "fp8_block", "mxfp4", "nvfp4"])
def test_ops_dequantize_equals_the_independent_reference(seed, quant):
    g = torch.Generator().manual_seed(seed)
    n, k = (200, 320) if quant not in ("mxfp4", "nvfp4") else (48, 96)  # fp8_block: partial blocks at both edges
    w = torch.randn(3, n, k, generator=g) * 0.7
    q, s = quantize_named(w, quant)
    ours = dequantize_named(q, s, quant).double()
    ref = reference_dequantize(q, s, quant)
    assert ours.shape == ref.shape == (3, n, k)
    assert torch.allclose(ours, ref, rtol=2**-23, atol=0)  # ours rounds to float32 once
    # and the quantization itself is faithful: within the format's rounding of the original
    bound = {"bf16": 2**-8, "fp16": 2**-11, "fp8_tensor": 2**-3, "fp8_channel": 2**-3, "fp8_block": 2**-3,
             "mxfp4": 0.5, "nvfp4": 0.5}[quant]
    assert ((ref - w.double()).abs() <= bound * w.double().abs().amax() + 1e-12).all()

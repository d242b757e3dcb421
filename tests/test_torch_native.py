"""torch_native against the float64 reference, on fresh random inputs, with stated tolerances.

Tolerances (max |out - ref| / max |ref|) are the one table's (``reference.TOLERANCE``, from
:func:`moe_select.formats.tolerance`): float32 compute with float32 in/out 1e-4; bf16 in/out 1.56e-2 (4 bf16
roundings); fp16 1.95e-3. FP8, MXFP4 and NVFP4 formats: the reference uses the same dequantized weights, so
only the bf16 activations and output round (bf16's 1.56e-2). Tests that draw fresh inputs take the ``seed``
fixture (printed on failure, ``MOE_SELECT_TEST_SEED`` replays it); the others use fixed seeds.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_select.backends.torch_native import TorchNativeCore
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import quantize
from moe_select.reference import reference_dequantize, TOLERANCE, reference_moe, rel_error
from moe_select.routing import route
from moe_select.runner import MoeRunner


class _Plan:
    runner, a2a = "torch_native", "none"


def make_runner(spec: LayerSpec) -> MoeRunner:
    from moe_select.backends.a2a.dispatch_none import NoDispatch

    return MoeRunner(_Plan(), spec, TorchNativeCore(spec, "cpu"), NoDispatch(spec), torch.device("cpu"))


def inputs(spec: LayerSpec, tokens: int, seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    e = spec.num_local_experts
    w13 = torch.randn(e, spec.w13_rows, spec.hidden_size, generator=g) / spec.hidden_size ** 0.5
    w2 = torch.randn(e, spec.hidden_size, spec.intermediate_size, generator=g) / spec.intermediate_size ** 0.5
    x = torch.randn(tokens, spec.hidden_size, generator=g).to(dtype)
    wts, ids = route(torch.randn(tokens, spec.num_experts, generator=g), "renormalize", spec.top_k)
    return x, ids, wts, w13, w2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2", "swiglu_oai"])
def test_matches_float64_reference(dtype, activation, seed):
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=48, activation=activation,
                     quant={torch.float16: "fp16"}.get(dtype, "bf16"))
    x, ids, wts, w13, w2 = inputs(spec, 24, seed=seed)
    x, w13, w2 = x.to(dtype), w13.to(dtype), w2.to(dtype)
    r = make_runner(spec)
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2))
    assert out.dtype == dtype and out.abs().max() > 0
    err = rel_error(out, reference_moe(x, ids, wts, w13, w2, activation))
    assert err <= TOLERANCE[str(dtype).removeprefix("torch.")], f"rel_error {err:.3g} (seed {seed})"


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_channel", "fp8_block"])
def test_fp8_formats_by_dequantization(quant):
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=128, quant=quant)
    x, ids, wts, w13, w2 = inputs(spec, 16, seed=7)
    q13, s13 = quantize(w13, quant)
    q2, s2 = quantize(w2, quant)
    assert q13.dtype == torch.float8_e4m3fn
    r = make_runner(spec)
    xb = x.to(torch.bfloat16)
    out = r.run(xb, ids, wts, r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2))
    ref = reference_moe(xb, ids, wts, reference_dequantize(q13, {"scale": s13}, quant), reference_dequantize(q2, {"scale": s2}, quant))
    assert rel_error(out, ref) <= TOLERANCE["bfloat16"]
    # the quantization itself is close to the float weights (e4m3: 3 mantissa bits)
    assert rel_error(reference_dequantize(q13, {"scale": s13}, quant), w13.double()) < 0.07


def test_fp8_block_scale_shape_is_checked():
    spec = LayerSpec(num_experts=2, top_k=1, hidden_size=256, intermediate_size=128, quant="fp8_block")
    q13, s13 = quantize(torch.randn(2, 256, 256), "fp8_block")
    q2, s2 = quantize(torch.randn(2, 256, 128), "fp8_block")
    with pytest.raises(RunnerInputError, match=r"ceil\(N/128\)"):
        make_runner(spec).prepare_weights(q13, q2, w13_scale=s13[:, :1], w2_scale=s2)
    with pytest.raises(RunnerInputError, match="w13_scale is required"):
        make_runner(spec).prepare_weights(q13, q2)


def test_uneven_routing_empty_experts_and_one_hot_expert():
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=32, intermediate_size=16)
    x, _, _, w13, w2 = inputs(spec, 12, seed=3)
    ids = torch.stack([torch.full((12,), 5), torch.full((12,), 2)], 1).int()  # all tokens on experts 5 and 2
    wts = torch.rand(12, 2, generator=torch.Generator().manual_seed(4))
    r = make_runner(spec)
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2))
    assert rel_error(out, reference_moe(x, ids, wts, w13, w2)) <= TOLERANCE["float32"]


def test_expert_parallel_shards_sum_to_the_layer():
    full = LayerSpec(num_experts=8, top_k=3, hidden_size=32, intermediate_size=16)
    x, ids, wts, w13, w2 = inputs(full, 10, seed=11)
    total = torch.zeros(10, 32)
    for rank in range(4):
        spec = LayerSpec(num_experts=8, top_k=3, hidden_size=32, intermediate_size=16, ep=4, ep_rank=rank)
        sl = slice(spec.expert_offset, spec.expert_offset + spec.num_local_experts)
        r = make_runner(spec)
        total += r.run(x, ids, wts, r.prepare_weights(w13[sl], w2[sl]))
    assert rel_error(total, reference_moe(x, ids, wts, w13, w2)) <= TOLERANCE["float32"]


def test_ids_of_minus_one_are_skipped():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=16, intermediate_size=8)
    x, ids, wts, w13, w2 = inputs(spec, 6, seed=5)
    ids = ids.clone()
    ids[:, 1] = -1
    r = make_runner(spec)
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2))
    assert rel_error(out, reference_moe(x, ids, wts, w13, w2)) <= TOLERANCE["float32"]


@settings(max_examples=25, deadline=None)
@given(e=st.sampled_from([1, 2, 4, 8]), k=st.integers(1, 4), h=st.integers(1, 40), i=st.integers(1, 24),
       t=st.integers(1, 20), seed=st.integers(0, 10_000), act=st.sampled_from(["silu", "gelu", "relu2", "swiglu_oai"]))
def test_property_any_shape_matches_reference(e, k, h, i, t, seed, act):
    k = min(k, e)
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, activation=act)
    x, ids, wts, w13, w2 = inputs(spec, t, seed)
    r = make_runner(spec)
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2))
    assert rel_error(out, reference_moe(x, ids, wts, w13, w2, act)) <= TOLERANCE["float32"]


@pytest.mark.parametrize("bad, message", [
    (lambda x, i, w: (x[:, :-1], i, w), r"hidden_states must be \[T, H=32\]"),
    (lambda x, i, w: (x, i[:, :1], w), r"topk_ids must be \[T=4, K=2\]"),
    (lambda x, i, w: (x, i.float(), w), "topk_ids must be int32 or int64"),
    (lambda x, i, w: (x, i, w.double()), "topk_weights must be float32"),
    (lambda x, i, w: (x.int(), i, w), "hidden_states must be bfloat16, float16, float32 or float64"),
    (lambda x, i, w: (x.to(torch.float8_e4m3fn), i, w), "hidden_states must be bfloat16, float16, float32 or float64"),
])
def test_run_input_errors_are_clear(bad, message):
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=8)
    x, ids, wts, w13, w2 = inputs(spec, 4, seed=1)
    r = make_runner(spec)
    weights = r.prepare_weights(w13, w2)
    with pytest.raises(RunnerInputError, match=message):
        r.run(*bad(x, ids, wts), weights)


def test_weights_shape_and_owner_are_checked():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=8)
    x, ids, wts, w13, w2 = inputs(spec, 4, seed=1)
    r = make_runner(spec)
    with pytest.raises(RunnerInputError, match=r"w13 must be \[E_local, 2\*I, H\] = \[4, 16, 32\]"):
        r.prepare_weights(w13[:, :8], w2)
    other = make_runner(spec).prepare_weights(w13, w2)
    with pytest.raises(RunnerInputError, match="this runner's prepare_weights"):
        r.run(x, ids, wts, other)


def test_ids_outside_the_experts_are_refused_on_cpu():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=16, intermediate_size=8)
    x, ids, wts, w13, w2 = inputs(spec, 6, seed=2)
    r = make_runner(spec)
    weights = r.prepare_weights(w13, w2)
    for bad in (ids + 100, ids - 100):
        with pytest.raises(RunnerInputError, match=r"global expert ids in \[0, 4\) or -1"):
            r.run(x, bad, wts, weights)


def test_unknown_scale_keyword_is_a_runner_input_error():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=16, intermediate_size=8)
    _, _, _, w13, w2 = inputs(spec, 1, seed=2)
    with pytest.raises(RunnerInputError, match="foo"):
        make_runner(spec).prepare_weights(w13, w2, foo=torch.ones(1))


def test_mxfp4_pack_and_scale_layout():
    from moe_select.ops import dequantize_mxfp4, quantize_mxfp4

    # representable values round-trip exactly; element 2j sits in the low nibble, 2j+1 in the high one
    v = torch.tensor([0.5, -1.0, 1.5, 2.0, -3.0, 4.0, 6.0, -6.0] * 8).reshape(1, 1, 64)
    q, s = quantize_mxfp4(v)
    assert q.dtype == torch.uint8 and q.shape == (1, 1, 32) and s.shape == (1, 1, 2)
    assert int(q[0, 0, 0]) == 0x1 | (0x8 | 0x2) << 4 and s.tolist() == [[[127, 127]]]
    assert torch.equal(dequantize_mxfp4(q, s), v)
    # random weights: each element within half an e2m1 step of its block's scale (6 * 2^e >= amax)
    w = torch.randn(3, 16, 96, generator=torch.Generator().manual_seed(9))
    q, s = quantize_mxfp4(w)
    err = (dequantize_mxfp4(q, s) - w).abs().reshape(3, 16, 3, 32)
    assert (err <= torch.exp2(s.float() - 127)[..., None] * 1.0 + 1e-7).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(1, 4, 48))
    with pytest.raises(ValueError, match=r"\[E, N, K/32\]"):
        dequantize_mxfp4(q, s[..., :1])


@pytest.mark.parametrize("activation", ["silu", "swiglu_oai"])
def test_mxfp4_by_dequantization(activation):
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=128, intermediate_size=64, quant="mxfp4", activation=activation)
    x, ids, wts, w13, w2 = inputs(spec, 12, seed=21)
    q13, s13 = quantize(w13, "mxfp4")
    q2, s2 = quantize(w2, "mxfp4")
    r = make_runner(spec)
    xb = x.to(torch.bfloat16)
    out = r.run(xb, ids, wts, r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2))
    ref = reference_moe(xb, ids, wts, reference_dequantize(q13, {"scale": s13}, "mxfp4"), reference_dequantize(q2, {"scale": s2}, "mxfp4"), activation)
    assert rel_error(out, ref) <= TOLERANCE["bfloat16"]
    with pytest.raises(RunnerInputError, match=r"w13 must be \[E_local, 2\*I, H/2 \(packed\)\] = \[4, 128, 64\]"):
        r.prepare_weights(w13.to(torch.bfloat16), q2, w13_scale=s13, w2_scale=s2)
    with pytest.raises(RunnerInputError, match="mxfp4 weights must be torch.uint8"):
        r.prepare_weights(q13.view(torch.int8), q2, w13_scale=s13, w2_scale=s2)


def test_mxfp4_plans_on_cpu_with_the_block_constraint():
    import moe_select

    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "mxfp4", "model": {"num_experts": 32, "top_k": 4, "hidden_size": 2880,
                            "moe_intermediate_size": 2880, "activation": "silu"}})
    assert plan.runner == "torch_native" and plan.activation_precision == "bf16"
    # gpt-oss's swiglu_oai comes with expert biases, which torch_native adds (test_expert_biases_match_the_reference)
    gpt_oss = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "mxfp4", "model": {"num_experts": 32, "top_k": 4, "hidden_size": 2880,
                               "moe_intermediate_size": 2880, "activation": "swiglu_oai"}})
    assert gpt_oss.runner == "torch_native"
    report = moe_select.explain({"arch": "cpu", "quant": "mxfp4", "runner": "torch_native", "engine": "moe_select", "model": {
        "num_experts": 32, "top_k": 4, "hidden_size": 2888, "moe_intermediate_size": 2880}})
    assert [r.code for r in report.reasons] == ["shape_unaligned"] and "2888" in report.reasons[0].detail


def test_nvfp4_scales_and_dequantization():
    from moe_select.ops import dequantize_nvfp4, quantize_nvfp4

    w = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(13))
    q, s, g = quantize_nvfp4(w)
    assert (q.dtype, s.dtype, g.dtype) == (torch.uint8, torch.float8_e4m3fn, torch.float32)
    assert q.shape == (2, 8, 32) and s.shape == (2, 8, 4) and g.shape == (2,)
    d = dequantize_nvfp4(q, s, g)
    # every element within one e2m1 step (at most 2 at the top of the range) of its block scale
    step = (s.float() * g[:, None, None]).repeat_interleave(16, dim=-1) * 2.0
    assert ((d - w).abs() <= step + 1e-6).all() and rel_error(d, w.double()) < 0.2
    with pytest.raises(ValueError, match="global_scale must be"):
        dequantize_nvfp4(q, s, g[:1])
    with pytest.raises(ValueError, match="quantize_nvfp4"):
        quantize(w, "nvfp4")


def test_nvfp4_by_dequantization():
    from moe_select.ops import quantize_nvfp4

    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=64, intermediate_size=32, quant="nvfp4")
    x, ids, wts, w13, w2 = inputs(spec, 10, seed=17)
    (q13, s13, g13), (q2, s2, g2) = quantize_nvfp4(w13), quantize_nvfp4(w2)
    r = make_runner(spec)
    xb = x.to(torch.bfloat16)
    out = r.run(xb, ids, wts, r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, w13_global_scale=g13, w2_global_scale=g2))
    ref = reference_moe(xb, ids, wts, reference_dequantize(q13, {"scale": s13, "global_scale": g13}, "nvfp4"), reference_dequantize(q2, {"scale": s2, "global_scale": g2}, "nvfp4"))
    assert rel_error(out, ref) <= TOLERANCE["bfloat16"]
    with pytest.raises(RunnerInputError, match="global_scale"):
        r.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2)


def test_scales_must_be_float_tensors():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=128, intermediate_size=64, quant="fp8_channel")
    _, _, _, w13, w2 = inputs(spec, 1, seed=3)
    (q13, s13), (q2, s2) = quantize(w13, "fp8_channel"), quantize(w2, "fp8_channel")
    r = make_runner(spec)
    with pytest.raises(RunnerInputError, match="w13_scale must be a torch.Tensor, got float"):
        r.prepare_weights(q13, q2, w13_scale=1.0, w2_scale=s2)
    with pytest.raises(RunnerInputError, match="scales must be float32"):
        r.prepare_weights(q13, q2, w13_scale=s13.long(), w2_scale=s2)


def test_nvfp4_global_scale_dtype_and_values():
    from moe_select.ops import dequantize_nvfp4, quantize_nvfp4

    q, s, g = quantize_nvfp4(torch.randn(2, 4, 32))
    with pytest.raises(ValueError, match="float32"):
        dequantize_nvfp4(q, s, g.long())
    with pytest.raises(ValueError, match="non-finite"):
        dequantize_nvfp4(q, s, torch.tensor([float("nan"), 1.0]))


def test_llama4_weight_on_the_expert_input(seed):
    """llama4 routing: the routing weight multiplies the expert's input (Llama4TextMoe), not its output;
    with a nonlinear activation the two differ, and the reference computes the input form."""
    g = torch.Generator().manual_seed(seed)
    spec = LayerSpec(num_experts=8, top_k=1, hidden_size=64, intermediate_size=32, weight_on_input=True)
    core = TorchNativeCore(spec, "cpu")
    w13, w2 = torch.randn(8, 64, 64, generator=g) / 8, torch.randn(8, 64, 32, generator=g) / 6
    x = torch.randn(5, 64, generator=g)
    ids = torch.randint(0, 8, (5, 1), generator=g, dtype=torch.int32)
    wts = torch.rand(5, 1, generator=g) * 0.9 + 0.1
    out = core.forward(x, ids, wts, core.prepare_weights(w13, w2))
    ref_in = reference_moe(x, ids, wts, w13, w2, weight_on_input=True)
    ref_out = reference_moe(x, ids, wts, w13, w2)
    assert rel_error(out, ref_in) < 1e-5
    assert rel_error(ref_out, ref_in) > 1e-3  # the two forms really differ: a test that can fail


def test_a_scale_without_an_expert_dimension_is_a_runner_input_error():
    """A 0-d NVFP4 global scale raised IndexError while the error message was built (break-it session)."""
    import moe_select
    from moe_select.errors import RunnerInputError
    from moe_select.ops import quantize_named
    from moe_select.registry import Registry

    plan = moe_select.plan({"arch": "cpu", "engine": "moe_select", "quant": "nvfp4", "model": {"num_experts": 4, "top_k": 2, "hidden_size": 64,
                                                                       "moe_intermediate_size": 32}})
    runner = moe_select.resolve(plan, registry=Registry())
    g = torch.Generator().manual_seed(3)
    (q13, s13), (q2, s2) = (quantize_named(torch.randn(4, *shape, generator=g) / 8, "nvfp4") for shape in ((64, 64), (64, 32)))
    with pytest.raises(RunnerInputError, match=r"global_scale must be \[E\] = \[4\], got shape \[\]"):
        runner.prepare_weights(q13, q2, w13_scale=s13["scale"], w2_scale=s2["scale"], w13_global_scale=torch.tensor(1.0),
                               w2_global_scale=s2["global_scale"])


@pytest.mark.parametrize("activation, on_input", [("swiglu_oai", False), ("silu", False), ("swiglu_oai", True)])
def test_expert_biases_match_the_reference(activation, on_input, seed):
    """Expert biases (gpt-oss): ``w13_bias`` before the activation, ``w2_bias`` before the routing weight (and
    after the weighted input with llama4-style routing), float32 in and out against float64 (1e-4)."""
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=48, activation=activation, quant="bf16",
                     weight_on_input=on_input)
    x, ids, wts, w13, w2 = inputs(spec, 24, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    b13, b2 = torch.randn(8, spec.w13_rows, generator=g) * 0.3, torch.randn(8, 64, generator=g) * 0.3
    r = make_runner(spec)
    out = r.run(x, ids, wts, r.prepare_weights(w13, w2, w13_bias=b13, w2_bias=b2))
    ref = reference_moe(x, ids, wts, w13, w2, activation, weight_on_input=on_input, w13_bias=b13, w2_bias=b2)
    assert rel_error(out, ref) <= 1e-4
    no_bias = reference_moe(x, ids, wts, w13, w2, activation, weight_on_input=on_input)
    assert rel_error(no_bias, ref) > 0.05                     # the biases matter at this scale


def test_reference_biases_follow_gpt_oss_expert():
    """The reference's biased swiglu_oai against the gpt-oss expert as transformers writes it
    (``GptOssExperts.forward``: ``gate_up = x @ gate_up_proj + gate_up_proj_bias``, gate = even columns, up =
    odd columns, ``gate.clamp(max=limit)``, ``up.clamp(-limit, limit)``, ``glu = gate * sigmoid(gate * 1.702)``,
    ``(up + 1) * glu @ down_proj + down_proj_bias``), one expert, one token, float64."""
    g = torch.Generator().manual_seed(5)
    h, i, lim = 16, 8, 3.0
    x = torch.randn(1, h, generator=g, dtype=torch.float64) * 2
    gate_up = torch.randn(h, 2 * i, generator=g, dtype=torch.float64)      # interleaved columns, as transformers
    gate_up_bias = torch.randn(2 * i, generator=g, dtype=torch.float64)
    down = torch.randn(i, h, generator=g, dtype=torch.float64)
    down_bias = torch.randn(h, generator=g, dtype=torch.float64)
    gu = x @ gate_up + gate_up_bias
    gate, up = gu[..., ::2].clamp(max=lim), gu[..., 1::2].clamp(-lim, lim)
    want = ((up + 1) * gate * torch.sigmoid(gate * 1.702)) @ down + down_bias
    # canonical layout: w13 [2I, H] gate rows then up rows
    w13 = torch.cat([gate_up[:, ::2].t(), gate_up[:, 1::2].t()])[None]
    b13 = torch.cat([gate_up_bias[::2], gate_up_bias[1::2]])[None]
    got = reference_moe(x, torch.tensor([[0]]), torch.tensor([[1.0]]), w13, down.t()[None], "swiglu_oai",
                        swiglu_limit=lim, w13_bias=b13, w2_bias=down_bias[None])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_bias_shapes_are_checked():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16, activation="swiglu_oai", quant="bf16")
    core = TorchNativeCore(spec, "cpu")
    w13, w2 = torch.randn(4, 32, 32), torch.randn(4, 32, 16)
    with pytest.raises(RunnerInputError, match=r"w13_bias must be a float tensor of shape \[4, 32\]"):
        core.prepare_weights(w13, w2, w13_bias=torch.zeros(4, 16))
    with pytest.raises(RunnerInputError, match=r"w2_bias must be a float tensor of shape \[4, 32\].*torch.int64"):
        core.prepare_weights(w13, w2, w2_bias=torch.zeros(4, 32, dtype=torch.int64))
    with pytest.raises(RunnerInputError, match="w2_bias is on meta; this core runs on cpu"):
        core.prepare_weights(w13, w2, w2_bias=torch.empty(4, 32, device="meta"))
    with pytest.raises(RunnerInputError, match="w13_bias must be a float tensor .* got list"):
        core.prepare_weights(w13, w2, w13_bias=[0.0] * 32)

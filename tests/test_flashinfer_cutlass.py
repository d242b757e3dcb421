"""CPU tests of the flashinfer_cutlass adapter (backends/flashinfer_cutlass.py) and of the JIT facts.

FlashInfer's CUTLASS module is never built or run here (no GPU; its sm90 build takes ~50 minutes).
What is tested: the exact keyword arguments the adapter passes to ``cutlass_fused_moe`` (a recording
stand-in), and that the converted weights and scale lists give the float64 reference when read the
way FlashInfer 0.6.4's source reads them (``emulate``: fc1 linear half rows [0, I), gate rows
[I, 2I); FP8 per-tensor dequant/quant scales from ``getQuantParams``; 128x128 block scales).
Tolerances: bf16 3e-2, fp8 1e-1 (rel_error against the float64 reference, fresh random inputs).
"""
from __future__ import annotations

import pytest
import torch

import moe_select
from moe_select.backends import flashinfer_cutlass as fic
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import BLOCK, FP8_DTYPE, gated_act, quantize
from moe_select.reference import reference_dequantize, reference_moe, rel_error
from moe_select.registry import Registry
from moe_select.resolver import check_environment

pytestmark = pytest.mark.flashinfer  # needs flashinfer-python: CI installs it after the README commands
flashinfer = pytest.importorskip("flashinfer", reason="flashinfer-python is an optional extra ([flashinfer])")
from flashinfer.fused_moe import ActivationType  # noqa: E402


class Recorder:
    """Stands in for cutlass_fused_moe: records the kwargs, returns ``[output]`` like 0.6.4."""

    def __init__(self, fn=None):
        self.calls, self.fn = [], fn

    def __call__(self, **kw):
        self.calls.append(kw)
        if self.fn is not None:
            kw["output"].copy_(self.fn(**kw))
        return [kw["output"]]


def _blocks(s, n, k):
    return s.repeat_interleave(BLOCK, 1)[:, :n].repeat_interleave(BLOCK, 2)[:, :, :k]


def emulate(spec: LayerSpec):
    """float32 model of cutlass_fused_moe's arithmetic as its 0.6.4 source describes it."""
    def fn(*, input, token_selected_experts, token_final_scales, fc1_expert_weights, fc2_expert_weights,
           quant_scales, ep_size, ep_rank, use_deepseek_fp8_block_scale, activation_type, output, **kw):
        e_local, i = fc2_expert_weights.shape[0], fc2_expert_weights.shape[2]
        fc1, fc2 = fc1_expert_weights.float(), fc2_expert_weights.float()
        x = input.float()
        if input.dtype == FP8_DTYPE:                       # FP8 per-tensor
            fc1_deq, fc2_q, fc2_deq, _ = quant_scales
        elif use_deepseek_fp8_block_scale:
            fc1 = fc1 * _blocks(quant_scales[0], fc1.shape[1], fc1.shape[2])
            fc2 = fc2 * _blocks(quant_scales[1], fc2.shape[1], fc2.shape[2])
        out = torch.zeros(x.shape[0], fc2.shape[1])
        for t in range(x.shape[0]):
            for k, gid in enumerate(token_selected_experts[t].tolist()):
                e = gid - ep_rank * e_local
                if not 0 <= e < e_local:
                    continue
                g = fc1[e] @ x[t]
                if input.dtype == FP8_DTYPE:
                    g = g * fc1_deq[e]
                if activation_type == ActivationType.Relu2:
                    a = torch.relu(g) ** 2
                else:                                      # linear half first, gate second
                    canon = torch.cat([g[i:], g[:i]])
                    name = {ActivationType.Swiglu: "silu", ActivationType.Geglu: "gelu",
                            ActivationType.SwigluBias: "swiglu_oai"}[activation_type]
                    a = gated_act(canon, name, float(kw["swiglu_limit"][e]) if "swiglu_limit" in kw else None)
                if input.dtype == FP8_DTYPE:
                    a = (a * fc2_q).clamp(-448, 448).to(FP8_DTYPE).float()
                y = fc2[e] @ a
                if input.dtype == FP8_DTYPE:
                    y = y * fc2_deq[e]
                out[t] += token_final_scales[t, k] * y
        return out.to(output.dtype)
    return fn


def inputs(spec, t=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, spec.hidden_size, generator=g).bfloat16()
    w13 = torch.randn(spec.num_local_experts, spec.w13_rows, spec.hidden_size, generator=g) / spec.hidden_size ** 0.5
    w2 = torch.randn(spec.num_local_experts, spec.hidden_size, spec.intermediate_size, generator=g) / spec.intermediate_size ** 0.5
    ids = torch.rand(t, spec.num_experts, generator=g).argsort(1)[:, :spec.top_k]
    ids[0, 0] = -1
    wts = torch.rand(t, spec.top_k, generator=g) + 0.1
    return x, ids, (wts / wts.sum(1, keepdim=True)).float(), w13, w2


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2", "swiglu_oai"])
def test_bf16_layout_gives_the_reference(activation):
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=32, activation=activation,
                     tp=2, ep=2, ep_rank=1, tp_rank=0, swiglu_limit=1.0 if activation == "swiglu_oai" else None)
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=Recorder(emulate(spec)))
    x, ids, wts, w13, w2 = inputs(spec)
    out = core.forward(x, ids, wts, core.prepare_weights(w13.bfloat16(), w2.bfloat16()))
    ref = reference_moe(x, ids, wts, w13.bfloat16(), w2.bfloat16(), activation, expert_offset=spec.expert_offset,
                        swiglu_limit=spec.swiglu_limit)
    assert rel_error(out, ref) < 3e-2


def test_fp8_tensor_scales_give_the_reference():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=64, intermediate_size=32, quant="fp8_tensor")
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=Recorder(emulate(spec)))
    x, ids, wts, w13, w2 = inputs(spec, seed=1)
    (q13, s13), (q2, s2) = quantize(w13, "fp8_tensor"), quantize(w2, "fp8_tensor")
    a13, a2 = x.float().abs().max() / 448, torch.tensor(0.05)      # static scales, as a checkpoint gives
    out = core.forward(x, ids, wts, core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, a13_scale=a13, a2_scale=a2))
    ref = reference_moe(x, ids, wts, reference_dequantize(q13, {"scale": s13}, "fp8_tensor"), reference_dequantize(q2, {"scale": s2}, "fp8_tensor"))
    assert rel_error(out, ref) < 1e-1


def test_fp8_block_scales_swapped_with_their_rows():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=256, quant="fp8_block")
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=Recorder(emulate(spec)))
    x, ids, wts, w13, w2 = inputs(spec, seed=2)
    (q13, s13), (q2, s2) = quantize(w13, "fp8_block"), quantize(w2, "fp8_block")
    out = core.forward(x, ids, wts, core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2))
    ref = reference_moe(x, ids, wts, reference_dequantize(q13, {"scale": s13}, "fp8_block"), reference_dequantize(q2, {"scale": s2}, "fp8_block"))
    assert rel_error(out, ref) < 3e-2           # activations stay bf16 in this emulation


def test_exact_call_arguments():
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=128, intermediate_size=64, quant="fp8_tensor",
                     tp=8, ep=8, ep_rank=3, tp_rank=0)
    rec = Recorder()
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=rec)
    x, ids, wts, w13, w2 = inputs(spec, t=5)
    (q13, s13), (q2, s2) = quantize(w13, "fp8_tensor"), quantize(w2, "fp8_tensor")
    w = core.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2, a13_scale=torch.tensor([0.02]), a2_scale=torch.tensor(0.5))
    out = core.forward(x, ids.to(torch.int64), wts, w)
    (kw,) = rec.calls
    assert set(kw) == {"input", "token_selected_experts", "token_final_scales", "fc1_expert_weights", "fc2_expert_weights",
                       "output_dtype", "quant_scales", "tp_size", "tp_rank", "ep_size", "ep_rank", "output",
                       "use_deepseek_fp8_block_scale", "activation_type"}
    assert kw["output"] is out and out.dtype == torch.bfloat16 and kw["output_dtype"] == torch.bfloat16
    assert kw["input"].dtype == FP8_DTYPE and torch.equal(kw["input"].float(), (x.float() / 0.02).clamp(-448, 448).to(FP8_DTYPE).float())
    assert kw["token_selected_experts"].dtype == torch.int32 and torch.equal(kw["token_selected_experts"], ids.int())
    assert kw["token_final_scales"] is wts
    assert (kw["tp_size"], kw["tp_rank"], kw["ep_size"], kw["ep_rank"]) == (1, 0, 8, 3)
    assert kw["activation_type"] == ActivationType.Swiglu and kw["use_deepseek_fp8_block_scale"] is False
    i = spec.intermediate_size
    assert torch.equal(kw["fc1_expert_weights"].view(torch.uint8), torch.cat([q13[:, i:], q13[:, :i]], 1).view(torch.uint8))
    assert kw["fc2_expert_weights"].data_ptr() == q2.data_ptr()
    fc1_deq, fc2_q, fc2_deq, a1 = kw["quant_scales"]
    assert fc1_deq.shape == (2,) and torch.allclose(fc1_deq, s13 * 0.02)
    assert fc2_q.dim() == 0 and float(fc2_q) == 2.0 and torch.allclose(fc2_deq, s2 * 0.5)
    assert a1.dim() == 0 and float(a1) == pytest.approx(0.02)
    assert all(t.dtype == torch.float32 for t in kw["quant_scales"])


def test_bf16_block_and_swiglu_arguments():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=128, activation="swiglu_oai", swiglu_limit=7.0)
    rec = Recorder()
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=rec)
    x, ids, wts, w13, w2 = inputs(spec, t=3)
    core.forward(x, ids, wts, core.prepare_weights(w13.bfloat16(), w2.bfloat16()))
    kw = rec.calls[0]
    assert kw["quant_scales"] is None and kw["activation_type"] == ActivationType.SwigluBias
    assert [kw[k].tolist() for k in ("swiglu_alpha", "swiglu_beta", "swiglu_limit")] == [[pytest.approx(1.702)] * 4, [1.0] * 4, [7.0] * 4]
    spec8 = LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=256, quant="fp8_block")
    rec8 = Recorder()
    core8 = fic.FlashInferCutlassCore(spec8, "cpu", kernel=rec8)
    (q13, s13), (q2, s2) = quantize(torch.randn(4, 512, 256), "fp8_block"), quantize(torch.randn(4, 256, 256), "fp8_block")
    core8.forward(x, ids, wts, core8.prepare_weights(q13, q2, w13_scale=s13, w2_scale=s2))
    kw = rec8.calls[0]
    assert kw["use_deepseek_fp8_block_scale"] is True and kw["input"].dtype == torch.bfloat16
    assert torch.equal(kw["quant_scales"][0], torch.cat([s13[:, 2:], s13[:, :2]], 1)) and torch.equal(kw["quant_scales"][1], s2)


def test_refusals_and_return_check():
    with pytest.raises(RunnerInputError, match="does not implement nvfp4"):
        fic.FlashInferCutlassCore(LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=256, quant="nvfp4"), "cpu")
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=64, intermediate_size=32, quant="fp8_tensor")
    core = fic.FlashInferCutlassCore(spec, "cpu", kernel=Recorder())
    q13, q2 = torch.zeros(4, 64, 64).to(FP8_DTYPE), torch.zeros(4, 64, 32).to(FP8_DTYPE)
    with pytest.raises(RunnerInputError, match="static activation scales"):
        core.prepare_weights(q13, q2, w13_scale=torch.ones(4), w2_scale=torch.ones(4))
    bf = fic.FlashInferCutlassCore(LayerSpec(num_experts=4, top_k=2, hidden_size=64, intermediate_size=32), "cpu",
                                   kernel=lambda **kw: [torch.empty_like(kw["output"])])
    w = bf.prepare_weights(torch.randn(4, 64, 64).bfloat16(), torch.randn(4, 64, 32).bfloat16())
    with pytest.raises(RuntimeError, match="output= tensor"):
        bf.forward(torch.randn(2, 64).bfloat16(), torch.zeros(2, 2, dtype=torch.int32), torch.ones(2, 2), w)
    # gpt-oss's expert biases are not passed to the kernel: refused, never dropped
    with pytest.raises(RunnerInputError, match="does not pass expert biases"):
        bf.prepare_weights(torch.randn(4, 64, 64).bfloat16(), torch.randn(4, 64, 32).bfloat16(), w2_bias=torch.zeros(4, 64))


def test_prebuilt_plan_has_no_jit_and_resolves():
    from test_flashinfer_facts import _env, _plan

    plan = _plan(True)
    assert plan.jit is None
    assert check_environment(plan, _env(True), require_prebuilt=True) == []
    runner = moe_select.resolve(plan, environment=_env(True), require_prebuilt=True, device="cpu", registry=Registry())
    assert isinstance(runner.core, fic.FlashInferCutlassCore)

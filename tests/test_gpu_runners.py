"""GPU tests of the torch_grouped_mm runner (marked ``gpu``; skipped without CUDA).

Correctness against the float64 reference on fresh random inputs, eager and replayed from a CUDA
graph (replay must equal eager bit for bit on new inputs copied into the captured buffers), for bf16,
fp16 (eager; capture is refused), fp8_channel (also with use_fast_accum) and fp8_tensor, with empty experts, all tokens on one
expert, expert-parallel ranks (ep_rank > 0, some ids on other ranks, a rank with no tokens) and -1 ids,
on both paths of the core: ``fused`` (torch.compile, the default on CUDA; it must compile here, and no
forward after ``prepare_weights`` may compile again) and ``eager``.
Tolerances (rel_error = max|out - ref| / max|ref|): bf16 3e-2, fp16 5e-3, FP8 1e-1 (moe_select.verify).
"""
from __future__ import annotations

import pytest
import torch

import moe_select
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import quantize
from moe_select.reference import reference_dequantize, reference_moe, rel_error
from moe_select.registry import Registry

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
TOL = {"bf16": 3e-2, "fp16": 5e-3, "fp8_channel": 1e-1, "fp8_tensor": 1e-1}
DT = {"fp16": torch.float16}


def _tgm():
    from moe_select.backends import torch_grouped_mm

    return torch_grouped_mm


def graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def build(spec, seed=0, path="fused"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    h, i = spec.hidden_size, spec.intermediate_size
    w13 = torch.randn(spec.num_local_experts, spec.w13_rows, h, device="cuda", generator=g) / h ** 0.5
    w2 = torch.randn(spec.num_local_experts, h, i, device="cuda", generator=g) / i ** 0.5
    (q13, s13), (q2, s2) = quantize(w13, spec.quant), quantize(w2, spec.quant)
    core = _tgm().TorchGroupedMMCore(spec, "cuda")
    scales = {} if s13 is None else {"w13_scale": s13, "w2_scale": s2}
    pw = core.prepare_weights(q13, q2, **scales)
    if spec.quant == "fp16":
        assert core.path == "eager"
    else:
        assert core.path == "fused", f"the fused path is the default on CUDA: {core!r}"
        core.set_path(path)
    return core, pw, reference_dequantize(q13, {"scale": s13}, spec.quant), reference_dequantize(q2, {"scale": s2}, spec.quant)


def routing(spec, t, seed, pool=None):
    """``t`` tokens, K distinct global experts each from ``pool`` (default: all), one id set to -1."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    pool = torch.arange(spec.num_experts, device="cuda") if pool is None else torch.as_tensor(pool, device="cuda")
    pick = torch.rand(t, len(pool), device="cuda", generator=g).argsort(1)[:, :spec.top_k]
    ids = pool[pick].to(torch.int32)
    if t > 2:
        ids[2, 0] = -1
    w = torch.rand(t, spec.top_k, device="cuda", generator=g) + 0.1
    x = torch.randn(t, spec.hidden_size, device="cuda", generator=g).to(DT.get(spec.quant, torch.bfloat16))
    return x, ids, (w / w.sum(1, keepdim=True)).float()


def check(spec, core, pw, d13, d2, x, ids, w, out):
    ref = reference_moe(x, ids, w, d13, d2, spec.activation, expert_offset=spec.expert_offset, swiglu_limit=spec.swiglu_limit)
    assert out.dtype == x.dtype and out.shape == x.shape and torch.isfinite(out).all()
    if ref.abs().max() == 0:
        assert (out == 0).all()
        return 0.0
    err = rel_error(out, ref)
    assert err < TOL[spec.quant], f"{spec.quant}: rel_error {err:.3g} >= {TOL[spec.quant]}"
    return err


def capture(core, pw, x, ids, w):
    static = [x.clone(), ids.clone(), w.clone()]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            core.forward(*static, pw)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = core.forward(*static, pw)
    return g, static, out


CASES = {  # name: (E, K, H, I, ep, ep_rank, pool of routed experts or None)
    "random": (32, 4, 512, 256, 1, 0, None),
    "empty_experts": (32, 4, 512, 256, 1, 0, [3, 9, 17, 30, 31]),
    "one_expert": (16, 1, 256, 128, 1, 0, [5]),
    "ep_rank3": (64, 8, 512, 256, 4, 3, None),
    "ep_rank_without_tokens": (64, 4, 256, 128, 4, 2, list(range(16))),
}


@pytest.mark.parametrize("path", ["fused", "eager"])
@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_tensor", "fp8_channel/fast_accum"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("t", [1, 77, 600])
def test_eager_and_graph_match_reference(quant, case, t, path):
    e, k, h, i, ep, rank, pool = CASES[case]
    quant, fast = quant.split("/")[0], quant.endswith("/fast_accum")
    spec = LayerSpec(num_experts=e, top_k=k, hidden_size=h, intermediate_size=i, quant=quant, ep=ep, ep_rank=rank)
    core, pw, d13, d2 = build(spec, seed=t, path=path)
    core.fast_accum = fast
    x, ids, w = routing(spec, t, seed=t + 1, pool=pool)
    before = graphs()
    check(spec, core, pw, d13, d2, x, ids, w, core.forward(x, ids, w, pw))
    g, static, out = capture(core, pw, x, ids, w)
    assert graphs() == before, "a forward after prepare_weights compiled"
    x2, ids2, w2 = routing(spec, t, seed=t + 2, pool=pool)           # fresh inputs into the captured buffers
    for dst, src in zip(static, (x2, ids2, w2)):
        dst.copy_(src)
    g.replay()
    eager = core.forward(x2, ids2, w2, pw)
    torch.cuda.synchronize()
    assert torch.equal(out, eager), f"graph replay differs from eager by {(out.float() - eager.float()).abs().max()}"
    check(spec, core, pw, d13, d2, x2, ids2, w2, out)


@pytest.mark.parametrize("path", ["fused", "eager"])
@pytest.mark.parametrize("activation", ["gelu", "relu2", "swiglu_oai"])
def test_other_activations(activation, path):
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=512, intermediate_size=256, activation=activation,
                     swiglu_limit=7.0 if activation == "swiglu_oai" else None)
    core, pw, d13, d2 = build(spec, seed=5, path=path)
    x, ids, w = routing(spec, 300, seed=6)
    x = (x.float() * 3).to(x.dtype)                                   # make the swiglu clamp engage
    check(spec, core, pw, d13, d2, x, ids, w, core.forward(x, ids, w, pw))


def test_fp16_eager_matches_and_capture_is_refused():
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=256, intermediate_size=128, quant="fp16", ep=2, ep_rank=1)
    core, pw, d13, d2 = build(spec, seed=7)
    x, ids, w = routing(spec, 65, seed=8)
    check(spec, core, pw, d13, d2, x, ids, w, core.forward(x, ids, w, pw))
    with pytest.raises(RunnerInputError, match="fp16 cannot be captured"):
        capture(core, pw, x, ids, w)


def test_resolved_runner_on_this_gpu_with_verify():
    model = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}
    for quant in ("bf16", "fp8_channel"):
        plan = moe_select.plan({"arch": "auto", "engine": "moe_select", "quant": quant, "model": model,
                                 "runner": "torch_grouped_mm"})
        runner = moe_select.resolve(plan, registry=Registry(), verify=True)
        assert runner.device.type == "cuda" and runner.name == "torch_grouped_mm"


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel"])
def test_fused_no_recompile_over_token_counts_modes_and_capture(quant):
    """After prepare_weights: forwards at many token counts, int64 ids, a [1, K] slice, inference mode
    and a capture compile nothing (dynamo's graph count stays)."""
    spec = LayerSpec(num_experts=64, top_k=8, hidden_size=1024, intermediate_size=384, quant=quant, ep=2, ep_rank=1)
    core, pw, d13, d2 = build(spec, seed=3)
    assert core.compile_s is not None and "path=fused" in repr(core)
    before = graphs()
    for t in (1, 2, 3, 16, 255, 256, 1024, 4099):
        x, ids, w = routing(spec, t, seed=t)
        ids_in = ids.long() if t % 2 else ids
        check(spec, core, pw, d13, d2, x, ids, w, core.forward(x, ids_in, w, pw))
    x, ids, w = routing(spec, 8, seed=9)
    check(spec, core, pw, d13, d2, x[3:4], ids[3:4], w[3:4], core.forward(x[3:4], ids[3:4], w[3:4], pw))
    with torch.inference_mode():
        x, ids, w = routing(spec, 33, seed=10)
        core.forward(x, ids, w, pw)
    capture(core, pw, *routing(spec, 100, seed=11))
    assert graphs() == before, "a forward after prepare_weights compiled"


def test_runner_repr_names_the_path():
    model = {"num_experts": 16, "top_k": 4, "hidden_size": 256, "moe_intermediate_size": 128, "activation": "silu",
             "routing": "renormalize"}
    runner = moe_select.resolve(moe_select.plan({"arch": "auto", "engine": "moe_select", "quant": "bf16", "model": model,
                                                "runner": "torch_grouped_mm"}))
    runner.prepare_weights(torch.randn(16, 256, 256, device="cuda").bfloat16(), torch.randn(16, 256, 128, device="cuda").bfloat16())
    assert repr(runner).endswith("path=fused)") and runner.core.fused_error is None


@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "mxfp4", "nvfp4"])
def test_float64_reference_on_the_gpu_equals_the_cpu_one(quant):
    """``run`` computes its float64 reference on the GPU it ran on: the same code on either device must give
    the same numbers (IEEE float64 both; only summation order may differ: 1e-12 relative)."""
    from moe_select.harness.weights import reference_output, routed_tokens

    model = {"hidden_size": 256, "moe_intermediate_size": 128, "num_experts": 8, "top_k": 2, "routing": "softmax_topk",
             "activation": "silu"}
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    x, ids, wts = routed_tokens(model, 16, seed)
    on_cpu, n_cpu = reference_output(model, quant, 1, seed, x, ids, wts, generate_on="cuda", device="cpu")
    on_gpu, n_gpu = reference_output(model, quant, 1, seed, x, ids, wts, generate_on="cuda", device="cuda")
    assert n_cpu == n_gpu and on_gpu.device.type == "cpu" and on_cpu.abs().max() > 0
    assert rel_error(on_gpu, on_cpu) < 1e-12, f"seed {seed}"

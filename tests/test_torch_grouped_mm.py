"""CPU tests of the torch_grouped_mm core (backends/torch_grouped_mm.py).

torch._grouped_mm runs on the CPU (PyTorch's per-group fallback), so the whole bf16/fp16/float32
pipeline runs here; torch._scaled_grouped_mm has no CPU kernel, so the FP8 path runs with an
emulation of it (dequantize, float32 grouped GEMM) that also asserts the layouts the CUDA kernel
requires. Every numerical check compares with the float64 reference on fresh random inputs.
Tolerances (rel_error = max|out - ref| / max|ref|): float32 weights 1e-4, bf16 3e-2, fp16 5e-3,
FP8 1e-1 (moe_select.verify's, with the measured error printed on failure).
"""
from __future__ import annotations

import shutil

import pytest
import torch

from moe_select.backends import torch_grouped_mm as tgm
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import FP8_DTYPE, quantize
from moe_select.reference import reference_dequantize, reference_moe, rel_error
from moe_select.registry import Registry


def make_inputs(spec: LayerSpec, t: int, seed: int, *, dtype=torch.bfloat16, ids=None):
    g = torch.Generator().manual_seed(seed)
    h, i = spec.hidden_size, spec.intermediate_size
    x = torch.randn(t, h, generator=g).to(dtype)
    w13 = torch.randn(spec.num_local_experts, spec.w13_rows, h, generator=g) / h ** 0.5
    w2 = torch.randn(spec.num_local_experts, h, i, generator=g) / i ** 0.5
    if ids is None:
        ids = torch.rand(t, spec.num_experts, generator=g).argsort(1)[:, :spec.top_k].to(torch.int32)
    wts = torch.rand(t, spec.top_k, generator=g) + 0.1
    return x, ids, (wts / wts.sum(1, keepdim=True)).float(), w13, w2


def ref(spec, x, ids, wts, w13, w2):
    return reference_moe(x, ids, wts, w13, w2, spec.activation, expert_offset=spec.expert_offset,
                         swiglu_limit=spec.swiglu_limit)


def fake_scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, out_dtype=None, **kw):
    """CPU stand-in for torch._scaled_grouped_mm (2d x 3d, row-wise scales) with its layout checks."""
    assert a.dtype == FP8_DTYPE and b.dtype == FP8_DTYPE
    assert a.stride(1) == 1 and b.stride(1) == 1 and b.stride(2) > 1, "a row-major, b column-major"
    assert scale_a.shape == (a.shape[0],) and scale_a.is_contiguous() and scale_a.dtype == torch.float32
    assert scale_b.shape == (b.shape[0], b.shape[2]) and scale_b.stride(1) == 1
    assert offs.dtype == torch.int32 and out_dtype == torch.bfloat16 and set(kw) <= {"use_fast_accum"}
    return torch._grouped_mm(a.float() * scale_a[:, None], b.float() * scale_b[:, None, :], offs=offs).to(out_dtype)


def run_core(spec, x, ids, wts, w13, w2, **scales):
    core = tgm.TorchGroupedMMCore(spec, "cpu")
    return core.forward(x, ids, wts, core.prepare_weights(w13, w2, **scales))


def test_route_plan_groups_and_rows():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(-1, 16, (37, 4), generator=g)
    e_local, off = 8, 8                                  # ep rank 1 of 2
    p = tgm.route_plan(ids, e_local, off)
    local = ids.reshape(-1) - off
    valid = (local >= 0) & (local < e_local)
    counts = torch.stack([(local == e).sum() for e in range(e_local)])
    ends = counts.cumsum(0)
    n = int(valid.sum())
    want = torch.where((ends > 0) | (torch.arange(e_local) == e_local - 1), ends + 1, 0)
    assert p.offs.dtype == torch.int32 and p.offs.tolist() == want.tolist()
    rows = p.rows.reshape(-1)
    assert (rows[~valid] == 0).all()
    vr = rows[valid]
    assert sorted(vr.tolist()) == list(range(1, n + 1))       # each local slot has its own row
    for slot, r in zip(valid.nonzero().squeeze(1).tolist(), vr.tolist()):
        assert int(p.tokens[r - 1]) == slot // 4              # the row holds the slot's token
        e = int(local[slot])
        lo = int(p.offs[e - 1]) if e else 0
        assert max(lo, 1) <= r < int(p.offs[e]) or (lo == 0 and r < int(p.offs[e]))


def test_route_plan_no_local_slot_puts_zero_row_in_last_group():
    p = tgm.route_plan(torch.full((3, 2), -1), 4, 0)
    assert p.offs.tolist() == [0, 0, 0, 1] and (p.rows == 0).all()


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2", "swiglu_oai"])
@pytest.mark.parametrize("ep_rank", [0, 1])
def test_float32_pipeline_matches_reference_tightly(activation, ep_rank):
    spec = LayerSpec(num_experts=12, top_k=3, hidden_size=64, intermediate_size=48, activation=activation,
                     ep=2, ep_rank=ep_rank, swiglu_limit=1.5 if activation == "swiglu_oai" else None)
    x, ids, wts, w13, w2 = make_inputs(spec, 29, seed=ep_rank + 7, dtype=torch.float32)
    ids[3, 1] = -1
    core = tgm.TorchGroupedMMCore(spec, "cpu")
    w = tgm.GroupedWeights(w13.contiguous().transpose(1, 2), w2.contiguous().transpose(1, 2))
    err = rel_error(core.forward(x, ids, wts, w), ref(spec, x, ids, wts, w13, w2))
    assert err < 1e-4, err


@pytest.mark.parametrize("quant,dtype,tol", [("bf16", torch.bfloat16, 3e-2), ("fp16", torch.float16, 5e-3)])
@pytest.mark.parametrize("case", ["random", "one_expert", "empty_experts", "ep_rank2", "no_tokens_here"])
def test_16bit_core_matches_reference(quant, dtype, tol, case):
    ep, rank = (4, 2) if case in ("ep_rank2", "no_tokens_here") else (1, 0)
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=128, intermediate_size=64, quant=quant, ep=ep, ep_rank=rank)
    t = 19
    ids = None
    if case == "one_expert":
        ids = torch.tensor([[5, 1, 2, 3]] * t)
        ids[:, 1:] = -1                                      # all tokens to expert 5 only
    elif case == "empty_experts":
        ids = torch.stack([torch.randperm(4)[:4] for _ in range(t)])  # experts 0-3 only: 12 empty groups
    elif case == "no_tokens_here":
        ids = torch.stack([torch.randperm(8)[:4] for _ in range(t)])   # experts 0-7 live on ranks 0, 1
    x, ids, wts, w13, w2 = make_inputs(spec, t, seed=3, dtype=dtype, ids=ids)
    out = run_core(spec, x, ids, wts, w13.to(dtype), w2.to(dtype))
    r = ref(spec, x, ids, wts, w13.to(dtype), w2.to(dtype))
    assert out.dtype == dtype and out.shape == x.shape
    if case == "no_tokens_here":
        assert (out == 0).all() and (r == 0).all()
    else:
        assert rel_error(out, r) < tol, rel_error(out, r)


def test_zero_tokens():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16)
    x, ids, wts, w13, w2 = make_inputs(spec, 0, seed=0)
    assert run_core(spec, x, ids, wts, w13.bfloat16(), w2.bfloat16()).shape == (0, 32)


@pytest.mark.parametrize("quant", ["fp8_channel", "fp8_tensor"])
@pytest.mark.parametrize("ep_rank", [0, 1])
def test_fp8_path_with_emulated_kernel(monkeypatch, quant, ep_rank):
    monkeypatch.setattr(torch, "_scaled_grouped_mm", fake_scaled_grouped_mm)
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=256, intermediate_size=128, quant=quant, ep=2, ep_rank=ep_rank)
    x, ids, wts, w13, w2 = make_inputs(spec, 33, seed=11 + ep_rank)
    (q13, s13), (q2, s2) = quantize(w13, quant), quantize(w2, quant)
    out = run_core(spec, x, ids, wts, q13, q2, w13_scale=s13, w2_scale=s2)
    err = rel_error(out, ref(spec, x, ids, wts, reference_dequantize(q13, {"scale": s13}, quant), reference_dequantize(q2, {"scale": s2}, quant)))
    print(f"{quant} rank {ep_rank}: rel_error {err:.3g}")
    assert 0 < err < 1e-1, err
    # a wrong scale is caught: the same weights with doubled w2 scales differ by ~1
    bad = run_core(spec, x, ids, wts, q13, q2, w13_scale=s13, w2_scale=s2 * 2)
    assert rel_error(bad, ref(spec, x, ids, wts, reference_dequantize(q13, {"scale": s13}, quant), reference_dequantize(q2, {"scale": s2}, quant))) > 0.5


def test_refusals():
    with pytest.raises(RunnerInputError, match="fp8_block"):
        tgm.TorchGroupedMMCore(LayerSpec(num_experts=4, top_k=2, hidden_size=256, intermediate_size=128, quant="fp8_block"), "cpu")
    with pytest.raises(RunnerInputError, match="multiple of 16"):
        tgm.TorchGroupedMMCore(LayerSpec(num_experts=4, top_k=2, hidden_size=264, intermediate_size=128, quant="fp8_channel"), "cpu")
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16)
    core = tgm.TorchGroupedMMCore(spec, "cpu")
    w13, w2 = torch.randn(4, 32, 32), torch.randn(4, 32, 16)
    with pytest.raises(RunnerInputError, match="w13: bf16 weights must be torch.bfloat16"):
        core.prepare_weights(w13, w2)
    with pytest.raises(RunnerInputError, match="take no scales"):
        core.prepare_weights(w13.bfloat16(), w2.bfloat16(), w13_scale=torch.ones(4))
    fp8 = tgm.TorchGroupedMMCore(LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16, quant="fp8_channel"), "cpu")
    with pytest.raises(RunnerInputError, match=r"w2_scale: fp8_channel scale must be \[E, N\] = \[4, 32\]"):
        fp8.prepare_weights(w13.to(FP8_DTYPE), w2.to(FP8_DTYPE), w13_scale=torch.ones(4, 32), w2_scale=torch.ones(4))
    with pytest.raises(RunnerInputError, match="w13_scale is required"):
        fp8.prepare_weights(w13.to(FP8_DTYPE), w2.to(FP8_DTYPE))


def test_register_is_explicit_and_idempotent():
    reg = Registry()
    tgm.register(reg)
    tgm.register(reg)
    assert reg.pairs() == {("torch_grouped_mm", "standard")}
    assert reg.core("torch_grouped_mm", "standard") is tgm.TorchGroupedMMCore


# --- fused path (torch.compile): on the CPU with the aot_eager backend (dynamo traces the same
# functions with fullgraph=True and dynamic shapes; Inductor's code generation is exercised on the
# H200 by tests/test_gpu_runners.py, and on the CPU by the one slow test below) ---------------------

@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(tgm, "FUSED_BACKEND", "aot_eager")


def _graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def test_fused_route_equals_route_plan():
    g = torch.Generator().manual_seed(4)
    for t, k, e_local, off in [(37, 4, 8, 8), (1, 8, 16, 0), (5, 2, 4, 12), (9, 3, 8, 0)]:
        ids = torch.randint(-1, 16, (t, k), generator=g)
        p = tgm.route_plan(ids, e_local, off)
        order, offs, rows = tgm._route_fused(ids.to(torch.int32), torch.arange(off, off + e_local, dtype=torch.int32))
        assert torch.equal(offs, p.offs) and torch.equal(rows, p.rows) and torch.equal(order, p.order)


def test_cpu_default_is_eager_and_says_so():
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16)
    core = tgm.TorchGroupedMMCore(spec, "cpu")
    assert core.path == "eager" and "path=eager" in repr(core)
    core.prepare_weights(torch.randn(4, 32, 32).bfloat16(), torch.randn(4, 32, 16).bfloat16())
    assert core.path == "eager" and core.compile_s is None
    with pytest.raises(RunnerInputError, match="not fp16"):
        tgm.TorchGroupedMMCore(LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16, quant="fp16"), "cpu",
                               fused=True)
    assert tgm.TorchGroupedMMCore(spec, "cpu", fused=False).path == "eager"


@pytest.mark.parametrize("quant", ["bf16", "fp8_channel", "fp8_tensor"])
@pytest.mark.parametrize("activation", ["silu", "swiglu_oai", "relu2"])
def test_fused_path_matches_reference_without_recompiles(aot_eager, monkeypatch, quant, activation):
    monkeypatch.setattr(torch, "_scaled_grouped_mm", fake_scaled_grouped_mm)
    spec = LayerSpec(num_experts=16, top_k=4, hidden_size=128, intermediate_size=64, quant=quant, ep=2, ep_rank=1,
                     activation=activation, swiglu_limit=1.5 if activation == "swiglu_oai" else None)
    _, _, _, w13, w2 = make_inputs(spec, 1, seed=21)
    (q13, s13), (q2, s2) = quantize(w13, quant), quantize(w2, quant)
    scales = {} if s13 is None else {"w13_scale": s13, "w2_scale": s2}
    d13, d2 = reference_dequantize(q13, {"scale": s13}, quant), reference_dequantize(q2, {"scale": s2}, quant)
    core = tgm.TorchGroupedMMCore(spec, "cpu", fused=True)
    assert core.path == "pending"
    pw = core.prepare_weights(q13, q2, **scales)
    assert core.path == "fused" and "path=fused" in repr(core) and core.compile_s is not None
    eager = tgm.TorchGroupedMMCore(spec, "cpu", fused=False)
    tol = 3e-2 if quant == "bf16" else 1e-1
    before = _graphs()
    for t in (1, 2, 19, 40):
        x, ids, wts, _, _ = make_inputs(spec, t, seed=30 + t)
        ids[0, 0] = -1
        if t > 2:
            ids[:2] = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])            # rank 0's experts only
        out = core.forward(x, ids if t % 2 else ids.to(torch.int64), wts, pw)
        r = ref(spec, x, ids, wts, d13, d2)
        assert out.dtype == x.dtype and out.shape == x.shape
        if r.abs().max() > 0:
            assert rel_error(out, r) < tol, rel_error(out, r)
            assert rel_error(out, r) < 2 * rel_error(eager.forward(x, ids, wts, pw), r) + 1e-2
        else:
            assert (out == 0).all()
    with torch.inference_mode():                                         # inference tensors: warmed up too
        x, ids, wts, _, _ = make_inputs(spec, 7, seed=3)
        core.forward(x, ids, wts, pw)
    assert _graphs() == before, "a forward after prepare_weights compiled again"
    x, ids, wts, _, _ = make_inputs(spec, 0, seed=0)
    assert core.forward(x, ids, wts, pw).shape == (0, 128)              # no tokens: eager path, no compile


def test_set_path_switches_and_runner_repr_names_it(aot_eager):
    from moe_select.runner import MoeRunner

    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=32)
    x, ids, wts, w13, w2 = make_inputs(spec, 11, seed=8)
    core = tgm.TorchGroupedMMCore(spec, "cpu")
    runner = MoeRunner(type("P", (), {"runner": "torch_grouped_mm", "a2a": "none"})(), spec, core, None, "cpu")
    pw = core.prepare_weights(w13.bfloat16(), w2.bfloat16())
    assert core.path == "eager" and repr(runner).endswith("path=eager)")
    out_eager = core.forward(x, ids, wts, pw)
    core.set_path("fused")
    assert core.path == "fused" and repr(runner).endswith("path=fused)")
    out_fused = core.forward(x, ids, wts, pw)
    assert rel_error(out_fused, ref(spec, x, ids, wts, w13.bfloat16(), w2.bfloat16())) < 3e-2
    assert (out_fused.float() - out_eager.float()).abs().max() <= 0.05 * out_eager.float().abs().max()
    core.set_path("eager")
    assert torch.equal(core.forward(x, ids, wts, pw), out_eager)
    with pytest.raises(ValueError):
        core.set_path("fast")


def test_failed_compile_is_reported_not_silent(monkeypatch, caplog):
    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(tgm, "FUSED_BACKEND", broken)
    spec = LayerSpec(num_experts=4, top_k=2, hidden_size=32, intermediate_size=16)
    w13, w2 = torch.randn(4, 32, 32).bfloat16(), torch.randn(4, 32, 16).bfloat16()
    with pytest.raises(RunnerInputError, match="fused path did not compile.*no compiler here"):
        tgm.TorchGroupedMMCore(spec, "cpu", fused=True).prepare_weights(w13, w2)
    auto = tgm.TorchGroupedMMCore(spec, "cpu")
    auto.path = "pending"                      # what fused=None gives on CUDA
    with caplog.at_level("WARNING", logger=tgm.__name__):
        pw = auto.prepare_weights(w13, w2)
    assert auto.path == "eager" and "no compiler here" in auto.fused_error and "fused_error=" in repr(auto)
    assert any("fused path unavailable" in r.getMessage() for r in caplog.records)
    x, ids, wts, _, _ = make_inputs(spec, 5, seed=1)
    assert auto.forward(x, ids, wts, pw).shape == (5, 32)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="Inductor on the CPU needs a C++ compiler")
def test_fused_path_with_inductor_on_cpu():
    spec = LayerSpec(num_experts=8, top_k=2, hidden_size=64, intermediate_size=32, ep=2, ep_rank=1)
    x, ids, wts, w13, w2 = make_inputs(spec, 13, seed=12)
    ids[1, 0] = -1
    core = tgm.TorchGroupedMMCore(spec, "cpu", fused=True)
    pw = core.prepare_weights(w13.bfloat16(), w2.bfloat16())
    assert core.path == "fused"
    before = _graphs()
    for t in (1, 13, 50):
        x, ids, wts, _, _ = make_inputs(spec, t, seed=40 + t)
        err = rel_error(core.forward(x, ids, wts, pw), ref(spec, x, ids, wts, w13.bfloat16(), w2.bfloat16()))
        assert err < 3e-2, err
    assert _graphs() == before

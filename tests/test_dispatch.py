"""Distributed MoE layer on the CPU (gloo, 2 and 4 processes): every parallel configuration and dispatcher
against the single-process float64 reference (moe_select.reference.reference_moe).

One spawn per world size runs every configuration in sequence (each resolves its own plan with
group=WORLD, so the plan agreement runs each time); the tests then check each configuration. Inputs are
fresh random numbers (seed printed on failure). Tolerances: moe_select.reference.TOLERANCE (float32
1e-4, bfloat16 3e-2 relative to the largest reference value).
"""
from __future__ import annotations

import os

import pytest
import torch

import moe_select
from moe_select.harness.launch import spawn, token_range
from moe_select.reference import TOLERANCE, reference_moe, rel_error
from moe_select.routing import route

pytestmark = pytest.mark.slow
SHAPE = {"num_experts": 8, "top_k": 2, "hidden_size": 32, "moe_intermediate_size": 16, "activation": "silu",
         "routing": "renormalize"}
T = 24
SEED = int.from_bytes(os.urandom(4), "little")

# name: (tp, ep, a2a, token layout, routing, split, dtype). layout: replicated (partial sums + all_reduce),
# sharded (a2a none all-gather/reduce-scatter), own (a2a torch). routing: random (the model's router),
# one_expert (expert 5 in every token's top-k), sparse (only experts 0, 1, 5 and some -1 slots: whole EP
# ranks get nothing). split: even, or skewed (rank 0 passes no tokens at all).
CONFIGS = {
    2: {
        "pure_tp_intermediate_split": (2, 1, "none", "replicated", "random", "even", "float32"),
        "ep2_none_replicated": (2, 2, "none", "replicated", "random", "even", "float32"),
        "ep2_none_sharded": (2, 2, "none", "sharded", "random", "skewed", "float32"),
        "ep2_torch": (2, 2, "torch", "own", "random", "even", "float32"),
        "ep2_torch_bf16": (2, 2, "torch", "own", "random", "even", "bfloat16"),
        "ep2_torch_one_expert": (2, 2, "torch", "own", "one_expert", "skewed", "float32"),
        "ep2_none_sharded_sparse": (2, 2, "none", "sharded", "sparse", "even", "float32"),
    },
    4: {
        "pure_tp_intermediate_split": (4, 1, "none", "replicated", "random", "even", "float32"),
        "ep4_none_sharded": (4, 4, "none", "sharded", "random", "even", "float32"),
        "ep4_torch": (4, 4, "torch", "own", "random", "even", "float32"),
        "ep4_torch_sparse": (4, 4, "torch", "own", "sparse", "skewed", "float32"),
        "tp4_ep2_none_replicated": (4, 2, "none", "replicated", "random", "even", "float32"),
        "tp4_ep2_none_sharded": (4, 2, "none", "sharded", "one_expert", "skewed", "float32"),
        "tp4_ep2_torch": (4, 2, "torch", "own", "random", "even", "float32"),
        "tp4_ep2_torch_one_expert_bf16": (4, 2, "torch", "own", "one_expert", "even", "bfloat16"),
    },
}


def inputs(seed: int, routing: str, dtype: str):
    """Full batch and full layer: x [T, H], topk_ids [T, K] int32, topk_weights [T, K] float32,
    w13 [E, 2I, H], w2 [E, H, I] in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    e, k, h, i = (SHAPE[n] for n in ("num_experts", "top_k", "hidden_size", "moe_intermediate_size"))
    dt = getattr(torch, dtype)
    x = torch.randn(T, h, generator=g).to(dt)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h ** 0.5).to(dt)
    w2 = (torch.randn(e, h, i, generator=g) / i ** 0.5).to(dt)
    wts, ids = route(torch.randn(T, e, generator=g), "renormalize", k)
    if routing == "one_expert":
        ids[:, 0] = 5
        ids[:, 1] = torch.where(ids[:, 1] == 5, 4, ids[:, 1])
    elif routing == "sparse":
        ids = torch.tensor([0, 1, 5])[torch.randint(0, 3, (T, k), generator=g)].to(torch.int32)
        ids[:, 1] = torch.where(ids[:, 1] == ids[:, 0], -1, ids[:, 1])
        ids[::5, 1] = -1
    return x, ids, wts, w13, w2


def bounds(rank: int, size: int, split: str) -> tuple[int, int]:
    if split == "even":
        return token_range(rank, size, T)
    if rank == 0:
        return 0, 0
    return token_range(rank - 1, size - 1, T)


def shard(spec, w13, w2):
    """Rank's experts and intermediate slice of the canonical weights."""
    lo, n = spec.expert_offset, spec.num_local_experts
    i, ir = w2.shape[2], spec.intermediate_size
    a, b = spec.tp_rank * ir, (spec.tp_rank + 1) * ir
    w13_r = torch.cat([w13[lo:lo + n, a:b], w13[lo:lo + n, i + a:i + b]], dim=1).contiguous()
    return w13_r, w2[lo:lo + n, :, a:b].contiguous()


def worker(rank: int, size: int, seed: int) -> dict:
    import torch.distributed as dist

    from moe_select.parallel import all_reduce, set_tokens

    world, out = dist.group.WORLD, {}
    for name, (tp, ep, a2a, layout, routing, split, dtype) in CONFIGS[size].items():
        plan = moe_select.plan({"arch": "auto", "quant": "bf16", "model": SHAPE, "tp": tp, "ep": ep, "a2a": a2a,
                                "require_adapter": True})
        runner = moe_select.resolve(plan, group=world, timeout_s=30)
        if layout == "sharded":
            set_tokens(runner, "sharded")
        x, ids, wts, w13, w2 = inputs(seed, routing, dtype)
        weights = runner.prepare_weights(*shard(runner.spec, w13, w2))
        lo, hi = (0, T) if layout == "replicated" else bounds(rank, size, split)
        y = runner.run(x[lo:hi], ids[lo:hi], wts[lo:hi], weights)
        if layout == "replicated":
            all_reduce(y, world)
        out[name] = {"y": y, "lo": lo, "hi": hi, "dispatcher": type(runner.dispatcher).__name__,
                     "output": runner.dispatcher.output, "spec": (runner.spec.ep_rank, runner.spec.tp_rank)}
    return out


@pytest.fixture(scope="module")
def results():
    return {size: spawn(worker, size, (SEED,), timeout_s=120, start_method="fork") for size in (2, 4)}


CASES = [(size, name) for size, configs in CONFIGS.items() for name in configs]


@pytest.mark.parametrize("size,name", CASES, ids=[f"{s}ranks-{n}" for s, n in CASES])
def test_matches_float64_reference(results, size, name):
    tp, ep, a2a, layout, routing, split, dtype = CONFIGS[size][name]
    x, ids, wts, w13, w2 = inputs(SEED, routing, dtype)
    ref = reference_moe(x, ids, wts, w13, w2)
    ranks = [r[name] for r in results[size]]
    assert [r["spec"] for r in ranks] == [(rk // (tp // ep), rk % (tp // ep)) for rk in range(size)]
    if layout == "replicated":
        outs = [r["y"] for r in ranks]  # every rank holds the reduced output of every token
        assert all(r["output"] == "partial" for r in ranks)
    else:
        assert [(r["lo"], r["hi"]) for r in ranks] == [bounds(rk, size, split) for rk in range(size)]
        outs = [torch.cat([r["y"] for r in ranks])]
        assert all(r["output"] == "complete" for r in ranks)
    for y in outs:
        assert y.shape == (T, SHAPE["hidden_size"]) and y.dtype == getattr(torch, dtype)
        err = rel_error(y, ref)
        assert err <= TOLERANCE[dtype], f"{name}: rel error {err:.3g} > {TOLERANCE[dtype]} (seed {SEED})"


def test_routing_cases_are_as_uneven_as_claimed():
    _, ids, *_ = inputs(SEED, "sparse", "float32")
    used = set(ids.unique().tolist())
    assert used <= {-1, 0, 1, 5} and -1 in used  # experts 2-4, 6, 7 (EP ranks 1 and 3 of 4) get no tokens
    _, ids, *_ = inputs(SEED, "one_expert", "float32")
    assert (ids == 5).any(dim=1).all()


def test_all_to_all_combine_sums_in_float32_and_rounds_once():
    from moe_select.backends.a2a.dispatch_torch import combine

    rows = torch.tensor([[1.0], [2**-8], [2**-8], [3.0]], dtype=torch.bfloat16)
    out = combine(torch.tensor([0, 0, 0, 1]), rows, 2)
    assert out.dtype == torch.bfloat16
    assert out[0, 0].item() == 1.0078125  # a bf16 running sum gives 1.0: two lost 2^-8 terms
    assert out[1, 0].item() == 3.0

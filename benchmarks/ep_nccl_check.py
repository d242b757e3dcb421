"""The distributed checks of tests/test_dispatch.py and tests/test_parallel_dist.py, with NCCL on N GPUs.

    python benchmarks/ep_nccl_check.py --nproc 2 [--json out.json]

One process per GPU (rank r on cuda:r, moe_select.harness.launch.spawn with backend nccl). Each rank runs, in
order: every parallel configuration that fits N (pure TP with the intermediate split; EP with a2a none,
replicated tokens + all_reduce and sharded tokens = all-gather/reduce-scatter; EP with a2a torch;
TP+EP mixed when N >= 4; uneven routing: one expert in every token's top-k, only 3 experts used, a rank
with no tokens), each resolved with ``group=WORLD`` on the GPU; then a plan disagreement (rank 1 claims
another GPU: every rank must refuse naming it; the agreement runs over a gloo side group because the
engine group is NCCL); then a rank that never arrives (the last rank skips resolve: the others must
refuse within the timeout). The parent compares each output with the float64 CPU reference
(moe_select.reference.reference_moe; tolerances moe_select.reference.TOLERANCE) and exits 1 on any failure.
Needs N CUDA GPUs, the project importable, and NCCL (keep NVLink multicast off where the machine says so).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import moe_select
from moe_select.harness.launch import spawn, token_range
from moe_select.reference import TOLERANCE, reference_moe, rel_error
from moe_select.routing import route

SHAPE = {"num_experts": 16, "top_k": 4, "hidden_size": 256, "moe_intermediate_size": 128, "activation": "silu",
         "routing": "renormalize"}
T = 96


def configs(n: int) -> dict[str, tuple]:
    """name -> (tp, ep, a2a, token layout, routing, split, dtype); see tests/test_dispatch.py."""
    c = {"pure_tp": (n, 1, "none", "replicated", "random", "even", "float32"),
         "ep_none_replicated": (n, n, "none", "replicated", "random", "even", "float32"),
         "ep_none_sharded": (n, n, "none", "sharded", "random", "skewed", "float32"),
         "ep_torch": (n, n, "torch", "own", "random", "even", "float32"),
         "ep_torch_bf16": (n, n, "torch", "own", "random", "even", "bfloat16"),
         "ep_torch_one_expert": (n, n, "torch", "own", "one_expert", "skewed", "float32"),
         "ep_none_sharded_sparse": (n, n, "none", "sharded", "sparse", "even", "bfloat16")}
    if n >= 4 and n % 2 == 0:
        c.update({"mixed_none_replicated": (n, n // 2, "none", "replicated", "random", "even", "float32"),
                  "mixed_none_sharded": (n, n // 2, "none", "sharded", "sparse", "skewed", "float32"),
                  "mixed_torch": (n, n // 2, "torch", "own", "one_expert", "even", "bfloat16")})
    return c


def inputs(seed: int, routing: str, dtype: str):
    g = torch.Generator().manual_seed(seed)
    e, k, h, i = (SHAPE[n] for n in ("num_experts", "top_k", "hidden_size", "moe_intermediate_size"))
    dt = getattr(torch, dtype)
    x = torch.randn(T, h, generator=g).to(dt)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h ** 0.5).to(dt)
    w2 = (torch.randn(e, h, i, generator=g) / i ** 0.5).to(dt)
    wts, ids = route(torch.randn(T, e, generator=g), "renormalize", k)
    if routing == "one_expert":
        hot = (ids == 5).any(dim=1)
        ids[~hot, 0] = 5
    elif routing == "sparse":  # three experts for every slot; repeated ones become -1 (skipped)
        ids = torch.tensor([0, 1, 5])[torch.randint(0, 3, (T, k), generator=g)].to(torch.int32)
        for j in range(1, k):
            ids[:, j] = torch.where((ids[:, :j] == ids[:, j:j + 1]).any(dim=1), -1, ids[:, j])
    return x, ids, wts, w13, w2


def bounds(rank: int, size: int, split: str) -> tuple[int, int]:
    if split == "even":
        return token_range(rank, size, T)
    return (0, 0) if rank == 0 else token_range(rank - 1, size - 1, T)


def plan_for(tp, ep, a2a, environment=None):
    return moe_select.plan({"arch": "auto", "quant": "bf16", "model": SHAPE, "tp": tp, "ep": ep, "a2a": a2a,
                            "runner": "torch_native", "cuda_graph": False, "require_adapter": True}, environment=environment)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def worker(rank: int, size: int, seed: int, cpu: bool) -> dict:
    import torch.distributed as dist

    from moe_select.parallel import all_reduce, set_tokens

    dev, world, out = torch.device("cpu") if cpu else torch.device("cuda", rank), dist.group.WORLD, {}
    for name, (tp, ep, a2a, layout, routing, split, dtype) in configs(size).items():
        runner = moe_select.resolve(plan_for(tp, ep, a2a), group=world, device=dev, timeout_s=60)
        if layout == "sharded":
            set_tokens(runner, "sharded")
        x, ids, wts, w13, w2 = (t.to(dev) for t in inputs(seed, routing, dtype))
        s = runner.spec
        lo_e, n_e, ir = s.expert_offset, s.num_local_experts, s.intermediate_size
        a, b, i = s.tp_rank * ir, (s.tp_rank + 1) * ir, w2.shape[2]
        weights = runner.prepare_weights(torch.cat([w13[lo_e:lo_e + n_e, a:b], w13[lo_e:lo_e + n_e, i + a:i + b]], 1).contiguous(),
                                         w2[lo_e:lo_e + n_e, :, a:b].contiguous())
        lo, hi = (0, T) if layout == "replicated" else bounds(rank, size, split)
        dist.barrier(world)
        _sync(dev)
        t = time.perf_counter()
        y = runner.run(x[lo:hi], ids[lo:hi], wts[lo:hi], weights)
        if layout == "replicated":
            all_reduce(y, world)
        _sync(dev)
        out[name] = {"y": y.cpu(), "ms": (time.perf_counter() - t) * 1e3}
    base = plan_for(size, size, "torch")
    env = base.environment.model_copy(update={"gpu": "NVIDIA H100"}) if rank == 1 else None
    try:
        moe_select.resolve(plan_for(size, size, "torch", env) if env else base, group=world, device=dev,
                           environment=env, timeout_s=30)
        out["disagreement"] = {"refused": False}
    except moe_select.ResolveError as exc:
        out["disagreement"] = {"refused": True, "msg": str(exc)}
    if rank == size - 1:
        time.sleep(8.0)  # never arrives within the others' 3 s
        out["late"] = {"late": True}
    else:
        t = time.perf_counter()
        try:
            moe_select.resolve(base, group=world, device=dev, timeout_s=3)
            out["late"] = {"refused": False}
        except moe_select.ResolveError as exc:
            out["late"] = {"refused": True, "s": time.perf_counter() - t, "msg": str(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=torch.cuda.device_count())
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU instead (to check this script without GPUs)")
    args = ap.parse_args(argv)
    if not args.cpu and (args.nproc < 2 or torch.cuda.device_count() < args.nproc):
        print(f"needs >= 2 CUDA GPUs and --nproc <= {torch.cuda.device_count()} (have {torch.cuda.device_count()})")
        return 2
    n = args.nproc
    res = spawn(worker, n, (args.seed, args.cpu), timeout_s=300, backend="gloo" if args.cpu else "nccl",
                threads=1 if args.cpu else None)
    rows, ok = [], True
    for name, (tp, ep, a2a, layout, routing, _split, dtype) in configs(n).items():
        x, ids, wts, w13, w2 = inputs(args.seed, routing, dtype)
        ref = reference_moe(x, ids, wts, w13, w2)
        ys = [r[name]["y"] for r in res] if layout == "replicated" else [torch.cat([r[name]["y"] for r in res])]
        err = max(rel_error(y, ref) for y in ys)
        good = err <= TOLERANCE[dtype]
        ok &= good
        rows.append({"config": name, "tp": tp, "ep": ep, "a2a": a2a, "tokens": layout, "routing": routing, "dtype": dtype,
                     "rel_error": err, "tolerance": TOLERANCE[dtype], "ok": good, "forward_ms": [round(r[name]["ms"], 3) for r in res]})
        print(f"{'ok ' if good else 'BAD'} {name:<24} tp {tp} ep {ep} a2a {a2a:<5} {layout:<10} {routing:<10} {dtype:<8} "
              f"rel err {err:.2e} (tol {TOLERANCE[dtype]:g}) forward ms {rows[-1]['forward_ms']}")
    dis = [r["disagreement"] for r in res]
    dis_ok = all(d["refused"] and "rank 1: detected gpu NVIDIA H100 vs" in d["msg"] for d in dis)
    late = [r["late"] for r in res[:-1]]
    late_ok = all(d["refused"] and d["s"] < 3 * 2 + 5 and "reached the plan agreement within 3 s" in d["msg"] for d in late)
    print(f"{'ok ' if dis_ok else 'BAD'} disagreement refused on every rank: {dis[0].get('msg', '')[:300]}")
    print(f"{'ok ' if late_ok else 'BAD'} a late rank: others refused after {[round(d.get('s', -1), 2) for d in late]} s")
    ok &= dis_ok and late_ok
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": n, "seed": args.seed, "torch": torch.__version__,
                       "gpu": None if args.cpu else torch.cuda.get_device_name(0),
                       "configs": rows, "disagreement": dis, "late": late, "ok": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Run one MoE layer over ``nproc`` local processes (gloo on the CPU): the distributed path end to end.

:func:`run_distributed` backs ``moe-select run --nproc N``; :func:`spawn` is the process launcher it,
the tests and ``benchmarks/ep_nccl_check.py`` share (fresh ``spawn`` processes, 127.0.0.1, a free port).
Weights are synthetic and seeded per (expert, intermediate slice), so a rank builds only its shard and
the parent rebuilds, for the float64 reference, only the experts the tokens touch.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import MoeSelectError
from .memory import PROCESS_OVERHEAD, activation_bytes, available_host_bytes, build_bytes

DTYPES = ("bfloat16", "float16", "float32")


class LaunchError(MoeSelectError):
    """A distributed run could not start (memory, arguments) or a rank failed or timed out.
    ``problems``: one line per problem, each naming the rank where there is one; ``results``: the
    per-rank results of :func:`spawn` (None for a rank that failed), when ranks ran."""

    def __init__(self, problems: Sequence[str] | str, *, results: list[Any] | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.results = results
        super().__init__("\n".join(self.problems))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn: Callable, rank: int, nproc: int, init: str, backend: str, timeout_s: float, threads: int | None,
           outdir: str, args: tuple) -> None:
    import torch
    import torch.distributed as dist

    out = Path(outdir) / f"rank{rank}.pt"
    if threads:
        torch.set_num_threads(threads)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=nproc, timeout=timedelta(seconds=timeout_s))
        result = fn(rank, nproc, *args)
        torch.save({"result": result}, out)
    except BaseException as exc:  # reported to the parent by rank (exit code 1, no second traceback)
        torch.save({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}, out)
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable, nproc: int, args: tuple = (), *, timeout_s: float, backend: str = "gloo",
          threads: int | None = None, start_method: str = "spawn", on_exit: Callable[[int], None] | None = None) -> list[Any]:
    """Run ``fn(rank, nproc, *args)`` in ``nproc`` processes joined in one process group (``backend``
    over tcp://127.0.0.1 on a free port, group timeout ``timeout_s``; ``nccl`` puts rank r on cuda:r).

    ``start_method``: ``spawn`` (fresh interpreters: each imports torch again, ~1.5-3 s on 2 cores) or
    ``fork`` (children share the parent's imports: ~0.05 s; CPU only, never after CUDA was initialized;
    the child runs with ``threads`` (default 1) intra-op threads, as DataLoader workers do, because an
    OpenMP pool does not survive a fork). ``fn`` must be a module-level function; its return value must
    pickle. ``on_exit(rank)`` is called as each rank's process ends, in the order they end (a progress bar
    counts them). Returns the per-rank results. Raises :class:`LaunchError` naming every rank that raised (its
    exception and traceback) or was still running after ``timeout_s`` seconds (then killed)."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    import torch

    if start_method == "fork":
        threads = threads or 1
    ctx: Any = mp.get_context(start_method)
    init = f"tcp://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory(prefix="moe-select-") as tmp:
        procs = [ctx.Process(target=_entry, args=(fn, r, nproc, init, backend, timeout_s, threads, tmp, args))
                 for r in range(nproc)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        running = {p.sentinel: r for r, p in enumerate(procs)}
        while running and time.monotonic() < deadline:
            for ended in wait(list(running), timeout=max(0.0, deadline - time.monotonic())):
                r = running.pop(ended)
                procs[r].join()
                if on_exit is not None:
                    on_exit(r)
        late = [r for r, p in enumerate(procs) if p.is_alive()]
        for r in late:
            procs[r].kill()
            procs[r].join()
        results, problems = [], []
        for r, p in enumerate(procs):
            f = Path(tmp) / f"rank{r}.pt"
            got = torch.load(f, weights_only=False) if f.exists() else None
            if got is not None and "result" in got:
                results.append(got["result"])
                continue
            results.append(None)
            if got is not None:
                problems.append(f"rank {r}: {got['error']}\n{got['traceback']}")
            elif r in late:
                problems.append(f"rank {r}: still running after {timeout_s:g} s (killed)")
            else:
                problems.append(f"rank {r}: exited with code {p.exitcode} and no result")
    if problems:
        raise LaunchError(problems, results=results)
    return results


# ------------------------------------------------------------------------------------- one MoE layer

def token_range(rank: int, size: int, tokens: int) -> tuple[int, int]:
    """``[lo, hi)`` of the ``tokens`` a rank owns when tokens are split over ``size`` ranks (the first
    ``tokens % size`` ranks get one more)."""
    base, extra = divmod(tokens, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def worker(rank: int, size: int, cfg: dict) -> dict:
    """One rank of :func:`run_distributed` (run by :func:`spawn`): resolve with the group, build the
    shard, run the forward; returns timings, the shard's bounds and ``out`` (this rank's output rows)."""
    import torch.distributed as dist

    from ..parallel import all_reduce, set_tokens
    from ..resolver import resolve
    from .weights import layer_weights, routed_tokens

    t0 = time.perf_counter()
    world = dist.group.WORLD
    runner = resolve(json.loads(cfg["plan"]), group=world, timeout_s=cfg["timeout_s"])
    if cfg["layout"] == "sharded":
        set_tokens(runner, "sharded")
    t1 = time.perf_counter()
    s, m = runner.spec, runner.plan.deployment.model.as_dict()
    built = layer_weights(s, m, cfg["seed"])
    weights = runner.prepare_weights(built.pop("w13"), built.pop("w2"), **built)
    t2 = time.perf_counter()
    x, ids, wts = routed_tokens(m, cfg["tokens"], cfg["seed"], cfg["dtype"])
    lo, hi = (0, cfg["tokens"]) if cfg["layout"] == "replicated" else token_range(rank, size, cfg["tokens"])
    dist.barrier(world)
    t3 = time.perf_counter()
    out = runner.run(x[lo:hi], ids[lo:hi], wts[lo:hi], weights)
    if cfg["layout"] == "replicated" and size > 1:
        all_reduce(out, world)
    t4 = time.perf_counter()
    ir = s.intermediate_size
    return {"rank": rank, "ep_rank": s.ep_rank, "tp_rank": s.tp_rank,
            "experts": [s.expert_offset, s.expert_offset + s.num_local_experts],
            "intermediate": [s.tp_rank * ir, (s.tp_rank + 1) * ir], "token_range": [lo, hi],
            "resolve_s": t1 - t0, "build_s": t2 - t1, "forward_s": t4 - t3, "out": out}


# ------------------------------------------------------------------------------------- one MoE layer

def estimate_bytes(model: dict, quant: str, *, tp: int, ep: int, nproc: int, tokens: int) -> dict[str, int]:
    """Bytes a :func:`run_distributed` run holds on this machine: ``per_rank`` (the weight shard
    ``E/ep x (w13 rows + I) / (tp/ep) x H`` elements at :func:`~moe_select.harness.memory.build_bytes` (the
    weights as given, plus for a quantized format the float32 copy torch_native dequantizes to), one expert slice in
    float32 while generating, tokens, a process), ``parent`` (one full expert in float64 for the
    reference, a process) and ``total``."""
    e, h, i, k = model["num_experts"], model["hidden_size"], model["moe_intermediate_size"], model["top_k"]
    rows = 2 * i if model.get("activation", "silu") != "relu2" else i
    moe_tp = tp // ep
    slice_elems = (rows + i) * h // moe_tp
    act = activation_bytes(tokens=tokens, hidden=h, inter=i // moe_tp, top_k=k, num_experts=e)
    per_rank = int((e // ep) * slice_elems * build_bytes(quant)) + slice_elems * 4 + act + PROCESS_OVERHEAD
    parent = (rows + i) * h * 8 * 3 + act + PROCESS_OVERHEAD
    return {"per_rank": per_rank, "parent": parent, "total": nproc * per_rank + parent}


def run_distributed(*, model_config: str, tokens: int, nproc: int, tp: int, ep: int, a2a: str, seed: int = 0,
                    dtype: str = "bfloat16", timeout_s: float = 120, say: Callable[[str], None] | None = None,
                    bar: bool | None = None) -> dict:
    """Plan, then run one MoE layer of ``model_config`` over ``nproc`` gloo processes and check it.

    ``model_config``: a checkpoint folder or config.json (shape, routing, quant read from it);
    ``tokens``: the batch (T); ``nproc`` must equal ``tp`` (the layer spans tp ranks; ``ep`` divides
    ``tp``); ``a2a``: ``none`` or ``torch``; ``dtype``: activations (bfloat16, float16, float32); weights
    are the checkpoint's format (bf16/fp16 stored as such, FP8 quantized per slice with ops.quantize).
    Steps: plan (``arch: auto``, ``engine: moe_select``: this install's adapters); estimate memory and refuse
    before starting; spawn ``nproc`` processes, each ``resolve(plan, group=WORLD)`` (all ranks agree), builds its shard
    (experts ``[ep_rank*E/ep, +E/ep)``, intermediate rows ``[tp_rank*I/(tp/ep), +I/(tp/ep))``, seeded
    random weights), routes the seeded tokens with the model's routing (:func:`moe_select.routing.route`)
    and runs the forward. Token layout: ``a2a torch`` and ``none`` with ep > 1 give each rank its own
    token range (``torch``: all-to-all; ``none``: all-gather/reduce-scatter); pure TP (``none``, ep 1)
    gives every rank all tokens and sums the partial outputs with :func:`moe_select.parallel.all_reduce`.

    Returns a dict: ``plan`` (runner, a2a, arch, quant, fingerprint, summary), ``nproc``, ``tp``, ``ep``,
    ``a2a``, ``tokens``, ``token_layout``, ``dtype``, ``max_rel_error`` (of the assembled output against
    the float64 reference, :func:`moe_select.reference.rel_error`), ``tolerance``, ``ok``,
    ``reference_experts`` (experts touched), ``memory`` (estimate, bytes), ``ranks`` (per rank:
    ep_rank, tp_rank, experts, intermediate rows, token range, ``resolve_s``, ``build_s``, ``forward_s``
    in seconds), ``wall_s``. Raises :class:`~moe_select.errors.InputError` /
    :class:`~moe_select.errors.SelectionError` (carrying the report, every reason with its source and
    fix: :func:`moe_select.harness.run.print_refusal` prints it) from planning,
    :class:`~moe_select.errors.ResolveError` for a plan whose weights the harness cannot make
    (:func:`moe_select.weight_checks.weights_refusal`), :class:`LaunchError` for bad arguments, too little
    memory, or a failed or late rank (naming it).

    ``say``: called with one line as each step ends: the plan (its summary, before anything is spawned),
    then ``ranks: ...`` (every rank resolved, built its shard and ran) and ``reference: ...``; ``bar``: the
    :class:`~moe_select.harness.progress.Phase` bars of those two phases (ranks finished, experts of the
    reference) on stderr, None: when stderr is a terminal."""
    from ..errors import SelectionError
    from ..selector import explain
    from .progress import Phase

    def tell(line: str) -> None:
        if say is not None:
            say(line)

    t0 = time.perf_counter()
    problems = []
    if nproc != tp:
        problems.append(f"nproc {nproc} must equal tp {tp}: the MoE layer spans tp ranks, one process each")
    if ep < 1 or tp % ep:
        problems.append(f"ep {ep} must divide tp {tp}: each expert is split over tp/ep ranks inside the TP group")
    if dtype not in DTYPES:
        problems.append(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if tokens < 1:
        problems.append(f"tokens must be >= 1, got {tokens}")
    if problems:
        raise LaunchError(problems)
    report = explain({"arch": "auto", "model_config": str(Path(model_config).resolve()), "tp": tp, "ep": ep,
                      "a2a": a2a, "engine": "moe_select", "require_adapter": True})
    if report.plan is None:
        raise SelectionError(report)
    p = report.plan
    tell(report.summary())
    m = p.deployment.model.as_dict()
    from ..errors import ResolveError
    from ..weight_checks import weights_refusal

    refused = weights_refusal(p.quant, "moe-select run --nproc")
    if refused is not None:  # no row (no_adapter), or weights the harness does not generate (quant_unsupported)
        raise ResolveError([refused])
    mem = estimate_bytes(m, p.quant, tp=tp, ep=ep, nproc=nproc, tokens=tokens)
    avail = available_host_bytes()
    if mem["total"] > 0.85 * avail:
        gib = 2**30
        raise LaunchError(f"not enough memory: {nproc} ranks x {mem['per_rank'] / gib:.1f} GiB (E={m['num_experts']}/ep {ep} experts "
                          f"x {m['moe_intermediate_size']}/{tp // ep} intermediate rows x H={m['hidden_size']} in {p.quant}, plus a "
                          f"process) + {mem['parent'] / gib:.1f} GiB for the reference = {mem['total'] / gib:.1f} GiB; "
                          f"{avail / gib:.1f} GiB available (85% usable). The ranks share this machine, so no tp/ep split "
                          "lowers the total: use fewer --tokens if the tokens dominate, else a machine with more memory")
    layout = "own" if a2a != "none" else ("replicated" if ep == 1 else "sharded")
    cfg = {"plan": p.to_json(), "seed": seed, "tokens": tokens, "dtype": dtype, "layout": layout,
           "timeout_s": min(timeout_s, 60.0)}
    threads = max(1, (os.cpu_count() or 1) // nproc)
    with Phase("ranks", nproc, "rank", bar=bar) as ph:
        ranks = spawn(worker, nproc, (cfg,), timeout_s=timeout_s, threads=threads, on_exit=lambda r: ph.advance())
    tell(f"ranks: {nproc} processes resolved the plan together, built their shards and ran in {ph.seconds:.1f} s")
    tr = time.perf_counter()
    import torch

    from ..formats import block_shape, tolerance
    from ..reference import rel_error
    from .weights import reference_output, routed_tokens, touched_experts

    x, ids, wts = routed_tokens(m, tokens, seed, dtype)
    with Phase("reference", touched_experts(ids), "expert", bar=bar) as ph:
        ref, touched = reference_output(m, p.quant, tp // ep, seed, x, ids, wts, progress=ph,
                                        block=block_shape(p.quant, p.quant_params or {}))
    tell(f"reference: float64, {touched} experts in {ph.seconds:.1f} s")
    out = ranks[0]["out"] if layout == "replicated" else torch.cat([r["out"] for r in ranks])

    err = rel_error(out, ref)
    tol = tolerance(p.activation_precision, dtype)
    return {
        "plan": {"runner": p.runner, "a2a": p.a2a, "arch": p.arch, "quant": p.quant, "fingerprint": p.fingerprint,
                 "summary": f"{p.runner} ({p.chosen_by.how}{' ' + p.chosen_by.rule if p.chosen_by.rule else ''}) for {p.deployment.brief()}"},
        "nproc": nproc, "tp": tp, "ep": ep, "a2a": a2a, "tokens": tokens, "token_layout": layout, "dtype": dtype,
        "max_rel_error": err, "tolerance": tol, "ok": err <= tol, "reference_experts": touched,
        "reference_s": time.perf_counter() - tr, "memory": {**mem, "available": avail},
        "ranks": [{k: v for k, v in r.items() if k != "out"} for r in ranks], "wall_s": time.perf_counter() - t0,
    }

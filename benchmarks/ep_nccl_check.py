"""Expert and tensor parallelism of the MoE layer on N GPUs (NCCL) or N CPU processes (gloo), checked
against the float64 reference, timed, with the startup refusals and a CUDA-graph capture.

    python benchmarks/ep_nccl_check.py --nproc 2 [--json out.json] [--budget-s 360]
    python benchmarks/ep_nccl_check.py --nproc 4 --backend gloo --device cpu [--models Qwen3-30B-A3B,DeepSeek-V3:4]

One process per GPU (rank r on cuda:r; :func:`moe_select.harness.launch.spawn`, backend nccl), or per CPU
process (gloo). Child processes inherit this process's environment unchanged (NVLink multicast stays off
where the machine sets ``NCCL_NVLS_ENABLE=0``; on GPUs, where unset, this script sets it to 0 and
``TORCH_SYMM_MEM_DISABLE_MULTICAST`` to 1 before starting them). The layer spans all N ranks: ``tp = N``.
Defaults: on GPUs both real layers, tokens per rank 1, 32, 256, 2048, 10 timed repetitions; on the CPU
Qwen3-30B-A3B and DeepSeek-V3 with H and I divided by 4, tokens 1 and 16, 3 repetitions. Rank 0 prints one
line per plan group as it finishes; the tables come at the end.

What runs, per layer shape (``--models``: Qwen3-30B-A3B E128 K8 H2048 I768 renormalize, DeepSeek-V3 E256
K8 H7168 I2048 with its own routing ``deepseek_v3``, n_group 8, topk_group 4, routed scaling 2.5; both
read from ``examples/model_configs``; ``NAME:D`` divides H and I by D, keeping E, K and the routing;
``toy``: E16 K4 H256 I256) and format (``--formats``):

- configurations that fit N (:func:`parallel_configs`): pure TP with the intermediate split (``ep 1``,
  replicated tokens, partial sums all-reduced); EP with ``a2a: none`` and replicated tokens (+ all-reduce)
  or sharded tokens (all-gather / reduce-scatter; rank 0 passes no tokens in the check); EP with ``a2a:
  torch`` (each rank its own tokens); mixed TP x EP for every ``ep`` dividing N with 1 < ep < N (tp N /
  ep N/2; tp 8 / ep 4 and tp 8 / ep 2 on 8 ranks), in the same three token layouts. A configuration the
  planner refuses (e.g. fp8_block when ``I / (tp/ep)`` is not a multiple of 128) is listed with its
  reason, not run: the refusal is the correct outcome.
- formats: ``bf16``, ``fp8_channel``, ``fp8_block`` (128x128) with the runner the plan chooses on this
  machine (``runner: auto``, planned for ``engine: moe_select`` through ``require_adapter``: this install's
  adapters; on an H200 torch_grouped_mm for bf16/fp8_channel and triton for fp8_block, with ``a2a: none``
  and, since issue 18, ``a2a: torch``: the run of 2026-11-30 predates it, when SGLang's and vLLM's facts
  about triton were applied here and ``a2a: torch`` fell back to torch_native; on the CPU torch_native); ``float32``: bf16 weights, float32 activations and output through
  ``torch_native`` (asked for explicitly: the fast runners take 16-bit activations), checked at the
  float32 tolerance because torch_native computes in float32 and rounds once to the input dtype. On the
  CPU the float32 rows use the toy shape (``--float32-shape``): real shapes in float32 on 2 cores are too slow.
- uneven routing on the toy shape (``--no-edge`` leaves it out): one expert in every token's top-k, only
  3 experts used (repeats become -1), and a rank with no tokens, through torch_native.

Per configuration, every rank: resolves the plan with ``group=WORLD`` (the plan agreement), builds its
shard with :func:`moe_select.harness.weights.layer_weights` (seeded per expert and intermediate slice,
drawn on the run's device), and

1. check: the seeded batch of ``--check-tokens`` tokens (:func:`~moe_select.harness.weights.routed_tokens`,
   values bf16; float32 rows upcast them) in the configuration's layout; the parent assembles the output
   (replicated: every rank's all-reduced output; otherwise the ranks' outputs in rank order) and compares
   it with :func:`~moe_select.harness.weights.reference_output` (float64, one touched expert at a time,
   weights redrawn on the same device type) by :func:`moe_select.reference.rel_error`, against
   :func:`moe_select.formats.tolerance` of the plan's ``activation_precision`` and the output dtype (the one
   table). The parent computes the references in a thread while the ranks run.
2. time, for each ``--tokens`` T (tokens per rank: a replicated layout gives every rank the same T
   tokens; the others give each rank its own T of N*T): ``forward_ms``, the median over ``--reps`` of
   one layer forward (``MoeRunner.run``, plus the all-reduce for replicated tokens), each rep started
   after an all-reduce of one element and a device synchronisation that line the ranks up, ended by a
   synchronisation (so eager launch gaps count), the slowest rank's median reported; ``comm_ms``: the same
   loop with the expert compute replaced by a core that returns zeros of the same shape and dtype, so
   the same dispatcher moves the same tensors (a2a torch: split exchange, 3 all-to-alls, the return
   all-to-all and the index bookkeeping; sharded: the all-gathers and reduce-scatter; replicated: the
   all-reduce); ``comm_share = comm_ms / forward_ms``.
3. CUDA graph (GPU, ``a2a: none`` replicated, a plan with ``cuda_graph: true``), per T: capture one
   forward and its all-reduce on every rank, copy new inputs into the static buffers, replay, and
   compare with an eager forward of the same new inputs: the partial sum bitwise, and the all-reduced
   output bitwise (on 2 ranks a sum is exact up to one rounding whatever the order; on more ranks a
   different NCCL summation order could change the last bit, which is then reported with its
   relative difference and accepted within the tolerance); ``graph_ms``: median replay time.

Then the refusals, on every rank: a plan disagreement (rank 1 claims another GPU: every rank must refuse
naming it; the agreement runs over a gloo side group when the engine group is NCCL), and a rank that
never arrives (the last rank skips ``resolve``: every other rank must refuse within about twice
``--late-timeout-s``, measured).

``--budget-s``: no new configuration starts after that many seconds from the start (the ranks decide
together); the refusals still run, and the JSON (``--json``) lists what was skipped. Ranks still running
``budget + 150`` s after the start are killed (their results so far are kept). Rows whose float64
reference is still not done ``--ref-grace-s`` after the ranks finish, or ``budget + 180`` s after the
start, are reported ``unchecked``; so the script ends by about ``budget + 180`` s (540 s by default). Exit 1 on
any failure (an error above tolerance, a rank's error, a graph replay that differs, a refusal that did not
happen), else 0 (also when the budget skipped configurations: ``complete`` is false then).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

import moe_select
from moe_select.formats import tolerance
from moe_select.harness.launch import LaunchError, spawn, token_range
from moe_select.harness.weights import layer_weights, reference_output, routed_tokens
from moe_select.reference import rel_error

ROOT = Path(__file__).resolve().parent.parent
#: The real layers: name -> folder of examples/model_configs (read as the engines read them).
REAL_MODELS = {"Qwen3-30B-A3B": "Qwen__Qwen3-30B-A3B", "DeepSeek-V3": "deepseek-ai__DeepSeek-V3"}
#: The tiny shape (E16 K4 H256 I256): float32 rows on the CPU, uneven routing, the refusal checks.
TOY = {"num_experts": 16, "top_k": 4, "hidden_size": 256, "moe_intermediate_size": 256, "activation": "silu",
       "routing": "renormalize"}
FORMATS = ("float32", "bf16", "fp8_channel", "fp8_block")
#: format -> (weight quant, activation and output dtype)
FORMAT_TYPES = {"float32": ("bf16", "float32"), "bf16": ("bf16", "bfloat16"), "fp8_channel": ("fp8_channel", "bfloat16"),
                "fp8_block": ("fp8_block", "bfloat16")}
#: Names in the NCCL/PyTorch environment worth recording (NVLink multicast must stay off).
ENV_KEYS = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "NCCL_DEBUG", "NCCL_P2P_DISABLE")


# ------------------------------------------------------------------------------------------- schedule

def model_dict(spec: str) -> tuple[str, dict]:
    """``NAME`` or ``NAME:D`` (``--models``) -> (label, the deployment's ``model`` dict). Real models are
    read from ``examples/model_configs`` (as ``moe-select`` reads a checkpoint); ``:D`` divides
    ``hidden_size`` and ``moe_intermediate_size`` by D (both must divide), keeping experts, top-k and
    routing. ``toy``: :data:`TOY`. Raises SystemExit naming the choices for an unknown name."""
    name, _, div = spec.partition(":")
    model: dict[str, Any]
    if name == "toy":
        model = dict(TOY)
    elif name in REAL_MODELS:
        report = moe_select.explain({"arch": "cpu", "model_config": str(ROOT / "examples" / "model_configs" / REAL_MODELS[name])})
        model = report.deployment.model.as_dict()
    else:
        raise SystemExit(f"--models: unknown layer {name!r}; choose from {', '.join([*REAL_MODELS, 'toy'])} (NAME:D divides H and I by D)")
    d = int(div or 1)
    if d > 1:
        h, i = model["hidden_size"], model["moe_intermediate_size"]
        if h % d or i % d:
            raise SystemExit(f"--models {spec}: H={h} and I={i} must both divide by {d}")
        model.update(hidden_size=h // d, moe_intermediate_size=i // d)
    return (name if d == 1 else f"{name}/{d}"), model


def parallel_configs(n: int) -> list[tuple[str, int, int, str, str, str]]:
    """The configurations of ``n`` ranks: ``(name, tp, ep, a2a, token layout, check split)``; layout
    ``replicated`` (every rank all tokens, partial sums all-reduced), ``sharded`` (a2a none, each rank its
    own tokens) or ``own`` (a2a torch); split ``even`` or ``skewed`` (rank 0 passes no check tokens)."""
    out = [("pure_tp", n, 1, "none", "replicated", "even"),
           ("ep_none_replicated", n, n, "none", "replicated", "even"),
           ("ep_none_sharded", n, n, "none", "sharded", "skewed"),
           ("ep_torch", n, n, "torch", "own", "even")]
    for ep in sorted((e for e in range(2, n) if n % e == 0), reverse=True):
        tag = f"mixed_tp{n}_ep{ep}"
        out += [(f"{tag}_none_replicated", n, ep, "none", "replicated", "even"),
                (f"{tag}_none_sharded", n, ep, "none", "sharded", "skewed"),
                (f"{tag}_torch", n, ep, "torch", "own", "even")]
    return out


def edge_configs(n: int) -> list[tuple[str, int, int, str, str, str, str, str]]:
    """Uneven routing on the toy shape: ``(name, tp, ep, a2a, layout, split, routing, dtype)``; routing
    ``one_expert`` (expert 5 in every token's top-k) or ``sparse`` (experts 0, 1, 5 only; repeats -1)."""
    c = [("ep_torch_one_expert", n, n, "torch", "own", "skewed", "one_expert", "float32"),
         ("ep_none_sharded_sparse", n, n, "none", "sharded", "even", "sparse", "bfloat16")]
    if n >= 4 and n % 2 == 0:
        c += [(f"mixed_tp{n}_ep{n // 2}_none_sharded_sparse", n, n // 2, "none", "sharded", "skewed", "sparse", "float32"),
              (f"mixed_tp{n}_ep{n // 2}_torch_one_expert", n, n // 2, "torch", "own", "even", "one_expert", "bfloat16")]
    return c


def default_check_tokens(model: dict) -> int:
    """Tokens of the correctness check: 8 for layers with experts of > 2e7 weights (DeepSeek-V3: its
    float64 reference costs about 0.3 s per touched expert), else 16."""
    return 8 if 3 * model["hidden_size"] * model["moe_intermediate_size"] > 2e7 else 16


def make_cases(args: argparse.Namespace, n: int, gpu: bool) -> tuple[dict[str, dict], list[dict]]:
    """(suites: label -> model dict, cases in run order). A case is one row: suite, format, configuration,
    the deployment to plan, check tokens, whether it is timed and graph-captured. Cases sharing a shard
    (suite, weight quant, tp, ep) are adjacent, so the ranks build those weights once."""
    suites: dict[str, dict] = {}
    cases: list[dict] = []
    fmts = [f for f in args.formats.split(",") if f]
    for f in fmts:
        if f not in FORMATS:
            raise SystemExit(f"--formats: unknown {f!r}; choose from {', '.join(FORMATS)}")
    specs = [(s, [f for f in fmts if f != "float32" or args.float32_shape == "model"]) for s in args.models.split(",") if s]
    if "float32" in fmts and args.float32_shape == "toy":
        specs.insert(0, ("toy", ["float32"]))
    for spec, sfmts in specs:
        label, model = model_dict(spec)
        suites[label] = model
        check = args.check_tokens or default_check_tokens(model)
        for quant in dict.fromkeys(FORMAT_TYPES[f][0] for f in sfmts):
            shards = dict.fromkeys((tp, ep) for _, tp, ep, *_ in parallel_configs(n))
            for tp, ep in shards:
                for f in (f for f in sfmts if FORMAT_TYPES[f][0] == quant):
                    for name, _, _, a2a, layout, split in (c for c in parallel_configs(n) if c[1:3] == (tp, ep)):
                        runner = "torch_native" if f == "float32" else "auto"
                        cases.append({"suite": label, "format": f, "quant": quant, "dtype": FORMAT_TYPES[f][1],
                                      "config": name, "tp": tp, "ep": ep, "a2a": a2a, "layout": layout, "split": split,
                                      "routing": "model", "check_tokens": check, "runner_asked": runner,
                                      "timed": True, "graph": gpu and a2a == "none" and layout == "replicated" and f != "float32"})
    if not args.no_edge:
        suites["toy-edge"] = dict(TOY)
        for name, tp, ep, a2a, layout, split, routing, dtype in edge_configs(n):
            cases.append({"suite": "toy-edge", "format": "float32" if dtype == "float32" else "bf16", "quant": "bf16",
                          "dtype": dtype, "config": name, "tp": tp, "ep": ep, "a2a": a2a, "layout": layout, "split": split,
                          "routing": routing, "check_tokens": 96, "runner_asked": "torch_native", "timed": False, "graph": False})
    for i, c in enumerate(cases):
        c["id"] = i
        c["moe_tp"] = c["tp"] // c["ep"]
    return suites, cases


def plan_cases(cases: list[dict], suites: dict[str, dict], gpu: bool) -> None:
    """Plan every case here, once (the ranks resolve these plans): sets ``plan`` (JSON text), ``runner``,
    ``activation_precision``, ``cuda_graph`` and ``tolerance``, or ``refused`` (the planner's summary)
    when no runner can run it. ``cuda_graph`` is asked for on the GPU with ``a2a: none`` (the
    all-to-all of a2a torch syncs with the host) and dropped when no capturable runner is eligible."""
    env = None
    memo: dict[tuple, Any] = {}
    for c in cases:
        key = (c["suite"], c["quant"], c["tp"], c["ep"], c["a2a"], c["runner_asked"])
        if key not in memo:
            dep = {"arch": "auto", "quant": c["quant"], "model": suites[c["suite"]], "tp": c["tp"], "ep": c["ep"],
                   "a2a": c["a2a"], "runner": c["runner_asked"], "require_adapter": True,
                   "cuda_graph": gpu and c["a2a"] == "none" and c["runner_asked"] != "torch_native"}
            report = moe_select.explain(dep, environment=env)
            if report.plan is None and dep["cuda_graph"]:
                report = moe_select.explain({**dep, "cuda_graph": False}, environment=env)
            env = env or report.environment
            memo[key] = report
        report = memo[key]
        if report.plan is None:
            codes = sorted({r.code for r in report.reasons})
            c.update(refused=f"{', '.join(codes)}: {report.summary()}"[:600], runner=None, plan=None, cuda_graph=False)
            continue
        p = report.plan
        c.update(refused=None, plan=p.to_json(), runner=p.runner, activation_precision=p.activation_precision,
                 cuda_graph=bool(p.cuda_graph))
        c["graph"] = c["graph"] and c["cuda_graph"]
        # float32 rows: torch_native computes in float32 (and rounds once to float32), so its GEMM inputs are
        # float32 whatever the deployment's bf16 weights make the plan say.
        c["tolerance"] = tolerance("float32", "float32") if c["dtype"] == "float32" else tolerance(p.activation_precision, c["dtype"])


def ref_key(c: dict) -> tuple:
    """What a case's float64 reference depends on: the layer, the weights (quant, ``tp/ep``: each
    intermediate slice is seeded on its own), the check batch (routing variant, tokens)."""
    return (c["suite"], c["quant"], c["moe_tp"], c["routing"], c["check_tokens"])


# ------------------------------------------------------------------------------------------- inputs

def check_inputs(model: dict, tokens: int, seed: int, routing: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The check batch on the CPU: ``x [T, H]`` bf16, ``ids [T, K]`` int32, ``wts [T, K]`` float32 from
    :func:`routed_tokens` (the model's routing), then for ``one_expert`` expert 5 put in slot 0 of every
    token that lacks it, for ``sparse`` ids drawn from {0, 1, 5} with repeats in a row set to -1."""
    x, ids, wts = routed_tokens(model, tokens, seed, "bfloat16")
    if routing == "one_expert":
        hot = (ids == 5).any(dim=1)
        ids[~hot, 0] = 5
    elif routing == "sparse":
        g = torch.Generator().manual_seed(seed + 17)
        k = ids.shape[1]
        ids = torch.tensor([0, 1, 5], dtype=torch.int32)[torch.randint(0, 3, (tokens, k), generator=g)]
        for j in range(1, k):
            ids[:, j] = torch.where((ids[:, :j] == ids[:, j:j + 1]).any(dim=1), -1, ids[:, j])
    return x, ids, wts


def rows_of(rank: int, size: int, total: int, layout: str, split: str) -> tuple[int, int]:
    """``[lo, hi)`` of the ``total`` tokens that ``rank`` passes: all for ``replicated``, else its even share
    (:func:`token_range`) or, ``skewed``, none on rank 0 and the rest spread over ranks 1..size-1."""
    if layout == "replicated":
        return 0, total
    if split == "even":
        return token_range(rank, size, total)
    return (0, 0) if rank == 0 else token_range(rank - 1, size - 1, total)


# ------------------------------------------------------------------------------------------- one rank

class NoCompute:
    """A core that computes nothing: ``forward(x [M, H], ...)`` returns zeros ``[M, H]`` in ``x.dtype``, so
    a dispatcher around it moves exactly the tensors of a real forward (communication alone)."""

    def __init__(self, hidden: int):
        self.hidden = hidden

    def forward(self, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, weights: Any) -> torch.Tensor:
        return x.new_zeros(x.shape[0], self.hidden)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Rank:
    """One rank's state: device, group, a one-element tensor for lining the ranks up, and timing settings."""

    def __init__(self, rank: int, size: int, cfg: dict):
        import torch.distributed as dist

        self.rank, self.size, self.cfg = rank, size, cfg
        self.dev = torch.device("cuda", rank) if cfg["device"] == "cuda" else torch.device("cpu")
        self.world = dist.group.WORLD
        self.flag = torch.zeros(1, device=self.dev)
        self.batches: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def line_up(self) -> None:
        """All-reduce one element and synchronise: every rank leaves within one collective of the others."""
        import torch.distributed as dist

        dist.all_reduce(self.flag, group=self.world)
        _sync(self.dev)

    def over_budget(self) -> bool:
        """True on every rank when any rank is past the deadline (one all-reduce MAX)."""
        import torch.distributed as dist

        late = torch.tensor([1.0 if time.time() > self.cfg["deadline"] else 0.0], device=self.dev)
        dist.all_reduce(late, op=dist.ReduceOp.MAX, group=self.world)
        return bool(late.item() > 0)

    def median_ms(self, fn: Callable[[], Any], warm: int, reps: int) -> float:
        """Median wall time of ``fn`` in ms (:meth:`medians_ms` of one function)."""
        return self.medians_ms([fn], warm, reps)[0]

    def medians_ms(self, fns: list[Callable[[], Any]], warm: int, reps: int) -> list[float]:
        """Median wall time in ms of each of ``fns`` over ``reps`` rounds after ``warm`` untimed calls of
        each; a round calls every function once (interleaved, so drifts of the machine hit all alike),
        each call started after :meth:`line_up` and ended after a device synchronisation."""
        for fn in fns:
            for _ in range(warm):
                fn()
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(reps):
            for fn, ts in zip(fns, times):
                self.line_up()
                t0 = time.perf_counter()
                fn()
                _sync(self.dev)
                ts.append((time.perf_counter() - t0) * 1e3)
        return [statistics.median(ts) for ts in times]

    def tokens(self, suite: str, model: dict, total: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`routed_tokens` ``(x bf16 [total, H], ids int32 [total, K], wts float32 [total, K])`` on the
        CPU, kept per (suite, total, seed): the same batches serve every configuration of a layer."""
        key = (suite, total, seed)
        if key not in self.batches:
            self.batches[key] = routed_tokens(model, total, seed, "bfloat16")
        return self.batches[key]


def forward_fn(runner: Any, pw: Any, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, layout: str, world: Any
               ) -> Callable[[], torch.Tensor]:
    """One layer forward: ``runner.run`` (``[T, H]`` in ``x.dtype``), then for replicated tokens the
    all-reduce of the partial sums over ``world`` (in place)."""
    from moe_select.parallel import all_reduce

    def fn() -> torch.Tensor:
        y = runner.run(x, ids, wts, pw)
        if layout == "replicated":
            all_reduce(y, world)
        return y
    return fn


def without_compute(runner: Any, fwd: Callable[[], torch.Tensor], noop: NoCompute) -> Callable[[], torch.Tensor]:
    """``fwd`` with ``runner``'s core swapped for ``noop`` during the call: the communication alone."""
    def fn() -> torch.Tensor:
        core = runner.core
        runner.core = noop
        try:
            return fwd()
        finally:
            runner.core = core
    return fn


def graph_check(r: Rank, runner: Any, pw: Any, a: tuple, b: tuple, tol: float) -> dict:
    """Capture one forward plus its all-reduce on every rank (inputs ``a`` cloned into static buffers),
    copy inputs ``b`` in, replay, and compare with an eager forward of ``b``: ``partial_equal`` (the
    rank's partial sum, bitwise), ``reduced_equal`` (after the all-reduce, bitwise), ``reduced_rel_diff``,
    ``graph_ms`` / ``eager_ms`` (medians), ``ok``. Falls back to capturing the forward alone when the
    all-reduce cannot be captured (``allreduce_captured`` false, with the error)."""
    from moe_select.parallel import all_reduce

    dev, world = r.dev, r.world
    static = [t.clone() for t in a]
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):
            all_reduce(runner.run(*static, pw), world)
    torch.cuda.current_stream(dev).wait_stream(side)
    _sync(dev)
    out: dict[str, Any] = {"allreduce_captured": True}
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            gp = runner.run(*static, pw)
            gy = gp.clone()
            all_reduce(gy, world)
    except Exception as exc:  # noqa: BLE001 - recorded; then the forward alone
        out.update(allreduce_captured=False, capture_error=f"{type(exc).__name__}: {exc}"[:500])
        _sync(dev)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            gp = runner.run(*static, pw)
        gy = None
    for dst, src in zip(static, b):
        dst.copy_(src)
    r.line_up()
    g.replay()
    if gy is None:
        gy = gp.clone()
        all_reduce(gy, world)
    _sync(dev)
    ep = runner.run(*b, pw)
    ey = ep.clone()
    all_reduce(ey, world)
    _sync(dev)
    diff = float((gy.double() - ey.double()).abs().max()) / max(float(ey.double().abs().max()), 1e-30)
    out.update(partial_equal=bool(torch.equal(gp, ep)), reduced_equal=bool(torch.equal(gy, ey)), reduced_rel_diff=diff)
    out["ok"] = out["partial_equal"] and (out["reduced_equal"] or diff <= tol)
    out["graph_ms"] = r.median_ms(g.replay, 2, r.cfg["reps"])
    fwd = forward_fn(runner, pw, b[0], b[1], b[2], "replicated", world)
    out["eager_ms"] = r.median_ms(fwd, 1, r.cfg["reps"])
    del g
    return out


def run_group(r: Rank, group: list[dict], suites: dict, built: dict) -> None:
    """Resolve one plan, prepare the rank's shard (built once per shard, in ``built``) and run every case
    of ``group`` (same plan, token layouts of one a2a): check, timings, CUDA graph. Writes each case's
    per-rank result into ``case['out']``."""
    from moe_select.parallel import set_tokens

    c0, cfg, dev, world = group[0], r.cfg, r.dev, r.world
    model = suites[c0["suite"]]
    runner = moe_select.resolve(json.loads(c0["plan"]), group=world, device=dev, timeout_s=120)
    skey = (c0["suite"], c0["quant"], c0["tp"], c0["ep"])
    if built.get("key") != skey:
        built.clear()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        t0 = time.perf_counter()
        built.update(key=skey, weights=layer_weights(runner.spec, model, cfg["seed"], dev, generate_on=dev))
        _sync(dev)
        built["build_s"] = time.perf_counter() - t0
    w = dict(built["weights"])
    t0 = time.perf_counter()
    pw = runner.prepare_weights(w.pop("w13"), w.pop("w2"), **w)
    _sync(dev)
    prep_s = time.perf_counter() - t0
    dt = getattr(torch, c0["dtype"])
    for c in group:
        res: dict[str, Any] = {"runner": repr(runner), "build_s": built["build_s"], "prepare_s": prep_s}
        c["out"] = res
        if c["a2a"] == "none":
            set_tokens(runner, c["layout"])
        x, ids, wts = check_inputs(model, c["check_tokens"], cfg["seed"], c["routing"])
        lo, hi = rows_of(r.rank, r.size, c["check_tokens"], c["layout"], c["split"])
        fwd = forward_fn(runner, pw, x[lo:hi].to(dev, dt), ids[lo:hi].to(dev), wts[lo:hi].to(dev), c["layout"], world)
        r.line_up()
        res["y"] = fwd().cpu()
        res["done"] = not c["timed"]
        if c["timed"]:
            res["times"] = {}
            noop = NoCompute(runner.spec.hidden_size)
            for t in cfg["tokens"]:
                total = t if c["layout"] == "replicated" else t * r.size
                tx, tids, twts = r.tokens(c["suite"], model, total, cfg["seed"] + 1 + total)
                lo, hi = rows_of(r.rank, r.size, total, c["layout"], "even")
                a = (tx[lo:hi].to(dev, dt), tids[lo:hi].to(dev), twts[lo:hi].to(dev))
                fwd = forward_fn(runner, pw, *a, c["layout"], world)
                f_ms, c_ms = r.medians_ms([fwd, without_compute(runner, fwd, noop)], cfg["warm"], cfg["reps"])
                res["times"][t] = {"forward_ms": f_ms, "comm_ms": c_ms}
                if c["graph"]:
                    bx, bids, bwts = r.tokens(c["suite"], model, total, cfg["seed"] + 7 + 3 * total)
                    b = (bx.to(dev, dt), bids.to(dev), bwts.to(dev))
                    try:
                        res.setdefault("graph", {})[t] = graph_check(r, runner, pw, a, b, c["tolerance"])
                    except Exception as exc:  # noqa: BLE001 - a failed capture is a result
                        res.setdefault("graph", {})[t] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:800]}
            res["done"] = True
    del runner, pw


def worker(rank: int, size: int, cfg: dict) -> dict:
    """One rank (run by :func:`spawn`): every planned case in order (groups of one plan), then the two
    refusal checks. Saves its results after each group to ``cfg['partial']/rank{rank}.pt`` (a rank killed
    later still leaves them) and returns ``{"cases": {id: result}, "disagreement": ..., "late": ...}``."""
    r = Rank(rank, size, cfg)
    suites, cases = cfg["suites"], [c for c in cfg["cases"] if c["plan"] is not None]
    out: dict[str, Any] = {"cases": {}, "skipped": []}
    partial = Path(cfg["partial"]) / f"rank{rank}.pt"
    groups: list[list[dict]] = []
    for c in cases:
        if groups and all(groups[-1][0][k] == c[k] for k in ("suite", "format", "tp", "ep", "a2a", "plan")):
            groups[-1].append(c)
        else:
            groups.append([c])
    built: dict[str, Any] = {}
    stop = False
    for group in groups:
        stop = stop or r.over_budget()
        if stop:
            out["skipped"] += [c["id"] for c in group]
            continue
        t0 = time.time()
        try:
            run_group(r, group, suites, built)
        except Exception as exc:  # noqa: BLE001 - recorded per case; the ranks go on in step when all raised
            for c in group:
                if not c.get("out", {}).get("done"):
                    c.setdefault("out", {})["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        for c in group:
            out["cases"][c["id"]] = c.pop("out", {"error": "not run"})
        save(out, partial)
        if rank == 0:
            c0 = group[0]
            bad = [c["config"] for c in group if "error" in out["cases"][c["id"]]]
            print(f"[{time.time() - cfg['t_start']:5.0f} s] {c0['suite']} {c0['format']} tp {c0['tp']} ep {c0['ep']} a2a {c0['a2a']} "
                  f"({c0['runner']}): {len(group)} case(s) in {time.time() - t0:.1f} s{f'; ERROR in {bad}' if bad else ''}", flush=True)
    built.clear()
    if r.dev.type == "cuda":
        torch.cuda.empty_cache()
    # Refusals, on the toy plan (torch_native, so every machine has the runner).
    dep = {"arch": "auto", "quant": "bf16", "model": TOY, "tp": size, "ep": size, "a2a": "torch", "runner": "torch_native",
           "cuda_graph": False, "require_adapter": True}
    base = moe_select.plan(dep)
    env = base.environment.model_copy(update={"gpu": "NVIDIA H100"}) if rank == 1 else None
    try:
        moe_select.resolve(moe_select.plan(dep, environment=env) if env else base, group=r.world, device=r.dev,
                           environment=env, timeout_s=30)
        out["disagreement"] = {"refused": False}
    except moe_select.ResolveError as exc:
        out["disagreement"] = {"refused": True, "msg": str(exc)}
    r.line_up()
    wait = cfg["late_timeout_s"]
    gave_up = Path(cfg["partial"]) / "late-rank-check"
    if rank == size - 1:  # never arrives while the others wait: until each has given up (a file), at most 2 * wait + 4 s
        t_end = time.time() + 2 * wait + 4.0
        while time.time() < t_end and len(list(gave_up.glob("rank*"))) < size - 1:
            time.sleep(0.05)
        out["late"] = {"late_rank": True}
    else:
        t = time.perf_counter()
        try:
            moe_select.resolve(base, group=r.world, device=r.dev, timeout_s=wait)
            out["late"] = {"refused": False, "s": time.perf_counter() - t}
        except moe_select.ResolveError as exc:
            out["late"] = {"refused": True, "s": time.perf_counter() - t, "msg": str(exc)}
        gave_up.mkdir(exist_ok=True)
        (gave_up / f"rank{rank}").touch()
    save(out, partial)
    return out


def save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` through a temporary file (a rank killed meanwhile leaves the last whole one)."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------- parent

class References:
    """Computes the float64 references of ``keys`` (in order) in a background thread, while the ranks run.
    ``get(key, deadline)`` waits for one until ``deadline`` (time.time()); None when not done by then.
    ``wanted``: when set, keys outside it are skipped (configurations the budget skipped)."""

    def __init__(self, keys: list[tuple], suites: dict, seed: int, generate_on: str):
        self.keys, self.suites, self.seed, self.generate_on = keys, suites, seed, generate_on
        self.done: dict[tuple, tuple[torch.Tensor, int, float] | Exception] = {}
        self.wanted: set | None = None
        self.stop = False
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for key in self.keys:
            if self.stop:
                break
            if self.wanted is not None and key not in self.wanted:
                continue
            suite, quant, moe_tp, routing, tokens = key
            model = self.suites[suite]
            t0 = time.perf_counter()
            try:
                x, ids, wts = check_inputs(model, tokens, self.seed, routing)
                ref, touched = reference_output(model, quant, moe_tp, self.seed, x, ids, wts, generate_on=self.generate_on)
                val: Any = (ref, touched, time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - reported on the rows that need it
                val = exc
            with self.cv:
                self.done[key] = val
                self.cv.notify_all()

    def get(self, key: tuple, deadline: float) -> Any:
        with self.cv:
            while key not in self.done and time.time() < deadline and self.thread.is_alive():
                self.cv.wait(timeout=max(0.1, min(5.0, deadline - time.time())))
            return self.done.get(key)


def collect(cases: list[dict], ranks: list[dict | None], refs: References, deadline: float) -> list[dict]:
    """One JSON row per case: the planner's outcome, the check (``rel_error`` against the reference,
    ``tolerance``, ``status`` ok / FAIL / error / refused_by_plan / skipped_budget / unchecked), per token
    count the slowest rank's ``forward_ms`` and ``comm_ms``, ``comm_share``, per-rank medians, and the
    CUDA-graph results per rank."""
    rows = []
    for c in cases:
        row: dict[str, Any] = {k: c.get(k) for k in ("suite", "format", "config", "tp", "ep", "a2a", "layout", "routing", "dtype", "check_tokens",
                                     "runner", "activation_precision", "cuda_graph", "tolerance", "refused")}
        rows.append(row)
        if c["plan"] is None:
            row["status"] = "refused_by_plan"
            continue
        outs = [r["cases"].get(c["id"]) if r else None for r in ranks]
        if all(o is None for o in outs):
            row["status"] = "skipped_budget" if any(r and c["id"] in r.get("skipped", ()) for r in ranks) else "not_run"
            continue
        errs = [f"rank {i}: {o['error'] if o is not None else 'no result'}" for i, o in enumerate(outs) if o is None or "error" in o]
        if errs:
            row.update(status="error", error=errs)
            continue
        good = [o for o in outs if o is not None]
        row["runner_repr"] = good[0]["runner"]
        row["build_s"] = max(o["build_s"] for o in good)
        row["prepare_s"] = max(o["prepare_s"] for o in good)
        got = refs.get(ref_key(c), deadline)
        if got is None:
            row["status"] = "unchecked"
        elif isinstance(got, Exception):
            row.update(status="error", error=[f"reference: {type(got).__name__}: {got}"])
        else:
            ref, touched, _ = got
            ys = [o["y"] for o in good] if c["layout"] == "replicated" else [torch.cat([o["y"] for o in good])]
            err = max(rel_error(y, ref) for y in ys)
            row.update(rel_error=err, experts_touched=touched, ok=err <= c["tolerance"], status="ok" if err <= c["tolerance"] else "FAIL")
        if c["timed"] and all("times" in o for o in good):
            row["times"] = []
            for t in good[0]["times"]:
                f = [o["times"][t]["forward_ms"] for o in good]
                m = [o["times"][t]["comm_ms"] for o in good]
                row["times"].append({"tokens_per_rank": t, "forward_ms": max(f), "comm_ms": max(m), "comm_share": max(m) / max(f),
                                     "forward_ms_per_rank": f, "comm_ms_per_rank": m})
        if c["graph"] and all("graph" in o for o in good):
            row["graph"] = [{"tokens_per_rank": t, "ok": all(o["graph"][t].get("ok") for o in good),
                             "ranks": [o["graph"][t] for o in good]} for t in good[0]["graph"]]
            if not all(g["ok"] for g in row["graph"]) and row["status"] == "ok":
                row["status"] = "FAIL"
                row["ok"] = False
    return rows


def fmt_ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def print_tables(rows: list[dict], tokens: list[int]) -> None:
    """Markdown tables: one row per case (error, tolerance, per token count ``forward ms (comm share)``),
    then the CUDA-graph checks."""
    head = "| layer | format | config | tp | ep | a2a | tokens | runner | rel err | tol | result | " + \
        " | ".join(f"T={t}: ms (comm)" for t in tokens) + " |"
    print(head)
    print("|" + "---|" * (11 + len(tokens)))
    for r in rows:
        times = {t["tokens_per_rank"]: t for t in r.get("times") or []}
        cells = [f"{fmt_ms(times[t]['forward_ms'])} ({times[t]['comm_share']:.0%})" if t in times else "-" for t in tokens]
        err = f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else "-"
        tol = f"{r['tolerance']:.1e}" if r.get("tolerance") is not None else "-"
        status = r["status"] if r["status"] != "refused_by_plan" else "refused by plan"
        lay = {"replicated": "repl.", "sharded": "sharded", "own": "own"}[r["layout"]]
        print(f"| {r['suite']} | {r['format']} | {r['config']} | {r['tp']} | {r['ep']} | {r['a2a']} | {lay}"
              f"{'' if r['routing'] == 'model' else ', ' + r['routing']} | {r['runner'] or '-'} | {err} | {tol} | {status} | "
              + " | ".join(cells) + " |")
    graphs = [(r, g) for r in rows for g in r.get("graph") or []]
    if graphs:
        print("\n| layer | format | config | T | partial == eager | all-reduced == eager | replay ms | eager ms | result |")
        print("|---|---|---|---:|---|---|---:|---:|---|")
        for r, g in graphs:
            rk = g["ranks"]
            part = "bitwise" if all(x.get("partial_equal") for x in rk) else "DIFFERS"
            red = "bitwise" if all(x.get("reduced_equal") for x in rk) else \
                f"{max(x.get('reduced_rel_diff', float('nan')) for x in rk):.1e}"
            if not all("graph_ms" in x for x in rk):
                print(f"| {r['suite']} | {r['format']} | {r['config']} | {g['tokens_per_rank']} | - | - | - | - | "
                      f"error: {rk[0].get('error', '')[:120]} |")
                continue
            print(f"| {r['suite']} | {r['format']} | {r['config']} | {g['tokens_per_rank']} | {part} | {red}"
                  f"{'' if all(x.get('allreduce_captured') for x in rk) else ' (all-reduce not captured)'} | "
                  f"{fmt_ms(max(x['graph_ms'] for x in rk))} | {fmt_ms(max(x['eager_ms'] for x in rk))} | {'ok' if g['ok'] else 'FAIL'} |")


def machine(device: str) -> dict:
    """Where this ran: GPU name and count, torch, triton, NCCL versions, CPU count, and the NCCL/PyTorch
    multicast variables as the ranks inherit them."""
    info: dict[str, Any] = {"device": device, "torch": torch.__version__, "cpus": os.cpu_count(),
                            "env": {k: os.environ.get(k) for k in ENV_KEYS}}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001
            info["nccl"] = None
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    return info


def main(argv: list[str] | None = None) -> int:
    t_start = time.time()
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nproc", type=int, default=None, help="ranks (default: the GPUs here; 2 on the CPU)")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default nccl with --device cuda, gloo with cpu")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default cuda when GPUs are here")
    ap.add_argument("--cpu", action="store_true", help="same as --backend gloo --device cpu")
    ap.add_argument("--models", default=None, help="comma-separated NAME[:D] (default Qwen3-30B-A3B,DeepSeek-V3; "
                    "on the CPU Qwen3-30B-A3B,DeepSeek-V3:4)")
    ap.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated subset of {','.join(FORMATS)}")
    ap.add_argument("--float32-shape", choices=("model", "toy"), default=None,
                    help="float32 rows on the --models layers or on the toy shape (default: model on GPUs, toy on the CPU)")
    ap.add_argument("--tokens", default=None, help="tokens per rank to time (default 1,32,256,2048 on GPUs, 1,16 on the CPU)")
    ap.add_argument("--check-tokens", type=int, default=None, help="tokens of the correctness check (default 16; 8 for DeepSeek-V3 sized experts)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per median (default 10 on GPUs, 3 on the CPU)")
    ap.add_argument("--no-edge", action="store_true", help="leave out the uneven-routing cases on the toy shape")
    ap.add_argument("--budget-s", type=float, default=360.0, help="start no configuration after this many seconds (default 360)")
    ap.add_argument("--ref-grace-s", type=float, default=90.0, help="wait this long past the ranks for the float64 references")
    ap.add_argument("--late-timeout-s", type=float, default=3.0, help="timeout_s of the missing-rank check")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.cpu:
        args.backend, args.device = args.backend or "gloo", args.device or "cpu"
    ngpu = torch.cuda.device_count()
    args.device = args.device or ("cuda" if args.backend != "gloo" and ngpu else "cpu")
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    gpu = args.device == "cuda"
    if (args.backend == "nccl") != gpu:
        print("--backend nccl goes with --device cuda, gloo with cpu", file=sys.stderr)
        return 2
    n = args.nproc or (ngpu if gpu else 2)
    if n < 2 or (gpu and ngpu < n):
        print(f"needs --nproc >= 2{f' and <= {ngpu} CUDA GPUs' if gpu else ''} (have {ngpu} GPUs)", file=sys.stderr)
        return 2
    args.models = args.models or ("Qwen3-30B-A3B,DeepSeek-V3" if gpu else "Qwen3-30B-A3B,DeepSeek-V3:4")
    args.float32_shape = args.float32_shape or ("model" if gpu else "toy")
    tokens = [int(t) for t in (args.tokens or ("1,32,256,2048" if gpu else "1,16")).split(",") if t]
    reps = args.reps or (10 if gpu else 3)

    if gpu:  # NVLink multicast off unless the machine already says (the ranks inherit this environment)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    info = machine(args.device)
    print(f"ep_nccl_check: {n} ranks, {args.backend} on {info.get('gpu') or 'cpu'}, torch {info['torch']}, "
          f"triton {info['triton']}, seed {args.seed}; env {info['env']}", flush=True)
    suites, cases = make_cases(args, n, gpu)
    plan_cases(cases, suites, gpu)
    print(f"planned {len(cases)} cases ({sum(c['plan'] is None for c in cases)} refused by the planner) in "
          f"{time.time() - t_start:.1f} s", flush=True)

    keys = list(dict.fromkeys(ref_key(c) for c in cases if c["plan"] is not None))
    threads = max(1, (os.cpu_count() or 2) // n) if not gpu else 4
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - (n * threads if gpu else n)))
    refs = References(keys, suites, args.seed, "cuda" if gpu else "cpu")
    refs.thread.start()

    cfg = {"device": args.device, "seed": args.seed, "t_start": t_start, "tokens": tokens, "reps": reps, "warm": 2 if gpu else 1,
           "late_timeout_s": args.late_timeout_s, "deadline": t_start + args.budget_s, "suites": suites,
           "cases": [{k: v for k, v in c.items()} for c in cases]}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ep-check-") as tmp:
        cfg["partial"] = tmp
        try:
            ranks: list[dict | None] = spawn(worker, n, (cfg,), timeout_s=args.budget_s + 150, backend=args.backend, threads=threads)
        except LaunchError as exc:
            problems = exc.problems
            ranks = list(exc.results or [None] * n)
            for i in range(n):
                f = Path(tmp) / f"rank{i}.pt"
                if ranks[i] is None and f.exists():
                    try:
                        ranks[i] = torch.load(f, weights_only=False)
                    except Exception as err:  # noqa: BLE001 - a rank killed while writing
                        problems.append(f"rank {i}: its partial results do not load: {err}")
    ran = {c["id"] for r in ranks if r for c in cases if c["id"] in r["cases"]}
    refs.wanted = {ref_key(c) for c in cases if c["id"] in ran}
    t_ranks = time.time()
    # Wait for references at most --ref-grace-s, and not past budget + 180 s from the start (a 10-minute call).
    try:
        rows = collect(cases, ranks, refs, deadline=min(t_ranks + args.ref_grace_s, max(t_ranks + 5, t_start + args.budget_s + 180)))
    except Exception:  # noqa: BLE001 - still write what there is
        import traceback

        problems.append(f"collecting the results failed: {traceback.format_exc()}")
        rows = []
    refs.stop = True

    print()
    print_tables(rows, tokens)
    ok = not problems and all(r["status"] not in ("FAIL", "error", "not_run") for r in rows)
    dis = [r.get("disagreement") if r else None for r in ranks]
    dis_ok = all(d and d["refused"] and "rank 1: detected gpu NVIDIA H100 vs" in d["msg"] for d in dis)
    late = [r.get("late") if r else None for r in ranks[:-1]]
    bound = 2 * args.late_timeout_s + 2.0
    late_ok = all(d and d["refused"] and d["s"] <= bound and f"reached the plan agreement within {args.late_timeout_s:g} s" in d["msg"]
                  for d in late)
    print(f"\n{'ok ' if dis_ok else 'BAD'} plan disagreement refused on every rank: "
          f"{(dis[0] or {}).get('msg', 'no result')[:300]!r}")
    print(f"{'ok ' if late_ok else 'BAD'} missing rank: the other ranks refused after "
          f"{[round(d['s'], 2) if d else None for d in late]} s (timeout {args.late_timeout_s:g} s, bound {bound:g} s)")
    for p in problems:
        print(f"BAD {p[:2000]}")
    ok = ok and dis_ok and late_ok
    skipped = [r for r in rows if r["status"] in ("skipped_budget", "unchecked")]
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(r["status"] for r in rows)}
    elapsed = time.time() - t_start
    print(f"\n{'PASS' if ok else 'FAIL'}{' (INCOMPLETE: ' + str(len(skipped)) + ' skipped or unchecked)' if skipped else ''}: "
          f"{counts}; {elapsed:.0f} s")
    if args.json:
        ref_s = {"/".join(map(str, k)): (v[2] if isinstance(v, tuple) else str(v)) for k, v in refs.done.items()}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"argv": sys.argv[1:] if argv is None else argv, "nproc": n, "backend": args.backend, "machine": info,
                       "date": time.strftime("%Y-%m-%d"), "seed": args.seed, "tokens_per_rank": tokens, "reps": reps,
                       "budget_s": args.budget_s, "elapsed_s": elapsed, "ranks_s": t_ranks - t_start,
                       "suites": suites, "rows": rows, "reference_s": ref_s,
                       "disagreement": dis, "late": late, "late_bound_s": bound, "problems": problems,
                       "counts": counts, "complete": not skipped, "ok": ok}, fh, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

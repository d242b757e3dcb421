"""``moe-select run``: plan for this machine, resolve, build one MoE layer of a real model at its real
shapes (seeded random weights), route tokens with the model's routing, run it, and compare with the
float64 reference.

Weights and tokens come from :mod:`moe_select.harness.weights` (seeded per expert, quantized to the
checkpoint's format); the reference rebuilds the same weights, dequantized by its own code, so the
error measures the runner, not the quantization.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from typing import Any, Iterator

from .memory import activation_bytes, available_host_bytes, build_bytes, device_free_bytes, gib, layer_bytes, stored_bytes

#: At most this many tokens are checked against the float64 reference (it loops token by token).
REFERENCE_TOKENS = 256
#: Fraction of the available memory a run may plan to use (allocator slack, fragmentation).
HEADROOM = 0.8


@contextlib.contextmanager
def _progress(on: bool, what: str, every_s: float = 30.0) -> Iterator[None]:
    """While the block runs, print ``what`` and the seconds elapsed every ``every_s`` (a JIT build of
    minutes is never silent); nothing when ``on`` is false."""
    if not on:
        yield
        return
    done = threading.Event()
    t0 = time.perf_counter()

    def beat() -> None:
        while not done.wait(every_s):
            print(f"moe-select run: still {what} ({time.perf_counter() - t0:.0f} s)", flush=True)

    th = threading.Thread(target=beat, daemon=True)
    th.start()
    try:
        yield
    finally:
        done.set()
        th.join()
        print(f"moe-select run: {what} took {time.perf_counter() - t0:.0f} s", flush=True)


def print_refusal(report: Any, file: Any = None) -> None:
    """Print a refused :class:`~moe_select.report.Report` as ``moe-select run`` does, one process or
    ``--nproc``: its summary (one line: the deployment and every reason code), then the report (the input as
    understood, the environment, and every candidate with every reason, its source and its fix), on
    ``file`` (default stdout)."""
    out = file or sys.stdout
    print(report.summary(), file=out)
    print(report.render_text(), file=out, flush=True)


def no_build_alternative(report: Any, catalog: Any) -> str | None:
    """The first eligible alternative of ``report``'s plan (rule order) whose first call builds no kernels
    (no JIT fact, or its JIT package prebuilt on the machine), or None."""
    env = report.environment
    for name in report.plan.alternatives:
        jit = catalog.runners[name].jit
        if jit is None or env.prebuilt.get(jit.package) is True:
            return str(name)
    return None


def memory_refusal(spec: Any, quant: str, tokens: int, device_type: str) -> str | None:
    """Why ``tokens`` tokens through the layer ``spec`` in ``quant`` cannot fit on this machine, or None.

    Counts the weights as built (:func:`~moe_select.harness.memory.build_bytes`), the forward's temporaries
    (:func:`~moe_select.harness.memory.activation_bytes`) and the float64 reference, which runs on the same
    device and holds one expert at a time (it rebuilds the touched experts from their seeds): the stored
    slice's float64 form, the dequantized copy and the canonical concatenation, three float64 experts at
    most. ``device_type`` ``cpu``: against the host's available RAM; ``cuda``: against the device's free
    memory. The advice names only what helps: fewer ``--tokens`` when the temporaries are the problem; when
    the weights alone do not fit, nothing run can do here (``--nproc`` splits the layer over processes of
    this same machine, so the total stays the same)."""
    weights = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, build_bytes(quant))
    per_token = activation_bytes(tokens=1, hidden=spec.hidden_size, inter=spec.intermediate_size, top_k=spec.top_k,
                                 num_experts=spec.num_experts)
    acts = per_token * tokens
    ref = 3 * layer_bytes(1, spec.w13_rows, spec.hidden_size, spec.intermediate_size, 8)  # float64 experts
    if device_type == "cuda":
        free, where = device_free_bytes(None), "free on the GPU"
    else:
        free, where = available_host_bytes(), "available"
    need = weights + acts + ref
    budget = free * HEADROOM
    if need > budget:
        base = weights + ref
        fit_tokens = int((budget - base) // per_token) if budget > base else 0
        what = (f"the layer needs about {gib(need)} (weights {gib(weights)}, temporaries for {tokens} tokens "
                f"{gib(acts)}, float64 reference {gib(ref)}); {gib(free)} is {where}, of which run plans on "
                f"{HEADROOM:.0%} ({gib(budget)}: the rest is headroom for the allocator and the runner's own buffers)")
        if fit_tokens >= 1 and acts > budget - base:
            return f"{what}: use --tokens {fit_tokens} or fewer"
        return (f"{what}: the weights alone do not fit, whatever --tokens; run it on a machine with more memory "
                "(--nproc splits the layer over processes of this same machine: the total stays the same)")
    return None


def run_layer(args: argparse.Namespace) -> int:
    """Body of ``moe-select run`` (single process). Returns the exit code: 0 when the error against the
    float64 reference is within the format's tolerance, 1 otherwise or when refused.

    Prints, as each step ends (each line flushed): the plan (before resolve), the layer, the resolved
    runner, then one line per phase: ``weights`` (built and prepared), ``forward`` (the first call and the
    timed ones), ``graph`` (when the plan captures CUDA graphs and the layer runs on a GPU: the forward
    captured once, replayed on the same inputs, checked equal to the eager output bit for bit, and timed;
    the error is then measured on the replay's output), ``reference`` (the float64 reference, one touched
    expert at a time), and the error. ``args.layer``: the MoE layer kind to build (``main``, or a kind of the
    checkpoint's ``plan.layers``: DeepSeek-V3.1-NVFP4's bf16 ``mtp`` layer). While a phase runs, a
    :class:`~moe_select.harness.progress.Phase` bar counts its steps on stderr (a terminal only). Exit 1 also
    when a graph replay differs from eager."""
    import torch

    from ..deployment import deployment_from_dict
    from ..layer import LayerSpec
    from ..formats import tolerance
    from ..reference import rel_error
    from ..errors import ResolveError
    from ..resolver import resolve
    from ..weight_checks import weights_refusal
    from ..selector import explain
    from .progress import Phase
    from .weights import has_expert_bias, layer_weights, reference_output, routed_tokens, touched_experts

    if (args.tp or 1) > 1 or (args.ep or 1) > 1:
        print("moe-select run: tp/ep > 1 in one process would build one rank's shard only; use --nproc N", file=sys.stderr)
        return 2
    # This install's adapters run the layer: planned for engine moe_select (README "Runners"), never a serving engine's facts.
    values: dict[str, Any] = {"arch": "auto", "model_config": args.model_config, "runner": args.runner, "engine": "moe_select",
                              "require_adapter": True}
    if args.device == "cpu":
        values["arch"] = "cpu"
        values["packages"] = None
    for k in ("quant", "a2a", "cuda_graph"):
        if getattr(args, k, None) is not None:
            values[k] = getattr(args, k)
    values = {k: v for k, v in values.items() if v is not None}
    dep = deployment_from_dict(values, "<moe-select run>")
    environment = None
    if args.device == "cpu":
        from ..catalog import default_catalog
        from ..environment import detect

        catalog = default_catalog(args.rules)
        environment = detect(catalog.packages(), arch=("cpu", None), need_nvcc=False, markers=catalog.package_markers())
    report = explain(dep, environment=environment, rules_dirs=args.rules)
    allow_jit = getattr(args, "allow_jit", False)
    if report.plan is not None and report.plan.jit is not None and not allow_jit and args.runner == "auto":
        # Never a silent build: prefer the next eligible runner (in rule order) whose first call builds nothing.
        from ..catalog import default_catalog

        quick = no_build_alternative(report, default_catalog(args.rules))
        if quick is not None:
            print(f"moe-select run: {report.plan.runner} would build kernels at its first call ({report.plan.jit}); "
                  f"using {quick}, the next eligible runner that needs no build (--allow-jit to build)")
            report = explain(deployment_from_dict({**values, "runner": quick}, "<moe-select run>"), environment=environment,
                             rules_dirs=args.rules)
    if report.plan is None:
        print_refusal(report)
        return 1
    print(report.summary(), flush=True)
    plan = report.plan
    kind = getattr(args, "layer", None) or "main"
    if kind != "main":
        kinds = {sub.deployment.layer_kind: sub for sub in plan.layers}
        if kind not in kinds:
            print(f"moe-select run: --layer {kind}: this checkpoint's MoE layer kinds are main"
                  f"{', ' + ', '.join(sorted(kinds)) if kinds else ''}", file=sys.stderr)
            return 2
        plan = kinds[kind]
        print(f"layer kind {kind}: {plan.runner} ({plan.quant}), rule {plan.chosen_by.rule if plan.chosen_by else '-'}",
              flush=True)
    if plan.jit is not None and not allow_jit:
        print(f"moe-select run: {plan.runner} would build kernels at its first call and no eligible runner avoids it: "
              f"{plan.jit}. Give --allow-jit to build them, or install the prebuilt kernels",
              file=sys.stderr)
        return 1
    if plan.jit is not None:
        print(f"moe-select run: building {plan.runner}'s kernels at the first call ({plan.jit}); this can take minutes",
              flush=True)
    refused = weights_refusal(plan.quant, "moe-select run")
    if refused is not None:  # no row: nothing here makes, dequantizes or bounds its weights
        raise ResolveError([refused])
    spec = LayerSpec.from_plan(plan)
    need = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size,
                       stored_bytes(plan.quant))
    print(f"layer: E={spec.num_experts} K={spec.top_k} H={spec.hidden_size} I={spec.intermediate_size} {spec.activation} "
          f"{plan.deployment.model.routing} {plan.quant}{' + expert biases' if has_expert_bias(plan.deployment.model.as_dict()) else ''}; "
          f"expert weights {need / 2**30:.2f} GiB", flush=True)
    refusal = memory_refusal(spec, plan.quant, args.tokens, "cpu" if plan.arch == "cpu" else "cuda")
    if refusal:
        print(f"moe-select run: {refusal}", file=sys.stderr)
        return 1
    # Refusing a plan whose first call builds for minutes is resolve's require_prebuilt (dependency_missing).
    runner = resolve(plan, device=args.device, environment=environment, require_prebuilt=not allow_jit)
    device = runner.device
    print(f"runner: {runner}", flush=True)
    m = plan.deployment.model.as_dict()
    with Phase("weights", spec.num_local_experts, "expert") as ph:
        weights = layer_weights(spec, m, args.seed, device, generate_on=device, progress=ph)
        prepared = runner.prepare_weights(weights.pop("w13"), weights.pop("w2"), **weights)
        del weights
    print(f"weights: {spec.num_local_experts} experts built and prepared in {ph.seconds:.2f} s", flush=True)
    dtype = "float16" if plan.quant == "fp16" else "bfloat16"
    x, topk_ids, topk_w = routed_tokens(m, args.tokens, args.seed, dtype)
    x, topk_ids, topk_w = x.to(device), topk_ids.to(device), topk_w.to(device)
    times = []
    with Phase("forward", 1 + max(1, args.repeat), "call") as ph:
        t = time.perf_counter()
        with _progress(plan.jit is not None, f"building {plan.runner}'s kernels"):
            out = runner.run(x, topk_ids, topk_w, prepared)  # warm-up (the first call: where a JIT build happens)
            if device.type == "cuda":
                torch.cuda.synchronize()
        first = time.perf_counter() - t
        ph.advance()
        for _ in range(max(1, args.repeat)):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            out = runner.run(x, topk_ids, topk_w, prepared)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            ph.advance()
    touched = touched_experts(topk_ids)
    print(f"forward: median {statistics.median(times) * 1e3:.2f} ms over {len(times)} runs ({device.type}); first call "
          f"{first * 1e3:.2f} ms; tokens {args.tokens}, experts touched {touched}/{spec.num_experts}", flush=True)
    graph_differs = False
    if plan.cuda_graph and device.type == "cuda":
        out, graph_differs = _graph_replay(runner, prepared, x, topk_ids, topk_w, out, max(1, args.repeat))
    n_ref = min(args.tokens, REFERENCE_TOKENS)  # the float64 reference is a token-by-token loop
    checked = f" (first {n_ref} of {args.tokens} tokens)" if n_ref < args.tokens else ""
    with Phase("reference", touched_experts(topk_ids[:n_ref]), "expert") as ph:
        ref, n_experts = reference_output(m, plan.quant, 1, args.seed, x[:n_ref].cpu(), topk_ids[:n_ref].cpu(), topk_w[:n_ref].cpu(),
                                          generate_on=device, device=device, progress=ph, block=spec.block_shape)
    print(f"reference: float64, {n_experts} experts{checked} in {ph.seconds:.2f} s on {device.type}", flush=True)
    err = rel_error(out[:n_ref], ref)
    tol = tolerance(plan.activation_precision, str(out.dtype).removeprefix("torch."))
    print(f"max relative error vs float64 reference{checked}: {err:.2e} (tolerance {tol:.1e} for {plan.activation_precision} activations, {out.dtype} output): "
          f"{'OK' if err <= tol else 'TOO LARGE'}")
    return 0 if err <= tol and not graph_differs else 1


def _graph_replay(runner: Any, prepared: Any, x: Any, ids: Any, wts: Any, eager: Any, repeat: int) -> tuple[Any, bool]:
    """Capture one forward of ``runner`` in a CUDA graph (static copies of the inputs; warmed up on a side
    stream first, as torch's capture needs), replay it, compare its output with the ``eager`` one bit for bit
    and time ``repeat`` replays. Prints the ``graph`` line; returns (the replay's output, whether it differs)."""
    import torch

    from .progress import Phase

    with Phase("graph", 1 + repeat, "replay") as ph:
        sx, sids, sw = x.clone(), ids.clone(), wts.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            runner.run(sx, sids, sw, prepared)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gout = runner.run(sx, sids, sw, prepared)
        graph.replay()
        torch.cuda.synchronize()
        ph.advance()
        same = bool(torch.equal(gout, eager))
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            graph.replay()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            ph.advance()
        out = gout.clone()
        del graph
    print(f"graph: captured in one CUDA graph; replay {'equals' if same else 'DIFFERS FROM'} eager (bitwise); median "
          f"{statistics.median(times) * 1e3:.3f} ms over {repeat} replays", flush=True)
    return out, not same

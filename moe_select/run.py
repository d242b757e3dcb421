"""``moe-select run``: plan for this machine, resolve, build one MoE layer of a real model at its real
shapes (seeded random weights), route tokens with the model's routing, run it, and compare with the
float64 reference.

Weights are drawn per expert (``randn / sqrt(fan_in)``, so activations stay O(1)) and quantized to the
checkpoint's format when it is one the runner takes (FP8 via :mod:`moe_select.ops`); the reference
uses the same (dequantized) weights, so the error measures the runner, not the quantization.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from .memory import BUILD_BYTES, activation_bytes, available_host_bytes, device_free_bytes, gib, layer_bytes

#: At most this many tokens are checked against the float64 reference (it loops token by token).
REFERENCE_TOKENS = 256
#: Fraction of the available memory a run may plan to use (allocator slack, fragmentation).
HEADROOM = 0.8


def make_weights(spec: Any, quant: str, device: Any, seed: int) -> dict[str, Any]:
    """Seeded canonical weights for ``spec``'s local experts: ``w13 [E_local, 2I|I, H]``, ``w2
    [E_local, H, I]`` in ``quant`` (with ``w13_scale``/``w2_scale`` for FP8 and FP4, and
    ``w13_global_scale``/``w2_global_scale`` for nvfp4), built expert by expert."""
    import torch

    from .ops import quantize_named

    g = torch.Generator(device="cpu").manual_seed(seed)
    e, rows, h, i = spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size
    w13 = w2 = None
    s13: dict[str, Any] = {}
    s2: dict[str, Any] = {}
    for k in range(e):
        a = torch.randn(1, rows, h, generator=g) / h ** 0.5
        b = torch.randn(1, h, i, generator=g) / i ** 0.5
        qa, sa = quantize_named(a, quant)
        qb, sb = quantize_named(b, quant)
        if w13 is None:  # shapes from the quantized tensors: packed formats store K/2 columns
            w13 = torch.empty((e, *qa.shape[1:]), dtype=qa.dtype, device=device)
            w2 = torch.empty((e, *qb.shape[1:]), dtype=qb.dtype, device=device)
            s13 = {n: torch.empty((e, *t.shape[1:]), dtype=t.dtype, device=device) for n, t in sa.items()}
            s2 = {n: torch.empty((e, *t.shape[1:]), dtype=t.dtype, device=device) for n, t in sb.items()}
        w13[k], w2[k] = qa[0], qb[0]
        for n in sa:
            s13[n][k], s2[n][k] = sa[n][0], sb[n][0]
    out = {"w13": w13, "w2": w2}
    out.update({f"w13_{n}": t for n, t in s13.items()})
    out.update({f"w2_{n}": t for n, t in s2.items()})
    return out


def reference_experts(weights: dict[str, Any], quant: str) -> tuple[Any, Any]:
    """The stored weights as :class:`~moe_select.reference.QuantizedExperts` (w13, w2): the float64
    reference dequantizes them one expert at a time, with its own code (not :mod:`moe_select.ops`)."""
    from .reference import QuantizedExperts

    def part(name: str) -> Any:
        prefix = f"{name}_"
        return QuantizedExperts(weights[name].cpu(), {k[len(prefix):]: v.cpu() for k, v in weights.items() if k.startswith(prefix)}, quant)

    return part("w13"), part("w2")


def memory_refusal(spec: Any, quant: str, tokens: int, device_type: str) -> str | None:
    """Why ``tokens`` tokens through the layer ``spec`` in ``quant`` cannot fit on this machine, or None.

    Counts the weights as built (:data:`~moe_select.memory.BUILD_BYTES`), the forward's temporaries
    (:func:`~moe_select.memory.activation_bytes`) and the reference's copy of the experts its first
    :data:`REFERENCE_TOKENS` tokens touch (as stored, plus one expert in float64 at a time). ``device_type`` ``cpu``: all of it against the host's
    available RAM; ``cuda``: weights and temporaries against the device's free memory, the reference
    against the host. The advice names only what helps: fewer ``--tokens`` when the temporaries are
    the problem; when the weights alone do not fit, nothing run can do here (``--nproc`` splits the
    layer over processes of this same machine, so the total stays the same)."""
    weights = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, quant, BUILD_BYTES)
    per_token = activation_bytes(tokens=1, hidden=spec.hidden_size, inter=spec.intermediate_size, top_k=spec.top_k,
                                 num_experts=spec.num_experts)
    acts = per_token * tokens
    ref_experts = min(spec.num_local_experts, min(tokens, REFERENCE_TOKENS) * spec.top_k)
    ref = (layer_bytes(ref_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, quant)  # a stored copy
           + layer_bytes(1, spec.w13_rows, spec.hidden_size, spec.intermediate_size, quant, {quant: 8}))  # one in float64
    host = available_host_bytes()
    if device_type == "cuda":
        free, where = device_free_bytes(None), "free on the GPU"
        on_device, host_need = weights + acts, ref
    else:
        free, where = host, "available"
        on_device, host_need = weights + acts + ref, 0
    budget = free * HEADROOM
    if on_device > budget:
        base = weights + (0 if device_type == "cuda" else ref)
        fit_tokens = int((budget - base) // per_token) if budget > base else 0
        what = (f"the layer needs about {gib(on_device)} (weights {gib(weights)}, temporaries for {tokens} tokens "
                f"{gib(acts)}{'' if device_type == 'cuda' else f', reference {gib(ref)}'}); {gib(free)} is {where}")
        if fit_tokens >= 1 and acts > budget - base:
            return f"{what}: use --tokens {fit_tokens} or fewer"
        return (f"{what}: the weights alone do not fit, whatever --tokens; run it on a machine with more memory "
                "(--nproc splits the layer over processes of this same machine: the total stays the same)")
    if host_need > host * HEADROOM:
        return (f"the float64 reference needs about {gib(host_need)} of host memory for the experts its first "
                f"{min(tokens, REFERENCE_TOKENS)} tokens touch; {gib(host)} is available: use fewer --tokens")
    return None


def run_layer(args: argparse.Namespace) -> int:
    """Body of ``moe-select run`` (single process). Returns the exit code: 0 when the error against the
    float64 reference is within the format's tolerance, 1 otherwise or when refused."""
    import torch

    from .deployment import deployment_from_dict
    from .layer import LayerSpec
    from .reference import TOLERANCE, reference_moe, rel_error
    from .resolver import resolve
    from .routing import route
    from .selector import explain

    if (args.tp or 1) > 1 or (args.ep or 1) > 1:
        print("moe-select run: tp/ep > 1 in one process would build one rank's shard only; use --nproc N", file=sys.stderr)
        return 2
    values: dict[str, Any] = {"arch": "auto", "model_config": args.model_config, "runner": args.runner, "require_adapter": True}
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
        from .catalog import default_catalog
        from .environment import detect

        environment = detect(default_catalog(args.rules).packages(), arch=("cpu", None), need_nvcc=False)
    report = explain(dep, environment=environment, rules_dirs=args.rules)
    print(report.summary())
    if report.plan is None:
        print(report.render_text())
        return 1
    plan = report.plan
    spec = LayerSpec.from_plan(plan)
    need = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, plan.quant)
    print(f"layer: E={spec.num_experts} K={spec.top_k} H={spec.hidden_size} I={spec.intermediate_size} {spec.activation} "
          f"{plan.deployment.model['routing']} {plan.quant}; expert weights {need / 2**30:.2f} GiB")
    refusal = memory_refusal(spec, plan.quant, args.tokens, "cpu" if plan.arch == "cpu" else "cuda")
    if refusal:
        print(f"moe-select run: {refusal}", file=sys.stderr)
        return 1
    runner = resolve(plan, device=args.device, environment=environment)
    device = runner.device
    t0 = time.perf_counter()
    weights = make_weights(spec, plan.quant, device, args.seed)
    prepared = runner.prepare_weights(weights["w13"], weights["w2"],
                                      **{k: v for k, v in weights.items() if k not in ("w13", "w2")})
    t_load = time.perf_counter() - t0
    g = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    dtype = torch.float16 if plan.quant == "fp16" else torch.bfloat16
    x = torch.randn(args.tokens, spec.hidden_size, generator=g).to(device=device, dtype=dtype)
    router = torch.randn(spec.num_experts, spec.hidden_size, generator=g) / spec.hidden_size ** 0.5
    m = plan.deployment.model
    bias = torch.randn(spec.num_experts, generator=g) * 0.1 if m["routing"] in ("deepseek_v3", "sigmoid_topk") else None
    topk_w, topk_ids = route(x.float().cpu() @ router.t(), m["routing"], spec.top_k, n_group=m.get("n_group"),
                             topk_group=m.get("topk_group"), routed_scaling_factor=m.get("routed_scaling_factor"),
                             correction_bias=bias)
    topk_w, topk_ids = topk_w.to(device), topk_ids.to(device)
    out = runner.run(x, topk_ids, topk_w, prepared)  # warm-up
    times = []
    for _ in range(max(1, args.repeat)):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = runner.run(x, topk_ids, topk_w, prepared)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    n_ref = min(args.tokens, REFERENCE_TOKENS)  # the float64 reference is a token-by-token loop
    # Only the experts the checked tokens touch are dequantized for the reference (ids remapped to them).
    ref_ids = topk_ids[:n_ref].cpu().long()
    touched_ids = torch.unique(ref_ids[ref_ids >= 0])
    remap = torch.full((spec.num_experts,), -1, dtype=torch.long)
    remap[touched_ids] = torch.arange(len(touched_ids))
    w13f, w2f = reference_experts({k: v[touched_ids.to(v.device)] for k, v in weights.items()}, plan.quant)
    del weights
    ref = reference_moe(x[:n_ref], remap[ref_ids], topk_w[:n_ref], w13f, w2f, spec.activation, swiglu_limit=spec.swiglu_limit)
    err = rel_error(out[:n_ref], ref)
    tol = TOLERANCE[str(out.dtype).removeprefix("torch.")]
    touched = len(set(topk_ids.flatten().tolist()))
    print(f"runner: {runner}")
    print(f"tokens {args.tokens}, experts touched {touched}/{spec.num_experts}; weights built and prepared in {t_load:.2f} s")
    print(f"forward: median {statistics.median(times) * 1e3:.2f} ms over {len(times)} runs ({device.type})")
    checked = f" (first {n_ref} of {args.tokens} tokens)" if n_ref < args.tokens else ""
    print(f"max relative error vs float64 reference{checked}: {err:.2e} (tolerance {tol:.0e} for {out.dtype}): "
          f"{'OK' if err <= tol else 'TOO LARGE'}")
    return 0 if err <= tol else 1

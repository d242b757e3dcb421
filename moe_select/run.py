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

#: At most this many tokens are checked against the float64 reference (it loops token by token).
REFERENCE_TOKENS = 256
#: Bytes per stored expert-weight element (mxfp4: two e2m1 per byte; its e8m0 scales are 1/32 more).
STORED_BYTES = {"bf16": 2, "fp16": 2, "fp8_tensor": 1, "fp8_channel": 1, "fp8_block": 1, "mxfp4": 0.5, "nvfp4": 0.5}
#: Bytes per element while the layer is built: the stored weights plus, for the formats torch_native
#: dequantizes in prepare_weights, its float32 copy (launch.WEIGHT_BYTES reads its entries from here).
BUILD_BYTES = {"bf16": 2, "fp16": 2, "fp8_tensor": 1 + 4, "fp8_channel": 1 + 4, "fp8_block": 1 + 4, "mxfp4": 0.5 + 4,
               "nvfp4": 0.5 + 4}


def layer_bytes(num_local_experts: int, w13_rows: int, hidden: int, inter: int, quant: str, table=STORED_BYTES) -> int:
    """Bytes of one rank's expert weights (w13 + w2) in ``quant``, per element as ``table`` counts them
    (16-bit for formats it does not list)."""
    return int(num_local_experts * (w13_rows * hidden + hidden * inter) * table.get(quant, 2))


def available_memory() -> int:
    """Available RAM in bytes (``MemAvailable`` from /proc/meminfo; 8 GiB when unreadable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


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


def dequantized(weights: dict[str, Any], quant: str) -> tuple[Any, Any]:
    """The canonical weights as float32 (for the reference), dequantizing scaled formats."""
    from .ops import dequantize_named

    def part(name: str) -> Any:
        prefix = f"{name}_"
        return dequantize_named(weights[name], {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}, quant)

    return part("w13"), part("w2")


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
    avail = available_memory() if plan.arch == "cpu" else None
    print(f"layer: E={spec.num_experts} K={spec.top_k} H={spec.hidden_size} I={spec.intermediate_size} {spec.activation} "
          f"{plan.deployment.model['routing']} {plan.quant}; expert weights {need / 2**30:.2f} GiB")
    build = layer_bytes(spec.num_local_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, plan.quant, BUILD_BYTES)
    # The reference dequantizes (float32) the experts the first REFERENCE_TOKENS tokens touch.
    ref_experts = min(spec.num_local_experts, min(args.tokens, REFERENCE_TOKENS) * spec.top_k)
    build += layer_bytes(ref_experts, spec.w13_rows, spec.hidden_size, spec.intermediate_size, plan.quant, {plan.quant: 4})
    if avail is not None and build * 1.25 > avail:
        print(f"moe-select run: the layer needs about {build * 1.25 / 2**30:.1f} GiB while it is built, "
              f"{avail / 2**30:.1f} GiB is available; split it with --nproc N --ep N", file=sys.stderr)
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
    bias = torch.randn(spec.num_experts, generator=g) * 0.1 if m["routing"] == "deepseek_v3" else None
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
    w13f, w2f = dequantized({k: v[touched_ids.to(v.device)] for k, v in weights.items()}, plan.quant)
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

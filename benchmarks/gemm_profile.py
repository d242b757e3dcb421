"""Where the ``triton`` runner's time goes at large token counts: each step of one forward timed alone, and
each GEMM beside variants that isolate one cause, on one GPU.

    python benchmarks/gemm_profile.py --out $OUT/gemm_profile.json [--points Qwen3-30B-A3B:bf16:8192 ...]

Per point (layer, format, tokens; the layers of ``benchmarks/tune_triton_moe.py``), with the tile
configuration the runner uses (``backends/triton_configs/``) and CUDA-graph replay of 2 rotated input sets
(``tune_triton_moe.Timer``), microseconds per call and TFLOP/s:

- ``sort``, ``group_quant`` (fp8_block: the hidden states' per-token-group quantization), ``combine``
  (the top-k sum);
- ``gemm1``/``gemm2``: the runner's GEMMs as they run (unmasked main loop where ``K % BLOCK_K == 0``);
- ``gemm{1,2}.min_m{16,32,64}``: the runner's tiles with ``MIN_M`` (blocks whose rows from ``m`` on are padding run as
  ``m``-row tiles), for ``m`` below the bucket's ``BLOCK_M``; ``max_abs_diff``: the largest difference from the
  full tiles' output (the first GEMM's rows in use, the layer's output after the second);
- ``*.masked``: the same with the K-masked main loop (``EVEN_K`` off, the kernel before 2026-11-30 late);
- ``*.tma``: the same tiles with ``TMA`` (the weight tiles loaded through a TMA tensor descriptor);
- ``gemm2.wgmma.n{BLOCK_N}_s{stages}_w{warps}`` (sm90, bf16 / fp16 / fp8_tensor / fp8_channel): the second GEMM through
  the Gluon wgmma kernel (``WGMMA``, backends/triton_moe_wgmma.py); ``max_abs_diff``: the layer's output against the
  runner's tiles' (``max_abs_ref`` its largest value); ``gemm2.wgmma.pp_n{BLOCK_N}_s{stages}``: its ``PINGPONG`` form
  (two 4-warp consumer warpgroups on alternate tiles, a 1-warp TMA producer);
- ``gemm1.gu.file`` / ``gemm1.gu.n{BLOCK_N}_w{warps}_s{stages}`` (bf16 / fp16 / fp8_tensor / fp8_channel, gated): the first
  GEMM with ``GU_DOT`` and ``TMA`` (gate and up tiles in one TMA box and one MMA), the file's tile or these shapes;
  ``gemm1.tma.n{...}``: the same shapes with two accumulators (``TMA`` only), so each pair differs in ``GU_DOT`` alone;
  ``max_abs_diff``: the first GEMM's rows in use against the file's tiles';
- ``gemm1.unfused.*``: the first GEMM as one ``[BLOCK_M, BLOCK_N]`` accumulator over the ``2*I`` gate and up
  rows, bf16 out, no activation (the layout of a split GEMM + activation kernel), ``BLOCK_M`` 128;
- ``gemm2.sorted``: the second GEMM writing sorted rows without the routing weight (the epilogue's
  scatter by slot and weight taken out);
- ``*.dense``: one dense GEMM of the same ``M x N x K`` (all rows, expert 0's weights): ``torch.mm`` for
  bf16, ``torch._scaled_mm`` with row-wise scales for FP8 (cuBLAS: the tensor-core rate at that shape);
- ``*.balanced``: the runner's GEMMs on a routing that gives every expert exactly ``T * top_k / E`` slots (where
  ``E`` divides it; token ``t``'s experts ``perm[(t * top_k + j) % E]``, distinct for ``top_k <= E``), the same
  tiles: without the partial last tile of each expert that random routing leaves (at 2048 tokens on 128 experts,
  128 +- 11 rows per expert: about half the experts take a second, nearly empty 128-row tile). ``rows`` records the
  padded rows in use of both routings (``num_rows`` of the sort) against the slots.

``--only`` times just the steps named (the others are not set up where they need their own passes).
Prints a table and writes every number as JSON. Needs a CUDA GPU; not run in CI.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton_moe as T  # noqa: E402

DEFAULT_POINTS = ("Qwen3-30B-A3B:bf16:8192", "Qwen3-30B-A3B:fp8_channel:8192", "Qwen3-30B-A3B:fp8_block:8192",
                  "Qwen3-30B-A3B:bf16:2048", "Qwen3-30B-A3B:fp8_block:1", "Qwen3-30B-A3B:bf16:1",
                  "Mixtral-8x7B:fp8_block:8192", "DeepSeek-V3:fp8_block:8192")
#: (BLOCK_N, num_stages, num_warps) of the ``gemm2.wgmma.*`` variants (the Gluon wgmma second GEMM; 4 warps only at
#: BLOCK_M 64)
WGMMA_VARIANTS = ((256, 4, 8), (256, 3, 8), (128, 4, 8), (128, 4, 4))
#: (BLOCK_N, num_stages) of the ``gemm2.wgmma.pp_*`` variants (``PINGPONG``: two 4-warp consumers on alternate tiles
#: and a 1-warp TMA producer; ``BLOCK_M * BLOCK_N`` at most 16384, so ``BLOCK_N`` 256 only at ``BLOCK_M`` 64)
PINGPONG_VARIANTS = ((128, 4), (128, 5), (128, 6), (64, 6), (256, 4), (256, 5))
#: (BLOCK_N, num_warps, num_stages) of the ``gemm1.gu.*`` variants (``GU_DOT`` with ``TMA``: the gate and up tiles as one
#: MMA of ``2 * BLOCK_N`` columns), next to the file's own tile with it (``gemm1.gu.file``)
GU_VARIANTS = ((64, 4, 4), (128, 8, 3), (128, 8, 4))
UNFUSED = ({"BLOCK_N": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
           {"BLOCK_N": 256, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
           {"BLOCK_N": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4})


def profile_point(name: str, fmt: str, tokens: int, dev: torch.device, timer, only: frozenset = frozenset()) -> dict:
    """Time one (layer, format, token count) on ``dev`` (module doc): returns ``{"layer", "format", "tokens",
    "config", "steps": {label: {"us", "tflops"} or {"error"}}}``; microseconds per call, TFLOP/s from the
    layer's flops (``2 * T * K * N * K_dim`` per GEMM)."""
    from moe_select.backends import triton_moe_kernels as K
    from moe_select.backends.triton_moe import ForwardPass

    bench = T.Bench(name, T.MODELS[name], fmt, dev, T.BLOCK)
    k, h, i = bench.k, bench.h, bench.i
    w_mode = bench.core.w_mode
    cfg = bench.core.config_for(tokens)
    bm = cfg["BLOCK_M"]
    sets = bench.inputs(tokens, seed=1, n_sets=2)
    passes = [ForwardPass(bench.core, bench.weights, x, ids, tw, bm) for x, ids, tw in sets]
    s = tokens * k
    n13 = bench.n13
    flops1, flops2 = 2.0 * s * n13 * h, 2.0 * s * h * i
    rows: dict[str, dict] = {}

    def run(label: str, launches: list, flops: float = 0.0) -> None:
        if only and not any(fnmatch.fnmatchcase(label, pat) for pat in only):
            return
        try:
            us = timer(launches)
        except Exception as exc:  # a variant that does not compile or launch: recorded, not fatal
            rows[label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            return
        rows[label] = {"us": round(us, 2), "tflops": round(flops / us / 1e6, 1) if flops else None}

    run("sort", [p.sort for p in passes])
    if fmt == "fp8_block":
        run("group_quant", [lambda x=x: K.group_quant(x, T.BLOCK[1]) for x, _, _ in sets])
    for p in passes:
        p.gemm1(cfg["gemm1"])
    run("gemm1", [lambda p=p: p.gemm1(cfg["gemm1"]) for p in passes], flops1)
    run("gemm1.masked", [lambda p=p: p.gemm1({**cfg["gemm1"], "EVEN_K": False}) for p in passes], flops1)
    run("gemm2", [lambda p=p: p.gemm2(cfg["gemm2"]) for p in passes], flops2)
    run("gemm2.masked", [lambda p=p: p.gemm2({**cfg["gemm2"], "EVEN_K": False}) for p in passes], flops2)
    run("combine", [p.combine for p in passes])
    # MIN_M: the blocks whose rows from m on are padding as m-row tiles; the outputs against the full tiles'
    for m in (16, 32, 64):
        if m >= bm or (only and f"gemm1.min_m{m}" not in only and f"gemm2.min_m{m}" not in only):
            continue
        c1, c2 = {**cfg["gemm1"], "MIN_M": m}, {**cfg["gemm2"], "MIN_M": m}
        run(f"gemm1.min_m{m}", [lambda p=p, c=c1: p.gemm1(c) for p in passes], flops1)
        run(f"gemm2.min_m{m}", [lambda p=p, c=c2: p.gemm2(c) for p in passes], flops2)
        p = passes[0]
        p.gemm1(cfg["gemm1"])
        p.gemm2(cfg["gemm2"])
        want1, want2 = p.act.float().clone(), p.combine().float().clone()
        p.gemm1(c1)
        got1 = p.act.float().clone()
        p.gemm2(c2)
        got2 = p.combine().float()
        used = int(p.align.num_rows)
        for label, got, want in ((f"gemm1.min_m{m}", got1[:used], want1[:used]), (f"gemm2.min_m{m}", got2, want2)):
            if label in rows and "us" in rows[label]:
                ok = torch.isfinite(want)
                rows[label]["max_abs_diff"] = float((got - want)[ok].abs().max()) if ok.any() else 0.0
    if fmt in K.WGMMA_FORMATS and torch.cuda.get_device_capability(dev) == (9, 0):
        # the second GEMM through the Gluon wgmma kernel (backends/triton_moe_wgmma.py); the layer's output against
        # the runner's tiles'
        p = passes[0]
        p.gemm2(cfg["gemm2"])
        want = p.combine().float().clone()
        forms = [(bn, st, nw, False) for bn, st, nw in WGMMA_VARIANTS if bm == 128 or nw == 4] \
            + [(bn, st, 4, True) for bn, st in PINGPONG_VARIANTS if bm * bn <= 16384]
        for bn, st, nw, pp in forms:
            c2 = {"BLOCK_N": bn, "BLOCK_K": 128 if fmt.startswith("fp8") else 64, "GROUP_M": 1, "num_warps": nw,
                  "num_stages": st, "WGMMA": True, **({"PREQUANT": True} if fmt.startswith("fp8") else {}),
                  **({"PINGPONG": True} if pp else {})}
            label = f"gemm2.wgmma.pp_n{bn}_s{st}" if pp else f"gemm2.wgmma.n{bn}_s{st}_w{nw}"
            run(label, [lambda p=p, c=c2: p.gemm2(c) for p in passes], flops2)
            if label in rows and "us" in rows[label]:
                p.gemm2(c2)
                got = p.combine().float()
                ok = torch.isfinite(want)
                rows[label]["max_abs_diff"] = float((got - want)[ok].abs().max()) if ok.any() else 0.0
                rows[label]["max_abs_ref"] = float(want[ok].abs().max()) if ok.any() else 0.0
    if fmt in K.TMA_FORMATS:   # the same tiles with the weight tiles through a TMA descriptor
        run("gemm1.tma", [lambda p=p: p.gemm1({**cfg["gemm1"], "TMA": True}) for p in passes], flops1)
        run("gemm2.tma", [lambda p=p: p.gemm2({**cfg["gemm2"], "TMA": True}) for p in passes], flops2)
    if fmt in K.GU_DOT_FORMATS and bench.spec.gated and not cfg["gemm1"].get("SPLIT") and (
            not only or any(fnmatch.fnmatchcase(f"gemm1.{x}.file", pat) for pat in only for x in ("gu", "tma"))
            or any(pat.startswith(("gemm1.gu", "gemm1.tma.")) for pat in only)):
        # GU_DOT: the gate and up tiles as one MMA, against two accumulators of the same shape (TMA both)
        p = passes[0]
        p.gemm1(cfg["gemm1"])
        used = int(p.align.num_rows)
        want = p.act.float()[:used].clone()
        base1 = {kk: v for kk, v in cfg["gemm1"].items() if kk != "us"}
        forms = [("file", base1)] + [(f"n{bn}_w{nw}_s{st}", {**base1, "BLOCK_N": bn, "num_warps": nw, "num_stages": st})
                                     for bn, nw, st in GU_VARIANTS]
        for name, c in forms:
            for label, c1 in ((f"gemm1.gu.{name}", {**c, "TMA": True, "GU_DOT": True}),
                              (f"gemm1.tma.{name}", {**c, "TMA": True})):
                if name == "file" and label.startswith("gemm1.tma"):
                    continue     # gemm1.tma above
                run(label, [lambda p=p, c1=c1: p.gemm1(c1) for p in passes], flops1)
                if label in rows and "us" in rows[label]:
                    p.gemm1(c1)
                    got = p.act.float()[:used]
                    ok = torch.isfinite(want)
                    rows[label]["max_abs_diff"] = float((got - want)[ok].abs().max()) if ok.any() else 0.0
                    rows[label]["config"] = c1

    # the second GEMM writing sorted rows, no routing weight
    for p in passes:
        p.y_sorted = torch.empty(p.act.shape[0], h, dtype=torch.bfloat16, device=dev)

    def g2_sorted(p):
        w = p.w
        return K.moe_gemm(p.act, w.w2, p.y_sorted, p.align, top_k=k, n_out=h, gather=False, by_slot=False,
                          w_mode=w_mode, a_amax=p.act_scale, a_scale_mode=p.a_mode, b_scale=w.s2,
                          group_k=p.groups[1], group_n=p.groups[2], config=cfg["gemm2"])
    run("gemm2.sorted", [lambda p=p: g2_sorted(p) for p in passes], flops2)

    # the first GEMM unfused: one accumulator over 2*I rows, bf16 out, BLOCK_M 128
    if bench.spec.gated and tokens * k >= 128 * 4 and (not only or any(x.startswith("gemm1.unfused") for x in only)):
        ups = [ForwardPass(bench.core, bench.weights, x, ids, tw, 128) for x, ids, tw in sets]
        for p in ups:
            p.h_out = torch.empty(p.act.shape[0], n13, dtype=torch.bfloat16, device=dev)
        bk = T.BLOCK[1] if fmt == "fp8_block" else (128 if fmt == "fp8_channel" else 64)
        for j, c in enumerate(UNFUSED):
            c = {**c, "BLOCK_K": bk}

            def g1u(p, c=c):
                w = p.w
                return K.moe_gemm(p.x, w.w13, p.h_out, p.align, top_k=k, n_out=n13, gather=True, by_slot=False,
                                  w_mode=w_mode, a_amax=p.x_scale, a_scale_mode=p.a_mode, b_scale=w.s13,
                                  group_k=p.groups[0], group_n=p.groups[2], config=c)
            run(f"gemm1.unfused.{j}", [lambda p=p: g1u(p) for p in ups], flops1)
            rows[f"gemm1.unfused.{j}"]["config"] = c
        del ups

    # dense cuBLAS GEMMs of the same sizes
    w13_0, w2_0 = bench.weights.w13[0], bench.weights.w2[0]
    if fmt == "bf16":
        a1 = torch.randn(s, h, device=dev, dtype=torch.bfloat16)
        a2 = torch.randn(s, i, device=dev, dtype=torch.bfloat16)
        run("gemm1.dense", [lambda: torch.mm(a1, w13_0.t())], flops1)
        run("gemm2.dense", [lambda: torch.mm(a2, w2_0.t())], flops2)
    else:
        a1 = torch.randn(s, h, device=dev).to(torch.float8_e4m3fn)
        a2 = torch.randn(s, i, device=dev).to(torch.float8_e4m3fn)
        sa1, sa2 = torch.ones(s, 1, device=dev), torch.ones(s, 1, device=dev)
        sb1, sb2 = torch.ones(1, n13, device=dev), torch.ones(1, h, device=dev)
        run("gemm1.dense", [lambda: torch._scaled_mm(a1, w13_0.t(), scale_a=sa1, scale_b=sb1, out_dtype=torch.bfloat16)],
            flops1)
        run("gemm2.dense", [lambda: torch._scaled_mm(a2, w2_0.t(), scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16)],
            flops2)
    # a routing with exactly T*K/E slots per expert: the same GEMMs without partial tiles
    e = bench.core.spec.num_local_experts
    padded = {"slots": s, "random": int(passes[0].align.num_rows)}
    if s % e == 0 and k <= e and (not only or any(x.endswith(".balanced") for x in only)):
        bal = []
        for j, (x, ids, tw) in enumerate(sets):
            perm = torch.randperm(e, generator=torch.Generator().manual_seed(100 + j))
            ids_b = perm[torch.arange(s) % e].reshape(tokens, k).to(device=dev, dtype=ids.dtype)
            bal.append(ForwardPass(bench.core, bench.weights, x, ids_b, tw, bm))
        for p in bal:
            p.gemm1(cfg["gemm1"])
        run("gemm1.balanced", [lambda p=p: p.gemm1(cfg["gemm1"]) for p in bal], flops1)
        run("gemm2.balanced", [lambda p=p: p.gemm2(cfg["gemm2"]) for p in bal], flops2)
        padded["balanced"] = int(bal[0].align.num_rows)
        del bal
    del passes, bench
    torch.cuda.empty_cache()
    return {"layer": name, "format": fmt, "tokens": tokens, "config": cfg, "steps": rows, "rows": padded}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON output file")
    p.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS), help="LAYER:FORMAT:TOKENS")
    p.add_argument("--budget-s", type=float, default=400.0, help="stop starting new points after this long")
    p.add_argument("--only", default="", help="comma-separated step labels to time, shell-style patterns allowed "
                   "(gemm1.gu.*; default: all)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    dev = torch.device("cuda")
    timer = T.Timer(dev, timed=3)
    t0 = time.perf_counter()
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": T._triton_version(),
           "host": platform.node(), "points": []}
    for spec in args.points:
        if time.perf_counter() - t0 > args.budget_s:
            out.setdefault("skipped", []).append(spec)
            continue
        name, fmt, tokens = spec.split(":")
        r = profile_point(name, fmt, int(tokens), dev, timer, frozenset(filter(None, args.only.split(","))))
        out["points"].append(r)
        print(f"\n{name} {fmt} {tokens} tokens  BLOCK_M {r['config']['BLOCK_M']}  padded rows {r['rows']}")
        for label, v in r["steps"].items():
            print(f"  {label:22s} " + (f"{v['us']:10.1f} us  {v['tflops'] or '':>7}  {v.get('max_abs_diff', '')}"
                                       if "us" in v else v["error"]))
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

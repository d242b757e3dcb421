"""Time the triton runner's forward with the tail-split sort (``TAIL_M``) against the runner's tiles as they are, in one
run (issue 26: the partial last tile of each expert, benchmarks/README.md "Partial tiles").

    python benchmarks/tail_tiles.py --out $OUT/tail_tiles.json [--points Qwen3-30B-A3B:fp8_channel:2048 ...]
        [--tail-ms 16 32 64] [--budget-s 300]

Per point (layer, format, tokens; the layers of ``benchmarks/tune_triton_moe.py``) it takes the configuration the runner
picks (``core.config_for``; points whose config is DIRECT, GEMV or fp8_block's SPLIT are skipped: the split sort does not
run them) and times sort + first GEMM + second GEMM + top-k sum (``ForwardPass``; CUDA-graph replay over 2 input sets,
``tune_triton_moe.Timer``) as it is and with each ``TAIL_M`` below its ``BLOCK_M`` (the same GEMM tiles, each GEMM two
launches), plus the largest difference of the output from the unsplit one relative to its largest value. Prints a table,
writes JSON. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_triton_moe as T  # noqa: E402

DEFAULT_POINTS = ("Qwen3-30B-A3B:fp8_channel:2048", "Qwen3-30B-A3B:bf16:2048", "Qwen3-235B-A22B:fp8_channel:2048",
                  "Qwen3-235B-A22B:bf16:2048", "DeepSeek-V3:fp8_channel:2048", "DeepSeek-V3:bf16:2048",
                  "Qwen3-30B-A3B:fp8_channel:8192", "Qwen3-30B-A3B:bf16:8192", "Qwen3-235B-A22B:fp8_channel:8192")


def time_point(name: str, fmt: str, tokens: int, tail_ms: list[int], dev: torch.device, timer) -> dict:
    """One point: ``{"layer", "format", "tokens", "config", "us": {tail_m: us}, "rel_diff": {tail_m: d}}``
    (``tail_m`` 0: the runner's forward as it is), or ``{"skipped": why}``."""
    from moe_select.backends.triton_moe import ForwardPass

    bench = T.Bench(name, T.MODELS[name], fmt, dev, T.BLOCK)
    cfg = bench.core.config_for(tokens)
    base = {"layer": name, "format": fmt, "tokens": tokens, "config": cfg}
    if cfg.get("DIRECT") or cfg["gemm1"].get("GEMV") or cfg["gemm1"].get("SPLIT"):
        return {**base, "skipped": "DIRECT, GEMV or SPLIT config"}
    bm = cfg["BLOCK_M"]
    sets = bench.inputs(tokens, seed=1, n_sets=2)
    pre = bool(cfg["gemm1"].get("PREQUANT"))
    out: dict = {**base, "us": {}, "rel_diff": {}}
    ref = None
    for tm in [0] + [t for t in tail_ms if t < bm]:
        passes = [ForwardPass(bench.core, bench.weights, x, ids, tw, bm, prequant_first=pre, tail_m=tm)
                  for x, ids, tw in sets]

        def fwd(p):
            p.sort()
            p.gemm1(cfg["gemm1"])
            p.gemm2(cfg["gemm2"])
            return p.combine()

        try:
            y = fwd(passes[0]).float()
            out["us"][tm] = round(timer([lambda p=p: fwd(p) for p in passes]), 2)
        except Exception as exc:  # a tile that does not compile at TAIL_M: recorded, not fatal
            out["us"][tm] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if ref is None:
            ref = y
        out["rel_diff"][tm] = float((y - ref).abs().max() / ref.abs().max().clamp(min=1e-6))
        del passes
    del bench
    torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS), help="LAYER:FORMAT:TOKENS")
    p.add_argument("--tail-ms", nargs="+", type=int, default=[16, 32, 64])
    p.add_argument("--budget-s", type=float, default=300.0)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    dev = torch.device("cuda")
    timer = T.Timer(dev, timed=3)
    t0 = time.perf_counter()
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": T._triton_version(), "points": []}
    for spec in args.points:
        if time.perf_counter() - t0 > args.budget_s:
            res.setdefault("skipped", []).append(spec)
            continue
        name, fmt, tokens = spec.split(":")
        r = time_point(name, fmt, int(tokens), args.tail_ms, dev, timer)
        res["points"].append(r)
        if "skipped" in r:
            print(f"{spec}: skipped ({r['skipped']})")
        else:
            base = r["us"].get(0)
            cells = "  ".join(f"TAIL_M {tm}: {us} us" + (f" ({us / base:.3f}, diff {r['rel_diff'].get(tm, 0):.1e})"
                                                          if isinstance(us, float) and isinstance(base, float) else "")
                              for tm, us in r["us"].items())
            print(f"{spec} BLOCK_M {r['config']['BLOCK_M']}: {cells}")
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 26's table from the H200 results of 2026-12-02: each (layer, format, tokens) point's CUDA-graph time of every
runner timed, and the runner the bundled rules choose for a deployment whose largest forward is that token count
(``max_tokens_per_rank`` = tokens, ``require_adapter``: this install; with token ranges, the runner of the largest
forwards), with its fraction of the roofline floor. Reads the moe_layer.py JSON files named below (no GPU, no torch); prints a Markdown table and the
geo-means per token count. Usage: ``python benchmarks/deep_gemm_table.py [results_dir [LATER.json ...]]``: rows of
later moe_layer.py files replace those of the same point and runner (a runner measured again after a change, e.g.
``results/moe_layer_h200_2026-12-02_fp8_channel_prequant.json``: triton's fp8_channel rows with PREQUANT tiles).

A runner not timed at a point in these files prints ``-``; when the rules choose such a runner the row says so and
the point is left out of the geo-means (bf16 torch_grouped_mm on the 8-expert layer: timed on 2026-11-30 only).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

FILES = ("moe_layer_dg.json",                # bf16, fp8_block: triton and deep_gemm
         "moe_layer_fp8_channel_first.json",  # fp8_channel: triton, torch_grouped_mm (its deep_gemm rows: the bug run)
         "moe_layer_dg_fp8_channel.json")     # fp8_channel: deep_gemm (after the fix)
SHAPES = {"Qwen3-30B-A3B": (128, 8, 2048, 768), "DeepSeek-V3": (256, 8, 7168, 2048),
          "Qwen3-235B-A22B": (128, 8, 4096, 1536), "Mixtral-8x7B": (8, 2, 4096, 14336)}
RUNNERS = ("triton", "deep_gemm", "torch_grouped_mm")


def load(d: Path, later: tuple[Path, ...] = ()) -> dict:
    """Rows by (model, format, tokens, runner) from :data:`FILES` in ``d``, then from ``later`` files (moe_layer.py
    JSON), whose rows replace the earlier ones of the same point and runner (a re-measured runner)."""
    rows: dict = {}
    for path in [d / name for name in FILES] + list(later):
        data = json.loads(path.read_text())
        bad = path.name == "moe_layer_fp8_channel_first.json"
        for r in data["rows"]:
            if r.get("path") not in (None, "fused") or (bad and r["runner"] == "deep_gemm"):
                continue
            rows[(r["model"], r["quant"], r["tokens"], r["runner"])] = r
    return rows


def chosen(model: str, quant: str, tokens: int) -> str | None:
    import moe_select

    e, k, h, i = SHAPES[model]
    rep = moe_select.explain({"arch": "sm90", "quant": quant, "tp": 1, "require_adapter": True, "cuda_graph": True,
                              "max_tokens_per_rank": tokens,
                              "model": {"num_experts": e, "top_k": k, "hidden_size": h, "moe_intermediate_size": i,
                                        "activation": "silu", "routing": "renormalize"}})
    return rep.plan.runner if rep.plan else None


def main() -> int:
    args = sys.argv[1:]
    d = Path(args[0]) if args else Path(__file__).parent / "results" / "deep_gemm_h200_2026-12-02"
    rows = load(d, tuple(Path(a) for a in args[1:]))
    print("| layer | format | tokens | floor us | triton us | deep_gemm us | torch_grouped_mm us | rules choose | frac |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    logs: dict = {}
    for model in SHAPES:
        for quant in ("bf16", "fp8_channel", "fp8_block"):
            for t in (256, 2048, 8192):
                got = {r: rows.get((model, quant, t, r)) for r in RUNNERS}
                any_row = next((v for v in got.values() if v), None)
                if any_row is None:
                    continue
                pick = chosen(model, quant, t)
                cells = [f"{got[r]['graph_us']:.0f}" if got[r] else "-" for r in RUNNERS]
                frac = got[pick]["frac_of_floor"] if pick in got and got[pick] else None
                if frac is not None:
                    logs.setdefault(t, []).append(math.log(frac))
                print(f"| {model} | {quant} | {t} | {any_row['floor_us']:.0f} ({any_row['bound']}) | " + " | ".join(cells)
                      + f" | {pick} | " + (f"{frac:.2f}" if frac is not None else "not timed here") + " |")
    for t, v in sorted(logs.items()):
        print(f"geo-mean of the chosen runner's fraction at {t} tokens: {math.exp(sum(v) / len(v)):.2f} over {len(v)} points")
    both = logs.get(2048, []) + logs.get(8192, [])
    if both:
        print(f"geo-mean at 2048-8192 tokens: {math.exp(sum(both) / len(both)):.2f} over {len(both)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())

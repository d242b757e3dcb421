"""Times the triton runner's sort (``moe_align``) on one GPU: the one-CTA kernel against the multi-CTA
path (count, offsets, scatter after a memset), at the slot counts (tokens x top_k) and expert counts of the
benchmark layers, each as a CUDA-graph replay (median of ``--reps`` replays of 20 sorts each). Prints a
table and the largest slot count at which the one-CTA kernel is still faster, the measurement behind
``SINGLE_CTA_MAX_SLOTS`` (backends/triton_moe_kernels.py). Run: ``python benchmarks/align_threshold.py
[--json OUT]`` (needs CUDA)."""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from moe_select.backends import triton_moe_kernels as K

EXPERTS_TOPK = ((128, 8), (256, 8), (8, 2), (32, 4))
SLOTS_PER_TOKEN_COUNTS = (1, 8, 32, 64, 128, 256, 512)


def time_sort(ids: torch.Tensor, num_local: int, block_m: int, single: bool, reps: int) -> float:
    limit = 1 << 30 if single else 0
    K.moe_align(ids, num_local, 0, block_m, single_cta_max_slots=limit)  # compile
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            K.moe_align(ids, num_local, 0, block_m, single_cta_max_slots=limit)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 20)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for e, k in EXPERTS_TOPK:
        for t in SLOTS_PER_TOKEN_COUNTS:
            ids = torch.rand(t, e, device="cuda", generator=gen).argsort(1)[:, :k].to(torch.int32).contiguous()
            bm = 16 if t * k / e <= 16 else 64
            one = time_sort(ids, e, bm, True, args.reps)
            multi = time_sort(ids, e, bm, False, args.reps)
            rows.append({"experts": e, "top_k": k, "tokens": t, "slots": t * k, "block_m": bm,
                         "one_cta_us": round(one, 2), "multi_cta_us": round(multi, 2)})
            print(f"E={e:4d} K={k} T={t:4d} slots={t * k:5d} BLOCK_M={bm:3d}  one CTA {one:7.2f} us  multi {multi:7.2f} us")
    faster = [r["slots"] for r in rows if r["one_cta_us"] <= r["multi_cta_us"]]
    slower = [r["slots"] for r in rows if r["one_cta_us"] > r["multi_cta_us"]]
    print(f"one CTA faster at slots {sorted(set(faster))}; multi-CTA faster at {sorted(set(slower))}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

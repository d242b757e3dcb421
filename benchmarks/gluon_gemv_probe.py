"""A Gluon (explicit-layout) packed-FP4 GEMV over routing slots: what the 1-token W4A16 GEMV could stream (issue 24).

    python benchmarks/gluon_gemv_probe.py [--rows R] [--warps W]     # sm90 compile here: registers, loads, barriers
    python benchmarks/gluon_gemv_probe.py --gpu [--out F.json]       # on a GPU: against float64, then timed

Why (benchmarks/README.md, "DIRECT buckets"): the ``tl`` GEMVs of the triton runner (the sorted path's and the DIRECT
ones) stream 4-bit weights at about 1.1-1.3 TB/s at 1 token on an H200, a serial chain of K tiles per program with
8-16 bytes per thread per tile, and the layouts Triton picks for the scale and activation tiles either cost CTA
barriers per K tile or registers. Here the layout is written out (``triton.experimental.gluon``): a tile
``[R * warps, 32, G, CB]`` bytes with ``BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [warps, 1, 1, 1])``: each thread
holds 16 contiguous weight bytes (``G`` scale groups of ``CB`` bytes: mxfp4 1 x 16, nvfp4 2 x 8) of ``R`` rows, the
activation words of those 16 bytes once for its ``R`` rows (the slice layout of dim 0), and its rows' scale bytes in
the slice layout of dim 3, so nothing is converted; a warp covers 512 bytes of K per step, and the ``K / 512`` steps
are unrolled (``static_range``) so their loads can all be in flight. The decode is the runner's PTX
(``triton_moe_kernels.FP4_DECODE_ASM`` on the shuffled layout, the kernel's scale bytes).

What it computes: ``out[s, n] = sum_k w[e_s, n, k] * a[row_s, k]`` in float32 for each routing slot ``s`` (expert
``e_s = ids[s]``, A row ``row_s = s // top_k``, or ``s`` for the second GEMM's shape), no epilogue: the GEMV core
only, to measure it against the copy bandwidth at the four issue-24 layers' shapes (1 token). A probe, not a runner
path: nothing in ``backends/`` calls it. ``--gpu`` checks it against a float64 reference first (relative error <=
1e-5: float32 sums of exact products) and prints per shape µs, GB/s and the fraction of the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from moe_select.backends import triton_moe_kernels as K  # noqa: E402

DECODE = gl.constexpr(K.FP4_DECODE_ASM.value if hasattr(K.FP4_DECODE_ASM, "value") else K.FP4_DECODE_ASM)
EPI = gl.constexpr(2.0 ** K.FP4_EPI_LOG2)
E4M3_BASE2 = gl.constexpr(K.FP4_E4M3_BASE * 0x10001)
#: (name, experts, top_k, N rows, K elements, format): the issue-24 layers' two GEMMs at 1 token
SHAPES = (("gpt-oss-20b gemm1", 32, 4, 5760, 2880, "mxfp4"), ("gpt-oss-20b gemm2", 32, 4, 2880, 2880, "mxfp4"),
          ("gpt-oss-120b gemm1", 128, 4, 5760, 2880, "mxfp4"), ("gpt-oss-120b gemm2", 128, 4, 2880, 2880, "mxfp4"),
          ("Qwen3-30B-A3B gemm1", 128, 8, 1536, 2048, "nvfp4"), ("Qwen3-30B-A3B gemm2", 128, 8, 2048, 768, "nvfp4"),
          ("DeepSeek-V3.1 gemm1", 256, 8, 4096, 7168, "nvfp4"), ("DeepSeek-V3.1 gemm2", 256, 8, 7168, 2048, "nvfp4"))


@gluon.jit
def _gemv(q_ptr, s_ptr, a_ptr, ids_ptr, out_ptr, N, KB, top_k, a_per_slot, stride_qe, stride_qn, stride_se,
          stride_sn, stride_aw, stride_o, R: gl.constexpr, NW: gl.constexpr, G: gl.constexpr, CB: gl.constexpr,
          K_STEPS: gl.constexpr, W_MODE: gl.constexpr):
    """Program ``slot * cdiv(N, R * NW) + strip``: ``out[slot, strip rows]`` (module doc). ``q [E, N, KB]`` shuffled
    e2m1 bytes, ``s [E, N, KB / (G * CB) * G]`` the kernel's scale bytes, ``a`` int32 words (one per weight byte),
    ``KB`` bytes per row (a multiple of ``CB``), ``K_STEPS = cdiv(KB, 32 * G * CB)``."""
    L4: gl.constexpr = gl.BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
    S3: gl.constexpr = gl.SliceLayout(3, L4)           # [BN, 32, G]: the scales
    A3: gl.constexpr = gl.SliceLayout(0, L4)           # [32, G, CB]: the activation words
    BN: gl.constexpr = R * NW
    STEP: gl.constexpr = 32 * G * CB                   # bytes of K per step
    pid = gl.program_id(0)
    strips = gl.cdiv(N, BN)
    slot = pid // strips
    e = gl.load(ids_ptr + slot).to(gl.int64)
    rows = (pid % strips) * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, S3)))
    rows = gl.where(rows < N, rows, N - 1)            # past N: a valid row read, never stored
    # [BN, 32, G] scale offsets and [BN, 32, G, CB] byte offsets, in L4's slices
    c_s = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, S3)))
    g_s = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(1, S3)))
    grp = gl.expand_dims(gl.expand_dims(c_s, 0), 2) * G + gl.expand_dims(gl.expand_dims(g_s, 0), 1)   # [1, 32, G]
    r3 = gl.expand_dims(gl.expand_dims(rows, 1), 2).to(gl.int64)                                     # [BN, 1, 1]
    s_off = r3 * stride_sn + grp
    c_a = gl.arange(0, 32, layout=gl.SliceLayout(1, gl.SliceLayout(2, A3)))
    g_a = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(2, A3)))
    b_a = gl.arange(0, CB, layout=gl.SliceLayout(0, gl.SliceLayout(1, A3)))
    byte3 = (gl.expand_dims(gl.expand_dims(c_a, 1), 2) * (G * CB) + gl.expand_dims(gl.expand_dims(g_a, 0), 2) * CB
             + gl.expand_dims(gl.expand_dims(b_a, 0), 1))                                           # [32, G, CB]
    q_off = gl.expand_dims(r3, 3) * stride_qn + gl.expand_dims(byte3, 0)                             # [BN, 32, G, CB]
    q_base = q_ptr + e * stride_qe
    s_base = s_ptr + e * stride_se
    a_base = a_ptr + (slot // a_per_slot).to(gl.int64) * stride_aw
    acc = gl.zeros([BN, 32, G, CB], gl.float32, layout=L4)
    for st in gl.static_range(K_STEPS):
        kmask3 = (byte3 + st * STEP) < KB
        q = gl.load(q_base + q_off + st * STEP, mask=gl.expand_dims(kmask3, 0), other=0)
        sc = gl.load(s_base + s_off + st * (32 * G), mask=(grp * CB + st * STEP) < KB, other=0)
        aw = gl.load(a_base + byte3 + st * STEP, mask=kmask3, other=0)
        if W_MODE == 6:
            s2 = (sc.to(gl.uint32) * 0x00800080).to(gl.int32, bitcast=True)
        else:
            s2 = (sc.to(gl.uint32) * 0x00100010 + E4M3_BASE2).to(gl.int32, bitcast=True)
        s4 = gl.broadcast(gl.expand_dims(s2, 3), q)[0]
        w2 = gl.inline_asm_elementwise(DECODE, "=r,=r,=r,=r,r,r,r,r,r", [q, s4], dtype=gl.int32, is_pure=True, pack=4)
        lo = (w2 << 16).to(gl.float32, bitcast=True)
        hi = (w2 & -65536).to(gl.float32, bitcast=True)
        a4 = gl.expand_dims(aw, 0)
        acc += lo * (a4 << 16).to(gl.float32, bitcast=True)
        acc += hi * (a4 & -65536).to(gl.float32, bitcast=True)
    out = gl.sum(gl.sum(gl.sum(acc, 3), 2), 1) * EPI
    rows_o = (pid % strips) * BN + gl.arange(0, BN, layout=out.type.layout)
    gl.store(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)


def launch(q, s, a_words, ids, out, *, kb: int, top_k: int, gemm2: bool, fmt: str, rows: int, warps: int):
    """One launch of :func:`_gemv` over ``ids.numel()`` slots (``out [S, N]`` float32)."""
    g, cb = (1, 16) if fmt == "mxfp4" else (2, 8)
    n = q.shape[1]
    grid = (ids.numel() * triton.cdiv(n, rows * warps),)
    _gemv[grid](q, s, a_words, ids, out, n, kb, top_k, 1 if gemm2 else top_k, q.stride(0), q.stride(1), s.stride(0),
                s.stride(1), a_words.stride(0), out.stride(0), R=rows, NW=warps, G=g, CB=cb,
                K_STEPS=triton.cdiv(kb, 32 * g * cb), W_MODE=6 if fmt == "mxfp4" else 7, num_warps=warps)


def compile_stats(rows: int, warps: int) -> list[dict]:
    """sm90 compile (no GPU; ``sass_loop.compile_sm90``) of each shape: registers, spilled bytes, global loads, barriers
    in the PTX."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sass_loop import compile_sm90

    out = []
    for name, e, top_k, n, k, fmt in SHAPES:
        meta = torch.device("meta")
        kb = k // 2
        grp = 32 if fmt == "mxfp4" else 16
        g, cb = (1, 16) if fmt == "mxfp4" else (2, 8)
        args = (torch.empty(e, n, kb, dtype=torch.uint8, device=meta), torch.empty(e, n, k // grp, dtype=torch.uint8, device=meta),
                torch.empty(top_k, kb, dtype=torch.int32, device=meta), torch.empty(top_k, dtype=torch.int32, device=meta),
                torch.empty(top_k, n, dtype=torch.float32, device=meta), n, kb, top_k, top_k, n * kb, kb, n * (k // grp),
                k // grp, kb, n)
        kw = dict(R=rows, NW=warps, G=g, CB=cb, K_STEPS=triton.cdiv(kb, 32 * g * cb), W_MODE=6 if fmt == "mxfp4" else 7,
                  num_warps=warps)
        c = compile_sm90(_gemv, args, kw)
        ptx = c["ptx"]
        out.append({"shape": name, "regs": c["regs"], "spill_bytes": c["spill"], "ld_global_v4": ptx.count("ld.global.v4"),
                    "ld_global": ptx.count("ld.global"), "barriers": ptx.count("bar.sync") + ptx.count("barrier.sync"),
                    "k_steps": kw["K_STEPS"]})
    return out


def _e2m1(codes: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64, device=codes.device)
    v = mag[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -v, v)


def gpu(args) -> dict:
    """Each shape on the GPU: against float64 (canonical weights, decoded here), then CUDA-graph timed
    (``tune_triton_moe.Timer``) against the copy bandwidth ``moe_layer.ceilings`` measures."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import moe_layer as ml
    import tune_triton_moe as tune

    dev = torch.device("cuda")
    torch.manual_seed(0)
    copy_gbs = ml.ceilings(dev, ml.Clock(dev))["copy_GBps"]
    timer = tune.Timer(dev)
    rows_out = []
    for name, e, top_k, n, k, fmt in SHAPES:
        grp = 32 if fmt == "mxfp4" else 16
        kb = k // 2
        q = torch.randint(0, 256, (e, n, kb), dtype=torch.uint8, device=dev)
        if fmt == "mxfp4":
            sbytes = torch.randint(120, 125, (e, n, k // grp), dtype=torch.uint8, device=dev)
            scale = torch.pow(2.0, sbytes.double() - 127)
            sk = K.fp4_kernel_e8m0(sbytes)
        else:
            s8 = (torch.rand(e, n, k // grp, device=dev) * 3.75 + 0.25).to(torch.float8_e4m3fn)
            scale = s8.double()
            sk = K.fp4_kernel_e4m3(s8.view(torch.uint8))
        gemm2 = "gemm2" in name
        slots = top_k
        ids = torch.randperm(e, device=dev)[:slots].to(torch.int32)
        a = torch.randn(slots if gemm2 else 1, k, device=dev).to(torch.bfloat16)
        out = torch.empty(slots, n, dtype=torch.float32, device=dev)
        qs = K.fp4_shuffle(q)
        kw = dict(kb=kb, top_k=top_k, gemm2=gemm2, fmt=fmt, rows=args.rows, warps=args.warps)
        launch(qs, sk, a.view(torch.int32), ids, out, **kw)
        torch.cuda.synchronize()
        ref = torch.empty(slots, n, dtype=torch.float64, device=dev)
        for j in range(slots):
            ex = int(ids[j])
            w = torch.stack([_e2m1(q[ex] & 0xF), _e2m1(q[ex] >> 4)], dim=-1).reshape(n, k)
            w = w * scale[ex].repeat_interleave(grp, dim=1)
            ref[j] = w @ a[j if gemm2 else 0].double()
        err = float((out.double() - ref).norm() / ref.norm())
        args_ = (qs, sk, a.view(torch.int32), ids, out)
        us = timer([lambda args_=args_, kw=kw: launch(*args_, **kw)])
        nbytes = slots * n * (kb + k // grp)
        row = {"shape": name, "us": round(us, 2), "GB/s": round(nbytes / (us * 1e-6) / 1e9), "frac_of_copy":
               round(nbytes / (us * 1e-6) / 1e9 / copy_gbs, 3), "rel_error": err, "ok": err <= 1e-5}
        print(json.dumps(row), flush=True)
        rows_out.append(row)
        del q, qs, sk, args_
        torch.cuda.empty_cache()
    return {"copy_GBs": round(copy_gbs), "rows": rows_out, "rows_per_thread": args.rows, "warps": args.warps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2, help="weight rows per thread (R)")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--gpu", action="store_true", help="check against float64 and time on the GPU")
    ap.add_argument("--out", help="write the result as JSON")
    args = ap.parse_args(argv)
    if args.gpu:
        result = gpu(args)
    else:
        result = {"sm90_compile": compile_stats(args.rows, args.warps), "rows_per_thread": args.rows,
                  "warps": args.warps}
        for r in result["sm90_compile"]:
            print(json.dumps(r))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

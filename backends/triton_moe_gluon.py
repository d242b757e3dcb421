"""The packed-FP4 GEMV of the ``triton`` runner written in Gluon (explicit layouts): the first half of a ``GLUON``
GEMV bucket (issue 24: MXFP4 / NVFP4 weights, W4A16, at 1 token per expert row).

Why: at ``BLOCK_M`` 1 the ``tl`` GEMV of :func:`~.triton_moe_kernels.moe_gemm` streams the 4-bit weights at about a
quarter of the copy bandwidth on an H200 (benchmarks/README.md, "The Gluon GEMV probe, measured"). Written with its
layout spelled out (``triton.experimental.gluon``), the same sums took 1.4-1.5x less time at the issue-24 layers'
shapes (gpt-oss-20b: 25.9 -> 17.7 µs and 14.3 -> 9.9 µs; ``benchmarks/gluon_gemv_probe.py``, the kernel ``_gemv`` with
``--act 0``, measured on one H200 with triton 3.6.0).

What it computes: for each sorted row ``r`` of the sort (``Alignment``, ``BLOCK_M`` 1) that holds a routing slot,
``ws[0, r, n] = sum_k w[e_r, n, k] * a[row_r, k]`` in float32 for every weight row ``n`` of expert ``e_r`` (gate then
up rows for a gated first GEMM, which is the workspace's column order), where ``row_r`` is ``slot // top_k`` (the
first GEMM gathers the hidden states) or ``r`` (the second GEMM reads the sorted intermediate). The sums are in the
PTX decode's scaled domain (no ``2^FP4_EPI_LOG2``, no global scale): the reduction launch of
:func:`~.triton_moe_kernels.moe_gemm` (``SPLIT_MODE`` 2 with ``SPLIT_K`` 1) reads them and runs the epilogue it runs
for a K split (scales, biases, routing weight, activation, store), so the values are those of the ``tl`` GEMV's split
path up to the float32 summation order.

Layout: a tile ``[R * num_warps, 32, G, CB]`` bytes with ``BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [num_warps, 1,
1, 1])``: each thread holds 16 contiguous weight bytes (``G`` scale groups of ``CB`` bytes: mxfp4 1 x 16, nvfp4 2 x 8)
of ``R`` rows, the activation words of those bytes once for its rows, and its rows' scale bytes; a warp covers 512
bytes of K per step and the ``cdiv(K / 2, 512)`` steps are unrolled so that their loads can all be in flight. The
weights are the runner's shuffled bytes (:func:`~.triton_moe_kernels.fp4_shuffle`) and the kernel's scale bytes
(:func:`~.triton_moe_kernels.fp4_kernel_e8m0`, :func:`~.triton_moe_kernels.fp4_kernel_e4m3`), decoded by
:data:`~.triton_moe_kernels.FP4_DECODE_ASM` (PTX: a GPU only; Gluon has no interpreter, so this module is checked on
the CPU by compiling it for sm90, and its values on a GPU: ``tests/test_triton_gluon_gemv.py``).

Importing this module imports ``triton.experimental.gluon`` (Triton 3.5 and later); the runner imports it when a tile
file sets ``GLUON``, at the core's construction, so a Triton without Gluon is refused before any weight is loaded.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import triton_moe_kernels as K

_DECODE = gl.constexpr(K.FP4_DECODE_ASM.value if hasattr(K.FP4_DECODE_ASM, "value") else K.FP4_DECODE_ASM)
_E4M3_BASE2 = gl.constexpr(K.FP4_E4M3_BASE * 0x10001)
#: bytes of each weight row that one warp covers per unrolled step (32 lanes x 16 bytes)
STEP_BYTES = 512


@gluon.jit
def scale_words(sc, W_MODE: gl.constexpr):
    """The kernel's scale bytes -> the bf16x2 multiplier words of the PTX decode (mxfp4: the exponent shifted into
    place; nvfp4: the e4m3 bits on :data:`~.triton_moe_kernels.FP4_E4M3_BASE`)."""
    if W_MODE == 6:
        s2 = (sc.to(gl.uint32) * 0x00800080).to(gl.int32, bitcast=True)
    else:
        s2 = (sc.to(gl.uint32) * 0x00100010 + _E4M3_BASE2).to(gl.int32, bitcast=True)
    return s2


@gluon.jit
def strip_offsets(strip, N, stride_qn, stride_sn, R: gl.constexpr, NW: gl.constexpr, G: gl.constexpr, CB: gl.constexpr):
    """The offsets of one strip of ``R * NW`` weight rows in the tile layout (module doc): ``(grp [1, 32, G]`` scale
    group of each lane, ``s_off [BN, 32, G]`` scale bytes, ``byte3 [32, G, CB]`` the activation words of each lane,
    ``q_off [BN, 32, G, CB]`` weight bytes), at K step 0. Rows past ``N`` read row ``N - 1`` (never stored)."""
    L4: gl.constexpr = gl.BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
    S3: gl.constexpr = gl.SliceLayout(3, L4)           # [BN, 32, G]: the scales
    A3: gl.constexpr = gl.SliceLayout(0, L4)           # [32, G, CB]: the activation words
    BN: gl.constexpr = R * NW
    rows = strip * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, S3)))
    rows = gl.where(rows < N, rows, N - 1)
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
    return grp, s_off, byte3, q_off


@gluon.jit
def step_fma(acc, q_base, s_base, a_base, aw, grp, s_off, byte3, q_off, st: gl.constexpr, KB, G: gl.constexpr,
             CB: gl.constexpr, W_MODE: gl.constexpr, LOAD_A: gl.constexpr = True):
    """``acc [BN, 32, G, CB]`` float32 plus K step ``st``'s products: the step's weight bytes and scale bytes loaded
    (masked past ``KB``), decoded by :data:`~.triton_moe_kernels.FP4_DECODE_ASM` and multiplied by the step's activation
    words ``[32, G, CB]`` (a bf16 pair each): loaded from ``a_base`` after the weights (``LOAD_A``; the order the sm90
    compile keeps at 160 registers on DeepSeek-V3's first GEMM, against 174 with the activation loaded first), else
    ``aw`` as given."""
    STEP: gl.constexpr = 32 * G * CB                   # bytes of K per step
    kmask3 = (byte3 + st * STEP) < KB
    q = gl.load(q_base + q_off + st * STEP, mask=gl.expand_dims(kmask3, 0), other=0)
    sc = gl.load(s_base + s_off + st * (32 * G), mask=(grp * CB + st * STEP) < KB, other=0)
    if LOAD_A:
        aw = gl.load(a_base + byte3 + st * STEP, mask=kmask3, other=0)
    s2 = scale_words(sc, W_MODE)
    s4 = gl.broadcast(gl.expand_dims(s2, 3), q)[0]
    w2 = gl.inline_asm_elementwise(_DECODE, "=r,=r,=r,=r,r,r,r,r,r", [q, s4], dtype=gl.int32, is_pure=True, pack=4)
    a4 = gl.expand_dims(aw, 0)
    acc += (w2 << 16).to(gl.float32, bitcast=True) * (a4 << 16).to(gl.float32, bitcast=True)
    acc += (w2 & -65536).to(gl.float32, bitcast=True) * (a4 & -65536).to(gl.float32, bitcast=True)
    return acc


@gluon.jit(do_not_specialize=["num_slots"])
def _fp4_gemv_ws(q_ptr, s_ptr, a_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, ws_ptr,
                 num_slots, top_k, N, KB, stride_qe, stride_qn, stride_se, stride_sn, stride_aw, stride_wsm,
                 A_GATHER: gl.constexpr, R: gl.constexpr, NW: gl.constexpr, G: gl.constexpr, CB: gl.constexpr,
                 K_STEPS: gl.constexpr, W_MODE: gl.constexpr):
    """Program ``r * cdiv(N, R * NW) + strip``: ``ws[r, strip's rows]`` (module doc). ``q [E, N, KB]`` shuffled e2m1
    bytes, ``s [E, N, KB / CB]`` the kernel's scale bytes, ``a`` int32 words (a bf16 pair per weight byte), ``KB``
    bytes per row (a multiple of 16), ``K_STEPS = cdiv(KB, 512)``. Rows past ``num_rows``, padding rows (slot
    ``num_slots``) and blocks of no local expert return without a store (the reduction masks those rows)."""
    L4: gl.constexpr = gl.BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
    BN: gl.constexpr = R * NW
    pid = gl.program_id(0)
    strips = gl.cdiv(N, BN)
    r = pid // strips
    if r >= gl.load(num_rows_ptr):
        return
    slot = gl.load(sorted_ptr + r)
    e = gl.load(block_expert_ptr + r)
    if (slot >= num_slots) | (e < 0):
        return
    grp, s_off, byte3, q_off = strip_offsets(pid % strips, N, stride_qn, stride_sn, R, NW, G, CB)
    q_base = q_ptr + e.to(gl.int64) * stride_qe
    s_base = s_ptr + e.to(gl.int64) * stride_se
    if A_GATHER:
        a_base = a_ptr + (slot // top_k).to(gl.int64) * stride_aw
    else:
        a_base = a_ptr + r.to(gl.int64) * stride_aw
    acc = gl.zeros([BN, 32, G, CB], gl.float32, layout=L4)
    for st in gl.static_range(K_STEPS):
        acc = step_fma(acc, q_base, s_base, a_base, 0, grp, s_off, byte3, q_off, st, KB, G, CB, W_MODE)
    out = gl.sum(gl.sum(gl.sum(acc, 3), 2), 1)
    rows_o = (pid % strips) * BN + gl.arange(0, BN, layout=out.type.layout)
    gl.store(ws_ptr + r.to(gl.int64) * stride_wsm + rows_o, out, mask=rows_o < N)


def check_config(k: int, w_mode: int, config: dict) -> int:
    """The rows per thread ``R`` of a ``GLUON`` GEMM config (``BLOCK_N = R * num_warps``:
    :func:`~.triton_moe_kernels.gluon_rows_per_thread`) for weights of ``k`` elements per row in weight mode ``w_mode``
    (6 mxfp4, 7 nvfp4). Raises ValueError naming what is off: another weight mode, ``k / 2`` bytes not a multiple of 16
    (the 16-byte loads), or a ``BLOCK_N`` / ``num_warps`` pair outside those."""
    if w_mode not in K.FP4_MODES:
        raise ValueError(f"GLUON is a GEMV option of packed-FP4 weights (mxfp4, nvfp4), not weight mode {w_mode}")
    if (k // 2) % 16:
        raise ValueError(f"GLUON loads 16 weight bytes per thread: K / 2 = {k // 2} bytes per row is not a multiple "
                         f"of 16")
    nw, bn = config["num_warps"], config["BLOCK_N"]
    rows = K.gluon_rows_per_thread(bn, nw)
    if rows is None:
        raise ValueError(f"GLUON: BLOCK_N must be num_warps x {', '.join(map(str, K.GLUON_ROWS_PER_THREAD))} rows per "
                         f"thread with num_warps {', '.join(map(str, K.GLUON_WARPS))}, got BLOCK_N {bn}, num_warps {nw}")
    return rows


def fp4_gemv_partials(a: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, ws: torch.Tensor, align: K.Alignment,
                      *, top_k: int, n_rows: int, gather: bool, w_mode: int, config: dict, warmup: bool = False) -> None:
    """Launch :func:`_fp4_gemv_ws`: ``ws [1, align.rows, >= n_rows]`` float32 gets, for each sorted row holding a
    slot, the float32 sums of all ``n_rows`` weight rows of its expert against its A row (module doc).

    ``a [rows_a, K]`` bf16 with unit stride along K; ``b [E, n_rows, K / 2]`` uint8, the shuffled e2m1 bytes
    (:func:`~.triton_moe_kernels.fp4_shuffle`), unit stride along K; ``b_scale [E, n_rows, K / group]`` uint8, the
    kernel's scale bytes, unit stride along its last dimension; ``align`` a sort at ``BLOCK_M`` 1; ``gather``: A row
    ``slot // top_k`` (first GEMM), else the sorted row (second GEMM); ``config``: ``BLOCK_N`` and ``num_warps``
    (:func:`check_config`); ``warmup``: compile without running. Raises ValueError for another ``BLOCK_M``, dtype or stride, or a config
    :func:`check_config` refuses."""
    k = a.shape[1]
    rows_per_thread = check_config(k, w_mode, config)
    if align.block_m != 1:
        raise ValueError(f"GLUON runs at BLOCK_M 1 (one sorted row per expert block), got {align.block_m}")
    if a.dtype != torch.bfloat16 or a.stride(1) != 1 or a.stride(0) % 2:
        raise ValueError(f"GLUON reads A as bf16 pairs: a {tuple(a.shape)} {a.dtype} strides {a.stride()}")
    if b.dtype != torch.uint8 or b.stride(2) != 1 or b.shape[2] * 2 != k or b_scale.stride(2) != 1:
        raise ValueError(f"GLUON reads packed bytes with unit stride along K: b {tuple(b.shape)} {b.dtype} strides "
                         f"{b.stride()}, scales strides {b_scale.stride()}, K {k}")
    g, cb = (1, 16) if w_mode == 6 else (2, 8)
    kb = b.shape[2]
    nw = config["num_warps"]
    aw = a.view(torch.int32)
    grid = (align.max_blocks * triton.cdiv(n_rows, rows_per_thread * nw),)
    args = (b, b_scale, aw, align.sorted_slots, align.block_expert, align.num_rows, ws, align.num_slots, top_k, n_rows,
            kb, b.stride(0), b.stride(1), b_scale.stride(0), b_scale.stride(1), aw.stride(0), ws.stride(1))
    consts = dict(A_GATHER=gather, R=rows_per_thread, NW=nw, G=g, CB=cb, K_STEPS=triton.cdiv(kb, STEP_BYTES),
                  W_MODE=w_mode, num_warps=nw)
    if warmup:
        _fp4_gemv_ws.warmup(*args, grid=grid, **consts)
    else:
        _fp4_gemv_ws[grid](*args, **consts)

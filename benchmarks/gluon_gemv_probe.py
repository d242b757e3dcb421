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
import functools
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from moe_select.backends import triton_moe_gluon as GL  # noqa: E402
from moe_select.backends import triton_moe_kernels as K  # noqa: E402

DECODE = gl.constexpr(K.FP4_DECODE_ASM.value if hasattr(K.FP4_DECODE_ASM, "value") else K.FP4_DECODE_ASM)
EPI = gl.constexpr(2.0 ** K.FP4_EPI_LOG2)
#: (name, experts, top_k, N rows, K elements, format): the issue-24 layers' two GEMMs at 1 token
SHAPES = (("gpt-oss-20b gemm1", 32, 4, 5760, 2880, "mxfp4"), ("gpt-oss-20b gemm2", 32, 4, 2880, 2880, "mxfp4"),
          ("gpt-oss-120b gemm1", 128, 4, 5760, 2880, "mxfp4"), ("gpt-oss-120b gemm2", 128, 4, 2880, 2880, "mxfp4"),
          ("Qwen3-30B-A3B gemm1", 128, 8, 1536, 2048, "nvfp4"), ("Qwen3-30B-A3B gemm2", 128, 8, 2048, 768, "nvfp4"),
          ("DeepSeek-V3.1 gemm1", 256, 8, 4096, 7168, "nvfp4"), ("DeepSeek-V3.1 gemm2", 256, 8, 7168, 2048, "nvfp4"))


@gluon.jit
def _gemv(q_ptr, s_ptr, a_ptr, ids_ptr, out_ptr, N, KB, top_k, a_per_slot, stride_qe, stride_qn, stride_se,
          stride_sn, stride_aw, stride_o, R: gl.constexpr, NW: gl.constexpr, G: gl.constexpr, CB: gl.constexpr,
          K_STEPS: gl.constexpr, W_MODE: gl.constexpr, ACT: gl.constexpr = 0, KS2: gl.constexpr = 1):
    """Program ``slot * cdiv(N, R * NW) + strip``: ``out[slot, strip rows]`` (module doc). ``q [E, N, KB]`` shuffled
    e2m1 bytes, ``s [E, N, KB / (G * CB) * G]`` the kernel's scale bytes, ``a`` int32 words (one per weight byte),
    ``KB`` bytes per row (a multiple of ``CB``), ``K_STEPS = cdiv(KB, 32 * G * CB)``."""
    L4: gl.constexpr = gl.BlockedLayout([R, 1, G, CB], [1, 32, 1, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
    A3: gl.constexpr = gl.SliceLayout(0, L4)           # [32, G, CB]: the activation words
    BN: gl.constexpr = R * NW
    STEP: gl.constexpr = 32 * G * CB                   # bytes of K per step
    pid = gl.program_id(0)
    strips = gl.cdiv(N, BN)
    slot = pid // strips
    e = gl.load(ids_ptr + slot).to(gl.int64)
    # the runner's kernel's offsets (backends/triton_moe_gluon.py strip_offsets; rows past N read row N - 1)
    grp, s_off, byte3, q_off = GL.strip_offsets(pid % strips, N, stride_qn, stride_sn, R, NW, G, CB)
    q_base = q_ptr + e * stride_qe
    s_base = s_ptr + e * stride_se
    a_base = a_ptr + (slot // a_per_slot).to(gl.int64) * stride_aw
    acc = gl.zeros([BN, 32, G, CB], gl.float32, layout=L4)
    if ACT == 2:    # the slot's activation row staged once per CTA in shared memory
        LA: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [1, 32 // (G * CB // 4), G, CB // 4], [1, NW, 1, 1], [3, 2, 1, 0])
        st_a = gl.arange(0, KS2, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, LA))))
        c_l = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, LA))))
        g_l = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, LA))))
        b_l = gl.arange(0, CB, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LA))))
        off_l = (gl.expand_dims(gl.expand_dims(gl.expand_dims(st_a, 1), 2), 3) * STEP
                 + gl.expand_dims(gl.expand_dims(gl.expand_dims(c_l, 0), 2), 3) * (G * CB)
                 + gl.expand_dims(gl.expand_dims(gl.expand_dims(g_l, 0), 1), 3) * CB
                 + gl.expand_dims(gl.expand_dims(gl.expand_dims(b_l, 0), 1), 2))
        a_all = gl.load(a_base + off_l, mask=off_l < KB, other=0)
        a_smem = gl.allocate_shared_memory(gl.int32, [KS2 * 32, G, CB], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]),
                                           gl.reshape(a_all, [KS2 * 32, G, CB]))
        gl.thread_barrier()
    for st in gl.static_range(K_STEPS):
        if ACT == 0:
            acc = GL.step_fma(acc, q_base, s_base, a_base, 0, grp, s_off, byte3, q_off, st, KB, G, CB, W_MODE)
        else:
            if ACT == 1:  # timing only: no activation traffic (a constant bf16 pair 1.0, 1.0; wrong sums)
                aw = gl.full([32, G, CB], 0x3F803F80, gl.int32, layout=A3)
            else:
                aw = a_smem.slice(st * 32, 32, dim=0).load(A3)
            acc = GL.step_fma(acc, q_base, s_base, a_base, aw, grp, s_off, byte3, q_off, st, KB, G, CB, W_MODE, False)
    out = gl.sum(gl.sum(gl.sum(acc, 3), 2), 1) * EPI
    rows_o = (pid % strips) * BN + gl.arange(0, BN, layout=out.type.layout)
    gl.store(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)


@gluon.jit
def _tma_issue(j, total, pid, nprog, w_desc, s_desc, a_desc, w_smem, s_smem, a_smem, bars, ids_ptr, N, strips,
               a_per_slot, BN: gl.constexpr, BK: gl.constexpr, SB: gl.constexpr, KT: gl.constexpr,
               STAGES: gl.constexpr):
    """Load ``j`` of this program's stream (item ``j // KT``, K tile ``j % KT``) into stage ``j % STAGES``: the
    weight tile ``[BN, BK]``, its scale bytes ``[BN, SB]`` and the activation words ``[1, BK]``, one mbarrier."""
    if j < total:
        item = pid + (j // KT) * nprog
        kt = j % KT
        slot = item // strips
        e = gl.load(ids_ptr + slot)
        row = e * N + (item % strips) * BN
        st = j % STAGES
        bar = bars.index(st)
        mbarrier.expect(bar, BN * BK + BN * SB + BK * 4)
        tma.async_copy_global_to_shared(w_desc, [row, kt * BK], bar, w_smem.index(st))
        tma.async_copy_global_to_shared(s_desc, [row, kt * SB], bar, s_smem.index(st))
        tma.async_copy_global_to_shared(a_desc, [slot // a_per_slot, kt * BK], bar, a_smem.index(st))


@gluon.jit
def _gemv_tma(w_desc, s_desc, a_desc, ids_ptr, out_ptr, N, n_items, strips, a_per_slot, stride_o,
              BN: gl.constexpr, R: gl.constexpr, NW: gl.constexpr, G: gl.constexpr, CB: gl.constexpr,
              KT: gl.constexpr, STAGES: gl.constexpr, W_MODE: gl.constexpr):
    """A persistent TMA-fed variant of :func:`_gemv`: program ``pid`` takes items ``pid, pid + nprog, ...``
    (item = slot x strip of ``BN`` rows), each ``KT`` K tiles of ``BK = 16 * G * CB`` bytes, through ``STAGES``
    shared-memory stages kept in flight by TMA (the bytes in flight live in shared memory, not in registers)."""
    BK: gl.constexpr = 16 * G * CB
    SB: gl.constexpr = 16 * G
    L3: gl.constexpr = gl.BlockedLayout([R, G, CB], [2, 16, 1], [NW, 1, 1], [2, 1, 0])   # [BN, 16 * G, CB]
    S2: gl.constexpr = gl.SliceLayout(2, L3)                                              # [BN, 16 * G]
    A2: gl.constexpr = gl.SliceLayout(0, L3)                                              # [16 * G, CB]
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    total = (n_items - pid + nprog - 1) // nprog * KT
    w_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, BN, BK], w_desc.layout)
    s_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, BN, SB], s_desc.layout)
    a_smem = gl.allocate_shared_memory(gl.int32, [STAGES, 1, BK], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    for i in gl.static_range(STAGES):
        _tma_issue(i, total, pid, nprog, w_desc, s_desc, a_desc, w_smem, s_smem, a_smem, bars, ids_ptr, N, strips,
                   a_per_slot, BN, BK, SB, KT, STAGES)
    acc = gl.zeros([BN, 16 * G, CB], gl.float32, layout=L3)
    for j in range(total):
        st = j % STAGES
        mbarrier.wait(bars.index(st), (j // STAGES) & 1)
        q = w_smem.index(st).reshape([BN, 16 * G, CB]).load(L3)
        sc = s_smem.index(st).load(S2)
        aw = a_smem.index(st).reshape([16 * G, CB]).load(A2)
        gl.thread_barrier()                   # every warp has read stage st: it may be refilled
        _tma_issue(j + STAGES, total, pid, nprog, w_desc, s_desc, a_desc, w_smem, s_smem, a_smem, bars, ids_ptr, N,
                   strips, a_per_slot, BN, BK, SB, KT, STAGES)
        s2 = GL.scale_words(sc, W_MODE)
        s3 = gl.broadcast(gl.expand_dims(s2, 2), q)[0]
        w2 = gl.inline_asm_elementwise(DECODE, "=r,=r,=r,=r,r,r,r,r,r", [q, s3], dtype=gl.int32, is_pure=True, pack=4)
        a3 = gl.expand_dims(aw, 0)
        acc += (w2 << 16).to(gl.float32, bitcast=True) * (a3 << 16).to(gl.float32, bitcast=True)
        acc += (w2 & -65536).to(gl.float32, bitcast=True) * (a3 & -65536).to(gl.float32, bitcast=True)
        if j % KT == KT - 1:
            item = pid + (j // KT) * nprog
            out = gl.sum(gl.sum(acc, 2), 1) * EPI
            rows_o = (item % strips) * BN + gl.arange(0, BN, layout=out.type.layout)
            gl.store(out_ptr + (item // strips).to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)
            acc = gl.zeros([BN, 16 * G, CB], gl.float32, layout=L3)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s, s_end, SG: gl.constexpr):
    """K step ``s`` (32 bytes of each row) of :func:`_gemv_mma`: 16 weight bytes per thread (4 int32 words), the scale bytes of its
    two rows, the activation's 64 values as the mma's B operand (column 0; the other seven columns zero)."""
    ok = s < s_end
    q = gl.load(q_base + q_off + s * 128, mask=ok, other=0)
    sc = gl.load(s_base + s_off + s * SG, mask=ok, other=0)
    ab = gl.load(a_base + b_off + s * 64, mask=b_mask & ok, other=0.0)
    return q, sc, ab


@gluon.jit
def _decode_words(q, s4, LQ: gl.constexpr, NW: gl.constexpr):
    """``q [NW, 32, 4]`` weight words (in ``LQ``) and their bytes' scale words ``s4 [NW, 32, 4, 2, 2]`` (byte ``4 word +
    2 j1 + j0``) -> the decoded weights as bf16 ``(lo, hi)`` halves ``[NW, 32, 16]``, one pair per byte."""
    se, so = gl.split(s4)
    s0, s2_ = gl.split(se)
    s1, s3 = gl.split(so)
    o0, o1, o2, o3 = gl.inline_asm_elementwise(
        DECODE, "=r,=r,=r,=r,r,r,r,r,r", [q, gl.convert_layout(s0, LQ), gl.convert_layout(s1, LQ),
                                          gl.convert_layout(s2_, LQ), gl.convert_layout(s3, LQ)],
        dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=True, pack=1)
    w = gl.reshape(gl.join(gl.join(o0, o2), gl.join(o1, o3)), [NW, 32, 16])
    return w.to(gl.int16).to(gl.bfloat16, bitcast=True), (w >> 16).to(gl.int16).to(gl.bfloat16, bitcast=True)


@gluon.jit
def _mma_step(q, sc, ab, acc, LQ: gl.constexpr, L5: gl.constexpr, DA: gl.constexpr, NW: gl.constexpr,
              SG: gl.constexpr, W_MODE: gl.constexpr):
    """Decode one K step's bytes (:data:`FP4_DECODE_ASM`: one bf16 pair per byte) and multiply-add them on the tensor
    cores: the decoded words are the mma's A fragments as loaded (module doc of :func:`_gemv_mma`)."""
    s2 = GL.scale_words(sc, W_MODE)
    s5 = gl.broadcast(gl.expand_dims(s2, 4), gl.full([NW, 32, 2, SG, 8 // SG], 0, gl.int32, layout=L5))[0]
    s4 = gl.reshape(s5, [NW, 32, 4, 2, 2])                        # (warp, lane, word, j1, j0): byte 4 word + 2 j1 + j0
    lo, hi = _decode_words(q, s4, LQ, NW)
    x = gl.reshape(gl.join(lo, hi), [NW, 8, 4, 2, 4, 2, 2])         # (warp, q, c, rh, kt, bb, pair)
    x = gl.permute(x, [0, 3, 1, 4, 5, 2, 6])                       # (warp, rh, q, kt, bb, c, pair)
    a = gl.convert_layout(gl.reshape(x, [16 * NW, 64]), DA)
    return mma_v2(a, ab, acc)


@gluon.jit
def _mma_program(ids_ptr, N, steps, BN: gl.constexpr, SPLIT: gl.constexpr):
    """Program ``(slot * cdiv(N, BN) + strip, split)`` of the tensor-core GEMVs: its slot, strip, expert and K steps
    ``[s_begin, s_end)`` of ``steps``."""
    pid = gl.program_id(0)
    split = gl.program_id(1)
    strips = gl.cdiv(N, BN)
    slot = pid // strips
    strip = pid % strips
    e = gl.load(ids_ptr + slot).to(gl.int64)
    per = gl.cdiv(steps, SPLIT)
    s_begin = split * per
    return slot, strip, e, s_begin, gl.minimum(s_begin + per, steps)


@gluon.jit
def _mma_q_off(strip, steps, NW: gl.constexpr, LQ: gl.constexpr):
    """Word offsets ``[NW, 32, 4]`` of each warp's row group at K step 0 (groups of 128 words per step, each lane's 4
    words contiguous), in ``LQ``."""
    wq = gl.arange(0, NW, layout=gl.SliceLayout(1, gl.SliceLayout(2, LQ)))
    lq = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, LQ)))
    iq = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, LQ)))
    g = (strip * NW + wq).to(gl.int64)
    return (gl.expand_dims(gl.expand_dims(g * steps * 128, 1), 2) + gl.expand_dims(gl.expand_dims(lq * 4, 0), 2)
            + gl.expand_dims(gl.expand_dims(iq, 0), 1))


@gluon.jit
def _gemv_mma(q_ptr, s_ptr, a_ptr, ids_ptr, out_ptr, N, KB, a_per_slot, stride_qe, stride_se, stride_sn, stride_a,
              stride_o, NW: gl.constexpr, SG: gl.constexpr, U: gl.constexpr, SPLIT: gl.constexpr,
              W_MODE: gl.constexpr, PF: gl.constexpr = False):
    """The GEMV of :func:`_gemv` with the multiply-adds on the tensor cores (``mma.m16n8k16`` bf16, the token in
    column 0 of B): program ``(slot * N / (16 NW) + strip, split)``, each warp 16 rows. The weights are stored
    permuted (:func:`mma_weights`) so that each thread's 16 contiguous bytes of a 32-byte K step are, decoded, its A
    fragments of four ``16 x 16`` tiles: byte ``i = 8 rh + 2 kt + bb`` of lane ``t = 4 q + c`` is row ``8 rh + q``,
    byte ``8 kt + 4 bb + c`` of the step. ``SG`` scale groups per step (mxfp4 2, nvfp4 4), ``U`` steps loaded before
    any is used, ``SPLIT`` programs along K adding into ``out`` (float32 atomics; one program stores); ``PF``: 4
    steps at a time with the next 4 loaded before these are used (``U`` ignored)."""
    LQ: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [NW, 1, 1], [2, 1, 0])     # [NW, 32, 4] words
    L5: gl.constexpr = gl.BlockedLayout([1, 1, 2, SG, 8 // SG], [1, 32, 1, 1, 1], [NW, 1, 1, 1, 1], [4, 3, 2, 1, 0])
    LS: gl.constexpr = gl.SliceLayout(4, L5)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NW, 1], instr_shape=[16, 8])
    DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    BN: gl.constexpr = 16 * NW
    steps = KB // 32
    slot, strip, e, s_begin, s_end = _mma_program(ids_ptr, N, steps, BN, SPLIT)
    q_off = _mma_q_off(strip, steps, NW, LQ)
    ws = gl.arange(0, NW, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, LS))))
    ls = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, LS))))
    rh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, LS))))
    sg = gl.arange(0, SG, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LS))))
    rows_s = (gl.expand_dims(gl.expand_dims(gl.expand_dims((strip * NW + ws) * 16, 1), 2), 3)
              + gl.expand_dims(gl.expand_dims(gl.expand_dims(ls // 4, 0), 2), 3)
              + gl.expand_dims(gl.expand_dims(gl.expand_dims(rh * 8, 0), 1), 3))
    s_off = rows_s.to(gl.int64) * stride_sn + gl.expand_dims(gl.expand_dims(gl.expand_dims(sg, 0), 1), 2)
    kb_ = gl.arange(0, 64, layout=gl.SliceLayout(1, DB))
    nb = gl.arange(0, 8, layout=gl.SliceLayout(0, DB))
    b_off = gl.expand_dims(kb_, 1) + gl.expand_dims(nb, 0) * 0
    b_mask = gl.expand_dims(kb_ >= 0, 1) & gl.expand_dims(nb == 0, 0)
    q_base = q_ptr + e * stride_qe
    s_base = s_ptr + e * stride_se
    a_base = a_ptr + (slot // a_per_slot).to(gl.int64) * stride_a
    acc = gl.zeros([BN, 8], gl.float32, layout=MMA)
    if PF:      # the next U steps' loads issued before this U steps' decode and mma (a register double buffer)
        q0, c0, b0 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s_begin, s_end, SG)
        q1, c1, b1 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s_begin + 1, s_end, SG)
        q2, c2, b2 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s_begin + 2, s_end, SG)
        q3, c3, b3 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s_begin + 3, s_end, SG)
        for s0 in range(s_begin, s_end, 4):
            n0, d0, e0 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 4, s_end, SG)
            n1, d1, e1 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 5, s_end, SG)
            n2, d2, e2 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 6, s_end, SG)
            n3, d3, e3 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 7, s_end, SG)
            acc = _mma_step(q0, c0, b0, acc, LQ, L5, DA, NW, SG, W_MODE)
            acc = _mma_step(q1, c1, b1, acc, LQ, L5, DA, NW, SG, W_MODE)
            acc = _mma_step(q2, c2, b2, acc, LQ, L5, DA, NW, SG, W_MODE)
            acc = _mma_step(q3, c3, b3, acc, LQ, L5, DA, NW, SG, W_MODE)
            q0, c0, b0, q1, c1, b1, q2, c2, b2, q3, c3, b3 = n0, d0, e0, n1, d1, e1, n2, d2, e2, n3, d3, e3
    else:
        for s0 in range(s_begin, s_end, U):
            q0, c0, b0 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0, s_end, SG)
            if U >= 2:
                q1, c1, b1 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 1, s_end, SG)
            if U >= 4:
                q2, c2, b2 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 2, s_end, SG)
                q3, c3, b3 = _mma_load(q_base, s_base, a_base, q_off, s_off, b_off, b_mask, s0 + 3, s_end, SG)
            acc = _mma_step(q0, c0, b0, acc, LQ, L5, DA, NW, SG, W_MODE)
            if U >= 2:
                acc = _mma_step(q1, c1, b1, acc, LQ, L5, DA, NW, SG, W_MODE)
            if U >= 4:
                acc = _mma_step(q2, c2, b2, acc, LQ, L5, DA, NW, SG, W_MODE)
                acc = _mma_step(q3, c3, b3, acc, LQ, L5, DA, NW, SG, W_MODE)
    out = gl.sum(acc, axis=1) * EPI
    rows_o = strip * BN + gl.arange(0, BN, layout=out.type.layout)
    if SPLIT == 1:
        gl.store(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)
    else:
        gl.atomic_add(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)


def mma_weights(q: torch.Tensor) -> torch.Tensor:
    """Canonical packed e2m1 codes ``q [E, N, KB]`` (``N`` a multiple of 16, ``KB`` of 32) -> the byte order
    :func:`_gemv_mma` reads (per expert: 16-row groups, K steps of 32 bytes, lanes, 16 bytes: see its doc), then
    :func:`fp4_shuffle` within each 4 bytes for the PTX decode. A load-time layout choice, not a checkpoint's."""
    e, n, kb = q.shape
    x = q.reshape(e, n // 16, 2, 8, kb // 32, 4, 2, 4)          # (e, g16, rh, q, s, kt, bb, c)
    x = x.permute(0, 1, 4, 3, 7, 2, 5, 6).contiguous()          # (e, g16, s, q, c, rh, kt, bb)
    return K.fp4_shuffle(x.reshape(e, n, kb))


def launch_mma(qm, s, a, ids, out, *, kb: int, top_k: int, gemm2: bool, fmt: str, warps: int, unroll: int,
               split: int, prefetch: bool = False):
    """One launch of :func:`_gemv_mma` (``qm`` from :func:`mma_weights`, ``a`` bf16 ``[rows, K]``); with ``split``
    > 1 ``out`` must hold zeros."""
    n = qm.shape[1]
    grid = (ids.numel() * triton.cdiv(n, 16 * warps), split)
    qw = qm.view(torch.int32)
    _gemv_mma[grid](qw, s, a, ids, out, n, kb, 1 if gemm2 else top_k, qw.stride(0), s.stride(0), s.stride(1),
                    a.stride(0), out.stride(0), NW=warps, SG=2 if fmt == "mxfp4" else 4, U=unroll, SPLIT=split,
                    W_MODE=6 if fmt == "mxfp4" else 7, PF=prefetch, num_warps=warps)


@gluon.jit
def _mmab_load(q_base, s_base, a_base, q_off, s_off, a_off, s, s_end, SG: gl.constexpr):
    """K step ``s`` (64 bytes of each row) of :func:`_gemv_mmab`: 4 weight words per thread (its row's 16 bytes),
    the row's ``SG`` scale bytes, and its 16 activation words (32 bf16 values of the step, permuted: ``mmab_act``)."""
    ok = s < s_end
    q = gl.load(q_base + q_off + s * 128, mask=ok, other=0)
    sc = gl.load(s_base + s_off + s * SG, mask=ok, other=0)
    aw = gl.load(a_base + a_off + s * 64, mask=ok, other=0)
    return q, sc, aw


@gluon.jit
def _mmab_step(q, sc, aw, acc, LQ: gl.constexpr, L4: gl.constexpr, DA: gl.constexpr, DB: gl.constexpr,
               NW: gl.constexpr, SG: gl.constexpr, W_MODE: gl.constexpr):
    """Decode one K step (weights as the mma's B operand: 8 rows per warp) and run its eight ``m16n8k16`` tiles, the
    activation as A (its 16 rows all the token)."""
    s2 = GL.scale_words(sc, W_MODE)
    s4 = gl.broadcast(gl.expand_dims(s2, 3), gl.full([NW, 32, SG, 16 // SG], 0, gl.int32, layout=L4))[0]
    s4 = gl.reshape(s4, [NW, 32, 4, 2, 2])                        # (warp, lane, word, j1, j0): byte 4 word + 2 j1 + j0
    lo, hi = _decode_words(q, s4, LQ, NW)
    x = gl.reshape(gl.join(lo, hi), [NW, 8, 4, 8, 2, 2])           # (warp, q, c, kt, bb, pair)
    x = gl.permute(x, [3, 4, 2, 5, 0, 1])                          # (kt, bb, c, pair, warp, q)
    b = gl.convert_layout(gl.reshape(x, [128, 8 * NW]), DB)
    alo = aw.to(gl.int16).to(gl.bfloat16, bitcast=True)
    ahi = (aw >> 16).to(gl.int16).to(gl.bfloat16, bitcast=True)
    y = gl.reshape(gl.join(alo, ahi), [4, 8, 2, 2])                # (c, kt, bb, pair)
    y = gl.reshape(gl.permute(y, [1, 2, 0, 3]), [128])             # k = 16 kt + 8 bb + 2 c + pair
    y = gl.expand_dims(gl.convert_layout(y, gl.SliceLayout(0, DA)), 0)
    a = gl.broadcast(y, gl.full([16, 128], 0.0, gl.bfloat16, layout=DA))[0]
    return mma_v2(a, b, acc)


@gluon.jit
def _gemv_mmab(q_ptr, s_ptr, a_ptr, ids_ptr, out_ptr, N, KBP, a_per_slot, stride_qe, stride_se, stride_sn, stride_a,
               stride_o, NW: gl.constexpr, SG: gl.constexpr, U: gl.constexpr, SPLIT: gl.constexpr,
               W_MODE: gl.constexpr):
    """:func:`_gemv_mma` with the roles swapped: the weights are the B operand (``mma.m16n8k16``'s 8 columns: 8 rows
    per warp, twice the warps of the A-operand kernel for the same grid) and the activation is A, loaded once per
    thread and K step as 16 contiguous words (``mmab_act``'s order) instead of 8-10 scattered loads. Weights stored
    by :func:`mmab_weights`: byte ``i = 2 kt + bb`` of lane ``t = 4 q + c`` is row ``q`` of the warp's 8, byte
    ``8 kt + 4 bb + c`` of the 64-byte K step. ``KBP`` bytes per row (padded to a multiple of 64), ``SG`` scale bytes
    per row and step (mxfp4 4, nvfp4 8, padded likewise)."""
    LQ: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [NW, 1, 1], [2, 1, 0])      # [NW, 32, 4] words
    L4: gl.constexpr = gl.BlockedLayout([1, 1, SG, 16 // SG], [1, 32, 1, 1], [NW, 1, 1, 1], [3, 2, 1, 0])
    LS: gl.constexpr = gl.SliceLayout(3, L4)                                                 # [NW, 32, SG]
    LA: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [1, NW], [0, 1])                   # [4, 16]: lane c's words
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NW], instr_shape=[16, 8])
    DA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    BN: gl.constexpr = 8 * NW
    steps = KBP // 64
    slot, strip, e, s_begin, s_end = _mma_program(ids_ptr, N, steps, BN, SPLIT)
    q_off = _mma_q_off(strip, steps, NW, LQ)
    ws = gl.arange(0, NW, layout=gl.SliceLayout(1, gl.SliceLayout(2, LS)))
    ls = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, LS)))
    sg = gl.arange(0, SG, layout=gl.SliceLayout(0, gl.SliceLayout(1, LS)))
    rows_s = gl.expand_dims(gl.expand_dims((strip * NW + ws) * 8, 1) + gl.expand_dims(ls // 4, 0), 2)
    s_off = rows_s.to(gl.int64) * stride_sn + gl.expand_dims(gl.expand_dims(sg, 0), 1)
    ca = gl.arange(0, 4, layout=gl.SliceLayout(1, LA))
    wa = gl.arange(0, 16, layout=gl.SliceLayout(0, LA))
    a_off = gl.expand_dims(ca * 16, 1) + gl.expand_dims(wa, 0)
    q_base = q_ptr + e * stride_qe
    s_base = s_ptr + e * stride_se
    a_base = a_ptr + (slot // a_per_slot).to(gl.int64) * stride_a
    acc = gl.zeros([16, BN], gl.float32, layout=MMA)
    for s0 in range(s_begin, s_end, U):
        q0, c0, a0 = _mmab_load(q_base, s_base, a_base, q_off, s_off, a_off, s0, s_end, SG)
        if U >= 2:
            q1, c1, a1 = _mmab_load(q_base, s_base, a_base, q_off, s_off, a_off, s0 + 1, s_end, SG)
        if U >= 4:
            q2, c2, a2 = _mmab_load(q_base, s_base, a_base, q_off, s_off, a_off, s0 + 2, s_end, SG)
            q3, c3, a3 = _mmab_load(q_base, s_base, a_base, q_off, s_off, a_off, s0 + 3, s_end, SG)
        acc = _mmab_step(q0, c0, a0, acc, LQ, L4, DA, DB, NW, SG, W_MODE)
        if U >= 2:
            acc = _mmab_step(q1, c1, a1, acc, LQ, L4, DA, DB, NW, SG, W_MODE)
        if U >= 4:
            acc = _mmab_step(q2, c2, a2, acc, LQ, L4, DA, DB, NW, SG, W_MODE)
            acc = _mmab_step(q3, c3, a3, acc, LQ, L4, DA, DB, NW, SG, W_MODE)
    r16 = gl.arange(0, 16, layout=gl.SliceLayout(1, MMA))
    out = gl.sum(gl.where(gl.expand_dims(r16 == 0, 1), acc, 0.0), axis=0) * EPI
    rows_o = strip * BN + gl.arange(0, BN, layout=out.type.layout)
    if SPLIT == 1:
        gl.store(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)
    else:
        gl.atomic_add(out_ptr + slot.to(gl.int64) * stride_o + rows_o, out, mask=rows_o < N)


def mmab_weights(q: torch.Tensor, s: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical packed e2m1 codes ``q [E, N, KB]`` (``N`` a multiple of 8) and kernel scale bytes ``s [E, N, KB /
    CB]`` -> the order :func:`_gemv_mmab` reads, K padded with zero codes and zero scales to 64-byte steps: per
    expert 8-row groups, steps, lanes ``t = 4 q + c``, 16 bytes ``i = 2 kt + bb`` (row ``q``, byte ``8 kt + 4 bb + c``
    of the step), then :func:`fp4_shuffle`; the scales padded the same way (``[E, N, KBP / CB]``)."""
    e, n, kb = q.shape
    pad = (-kb) % 64
    cb = 16 if fmt == "mxfp4" else 8
    qp = torch.nn.functional.pad(q, (0, pad))
    sp = torch.nn.functional.pad(s, (0, pad // cb))
    kbp = kb + pad
    x = qp.reshape(e, n // 8, 8, kbp // 64, 8, 2, 4)           # (e, g8, q, s, kt, bb, c)
    x = x.permute(0, 1, 3, 2, 6, 4, 5).contiguous()            # (e, g8, s, q, c, kt, bb)
    return K.fp4_shuffle(x.reshape(e, n, kbp)), sp.contiguous()


def mmab_act(a: torch.Tensor, kbp: int) -> torch.Tensor:
    """bf16 activations ``a [rows, K]`` -> int32 words ``[rows, KBP / 2]`` in :func:`_gemv_mmab`'s order: K padded
    with zeros to ``2 KBP``, then per 128-element step lane ``c``'s 16 words (``kt``, ``bb``), each the bf16 pair
    ``k = 128 s + 16 kt + 8 bb + 2 c + (0, 1)``."""
    rows, k = a.shape
    ap = torch.nn.functional.pad(a, (0, 2 * kbp - k))
    y = ap.reshape(rows, kbp // 64, 8, 2, 4, 2).permute(0, 1, 4, 2, 3, 5).contiguous()
    return y.reshape(rows, 2 * kbp).view(torch.int32)


def launch_mmab(qm, sp, aw, ids, out, *, top_k: int, gemm2: bool, fmt: str, warps: int, unroll: int, split: int):
    """One launch of :func:`_gemv_mmab` (``qm, sp`` from :func:`mmab_weights`, ``aw`` from :func:`mmab_act`); with
    ``split`` > 1 ``out`` must hold zeros."""
    n, kbp = qm.shape[1], qm.shape[2]
    qw = qm.view(torch.int32)
    grid = (ids.numel() * triton.cdiv(n, 8 * warps), split)
    _gemv_mmab[grid](qw, sp, aw, ids, out, n, kbp, 1 if gemm2 else top_k, qw.stride(0), sp.stride(0), sp.stride(1),
                     aw.stride(0), out.stride(0), NW=warps, SG=4 if fmt == "mxfp4" else 8, U=unroll, SPLIT=split,
                     W_MODE=6 if fmt == "mxfp4" else 7, num_warps=warps)


def tma_operands(q, s, a_words, *, fmt: str, rows: int, warps: int):
    """The TMA descriptors of :func:`_gemv_tma` (``BN = 2 * rows * warps`` rows per item): the weights viewed
    ``[E * N, KB]``, the scale bytes ``[E * N, KB / CB]`` padded to 16-byte rows (TMA's stride rule; a load-time
    layout choice), the activation words ``[rows, KB]``."""
    g, cb = (1, 16) if fmt == "mxfp4" else (2, 8)
    bn, bk, sb = 2 * rows * warps, 16 * g * cb, 16 * g
    e, n, kb = q.shape
    s2 = s.reshape(e * n, -1)
    pad = (-s2.shape[1]) % 16
    if pad:
        s2 = torch.nn.functional.pad(s2, (0, pad))
    lay8 = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
    lay32 = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return (TensorDescriptor.from_tensor(q.reshape(e * n, kb), [bn, bk], lay8),
            TensorDescriptor.from_tensor(s2, [bn, sb], lay8),
            TensorDescriptor.from_tensor(a_words, [1, bk], lay32), s2)


def launch_tma(descs, ids, out, *, n: int, kb: int, top_k: int, gemm2: bool, fmt: str, rows: int, warps: int,
               stages: int, programs: int):
    """One launch of :func:`_gemv_tma` over ``ids.numel()`` slots with ``programs`` persistent programs."""
    g, cb = (1, 16) if fmt == "mxfp4" else (2, 8)
    bn = 2 * rows * warps
    strips = triton.cdiv(n, bn)
    n_items = ids.numel() * strips
    _gemv_tma[(min(programs, n_items),)](descs[0], descs[1], descs[2], ids, out, n, n_items, strips,
                                         1 if gemm2 else top_k, out.stride(0), BN=bn, R=rows, NW=warps, G=g, CB=cb,
                                         KT=triton.cdiv(kb, 16 * g * cb), STAGES=stages,
                                         W_MODE=6 if fmt == "mxfp4" else 7, num_warps=warps)


def launch(q, s, a_words, ids, out, *, kb: int, top_k: int, gemm2: bool, fmt: str, rows: int, warps: int, act: int = 0):
    """One launch of :func:`_gemv` over ``ids.numel()`` slots (``out [S, N]`` float32)."""
    g, cb = (1, 16) if fmt == "mxfp4" else (2, 8)
    n = q.shape[1]
    grid = (ids.numel() * triton.cdiv(n, rows * warps),)
    _gemv[grid](q, s, a_words, ids, out, n, kb, top_k, 1 if gemm2 else top_k, q.stride(0), q.stride(1), s.stride(0),
                s.stride(1), a_words.stride(0), out.stride(0), R=rows, NW=warps, G=g, CB=cb,
                K_STEPS=triton.cdiv(kb, 32 * g * cb), W_MODE=6 if fmt == "mxfp4" else 7, ACT=act,
                KS2=triton.next_power_of_2(triton.cdiv(kb, 32 * g * cb)), num_warps=warps)


def compile_stats(rows: int, warps: int, act: int = 0) -> list[dict]:
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
                  ACT=act, KS2=triton.next_power_of_2(triton.cdiv(kb, 32 * g * cb)),
                  num_warps=warps)
        c = compile_sm90(_gemv, args, kw)
        ptx = c["ptx"]
        out.append({"shape": name, "regs": c["regs"], "spill_bytes": c["spill"], "ld_global_v4": ptx.count("ld.global.v4"),
                    "ld_global": ptx.count("ld.global"), "barriers": ptx.count("bar.sync") + ptx.count("barrier.sync"),
                    "k_steps": kw["K_STEPS"]})
    return out


@triton.jit
def _read(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
    """Read ``BLOCK`` int32 words per program and store their (wrapping) sum: a pure streaming read."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(v, 0))


def read_ceiling(args) -> dict:
    """What one kernel can read at each shape's byte count (the GEMV's weights and scales) in the same CUDA-graph
    timing: the size-dependent ceiling next to the large-buffer copy bandwidth the floor uses."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import moe_layer as ml
    import tune_triton_moe as tune

    dev = torch.device("cuda")
    copy_gbs = ml.ceilings(dev, ml.Clock(dev))["copy_GBps"] if not args.no_time else float("nan")
    timer = tune.Timer(dev)
    rows = []
    for name, _e, top_k, n, k, fmt in SHAPES[:args.shapes]:
        nbytes = top_k * n * (k // 2 + k // (32 if fmt == "mxfp4" else 16))
        x = torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device=dev)
        row = {"shape": name, "bytes": nbytes}
        for block, warps in ((2048, 4), (4096, 4), (8192, 8)):
            out = torch.empty(triton.cdiv(x.numel(), block), dtype=torch.int32, device=dev)
            fn = functools.partial(_read[(out.numel(),)], x, out, x.numel(), BLOCK=block, num_warps=warps)
            if args.no_time:
                fn()
                torch.cuda.synchronize()
                us = float("nan")
            else:
                us = timer([fn])
            row[f"us_{block}"] = round(us, 2)
        if args.no_time:
            print(json.dumps(row), flush=True)
            rows.append(row)
            continue
        best = min(v for key, v in row.items() if key.startswith("us_"))
        row["GB/s"] = round(nbytes / (best * 1e-6) / 1e9)
        row["frac_of_copy"] = round(row["GB/s"] / copy_gbs, 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"copy_GBs": None if args.no_time else round(copy_gbs), "read": rows}


def mma_compile_stats(warps: int, unroll: int, split: int = 1, prefetch: bool = False, b_weights: bool = False) -> list[dict]:
    """sm90 compile of :func:`_gemv_mma` (or, ``b_weights``, :func:`_gemv_mmab`) at each shape (no GPU): registers,
    spills, ``mma.sync`` and 16-byte global loads in the PTX, shared-memory stores and barriers (none: the decoded words
    are the mma's fragments as loaded), and instructions per weight in the SASS main loop (``sass_loop.main_loop``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sass_loop import compile_sm90, main_loop

    out = []
    meta = torch.device("meta")
    for name, e, top_k, n, k, fmt in SHAPES:
        kb, mx = k // 2, fmt == "mxfp4"
        ids, res = torch.empty(top_k, dtype=torch.int32, device=meta), torch.empty(top_k, n, dtype=torch.float32, device=meta)
        if b_weights:                        # _gemv_mmab: K padded to 64-byte steps, activation words
            kbp, cb = kb + (-kb) % 64, 16 if mx else 8
            kernel, steps = _gemv_mmab, unroll
            args = (torch.empty(e, n, kbp // 4, dtype=torch.int32, device=meta),
                    torch.empty(e, n, kbp // cb, dtype=torch.uint8, device=meta),
                    torch.empty(top_k, kbp // 2, dtype=torch.int32, device=meta), ids, res,
                    n, kbp, top_k, n * kbp // 4, n * (kbp // cb), kbp // cb, kbp // 2, n)
            kw = dict(SG=4 if mx else 8)
        else:
            grp = 32 if mx else 16
            kernel, steps = _gemv_mma, 4 if prefetch else unroll
            args = (torch.empty(e, n, kb // 4, dtype=torch.int32, device=meta),
                    torch.empty(e, n, k // grp, dtype=torch.uint8, device=meta),
                    torch.empty(top_k, k, dtype=torch.bfloat16, device=meta), ids, res,
                    n, kb, top_k, n * kb // 4, n * (k // grp), k // grp, k, n)
            kw = dict(SG=2 if mx else 4, PF=prefetch)
        c = compile_sm90(kernel, args, dict(kw, NW=warps, U=unroll, SPLIT=split, W_MODE=6 if mx else 7,
                                            num_warps=warps))
        ptx, body = c["ptx"], main_loop(c["cubin"])
        out.append({"shape": name, "regs": c["regs"], "spill_bytes": c["spill"], "mma": ptx.count("mma.sync"),
                    "ld_global_v4": ptx.count("ld.global.v4"), "st_shared": ptx.count("st.shared"),
                    "barriers": ptx.count("bar.sync") + ptx.count("barrier.sync"),
                    "loop_hmma": sum(op.startswith("HMMA") for op in body),
                    "instr_per_weight": round(len(body) / (steps * 32), 2)})
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
    copy_gbs = ml.ceilings(dev, ml.Clock(dev))["copy_GBps"] if not args.no_time else float("nan")
    timer = tune.Timer(dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows_out = []
    for name, e, top_k, n, k, fmt in SHAPES[:args.shapes]:
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
        if args.mmab:
            qb, sb = mmab_weights(q, sk, fmt)
            ab = mmab_act(a, qb.shape[2])
            if args.split > 1:
                out.zero_()
            run = functools.partial(launch_mmab, qb, sb, ab, ids, out, top_k=top_k, gemm2=gemm2, fmt=fmt,
                                    warps=args.warps, unroll=args.unroll, split=args.split)
        elif args.mma:
            qm = mma_weights(q)
            if args.split > 1:
                out.zero_()
            run = functools.partial(launch_mma, qm, sk, a, ids, out, kb=kb, top_k=top_k, gemm2=gemm2, fmt=fmt,
                                    warps=args.warps, unroll=args.unroll, split=args.split, prefetch=args.prefetch)
        elif args.tma:
            descs = tma_operands(qs, sk, a.view(torch.int32), fmt=fmt, rows=args.rows, warps=args.warps)
            run = functools.partial(launch_tma, descs, ids, out, n=n, kb=kb, top_k=top_k, gemm2=gemm2, fmt=fmt,
                                    rows=args.rows, warps=args.warps, stages=args.stages, programs=args.ctas * sms)
        else:
            run = functools.partial(launch, qs, sk, a.view(torch.int32), ids, out, kb=kb, top_k=top_k, gemm2=gemm2,
                                    fmt=fmt, rows=args.rows, warps=args.warps, act=args.act)
        run()
        torch.cuda.synchronize()
        ref = torch.empty(slots, n, dtype=torch.float64, device=dev)
        for j in range(slots):
            ex = int(ids[j])
            w = torch.stack([_e2m1(q[ex] & 0xF), _e2m1(q[ex] >> 4)], dim=-1).reshape(n, k)
            w = w * scale[ex].repeat_interleave(grp, dim=1)
            ref[j] = w @ a[j if gemm2 else 0].double()
        err = float((out.double() - ref).norm() / ref.norm()) if args.act != 1 else None   # act 1: not checked
        us = timer([run]) if not args.no_time else float("nan")
        nbytes = slots * n * (kb + k // grp)
        if args.no_time:
            row = {"shape": name, "rel_error": err, "ok": None if err is None else err <= 1e-5}
        else:
            row = {"shape": name, "us": round(us, 2), "GB/s": round(nbytes / (us * 1e-6) / 1e9), "frac_of_copy":
                   round(nbytes / (us * 1e-6) / 1e9 / copy_gbs, 3), "rel_error": err,
                   "ok": None if err is None else err <= 1e-5}
        print(json.dumps(row), flush=True)
        rows_out.append(row)
        del q, qs, sk, run
        torch.cuda.empty_cache()
    return {"copy_GBs": None if args.no_time else round(copy_gbs), "rows": rows_out, "rows_per_thread": args.rows, "warps": args.warps,
            "act": args.act, "tma": args.tma, "mma": args.mma, "mmab": args.mmab, "prefetch": args.prefetch, "unroll": args.unroll, "split": args.split, "stages": args.stages, "ctas_per_sm": args.ctas}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2, help="weight rows per thread (R)")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--act", type=int, default=0, choices=(0, 1, 2),
                    help="activation words: 0 from global memory per step, 1 none (timing only: a constant, wrong sums, "
                         "not checked), 2 staged once per CTA in shared memory")
    ap.add_argument("--tma", action="store_true", help="the persistent TMA-fed kernel (_gemv_tma; BN = 2 * rows * warps)")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="only the first N shapes")
    ap.add_argument("--no-time", action="store_true", help="run each kernel once, untimed (for a profiler)")
    ap.add_argument("--read", action="store_true", help="on a GPU: a pure streaming read at each shape's bytes")
    ap.add_argument("--mma", action="store_true", help="the tensor-core kernel (_gemv_mma: 16 rows per warp)")
    ap.add_argument("--mmab", action="store_true",
                    help="the tensor-core kernel with the weights as B (_gemv_mmab: 8 rows per warp)")
    ap.add_argument("--unroll", type=int, default=2, choices=(1, 2, 4), help="--mma: K steps loaded before use")
    ap.add_argument("--prefetch", action="store_true", help="--mma: the next 4 K steps loaded during these 4")
    ap.add_argument("--split", type=int, default=1, help="--mma: programs along K (float32 atomics)")
    ap.add_argument("--stages", type=int, default=4, help="--tma: shared-memory stages in flight per program")
    ap.add_argument("--ctas", type=int, default=2, help="--tma: persistent programs per SM")
    ap.add_argument("--gpu", action="store_true", help="check against float64 and time on the GPU")
    ap.add_argument("--out", help="write the result as JSON")
    args = ap.parse_args(argv)
    if args.read:
        result = read_ceiling(args)
    elif args.gpu:
        result = gpu(args)
    elif args.mma or args.mmab:
        result = {"sm90_compile": mma_compile_stats(args.warps, args.unroll, args.split, args.prefetch, args.mmab),
                  "warps": args.warps, "unroll": args.unroll, "split": args.split, "prefetch": args.prefetch}
        for r in result["sm90_compile"]:
            print(json.dumps(r))
    else:
        result = {"sm90_compile": compile_stats(args.rows, args.warps, args.act), "rows_per_thread": args.rows,
                  "warps": args.warps}
        for r in result["sm90_compile"]:
            print(json.dumps(r))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

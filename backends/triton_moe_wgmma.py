"""The second GEMM of the ``triton`` runner as a Gluon wgmma kernel on sm90: a tile-file option (``WGMMA`` on
``gemm2``) for 16-bit and per-tensor / per-channel FP8 layers (issue 26: the large-token regime).

Why: on one H200 a TMA-fed, persistent wgmma GEMM over the sort's blocks with ``BLOCK_N`` 256 on two consumer
warpgroups ran the second GEMM's product 8-13 % faster than the ``tl`` kernel's tiles at 2048-8192 tokens on
Qwen3-30B-A3B and Qwen3-235B-A22B (``benchmarks/gluon_gemm_probe.py``, benchmarks/README.md "A Gluon wgmma GEMM");
the second GEMM's A is the first GEMM's output in sorted row order, so TMA reads it with no gather.

What it computes, for each valid ``BLOCK_M``-row block ``b`` of the sort (``Alignment``; expert ``e_b =
block_expert[b]``, blocks of no local expert, ``-1``, are not stored) and each sorted row ``r`` of it that holds a
routing slot (``sorted_slots[r] < num_slots``):
``c[row, n] = ((sum_k a[r, k] * w[e_b, n, k]) * sa[r] * sb[e_b, n] + bias[e_b, n]) * weight[slot]`` in float32,
stored in ``c``'s dtype at ``row = slot`` (``by_slot``) or ``r``. ``sa`` / ``sb`` (fp8 only): ``a_amax / 448`` (per
row, or one for all rows) and the weight scale (one per expert: fp8_tensor; per output row: fp8_channel), as the
``tl`` kernel's epilogue (:func:`~.triton_moe_kernels.moe_gemm`, whose ``PREQUANT`` row quantization gives the e4m3
A this kernel reads); the bias and the routing weight are optional. The float32 sums run in another order than the
``tl`` tiles' (the values agree to the accumulation's rounding, not bit for bit); a forward's result does not depend
on which program computes a tile, so CUDA-graph replay equals eager.

The kernel: A ``[rows, K]`` and B viewed ``[E * N, K]`` through TMA descriptors (``BLOCK_K`` elements = 128 bytes,
the widest swizzle), a ring of ``num_stages`` shared A/B tiles with one mbarrier each, ``warpgroup_mma`` issued async
with one MMA in flight (``warpgroup_mma_wait(1)`` retires the previous one, whose stage then takes the load
``num_stages - 1`` steps ahead); one persistent program per SM over the tiles (block, n-tile), n-tiles of a block
adjacent; the (tile, K step) stream of a program is one loop, so loads run ahead across tiles. The epilogue converts
the accumulator to a row-major blocked layout (16-byte stores) and scatters rows to their slots.

``PINGPONG`` (:func:`_moe_gemm_pingpong`): the same tiles, ring and epilogue, warp-specialized into a 1-warp TMA
producer and two 4-warp consumers that take alternate tiles and run their main loops in turn, so one consumer's
epilogue overlaps the other's MMAs (CUTLASS's sm90 ping-pong schedule). The second GEMM's K is short (6-12 steps of
``BLOCK_K``), so its epilogue is a large part of each tile, which the one-partition kernel runs between main loops.
Compiled for sm90 and checked on the CPU; its GPU tests and timings are written (tests/test_triton_wgmma.py,
``benchmarks/gemm_profile.py`` ``gemm2.wgmma.pp_*``) but have not run yet.

A GPU with wgmma only (sm90: H100 / H200); Gluon has no CPU interpreter, so this module is checked on the CPU by
compiling it for sm90 and on a GPU against float64 (tests/test_triton_wgmma.py). Importing it imports
``triton.experimental.gluon`` (Triton 3.5 and later); the runner imports it at the core's construction when its tile
file sets ``WGMMA``.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from . import triton_moe_kernels as K

#: the weight modes it runs (:data:`~.triton_moe_kernels.W_MODES`: 16-bit, fp8 per expert, fp8 per output row)
W_MODES = (0, 1, 2)
_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}
#: ``PINGPONG``'s registers per thread (``setmaxnreg``, multiples of 8): each 4-warp consumer, the 1-warp producer
#: (2 x 128 x 232 + 32 x 40 = 60672 of the SM's 65536)
PP_CONSUMER_REGS = 232
PP_LOADER_REGS = 40


@gluon.constexpr_function
def _acc_layout(bits, block_n, num_warps):
    """The wgmma accumulator layout of a ``[BLOCK_M, block_n]`` tile: warps along M (16 rows each, a warpgroup per
    64 rows), instruction ``m16 x block_n x (256 / bits)``."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 256 // bits])


@gluon.jit
def _issue_load(j, pid, nprog, n_tiles, k_tiles, N, a_desc, b_desc, a_buf, b_buf, bar, block_expert_ptr, pred):
    """Step ``j`` of this program's (tile, K step) stream: the A tile at ``(block * BLOCK_M, k)`` and the weight tile
    at ``(e * N + n0, k)`` into one ring stage (``pred`` False: nothing)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    t = pid + (j // k_tiles) * nprog
    blk = t // n_tiles
    e = gl.maximum(gl.load(block_expert_ptr + blk, mask=pred, other=0), 0)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [blk * BM, (j % k_tiles) * BK], bar, a_buf, pred)
    tma.async_copy_global_to_shared(b_desc, [e * N + (t % n_tiles) * BN, (j % k_tiles) * BK], bar, b_buf, pred)


@gluon.jit
def _epilogue(acc, t, c_ptr, sorted_ptr, block_expert_ptr, a_amax_ptr, b_scale_ptr, bias_ptr, weight_ptr, num_slots,
              n_tiles, stride_cm, stride_sbe, stride_bias_e, C_BY_SLOT: gl.constexpr, W_MODE: gl.constexpr,
              A_SCALE: gl.constexpr, HAS_BIAS: gl.constexpr, MUL_WEIGHT: gl.constexpr, num_warps: gl.constexpr):
    """Tile ``t``: scales, bias, routing weight on the float32 accumulator, then the rows that hold a slot stored
    (module doc)."""
    BM: gl.constexpr = acc.type.shape[0]
    BN: gl.constexpr = acc.type.shape[1]
    ACC: gl.constexpr = acc.type.layout
    blk = t // n_tiles
    e = gl.load(block_expert_ptr + blk)
    ee = gl.maximum(e, 0).to(gl.int64)
    off_m = blk * BM
    off_n = (t % n_tiles) * BN
    rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, ACC))
    cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, ACC))
    if W_MODE != 0:
        if A_SCALE == 1:
            sa = gl.load(a_amax_ptr + rows) * (1.0 / 448.0)
        else:
            sa = gl.load(a_amax_ptr + rows * 0) * (1.0 / 448.0)
        if W_MODE == 1:
            sb = gl.load(b_scale_ptr + ee + cols * 0)
        else:
            sb = gl.load(b_scale_ptr + ee * stride_sbe + cols)
        acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
    if HAS_BIAS:
        acc = acc + gl.expand_dims(gl.load(bias_ptr + ee * stride_bias_e + cols), 0)
    if MUL_WEIGHT:
        slot_a = gl.load(sorted_ptr + rows)
        w = gl.load(weight_ptr + slot_a, mask=slot_a < num_slots, other=0.0)
        acc = acc * gl.expand_dims(w, 1)
    STORE: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    out = gl.convert_layout(acc.to(c_ptr.dtype.element_ty), STORE)
    srows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, STORE))
    scols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, STORE))
    slot = gl.load(sorted_ptr + srows)
    ok = (slot < num_slots) & (e >= 0)
    if C_BY_SLOT:
        crow = slot.to(gl.int64)
    else:
        crow = srows.to(gl.int64)
    ptrs = c_ptr + gl.expand_dims(crow * stride_cm, 1) + gl.expand_dims(scols, 0)
    gl.store(ptrs, out, mask=gl.expand_dims(ok, 1) & gl.expand_dims(scols >= 0, 0))


@gluon.jit(do_not_specialize=["num_slots", "N", "n_tiles", "k_tiles"])
def _moe_gemm_wgmma(a_desc, b_desc, c_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, a_amax_ptr, b_scale_ptr,
                    bias_ptr, weight_ptr, num_slots, N, n_tiles, k_tiles, stride_cm, stride_sbe, stride_bias_e,
                    STAGES: gl.constexpr, C_BY_SLOT: gl.constexpr, W_MODE: gl.constexpr, A_SCALE: gl.constexpr,
                    HAS_BIAS: gl.constexpr, MUL_WEIGHT: gl.constexpr, num_warps: gl.constexpr):
    """The persistent program ``pid``: tiles ``pid, pid + programs, ...`` of ``valid blocks x n_tiles`` (module doc);
    the valid blocks are read on the device (``num_rows // BLOCK_M``), so a CUDA graph replays it at any routing."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    dtype: gl.constexpr = a_desc.dtype
    ACC: gl.constexpr = _acc_layout(dtype.primitive_bitwidth, BN, num_warps)
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles = (gl.load(num_rows_ptr) // BM) * n_tiles
    total = (gl.maximum(tiles - pid + nprog - 1, 0) // nprog) * k_tiles
    for i in gl.static_range(STAGES - 1):
        _issue_load(i, pid, nprog, n_tiles, k_tiles, N, a_desc, b_desc, a_bufs.index(i), b_bufs.index(i),
                    bars.index(i), block_expert_ptr, i < total)
    acc = gl.zeros([BM, BN], gl.float32, layout=ACC)
    for j in range(total):
        st = j % STAGES
        kt = j % k_tiles
        mbarrier.wait(bars.index(st), (j // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(st), b_bufs.index(st).permute((1, 0)), acc, use_acc=kt > 0, is_async=True)
        acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(st), b_bufs.index(st)))
        nxt = j + STAGES - 1                  # step j - 1's MMA is retired: its stage takes step j + STAGES - 1
        ns = nxt % STAGES
        _issue_load(nxt, pid, nprog, n_tiles, k_tiles, N, a_desc, b_desc, a_bufs.index(ns), b_bufs.index(ns),
                    bars.index(ns), block_expert_ptr, nxt < total)
        if kt == k_tiles - 1:
            acc = warpgroup_mma_wait(0, deps=(acc,))
            _epilogue(acc, pid + (j // k_tiles) * nprog, c_ptr, sorted_ptr, block_expert_ptr, a_amax_ptr, b_scale_ptr,
                      bias_ptr, weight_ptr, num_slots, n_tiles, stride_cm, stride_sbe, stride_bias_e, C_BY_SLOT,
                      W_MODE, A_SCALE, HAS_BIAS, MUL_WEIGHT, num_warps)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def ws_ring(a_desc, b_desc, STAGES: gl.constexpr):
    """A warp-specialized kernel's shared ring: ``STAGES`` A tiles ``[BLOCK_M, BLOCK_K]`` and weight tiles ``[BLOCK_N,
    BLOCK_K]`` in the descriptors' NVMMA layouts, and a "ready" (TMA transaction) and an "empty" (stage released)
    mbarrier per stage, count 1, initialized. Returns ``(a_bufs, b_bufs, ready, empty)``."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def _pp_loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, block_expert_ptr, num_rows_ptr, N, n_tiles, k_tiles,
               STAGES: gl.constexpr):
    """``PINGPONG``'s 1-warp TMA producer: every (tile, K step) of the program's stream in order, each ring stage
    once its "empty" barrier says the MMA that read it is retired (a fresh barrier passes the first round)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles = (gl.load(num_rows_ptr) // BM) * n_tiles
    total = (gl.maximum(tiles - pid + nprog - 1, 0) // nprog) * k_tiles
    for j in range(total):
        st = j % STAGES
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)
        _issue_load(j, pid, nprog, n_tiles, k_tiles, N, a_desc, b_desc, a_bufs.index(st), b_bufs.index(st),
                    ready.index(st), block_expert_ptr, True)


@gluon.jit
def _pp_consumer(a_bufs, b_bufs, ready, empty, order, c_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, a_amax_ptr,
                 b_scale_ptr, bias_ptr, weight_ptr, num_slots, n_tiles, k_tiles, stride_cm, stride_sbe, stride_bias_e,
                 ROLE: gl.constexpr, STAGES: gl.constexpr, C_BY_SLOT: gl.constexpr, W_MODE: gl.constexpr,
                 A_SCALE: gl.constexpr, HAS_BIAS: gl.constexpr, MUL_WEIGHT: gl.constexpr, NUM_WARPS: gl.constexpr):
    """One of ``PINGPONG``'s two consumer warpgroups: the program's tiles ``ROLE, ROLE + 2, ...`` (its main loop over
    the ring's stages in stream order, then the epilogue, which runs while the other consumer's main loop runs).

    The main loops take turns (``order``: consumer ``c`` arrives on ``order[1 - c]`` when its tile's MMAs are done and
    waits on ``order[c]`` before its next tile's): without the turn a consumer would wait on a stage's "ready"
    barrier for a step a whole ring ahead of the phase the barrier is in, and an mbarrier's parity wait cannot tell
    that phase from the one before it (it would pass on a stage not yet loaded)."""
    BM: gl.constexpr = a_bufs.type.shape[1]
    BN: gl.constexpr = b_bufs.type.shape[1]
    ACC: gl.constexpr = _acc_layout(a_bufs.type.element_ty.primitive_bitwidth, BN, NUM_WARPS)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles = (gl.load(num_rows_ptr) // BM) * n_tiles
    my = gl.maximum(tiles - pid + nprog - 1, 0) // nprog
    for i in range(ROLE, my, 2):
        base = i * k_tiles
        r = i // 2                            # this consumer's r-th tile; the other's previous one is tile i - 1
        if i > 0:
            mbarrier.wait(order.index(ROLE), (r - 1 + ROLE) & 1)
        acc = gl.zeros([BM, BN], gl.float32, layout=ACC)
        for kt in range(k_tiles):
            j = base + kt
            st = j % STAGES
            mbarrier.wait(ready.index(st), (j // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(st), b_bufs.index(st).permute((1, 0)), acc, use_acc=kt > 0,
                                is_async=True)
            acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(st), b_bufs.index(st)))
            gl.thread_barrier()               # every warp retired step j - 1 before one thread releases its stage
            mbarrier.arrive(empty.index((j + STAGES - 1) % STAGES), pred=kt > 0)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        gl.thread_barrier()
        mbarrier.arrive(empty.index((base + k_tiles - 1) % STAGES))
        mbarrier.arrive(order.index(1 - ROLE))    # the other consumer's next main loop may start
        _epilogue(acc, pid + i * nprog, c_ptr, sorted_ptr, block_expert_ptr, a_amax_ptr, b_scale_ptr, bias_ptr,
                  weight_ptr, num_slots, n_tiles, stride_cm, stride_sbe, stride_bias_e, C_BY_SLOT, W_MODE, A_SCALE,
                  HAS_BIAS, MUL_WEIGHT, NUM_WARPS)


@gluon.jit(do_not_specialize=["num_slots", "N", "n_tiles", "k_tiles"])
def _moe_gemm_pingpong(a_desc, b_desc, c_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, a_amax_ptr, b_scale_ptr,
                       bias_ptr, weight_ptr, num_slots, N, n_tiles, k_tiles, stride_cm, stride_sbe, stride_bias_e,
                       STAGES: gl.constexpr, C_BY_SLOT: gl.constexpr, W_MODE: gl.constexpr, A_SCALE: gl.constexpr,
                       HAS_BIAS: gl.constexpr, MUL_WEIGHT: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                       LOADER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``PINGPONG``: the persistent program of :func:`_moe_gemm_wgmma`'s tiles and epilogue, warp-specialized into a
    1-warp TMA producer and two ``num_warps``-warp consumers taking alternate tiles (the ping-pong schedule of
    CUTLASS's sm90 kernels): one consumer's epilogue (scales, bias, weight, the scatter by slot) overlaps the other's
    MMAs, which the one-partition kernel serializes, and the second GEMM's short K (6-12 steps) makes the epilogue a
    large part of each tile."""
    a_bufs, b_bufs, ready, empty = ws_ring(a_desc, b_desc, STAGES)
    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(order.index(i), count=1)
    gl.warp_specialize([
        (_pp_consumer, (a_bufs, b_bufs, ready, empty, order, c_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, a_amax_ptr,
                        b_scale_ptr, bias_ptr, weight_ptr, num_slots, n_tiles, k_tiles, stride_cm, stride_sbe,
                        stride_bias_e, 0, STAGES, C_BY_SLOT, W_MODE, A_SCALE, HAS_BIAS, MUL_WEIGHT, num_warps)),
        (_pp_consumer, (a_bufs, b_bufs, ready, empty, order, c_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, a_amax_ptr,
                        b_scale_ptr, bias_ptr, weight_ptr, num_slots, n_tiles, k_tiles, stride_cm, stride_sbe,
                        stride_bias_e, 1, STAGES, C_BY_SLOT, W_MODE, A_SCALE, HAS_BIAS, MUL_WEIGHT, num_warps)),
        (_pp_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, block_expert_ptr, num_rows_ptr, N, n_tiles,
                      k_tiles, STAGES)),
    ], [num_warps, 1], [CONSUMER_REGS, LOADER_REGS])


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def launch_args(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, align: K.Alignment, *, n_out: int, by_slot: bool,
                w_mode: int, a_amax: torch.Tensor | None, a_scale_mode: int, b_scale: torch.Tensor | None,
                bias: torch.Tensor | None, weight: torch.Tensor | None, config: dict, programs: int) -> tuple:
    """``(args, constexprs)`` of one launch of :func:`_moe_gemm_wgmma` (:func:`moe_gemm_wgmma`'s operands)."""
    e, n, k = b.shape
    bn, bk = config["BLOCK_N"], config["BLOCK_K"]
    gdt = _GL_DTYPE[a.dtype]
    la = gl.NVMMASharedLayout.get_default_for([align.block_m, bk], gdt)
    lb = gl.NVMMASharedLayout.get_default_for([bn, bk], gdt)
    ad = TensorDescriptor.from_tensor(a, [align.block_m, bk], la)
    bd = TensorDescriptor.from_tensor(b.reshape(e * n, k), [bn, bk], lb)
    dummy = align.num_rows
    sb = b_scale if b_scale is not None else dummy
    args = (ad, bd, c, align.sorted_slots, align.block_expert, align.num_rows,
            a_amax if a_amax is not None else dummy, sb, bias if bias is not None else dummy,
            weight if weight is not None else dummy, align.num_slots, n, n_out // bn, k // bk, c.stride(0),
            b_scale.stride(0) if b_scale is not None and b_scale.dim() == 2 else 0,
            bias.stride(0) if bias is not None else 0)
    consts = dict(STAGES=config["num_stages"], C_BY_SLOT=by_slot, W_MODE=w_mode, A_SCALE=a_scale_mode,
                  HAS_BIAS=bias is not None, MUL_WEIGHT=weight is not None, num_warps=config["num_warps"])
    if config.get("PINGPONG"):
        consts.update(CONSUMER_REGS=PP_CONSUMER_REGS, LOADER_REGS=PP_LOADER_REGS)
    return args, consts


def kernel(config: dict):
    """The Gluon kernel a ``WGMMA`` config launches: :func:`_moe_gemm_pingpong` with ``PINGPONG``, else
    :func:`_moe_gemm_wgmma`."""
    return _moe_gemm_pingpong if config.get("PINGPONG") else _moe_gemm_wgmma


def moe_gemm_wgmma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, align: K.Alignment, *, n_out: int, by_slot: bool,
                   w_mode: int, a_amax: torch.Tensor | None = None, a_scale_mode: int = 0,
                   b_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   weight: torch.Tensor | None = None, config: dict, warmup: bool = False) -> torch.Tensor:
    """Launch the second GEMM as :func:`_moe_gemm_wgmma` (module doc) with one persistent program per SM; returns ``c``.

    ``a [align.rows, K]`` contiguous, the sorted rows: bf16 / fp16 (weight mode 0, the weights' dtype) or e4m3
    (fp8_tensor / fp8_channel, quantized by :func:`~.triton_moe_kernels.row_quant` from ``a_amax``: ``a_scale_mode``
    1 per sorted row, 2 one for all); ``b [E, n_out, K]`` contiguous, the same dtype; ``b_scale`` float32 ``[E]``
    (weight mode 1) or ``[E, n_out]`` (2); ``bias [E, n_out]`` float32, added before the routing weight; ``weight
    [S]`` float32 per slot; ``c [S or align.rows, n_out]`` bf16 or fp16 with unit stride along N, row ``slot``
    (``by_slot``) or the sorted row. ``config``: ``BLOCK_N``, ``BLOCK_K``, ``num_warps``, ``num_stages``
    (:func:`~.triton_moe_kernels.wgmma_check`); ``warmup``: compile without running. Raises ValueError for a GPU other
    than sm90, a config ``wgmma_check`` refuses, or operands of other dtypes, shapes or strides."""
    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device) != (9, 0):
        raise ValueError(f"WGMMA (Hopper warpgroup MMA) runs on sm90 GPUs only, not {a.device}"
                         + (f" (compute capability {torch.cuda.get_device_capability(a.device)})"
                            if a.device.type == "cuda" else ""))
    e, n, k = b.shape
    if w_mode not in W_MODES:
        raise ValueError(f"WGMMA runs 16-bit and per-tensor / per-channel FP8 weights (weight modes {W_MODES}), not "
                         f"weight mode {w_mode}")
    fmt = {1: "fp8_tensor", 2: "fp8_channel"}.get(w_mode, "fp16" if a.dtype == torch.float16 else "bf16")
    K.wgmma_check(config, block_m=align.block_m, fmt=fmt, n_out=n_out, k=k)
    fp8 = w_mode in (1, 2)
    want = (torch.float8_e4m3fn,) if fp8 else (torch.bfloat16, torch.float16)
    if a.dtype not in want or b.dtype != a.dtype or c.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"WGMMA reads A and the weights in one dtype ({' or '.join(map(str, want))}: fp8 layers need "
                         f"PREQUANT) and writes bf16 / fp16: got A {a.dtype}, weights {b.dtype}, C {c.dtype}")
    if n != n_out or a.shape != (align.rows, k) or not (a.is_contiguous() and b.is_contiguous()) or c.stride(1) != 1:
        raise ValueError(f"WGMMA operands: A {tuple(a.shape)} (want ({align.rows}, {k}) contiguous), weights "
                         f"{tuple(b.shape)} (want n_out {n_out} rows, contiguous), C strides {c.stride()}")
    if fp8 and (a_amax is None or b_scale is None or a_scale_mode not in (1, 2)):
        raise ValueError("WGMMA on FP8 needs a_amax (a_scale_mode 1 per row or 2 one) and the weight scales")
    if fp8 and b_scale is not None and b_scale.dim() != (1 if w_mode == 1 else 2):
        raise ValueError(f"WGMMA: weight mode {w_mode} takes b_scale of {1 if w_mode == 1 else 2} dimensions, got "
                         f"{tuple(b_scale.shape)}")
    programs = _sm_count(a.device.index if a.device.index is not None else torch.cuda.current_device())
    args, consts = launch_args(a, b, c, align, n_out=n_out, by_slot=by_slot, w_mode=w_mode, a_amax=a_amax,
                               a_scale_mode=a_scale_mode if fp8 else 0, b_scale=b_scale if fp8 else None, bias=bias,
                               weight=weight, config=config, programs=programs)
    fn = kernel(config)
    if warmup:
        fn.warmup(*args, grid=(programs,), **consts)
    else:
        fn[(programs,)](*args, **consts)
    return c

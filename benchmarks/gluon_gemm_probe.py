"""A Gluon Hopper grouped GEMM over the MoE sort's padded blocks: what a TMA-fed, wgmma, persistent (and, where it
compiles, warp-specialized) GEMM does at the triton runner's large-token shapes (issue 26).

    python benchmarks/gluon_gemm_probe.py                      # sm90 compile here (no GPU): registers, spills, wgmma, TMA
    python benchmarks/gluon_gemm_probe.py --gpu --out DIR       # on one H200: against float64, then CUDA-graph timed

Why (benchmarks/README.md, "PERSISTENT tiles" to the end of issue 26's sections): the runner's ``tl`` GEMMs reach
about 0.63 of the floor at 2048-8192 tokens on an H200 and what is left is the GEMMs' own rate; the ``tl`` language
does not express a warp-specialized, TMA-fed persistent Hopper GEMM on sm90, Gluon does.

What it computes: ``C[r, n] = sum_k A[r, k] * B[e_b, n, k]`` (fp8_channel: times ``a_scale[r] * b_scale[e_b, n]``) for
every row ``r`` of each valid ``BLOCK_M``-row block ``b`` of the sort (``e_b = block_expert[b]``; blocks with
``e_b < 0`` are computed on expert 0's weights and not stored), ``C`` bf16 ``[M_pad, N]``. ``A`` is already in the
sort's padded slot order (``A_sorted``: row ``r`` is token ``sorted_slots[r] // top_k`` for the first GEMM; built by
a gather here and timed), so every A tile is a contiguous ``[BLOCK_M, BLOCK_K]`` TMA box; ``B [E, N, K]`` (the
runner's layout, K contiguous) is read through one 2-D descriptor over ``[E * N, K]`` at row ``e * N + n0``. The
number of valid blocks is read on the device (``num_rows // BLOCK_M``): no host synchronisation. The first GEMM is
the plain ``2 * I`` gate+up product (no activation: the runner fuses SiLU into its epilogue; this probe measures the
GEMM), the second writes sorted rows (no routing weight, no scatter).

The kernel (:func:`_grouped_gemm`, :func:`_grouped_gemm_ws`): ``BLOCK_M`` 128 (``num_warps`` 8: two consumer
warpgroups of 64 rows; or 4: one), ``BLOCK_N`` 128 or 256, ``BLOCK_K`` 64 (bf16) / 128 (fp8), a shared-memory ring
of ``STAGES`` A/B tiles with one "ready" mbarrier each (TMA transaction count), ``warpgroup_mma`` issued async with
``warpgroup_mma_wait(1)`` keeping one MMA in flight (the wait retires the previous one, whose stage is then free).
Persistent: ``grid = number of SMs`` programs, program ``p`` takes tiles ``p, p + grid, ...`` of the tile order
``t = block * n_tiles + n_tile`` (the n-tiles of one block adjacent, so the A tile is shared in L2, and the blocks of
one expert adjacent, so its weight tiles are too: the ~grid tiles in flight span a few experts). The (tile, K step)
stream of a program is one flat loop, so the TMA loads run ahead across tile boundaries.

- ``WS`` False: one partition, the loads issued ``STAGES - 1`` steps ahead by the MMA warps (the load of step
  ``j + STAGES - 1`` goes into the stage step ``j - 1`` used, right after ``warpgroup_mma_wait(1)`` retired it).
- ``WS`` True: ``gl.warp_specialize``: a 1-warp TMA producer partition (waits on an "empty" mbarrier per stage)
  and the MMA + epilogue in the default partition, which arrives on the previous stage's "empty" barrier after
  ``warpgroup_mma_wait(1)`` (a ``gl.thread_barrier`` first when two warpgroups consume: the arrive is one thread's).

Epilogue: float32 accumulator, the fp8 scales, cast to bf16, then through a shared buffer of ``BLOCK_N / EPI_SPLIT``
columns and a TMA store left in flight over the next tile's main loop (waited for before the buffer is rewritten);
``EPI_SPLIT`` 2 (BLOCK_N 256 at 4 stages: 4 x 48 KB of ring leave room for a ``[128, 128]`` buffer only) stores the
two column halves one after the other.

A probe, not a runner path: nothing in ``backends/`` calls it. ``--gpu``: for Qwen3-30B-A3B and Qwen3-235B-A22B,
bf16 and fp8_channel, 2048 and 8192 tokens, random routing (softmax top-k of random logits, a fresh seed printed and
recorded), both GEMMs: the project's sort (``moe_align`` at ``BLOCK_M`` 128), the gather, each config of
:data:`CONFIGS` checked against a float64 reference on sampled valid blocks (max |C - ref| / max |ref| below
:data:`TOL`: 1e-2 bf16, 2e-2 fp8) and timed by CUDA-graph replay (``tune_triton_moe.Timer``), beside the runner's
own ``moe_gemm`` with its shipped tile configs (``backends/triton_configs/``; as it runs in the layer: the first with
the gather and SiLU fused, the second writing by slot with the routing weight, and ``gemm2.sorted``). TFLOP/s count
the valid rows only (``2 * T * top_k * N * K``). Every variant runs in try/except; errors land in the JSON.
fp8_channel: the hidden states quantized per token here (amax / 448, e4m3) and gathered with their scales; the second
GEMM's A is random rows (quantized per row for fp8) already in sorted order; the wgmma accumulates fp8 products with
Triton's sm90 default (``max_num_imprecise_acc`` unlimited, as ``tl.dot``), the scales in the float32 epilogue.

How ``--gpu`` runs: each layer x format in a child process (``--gpu-point``) that rewrites its points' JSON files
(``DIR/gluon_gemm_<layer>_<format>_<tokens>.json``) after every step, with ``in_progress`` naming the step; the parent
kills a child after ``--group-timeout-s`` and, if it was in a config's launch (``...:run``, not ``...:compile``),
records that config as hung and leaves it out of the later children; no child starts past ``--budget-s`` (the whole
run stays under 4 minutes); then the summary table and ``DIR/gluon_gemm_all.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# the accumulator layout and the ring's load step are the runner's (its WGMMA second GEMM)
# the WS form's 1-warp TMA producer is the backend's PINGPONG producer (the same stream of loads)
from moe_select.backends.triton_moe_wgmma import _acc_layout, _issue_load  # noqa: E402
from moe_select.backends.triton_moe_wgmma import _pp_loader as _ws_loader, ws_ring  # noqa: E402

BLOCK_M = 128
#: (name, BLOCK_N, STAGES, WS, EPI_SPLIT, num_warps): what --gpu times and the CPU test compiles. EPI_SPLIT: the
#: epilogue's shared buffer holds ``BLOCK_N / EPI_SPLIT`` columns (BLOCK_N 256 at 4 stages: 4 x 48 KB of ring + 32 KB)
CONFIGS = (
    ("n128_s3", 128, 3, False, 1, 8),
    ("n128_s4", 128, 4, False, 1, 8),
    ("n256_s3", 256, 3, False, 1, 8),
    ("n256_s4", 256, 4, False, 2, 8),
    ("n128_s3_ws", 128, 3, True, 1, 8),
    ("n128_s4_ws", 128, 4, True, 1, 8),
    ("n256_s3_ws", 256, 3, True, 1, 8),
    ("n256_s4_ws", 256, 4, True, 2, 8),
    ("n128_s4_ws_w4", 128, 4, True, 1, 4),
)
#: registers of the 1-warp TMA producer partition (setmaxnreg: a multiple of 8, at least 24)
LOADER_REGS = 40
#: (E, top_k, hidden, I) of the layers --gpu runs
MODELS = {"Qwen3-30B-A3B": (128, 8, 2048, 768), "Qwen3-235B-A22B": (128, 8, 4096, 1536)}
FORMATS = ("bf16", "fp8_channel")
TOKENS = (2048, 8192)
#: pass bound of max |C - ref| / max |ref| on the checked rows
TOL = {"bf16": 1e-2, "fp8_channel": 2e-2}


def block_k(fmt: str) -> int:
    return 128 if fmt == "fp8_channel" else 64


def shapes(model: str) -> list[tuple[str, int, int]]:
    """(gemm, N, K) of one layer: the first GEMM (gate+up, ``N = 2 I``, ``K = hidden``), the second (``N = hidden``,
    ``K = I``)."""
    _, _, h, i = MODELS[model]
    return [("gemm1", 2 * i, h), ("gemm2", h, i)]


# --- the kernel -------------------------------------------------------------------------------------------------


@gluon.jit
def _my_tiles(num_rows_ptr, n_tiles, BM: gl.constexpr):
    """(program, programs, this program's tile count): tiles ``pid, pid + nprog, ...`` of ``valid blocks x n_tiles``."""
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    total = (gl.load(num_rows_ptr) // BM) * n_tiles
    return pid, nprog, gl.maximum(total - pid + nprog - 1, 0) // nprog


@gluon.jit
def _store_part(part, c_desc, c_smem, off_m, off_n, e):
    """One ``[BM, BN / EPI_SPLIT]`` part of the bf16 tile through the shared buffer and a TMA store (left in flight;
    the previous store's read of the buffer is waited for first)."""
    tma.store_wait(0)
    c_smem.store(part)
    fence_async_shared()
    if e >= 0:
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)


@gluon.jit
def _epilogue(acc, t, c_desc, c_smem, a_scale_ptr, b_scale_ptr, block_expert_ptr, N, n_tiles,
              SCALED: gl.constexpr, EPI_SPLIT: gl.constexpr):
    """Tile ``t``'s float32 accumulator -> (scales) -> bf16 -> C through TMA stores of ``EPI_SPLIT`` column parts
    (module doc); blocks of expert -1 are not stored."""
    BM: gl.constexpr = acc.type.shape[0]
    BN: gl.constexpr = acc.type.shape[1]
    layout: gl.constexpr = acc.type.layout
    blk = t // n_tiles
    e = gl.load(block_expert_ptr + blk)
    off_m = blk * BM
    off_n = (t % n_tiles) * BN
    if SCALED:
        rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        sa = gl.load(a_scale_ptr + rows)
        sb = gl.load(b_scale_ptr + gl.maximum(e, 0).to(gl.int64) * N + cols)
        acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
    out = acc.to(gl.bfloat16)
    if EPI_SPLIT == 1:
        _store_part(out, c_desc, c_smem, off_m, off_n, e)
    else:
        # columns [0, BN/2) and [BN/2, BN): column bit log2(BN/2) is a register bit of the wgmma layout
        lo, hi = out.reshape([BM, 2, BN // 2]).permute((0, 2, 1)).split()
        _store_part(lo, c_desc, c_smem, off_m, off_n, e)
        _store_part(hi, c_desc, c_smem, off_m, off_n + BN // 2, e)


@gluon.jit(do_not_specialize=["N", "n_tiles", "k_tiles"])
def _grouped_gemm(a_desc, b_desc, c_desc, a_scale_ptr, b_scale_ptr, block_expert_ptr, num_rows_ptr,
                  N, n_tiles, k_tiles, STAGES: gl.constexpr, SCALED: gl.constexpr, EPI_SPLIT: gl.constexpr,
                  num_warps: gl.constexpr):
    """The single-partition software-pipelined persistent kernel (module doc, ``WS`` False)."""
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
    c_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, BN // EPI_SPLIT], c_desc.layout)
    pid, nprog, my = _my_tiles(num_rows_ptr, n_tiles, BM)
    total = my * k_tiles
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
        # the MMA of step j - 1 is retired: its stage takes step j + STAGES - 1
        nxt = j + STAGES - 1
        ns = nxt % STAGES
        _issue_load(nxt, pid, nprog, n_tiles, k_tiles, N, a_desc, b_desc, a_bufs.index(ns), b_bufs.index(ns),
                    bars.index(ns), block_expert_ptr, nxt < total)
        if kt == k_tiles - 1:
            acc = warpgroup_mma_wait(0, deps=(acc,))
            _epilogue(acc, pid + (j // k_tiles) * nprog, c_desc, c_smem, a_scale_ptr, b_scale_ptr,
                      block_expert_ptr, N, n_tiles, SCALED, EPI_SPLIT)
    tma.store_wait(0)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _ws_mma(a_bufs, b_bufs, ready, empty, c_desc, c_smem, a_scale_ptr, b_scale_ptr, block_expert_ptr, num_rows_ptr,
            N, n_tiles, k_tiles, STAGES: gl.constexpr, SCALED: gl.constexpr, EPI_SPLIT: gl.constexpr,
            NUM_WARPS: gl.constexpr):
    """The default partition: wgmma over the ready stages, releasing each stage one step later, and the epilogue."""
    BM: gl.constexpr = a_bufs.type.shape[1]
    BN: gl.constexpr = b_bufs.type.shape[1]
    ACC: gl.constexpr = _acc_layout(a_bufs.type.element_ty.primitive_bitwidth, BN, NUM_WARPS)
    pid, nprog, my = _my_tiles(num_rows_ptr, n_tiles, BM)
    acc = gl.zeros([BM, BN], gl.float32, layout=ACC)
    for j in range(my * k_tiles):
        st = j % STAGES
        kt = j % k_tiles
        mbarrier.wait(ready.index(st), (j // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(st), b_bufs.index(st).permute((1, 0)), acc, use_acc=kt > 0, is_async=True)
        acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(st), b_bufs.index(st)))
        if NUM_WARPS > 4:
            gl.thread_barrier()               # both warpgroups retired step j - 1 before its stage is released
        mbarrier.arrive(empty.index((j + STAGES - 1) % STAGES), pred=j > 0)
        if kt == k_tiles - 1:
            acc = warpgroup_mma_wait(0, deps=(acc,))
            _epilogue(acc, pid + (j // k_tiles) * nprog, c_desc, c_smem, a_scale_ptr, b_scale_ptr,
                      block_expert_ptr, N, n_tiles, SCALED, EPI_SPLIT)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["N", "n_tiles", "k_tiles"])
def _grouped_gemm_ws(a_desc, b_desc, c_desc, a_scale_ptr, b_scale_ptr, block_expert_ptr, num_rows_ptr,
                     N, n_tiles, k_tiles, STAGES: gl.constexpr, SCALED: gl.constexpr, EPI_SPLIT: gl.constexpr,
                     LOADER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """The warp-specialized persistent kernel (module doc, ``WS`` True)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = ws_ring(a_desc, b_desc, STAGES)
    c_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, BN // EPI_SPLIT], c_desc.layout)
    gl.warp_specialize([
        (_ws_mma, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, a_scale_ptr, b_scale_ptr, block_expert_ptr,
                   num_rows_ptr, N, n_tiles, k_tiles, STAGES, SCALED, EPI_SPLIT, num_warps)),
        (_ws_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, block_expert_ptr, num_rows_ptr, N, n_tiles,
                      k_tiles, STAGES)),
    ], [1], [LOADER_REGS])


# --- launching ----------------------------------------------------------------------------------------------------

_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float8_e4m3fn: gl.float8e4nv}


def config(name: str) -> dict:
    for c in CONFIGS:
        if c[0] == name:
            return dict(zip(("name", "BLOCK_N", "STAGES", "WS", "EPI_SPLIT", "num_warps"), c))
    raise KeyError(name)


def descriptors(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bn: int, bk: int, cn: int) -> tuple:
    """TMA descriptors: A ``[M_pad, K]`` box ``[128, bk]``, B viewed ``[E * N, K]`` box ``[bn, bk]``, C ``[M_pad, N]``
    box ``[128, cn]``; NVMMA shared layouts with the widest swizzle (128 bytes at these boxes)."""
    e, n, k = b.shape
    gdt = _GL_DTYPE[a.dtype]
    la = gl.NVMMASharedLayout.get_default_for([BLOCK_M, bk], gdt)
    lb = gl.NVMMASharedLayout.get_default_for([bn, bk], gdt)
    lc = gl.NVMMASharedLayout.get_default_for([BLOCK_M, cn], gl.bfloat16)
    return (TensorDescriptor.from_tensor(a, [BLOCK_M, bk], la),
            TensorDescriptor.from_tensor(b.reshape(e * n, k), [bn, bk], lb),
            TensorDescriptor.from_tensor(c, [BLOCK_M, cn], lc))


def check_operands(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, cfg: dict) -> None:
    """ValueError for what the kernel cannot read: dtypes, unit K stride, K a multiple of BLOCK_K, N of BLOCK_N, 16-byte
    aligned rows (TMA), M_pad a multiple of 128."""
    bk = block_k("fp8_channel" if a.dtype == torch.float8_e4m3fn else "bf16")
    e, n, k = b.shape
    if a.dtype not in _GL_DTYPE or b.dtype != a.dtype or c.dtype != torch.bfloat16:
        raise ValueError(f"A and B bf16 or float8_e4m3fn alike, C bf16: got {a.dtype}, {b.dtype}, {c.dtype}")
    if not (a.is_contiguous() and b.is_contiguous() and c.is_contiguous()):
        raise ValueError("A, B and C must be contiguous")
    if a.shape[1] != k or k % bk or n % cfg["BLOCK_N"] or a.shape[0] % BLOCK_M or tuple(c.shape) != (a.shape[0], n):
        raise ValueError(f"shapes A {tuple(a.shape)} B {tuple(b.shape)} C {tuple(c.shape)} against BLOCK_K {bk}, "
                         f"BLOCK_N {cfg['BLOCK_N']}, BLOCK_M {BLOCK_M}")
    if (k * a.element_size()) % 16 or (n * 2) % 16:
        raise ValueError("TMA needs 16-byte aligned rows")


def launch_args(a, b, c, a_scale, b_scale, block_expert, num_rows, cfg: dict, programs: int) -> tuple:
    """(kernel, grid, args, kwargs) of one launch (module doc); ``a_scale`` / ``b_scale`` None for bf16."""
    e, n, k = b.shape
    bk = block_k("fp8_channel" if a.dtype == torch.float8_e4m3fn else "bf16")
    bn = cfg["BLOCK_N"]
    ad, bd, cd = descriptors(a, b, c, bn, bk, bn // cfg["EPI_SPLIT"])
    scaled = a_scale is not None
    sa = a_scale if scaled else num_rows
    sb = b_scale if scaled else num_rows
    args = (ad, bd, cd, sa, sb, block_expert, num_rows, n, n // bn, k // bk)
    kw = dict(STAGES=cfg["STAGES"], SCALED=scaled, EPI_SPLIT=cfg["EPI_SPLIT"], num_warps=cfg["num_warps"])
    if cfg["WS"]:
        kw["LOADER_REGS"] = LOADER_REGS
        return _grouped_gemm_ws, (programs,), args, kw
    return _grouped_gemm, (programs,), args, kw


def grouped_gemm(a, b, c, a_scale, b_scale, block_expert, num_rows, cfg: dict, programs: int,
                 warmup: bool = False) -> None:
    """``C = A_sorted x B[block_expert]^T`` (module doc) with ``programs`` persistent programs (``warmup``: compile
    only)."""
    check_operands(a, b, c, cfg)
    kernel, grid, args, kw = launch_args(a, b, c, a_scale, b_scale, block_expert, num_rows, cfg, programs)
    if warmup:
        kernel.warmup(*args, grid=grid, **kw)
    else:
        kernel[grid](*args, **kw)


# --- CPU: the sm90 compile ------------------------------------------------------------------------------------------

#: the most dynamic shared memory one CTA may opt in to on sm90 (227 KB)
SMEM_LIMIT = 232448


def _metadata(kernel, args: tuple, kwargs: dict):
    """The compiled kernel's metadata (shared bytes, TMA block sizes) for sm90: the binder of
    ``sass_loop.compile_sm90``, Triton's cache makes the second compile free."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    kwargs = {**kwargs, "debug": False}
    bound, spec, options = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, spec, options)
    return triton.compile(GluonASTSource(kernel, signature, constexprs, attrs), target=target,
                          options=options.__dict__).metadata


def compile_point(cfg: dict, fmt: str, n: int, k: int, e: int = 128, m_pad: int = 65536 + 128 * 127) -> dict:
    """sm90 compile (``sass_loop.compile_sm90``, no GPU) of one config at one GEMM shape, meta tensors: registers and
    spilled bytes (ptxas -v), ``wgmma.mma_async`` / TMA loads / TMA stores / ``setmaxnreg`` in the PTX, HGMMA (bf16) or
    QGMMA (fp8), UTMALDG, UTMASTG in the SASS, shared bytes and warps."""
    import os
    import subprocess
    import tempfile

    from sass_loop import _tools, compile_sm90

    meta = torch.device("meta")
    dt = torch.float8_e4m3fn if fmt == "fp8_channel" else torch.bfloat16
    a = torch.empty(m_pad, k, dtype=dt, device=meta)
    b = torch.empty(e, n, k, dtype=dt, device=meta)
    c = torch.empty(m_pad, n, dtype=torch.bfloat16, device=meta)
    be = torch.empty(m_pad // BLOCK_M, dtype=torch.int32, device=meta)
    nr = torch.empty(1, dtype=torch.int32, device=meta)
    sa = torch.empty(m_pad, dtype=torch.float32, device=meta) if fmt == "fp8_channel" else None
    sb = torch.empty(e, n, dtype=torch.float32, device=meta) if fmt == "fp8_channel" else None
    check_operands(a, b, c, cfg)
    kernel, _, args, kw = launch_args(a, b, c, sa, sb, be, nr, cfg, 132)
    r = compile_sm90(kernel, args, kw)
    md = _metadata(kernel, args, kw)
    ptx = r["ptx"]
    _, nvdisasm = _tools()
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(r["cubin"])
    sass = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return {"config": cfg["name"], "format": fmt, "N": n, "K": k, "regs": r["regs"], "spill": r["spill"],
            "wgmma": ptx.count("wgmma.mma_async"), "tma_load": ptx.count("cp.async.bulk.tensor.2d.shared"),
            "tma_store": ptx.count("cp.async.bulk.tensor.2d.global"), "setmaxnreg": ptx.count("setmaxnreg"),
            "hgmma_sass": sass.count("HGMMA") + sass.count("QGMMA"), "utmaldg_sass": sass.count("UTMALDG"),
            "utmastg_sass": sass.count("UTMASTG"), "shared": md.shared, "num_warps": md.num_warps}


def compile_all(models=tuple(MODELS), formats=FORMATS, configs=CONFIGS) -> list[dict]:
    out = []
    for model in models:
        for fmt in formats:
            for _, n, k in shapes(model):
                for c in configs:
                    out.append({"model": model, **compile_point(config(c[0]), fmt, n, k)})
    return out


# --- GPU ----------------------------------------------------------------------------------------------------------

def _err(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:600]


def reference_check(c: torch.Tensor, a, b, a_scale, b_scale, sorted_slots, block_expert, num_rows: int,
                    num_slots: int, n_random: int, gen: torch.Generator) -> dict:
    """float64 ``A x B[e]^T`` (scaled) on the first and the last valid block and ``n_random`` random ones, over their
    rows that hold a slot: ``{"max_abs_err", "max_abs_ref", "rel_err", "blocks", "nan_rows"}`` (rel_err = max|C - ref|
    / max|ref|; a NaN in C, which is NaN-filled before the launch, makes it NaN: not below any tolerance; nan_rows:
    rows below ``num_rows``, every block, with a NaN left: tiles never stored)."""
    nb = num_rows // BLOCK_M
    pick = sorted({0, nb - 1} | set(torch.randint(0, nb, (n_random,), generator=gen).tolist()))
    be = block_expert[:nb].tolist()
    worst_err, worst_ref = 0.0, 0.0
    for blk in pick:
        rows = slice(blk * BLOCK_M, (blk + 1) * BLOCK_M)
        valid = sorted_slots[rows] < num_slots
        e = be[blk]
        aa = a[rows].float().double()
        if a_scale is not None:
            aa = aa * a_scale[rows].double()[:, None]
        bb = b[e].float().double()
        if b_scale is not None:
            bb = bb * b_scale[e].double()[:, None]
        ref = (aa @ bb.t())[valid]
        got = c[rows][valid].double()
        if ref.numel():
            d = (got - ref).abs().max()
            worst_err = float("nan") if torch.isnan(d) else max(worst_err, float(d))
            worst_ref = max(worst_ref, float(ref.abs().max()))
    return {"max_abs_err": worst_err, "max_abs_ref": worst_ref, "rel_err": worst_err / max(worst_ref, 1e-30),
            "blocks": len(pick), "nan_rows": int(torch.isnan(c[:num_rows]).any(dim=1).sum())}


def quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row e4m3: (q, scale) with ``x ~ q * scale[:, None]``, scale = amax / 448."""
    s = (x.float().abs().amax(dim=1) / 448.0).clamp(min=1e-12)
    return (x.float() / s[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn).contiguous(), s.contiguous()


def _runner_times(bench, x, ids, tw, rcfg: dict, timer) -> dict:
    """The runner's ``moe_gemm`` launches of one forward (its tiles ``rcfg``), µs: ``gemm1`` (gather + SiLU fused),
    ``gemm2`` (by slot, routing weight), ``gemm2.sorted`` (sorted rows, no weight: benchmarks/gemm_profile.py's)."""
    from moe_select.backends import triton_moe_kernels as K
    from moe_select.backends.triton_moe import ForwardPass

    p = ForwardPass(bench.core, bench.weights, x, ids, tw, rcfg["BLOCK_M"])
    top_k, h = bench.k, bench.h
    p.gemm1(rcfg["gemm1"])
    out = {"gemm1": timer([lambda: p.gemm1(rcfg["gemm1"])]), "gemm2": timer([lambda: p.gemm2(rcfg["gemm2"])])}
    y_sorted = torch.empty(p.act.shape[0], h, dtype=torch.bfloat16, device=x.device)

    def g2_sorted():
        w = p.w
        return K.moe_gemm(p.act, w.w2, y_sorted, p.align, top_k=top_k, n_out=h, gather=False, by_slot=False,
                          w_mode=bench.core.w_mode, a_amax=p.act_scale, a_scale_mode=p.a_mode, b_scale=w.s2,
                          group_k=p.groups[1], group_n=p.groups[2], config=rcfg["gemm2"])
    out["gemm2.sorted"] = timer([g2_sorted])
    return out


def run_point(model: str, fmt: str, tokens: int, seed: int, configs, programs: int, save) -> dict:
    """One (layer, format, tokens) on the GPU: both GEMMs, each config checked and timed, the runner's moe_gemm;
    ``save(res)`` after each step (so a hang leaves what was done, and ``in_progress`` names the step)."""
    import tune_triton_moe as T
    from moe_select.backends import triton_moe_kernels as K

    dev = torch.device("cuda")
    timer = T.Timer(dev, timed=3)
    e, top_k, h, i = MODELS[model]
    s = tokens * top_k
    res: dict = {"model": model, "format": fmt, "tokens": tokens, "seed": seed, "BLOCK_M": BLOCK_M, "programs": programs,
                 "tolerance": TOL[fmt], "check": "max|C - ref| / max|ref| on sampled valid blocks, float64 reference",
                 "tflops_counts": "2 * tokens * top_k * N * K (valid rows only)", "gemms": {}, "errors": [],
                 "in_progress": "setup"}
    save(res)
    bench = T.Bench(model, T.MODELS[model], fmt, dev, T.BLOCK, seed=seed)
    x, ids, tw = bench.inputs(tokens, seed=seed + 1, n_sets=1)[0]
    gen = torch.Generator().manual_seed(seed + 2)
    # the runner's own GEMMs with its shipped tiles (as benchmarks/gemm_profile.py runs them)
    res["in_progress"] = "runner"
    save(res)
    runner: dict = {}
    try:
        res["runner_config"] = bench.core.config_for(tokens)
        runner = _runner_times(bench, x, ids, tw, res["runner_config"], timer)
    except Exception as exc:
        res["errors"].append(f"runner: {_err(exc)}")
    # the sort at BLOCK_M 128 and the gather that builds the first GEMM's A
    res["in_progress"] = "sort+gather"
    save(res)
    align = K.moe_align(ids, e, 0, BLOCK_M)
    num_rows = int(align.num_rows)            # a host copy for the check only (the kernel reads it on the device)
    res["rows"] = {"slots": s, "padded_rows_used": num_rows, "M_pad": align.rows, "valid_blocks": num_rows // BLOCK_M}
    if fmt == "fp8_channel":
        xq, xs = quant_rows(x)
    else:
        xq, xs = x.to(torch.bfloat16).contiguous(), None
    a1 = torch.empty(align.rows, h, dtype=xq.dtype, device=dev)
    a1s = torch.empty(align.rows, dtype=torch.float32, device=dev) if xs is not None else None
    xq8, a18 = (xq.view(torch.uint8), a1.view(torch.uint8)) if xq.dtype == torch.float8_e4m3fn else (xq, a1)

    def gather():
        idx = torch.div(align.sorted_slots.clamp(max=s - 1), top_k, rounding_mode="floor")
        torch.index_select(xq8, 0, idx, out=a18)
        if xs is not None:
            torch.index_select(xs, 0, idx, out=a1s)
    gather()
    try:
        res["gather_us"] = round(timer([gather]), 2)
    except Exception as exc:
        res["errors"].append(f"gather: {_err(exc)}")
    # the second GEMM's A: random intermediate rows, already in sorted order
    g2in = torch.randn(align.rows, i, device=dev) * 0.5
    a2, a2s = quant_rows(g2in) if fmt == "fp8_channel" else (g2in.to(torch.bfloat16).contiguous(), None)
    del g2in
    w = bench.weights
    fp8 = fmt == "fp8_channel"
    operands = {"gemm1": (a1, a1s, w.w13, w.s13 if fp8 else None), "gemm2": (a2, a2s, w.w2, w.s2 if fp8 else None)}
    for gname, n, k in shapes(model):
        a, a_s, b, b_s = operands[gname]
        if b_s is not None:
            b_s = b_s.reshape(e, n).float().contiguous()
        flops = 2.0 * s * n * k
        g: dict = {"N": n, "K": k, "flops_valid": flops, "configs": {}}
        for key, label in ((gname, "runner"), ("gemm2.sorted" if gname == "gemm2" else "", "runner_sorted")):
            if key in runner:
                g[label] = {"us": round(runner[key], 2), "tflops": round(flops / runner[key] / 1e6, 1)}
        res["gemms"][gname] = g
        c = torch.empty(align.rows, n, dtype=torch.bfloat16, device=dev)
        for cname, *_ in configs:
            cfg = config(cname)
            row: dict = {"config": cfg}
            g["configs"][cname] = row
            try:
                res["in_progress"] = f"{gname}:{cname}:compile"
                save(res)
                try:                          # compile apart from the run (a timeout here is no hang)
                    grouped_gemm(a, b, c, a_s, b_s, align.block_expert, align.num_rows, cfg, programs, warmup=True)
                except Exception as exc:      # the launch below compiles (and reports) instead
                    row["warmup_error"] = _err(exc)
                res["in_progress"] = f"{gname}:{cname}:run"
                save(res)
                c.fill_(float("nan"))
                grouped_gemm(a, b, c, a_s, b_s, align.block_expert, align.num_rows, cfg, programs)
                torch.cuda.synchronize()
                chk = reference_check(c, a, b, a_s, b_s, align.sorted_slots, align.block_expert, num_rows, s, 12, gen)
                row.update({k2: (float(f"{v:.4g}") if isinstance(v, float) else v) for k2, v in chk.items()})
                row["ok"] = bool(chk["rel_err"] < TOL[fmt] and chk["nan_rows"] == 0)
                us = timer([lambda a=a, b=b, c=c, a_s=a_s, b_s=b_s, cfg=cfg: grouped_gemm(
                    a, b, c, a_s, b_s, align.block_expert, align.num_rows, cfg, programs)])
                row.update({"us": round(us, 2), "tflops": round(flops / us / 1e6, 1)})
            except Exception as exc:
                row["error"] = _err(exc)
                row["traceback"] = traceback.format_exc()[-1500:]
    res["in_progress"] = None
    save(res)
    return res


def _point_file(out_dir: Path, model: str, fmt: str, tokens: int) -> Path:
    return out_dir / f"gluon_gemm_{model}_{fmt}_{tokens}.json"


def gpu_point(args) -> int:
    """Child process: the points of one layer and format (``--gpu-point MODEL:FMT:T1,T2``), each point's JSON rewritten
    after every step."""
    model, fmt, toks = args.gpu_point.split(":")
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    head = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "host": platform.node()}
    configs = [c for c in CONFIGS if not args.configs or c[0] in args.configs]
    programs = args.programs or torch.cuda.get_device_properties(0).multi_processor_count
    for n, tokens in enumerate(int(t) for t in toks.split(",")):
        out = _point_file(Path(args.out), model, fmt, tokens)

        def save(r: dict, out=out) -> None:
            out.write_text(json.dumps({**r, **head}, indent=1) + "\n")
        t1 = time.perf_counter()
        try:
            r = run_point(model, fmt, tokens, seed + n, configs, programs, save)
        except Exception as exc:
            r = json.loads(out.read_text()) if out.exists() else {"model": model, "format": fmt, "tokens": tokens}
            r.setdefault("errors", []).append(f"point: {_err(exc)}")
            r["traceback"] = traceback.format_exc()[-2000:]
        r["seconds"] = round(time.perf_counter() - t1, 1)
        save(r)
        _print_point(r)
        torch.cuda.empty_cache()
    return 0


def gpu(args) -> int:
    """Parent: each (layer, format) in its own process with a timeout (a hung kernel costs that process's remaining
    points, not the run; a config that hung is left out of the later processes), then the summary table and
    ``gluon_gemm_all.json``."""
    import subprocess

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    t0 = time.perf_counter()
    print(f"seed {seed}; each layer x format in a child process; JSON in {out_dir}", flush=True)
    configs = [c[0] for c in CONFIGS if not args.configs or c[0] in args.configs]
    hung: list[str] = []
    notes: dict[str, str] = {}
    groups = [(m, f) for m in args.models for f in args.formats]
    for n, (model, fmt) in enumerate(groups):
        left = args.budget_s - (time.perf_counter() - t0)
        use = [c for c in configs if c not in hung]
        if left < 20 or not use:
            for t in args.tokens:
                notes[f"{model}:{fmt}:{t}"] = "skipped: budget" if use else "skipped: every config hung"
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--gpu-point",
               f"{model}:{fmt}:{','.join(map(str, args.tokens))}", "--out", str(out_dir), "--seed", str(seed + 100 * n),
               "--programs", str(args.programs), "--configs", *use]
        limit = min(args.group_timeout_s, left)
        try:
            rc = subprocess.run(cmd, timeout=limit).returncode
            note = None if rc == 0 else f"child exit status {rc}"
        except subprocess.TimeoutExpired:
            note = f"timeout after {limit:.0f} s"
        if note is None:
            continue
        for t in args.tokens:
            f = _point_file(out_dir, model, fmt, t)
            if not f.exists():
                notes[f"{model}:{fmt}:{t}"] = f"not started ({note})"
                continue
            r = json.loads(f.read_text())
            step = r.get("in_progress")
            if not step:
                continue
            r.setdefault("errors", []).append(f"{note} during {step!r}")
            if note.startswith("timeout") and step.endswith(":run"):     # launched, never finished: a hang
                hung.append(step.split(":")[1])
                r["hung_config"] = step.split(":")[1]
            f.write_text(json.dumps(r, indent=1) + "\n")
    results = []
    for model, fmt in groups:
        for t in args.tokens:
            f = _point_file(out_dir, model, fmt, t)
            if f.exists():
                results.append(json.loads(f.read_text()))
    summary = {"seed": seed, "points": results, "not_run": notes, "hung_configs": hung,
               "seconds": round(time.perf_counter() - t0, 1)}
    (out_dir / "gluon_gemm_all.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n=== summary (us per call, CUDA-graph replay; TFLOP/s on valid rows; rel. error vs float64) ===")
    for r in results:
        _print_point(r)
    for k, v in notes.items():
        print(f"{k}: {v}")
    if hung:
        print(f"configs that hung (timed out) and were left out of later processes: {hung}")
    print(f"total {summary['seconds']} s")
    return 0


def _print_point(r: dict) -> None:
    print(f"\n{r.get('model')} {r.get('format')} {r.get('tokens')} tokens  seed {r.get('seed')}  rows {r.get('rows')}  "
          f"gather {r.get('gather_us')} us  ({r.get('seconds')} s)", flush=True)
    for e in r.get("errors", []):
        print(f"  ERROR {e}")
    for gname, g in r.get("gemms", {}).items():
        for key in ("runner", "runner_sorted"):
            if g.get(key):
                print(f"  {gname:6s} {key:15s} {g[key]['us']:>9} us {g[key]['tflops']:>7} TFLOP/s")
        for cname, row in g["configs"].items():
            if "error" in row:
                print(f"  {gname:6s} {cname:15s} ERROR {row['error'][:300]}")
            elif "us" in row:
                print(f"  {gname:6s} {cname:15s} {row['us']:>9} us {row['tflops']:>7} TFLOP/s  rel_err "
                      f"{row.get('rel_err', float('nan')):.2e} {'ok' if row.get('ok') else 'FAIL'}")
            else:
                print(f"  {gname:6s} {cname:15s} (not finished)")
    print(flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", action="store_true", help="check and time on the GPU (else: the sm90 compile table)")
    p.add_argument("--gpu-point", help=argparse.SUPPRESS)
    p.add_argument("--out", default="gluon_gemm_out", help="--gpu: folder for the JSON files")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    p.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS))
    p.add_argument("--configs", nargs="*", default=None, help="config names (default: all of CONFIGS)")
    p.add_argument("--programs", type=int, default=0, help="persistent programs (default: the SM count)")
    p.add_argument("--seed", type=int, default=None, help="default: fresh (from the clock), printed and recorded")
    p.add_argument("--budget-s", type=float, default=225.0, help="--gpu: the whole run's limit (children included)")
    p.add_argument("--group-timeout-s", type=float, default=110.0,
                   help="--gpu: kill a layer x format child process after this long")
    args = p.parse_args(argv)
    if args.gpu_point:
        return gpu_point(args)
    if args.gpu:
        return gpu(args)
    rows = compile_all(args.models, args.formats, [c for c in CONFIGS if not args.configs or c[0] in args.configs])
    print(f"{'model':16} {'format':11} {'N':>5} {'K':>5} {'config':14} {'regs':>4} {'spill':>5} {'wgmma':>5} "
          f"{'tmaLd':>5} {'tmaSt':>5} {'GMMA':>5} {'UTMALDG':>7} {'shared':>7} {'warps':>5}")
    for r in rows:
        print(f"{r['model']:16} {r['format']:11} {r['N']:>5} {r['K']:>5} {r['config']:14} {r['regs']:>4} "
              f"{r['spill']:>5} {r['wgmma']:>5} {r['tma_load']:>5} {r['tma_store']:>5} {r['hgmma_sass']:>5} "
              f"{r['utmaldg_sass']:>7} {r['shared']:>7} {r['num_warps']:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

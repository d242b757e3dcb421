"""Triton kernels of the ``triton`` runner's fused MoE layer, their launch wrappers and tile configurations.

The design is the standard fused-MoE one (the design SGLang's and vLLM's Triton runners use, written
here from that published design): sort the (token, expert) pairs by expert into blocks of ``BLOCK_M``
rows, then two grouped GEMMs that walk those blocks. For one rank with ``E`` local experts, ``T``
tokens, top-k ``K``, hidden size ``H`` and intermediate size ``I`` (``S = T*K`` routing *slots*, slot
``s = t*K + k``):

1. :func:`moe_align`: the slots of this rank's experts sorted by local expert, each expert's run padded
   to a multiple of ``BLOCK_M`` with the sentinel ``S``. Outputs ``sorted_slots [R]`` int32 (R = the
   *static* maximum ``max_blocks * BLOCK_M``, :func:`max_padded_rows`), ``block_expert [max_blocks]``
   int32 (local expert of each block, -1 past the end) and ``num_rows [1]`` int32 (padded rows in use).
   Slots of other ranks' experts and ids of -1 are left out. All on the device: no host
   synchronisation, every buffer sized from ``T`` alone, so a forward can be captured in a CUDA graph.
   One single-CTA kernel when ``S <= single_cta_limit(E_local)``, else three kernels (count with atomics,
   offsets, scatter) after a memset.
2. :func:`moe_gemm` (first GEMM): ``act[r] = act_fn(x[token(r)] @ w13[e].T)`` for every sorted row ``r``
   of block expert ``e``; the operand rows are gathered inside the kernel by ``token = slot // K``;
   gated activations compute the gate and the up tile together (two accumulators) and apply
   silu / gelu (erf) / swiglu_oai in the epilogue; relu2 is ``relu(h)**2`` on ``N = I`` rows.
   Output ``act [R, I]`` (16-bit).
3. :func:`moe_gemm` (second GEMM): ``y[slot] = weight[slot] * (act[r] @ w2[e].T)``, rows written per slot,
   ``y [S, H]`` (16-bit). With ``apply_router_weight_on_input`` the weight multiplies the first GEMM's
   accumulator instead (before the activation: the same as scaling the input; llama4-style routing).
4. :func:`topk_sum`: ``out[t] = sum_k y[t*K + k]`` over this rank's slots, in float32, stored in the
   output dtype. Slots of other ranks are never read (so ``y`` needs no zeroing).

Weight formats (``W_MODE`` of the GEMM kernel) and how activations are treated:

- ``bf16``/``fp16``: 16-bit operands, float32 accumulation.
FP8 activation quantization: multiplier ``448 / amax`` and scale ``amax / 448`` with IEEE division
(``div_rn``: the result does not depend on the GPU's approximate division), values clamped to +-448 and
rounded to nearest even.

- ``fp8_tensor`` / ``fp8_channel``: e4m3 weights, scale ``[E]`` / ``[E, N]`` (``w = q * scale``); the
  activations are quantized to e4m3 *inside the GEMMs* from a per-row (per-token) amax, multiplier
  ``448 / amax``: the first GEMM's per-token amax is computed before it (one reduction), the second's
  by the first GEMM's epilogue (``atomic_max`` per row). ``act_quant="tensor"`` uses one amax for all
  rows instead (per-tensor dynamic quantization).
- ``fp8_block``: e4m3 weights with one scale per ``[bn, bk]`` block, ``scale [E, ceil(N/bn),
  ceil(K/bk)]``; activations quantized per token and per group of ``bk`` columns: the hidden states by
  :func:`group_quant` (one small kernel), the intermediate by the first GEMM's epilogue (its ``BLOCK_N``
  a multiple of ``bk``), so both GEMMs read e4m3 operands with ``BLOCK_K = bk`` (one scale per row and
  K tile).
- ``int4_w4a16`` / ``int8_w8a16``: weight-only integer codes (layouts in :mod:`moe_select.quant_int`,
  "kernel" layout), ``w = (q - z) * s`` per group of ``group_size`` input columns, dequantized to the
  activation dtype inside the GEMM.
- ``mxfp4`` / ``nvfp4`` (W4A16): packed e2m1 weights decoded to bf16 in the main loop (``_fp4_tile``), bf16
  activations. At few rows per expert block (decode: 1-8 tokens put 1-2 real rows in most blocks) the GEMMs run
  in a *GEMV mode* (config ``GEMV``, :func:`default_config` up to :data:`GEMV_MAX_ROWS_PER_EXPERT` mean rows per
  expert): blocks of 1-4 sorted rows (the sort's ``BLOCK_M``), no ``tl.dot``, the decoded tile stays in
  registers and each real row accumulates ``sum_k w[n, k] * a[m, k]`` in float32; optionally split over K
  (``SPLIT_K``: float32 partials, then a reduction launch of the same kernel that runs the epilogue).

Weight loads: per-thread pointer loads (``cp.async`` on sm80+), or, for the 16-bit and FP8 weight modes with config
``TMA``, one TMA copy per weight tile through a tensor descriptor over ``B`` viewed ``[E * rows, K]`` (block
``[BLOCK_N, BLOCK_K]``; rows past an expert's ``N`` read the next expert's rows or the descriptor's zero fill, and
``K`` past ``K`` zeros: neither reaches a stored output), the same values, so the same result bit for bit.

Token counts never recompile a kernel: ``T`` and every size derived from it are runtime arguments that
Triton does not specialise (``do_not_specialize``), and the number of programs comes from the static
maximum (programs past the device-side block count exit at once). The tile configuration is chosen per
token *bucket* (:data:`TOKEN_BUCKETS`), so a layer compiles at most one GEMM variant per bucket.

With ``TRITON_INTERPRET=1`` set before triton is imported, every kernel runs on CPU tensors through
Triton's interpreter (numpy): that is how the tests check the kernels without a GPU. Slow: tests only.

Sources (designs and formats, not code): the fused-MoE design (sorted, block-padded slot ids; grouped
GEMM with the row gather inside it; routing weight in the epilogue) as vLLM publishes it in
vllm-project/vllm@13cb3e44373beb1c8b9d2c017f565af6f7a1b601:vllm/model_executor/layers/fused_moe/fused_moe.py
(``fused_moe_kernel``, ``moe_align_block_size``; SGLang's ``fused_moe_triton`` follows the same design);
block FP8 with 1x128 activation groups and 128x128 weight blocks: DeepSeek-V3 technical report
(arXiv:2412.19437, section 3.3.2, fine-grained quantization); e4m3 (max 448, no infinities): OCP 8-bit
Floating Point Specification (OFP8) v1.0; the int layouts: :mod:`moe_select.quant_int`.

Tile configurations: :func:`get_config` reads JSON files from ``backends/triton_configs/`` (format in
:func:`load_config_file` and that folder's README) written by ``benchmarks/tune_triton_moe.py``, and
falls back to :func:`default_config` for shapes, formats or devices not tuned.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

FP8_MAX = 448.0
#: gpt-oss clamped SwiGLU: alpha (openai/gpt-oss reference model); the limit comes from the layer (default 7.0)
SWIGLU_ALPHA = 1.702
ACTIVATIONS = {"silu": 1, "gelu": 2, "relu2": 3, "swiglu_oai": 4}
#: W_MODE of the GEMM kernel per weight format
W_MODES = {"bf16": 0, "fp16": 0, "fp8_tensor": 1, "fp8_channel": 2, "fp8_block": 3, "int4_w4a16": 4, "int8_w8a16": 5,
           "mxfp4": 6, "nvfp4": 7}
#: Weight modes of packed e2m1 weights (W4A16: dequantized to bf16 in the main loop) and their formats
FP4_MODES = (6, 7)
FP4_FORMATS = ("mxfp4", "nvfp4")
#: Formats whose GEMMs can take an A quantized before them (config ``PREQUANT``, :func:`row_quant`)
PREQUANT_FORMATS = ("fp8_tensor", "fp8_channel")
#: The default tiles quantize A before the GEMM (``PREQUANT``): the first GEMM's always, the second's from this
#: ``BLOCK_M`` (one H200, results/tune_prequant_h200_2026-12-02: the first GEMM 1-45 % faster with it at every tile
#: height timed; the second 0-36 % faster from ``BLOCK_M`` 32, within -8..+31 % at 16)
PREQUANT_MIN_BLOCK_M_GEMM2 = 32
FORMATS = tuple(W_MODES)
#: Weight modes whose GEMMs can read the weights through a TMA tensor descriptor (config ``TMA``): 16-bit and FP8
TMA_W_MODES = (0, 1, 2, 3)
TMA_FORMATS = tuple(f for f, m in W_MODES.items() if m in TMA_W_MODES)
#: Weight modes whose gated first GEMM can run the gate and up tiles as one MMA (config ``GU_DOT``, with ``TMA``): 16-bit,
#: fp8_tensor and fp8_channel (their scales are applied after the loop, so one accumulator holds both halves)
GU_DOT_W_MODES = (0, 1, 2)
GU_DOT_FORMATS = tuple(f for f, m in W_MODES.items() if m in GU_DOT_W_MODES)
#: fp8_block tiles from this ``BLOCK_M`` whose weight rows lie in one block of ``group_n`` rows scale each K step's
#: partial sum by one per-row factor (``SB_TILE`` in :func:`_moe_gemm_kernel`: one FFMA per accumulator element, the
#: row scales loaded in the accumulator's layout). One H200, results/sbtile_h200_2026-12-04 (the same tiles, before /
#: after): 1.04-1.23x at 2048-8192 tokens with the re-tuned tiles and up to 1.05x at ``BLOCK_M`` 32 (256 tokens), but
#: 3-7 % slower at ``BLOCK_M`` 16 and 1 token (the mma.sync tiles), which keep the per-column scales.
SB_TILE_MIN_BLOCK_M = 32
#: Slots (T*K) up to which the sort runs as one CTA (one launch); above, three kernels after a memset. Measured
#: on one H200 (benchmarks/align_threshold.py, CUDA-graph replay), since the one-CTA kernel writes each expert's
#: blocks instead of searching every block over every expert (results/sort_h200_2026-12-04/): one CTA is faster
#: up to 1024 slots with 8, 32, 128 and 256 experts (at 1024: 8.2 vs 8.7, 9.7 vs 10.4, 10.8 vs 11.7, 9.9 vs 10.6
#: us) and slower from 2048 (15.4-17.8 vs 9.2-10.8 us: its atomics serialise). The kernel before that change was
#: faster only up to 64-128 slots on 128-256 experts (results/align_threshold_h200_2026-11-30.json), hence the
#: per-expert-count limit it had.
SINGLE_CTA_MAX_SLOTS = 1024


def single_cta_limit(num_local: int) -> int:
    """Slots up to which :func:`moe_align` sorts in one CTA for a layer of ``num_local`` local experts
    (:data:`SINGLE_CTA_MAX_SLOTS` for every expert count measured: 8-256)."""
    return SINGLE_CTA_MAX_SLOTS


#: The GEMV mode of packed-FP4 weights (config ``GEMV``, :func:`moe_gemm`): at most this many rows per block
#: (the kernel unrolls them), its ``BLOCK_M`` values below the MMA tile's 16 (files, :func:`load_config_file`), the
#: mean rows per expert ``tokens * top_k / E`` up to which :func:`default_config` chooses it, and the programs per
#: GEMM its default split-K aims at (4 per SM of an H200's 132: a choice, not a measurement; the tuner times
#: splits). Its default ``BLOCK_M`` is ``min(4, pow2(tokens))``: a block never holds more rows than tokens.
GEMV_MAX_BLOCK_M = 16
GEMV_BLOCK_MS = (1, 2, 4, 8)
GEMV_MAX_ROWS_PER_EXPERT = 2
GEMV_TARGET_PROGRAMS = 4 * 132
GEMV_MAX_SPLIT_K = 8
#: Columns per program of the split-K reduction (4 warps: two or more bf16 per thread, so its stores are vectors).
GEMV_REDUCE_BLOCK_N = 256
#: Token buckets of the tile configurations: a token count uses the bucket nearest in log scale.
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
CONFIG_DIR = Path(__file__).resolve().parent / "triton_configs"
CONFIG_FORMAT_VERSION = 1



def interpreting() -> bool:
    """True when Triton's interpreter is on (``TRITON_INTERPRET=1`` when triton was imported): kernels
    then run on CPU tensors (numpy), slowly. Tests only."""
    return bool(triton.knobs.runtime.interpret) if hasattr(triton, "knobs") else os.environ.get("TRITON_INTERPRET") == "1"


def _fix_interpreter() -> None:
    """Work around three bugs of Triton 3.6's interpreter (``triton/runtime/interpreter.py``), applied only
    when the interpreter is on (tests; the compiled kernels are untouched):

    - a scalar kernel argument is a one-element array there, and ``range(0, n, BLOCK)`` over one calls
      ``int()`` of that array, which numpy 2.4 refuses ("only 0-dimensional arrays can be converted to Python
      scalars"; triton-lang/triton#9171, fixed after 3.6 by #9172 the same way): the index of a tensor is
      that of its squeezed data.

    - bf16 values are kept as their uint16 bits and ``create_dot`` widens only 8-bit floats, so a bf16
      ``tl.dot`` multiplies raw bits. bf16 operands are widened to float32 first: exact (the product of
      two bf16 values is exact in float32; the tensor cores accumulate in float32 too).
    - ``_convert_float`` narrows (float32 to bf16 or FP8) by truncating the mantissa and adding the
      cut-off bit without a carry into the exponent (7.99 -> 4.0 in e4m3, 1.999 -> 1.0 in bf16).
      Narrowing to bf16 and FP8 goes through torch's conversion instead (round to nearest even, as the
      GPU's ``cvt.rn``; the kernels clamp to +-448 before FP8, so saturation never matters)."""
    from triton.runtime import interpreter as ip

    if getattr(ip.InterpreterBuilder, "_moe_select_fixed", False):
        return
    import numpy as np

    orig_dot = ip.InterpreterBuilder.create_dot
    orig_fp = ip.InterpreterBuilder.create_fp_to_fp
    fp8 = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}

    def widen(t):
        if t.dtype.scalar != tl.bfloat16:
            return t
        return ip.TensorHandle(ip._convert_float(t.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return orig_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        dst = fp8.get(dst_type.scalar)
        if dst is None or src.dtype.scalar not in (tl.float32, tl.float16, tl.bfloat16):
            return orig_fp(self, src, dst_type, rounding_mode)
        f32 = widen(src).data.astype(np.float32)
        data = torch.from_numpy(np.ascontiguousarray(f32)).to(dst).view(torch.uint8).numpy().reshape(f32.shape)
        return ip.TensorHandle(data, dst_type.scalar)

    orig_cast = ip.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if dst_type.scalar != tl.bfloat16 or src.dtype.scalar not in (tl.float32, tl.float16):
            return orig_cast(self, src, dst_type)
        f32 = src.data.astype(np.float32)
        data = torch.from_numpy(np.ascontiguousarray(f32)).to(torch.bfloat16).view(torch.int16).numpy()
        return ip.TensorHandle(data.view(np.uint16).reshape(f32.shape), tl.bfloat16)

    orig_patch_tensor = ip._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):  # called at each launch: it sets tl.tensor's methods for the run
        orig_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    ip._patch_lang_tensor = patch_lang_tensor
    ip.InterpreterBuilder.cast_impl = cast_impl
    ip.InterpreterBuilder.create_dot = create_dot
    ip.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp
    ip.InterpreterBuilder._moe_select_fixed = True


class _Kernel:
    """A ``triton.jit`` kernel (an interpreted one under ``TRITON_INTERPRET=1``) with a launcher.

    ``launch(grid, device, *args, **kwargs)``; ``warmup=True`` compiles without running (no-op in the
    interpreter). ``compiled_variants()`` counts the compiled specialisations (Triton's JIT cache)."""

    def __init__(self, fn, **jit_kwargs):
        self.fn = fn
        self.jit = triton.jit(fn, **jit_kwargs)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def launch(self, grid, device: torch.device, *args, warmup: bool = False, **kwargs):
        if warmup:
            return None if device.type == "cpu" else self.jit.warmup(*args, grid=grid, **kwargs)
        return self.jit[grid](*args, **kwargs)

    def compiled_variants(self) -> int:
        """Number of compiled specialisations of this kernel over all devices (0 before the first launch)."""
        caches = getattr(self.jit, "device_caches", None)
        return 0 if caches is None else sum(len(c[0]) for c in caches.values())


def _kernel(**jit_kwargs):
    return lambda fn: _Kernel(fn, **jit_kwargs)


# ------------------------------------------------------------------------------------------------
# 1. sort (align) kernels
# ------------------------------------------------------------------------------------------------

def _align_single_kernel(ids_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, scratch_ptr, rank_ptr, amax_ptr,
                         num_slots, max_rows, max_blocks, amax_rows, expert_offset, num_local,
                         BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr,
                         HAS_AMAX: tl.constexpr):
    """One CTA: counts (atomics give each slot its rank in its expert), padded offsets, block experts,
    scatter. ``scratch [2*BLOCK_E]`` int32: counts, then start rows. Also fills the sentinel rows and
    zeroes ``amax[:amax_rows]`` (HAS_AMAX).

    Block experts: every block is first set to -1, then each expert writes its id into its own blocks, one
    store of all experts per block of the busiest expert (``max(padded) / BLOCK_M`` stores), instead of a
    search of every block over every expert's end row (``max_blocks / BLOCK_B`` reductions of
    ``[BLOCK_B, BLOCK_E]``, the part of the earlier kernel that grew with the expert count: on one H200 it took
    7.8 us at 256 slots on 128 experts against 3.5 on 8, ``results/align_threshold_h200_2026-11-30.txt``)."""
    offs_e = tl.arange(0, BLOCK_E)
    tl.store(scratch_ptr + offs_e, tl.zeros([BLOCK_E], dtype=tl.int32))
    for r0 in range(0, max_rows, BLOCK_S):
        r = r0 + tl.arange(0, BLOCK_S)
        tl.store(sorted_ptr + r, tl.zeros([BLOCK_S], dtype=tl.int32) + num_slots, mask=r < max_rows)
    for b0 in range(0, max_blocks, BLOCK_S):
        b = b0 + tl.arange(0, BLOCK_S)
        tl.store(block_expert_ptr + b, tl.full([BLOCK_S], -1, tl.int32), mask=b < max_blocks)
    if HAS_AMAX:
        for r0 in range(0, amax_rows, BLOCK_S):
            r = r0 + tl.arange(0, BLOCK_S)
            tl.store(amax_ptr + r, tl.zeros([BLOCK_S], dtype=tl.float32), mask=r < amax_rows)
    tl.debug_barrier()
    for s0 in range(0, num_slots, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        in_range = s < num_slots
        e = tl.load(ids_ptr + s, mask=in_range, other=-1).to(tl.int32) - expert_offset
        valid = in_range & (e >= 0) & (e < num_local)
        e = tl.where(valid, e, 0)
        rank = tl.atomic_add(scratch_ptr + e, tl.full([BLOCK_S], 1, tl.int32), mask=valid)
        tl.store(rank_ptr + s, rank, mask=valid)
    tl.debug_barrier()
    cnt = tl.load(scratch_ptr + offs_e, mask=offs_e < num_local, other=0, volatile=True)
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    total = tl.sum(padded, 0)
    tl.store(scratch_ptr + BLOCK_E + offs_e, ends - padded)
    tl.store(num_rows_ptr, total)
    nb = padded // BLOCK_M
    first = (ends - padded) // BLOCK_M
    for j in range(0, tl.max(nb, 0)):
        tl.store(block_expert_ptr + first + j, offs_e, mask=j < nb)
    tl.debug_barrier()
    for s0 in range(0, num_slots, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        in_range = s < num_slots
        e = tl.load(ids_ptr + s, mask=in_range, other=-1).to(tl.int32) - expert_offset
        valid = in_range & (e >= 0) & (e < num_local)
        e = tl.where(valid, e, 0)
        rank = tl.load(rank_ptr + s, mask=valid, other=0)
        start = tl.load(scratch_ptr + BLOCK_E + e, mask=valid, other=0, volatile=True)
        tl.store(sorted_ptr + start + rank, s, mask=valid)


def _align_count_kernel(ids_ptr, sorted_ptr, counts_ptr, rank_ptr, amax_ptr,
                        num_slots, max_rows, rows_per_prog, amax_rows, amax_per_prog, expert_offset, num_local,
                        BLOCK_S: tl.constexpr, HAS_AMAX: tl.constexpr):
    """Multi-CTA sort, step 1: each slot's rank in its expert (atomics on ``counts``, zeroed before);
    each program also fills its share of the sentinel rows and of the amax rows to zero."""
    pid = tl.program_id(0)
    s = pid * BLOCK_S + tl.arange(0, BLOCK_S)
    in_range = s < num_slots
    e = tl.load(ids_ptr + s, mask=in_range, other=-1).to(tl.int32) - expert_offset
    valid = in_range & (e >= 0) & (e < num_local)
    e = tl.where(valid, e, 0)
    rank = tl.atomic_add(counts_ptr + e, tl.full([BLOCK_S], 1, tl.int32), mask=valid)
    tl.store(rank_ptr + s, rank, mask=valid)
    r_start = pid * rows_per_prog
    for r0 in range(r_start, r_start + rows_per_prog, BLOCK_S):
        r = r0 + tl.arange(0, BLOCK_S)
        tl.store(sorted_ptr + r, tl.zeros([BLOCK_S], dtype=tl.int32) + num_slots,
                 mask=(r < max_rows) & (r < r_start + rows_per_prog))
    if HAS_AMAX:
        a_start = pid * amax_per_prog
        for r0 in range(a_start, a_start + amax_per_prog, BLOCK_S):
            r = r0 + tl.arange(0, BLOCK_S)
            tl.store(amax_ptr + r, tl.zeros([BLOCK_S], dtype=tl.float32),
                     mask=(r < amax_rows) & (r < a_start + amax_per_prog))


def _align_offsets_kernel(counts_ptr, block_expert_ptr, num_rows_ptr, max_blocks, num_local,
                          BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr):
    """Multi-CTA sort, step 2: padded start rows (``counts[BLOCK_E:]``, program 0), rows in use, and the
    expert of each block."""
    pid = tl.program_id(0)
    offs_e = tl.arange(0, BLOCK_E)
    cnt = tl.load(counts_ptr + offs_e, mask=offs_e < num_local, other=0)
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    total = tl.sum(padded, 0)
    if pid == 0:
        tl.store(counts_ptr + BLOCK_E + offs_e, ends - padded)
        tl.store(num_rows_ptr, total)
    b = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    row = b * BLOCK_M
    ex = tl.sum((ends[None, :] <= row[:, None]).to(tl.int32), 1)
    tl.store(block_expert_ptr + b, tl.where(row < total, ex, -1), mask=b < max_blocks)


def _align_scatter_kernel(ids_ptr, sorted_ptr, counts_ptr, rank_ptr, num_slots, expert_offset, num_local,
                          BLOCK_S: tl.constexpr, BLOCK_E: tl.constexpr):
    """Multi-CTA sort, step 3: ``sorted[start[e] + rank[s]] = s``."""
    pid = tl.program_id(0)
    s = pid * BLOCK_S + tl.arange(0, BLOCK_S)
    in_range = s < num_slots
    e = tl.load(ids_ptr + s, mask=in_range, other=-1).to(tl.int32) - expert_offset
    valid = in_range & (e >= 0) & (e < num_local)
    e = tl.where(valid, e, 0)
    rank = tl.load(rank_ptr + s, mask=valid, other=0)
    start = tl.load(counts_ptr + BLOCK_E + e, mask=valid, other=0)
    tl.store(sorted_ptr + start + rank, s, mask=valid)


_SIZES = ("num_slots", "max_rows", "max_blocks", "amax_rows", "rows_per_prog", "amax_per_prog")
align_single = _kernel(do_not_specialize=[n for n in _SIZES if n not in ("rows_per_prog", "amax_per_prog")])(_align_single_kernel)
align_count = _kernel(do_not_specialize=["num_slots", "max_rows", "rows_per_prog", "amax_rows", "amax_per_prog"])(_align_count_kernel)
align_offsets = _kernel(do_not_specialize=["max_blocks"])(_align_offsets_kernel)
align_scatter = _kernel(do_not_specialize=["num_slots"])(_align_scatter_kernel)


def max_padded_rows(num_slots: int, num_local: int, block_m: int) -> tuple[int, int]:
    """Static bound of the sorted buffer: (rows ``R = max_blocks * block_m``, ``max_blocks``).

    At most ``min(S, E)`` experts are non-empty and each pads by at most ``block_m - 1`` rows, so
    ``S + min(S, E) * (block_m - 1)`` rows suffice (``S + E * (block_m - 1)`` bounds it for any S)."""
    rows = num_slots + min(num_slots, num_local) * (block_m - 1)
    blocks = max(1, -(-rows // block_m))
    return blocks * block_m, blocks


class Alignment:
    """Device buffers of one sort: ``sorted_slots [R]`` int32 (sentinel ``S``), ``block_expert
    [max_blocks]`` int32 (-1 past the end), ``num_rows [1]`` int32; ``rows``/``max_blocks`` static."""

    __slots__ = ("sorted_slots", "block_expert", "num_rows", "rows", "max_blocks", "block_m", "num_slots")

    def __init__(self, sorted_slots, block_expert, num_rows, rows, max_blocks, block_m, num_slots):
        self.sorted_slots, self.block_expert, self.num_rows = sorted_slots, block_expert, num_rows
        self.rows, self.max_blocks, self.block_m, self.num_slots = rows, max_blocks, block_m, num_slots


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def moe_align(topk_ids: torch.Tensor, num_local: int, expert_offset: int, block_m: int, *,
              amax: torch.Tensor | None = None, single_cta_max_slots: int | None = None) -> Alignment:
    """Sort the slots of ``topk_ids [T, K]`` (int32/int64, contiguous, global ids) by local expert
    ``id - expert_offset`` in ``[0, num_local)`` into blocks of ``block_m`` rows (module doc, step 1).

    ``amax``: a float32 buffer to zero on the way (``amax_rows = amax.numel()``), for the first GEMM's
    per-row activation amax. ``single_cta_max_slots`` overrides :func:`single_cta_limit` (tests, benchmarks).
    No host synchronisation. Returns :class:`Alignment`."""
    dev = topk_ids.device
    s = topk_ids.numel()
    rows, max_blocks = max_padded_rows(s, num_local, block_m)
    sorted_slots = torch.empty(rows, dtype=torch.int32, device=dev)
    block_expert = torch.empty(max_blocks, dtype=torch.int32, device=dev)
    num_rows = torch.empty(1, dtype=torch.int32, device=dev)
    rank = torch.empty(max(s, 1), dtype=torch.int32, device=dev)
    block_e = max(16, _pow2(num_local))
    block_b = max(16, 2048 // block_e)
    has_amax = amax is not None
    amax_arg = amax if has_amax else num_rows
    amax_rows = amax.numel() if amax is not None else 0
    limit = single_cta_limit(num_local) if single_cta_max_slots is None else single_cta_max_slots
    if s <= limit:
        scratch = torch.empty(2 * block_e, dtype=torch.int32, device=dev)
        align_single.launch((1,), dev, topk_ids, sorted_slots, block_expert, num_rows, scratch, rank, amax_arg,
                            s, rows, max_blocks, amax_rows, expert_offset, num_local,
                            BLOCK_M=block_m, BLOCK_E=block_e, BLOCK_S=256, HAS_AMAX=has_amax,
                            num_warps=4)
    else:
        block_s = 1024
        counts = torch.zeros(2 * block_e, dtype=torch.int32, device=dev)
        nprog = -(-s // block_s)
        align_count.launch((nprog,), dev, topk_ids, sorted_slots, counts, rank, amax_arg,
                           s, rows, -(-rows // nprog), amax_rows, -(-max(amax_rows, 1) // nprog), expert_offset, num_local,
                           BLOCK_S=block_s, HAS_AMAX=has_amax, num_warps=4)
        align_offsets.launch((-(-max_blocks // block_b),), dev, counts, block_expert, num_rows, max_blocks, num_local,
                             BLOCK_M=block_m, BLOCK_E=block_e, BLOCK_B=block_b, num_warps=4)
        align_scatter.launch((nprog,), dev, topk_ids, sorted_slots, counts, rank, s, expert_offset, num_local,
                             BLOCK_S=block_s, BLOCK_E=block_e, num_warps=4)
    return Alignment(sorted_slots, block_expert, num_rows, rows, max_blocks, block_m, s)


# ------------------------------------------------------------------------------------------------
# 2./3. the grouped GEMM (both GEMMs of the layer)
# ------------------------------------------------------------------------------------------------

@triton.jit
def _activation(g, u, swiglu_limit, ACT: tl.constexpr):
    """The activation of the first GEMM's output in float32, shared by the fused epilogue and
    :func:`act_quant`: ACT 1 ``silu(g) * u``, 2 ``gelu_erf(g) * u``, 3 ``relu(g)**2`` (``u`` unused), 4
    swiglu_oai ``(clamp(u, -l, l) + 1) * gc * sigmoid(1.702 * gc)`` with ``gc = min(g, l)``."""
    if ACT == 1:
        a = g / (1.0 + tl.exp(-g)) * u
    elif ACT == 2:
        a = 0.5 * g * (1.0 + tl.erf(g * 0.7071067811865476)) * u
    elif ACT == 3:
        a = tl.maximum(g, 0.0)
        a = a * a
    else:
        gc = tl.minimum(g, swiglu_limit)
        uc = tl.minimum(tl.maximum(u, -swiglu_limit), swiglu_limit)
        a = (uc + 1.0) * gc / (1.0 + tl.exp(-1.702 * gc))
    return a


#: Bit positions of the shuffled FP4 word (:func:`fp4_shuffle`, the layout :data:`FP4_DECODE_ASM` reads): a word holds 8
#: consecutive e2m1 codes along K (``w0..w7``, canonically ``w[2j]`` in the low and ``w[2j+1]`` in the high nibble of
#: byte ``j``); code bit ``b`` (0 mantissa, 1-2 exponent, 3 sign) of ``w[2i+h]`` sits at bit ``FP4_BIT_POS[2i+h][b]``.
#: Output register ``i`` of the decode is ``rotr(word, d) & mask``: code bit ``b`` of the low half must land on bf16 bit
#: (6, 7, 8, 15)[b] (the high half 16 higher), so it is stored ``d`` above that. Pairs 0-2 use one rotation each (0, 4,
#: 10); pair 3 two (14 for the mantissa, low exponent bit and sign, 6 for the high exponent bit). No placement decodes
#: all four pairs with one rotation each (the translates of {6, 7, 8, 15} do not tile 16 bits).
_FP4_TARGET = (6, 7, 8, 15)
_FP4_ROT = ((0, 0, 0, 0), (4, 4, 4, 4), (10, 10, 10, 10), (14, 14, 6, 14))
FP4_BIT_POS = tuple(tuple((_FP4_TARGET[b] + 16 * h + _FP4_ROT[i][b]) % 32 for b in range(4))
                    for i in range(4) for h in range(2))
#: The decode's power-of-two offset: it yields ``e2m1 * 2^-126`` (the code's bits placed into a bf16 with exponent bias
#: 127 instead of 1), the kernel multiplies it by ``scale * 2^(126 - FP4_EPI_LOG2)`` (a bf16 for e8m0 scales up to
#: 2^(FP4_EPI_LOG2 + 1) and every e4m3 scale) and the epilogue by ``2^FP4_EPI_LOG2`` in float32. Powers of two: the
#: products, the float32 sums and so the output are those of the unshifted values, bit for bit.
FP4_EPI_LOG2 = 32
#: e8m0 scale bytes above this overflow the shifted bf16 scale (prepare_weights refuses them: ``2^33`` and up).
FP4_MAX_E8M0 = 127 + FP4_EPI_LOG2 + 1
#: nvfp4's kernel scale byte (:func:`fp4_kernel_e4m3`): the PTX decode's bf16 scale is ``(k << 4) + FP4_E4M3_BASE``
#: (bf16 exponent field 211: an e4m3 exponent ``E`` >= 1 maps to ``k = byte + 24``, the subnormals below it)
FP4_E4M3_BASE = (126 - FP4_EPI_LOG2 + 127 - 10) << 7
_FP4_E4M3_BASE2 = tl.constexpr(FP4_E4M3_BASE * 0x10001)   # twice: one bf16x2
_FP4_EPI_MUL = tl.constexpr(2.0 ** FP4_EPI_LOG2)


def fp4_shuffle(q: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 codes in the canonical layout (``q [..., K/2]`` uint8, element ``2j`` in the low nibble of byte
    ``j``) -> the same shape in the layout :data:`FP4_DECODE_ASM` reads: each 4 bytes (8 codes along K, ``K/2`` a
    multiple of 4) rebuilt bit by bit after :data:`FP4_BIT_POS`, stored little-endian. Runs on ``q``'s device, about
    16 MB of rows at a time (a DeepSeek-V3 expert tensor is gigabytes). Raises ValueError for another dtype or a last
    dimension that is not a multiple of 4. :func:`fp4_unshuffle` inverts it."""
    return _fp4_permute(q, inverse=False)


def fp4_unshuffle(q: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`fp4_shuffle` (the canonical layout back; tests and checks); the same errors."""
    return _fp4_permute(q, inverse=True)


@functools.lru_cache(maxsize=None)
def _fp4_e4m3_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 byte -> kernel byte, kernel byte -> e4m3 byte) as uint8 [256] lookup tables; 255 marks the bytes with
    no kernel byte (negative scales and NaN) and the kernel bytes that are no scale's."""
    fwd = torch.full((256,), 255, dtype=torch.uint8)
    inv = torch.full((256,), 255, dtype=torch.uint8)
    vals = torch.arange(128, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    bits = (vals * 2.0 ** (126 - FP4_EPI_LOG2)).to(torch.bfloat16).view(torch.int16).to(torch.int64)
    for b in range(127):                     # 0x7F is NaN
        k = 0 if b == 0 else (int(bits[b]) - FP4_E4M3_BASE) // 16
        assert b == 0 or (0 < k < 255 and (k << 4) + FP4_E4M3_BASE == int(bits[b])), b
        fwd[b], inv[k] = k, b
    return fwd, inv


def fp4_kernel_e4m3(scale: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """nvfp4's e4m3 scale bytes (uint8 view) -> the bytes the PTX decode's kernel reads: ``k`` with
    ``(k << 4) + FP4_E4M3_BASE`` the bf16 bits of ``scale * 2^(126 - FP4_EPI_LOG2)`` (exact: an e4m3 value has 4
    significant bits), one multiply-add in the main loop where a conversion takes five; 0 stays 0 (prepare_weights
    zeroes the codes of such blocks: the same zero weights). Negative and NaN scales have none (255: callers refuse
    them first). ``inverse``: back to e4m3. Raises ValueError for another dtype."""
    if scale.dtype != torch.uint8:
        raise ValueError(f"fp4_kernel_e4m3: uint8 e4m3 bytes, got {scale.dtype}")
    fwd, inv = _fp4_e4m3_tables()
    return (inv if inverse else fwd).to(scale.device)[scale.long()]


def fp4_kernel_e8m0(scale: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """e8m0 scale bytes (uint8, ``2^(s - 127)``, 0 read as 0) -> the bytes the PTX decode's kernel reads: the bf16
    exponent field of ``2^(s - 127) * 2^(126 - FP4_EPI_LOG2)``, i.e. ``s + 126 - FP4_EPI_LOG2``, and 0 for 0, so the
    main loop only shifts it into place. Bytes above :data:`FP4_MAX_E8M0` do not fit (callers refuse them first).
    ``inverse``: back to e8m0. Raises ValueError for another dtype."""
    if scale.dtype != torch.uint8:
        raise ValueError(f"fp4_kernel_e8m0: uint8 e8m0 bytes, got {scale.dtype}")
    d = 126 - FP4_EPI_LOG2
    s = scale.to(torch.int16)
    return torch.where(s == 0, 0, s - d if inverse else s + d).to(torch.uint8)


def _fp4_permute(q: torch.Tensor, inverse: bool) -> torch.Tensor:
    """Move every bit of each 32-bit word: canonical bit ``4 * w + b`` (code ``w``, bit ``b``) <-> shuffled bit
    ``FP4_BIT_POS[w][b]``. Raises ValueError for a tensor that is not uint8 ``[..., K/2]`` with ``K/2`` a multiple of 4."""
    if q.dtype != torch.uint8 or q.dim() < 1 or q.shape[-1] % 4:
        raise ValueError(f"fp4_{'un' if inverse else ''}shuffle: packed e2m1 uint8 [..., K/2] with K/2 a multiple of 4, "
                         f"got {q.dtype} {tuple(q.shape)}")
    out = torch.empty_like(q)
    flat_in, flat_out = q.reshape(-1, q.shape[-1]), out.view(-1, q.shape[-1])
    chunk = max(1, (1 << 24) // max(1, q.shape[-1]))                   # about 16 MB of bytes per step
    moves = [(4 * w + b, FP4_BIT_POS[w][b]) for w in range(8) for b in range(4)]
    if inverse:
        moves = [(dst, src) for src, dst in moves]
    for r0 in range(0, flat_in.shape[0], chunk):
        b = flat_in[r0:r0 + chunk].to(torch.int64).reshape(-1, q.shape[-1] // 4, 4)
        word = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
        new = torch.zeros_like(word)
        for src, dst in moves:
            new |= ((word >> src) & 1) << dst
        flat_out[r0:r0 + chunk] = torch.stack([(new >> (8 * j)) & 0xFF for j in range(4)], -1).reshape(
            -1, q.shape[-1]).to(torch.uint8)
    return out


#: Why SWAP_AB tiles take the portable decode only. The PTX decode reads one shuffled word per 32-bit register of the
#: packed tile (``inline_asm_elementwise`` with ``pack=4``: four bytes of a thread's elements per call), so each register
#: must hold four consecutive bytes of one row along K. Triton 3.6 lays the packed tile out so for the MMA's B operand
#: (the default tile) and for the GEMV mode's blocked layout (the GPU tests compare both with the portable decode, bit
#: for bit, at every committed tile shape); as the MMA's A operand (SWAP_AB) it does not (measured on an H200:
#: rel. error 1.5). SWAP_AB was slower than the plain tile at every tuned point anyway (benchmarks/README.md).
SWAP_AB_ASM_ERROR = ("SWAP_AB (the weight tile as the MMA's A operand) runs with the portable FP4 decode only: the PTX "
                     "decode needs whole shuffled words per register, which Triton's A-operand layout does not give")

#: e2m1 -> bf16 on NVIDIA GPUs (PTX, sm80+) for the shuffled word (:data:`FP4_BIT_POS`): one 32-bit word of 8 codes
#: and 4 bf16x2 scales in; 4 bf16x2 registers out, register ``i`` holding ``w[2i]`` (bits 0-15) and ``w[2i+1]``
#: (bits 16-31) times its scale, as ``value * 2^-126 * scale``. Each register is a funnel-shift rotation of the
#: word and a mask (register 3: two of each), which puts sign, exponent and mantissa bits where a bf16 has them; an
#: e2m1 subnormal (0.5) lands on a bf16 subnormal of the same ratio; the scale by ``fma.rn.bf16x2`` with a -0.0
#: addend (exact: an e2m1 value times an e8m0 or e4m3 scale has at most 6 significant bits). 9 integer operations
#: per 8 codes where a table lookup of the canonical layout takes 17 (Marlin's shift-and-mask decode of e2m1
#: (vLLM csrc/quantization/gptq_marlin/dequant.h) is the idea; the placement here is ours).
FP4_DECODE_ASM = tl.constexpr("""{
.reg .b32 r<4>, v<4>, z;
and.b32 v0, $4, 0x81C081C0;
shf.r.wrap.b32 r0, $4, $4, 4;
and.b32 v1, r0, 0x81C081C0;
shf.r.wrap.b32 r1, $4, $4, 10;
and.b32 v2, r1, 0x81C081C0;
shf.r.wrap.b32 r2, $4, $4, 14;
shf.r.wrap.b32 r3, $4, $4, 6;
and.b32 r2, r2, 0x80C080C0;
and.b32 r3, r3, 0x01000100;
or.b32 v3, r2, r3;
mov.b32 z, 0x80008000;
fma.rn.bf16x2 $0, v0, $5, z;
fma.rn.bf16x2 $1, v1, $6, z;
fma.rn.bf16x2 $2, v2, $7, z;
fma.rn.bf16x2 $3, v3, $8, z;
}""")


@triton.jit
def _e2m1_f32(code):
    """float32 value of 4-bit e2m1 codes (uint8, bits 0-3: sign in bit 3, exponent bits 2-1, mantissa bit 0;
    OCP MX v1.0 section 5.3.3) from the bit fields: magnitude code ``m`` 0 and 1 are 0 and 0.5 (subnormal),
    2..7 are ``2^(m//2 - 1) * (1 + (m % 2) / 2)``, written directly as float32 bits."""
    c = code.to(tl.uint32)
    m = c & 7
    bits = tl.where(m < 2, m * (126 << 23), (m << 22) + (126 << 23)) | ((c & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _fp4_loads(q_ptrs, qs_ptrs, qu_ptrs, qsu_ptrs, k_left, offs_kh, offs_g, EVEN_K: tl.constexpr, GATED: tl.constexpr,
               SCALE_GROUP: tl.constexpr):
    """One K tile of packed e2m1 weights and their scale bytes (``q [BN, BK/2]``, ``qs [BN, BK/SCALE_GROUP]``
    uint8), and the up rows' (``qu``, ``qsu``) when GATED (else ``q``, ``qs`` again, unused): whole tiles when
    EVEN_K, else masked to the ``k_left`` elements left along K (0 past them). The MMA and GEMV paths of
    :func:`_moe_gemm_kernel` share it."""
    if EVEN_K:
        q = tl.load(q_ptrs)
        qs = tl.load(qs_ptrs)
        qu = q
        qsu = qs
        if GATED:
            qu = tl.load(qu_ptrs)
            qsu = tl.load(qsu_ptrs)
    else:
        kh_ok = (offs_kh < k_left // 2)[None, :]
        g_ok = (offs_g < k_left // SCALE_GROUP)[None, :]
        q = tl.load(q_ptrs, mask=kh_ok, other=0)
        qs = tl.load(qs_ptrs, mask=g_ok, other=0)
        qu = q
        qsu = qs
        if GATED:
            qu = tl.load(qu_ptrs, mask=kh_ok, other=0)
            qsu = tl.load(qsu_ptrs, mask=g_ok, other=0)
    return q, qs, qu, qsu


@triton.jit
def _fp4_scale_operand(qs, W_MODE: tl.constexpr):
    """The kernel's scale bytes ``qs`` (uint8) -> :data:`FP4_DECODE_ASM`'s scale operand, ``scale * 2^(126 -
    FP4_EPI_LOG2)`` as a bf16x2 in an int32: W_MODE 6, :func:`fp4_kernel_e8m0` bytes (the bf16 exponent field, twice);
    7, :func:`fp4_kernel_e4m3` bytes (``(k << 4) + FP4_E4M3_BASE``, twice)."""
    if W_MODE == 6:
        return (qs.to(tl.uint32) * 0x00800080).to(tl.int32, bitcast=True)
    return (qs.to(tl.uint32) * 0x00100010 + _FP4_E4M3_BASE2).to(tl.int32, bitcast=True)


@triton.jit
def _fp4_tile(q, qs, W_MODE: tl.constexpr, SCALE_GROUP: tl.constexpr, FP4_ASM: tl.constexpr):
    """One weight tile of packed e2m1 codes, dequantized to ``[BN, BK]`` bf16. Portable (FP4_ASM false; any backend,
    the interpreter included): ``q [BN, BK/2]`` uint8 in the canonical layout (element ``2j`` of a row in the low
    nibble of byte ``j``), ``qs [BN, BK/SCALE_GROUP]`` uint8 scale bits (W_MODE 6: e8m0, ``2^(s - 127)``, ``s = 0``
    read as 0 instead of 2^-127; 7: e4m3), values ``value * scale`` from :func:`_e2m1_f32` in float32, exactly.
    FP4_ASM (GPU): ``q`` in the shuffled layout (:func:`fp4_shuffle`) and ``qs`` the kernel's scale bytes
    (:func:`fp4_kernel_e8m0` / :func:`fp4_kernel_e4m3`), decoded by :data:`FP4_DECODE_ASM` to ``value * scale *
    2^-FP4_EPI_LOG2`` (the epilogue multiplies by ``2^FP4_EPI_LOG2``: the same output bit for bit)."""
    BN: tl.constexpr = q.shape[0]
    BKH: tl.constexpr = q.shape[1]
    if FP4_ASM:                                                 # scale * 2^(126 - FP4_EPI_LOG2) (FP4_DECODE_ASM)
        s2 = _fp4_scale_operand(qs, W_MODE)
        sb2 = tl.reshape(tl.broadcast_to(s2[:, :, None], (BN, BKH * 2 // SCALE_GROUP, SCALE_GROUP // 2)), (BN, BKH))
        w2 = tl.inline_asm_elementwise(FP4_DECODE_ASM, "=r,=r,=r,=r,r,r,r,r,r", [q, sb2], dtype=tl.int32,
                                       is_pure=True, pack=4)
        lo = w2.to(tl.int16).to(tl.bfloat16, bitcast=True)
        hi = (w2 >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        if W_MODE == 6:
            sf = (qs.to(tl.uint16) << 7).to(tl.bfloat16, bitcast=True)
        else:
            sf = qs.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)
        sb = tl.reshape(tl.broadcast_to(sf[:, :, None], (BN, BKH * 2 // SCALE_GROUP, SCALE_GROUP // 2)), (BN, BKH))
        sb32 = sb.to(tl.float32)
        lo = (_e2m1_f32(q & 0xF) * sb32).to(tl.bfloat16)
        hi = (_e2m1_f32(q >> 4) * sb32).to(tl.bfloat16)
    return tl.interleave(lo, hi)


@triton.jit
def _gemv_rows(acc, acc_u, w, wu, a_ptr, a_row, row_ok, k0, K, stride_am, GATED: tl.constexpr, EVEN_K: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """One K tile of the GEMV mode: for each real row ``m`` of the block (``row_ok``; the others are skipped),
    ``acc[m, :] += sum_k w[:, k] * a[a_row[m], k0 + k]`` (and ``acc_u`` with ``wu`` when GATED), in float32; ``w``,
    ``wu``: the decoded ``[BLOCK_N, BLOCK_K]`` weight tiles in float32 (exact bf16 values, so each product is
    exact). Returns ``(acc, acc_u)``."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = k0 + tl.arange(0, BLOCK_K)
    for m in tl.static_range(BLOCK_M):
        is_m = offs_m == m
        if tl.sum(tl.where(is_m, row_ok.to(tl.int32), 0)) > 0:
            row = tl.sum(tl.where(is_m, a_row, 0))
            if EVEN_K:
                a = tl.load(a_ptr + row * stride_am + offs_k).to(tl.float32)
            else:
                a = tl.load(a_ptr + row * stride_am + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
            acc = tl.where(is_m[:, None], acc + tl.sum(w * a[None, :], 1)[None, :], acc)
            if GATED:
                acc_u = tl.where(is_m[:, None], acc_u + tl.sum(wu * a[None, :], 1)[None, :], acc_u)
    return acc, acc_u


@triton.jit
def _gemv_a1(a1_ptrs, kb, a1_ok, offs_k, K, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """The one A row of a ``BLOCK_M`` 1 GEMV block, K tile ``kb``, as float32 ``[BLOCK_K]`` (zeros past ``K`` and where
    ``a1_ok`` is false: a block without a real row)."""
    if EVEN_K:
        return tl.load(a1_ptrs + kb * BLOCK_K, mask=a1_ok, other=0.0).to(tl.float32)
    return tl.load(a1_ptrs + kb * BLOCK_K, mask=a1_ok & (offs_k < K - kb * BLOCK_K), other=0.0).to(tl.float32)


def _moe_gemm_kernel(
        a_ptr, b_ptr, c_ptr, a_amax_ptr, b_scale_ptr, b_zero_ptr, b_gscale_ptr, c_amax_ptr, weight_ptr, bias_ptr,
        sorted_ptr, block_expert_ptr, num_rows_ptr, ws_ptr, num_slots, top_k, N, K, n_up, stride_am, stride_be,
        stride_bn, stride_bk, stride_cm, stride_bias_e, stride_se, stride_sn, stride_sk, stride_asm, stride_csm,
        stride_wsk, stride_wsm, group_k, group_n, swiglu_limit, A_GATHER: tl.constexpr, C_BY_SLOT: tl.constexpr,
        GATED: tl.constexpr, ACT: tl.constexpr, MUL_WEIGHT: tl.constexpr, W_MODE: tl.constexpr, A_SCALE: tl.constexpr,
        C_AMAX: tl.constexpr, HAS_ZERO: tl.constexpr, ZERO_DEFAULT: tl.constexpr, Q_GROUP: tl.constexpr,
        GROUP_TILE: tl.constexpr, EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BEFORE_WEIGHT: tl.constexpr,
        SCALE_GROUP: tl.constexpr, FP4_ASM: tl.constexpr, SWAP_AB: tl.constexpr, GEMV: tl.constexpr,
        PREFETCH: tl.constexpr, SPLIT_MODE: tl.constexpr, SPLIT_K: tl.constexpr, A_FP8: tl.constexpr,
        B_DESC: tl.constexpr, SB_TILE: tl.constexpr, MIN_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One ``[BLOCK_M, BLOCK_N]`` output tile of the grouped GEMM ``C = act(A @ B[e].T)``.

    Rows: sorted rows of block ``pid_m`` (``sorted_ptr``); A row = ``slot // top_k`` (A_GATHER) or the
    sorted row; C row = slot (C_BY_SLOT) or the sorted row. ``B [E, rows, K]`` (int4: ``K/2`` bytes per
    row); GATED reads the up rows at ``n_up + n`` and keeps two accumulators (B_DESC 2, ``GU_DOT``: one
    ``[BLOCK_M, 2 * BLOCK_N]`` accumulator over the gate and up tiles, loaded as one ``[2, BLOCK_N, BLOCK_K]`` TMA box
    of ``B`` viewed ``[2 E, n_up, K]``, so each K step is one MMA of twice the width, and split into the two after the
    loop; B_DESC 1: a ``[BLOCK_N, BLOCK_K]`` box of ``B`` viewed ``[E * rows, K]``; 0: pointer loads). W_MODE: 0 16-bit, 1 fp8
    per-expert scale, 2 fp8 per-row scale, 3 fp8 block scales (``[group_n, group_k]`` blocks, BLOCK_K ==
    group_k), 4 int4, 5 int8 (groups of ``group_k`` along K, zero points; GROUP_TILE: ``BLOCK_K`` divides
    ``group_k``, so one scale per column and K tile, else one per element), 6 mxfp4, 7 nvfp4 (packed e2m1 ``B
    [E, rows, K/2]`` uint8, one scale byte per ``SCALE_GROUP`` elements along K, ``scale [E, rows,
    K/SCALE_GROUP]`` uint8: e8m0 (6) or e4m3 bits (7); 7 also multiplies the float32 accumulators by the
    expert's global scale ``b_gscale[e]``; :func:`_fp4_tile` decodes, FP4_ASM picks its GPU or portable
    code; SWAP_AB computes the transposed tile ``B[e] @ A.T`` so the weight tile is the MMA's M operand,
    for small ``BLOCK_M``; SB_TILE (W_MODE 3): the tile's weight rows (gate and up) lie in one block of ``group_n``
    rows, so each K step's partial sum is scaled by one per-row factor ``sa * sb`` (one FFMA per element, no layout
    conversion of the row scales) instead of ``sa[:, None] * sb[None, :]``; GEMV (W_MODE 6, 7 only): no ``tl.dot``, each K tile's decoded weights ``[BLOCK_N,
    BLOCK_K]`` stay in registers and each real row of the block (rows past the block's slots are skipped) gets
    ``sum_k w[n, k] * a[m, k]`` in float32 (exact products of bf16 values), for blocks of 1-16 rows; at
    ``BLOCK_M`` 1 the products are summed elementwise over the K tiles and reduced over K once, after the loop,
    so the loop holds no cross-thread reduction; PREFETCH, at ``BLOCK_M`` 1: a register double buffer, the next K
    tile's weights, scales and A row loaded before this tile's FMAs and decoded after them). PREFETCH on the packed-FP4
    MMA tiles (W_MODE 6, 7, not GEMV): the next K tile's block scales loaded before this tile's decode and MMAs (the
    codes go through the pipeliner's shared-memory stages; the scales were the loop's direct loads, each waited on in
    its own K step: the L1TEX-scoreboard stall ncu found, benchmarks/README.md). SPLIT_MODE
    (GEMV): 0 one program per output tile; 1 split-K: ``SPLIT_K`` programs per output tile, each over its share of
    the K tiles, store float32 partial sums (gate then up columns) at ``ws[split, sorted row, column]`` and skip
    the epilogue; 2 the reduction: sums the ``SPLIT_K`` partials in a fixed order (deterministic) and runs the
    epilogue (global scale, biases, weight, activation, store). A_SCALE: 1 A quantized in the
    kernel from a per-row amax at ``a_amax[A row]``, 2 from one amax ``a_amax[0]`` (W_MODE 1, 2); 3 A is
    e4m3 already with one scale per row and K tile at ``a_amax[A row * stride_asm + k tile]`` (W_MODE 3).
    A_FP8 (A_SCALE 1, 2): A is e4m3 already, quantized by :func:`row_quant` with the same multiplier
    (``448 / amax``) the main loop would apply, so the dot reads both operands as stored (no conversion in
    the loop) and the epilogue's dequantization is unchanged: the same result, bit for bit.
    C_AMAX: 1 atomic max of |C| per C row into ``c_amax``, 2 over the tile into ``c_amax[0]``; 3 C is
    stored as e4m3 with one scale per row and group of ``Q_GROUP`` columns at ``c_amax[C row *
    stride_csm + group]`` (needs ``BLOCK_N % Q_GROUP == 0``). ACT: 0 none, 1 silu, 2 gelu (erf), 3 relu2,
        4 swiglu_oai. HAS_BIAS: ``bias [E, N_b]`` float32 (expert biases) added to the tile in float32 after the
    dequantization, before (BIAS_BEFORE_WEIGHT, the second GEMM) or after (the first GEMM, where the weight
    only ever scales the input) the routing weight, and before the activation. EVEN_K: ``K % BLOCK_K == 0``, so the main loop loads without K masks (weight rows past ``N``
    are read modulo ``N``, their results never stored). Output columns are indexed without a clamp so
    that the epilogue's stores are vector stores: with a clamped (``where``) index Triton cannot prove
    them contiguous and stores element by element, which cost about ten times the GEMM's own time at
    8192 tokens on an H200 (benchmarks/gemm_profile.py, benchmarks/README.md).
    MIN_M (0: off; else a power of two from 16 below BLOCK_M): a block whose rows from ``MIN_M`` on are all padding
    (sorted slot ``>= num_slots``: each expert's rows come first in its blocks) runs as a ``[MIN_M, BLOCK_N]`` tile,
    the same sums of its real rows with ``MIN_M / BLOCK_M`` of the MMA work (the weight tiles are read the same);
    :func:`_moe_tile` is the tile, compiled once per height."""
    pid = tl.program_id(0)
    pid_k = 0
    if SPLIT_MODE == 1:
        pid_k = pid % SPLIT_K
        pid = pid // SPLIT_K
    num_rows = tl.load(num_rows_ptr)
    num_pid_m = tl.cdiv(num_rows, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if pid >= num_pid_m * num_pid_n:
        return
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m

    # the tile's height: BLOCK_M, or MIN_M where the block's rows from MIN_M on are padding (docstring); one
    # unrolled step per height, the step of the other height skipped
    NUM_H: tl.constexpr = 2 if MIN_M > 0 else 1
    small = tl.full([], 0, tl.int1)
    if MIN_M > 0:
        small = tl.load(sorted_ptr + pid_m * BLOCK_M + MIN_M) >= num_slots
    for h in tl.static_range(NUM_H):
        if small == (h < NUM_H - 1):
            _moe_tile(pid_m, pid_n, pid_k, a_ptr, b_ptr, c_ptr, a_amax_ptr, b_scale_ptr, b_zero_ptr, b_gscale_ptr,
                      c_amax_ptr, weight_ptr, bias_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, ws_ptr, num_slots,
                      top_k, N, K, n_up, stride_am, stride_be, stride_bn, stride_bk, stride_cm, stride_bias_e, stride_se,
                      stride_sn, stride_sk, stride_asm, stride_csm, stride_wsk, stride_wsm, group_k, group_n,
                      swiglu_limit, A_GATHER, C_BY_SLOT, GATED, ACT, MUL_WEIGHT, W_MODE, A_SCALE, C_AMAX, HAS_ZERO,
                      ZERO_DEFAULT, Q_GROUP, GROUP_TILE, EVEN_K, HAS_BIAS, BIAS_BEFORE_WEIGHT, SCALE_GROUP, FP4_ASM,
                      SWAP_AB, GEMV, PREFETCH, SPLIT_MODE, SPLIT_K, A_FP8, B_DESC, SB_TILE, MIN_M, BLOCK_M, BLOCK_N,
                      BLOCK_K, GROUP_M, TILE_M=MIN_M if h < NUM_H - 1 else BLOCK_M)


@triton.jit
def _moe_tile(
        pid_m, pid_n, pid_k, a_ptr, b_ptr, c_ptr, a_amax_ptr, b_scale_ptr, b_zero_ptr, b_gscale_ptr, c_amax_ptr,
        weight_ptr, bias_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, ws_ptr, num_slots, top_k, N, K, n_up,
        stride_am, stride_be, stride_bn, stride_bk, stride_cm, stride_bias_e, stride_se, stride_sn, stride_sk,
        stride_asm, stride_csm, stride_wsk, stride_wsm, group_k, group_n, swiglu_limit, A_GATHER: tl.constexpr,
        C_BY_SLOT: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr, MUL_WEIGHT: tl.constexpr,
        W_MODE: tl.constexpr, A_SCALE: tl.constexpr, C_AMAX: tl.constexpr, HAS_ZERO: tl.constexpr,
        ZERO_DEFAULT: tl.constexpr, Q_GROUP: tl.constexpr, GROUP_TILE: tl.constexpr, EVEN_K: tl.constexpr,
        HAS_BIAS: tl.constexpr, BIAS_BEFORE_WEIGHT: tl.constexpr, SCALE_GROUP: tl.constexpr, FP4_ASM: tl.constexpr,
        SWAP_AB: tl.constexpr, GEMV: tl.constexpr, PREFETCH: tl.constexpr, SPLIT_MODE: tl.constexpr,
        SPLIT_K: tl.constexpr, A_FP8: tl.constexpr, B_DESC: tl.constexpr, SB_TILE: tl.constexpr, MIN_M: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        TILE_M: tl.constexpr):
    """One ``[TILE_M, BLOCK_N]`` output tile of :func:`_moe_gemm_kernel` (its docstring): the first ``TILE_M``
    sorted rows of block ``pid_m`` (blocks of ``BLOCK_M`` rows), column tile ``pid_n``, K split ``pid_k``."""
    offs_r = pid_m * BLOCK_M + tl.arange(0, TILE_M)
    slot = tl.load(sorted_ptr + offs_r)
    row_ok = slot < num_slots
    slot = tl.where(row_ok, slot, 0)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if A_GATHER:
        a_row = (slot // top_k).to(tl.int64)
    else:
        a_row = offs_r.to(tl.int64)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)    # output columns: contiguous, so stores vectorize
    n_ok = offs_cn < N
    offs_n = offs_cn % N                                 # weight rows read (columns past N read a valid row)
    offs_k = tl.arange(0, BLOCK_K)

    a_ptrs = a_ptr + a_row[:, None] * stride_am + offs_k[None, :]
    if B_DESC == 2:  # b_ptr: a TMA descriptor over B viewed [2 E, n_up, K], block [2, BLOCK_N, BLOCK_K] (GU_DOT)
        b_plane = (expert * 2).to(tl.int32)
    elif B_DESC:     # b_ptr: a TMA descriptor over B viewed [E * rows, K], block [BLOCK_N, BLOCK_K] (W_MODE 0-3)
        b_row = (expert * (stride_be // stride_bn)).to(tl.int32) + pid_n * BLOCK_N
    else:
        b_base = b_ptr + expert * stride_be
        if W_MODE == 4:
            b_ptrs = b_base + (offs_k[:, None] // 2) * stride_bk + offs_n[None, :] * stride_bn
            b_shift = (offs_k[:, None] % 2) * 4
        else:
            b_ptrs = b_base + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        if GATED:
            bu_ptrs = b_ptrs + n_up * stride_bn
    s_base = b_scale_ptr + expert * stride_se

    if A_SCALE == 1:
        a_amax = tl.load(a_amax_ptr + a_row, mask=row_ok, other=1.0)
        a_amax = tl.maximum(a_amax, 1e-12)
    elif A_SCALE == 2:
        a_amax = tl.maximum(tl.load(a_amax_ptr) + tl.zeros([TILE_M], dtype=tl.float32), 1e-12)
    if A_SCALE == 1 or A_SCALE == 2:
        a_mult = tl.math.div_rn(tl.full([TILE_M], 448.0, tl.float32), a_amax)

    if B_DESC == 2:  # GU_DOT: gate columns then up columns of one [TILE_M, 2 * BLOCK_N] accumulator (split after the loop)
        acc2 = tl.zeros([TILE_M, 2 * BLOCK_N], dtype=tl.float32)
    else:
        acc = tl.zeros([TILE_M, BLOCK_N], dtype=tl.float32)
        if GATED:
            acc_u = tl.zeros([TILE_M, BLOCK_N], dtype=tl.float32)
    if W_MODE == 6 or W_MODE == 7:
        # Packed e2m1 (mxfp4 / nvfp4): [BLOCK_N, BLOCK_K / 2] bytes and [BLOCK_N, BLOCK_K / SCALE_GROUP] scales per
        # K tile, decoded to bf16 in registers (_fp4_tile), one dot per tile (module doc).
        offs_kh = tl.arange(0, BLOCK_K // 2)
        offs_g = tl.arange(0, BLOCK_K // SCALE_GROUP)
        q_ptrs = b_base + offs_n[:, None] * stride_bn + offs_kh[None, :] * stride_bk
        qs_ptrs = s_base + offs_n[:, None] * stride_sn + offs_g[None, :] * stride_sk
        if GATED:
            qu_ptrs = q_ptrs + n_up * stride_bn
            qsu_ptrs = qs_ptrs + n_up * stride_sn
        else:                                # unused (_fp4_loads reads them only when GATED)
            qu_ptrs = q_ptrs
            qsu_ptrs = qs_ptrs
        if SWAP_AB:
            acc = tl.zeros([BLOCK_N, TILE_M], dtype=tl.float32)
            if GATED:
                acc_u = tl.zeros([BLOCK_N, TILE_M], dtype=tl.float32)
        if SPLIT_MODE == 2:                  # split-K reduction: the partials in a fixed order, then the epilogue
            ws_ptrs = ws_ptr + offs_r.to(tl.int64)[:, None] * stride_wsm + offs_cn[None, :]
            ws_mask = row_ok[:, None] & n_ok[None, :]
            for sk in range(0, SPLIT_K):
                acc += tl.load(ws_ptrs + sk * stride_wsk, mask=ws_mask, other=0.0)
                if GATED:
                    acc_u += tl.load(ws_ptrs + sk * stride_wsk + N, mask=ws_mask, other=0.0)
        elif GEMV:                           # few rows per block: weights decoded in registers, no tl.dot
            num_kt = tl.cdiv(K, BLOCK_K)
            if SPLIT_MODE == 1:              # this program's share of the K tiles
                per = tl.cdiv(num_kt, SPLIT_K)
                kb0 = pid_k * per
                kb1 = tl.minimum(kb0 + per, num_kt)
            else:
                kb0 = 0
                kb1 = num_kt
            q_ptrs += kb0 * (BLOCK_K // 2) * stride_bk
            qs_ptrs += kb0 * (BLOCK_K // SCALE_GROUP) * stride_sk
            if GATED:
                qu_ptrs += kb0 * (BLOCK_K // 2) * stride_bk
                qsu_ptrs += kb0 * (BLOCK_K // SCALE_GROUP) * stride_sk
            if TILE_M == 1:                 # one row (1 token): products summed over K tiles, reduced once at the end
                acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
                if GATED:
                    acc2u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
                a1_ptrs = a_ptr + tl.sum(a_row) * stride_am + offs_k
                a1_ok = (offs_k < BLOCK_K) & (tl.sum(row_ok.to(tl.int32)) > 0)
            if PREFETCH:                     # TILE_M 1: tile kb + 1's loads issued before tile kb's FMAs
                kf = tl.minimum(kb0, num_kt - 1)      # (a split with no K tile: loads in range, no iteration)
                qo = (BLOCK_K // 2) * stride_bk
                so = (BLOCK_K // SCALE_GROUP) * stride_sk
                q, qs, qu, qsu = _fp4_loads(q_ptrs + (kf - kb0) * qo, qs_ptrs + (kf - kb0) * so, qu_ptrs + (kf - kb0) * qo,
                                            qsu_ptrs + (kf - kb0) * so, K - kf * BLOCK_K, offs_kh, offs_g, EVEN_K, GATED,
                                            SCALE_GROUP)
                w = _fp4_tile(q, qs, W_MODE, SCALE_GROUP, FP4_ASM)
                wu = w
                if GATED:
                    wu = _fp4_tile(qu, qsu, W_MODE, SCALE_GROUP, FP4_ASM)
                a1 = _gemv_a1(a1_ptrs, kf, a1_ok, offs_k, K, EVEN_K, BLOCK_K)
                for kb in range(kb0, kb1):
                    kn = tl.minimum(kb + 1, kb1 - 1)
                    d = kn - kb0
                    qn, qsn, qun, qsun = _fp4_loads(q_ptrs + d * qo, qs_ptrs + d * so, qu_ptrs + d * qo, qsu_ptrs + d * so,
                                                    K - kn * BLOCK_K, offs_kh, offs_g, EVEN_K, GATED, SCALE_GROUP)
                    a1n = _gemv_a1(a1_ptrs, kn, a1_ok, offs_k, K, EVEN_K, BLOCK_K)
                    acc2 += w.to(tl.float32) * a1[None, :]
                    if GATED:
                        acc2u += wu.to(tl.float32) * a1[None, :]
                        wu = _fp4_tile(qun, qsun, W_MODE, SCALE_GROUP, FP4_ASM)
                    w = _fp4_tile(qn, qsn, W_MODE, SCALE_GROUP, FP4_ASM)
                    a1 = a1n
            else:
                for kb in range(kb0, kb1):
                    q, qs, qu, qsu = _fp4_loads(q_ptrs, qs_ptrs, qu_ptrs, qsu_ptrs, K - kb * BLOCK_K, offs_kh, offs_g,
                                                EVEN_K, GATED, SCALE_GROUP)
                    w = _fp4_tile(q, qs, W_MODE, SCALE_GROUP, FP4_ASM).to(tl.float32)
                    if GATED:
                        wu = _fp4_tile(qu, qsu, W_MODE, SCALE_GROUP, FP4_ASM).to(tl.float32)
                    if TILE_M == 1:
                        a1 = _gemv_a1(a1_ptrs, kb, a1_ok, offs_k, K, EVEN_K, BLOCK_K)
                        acc2 += w * a1[None, :]
                        if GATED:
                            acc2u += wu * a1[None, :]
                    elif GATED:
                        acc, acc_u = _gemv_rows(acc, acc_u, w, wu, a_ptr, a_row, row_ok, kb * BLOCK_K, K, stride_am,
                                                True, EVEN_K, TILE_M, BLOCK_K)
                    else:
                        acc, _ = _gemv_rows(acc, acc, w, w, a_ptr, a_row, row_ok, kb * BLOCK_K, K, stride_am,
                                            False, EVEN_K, TILE_M, BLOCK_K)
                    q_ptrs += (BLOCK_K // 2) * stride_bk
                    qs_ptrs += (BLOCK_K // SCALE_GROUP) * stride_sk
                    if GATED:
                        qu_ptrs += (BLOCK_K // 2) * stride_bk
                        qsu_ptrs += (BLOCK_K // SCALE_GROUP) * stride_sk
            if TILE_M == 1:
                acc = tl.reshape(tl.sum(acc2, 1), (1, BLOCK_N))
                if GATED:
                    acc_u = tl.reshape(tl.sum(acc2u, 1), (1, BLOCK_N))
        else:
            num_kt = tl.cdiv(K, BLOCK_K)
            if PREFETCH:    # MMA tiles: the block scales one K tile ahead, in registers (module doc)
                _, qs, _, qsu = _fp4_loads(q_ptrs, qs_ptrs, qu_ptrs, qsu_ptrs, K, offs_kh, offs_g, EVEN_K, GATED,
                                           SCALE_GROUP)
            for kb in range(0, num_kt):
                if EVEN_K:
                    a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
                else:
                    a = tl.load(a_ptrs, mask=row_ok[:, None] & (offs_k < K - kb * BLOCK_K)[None, :], other=0.0)
                if PREFETCH:  # this tile's codes (staged by the pipeliner), tile kb + 1's scales (the last: itself)
                    q, _, qu, _ = _fp4_loads(q_ptrs, qs_ptrs, qu_ptrs, qsu_ptrs, K - kb * BLOCK_K, offs_kh, offs_g,
                                             EVEN_K, GATED, SCALE_GROUP)
                    d = tl.minimum(kb + 1, num_kt - 1) - kb
                    _, qsn, _, qsun = _fp4_loads(q_ptrs, qs_ptrs + d * ((BLOCK_K // SCALE_GROUP) * stride_sk), qu_ptrs,
                                                 qsu_ptrs + d * ((BLOCK_K // SCALE_GROUP) * stride_sk),
                                                 K - (kb + d) * BLOCK_K, offs_kh, offs_g, EVEN_K, GATED, SCALE_GROUP)
                else:
                    q, qs, qu, qsu = _fp4_loads(q_ptrs, qs_ptrs, qu_ptrs, qsu_ptrs, K - kb * BLOCK_K, offs_kh, offs_g,
                                                EVEN_K, GATED, SCALE_GROUP)
                w = _fp4_tile(q, qs, W_MODE, SCALE_GROUP, FP4_ASM)
                if SWAP_AB:
                    acc = tl.dot(w, tl.trans(a), acc)
                else:
                    acc = tl.dot(a, tl.trans(w), acc)
                if GATED:
                    wu = _fp4_tile(qu, qsu, W_MODE, SCALE_GROUP, FP4_ASM)
                    if SWAP_AB:
                        acc_u = tl.dot(wu, tl.trans(a), acc_u)
                    else:
                        acc_u = tl.dot(a, tl.trans(wu), acc_u)
                if PREFETCH:
                    qs, qsu = qsn, qsun
                a_ptrs += BLOCK_K
                q_ptrs += (BLOCK_K // 2) * stride_bk
                qs_ptrs += (BLOCK_K // SCALE_GROUP) * stride_sk
                if GATED:
                    qu_ptrs += (BLOCK_K // 2) * stride_bk
                    qsu_ptrs += (BLOCK_K // SCALE_GROUP) * stride_sk
        if SWAP_AB:
            acc = tl.trans(acc)
            if GATED:
                acc_u = tl.trans(acc_u)
        if SPLIT_MODE != 1 and (W_MODE == 7 or FP4_ASM):  # in float32 (split-K: on the sum)
            if W_MODE == 7:                  # nvfp4: the expert's global scale
                gsc = tl.load(b_gscale_ptr + expert)
                if FP4_ASM:
                    gsc = gsc * _FP4_EPI_MUL    # and FP4_DECODE_ASM's 2^-FP4_EPI_LOG2 (exact)
            else:
                gsc = _FP4_EPI_MUL
            acc = acc * gsc
            if GATED:
                acc_u = acc_u * gsc
    else:
        for kb in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            else:
                k_ok = offs_k < K - kb * BLOCK_K
                a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            if B_DESC == 2:  # the gate and up tiles in one box (rows past n_up: TMA's zero fill, never stored)
                b2 = tl.trans(tl.reshape(b_ptr.load([b_plane, pid_n * BLOCK_N, kb * BLOCK_K]), [2 * BLOCK_N, BLOCK_K]))
            elif B_DESC:  # rows past this expert's N read the next rows or TMA's zero fill, K past K zeros: never stored
                b = tl.trans(b_ptr.load([b_row, kb * BLOCK_K]))
                if GATED:
                    bu = tl.trans(b_ptr.load([b_row + n_up, kb * BLOCK_K]))
            elif EVEN_K:
                b_mask = n_ok[None, :] & (offs_k < BLOCK_K)[:, None]
                b = tl.load(b_ptrs)
                if GATED:
                    bu = tl.load(bu_ptrs)
            else:
                b_mask = k_ok[:, None] & n_ok[None, :]
                b = tl.load(b_ptrs, mask=b_mask, other=0.0)
                if GATED:
                    bu = tl.load(bu_ptrs, mask=b_mask, other=0.0)
            if W_MODE == 0 or W_MODE == 1 or W_MODE == 2:
                if W_MODE == 0 or A_FP8:     # 16-bit, or FP8 quantized before the GEMM (row_quant): the values as stored
                    qa = a
                elif B_DESC == 2:
                    qa = tl.clamp(a.to(tl.float32) * a_mult[:, None], -448.0, 448.0).to(b2.dtype)
                else:
                    qa = tl.clamp(a.to(tl.float32) * a_mult[:, None], -448.0, 448.0).to(b.dtype)
                if B_DESC == 2:
                    acc2 = tl.dot(qa, b2, acc2)
                else:
                    acc = tl.dot(qa, b, acc)
                    if GATED:
                        acc_u = tl.dot(qa, bu, acc_u)
            elif W_MODE == 3:
                sa = tl.load(a_amax_ptr + a_row * stride_asm + kb, mask=row_ok, other=0.0)
                if SB_TILE:                  # the tile lies in one block of group_n rows: one weight scale per K step
                    sb1 = tl.load(s_base + ((pid_n * BLOCK_N) // group_n) * stride_sn + kb * stride_sk)
                    acc += tl.dot(a, b) * (sa * sb1)[:, None]
                    if GATED:
                        sbu1 = tl.load(s_base + ((pid_n * BLOCK_N + n_up) // group_n) * stride_sn + kb * stride_sk)
                        acc_u += tl.dot(a, bu) * (sa * sbu1)[:, None]
                else:
                    sb = tl.load(s_base + (offs_n // group_n) * stride_sn + kb * stride_sk, mask=n_ok, other=0.0)
                    acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
                    if GATED:
                        sbu = tl.load(s_base + ((offs_n + n_up) // group_n) * stride_sn + kb * stride_sk, mask=n_ok,
                                      other=0.0)
                        acc_u += tl.dot(a, bu) * sa[:, None] * sbu[None, :]
            else:
                if W_MODE == 4:
                    code = ((b >> b_shift) & 0xF).to(tl.int32)
                else:
                    code = b.to(tl.int32)
                z_base = b_zero_ptr + expert * stride_se
                if GROUP_TILE:      # the K tile lies in one group: one scale (and zero) per column
                    g0 = (kb * BLOCK_K) // group_k
                    sc = tl.load(s_base + offs_n * stride_sn + g0 * stride_sk, mask=n_ok, other=0.0)[None, :]
                    if HAS_ZERO:
                        z = tl.load(z_base + offs_n * stride_sn + g0 * stride_sk, mask=n_ok, other=0).to(tl.int32)[None, :]
                    else:
                        z = ZERO_DEFAULT
                else:
                    grp = (kb * BLOCK_K + offs_k) // group_k
                    sc = tl.load(s_base + offs_n[None, :] * stride_sn + grp[:, None] * stride_sk, mask=b_mask, other=0.0)
                    if HAS_ZERO:
                        z = tl.load(z_base + offs_n[None, :] * stride_sn + grp[:, None] * stride_sk,
                                    mask=b_mask, other=0).to(tl.int32)
                    else:
                        z = ZERO_DEFAULT
                acc = tl.dot(a, ((code - z).to(tl.float32) * sc).to(a.dtype), acc)
                if GATED:
                    if W_MODE == 4:
                        code_u = ((bu >> b_shift) & 0xF).to(tl.int32)
                    else:
                        code_u = bu.to(tl.int32)
                    if GROUP_TILE:
                        scu = tl.load(s_base + (offs_n + n_up) * stride_sn + g0 * stride_sk, mask=n_ok, other=0.0)[None, :]
                        if HAS_ZERO:
                            zu = tl.load(z_base + (offs_n + n_up) * stride_sn + g0 * stride_sk, mask=n_ok,
                                         other=0).to(tl.int32)[None, :]
                        else:
                            zu = ZERO_DEFAULT
                    else:
                        scu = tl.load(s_base + (offs_n + n_up)[None, :] * stride_sn + grp[:, None] * stride_sk,
                                      mask=b_mask, other=0.0)
                        if HAS_ZERO:
                            zu = tl.load(z_base + (offs_n + n_up)[None, :] * stride_sn + grp[:, None] * stride_sk,
                                         mask=b_mask, other=0).to(tl.int32)
                        else:
                            zu = ZERO_DEFAULT
                    acc_u = tl.dot(a, ((code_u - zu).to(tl.float32) * scu).to(a.dtype), acc_u)
            a_ptrs += BLOCK_K
            if not B_DESC:   # a descriptor is addressed by tile coordinates, not advanced
                if W_MODE == 4:
                    b_ptrs += (BLOCK_K // 2) * stride_bk
                    if GATED:
                        bu_ptrs += (BLOCK_K // 2) * stride_bk
                else:
                    b_ptrs += BLOCK_K * stride_bk
                    if GATED:
                        bu_ptrs += BLOCK_K * stride_bk

    if B_DESC == 2:  # gate columns [0, BLOCK_N), up columns [BLOCK_N, 2 BLOCK_N): the two accumulators of GATED
        acc, acc_u = tl.split(tl.permute(tl.reshape(acc2, [TILE_M, 2, BLOCK_N]), (0, 2, 1)))
    if SPLIT_MODE == 1:                      # split-K partial sums (float32, before the epilogue)
        ws_ptrs = ws_ptr + pid_k * stride_wsk + offs_r.to(tl.int64)[:, None] * stride_wsm + offs_cn[None, :]
        ws_mask = row_ok[:, None] & n_ok[None, :]
        tl.store(ws_ptrs, acc, mask=ws_mask)
        if GATED:
            tl.store(ws_ptrs + N, acc_u, mask=ws_mask)
    else:
        if W_MODE == 1 or W_MODE == 2:
            sa = a_amax * (1.0 / 448.0)          # the dequantization scale (an ulp here changes no rounding)
            if W_MODE == 1:
                sb = tl.load(s_base) + tl.zeros([BLOCK_N], dtype=tl.float32)
                sbu = sb
            else:
                sb = tl.load(s_base + offs_n * stride_sn, mask=n_ok, other=0.0)
                if GATED:
                    sbu = tl.load(s_base + (offs_n + n_up) * stride_sn, mask=n_ok, other=0.0)
            acc = acc * sa[:, None] * sb[None, :]
            if GATED:
                acc_u = acc_u * sa[:, None] * sbu[None, :]
        if HAS_BIAS:
            bias_base = bias_ptr + expert * stride_bias_e
            if BIAS_BEFORE_WEIGHT:
                acc += tl.load(bias_base + offs_n, mask=n_ok, other=0.0)[None, :]
        if MUL_WEIGHT:
            w = tl.load(weight_ptr + slot, mask=row_ok, other=0.0)
            acc = acc * w[:, None]
            if GATED:
                acc_u = acc_u * w[:, None]
        if HAS_BIAS:
            if not BIAS_BEFORE_WEIGHT:
                acc += tl.load(bias_base + offs_n, mask=n_ok, other=0.0)[None, :]
                if GATED:
                    acc_u += tl.load(bias_base + n_up + offs_n, mask=n_ok, other=0.0)[None, :]
        if ACT != 0:
            if GATED:
                acc = _activation(acc, acc_u, swiglu_limit, ACT)
            else:
                acc = _activation(acc, acc, swiglu_limit, ACT)
        c_mask = row_ok[:, None] & n_ok[None, :]
        if C_AMAX == 1:
            tl.atomic_max(c_amax_ptr + offs_r, tl.max(tl.where(c_mask, tl.abs(acc), 0.0), 1), mask=row_ok)
        elif C_AMAX == 2:
            tl.atomic_max(c_amax_ptr, tl.max(tl.max(tl.where(c_mask, tl.abs(acc), 0.0), 1), 0))
        if C_BY_SLOT:
            c_row = slot.to(tl.int64)
        else:
            c_row = offs_r.to(tl.int64)
        if C_AMAX == 3:
            NG: tl.constexpr = BLOCK_N // Q_GROUP
            g_abs = tl.reshape(tl.where(c_mask, tl.abs(acc), 0.0), (TILE_M, NG, Q_GROUP))
            g_amax = tl.maximum(tl.max(g_abs, 2), 1e-12)
            g_mult = tl.math.div_rn(tl.full([TILE_M, NG], 448.0, tl.float32), g_amax)
            q = tl.reshape(acc, (TILE_M, NG, Q_GROUP)) * g_mult[:, :, None]
            acc = tl.reshape(tl.clamp(q, -448.0, 448.0), (TILE_M, BLOCK_N))
            g_idx = pid_n * NG + tl.arange(0, NG)
            tl.store(c_amax_ptr + c_row[:, None] * stride_csm + g_idx[None, :],
                     tl.math.div_rn(g_amax, tl.full([TILE_M, NG], 448.0, tl.float32)),
                     mask=row_ok[:, None] & (g_idx * Q_GROUP < N)[None, :])
        tl.store(c_ptr + c_row[:, None] * stride_cm + offs_cn[None, :], acc.to(c_ptr.dtype.element_ty), mask=c_mask)


moe_gemm_kernel = _kernel(do_not_specialize=["num_slots"])(_moe_gemm_kernel)


def moe_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, align: Alignment, *, top_k: int, n_out: int,
             gather: bool, by_slot: bool, w_mode: int, activation: str | None = None, gated: bool = False,
             weight: torch.Tensor | None = None, a_amax: torch.Tensor | None = None, a_scale_mode: int = 0,
             c_amax: torch.Tensor | None = None, c_amax_mode: int = 0, b_scale: torch.Tensor | None = None,
             b_zero: torch.Tensor | None = None, zero_default: int = 0, group_k: int = 0, group_n: int = 1,
             swiglu_limit: float = 7.0, bias: torch.Tensor | None = None, bias_before_weight: bool = False,
             b_gscale: torch.Tensor | None = None, fp4_asm: bool | None = None, config: dict, warmup: bool = False):
    """Launch one grouped GEMM over the sorted rows of ``align`` (module doc, steps 2 and 3).

    ``a [rows_a, Ka]`` contiguous (16-bit; fp8 formats: any float dtype, quantized in the kernel, or, for
    fp8_tensor/fp8_channel, e4m3 already quantized by :func:`row_quant` from the same ``a_amax``);
    ``b [E, N_b, K]`` contiguous (int4: ``[E, N_b, K/2]`` uint8); ``c [rows_c, n_out]`` contiguous,
    written in its dtype. ``gated``: the up rows of ``b`` start at ``n_out``. ``weight [S]`` float32:
    routing weights multiplied into the rows. ``b_scale``: ``[E]`` (W_MODE 1), ``[E, N_b]`` (2),
    ``[E, ceil(N_b/group_n), ceil(K/group_k)]`` (3), ``[E, N_b, K/group_k]`` (4, 5) float32, with
    ``b_zero`` uint8 of the same shape or None (``zero_default``). ``bias [E, N_b]`` float32 contiguous:
    expert biases added to each output row (the up rows' at ``n_out + n`` when gated), before the
    routing weight with ``bias_before_weight``, else after it. ``config``: ``BLOCK_N``, ``BLOCK_K``,
    ``GROUP_M``, ``num_warps``, ``num_stages`` (``BLOCK_M`` is ``align.block_m``; ``EVEN_K`` False forces the
    masked K loop, for measurements: benchmarks/gemm_profile.py). fp8_block
    (``w_mode`` 3): ``a`` is e4m3 with ``a_amax`` = its scales ``[rows_a, ceil(Ka/group_k)]`` float32
    (``a_scale_mode`` 3); ``c_amax_mode`` 3 stores ``c`` as e4m3 with ``c_amax`` = scales ``[rows_c,
    ceil(n_out/group_k)]``. Raises ValueError on an fp8_block config whose BLOCK_K is not ``group_k``
    or (``c_amax_mode`` 3) whose BLOCK_N is not a multiple of it. mxfp4 / nvfp4 (``w_mode`` 6 / 7): ``b [E, N_b,
    K/2]`` uint8 packed e2m1, ``b_scale [E, N_b, K/group_k]`` uint8 (e8m0, or e4m3 viewed as uint8),
    ``b_gscale [E]`` float32 (nvfp4), ``a`` bf16; ``fp4_asm``: ``b`` is in the shuffled layout (:func:`fp4_shuffle`)
    and the GPU decode (:data:`FP4_DECODE_ASM`) reads it; else ``b`` is canonical and decoded portably (default:
    the GPU decode unless under the interpreter); config ``SWAP_AB`` (optional): the transposed tile, with the portable
    decode only (ValueError :data:`SWAP_AB_ASM_ERROR` with the GPU decode); raises ValueError when ``BLOCK_K`` is not a
    multiple of ``group_k``. Config ``GEMV`` (packed FP4 only; required below ``BLOCK_M``
    16, allowed up to :data:`GEMV_MAX_BLOCK_M`): the kernel's GEMV mode (no ``tl.dot``; the real rows of each
    block in registers), with ``SPLIT_K`` (optional, default 1): that many programs per output tile over the K
    tiles, writing float32 partial sums to a workspace ``[SPLIT_K, rows, N_b]`` (allocated here), then a second
    launch of the same kernel sums them in a fixed order and runs the epilogue (``BLOCK_N``
    :data:`GEMV_REDUCE_BLOCK_N`, 4 warps), and ``PREFETCH`` (optional, ``BLOCK_M`` 1): the next K tile's loads issued
    before this tile's FMAs (a register double buffer; the same sums in the same order). Raises ValueError for GEMV on
    another format, GEMV with SWAP_AB, SPLIT_K without GEMV, or a ``BLOCK_M`` below 16 without GEMV. Config ``TMA``
    (weight modes :data:`TMA_W_MODES`: 16-bit and FP8): the weight tiles are loaded through a TMA tensor descriptor
    built here over ``b`` viewed ``[E * N_b, K]`` (``triton.tools.tensor_descriptor.TensorDescriptor``; a CUDA-graph
    capture keeps it, since it holds the weights' address); raises ValueError for another weight mode, GEMV, or
    weights that are not contiguous with rows of a multiple of 16 bytes (TMA's stride rule). Config ``GU_DOT`` (with
    ``TMA``, the gated first GEMM of :data:`GU_DOT_W_MODES`): the gate and up tiles in one TMA box and one MMA of
    ``2 * BLOCK_N`` columns per K step (the kernel's B_DESC 2), the same sums per output element; raises ValueError
    otherwise. Config ``MIN_M``
    (optional, 0 off): blocks whose rows from ``MIN_M`` on are padding run as ``[MIN_M, BLOCK_N]`` tiles (the kernel's
    MIN_M); raises ValueError unless it is a power of two from 16 below ``BLOCK_M``, of the MMA tiles (not GEMV), and
    for FP8 weights at least :data:`FP8_MIN_M`."""
    if config.get("WGMMA"):      # the second GEMM through the Gluon wgmma kernel (sm90)
        if gather or activation is not None or gated or c_amax_mode or b_zero is not None or b_gscale is not None \
                or (bias is not None and not bias_before_weight):
            raise ValueError("WGMMA is the second GEMM's option: no gather, activation, gate, output amax, zero points, "
                             "global scale, or bias after the routing weight")
        from . import triton_moe_wgmma
        return triton_moe_wgmma.moe_gemm_wgmma(a, b, c, align, n_out=n_out, by_slot=by_slot, w_mode=w_mode,
                                               a_amax=a_amax, a_scale_mode=a_scale_mode, b_scale=b_scale, bias=bias,
                                               weight=weight, config=config, warmup=warmup)
    dev = a.device
    k = a.shape[1]
    bm, bn, bk = align.block_m, config["BLOCK_N"], config["BLOCK_K"]
    gemv = bool(config.get("GEMV"))
    split_k = int(config.get("SPLIT_K", 1))
    if gemv and w_mode not in FP4_MODES:
        raise ValueError(f"GEMV is an option of packed-FP4 weights (mxfp4, nvfp4), not weight mode {w_mode}")
    if gemv and config.get("SWAP_AB"):
        raise ValueError("GEMV and SWAP_AB exclude each other (GEMV has no MMA tile)")
    if gemv and bm > GEMV_MAX_BLOCK_M:
        raise ValueError(f"GEMV unrolls the block's rows: BLOCK_M must be at most {GEMV_MAX_BLOCK_M}, got {bm}")
    if fp4_asm is None:
        fp4_asm = not interpreting()
    if config.get("SWAP_AB") and w_mode in FP4_MODES and fp4_asm:
        raise ValueError(SWAP_AB_ASM_ERROR)
    if not gemv and bm < 16:
        raise ValueError(f"BLOCK_M {bm} is below the MMA tile's 16 rows: only the GEMV mode (config GEMV) runs it")
    if split_k < 1 or (split_k > 1 and not gemv):
        raise ValueError(f"SPLIT_K {split_k}: a positive split of the GEMV mode only (config GEMV)")
    if w_mode == 3 and bk != group_k:
        raise ValueError(f"fp8_block needs BLOCK_K == the block's K size ({group_k}), got {bk}")
    if w_mode in FP4_MODES and (bk % group_k or group_k not in (16, 32)):
        raise ValueError(f"packed FP4 weights: BLOCK_K must be a multiple of the scale group ({group_k}), got {bk}")
    if w_mode in FP4_MODES and w_mode == 7 and b_gscale is None:
        raise ValueError("nvfp4 needs its per-expert global scale (b_gscale)")
    a_fp8 = a.dtype == torch.float8_e4m3fn and w_mode in (1, 2)
    if a_fp8 and a_scale_mode not in (1, 2):
        raise ValueError("an e4m3 A of fp8_tensor/fp8_channel needs its amax (a_scale_mode 1 or 2): row_quant's input")
    tma = bool(config.get("TMA"))
    gu_dot = bool(config.get("GU_DOT"))
    if gu_dot and not (tma and gated and w_mode in GU_DOT_W_MODES and b.shape[1] == 2 * n_out and split_k == 1
                       and not config.get("SWAP_AB")):
        raise ValueError(f"GU_DOT (the gate and up tiles as one MMA) is an option of the gated first GEMM with TMA, weight "
                         f"modes {GU_DOT_W_MODES} (16-bit, fp8_tensor, fp8_channel), gate and up rows [E, 2 * {n_out}, K], "
                         f"no SPLIT_K or SWAP_AB; got TMA {tma}, gated {gated}, weight mode {w_mode}, b {tuple(b.shape)}")
    if tma and (w_mode not in TMA_W_MODES or gemv):
        raise ValueError(f"TMA (weights through a tensor descriptor) is an option of the 16-bit and FP8 weight modes "
                         f"{TMA_W_MODES}, not weight mode {w_mode}{' with GEMV' if gemv else ''}")
    if tma and (not b.is_contiguous() or (b.shape[2] * b.element_size()) % 16 or b.data_ptr() % 16):
        raise ValueError(f"TMA needs contiguous weights with 16-byte aligned rows: b {tuple(b.shape)} {b.dtype}, "
                         f"row {b.shape[2] * b.element_size()} bytes")
    if c_amax_mode == 3 and bn % group_k:
        raise ValueError(f"fp8_block's first GEMM quantizes its output per group of {group_k} columns: BLOCK_N "
                         f"must be a multiple of {group_k}, got {bn}")
    prefetch = bool(config.get("PREFETCH"))
    gluon = bool(config.get("GLUON"))
    if gluon and not (gemv and bm == 1 and split_k == 1 and not prefetch and fp4_asm and w_mode in FP4_MODES):
        raise ValueError(f"GLUON (the Gluon GEMV, backends/triton_moe_gluon.py) is an option of the packed-FP4 GEMV "
                         f"mode at BLOCK_M 1 with the PTX decode, without SPLIT_K or PREFETCH; got BLOCK_M {bm}, "
                         f"GEMV {gemv}, SPLIT_K {split_k}, PREFETCH {prefetch}, weight mode {w_mode}, "
                         f"PTX decode {bool(fp4_asm)}")
    if prefetch and not ((gemv and bm == 1) or (not gemv and w_mode in FP4_MODES)):
        raise ValueError(f"PREFETCH (the next K tile's loads before this one's FMAs or MMAs) is an option of the GEMV mode "
                         f"at BLOCK_M 1 and of the packed-FP4 MMA tiles, not of "
                         f"{'GEMV at BLOCK_M ' + str(bm) if gemv else 'weight mode ' + str(w_mode)}")
    min_m = int(config.get("MIN_M", 0))
    if min_m and (gemv or min_m < 16 or min_m >= bm or min_m & (min_m - 1)):
        raise ValueError(f"MIN_M {min_m}: a power of two from 16 below BLOCK_M ({bm}), of the MMA tiles (not GEMV)")
    if min_m and min_m < FP8_MIN_M and w_mode in (1, 2, 3):
        raise ValueError(f"MIN_M {min_m}: FP8 tiles need MIN_M >= {FP8_MIN_M} ({FP8_MIN_M_WHY})")
    grid = (align.max_blocks * triton.cdiv(n_out, bn),)
    scale = b_scale if b_scale is not None else b
    strides: tuple[int, ...]
    if b_scale is not None and b_scale.dim() == 1:
        strides = (b_scale.stride(0), 0, 0)
    elif b_scale is not None and b_scale.dim() == 2:
        strides = (b_scale.stride(0), b_scale.stride(1), 0)
    elif b_scale is not None:
        strides = tuple(b_scale.stride())
    else:
        strides = (0, 0, 0)
    dummy = align.num_rows
    ws = None
    if split_k > 1 or gluon:  # float32 partial sums per split, sorted row and column (gate then up columns)
        ws = torch.empty(split_k, align.rows, 2 * n_out if gated else n_out, dtype=torch.float32, device=dev)
    if gu_dot:   # plane 2e: expert e's gate rows, 2e + 1 its up rows
        b_arg = TensorDescriptor.from_tensor(b.view(2 * b.shape[0], n_out, b.shape[2]), [2, bn, bk])
    else:
        b_arg = TensorDescriptor.from_tensor(b.view(-1, b.shape[2]), [bn, bk]) if tma else b
    args = (
        a, b_arg, c, a_amax if a_amax is not None else dummy, scale,
        b_zero if b_zero is not None else scale, b_gscale if b_gscale is not None else dummy,
        c_amax if c_amax is not None else dummy,
        weight if weight is not None else dummy, bias if bias is not None else dummy,
        align.sorted_slots, align.block_expert, align.num_rows, ws if ws is not None else dummy,
        align.num_slots, top_k, n_out, k, n_out if gated else 0,
        a.stride(0), b.stride(0), b.stride(1), b.stride(2), c.stride(0), bias.stride(0) if bias is not None else 0,
        *strides,
        a_amax.stride(0) if a_amax is not None and a_scale_mode == 3 else 0,
        c_amax.stride(0) if c_amax is not None and c_amax_mode == 3 else 0,
        ws.stride(0) if ws is not None else 0, ws.stride(1) if ws is not None else 0,
        group_k, group_n, float(swiglu_limit))
    consts = dict(
        A_GATHER=gather, C_BY_SLOT=by_slot, GATED=gated, ACT=0 if activation is None else ACTIVATIONS[activation],
        MUL_WEIGHT=weight is not None, W_MODE=w_mode, A_SCALE=a_scale_mode, C_AMAX=c_amax_mode,
        HAS_ZERO=b_zero is not None, ZERO_DEFAULT=zero_default, Q_GROUP=group_k if c_amax_mode == 3 else 1,
        GROUP_TILE=w_mode in (4, 5) and group_k % bk == 0, EVEN_K=config.get("EVEN_K", True) and k % bk == 0,
        HAS_BIAS=bias is not None, BIAS_BEFORE_WEIGHT=bias_before_weight,
        SCALE_GROUP=group_k if w_mode in FP4_MODES else 1, FP4_ASM=bool(fp4_asm) and w_mode in FP4_MODES,
        SWAP_AB=bool(config.get("SWAP_AB")) and w_mode in FP4_MODES, GEMV=gemv, PREFETCH=prefetch, A_FP8=a_fp8, B_DESC=2 if gu_dot else int(tma),
        SB_TILE=w_mode == 3 and bm >= SB_TILE_MIN_BLOCK_M and group_n % bn == 0 and (not gated or n_out % group_n == 0),
        MIN_M=min_m, BLOCK_M=bm, BLOCK_K=bk, GROUP_M=config["GROUP_M"], warmup=warmup)
    if gluon:                # the Gluon GEMV writes the sums, the reduction below runs the epilogue
        from . import triton_moe_gluon
        assert ws is not None
        triton_moe_gluon.fp4_gemv_partials(a, b, scale, ws, align, top_k=top_k, n_rows=ws.shape[2], gather=gather,
                                           w_mode=w_mode, config=config, warmup=warmup)
    elif split_k == 1:
        return moe_gemm_kernel.launch(grid, dev, *args, **consts, SPLIT_MODE=0, SPLIT_K=1, BLOCK_N=bn,
                                      num_warps=config["num_warps"], num_stages=config["num_stages"])
    else:
        moe_gemm_kernel.launch((grid[0] * split_k,), dev, *args, **consts, SPLIT_MODE=1, SPLIT_K=split_k,
                               BLOCK_N=bn, num_warps=config["num_warps"], num_stages=config["num_stages"])
    rbn = max(bn, min(GEMV_REDUCE_BLOCK_N, _pow2(n_out)))      # the reduction: wide rows, vector stores
    return moe_gemm_kernel.launch((align.max_blocks * triton.cdiv(n_out, rbn),), dev, *args, **consts, SPLIT_MODE=2,
                                  SPLIT_K=split_k, BLOCK_N=rbn, num_warps=4, num_stages=1)


# ------------------------------------------------------------------------------------------------
# 2b. packed FP4 at few tokens: the direct GEMVs (no sort, the top-k sum fused into the second GEMM)
# ------------------------------------------------------------------------------------------------

@triton.jit
def _fp4_direct_load(q_ptr, s_ptr, q_off, s_off, k_left, offs_gc, offs_g, ok, SCALE_GROUP: tl.constexpr,
                     EVEN_K: tl.constexpr):
    """One K tile of packed e2m1 weights for :func:`_fp4_direct_kernel`: ``q`` loaded as ``[BN, G, CH/4, 4]`` bytes
    (``G`` scale groups of ``CH = SCALE_GROUP / 2`` bytes, 4 bytes = one 32-bit word innermost) and the scale bytes as
    ``[BN, G]``, masked to the ``k_left`` elements left along K unless EVEN_K, and to nothing where ``ok`` (a scalar)
    is false (zeros: a slot of another rank's expert)."""
    if EVEN_K:
        q = tl.load(q_ptr + q_off, mask=ok, other=0)
        qs = tl.load(s_ptr + s_off, mask=ok, other=0)
    else:
        q = tl.load(q_ptr + q_off, mask=ok & (offs_gc < k_left // 2)[None, :, :, :], other=0)
        qs = tl.load(s_ptr + s_off, mask=ok & (offs_g < k_left // SCALE_GROUP)[None, :], other=0)
    return q, qs


@triton.jit
def _fp4_direct_a(a_ptr, a_off, k_left, offs_gc, ok, EVEN_K: tl.constexpr):
    """The A row's 32-bit words (bf16 pairs) of one K tile, ``[BN, G, CH/4, 4]`` int32 (the same words for every row:
    one register layout with the weight bytes), masked like :func:`_fp4_direct_load`."""
    if EVEN_K:
        return tl.load(a_ptr + a_off, mask=ok, other=0)
    return tl.load(a_ptr + a_off, mask=ok & (offs_gc < k_left // 2)[None, :, :, :], other=0)


@triton.jit
def _fp4_direct_decode(q, qs, W_MODE: tl.constexpr, FP4_ASM: tl.constexpr):
    """``q`` and ``qs`` from :func:`_fp4_direct_load` decoded to float32 pairs ``(lo, hi)``, ``[BN, G, CH/4, 4]``: the
    values of codes ``2j`` and ``2j + 1`` of byte ``j`` times their scale (times ``2^-FP4_EPI_LOG2`` with FP4_ASM,
    :func:`_fp4_tile`), exactly."""
    BN: tl.constexpr = q.shape[0]
    G: tl.constexpr = q.shape[1]
    CH4: tl.constexpr = q.shape[2]
    if FP4_ASM:
        s2 = _fp4_scale_operand(qs, W_MODE)
        w2 = tl.inline_asm_elementwise(FP4_DECODE_ASM, "=r,=r,=r,=r,r,r,r,r,r",
                                       [q, tl.broadcast_to(s2[:, :, None, None], (BN, G, CH4, 4))], dtype=tl.int32,
                                       is_pure=True, pack=4)
        lo = (w2 << 16).to(tl.float32, bitcast=True)
        hi = (w2 & -65536).to(tl.float32, bitcast=True)
    else:
        if W_MODE == 6:
            sf = (qs.to(tl.uint32) << 23).to(tl.float32, bitcast=True)     # 2^(s - 127); 0 stays 0
        else:
            sf = qs.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        sb = tl.broadcast_to(sf[:, :, None, None], (BN, G, CH4, 4))
        lo = _e2m1_f32(q & 0xF) * sb
        hi = _e2m1_f32(q >> 4) * sb
    return lo, hi


@triton.jit
def _fp4_direct_fma(acc, lo, hi, aw):
    """``acc [BN, G, CH/4, 4] += w * a`` for one K tile of :func:`_fp4_direct_kernel`: ``(lo, hi)`` the decoded weights
    (:func:`_fp4_direct_decode`), ``aw`` the A words (:func:`_fp4_direct_a`, bf16 pairs); two FMAs per weight byte.
    Returns ``acc``."""
    acc += lo * (aw << 16).to(tl.float32, bitcast=True)
    acc += hi * (aw & -65536).to(tl.float32, bitcast=True)
    return acc


@triton.jit
def _fp4_direct_pair(it, num_kt, row, top_k, ids_ptr, expert_offset, num_local, q_ptr, s_ptr, a_ptr, stride_qe,
                     stride_se, stride_aw, q_off, s_off, a_off, offs_gc, offs_g, K, W_MODE: tl.constexpr,
                     SCALE_GROUP: tl.constexpr, FP4_ASM: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """The loads of pair ``it`` of the second GEMM's flattened (slot ``j = it // num_kt``, K tile ``it % num_kt``)
    loop in :func:`_fp4_direct_kernel` (PREFETCH): the decoded weights and the A words ``(lo, hi, aw)`` of token
    ``row``'s slot ``j``; zeros for a slot of another rank's expert (or -1), whose loads are masked off."""
    j = it // num_kt
    kb = it - j * num_kt
    slot = row * top_k + j
    e = tl.load(ids_ptr + slot).to(tl.int32) - expert_offset
    ok = (e >= 0) & (e < num_local)
    e64 = tl.where(ok, e, 0).to(tl.int64)
    k_left = K - kb * BLOCK_K
    q, qs = _fp4_direct_load(q_ptr + e64 * stride_qe + kb * (BLOCK_K // 2),
                             s_ptr + e64 * stride_se + kb * (BLOCK_K // SCALE_GROUP), q_off, s_off, k_left, offs_gc,
                             offs_g, ok, SCALE_GROUP, EVEN_K)
    aw = _fp4_direct_a(a_ptr + slot.to(tl.int64) * stride_aw + kb * (BLOCK_K // 2), a_off, k_left, offs_gc, ok, EVEN_K)
    lo, hi = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
    return lo, hi, aw


def _fp4_direct_kernel(
        a_ptr, q_ptr, s_ptr, gs_ptr, post_gs_ptr, bias_ptr, ids_ptr, tw_ptr, c_ptr, ws_ptr, cnt_ptr,
        top_k, N, K, n_up, expert_offset, num_local,
        stride_aw, stride_qe, stride_qn, stride_se, stride_sn, stride_bias_e, stride_cm, swiglu_limit,
        SUM_TOPK: tl.constexpr, SPLIT_SLOTS: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr, MUL_WEIGHT: tl.constexpr,
        POST_WEIGHT: tl.constexpr, POST_GS: tl.constexpr, HAS_BIAS: tl.constexpr, W_MODE: tl.constexpr,
        SCALE_GROUP: tl.constexpr, FP4_ASM: tl.constexpr, EVEN_K: tl.constexpr, PREFETCH: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    """One ``BLOCK_N`` strip of output columns of a packed-FP4 GEMV that reads the routing slots directly (no sort).

    The A rows are read as 32-bit words (``a_ptr``: the bf16 rows viewed int32, ``stride_aw`` words per row), so each
    word holds the two activations of one weight byte. Weights ``q [E, N_b, K/2]`` uint8 (shuffled when FP4_ASM),
    scale bytes ``s [E, N_b, K/SCALE_GROUP]`` (the kernel's bytes when FP4_ASM, :func:`_fp4_tile`), ``gs [E]`` float32
    (nvfp4's global scale). Each K tile accumulates ``w * a`` into a float32 ``[BLOCK_N, G, CH/4, 4]`` tile (one FMA
    per weight), reduced once after the loop.

    - SUM_TOPK false (the first GEMM): program ``slot * cdiv(N, BLOCK_N) + pid_n`` over the slots ``S = T * top_k``;
      a slot of another rank's expert returns at once. ``c[slot, n] = post * act(gate, up)`` (GATED: up rows at
      ``n_up + n``) with the epilogue of :func:`_moe_gemm_kernel`'s first GEMM (global scale, routing weight when
      MUL_WEIGHT, bias after it), times ``post``: the factors the second GEMM would apply per slot (POST_WEIGHT: the
      routing weight ``tw[slot]``; POST_GS: the second GEMM's global scale ``post_gs[e]``), stored bf16 ``[S, N]``.
    - SUM_TOPK (the second GEMM and the top-k sum): program ``t * cdiv(N, BLOCK_N) + pid_n`` over the tokens; the
      loops run over the token's ``top_k`` slots and their K tiles (slots of other ranks' experts load nothing);
      ``c[t, n] = sum_k (act_k @ w2[e].T) + sum_k weight_k * bias_e`` (weight 1 without MUL_WEIGHT) in float32,
      stored in ``c``'s dtype: with the first GEMM's ``post``, the second GEMM of the unfused layer and its top-k
      sum. SPLIT_SLOTS: ``top_k`` programs per strip instead, one per slot (program ``strip * top_k + j``), each
      storing its float32 partial at ``ws[slot, n]`` and counting itself in ``cnt[t * cdiv(N, BLOCK_N) + pid_n]``
      (a CTA barrier, then one acquire-release atomic); the strip's last program sums the ``top_k`` partials in slot
      order (the same order whichever program is last: deterministic), stores ``c`` and sets the counter back to 0
      (so ``cnt``, zeros before the first launch, needs no reset between launches or graph replays)."""
    pid = tl.program_id(0)
    if SPLIT_SLOTS:
        j_split = pid % top_k
        pid = pid // top_k
    num_pid_n = tl.cdiv(N, BLOCK_N)
    row = pid // num_pid_n
    pid_n = pid % num_pid_n
    CH: tl.constexpr = SCALE_GROUP // 2
    G: tl.constexpr = BLOCK_K // SCALE_GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_nr = offs_n % N
    offs_g = tl.arange(0, G)
    CH4: tl.constexpr = CH // 4
    # byte (= A word) within the K tile, [G, CH4, 4]: 4 bytes (one 32-bit word of 8 codes) innermost, so that the
    # weight bytes and the A words (loaded with the same shape, not broadcast) get the same register layout
    offs_gc = (offs_g[:, None, None] * CH + tl.arange(0, CH4)[None, :, None] * 4 + tl.arange(0, 4)[None, None, :])
    q_off = offs_nr[:, None, None, None] * stride_qn + offs_gc[None, :, :, :]
    a_off = offs_gc[None, :, :, :] + 0 * offs_nr[:, None, None, None]
    s_off = offs_nr[:, None] * stride_sn + offs_g[None, :]
    num_kt = tl.cdiv(K, BLOCK_K)
    acc = tl.zeros([BLOCK_N, G, CH4, 4], dtype=tl.float32)
    if SUM_TOPK:
        if SPLIT_SLOTS:
            j0 = j_split
            j1 = j_split + 1
        else:
            j0 = 0
            j1 = top_k
        if PREFETCH:     # the (slot, K tile) pairs in one loop; the next pair's loads issued before this one's FMAs
            it0 = j0 * num_kt
            it1 = j1 * num_kt
            lo, hi, aw = _fp4_direct_pair(it0, num_kt, row, top_k, ids_ptr, expert_offset, num_local, q_ptr, s_ptr,
                                          a_ptr, stride_qe, stride_se, stride_aw, q_off, s_off, a_off, offs_gc, offs_g,
                                          K, W_MODE, SCALE_GROUP, FP4_ASM, EVEN_K, BLOCK_K)
            for it in range(it0, it1):
                lon, hin, awn = _fp4_direct_pair(tl.minimum(it + 1, it1 - 1), num_kt, row, top_k, ids_ptr,
                                                 expert_offset, num_local, q_ptr, s_ptr, a_ptr, stride_qe, stride_se,
                                                 stride_aw, q_off, s_off, a_off, offs_gc, offs_g, K, W_MODE,
                                                 SCALE_GROUP, FP4_ASM, EVEN_K, BLOCK_K)
                acc = _fp4_direct_fma(acc, lo, hi, aw)
                lo = lon
                hi = hin
                aw = awn
        else:
            for j in range(j0, j1):
                slot = row * top_k + j
                e = tl.load(ids_ptr + slot).to(tl.int32) - expert_offset
                if (e >= 0) & (e < num_local):
                    q_base = q_ptr + e.to(tl.int64) * stride_qe
                    s_base = s_ptr + e.to(tl.int64) * stride_se
                    a_base = a_ptr + slot.to(tl.int64) * stride_aw
                    for kb in tl.range(0, num_kt, num_stages=NUM_STAGES):
                        k_left = K - kb * BLOCK_K
                        q, qs = _fp4_direct_load(q_base + kb * (BLOCK_K // 2), s_base + kb * (BLOCK_K // SCALE_GROUP),
                                                 q_off, s_off, k_left, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                        aw = _fp4_direct_a(a_base + kb * (BLOCK_K // 2), a_off, k_left, offs_gc, True, EVEN_K)
                        lo, hi = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
                        acc = _fp4_direct_fma(acc, lo, hi, aw)
        out = tl.sum(tl.sum(tl.sum(acc, 3), 2), 1)
        if FP4_ASM:
            out = out * _FP4_EPI_MUL
        if HAS_BIAS:                     # sum_k weight_k * bias_e
            for j in range(j0, j1):
                slot = row * top_k + j
                e = tl.load(ids_ptr + slot).to(tl.int32) - expert_offset
                ok = (e >= 0) & (e < num_local)
                b = tl.load(bias_ptr + tl.where(ok, e, 0).to(tl.int64) * stride_bias_e + offs_nr, mask=n_ok & ok,
                            other=0.0)
                if MUL_WEIGHT:
                    b = b * tl.load(tw_ptr + slot)
                out += b
        if SPLIT_SLOTS:                  # this slot's partial; the strip's last program sums them in slot order
            tl.store(ws_ptr + (row * top_k + j_split).to(tl.int64) * N + offs_n, out, mask=n_ok)
            tl.debug_barrier()
            cnt = cnt_ptr + row * num_pid_n + pid_n
            if tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu") == top_k - 1:
                out = tl.zeros([BLOCK_N], dtype=tl.float32)
                for j in range(0, top_k):
                    out += tl.load(ws_ptr + (row * top_k + j).to(tl.int64) * N + offs_n, mask=n_ok, other=0.0,
                                   cache_modifier=".cg")
                tl.store(cnt, 0)
                tl.store(c_ptr + row.to(tl.int64) * stride_cm + offs_n, out.to(c_ptr.dtype.element_ty), mask=n_ok)
        else:
            tl.store(c_ptr + row.to(tl.int64) * stride_cm + offs_n, out.to(c_ptr.dtype.element_ty), mask=n_ok)
    else:
        e0 = tl.load(ids_ptr + row).to(tl.int32) - expert_offset
        if (e0 < 0) | (e0 >= num_local):
            return
        e64 = e0.to(tl.int64)
        q_base = q_ptr + e64 * stride_qe
        s_base = s_ptr + e64 * stride_se
        a_base = a_ptr + (row // top_k).to(tl.int64) * stride_aw
        if GATED:
            acc_u = tl.zeros([BLOCK_N, G, CH4, 4], dtype=tl.float32)
        qu_base = q_base + n_up * stride_qn
        su_base = s_base + n_up * stride_sn
        if PREFETCH:     # register double buffer: tile kb + 1's loads issued before tile kb's FMAs
            q, qs = _fp4_direct_load(q_base, s_base, q_off, s_off, K, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
            lo, hi = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
            if GATED:
                q, qs = _fp4_direct_load(qu_base, su_base, q_off, s_off, K, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                lou, hiu = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
            aw = _fp4_direct_a(a_base, a_off, K, offs_gc, True, EVEN_K)
            for kb in range(0, num_kt):
                kn = tl.minimum(kb + 1, num_kt - 1)
                k_left = K - kn * BLOCK_K
                qn, qsn = _fp4_direct_load(q_base + kn * (BLOCK_K // 2), s_base + kn * (BLOCK_K // SCALE_GROUP), q_off,
                                           s_off, k_left, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                if GATED:
                    qun, qsun = _fp4_direct_load(qu_base + kn * (BLOCK_K // 2), su_base + kn * (BLOCK_K // SCALE_GROUP),
                                                 q_off, s_off, k_left, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                awn = _fp4_direct_a(a_base + kn * (BLOCK_K // 2), a_off, k_left, offs_gc, True, EVEN_K)
                acc = _fp4_direct_fma(acc, lo, hi, aw)
                if GATED:
                    acc_u = _fp4_direct_fma(acc_u, lou, hiu, aw)
                    lou, hiu = _fp4_direct_decode(qun, qsun, W_MODE, FP4_ASM)
                lo, hi = _fp4_direct_decode(qn, qsn, W_MODE, FP4_ASM)
                aw = awn
        else:
            for kb in tl.range(0, num_kt, num_stages=NUM_STAGES):
                k_left = K - kb * BLOCK_K
                q, qs = _fp4_direct_load(q_base + kb * (BLOCK_K // 2), s_base + kb * (BLOCK_K // SCALE_GROUP), q_off,
                                         s_off, k_left, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                aw = _fp4_direct_a(a_base + kb * (BLOCK_K // 2), a_off, k_left, offs_gc, True, EVEN_K)
                lo, hi = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
                acc = _fp4_direct_fma(acc, lo, hi, aw)
                if GATED:
                    q, qs = _fp4_direct_load(qu_base + kb * (BLOCK_K // 2), su_base + kb * (BLOCK_K // SCALE_GROUP),
                                             q_off, s_off, k_left, offs_gc, offs_g, True, SCALE_GROUP, EVEN_K)
                    lo, hi = _fp4_direct_decode(q, qs, W_MODE, FP4_ASM)
                    acc_u = _fp4_direct_fma(acc_u, lo, hi, aw)
        out = tl.sum(tl.sum(tl.sum(acc, 3), 2), 1)
        if GATED:
            out_u = tl.sum(tl.sum(tl.sum(acc_u, 3), 2), 1)
        if W_MODE == 7:                      # nvfp4: the expert's global scale (and the PTX decode's 2^-FP4_EPI_LOG2)
            gsc = tl.load(gs_ptr + e64)
            if FP4_ASM:
                gsc = gsc * _FP4_EPI_MUL
        else:
            gsc = 1.0
            if FP4_ASM:
                gsc = _FP4_EPI_MUL
        out = out * gsc
        if GATED:
            out_u = out_u * gsc
        if MUL_WEIGHT:
            w = tl.load(tw_ptr + row)
            out = out * w
            if GATED:
                out_u = out_u * w
        if HAS_BIAS:
            bias_base = bias_ptr + e64 * stride_bias_e
            out += tl.load(bias_base + offs_nr, mask=n_ok, other=0.0)
            if GATED:
                out_u += tl.load(bias_base + n_up + offs_nr, mask=n_ok, other=0.0)
        if ACT != 0:
            if GATED:
                out = _activation(out, out_u, swiglu_limit, ACT)
            else:
                out = _activation(out, out, swiglu_limit, ACT)
        if POST_WEIGHT:
            out = out * tl.load(tw_ptr + row)
        if POST_GS:
            out = out * tl.load(post_gs_ptr + e64)
        tl.store(c_ptr + row.to(tl.int64) * stride_cm + offs_n, out.to(c_ptr.dtype.element_ty), mask=n_ok)

fp4_direct_kernel = _kernel()(_fp4_direct_kernel)


def fp4_direct_gemm(a: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, c: torch.Tensor, topk_ids: torch.Tensor, *,
                    w_mode: int, group: int, n_out: int, sum_topk: bool, gated: bool = False,
                    activation: str | None = None, weight: torch.Tensor | None = None, weight_on_input: bool = False,
                    gscale: torch.Tensor | None = None, post_gscale: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None, expert_offset: int = 0, num_local: int | None = None,
                    swiglu_limit: float = 7.0, fp4_asm: bool | None = None, counters: torch.Tensor | None = None,
                    config: dict, warmup: bool = False) -> torch.Tensor:
    """Launch :func:`_fp4_direct_kernel`: one GEMV of packed-FP4 expert weights over the routing slots as they come
    (config ``DIRECT``: no sort); returns ``c``. ``topk_ids [T, K]`` int32/int64 contiguous, global ids (this rank's
    experts are ``expert_offset .. expert_offset + num_local - 1``; others and -1 are skipped).

    - First GEMM (``sum_topk`` false): ``a [T, Ka]`` bf16 (the hidden states), ``c [T*K, n_out]`` bf16, one row per
      slot (rows of skipped slots are left unwritten). ``weight [T*K]`` float32 routing weights multiply the
      accumulator before the bias and activation (``weight_on_input``) or the activated row after them (the second
      GEMM's factor, moved here); ``post_gscale [E]`` float32: the second GEMM's nvfp4 global scale, also moved here.
    - Second GEMM and top-k sum (``sum_topk``): ``a [T*K, Ka]`` bf16 (the first GEMM's ``c``), ``c [T, n_out]`` in any
      float dtype: ``sum_k a_k @ w2[e_k].T + sum_k weight_k * bias[e_k]`` (``weight`` only weighs the biases here).

    ``q [E, N_b, Ka/2]`` uint8 packed e2m1 (shuffled when ``fp4_asm``; default: not under the interpreter), ``scale
    [E, N_b, Ka/group]`` uint8 (e8m0 or e4m3 bytes, the kernel's bytes when ``fp4_asm``), ``gscale [E]`` float32
    (nvfp4), ``bias [E, N_b]`` float32. Config: ``BLOCK_N`` (a power of two), ``BLOCK_K`` (a power of two, a
    multiple of ``group``), ``num_warps``, ``num_stages`` (Triton's software pipeline of the K loop: it stages the
    loads through shared memory), ``PREFETCH`` (optional: a register double buffer instead, the next K tile's loads
    issued before this one's FMAs; the second GEMM then runs its slots and K tiles as one loop, the loads of other
    ranks' slots masked off) and, for the second GEMM, ``SPLIT_SLOTS`` (optional:
    one program per slot and strip, the partials summed by each strip's last program; ``counters``: int32 zeros of at
    least ``T * cdiv(n_out, BLOCK_N)`` elements, kept by the caller and left zero by the kernel). Speed: keep the
    scale tile ``BLOCK_N * BLOCK_K / group`` under ``32 * num_warps`` (``tune_triton_moe.direct_candidates``): at or
    above it Triton 3.6 converts the scales through shared memory, two CTA barriers per K tile. Raises ValueError for
    another weight mode, a ``BLOCK_K`` that is not a multiple of ``group``, nvfp4 without ``gscale``, an ``a`` that is
    not contiguous bf16 with an even row length, or SPLIT_SLOTS without enough ``counters`` or on the first GEMM."""
    if w_mode not in FP4_MODES:
        raise ValueError(f"DIRECT is an option of packed-FP4 weights (mxfp4, nvfp4), not weight mode {w_mode}")
    bn, bk = config["BLOCK_N"], config["BLOCK_K"]
    if bk % group or group not in (16, 32) or bk & (bk - 1):
        raise ValueError(f"packed FP4 weights: BLOCK_K must be a power of two and a multiple of the scale group "
                         f"({group}), got {bk}")
    if w_mode == 7 and gscale is None:
        raise ValueError("nvfp4 needs its per-expert global scale (gscale)")
    if a.dtype != torch.bfloat16 or not a.is_contiguous() or a.shape[1] % 2:
        raise ValueError(f"DIRECT reads A as bf16 pairs: a contiguous bf16 [rows, K] with K even, got {a.dtype} "
                         f"{tuple(a.shape)}")
    if fp4_asm is None:
        fp4_asm = not interpreting()
    t, top_k = topk_ids.shape
    k = a.shape[1]
    rows = t if sum_topk else t * top_k
    dummy = gscale if gscale is not None else scale
    split = bool(config.get("SPLIT_SLOTS"))
    strips = rows * triton.cdiv(n_out, bn)
    ws = None
    if split:
        if not sum_topk:
            raise ValueError("SPLIT_SLOTS is an option of the second GEMM (sum_topk): the first has a program per slot")
        if counters is None or counters.dtype != torch.int32 or counters.numel() < strips:
            raise ValueError(f"SPLIT_SLOTS needs int32 counters (zeros) of at least {strips} elements, got "
                             f"{None if counters is None else (counters.dtype, counters.numel())}")
        ws = torch.empty(t * top_k, n_out, dtype=torch.float32, device=a.device)
    fp4_direct_kernel.launch(
        (strips * (top_k if split else 1),), a.device, a.view(torch.int32), q, scale, dummy,
        post_gscale if post_gscale is not None else dummy, bias if bias is not None else dummy, topk_ids,
        weight if weight is not None else dummy, c, ws if ws is not None else dummy,
        counters if split else dummy, top_k, n_out, k, n_out if gated else 0, expert_offset,
        q.shape[0] if num_local is None else num_local, a.stride(0) // 2, q.stride(0), q.stride(1), scale.stride(0),
        scale.stride(1), bias.stride(0) if bias is not None else 0, c.stride(0), float(swiglu_limit),
        SUM_TOPK=sum_topk, SPLIT_SLOTS=split, GATED=gated, ACT=0 if activation is None else ACTIVATIONS[activation],
        MUL_WEIGHT=weight is not None and (sum_topk or weight_on_input),
        POST_WEIGHT=weight is not None and not sum_topk and not weight_on_input,
        POST_GS=post_gscale is not None and not sum_topk, HAS_BIAS=bias is not None, W_MODE=w_mode,
        SCALE_GROUP=group, FP4_ASM=bool(fp4_asm), EVEN_K=k % bk == 0, PREFETCH=bool(config.get("PREFETCH")),
        BLOCK_N=bn, BLOCK_K=bk, NUM_STAGES=config["num_stages"], num_warps=config["num_warps"], warmup=warmup)
    return c


@triton.jit
def _quant_store(v, mask, r_ok, rows64, cols, q_ptr, s_ptr, stride_q, stride_s, BLOCK_R: tl.constexpr):
    """Per-row dynamic e4m3 quantization of one ``[BLOCK_R, GROUP]`` float32 group tile ``v`` (entries outside
    ``mask`` count as 0), shared by :func:`group_quant` and :func:`act_quant`: ``q = clamp(v * 448 / amax)``
    stored at ``q[rows, cols]``, scale ``amax / 448`` at ``s[rows, program_id(1)]`` (IEEE division)."""
    amax = tl.maximum(tl.max(tl.where(mask, tl.abs(v), 0.0), 1), 1e-12)
    q = tl.clamp(v * tl.math.div_rn(tl.full([BLOCK_R], 448.0, tl.float32), amax)[:, None], -448.0, 448.0)
    tl.store(q_ptr + rows64[:, None] * stride_q + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows64 * stride_s + tl.program_id(1), tl.math.div_rn(amax, tl.full([BLOCK_R], 448.0, tl.float32)),
             mask=r_ok)


def _group_quant_kernel(x_ptr, q_ptr, s_ptr, num_rows, K, stride_x, stride_q, stride_s,
                       GROUP: tl.constexpr, BLOCK_R: tl.constexpr):
    """``BLOCK_R`` rows x one group of ``GROUP`` columns of ``x`` -> e4m3 ``q`` and one scale per row and
    group (``amax / 448``; multiplier ``448 / amax``)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * GROUP + tl.arange(0, GROUP)
    r_ok = rows < num_rows
    mask = r_ok[:, None] & (cols < K)[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    _quant_store(x, mask, r_ok, rows64, cols, q_ptr, s_ptr, stride_q, stride_s, BLOCK_R)


group_quant_kernel = _kernel(do_not_specialize=["num_rows"])(_group_quant_kernel)


def group_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token-group dynamic FP8 quantization: ``x [T, K]`` (any float dtype, contiguous) -> (``q [T, K]``
    e4m3, ``scale [T, ceil(K/group)]`` float32), ``x ~ q * scale`` group by group, multiplier ``448 /
    amax`` (the activation quantization of fp8_block checkpoints, DeepSeek-V3's per 1x128 tile)."""
    t, k = x.shape
    ng = -(-k // group)
    q = torch.empty(t, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(t, ng, dtype=torch.float32, device=x.device)
    if t:
        block_r = max(1, min(16, 4096 // group))
        group_quant_kernel.launch((triton.cdiv(t, block_r), ng), x.device, x, q, s, t, k, x.stride(0), q.stride(0),
                                  s.stride(0), GROUP=group, BLOCK_R=block_r, num_warps=4)
    return q, s


def _act_quant_kernel(h_ptr, q_ptr, s_ptr, num_rows_ptr, inter, stride_h, stride_q, stride_s, swiglu_limit,
                      ACT: tl.constexpr, GATED: tl.constexpr, GROUP: tl.constexpr, BLOCK_R: tl.constexpr):
    """``BLOCK_R`` sorted rows x one group of ``GROUP`` intermediate columns: the activation of the first
    GEMM's output ``h`` (gate columns ``[0, inter)``, up columns ``[inter, 2*inter)`` when GATED) -> e4m3 ``q`` and one
    scale per row and group, exactly as the fused epilogue's ``C_AMAX == 3`` path (rows past the device-side
    ``num_rows`` are skipped)."""
    num_rows = tl.load(num_rows_ptr)
    if tl.program_id(0) * BLOCK_R >= num_rows:
        return
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * GROUP + tl.arange(0, GROUP)
    r_ok = rows < num_rows
    mask = r_ok[:, None] & (cols < inter)[None, :]
    rows64 = rows.to(tl.int64)
    g = tl.load(h_ptr + rows64[:, None] * stride_h + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if GATED:
        u = tl.load(h_ptr + rows64[:, None] * stride_h + inter + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    else:
        u = g
    _quant_store(_activation(g, u, swiglu_limit, ACT), mask, r_ok, rows64, cols, q_ptr, s_ptr, stride_q, stride_s,
                 BLOCK_R)


act_quant_kernel = _kernel()(_act_quant_kernel)


def act_quant(h: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, num_rows: torch.Tensor, *, inter: int,
              activation: str, gated: bool, group: int, swiglu_limit: float = 7.0, warmup: bool = False):
    """The activation of the split first GEMM (fp8_block, ``SPLIT``): ``h [R, 2*I]`` (``[R, I]`` not gated)
    16-bit -> ``q [R, I]`` e4m3 and ``scale [R, ceil(I/group)]`` float32 (per row and group of ``group``
    columns, multiplier ``448 / amax``), for the first ``num_rows[0]`` rows (device-side)."""
    rows = h.shape[0]
    block_r = max(1, min(16, 4096 // group))
    return act_quant_kernel.launch((triton.cdiv(rows, block_r), triton.cdiv(inter, group)), h.device, h, q, scale,
                                   num_rows, inter, h.stride(0), q.stride(0), scale.stride(0), float(swiglu_limit),
                                   ACT=ACTIVATIONS[activation], GATED=gated, GROUP=group, BLOCK_R=block_r,
                                   num_warps=4, warmup=warmup)


def _row_quant_kernel(x_ptr, amax_ptr, q_ptr, num_rows_ptr, num_rows_arg, K, stride_x, stride_q,
                      PER_ROW: tl.constexpr, ROWS_PTR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """``BLOCK_R`` rows x ``BLOCK_K`` columns of ``x`` -> e4m3 ``q = clamp(x * 448 / max(amax, 1e-12))``, with the
    amax of the row (PER_ROW: ``amax[row]``) or of the tensor (``amax[0]``): the quantization the GEMM kernel's
    main loop applies to a 16-bit A of fp8_tensor/fp8_channel (``A_SCALE`` 1, 2), the same operations in the same
    order. Rows from ``num_rows_ptr[0]`` (ROWS_PTR: device-side, the sorted rows) or ``num_rows_arg`` on are
    skipped."""
    if ROWS_PTR:
        num_rows = tl.load(num_rows_ptr)
    else:
        num_rows = num_rows_arg
    if tl.program_id(0) * BLOCK_R >= num_rows:
        return
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    r_ok = rows < num_rows
    mask = r_ok[:, None] & (cols < K)[None, :]
    rows64 = rows.to(tl.int64)
    if PER_ROW:
        amax = tl.load(amax_ptr + rows64, mask=r_ok, other=1.0)
    else:
        amax = tl.load(amax_ptr) + tl.zeros([BLOCK_R], dtype=tl.float32)
    mult = tl.math.div_rn(tl.full([BLOCK_R], 448.0, tl.float32), tl.maximum(amax, 1e-12))
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    q = tl.clamp(x.to(tl.float32) * mult[:, None], -448.0, 448.0)
    tl.store(q_ptr + rows64[:, None] * stride_q + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)


row_quant_kernel = _kernel(do_not_specialize=["num_rows_arg"])(_row_quant_kernel)


def row_quant(x: torch.Tensor, amax: torch.Tensor, q: torch.Tensor, *, per_row: bool,
              num_rows: torch.Tensor | None = None, warmup: bool = False):
    """Quantize the A operand of an fp8_tensor/fp8_channel GEMM before the GEMM (config ``PREQUANT``):
    ``x [R, K]`` 16-bit (row stride any, columns contiguous) -> ``q [R, K]`` e4m3 (written in place),
    ``q = clamp(x * 448 / max(amax, 1e-12), -448, 448)`` in float32 (IEEE division), rounded to nearest even;
    ``amax`` float32 ``[R]`` (``per_row``: the row's absolute maximum) or ``[1]`` (the tensor's). The GEMM
    then reads ``q`` (:func:`moe_gemm` with an e4m3 ``a``) and dequantizes with ``amax / 448`` as before, so the
    layer's output is the same bit for bit, without a conversion of each A tile in the GEMM's main loop (once per
    N tile there). ``num_rows`` (int32 ``[1]``, device-side): only that many leading rows (the sorted rows of
    the second GEMM); else all ``R``. Returns the launch's handle (``warmup``: compiles only)."""
    r, k = x.shape
    block_k = min(512, max(16, _pow2(k)))
    block_r = max(1, 4096 // block_k)
    grid = (max(1, triton.cdiv(r, block_r)), triton.cdiv(k, block_k))
    rows_ptr = num_rows if num_rows is not None else amax
    return row_quant_kernel.launch(grid, x.device, x, amax, q, rows_ptr, r, k, x.stride(0), q.stride(0),
                                   PER_ROW=per_row, ROWS_PTR=num_rows is not None, BLOCK_R=block_r, BLOCK_K=block_k,
                                   num_warps=4, warmup=warmup)


def _token_quant_kernel(x_ptr, amax_ptr, q_ptr, num_rows, K, stride_x, stride_q,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """``BLOCK_R`` whole rows of ``x``: ``amax[row] = max |x[row]|`` (NaN if the row has one), then ``q`` as
    :func:`_row_quant_kernel` computes it from that amax (PER_ROW): the per-token amax and the PREQUANT pass of
    the first GEMM in one launch."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < num_rows
    rows64 = rows.to(tl.int64)
    amax = tl.zeros([BLOCK_R], dtype=tl.float32)
    nans = tl.zeros([BLOCK_R], dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = r_ok[:, None] & (cols < K)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), 1))
        nans += tl.sum((x != x).to(tl.int32), 1)
    amax = tl.where(nans > 0, float("nan"), amax)
    tl.store(amax_ptr + rows64, amax, mask=r_ok)
    mult = tl.math.div_rn(tl.full([BLOCK_R], 448.0, tl.float32), tl.maximum(amax, 1e-12))
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = r_ok[:, None] & (cols < K)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
        q = tl.clamp(x.to(tl.float32) * mult[:, None], -448.0, 448.0)
        tl.store(q_ptr + rows64[:, None] * stride_q + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)


token_quant_kernel = _kernel(do_not_specialize=["num_rows"])(_token_quant_kernel)


def token_quant(x: torch.Tensor, amax: torch.Tensor, q: torch.Tensor, *, warmup: bool = False):
    """The per-token amax and the first GEMM's ``PREQUANT`` pass in one launch: ``x [T, K]`` 16-bit (columns
    contiguous) -> ``amax [T]`` float32 ``max |x[t]|`` (as ``torch.linalg.vector_norm(x, inf, dim=1)`` gives
    it, NaN included) and ``q [T, K]`` e4m3 ``clamp(x * 448 / max(amax, 1e-12), -448, 448)``: the same bits
    as that norm followed by :func:`row_quant` (``per_row``), one launch fewer. Returns the launch's handle."""
    r, k = x.shape
    block_k = min(1024, max(16, _pow2(k)))
    block_r = max(1, 4096 // block_k)
    return token_quant_kernel.launch((max(1, triton.cdiv(r, block_r)),), x.device, x, amax, q, r, k, x.stride(0),
                                     q.stride(0), BLOCK_R=block_r, BLOCK_K=block_k, num_warps=4, warmup=warmup)


# ------------------------------------------------------------------------------------------------
# 4. top-k sum
# ------------------------------------------------------------------------------------------------

def _topk_sum_kernel(y_ptr, ids_ptr, out_ptr, num_tokens, top_k, H, stride_ym, stride_om, expert_offset, num_local,
                     BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """``out[t, h] = sum_k y[t*top_k + k, h]`` over the slots of this rank's experts (float32)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = offs_t < num_tokens
    h_ok = offs_h < H
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for k in range(0, top_k):
        slot = offs_t * top_k + k
        e = tl.load(ids_ptr + slot, mask=t_ok, other=-1).to(tl.int32) - expert_offset
        ok = t_ok & (e >= 0) & (e < num_local)
        slot = tl.where(ok, slot, 0).to(tl.int64)
        y = tl.load(y_ptr + slot[:, None] * stride_ym + offs_h[None, :], mask=ok[:, None] & h_ok[None, :], other=0.0)
        acc += y.to(tl.float32)
    tl.store(out_ptr + offs_t.to(tl.int64)[:, None] * stride_om + offs_h[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=t_ok[:, None] & h_ok[None, :])


topk_sum_kernel = _kernel(do_not_specialize=["num_tokens"])(_topk_sum_kernel)


def topk_sum(y: torch.Tensor, topk_ids: torch.Tensor, out: torch.Tensor, num_local: int, expert_offset: int) -> torch.Tensor:
    """``out [T, H] = sum_k y[t*K + k]`` for the slots of this rank's experts; ``y [S, H]``,
    ``topk_ids [T, K]`` contiguous; sums in float32, stored in ``out.dtype``. Returns ``out``."""
    t, k = topk_ids.shape
    h = out.shape[1]
    block_h = min(1024, max(16, _pow2(h)))
    block_t = max(1, 2048 // block_h)
    grid = (triton.cdiv(t, block_t), triton.cdiv(h, block_h))
    topk_sum_kernel.launch(grid, out.device, y, topk_ids, out, t, k, h, y.stride(0), out.stride(0), expert_offset,
                           num_local, BLOCK_T=block_t, BLOCK_H=block_h, num_warps=4)
    return out


if interpreting():
    _fix_interpreter()

KERNELS = (align_single, align_count, align_offsets, align_scatter, moe_gemm_kernel, fp4_direct_kernel, group_quant_kernel,
           act_quant_kernel, row_quant_kernel, token_quant_kernel, topk_sum_kernel)


def compiled_variants() -> int:
    """Compiled specialisations of every kernel of this module (Triton's JIT cache), for recompile checks."""
    return sum(k.compiled_variants() for k in KERNELS)


# ------------------------------------------------------------------------------------------------
# tile configurations
# ------------------------------------------------------------------------------------------------

def token_bucket(tokens: int, buckets=TOKEN_BUCKETS) -> int:
    """The bucket nearest to ``tokens`` in log scale (ties to the smaller bucket); ``buckets`` sorted."""
    t = max(1, int(tokens))
    lt = math.log(t)
    return min(buckets, key=lambda b: (abs(math.log(b) - lt), b))


#: Packed-FP4 defaults at up to 32 rows per tile (decode): K tile and warps (sm90 compile check, tests).
FP4_BLOCK_K_SMALL_M = 128
FP4_WARPS_SMALL_M = 4
#: Shared memory one CTA may use on sm90 (H100/H200): 227 KB. sm80: 163 KB; sm86, sm89, sm120: 99 KB.
SMEM_SM90 = 227 * 1024


def smem_estimate(block_m: int, cfg: dict, fmt: str, gated: bool) -> int:
    """Bytes of shared memory a GEMM config's software pipeline takes (an estimate): buffers of the A
    tile and the B tile(s) (two for the gated first GEMM; int weights counted at one byte), ``num_stages``
    of them from ``block_m`` 64 (wgmma) and ``num_stages - 1`` below (mma.sync), the A tile quantized
    inside the loop (fp8_tensor/fp8_channel; with ``PREQUANT`` A is one byte and not staged), plus 4 KB. Against what Triton 3.6 allocated for sm90 at
    the Qwen3-30B-A3B shape with the default configurations: at most 9% under (int8's second GEMM at
    ``BLOCK_M`` 64), within 10% for bf16 and fp8_block, over by up to 1.5x for fp8_tensor/fp8_channel
    from ``BLOCK_M`` 64 and 2.3x for int4 (safe: it only lowers stages on GPUs with less shared memory).
    tests/test_triton_moe.py compiles the defaults and checks the real figure."""
    prequant = bool(cfg.get("PREQUANT")) and fmt in PREQUANT_FORMATS
    a_bytes = 1 if fmt == "fp8_block" or prequant else 2
    b_bytes = 2 if fmt in ("bf16", "fp16") else 1
    per_stage = block_m * cfg["BLOCK_K"] * a_bytes + cfg["BLOCK_N"] * cfg["BLOCK_K"] * b_bytes * (2 if gated else 1)
    # A quantized in the loop (fp8_tensor/fp8_channel without PREQUANT)
    staged = block_m * cfg["BLOCK_K"] if fmt in PREQUANT_FORMATS and not prequant else 0
    buffers = cfg["num_stages"] if block_m >= 64 else max(1, cfg["num_stages"] - 1)   # wgmma / mma.sync pipelines
    return buffers * per_stage + staged + 4096


def gemv_gemm_config(n: int, k: int, fmt: str, tokens: int, top_k: int, num_local: int, *, block_n: int = 32,
                     block_k: int = 128, num_warps: int = 4, num_stages: int = 3) -> dict:
    """The GEMV mode's config of one GEMM with ``n`` output columns (per gate or up half) and ``k`` input columns
    at ``tokens`` (packed FP4 only): ``BLOCK_N`` 32 and ``BLOCK_K`` 128 (at most the layer's widths; whole
    scale groups; halved down to 32 while it does not divide ``k``, so the loads need no K mask), 4 warps, 3 stages, and ``SPLIT_K``: doubled (up to :data:`GEMV_MAX_SPLIT_K`, each split keeping
    at least two K tiles) while the programs ``cdiv(n, BLOCK_N) x min(E, tokens * top_k)`` (experts touched at
    most) times the split are fewer than :data:`GEMV_TARGET_PROGRAMS`. Not measured: defaults for the tuner to beat."""
    group = 32 if fmt == "mxfp4" else 16
    bn = min(block_n, max(16, _pow2(n)))
    bk = max(32, group, min(block_k, _pow2(k)))
    while bk > max(32, group) and k % bk:         # a K tile that divides K: unmasked loads (gpt-oss's 2880: 64)
        bk //= 2
    if k % bk:
        bk = max(32, group, min(block_k, _pow2(k)))
    programs = -(-n // bn) * max(1, min(num_local, tokens * top_k))
    k_tiles = -(-k // bk)
    split = 1
    while split < GEMV_MAX_SPLIT_K and programs * split < GEMV_TARGET_PROGRAMS and k_tiles >= 4 * split:
        split *= 2
    c = {"BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 1, "num_warps": num_warps, "num_stages": num_stages, "GEMV": True}
    return c | ({"SPLIT_K": split} if split > 1 else {})


def gemv_config(num_local: int, n13: int, hidden: int, fmt: str, tokens: int, top_k: int, gated: bool = True) -> dict:
    """The GEMV mode's whole configuration at ``tokens`` (packed FP4 only; :func:`default_config` uses it up to
    :data:`GEMV_MAX_ROWS_PER_EXPERT` mean rows per expert, ``benchmarks/w4a16_layer.py --variants gemv`` forces
    it): ``BLOCK_M = min(4, pow2(tokens))`` and :func:`gemv_gemm_config` for both GEMMs. Raises ValueError for
    another format."""
    if fmt not in FP4_FORMATS:
        raise ValueError(f"the GEMV mode is for packed-FP4 weights (mxfp4, nvfp4), not {fmt}")
    inter = n13 // 2 if gated else n13
    return {"BLOCK_M": min(4, _pow2(max(1, tokens))),
            "gemm1": gemv_gemm_config(inter, hidden, fmt, tokens, top_k, num_local),
            "gemm2": gemv_gemm_config(hidden, inter, fmt, tokens, top_k, num_local)}


def default_config(num_local: int, n13: int, hidden: int, fmt: str, tokens: int, top_k: int,
                   block_shape: tuple[int, int] | None = None, gated: bool = True,
                   smem_limit: int | None = None, gemv: bool = False) -> dict:
    """The untuned tile configuration for ``tokens`` (use a bucket's token count: :func:`get_config`).

    ``BLOCK_M`` from the mean rows per expert ``m = tokens * top_k / E``: 16 up to 16 (decode: one
    tile row block per expert, as narrow as the tensor cores allow), 32 up to 48, 64 up to 192, else 128.
    Small ``m`` streams weights: narrow N tiles (64) and deep K tiles (128) for more programs in flight
    and long contiguous weight reads; large ``m`` is compute-bound: 128-wide tiles (64 for the first GEMM,
    whose gate and up accumulators double the registers), ``GROUP_M`` 8 for L2 reuse, 8 warps at
    ``BLOCK_M`` 128. fp8_block uses ``BLOCK_K`` = the block's K size and a first-GEMM ``BLOCK_N`` that is
    a multiple of it (its epilogue quantizes per group of ``bk`` columns); above 192 rows per expert its
    first GEMM is *split* (``SPLIT``: one accumulator over the ``2*I`` gate and up rows, 16-bit out, then
    :func:`act_quant`) at ``BLOCK_M`` 64, 4 warps: on an H200 at 2048 and 8192 tokens the tuner found the
    split tile 1.8-2.3x faster than the fused two-accumulator one at ``BLOCK_M`` 64 and 1.4-1.7x faster than
    the split one at 128 on all four fp8_block layers (results/tune_triton_moe_h200_fp8block_split.json);
    fp8_block and the int formats (the block scaling needs a second accumulator per dot, the int
    dequantization a float copy of the weight tile) use 8 warps from ``BLOCK_M`` 32, int4 always, with
    ``BLOCK_K`` 64 (32 at ``BLOCK_M`` 128). Without these, ptxas (sm90, triton 3.6) spilled registers:
    fp8_block's first GEMM at ``BLOCK_M`` 128 about 1.9 KB per thread, int4's at ``BLOCK_M`` 16 2.1 KB.
    fp8_tensor and fp8_channel quantize each GEMM's A before it (``PREQUANT``, :func:`row_quant`): the first GEMM
    always, the second from ``BLOCK_M`` :data:`PREQUANT_MIN_BLOCK_M_GEMM2`, where the conversion of each A tile in
    the main loop (once per N tile) cost more than one pass over A on an H200. The int formats' ``BLOCK_K`` is lowered further to divide the checkpoint's group size
    (:class:`~moe_select.backends.triton_moe.ForwardPass`), so each K tile has one scale per column. Tiles are never much wider than the layer. ``n13``:
    rows of w13 (2*I, or I when not ``gated``). Returns ``{"BLOCK_M", "gemm1": {...}, "gemm2": {...}}``
    (keys of :func:`moe_gemm`'s config). ``smem_limit`` (bytes; default :data:`SMEM_SM90`): fewer stages,
    then shallower K tiles, until :func:`smem_estimate` fits (the 99 KB of sm86/sm89/sm120). ``gemv=True``: packed FP4
    at up to :data:`GEMV_MAX_ROWS_PER_EXPERT` mean rows per expert gets the GEMV mode (:func:`gemv_config`; no MMA
    tile, whose 16 rows would be mostly padding there). It is opt-in (default False: the MMA tiles) until it is
    measured on a GPU: it passes the interpreter's float64 checks and compiles for sm90, but its speed and its GPU
    numerics are not measured yet (benchmarks/README.md, issue 24)."""
    m = tokens * top_k / max(1, num_local)
    if gemv and fmt in FP4_FORMATS and m <= GEMV_MAX_ROWS_PER_EXPERT:
        return gemv_config(num_local, n13, hidden, fmt, tokens, top_k, gated)
    fp8 = fmt.startswith("fp8")
    if m <= 16:
        bm, bn1, bn2, bk, gm, warps, stages = 16, 64, 64, 128, 1, 4, 4
    elif m <= 48:
        bm, bn1, bn2, bk, gm, warps, stages = 32, 64, 64, 128, 4, 4, 4
    elif m <= 192:
        bm, bn1, bn2, bk, gm, warps, stages = 64, 64, 128, 128 if fp8 else 64, 8, 4, 3
    else:
        bm, bn1, bn2, bk, gm, warps, stages = 128, 64, 128, 128 if fp8 else 64, 8, 8, 3
    inter = n13 // 2 if gated else n13
    fp4 = fmt in FP4_FORMATS
    heavy = fmt == "fp8_block" or fmt.startswith("int") or fp4
    split = fmt == "fp8_block" and bm > 64          # one accumulator over 2*I rows, then act_quant (SPLIT)
    if split:                                       # at BLOCK_M 64 (measured faster than 128, docstring)
        bm = 64
    if heavy and bm >= 32 or fmt == "int4_w4a16":
        warps = 8
    if fmt == "int4_w4a16":      # unpacking two codes per byte: the smallest K tiles that keep the pipeline fed
        bk = 32 if bm >= 128 else 64
    if fp4:                      # packed e2m1: whole scale groups per K tile (32 for mxfp4)
        bk = FP4_BLOCK_K_SMALL_M if bm <= 32 else 64 if bm <= 64 else 32
        warps = FP4_WARPS_SMALL_M if bm <= 32 else 8
    block_k = block_shape[1] if fmt == "fp8_block" and block_shape else None

    limit = smem_limit or SMEM_SM90

    def gemm(bn: int, n: int, k: int, first: bool) -> dict:
        bk_ = block_k or min(bk, max(32 if fp4 else 16, _pow2(k)))
        bn_ = min(bn, max(16, _pow2(n)))
        if first and block_k:
            bn_ = max(bn_, block_k)
        c = {"BLOCK_N": bn_, "BLOCK_K": bk_, "GROUP_M": gm, "num_warps": warps, "num_stages": stages}
        two = first and gated and not split
        if first and split:
            c.update(num_warps=4, SPLIT=True)
        if fmt in PREQUANT_FORMATS and (first or bm >= PREQUANT_MIN_BLOCK_M_GEMM2):
            c["PREQUANT"] = True
        while smem_estimate(bm, c, fmt, two) > limit and c["num_stages"] > 2:
            c["num_stages"] -= 1
        while smem_estimate(bm, c, fmt, two) > limit and not block_k and c["BLOCK_K"] > 32:
            c["BLOCK_K"] //= 2
        while smem_estimate(bm, c, fmt, two) > limit and c["BLOCK_N"] > max(32, block_k or 0 if first else 32):
            c["BLOCK_N"] //= 2
        return c

    return {"BLOCK_M": bm, "gemm1": gemm(128 if split else bn1, n13 if split else inter, hidden, True),
            "gemm2": gemm(bn2, hidden, inter, False)}


def config_file_name(num_local: int, n13: int, hidden: int, fmt: str, device_name: str,
                     block_shape: tuple[int, int] | None = None) -> str:
    """``E=<E>,N=<N>,K=<K>,format=<fmt>[,block=<bn>x<bk>],device=<device>.json`` (device name with
    spaces as underscores, e.g. ``NVIDIA_H200``). N = rows of w13 per expert (2*I, or I for relu2),
    K = hidden size, E = local experts."""
    blk = f",block={block_shape[0]}x{block_shape[1]}" if fmt == "fp8_block" and block_shape else ""
    dev = device_name.replace(" ", "_")
    return f"E={num_local},N={n13},K={hidden},format={fmt}{blk},device={dev}.json"


#: A ``GLUON`` GEMM config's rows per thread (``BLOCK_N // num_warps``) and warp counts (backends/triton_moe_gluon.py).
GLUON_ROWS_PER_THREAD = (1, 2, 4)
GLUON_WARPS = (1, 2, 4, 8)


def gluon_rows_per_thread(block_n: int, num_warps: int) -> int | None:
    """The rows per thread of a ``GLUON`` GEMM config (``BLOCK_N = rows x num_warps``, rows in
    :data:`GLUON_ROWS_PER_THREAD`, warps in :data:`GLUON_WARPS`), or None when the pair is not one of those."""
    if num_warps not in GLUON_WARPS or block_n % num_warps or block_n // num_warps not in GLUON_ROWS_PER_THREAD:
        return None
    return block_n // num_warps


#: The least ``MIN_M`` of FP8 weights (fp8_tensor, fp8_channel, fp8_block): below 64 rows the FP8 tile is not a
#: warpgroup MMA, and its sums differ in the last bits from the full tile's (benchmarks/README.md, MIN_M section).
FP8_MIN_M = 64
FP8_MIN_M_WHY = ("a shorter FP8 tile sums in other last bits than the full tile, and the sort's order within an "
                 "expert varies run to run, so a row's result would too")

#: The boolean options a GEMM config of a tile file may set (:func:`_check_gemm_cfg`); the tuner keys and writes its
#: candidates by these (benchmarks/tune_triton_moe.py cfg_key, _strip), so an option added here is timed and kept there.
GEMM_CONFIG_FLAGS = ("SPLIT", "SWAP_AB", "GEMV", "PREQUANT", "TMA", "SPLIT_SLOTS", "PREFETCH", "GLUON", "WGMMA",
                     "PINGPONG", "GU_DOT")

#: Formats whose second GEMM may run the Gluon wgmma kernel (config ``WGMMA``: backends/triton_moe_wgmma.py, sm90)
WGMMA_FORMATS = ("bf16", "fp16", "fp8_tensor", "fp8_channel")
#: Options of the ``tl`` tiles a ``WGMMA`` GEMM config cannot carry (the Gluon kernel has none of them)
WGMMA_EXCLUDES = ("SPLIT", "SWAP_AB", "GEMV", "TMA", "SPLIT_SLOTS", "PREFETCH", "GLUON", "MIN_M", "SPLIT_K")


def wgmma_check(config: dict, *, block_m: int, fmt: str, n_out: int | None = None, k: int | None = None) -> None:
    """A second-GEMM config with ``WGMMA`` (the Gluon wgmma kernel, backends/triton_moe_wgmma.py) against the format
    and, where given, the layer's output width ``n_out`` and ``k`` (the intermediate size): ValueError naming what is
    off. A format of :data:`WGMMA_FORMATS` (in a tile file, FP8 with ``PREQUANT``: the kernel reads e4m3 A); none of
    :data:`WGMMA_EXCLUDES`; ``BLOCK_M`` (the sort's) 64 with ``num_warps`` 4, or 128 with 4 or 8; ``BLOCK_K`` elements of
    128 bytes (the TMA swizzle: 64 16-bit, 128 FP8); ``BLOCK_N`` 64, 128 or 256, dividing ``n_out`` (a weight tile never
    spans two experts); ``k`` a multiple of ``BLOCK_K``; ``num_stages`` 2 to 6. ``PINGPONG`` (the warp-specialized
    ping-pong form: two consumer warpgroups on alternate tiles): ``num_warps`` 4 (per consumer) and ``BLOCK_M *
    BLOCK_N`` at most 16384 (a consumer's float32 accumulator in 128 registers per thread)."""
    if config.get("PINGPONG") and not config.get("WGMMA"):
        raise ValueError("PINGPONG is a form of the WGMMA kernel: set WGMMA with it")
    if fmt not in WGMMA_FORMATS:
        raise ValueError(f"WGMMA runs the second GEMM of {', '.join(WGMMA_FORMATS)} layers, not {fmt}")
    fp8 = fmt.startswith("fp8")
    bad = [o for o in WGMMA_EXCLUDES if config.get(o)]
    if bad:
        raise ValueError(f"WGMMA (the Gluon wgmma kernel) has no {', '.join(bad)} (options of the tl tiles)")
    bn, bk, nw, st = config["BLOCK_N"], config["BLOCK_K"], config["num_warps"], config["num_stages"]
    if (block_m, nw) not in ((64, 4), (128, 4), (128, 8)):
        raise ValueError(f"WGMMA: BLOCK_M 64 with num_warps 4, or BLOCK_M 128 with num_warps 4 or 8; got BLOCK_M "
                         f"{block_m}, num_warps {nw}")
    itemsize = 1 if fp8 else 2
    if bk * itemsize != 128:
        raise ValueError(f"WGMMA: BLOCK_K must be {128 // itemsize} for {fmt} (128-byte TMA rows), got {bk}")
    if bn not in (64, 128, 256) or (n_out is not None and n_out % bn):
        raise ValueError("WGMMA: BLOCK_N must be 64, 128 or 256" + (f" and divide the output width {n_out}"
                                                                        if n_out is not None else "") + f", got {bn}")
    if k is not None and k % bk:
        raise ValueError(f"WGMMA: the intermediate size {k} must be a multiple of BLOCK_K {bk}")
    if not 2 <= st <= 6:
        raise ValueError(f"WGMMA: num_stages must be 2 to 6, got {st}")
    if config.get("PINGPONG") and (nw != 4 or block_m * bn > 16384):
        raise ValueError(f"WGMMA PINGPONG: num_warps 4 (each of the two consumers) and BLOCK_M * BLOCK_N <= 16384 (the "
                         f"accumulator in 128 registers per thread); got num_warps {nw}, BLOCK_M {block_m}, BLOCK_N {bn}")


def _check_gemm_cfg(c: Any, where: str, direct: bool = False) -> dict:
    """One GEMM config of a tile file, checked (:func:`load_config_file`); ``direct``: of a DIRECT bucket, whose
    GEMMs may also set ``PREFETCH`` and a ``BLOCK_N`` from 4. Returns it without ``us`` and false flags."""
    keys = ("BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
    if not isinstance(c, dict) or set(c) - set(keys) - {"us", "SPLIT_K", "MIN_M", *GEMM_CONFIG_FLAGS} \
            or any(k not in c for k in keys):
        raise ValueError(f"{where}: a GEMM config has exactly the keys {', '.join(keys)} (and optionally us, SPLIT_K, "
                         f"MIN_M, {', '.join(GEMM_CONFIG_FLAGS)}), got {c!r}")
    if "MIN_M" in c:
        v = c["MIN_M"]
        if not isinstance(v, int) or isinstance(v, bool) or (v and (v < 16 or v & (v - 1))):
            raise ValueError(f"{where}: MIN_M must be 0 or a power of two >= 16, got {v!r}")
        if v and (direct or c.get("GEMV")):
            raise ValueError(f"{where}: MIN_M is an option of the MMA tiles, not of GEMV or DIRECT buckets")
    if "SPLIT_K" in c:
        v = c["SPLIT_K"]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64:
            raise ValueError(f"{where}: SPLIT_K must be an integer from 1 to 64, got {v!r}")
        if v > 1 and not c.get("GEMV"):
            raise ValueError(f"{where}: SPLIT_K is an option of the GEMV mode (GEMV: true)")
    for flag in GEMM_CONFIG_FLAGS:
        if flag in c and not isinstance(c[flag], bool):
            raise ValueError(f"{where}: {flag} must be true or false, got {c[flag]!r}")
    if c.get("GLUON") and (direct or not c.get("GEMV") or c.get("SPLIT_K", 1) > 1 or c.get("PREFETCH")):
        raise ValueError(f"{where}: GLUON (the Gluon GEMV) is an option of the sorted GEMV mode (GEMV: true) without "
                         f"SPLIT_K or PREFETCH, not of DIRECT buckets")
    if c.get("GLUON") and gluon_rows_per_thread(c["BLOCK_N"], c["num_warps"]) is None:
        raise ValueError(f"{where}: GLUON needs BLOCK_N = num_warps x 1, 2 or 4 rows per thread (num_warps 1, 2, 4 "
                         f"or 8), got BLOCK_N {c['BLOCK_N']}, num_warps {c['num_warps']}")
    if c.get("PINGPONG") and not c.get("WGMMA"):
        raise ValueError(f"{where}: PINGPONG is a form of the WGMMA kernel: set WGMMA with it")
    for k in keys:
        v = c[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{where}: {k} must be a positive integer, got {v!r}")
    if c["num_warps"] & (c["num_warps"] - 1):
        raise ValueError(f"{where}: num_warps must be a power of two (Triton's), got {c['num_warps']}")
    if "us" in c and (not isinstance(c["us"], (int, float)) or isinstance(c["us"], bool)):
        raise ValueError(f"{where}: us (microseconds measured, informative) must be a number, got {c['us']!r}")
    for k in ("BLOCK_N", "BLOCK_K"):
        least = 16 if k != "BLOCK_N" else 4 if direct else 1 if c.get("GLUON") is True else 16
        if c[k] < least or c[k] & (c[k] - 1):
            raise ValueError(f"{where}: {k} must be a power of two >= {least}, got {c[k]}")
    if c.get("GEMV") and (c.get("SWAP_AB") or c.get("SPLIT")):
        raise ValueError(f"{where}: GEMV excludes SWAP_AB and SPLIT (it has no MMA tile)")
    return ({k: c[k] for k in keys} | {f: True for f in GEMM_CONFIG_FLAGS if c.get(f)}
            | ({"SPLIT_K": c["SPLIT_K"]} if c.get("GEMV") and c.get("SPLIT_K", 1) > 1 else {})
            | ({"MIN_M": c["MIN_M"]} if c.get("MIN_M") else {}))


@functools.lru_cache(maxsize=None)
def load_config_file(path: str) -> dict[int, dict]:
    """Read a tuned configuration file; returns ``{bucket tokens: config}``.

    Format (JSON object), ``format_version`` 1::

        {"format_version": 1,
         "key": {"E": 128, "N": 1536, "K": 2048, "format": "bf16", "block_shape": null,
                 "device": "NVIDIA H200"},
         "tuned": {"script": "benchmarks/tune_triton_moe.py", "date": "...", "torch": "...",
                   "triton": "...", "top_k": 8, "method": "..."},
         "configs": {"1": {"BLOCK_M": 16,
                           "gemm1": {"BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "num_warps": 4,
                                     "num_stages": 4, "us": 10.2},
                           "gemm2": {...}, "us": 25.1},
                     "32": {...}}}

    ``configs`` maps a token count (a bucket) to the configuration measured best there; ``us`` fields
    (microseconds per call, CUDA-graph replay) are informative. Packed-FP4 files (``key.format`` mxfp4 or nvfp4) only: a
    GEMM config may set ``"SWAP_AB": true`` or ``"GEMV": true`` (the GEMV mode, :func:`moe_gemm`) with
    ``"SPLIT_K": <1..64>``; fp8_tensor and fp8_channel files only: ``"PREQUANT": true`` (the GEMM's A quantized to
    e4m3 by :func:`row_quant` before it, not in its main loop); 16-bit and FP8 files (:data:`TMA_FORMATS`):
    ``"TMA": true`` (the weight tiles loaded through a TMA tensor descriptor); ``BLOCK_M`` 1, 2, 4 or 8 needs GEMV in both GEMMs, and GEMV a ``BLOCK_M`` of at most
    :data:`GEMV_MAX_BLOCK_M`. Packed-FP4 files: a bucket may set ``"DIRECT": true`` beside ``BLOCK_M`` (with
    ``BLOCK_M`` 1 and GEMV without SPLIT_K in both GEMMs): its forward is :func:`fp4_direct_gemm` twice, no sort and
    the top-k sum fused (``backends/triton_moe.py`` ``direct_forward``); its GEMMs may set ``"PREFETCH": true`` and a
    ``BLOCK_N`` from 4 (:func:`fp4_direct_gemm`). A GEMV config of a ``BLOCK_M`` 1 bucket (not DIRECT, no ``SPLIT_K`` or
    ``PREFETCH``) may set ``"GLUON": true``: its sums come from the Gluon kernel of ``backends/triton_moe_gluon.py``
    (``BLOCK_N`` = ``num_warps`` x 1, 2 or 4 rows per thread) and the reduction launch runs the epilogue. Any GEMM
    config of the MMA tiles may set ``"MIN_M": <a power of two from 16 below BLOCK_M>`` (:func:`moe_gemm`). Raises
    ValueError naming the file and
    the field on a malformed file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a tile configuration file: {exc}") from None
    if not isinstance(data, dict) or data.get("format_version") != CONFIG_FORMAT_VERSION:
        raise ValueError(f"{path}: format_version must be {CONFIG_FORMAT_VERSION}")
    extra = set(data) - {"format_version", "key", "tuned", "configs"}
    if extra:
        raise ValueError(f"{path}: unknown top-level key(s) {', '.join(sorted(map(str, extra)))}; a tile file has "
                         f"format_version, key, tuned and configs")
    if "key" in data and not isinstance(data["key"], dict):
        raise ValueError(f"{path}: key must be an object (E, N, K, format, block_shape, device), got {data['key']!r}")
    _FILE_KEYS[path] = dict(data.get("key") or {})
    configs = data.get("configs")
    if not isinstance(configs, dict) or not configs:
        raise ValueError(f"{path}: configs must be a non-empty object of token count -> config")
    out = {}
    for tok, cfg in configs.items():
        where = f"{path}: configs[{tok!r}]"
        if not str(tok).isdigit() or int(tok) < 1:
            raise ValueError(f"{where}: keys are positive token counts")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("BLOCK_M"), int) or isinstance(cfg["BLOCK_M"], bool) \
                or cfg["BLOCK_M"] not in (*GEMV_BLOCK_MS, 16, 32, 64, 128, 256):
            raise ValueError(f"{where}: BLOCK_M must be one of 16, 32, 64, 128, 256 (or {', '.join(map(str, GEMV_BLOCK_MS))} "
                             f"with GEMV)")
        is_direct = cfg.get("DIRECT") is True
        for g in ("gemm1", "gemm2"):
            if isinstance(cfg.get(g), dict) and cfg[g].get("PREFETCH") is True and cfg[g].get("GEMV") \
                    and cfg.get("BLOCK_M") != 1:
                raise ValueError(f"{where}.{g}: PREFETCH in the GEMV mode needs BLOCK_M 1, got {cfg.get('BLOCK_M')!r}")
            if isinstance(cfg.get(g), dict) and cfg[g].get("GLUON") is True and cfg.get("BLOCK_M") != 1:
                raise ValueError(f"{where}.{g}: GLUON (the Gluon GEMV) needs BLOCK_M 1, got {cfg.get('BLOCK_M')!r}")
        out[int(tok)] = {"BLOCK_M": cfg["BLOCK_M"],
                         "gemm1": _check_gemm_cfg(cfg.get("gemm1"), where + ".gemm1", is_direct),
                         "gemm2": _check_gemm_cfg(cfg.get("gemm2"), where + ".gemm2", is_direct)}
        fmt = (data.get("key") or {}).get("format") if isinstance(data.get("key"), dict) else None
        if "DIRECT" in cfg:
            direct = cfg["DIRECT"]
            if not isinstance(direct, bool):
                raise ValueError(f"{where}: DIRECT must be true or false, got {direct!r}")
            if direct:
                if fmt not in FP4_FORMATS:
                    said = f"key.format {fmt}" if fmt else "no key.format"
                    raise ValueError(f"{where}: DIRECT is an option of packed-FP4 files (mxfp4, nvfp4) only "
                                     f"(this file: {said})")
                c1, c2 = out[int(tok)]["gemm1"], out[int(tok)]["gemm2"]
                if cfg["BLOCK_M"] != 1 or not (c1.get("GEMV") and c2.get("GEMV")) \
                        or c1.get("SPLIT_K", 1) > 1 or c2.get("SPLIT_K", 1) > 1:
                    raise ValueError(f"{where}: DIRECT (the GEMVs over the unsorted slots) needs BLOCK_M 1 and GEMV "
                                     f"without SPLIT_K in both GEMMs")
                if c1.get("SPLIT_SLOTS"):
                    raise ValueError(f"{where}.gemm1: SPLIT_SLOTS is a second-GEMM option of DIRECT buckets")
                out[int(tok)]["DIRECT"] = True
        if not out[int(tok)].get("DIRECT") and any(out[int(tok)][g].get("SPLIT_SLOTS") for g in ("gemm1", "gemm2")):
            raise ValueError(f"{where}: SPLIT_SLOTS is a second-GEMM option of DIRECT buckets")
        if out[int(tok)]["gemm2"].get("SPLIT") or (out[int(tok)]["gemm1"].get("SPLIT") and fmt != "fp8_block"):
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: SPLIT is a first-GEMM option of fp8_block files only (this file: {said})")
        if (out[int(tok)]["gemm1"].get("SWAP_AB") or out[int(tok)]["gemm2"].get("SWAP_AB")) and fmt not in FP4_FORMATS:
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: SWAP_AB is an option of packed-FP4 files (mxfp4, nvfp4) only (this file: {said})")
        if any(out[int(tok)][g].get("PREQUANT") for g in ("gemm1", "gemm2")) and fmt not in PREQUANT_FORMATS:
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: PREQUANT is an option of {' and '.join(PREQUANT_FORMATS)} files only "
                             f"(this file: {said})")
        if any(out[int(tok)][g].get("TMA") for g in ("gemm1", "gemm2")) and fmt not in TMA_FORMATS:
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: TMA is an option of {', '.join(TMA_FORMATS)} files only (this file: {said})")
        gemv = [bool(out[int(tok)][g].get("GEMV")) for g in ("gemm1", "gemm2")]
        if any(out[int(tok)][g].get("PREFETCH") for g in ("gemm1", "gemm2")) and fmt not in FP4_FORMATS:
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: PREFETCH (the next K tile's loads issued ahead) is an option of packed-FP4 "
                             f"files (mxfp4, nvfp4) only (this file: {said})")
        if any(gemv) and fmt not in FP4_FORMATS:
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}: GEMV is an option of packed-FP4 files (mxfp4, nvfp4) only (this file: {said})")
        if out[int(tok)]["gemm2"].get("GU_DOT"):
            raise ValueError(f"{where}.gemm2: GU_DOT is a first-GEMM option (the gate and up tiles of a gated layer)")
        if out[int(tok)]["gemm1"].get("GU_DOT") and (fmt not in GU_DOT_FORMATS or not out[int(tok)]["gemm1"].get("TMA")):
            said = f"key.format {fmt}" if fmt else "no key.format"
            raise ValueError(f"{where}.gemm1: GU_DOT (the gate and up tiles as one MMA) needs TMA, in "
                             f"{', '.join(GU_DOT_FORMATS)} files (this file: {said}, TMA "
                             f"{bool(out[int(tok)]['gemm1'].get('TMA'))})")
        bm = out[int(tok)]["BLOCK_M"]
        if out[int(tok)]["gemm1"].get("WGMMA"):
            raise ValueError(f"{where}.gemm1: WGMMA is a second-GEMM option (its A is the first GEMM's sorted rows)")
        if out[int(tok)]["gemm2"].get("WGMMA"):
            if out[int(tok)].get("DIRECT"):
                raise ValueError(f"{where}.gemm2: WGMMA is an option of the sorted MMA tiles, not of DIRECT buckets")
            try:
                wgmma_check(out[int(tok)]["gemm2"], block_m=bm, fmt=fmt or "(no key.format)")
            except ValueError as exc:
                raise ValueError(f"{where}.gemm2: {exc}") from None
            if (fmt or "").startswith("fp8") and not out[int(tok)]["gemm2"].get("PREQUANT"):
                raise ValueError(f"{where}.gemm2: WGMMA reads FP8 A as e4m3 in memory: an FP8 layer's WGMMA config "
                                 f"needs PREQUANT (the runner's row quantization before the GEMM)")
        for g in ("gemm1", "gemm2"):
            mm = out[int(tok)][g].get("MIN_M", 0)
            if mm >= bm:
                raise ValueError(f"{where}.{g}: MIN_M {mm} must be below BLOCK_M {bm}")
            if mm and mm < FP8_MIN_M and (fmt or "").startswith("fp8"):
                raise ValueError(f"{where}.{g}: MIN_M {mm}: FP8 tiles need MIN_M >= {FP8_MIN_M} ({FP8_MIN_M_WHY})")
        if bm < 16 and not all(gemv):
            raise ValueError(f"{where}: BLOCK_M {bm} is below the MMA tile's 16 rows: both GEMMs must set GEMV")
        if any(gemv) and bm > GEMV_MAX_BLOCK_M:
            raise ValueError(f"{where}: GEMV runs blocks of at most {GEMV_MAX_BLOCK_M} rows, got BLOCK_M {bm}")
    return out


def get_config(num_local: int, n13: int, hidden: int, fmt: str, tokens: int, top_k: int, *,
               device_name: str | None = None, block_shape: tuple[int, int] | None = None,
               config_dir: str | os.PathLike | None = None, gated: bool = True,
               smem_limit: int | None = None) -> tuple[dict, str]:
    """The tile configuration for ``tokens``: (config, source). Source is the tuned file's name when a
    file for (E, N, K, format, block shape, device) exists in ``config_dir`` (default
    :data:`CONFIG_DIR`; the file's bucket nearest to ``tokens`` in log scale), else ``"default"``
    (:func:`default_config` at the :data:`TOKEN_BUCKETS` bucket of ``tokens``). fp8_block configs
    get ``BLOCK_K`` = the block's K size whatever the file says, and a first-GEMM ``BLOCK_N`` of at
    least that (a multiple of it: both are powers of two)."""
    if device_name:
        path = Path(config_dir or CONFIG_DIR) / config_file_name(num_local, n13, hidden, fmt, device_name, block_shape)
        if path.is_file():
            table = load_config_file(str(path))
            check_file_key(path, num_local, n13, hidden, fmt, device_name, block_shape)   # SPLIT: load_config_file
            cfg = table[token_bucket(tokens, tuple(sorted(table)))]
            if fmt == "fp8_block" and block_shape:
                bk = block_shape[1]
                cfg = {**cfg, "gemm1": {**cfg["gemm1"], "BLOCK_K": bk, "BLOCK_N": max(bk, cfg["gemm1"]["BLOCK_N"])},
                       "gemm2": {**cfg["gemm2"], "BLOCK_K": bk}}
            return cfg, path.name
    return default_config(num_local, n13, hidden, fmt, token_bucket(tokens), top_k, block_shape, gated,
                          smem_limit), "default"


#: Each tile file's ``key`` as :func:`load_config_file` read it (path -> key), for :func:`check_file_key`.
_FILE_KEYS: dict[str, dict] = {}


def check_file_key(path: str | os.PathLike, num_local: int, n13: int, hidden: int, fmt: str, device_name: str,
                   block_shape: tuple[int, int] | None = None) -> None:
    """A tile file's ``key`` against the layer it is looked up for by its name (the arguments of
    :func:`config_file_name`: E, N, K, format, device, block shape), after :func:`load_config_file` read it: the file
    is chosen by its name, and its options are checked against ``key.format``, so a key that says another layer is an
    error naming the file and the field (ValueError). A key without a field says nothing about it."""
    want = {"E": num_local, "N": n13, "K": hidden, "format": fmt,
            "block_shape": list(block_shape) if fmt == "fp8_block" and block_shape else None, "device": device_name}
    key = _FILE_KEYS.get(str(path), {})
    for field, v in want.items():
        if field not in key:
            continue
        got = key[field]
        same = (str(got).replace(" ", "_") == str(v).replace(" ", "_")) if field == "device" else got == v
        if not same:
            raise ValueError(f"{path}: key.{field} is {got!r}, but the file's name looks it up for a layer with "
                             f"{field} {v!r} (E={want['E']}, N={want['N']}, K={want['K']}, format {want['format']}): "
                             f"rename the file or fix its key")


def warm_token_counts(table: dict[int, dict], top_k: int, single_cta_max_slots: int | None = None,
                      num_local: int | None = None) -> list[int]:
    """The smallest token count of each distinct (tile configuration, sort path) that ``table`` (bucket
    -> config, as :func:`load_config_file` returns) gives: one forward at each compiles every kernel
    variant a layer can use, since a token count uses the configuration of its nearest bucket (so counts
    past the largest bucket use the largest bucket's) and the sort path changes once, at
    ``S = T * top_k >`` the one-CTA limit (``single_cta_max_slots``, else :func:`single_cta_limit` of
    ``num_local``, else :data:`SINGLE_CTA_MAX_SLOTS`). Bucket boundaries lie at the geometric means of adjacent
    buckets (a tie goes to the smaller bucket)."""
    if single_cta_max_slots is not None:
        limit = single_cta_max_slots
    else:
        limit = single_cta_limit(num_local) if num_local is not None else SINGLE_CTA_MAX_SLOTS
    buckets = tuple(sorted(table))
    cands = {1, limit // top_k + 1}
    for a, b in zip(buckets, buckets[1:], strict=False):
        m = math.sqrt(a * b)
        cands |= {max(1, math.floor(m)), math.floor(m) + 1}
    first: dict[tuple, int] = {}
    for t in sorted(cands):
        key = (json.dumps(table[token_bucket(t, buckets)], sort_keys=True), t * top_k <= limit)
        first.setdefault(key, t)
    return sorted(first.values())

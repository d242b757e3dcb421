"""``deep_gemm``: MoE expert compute on DeepGEMM's M-grouped contiguous GEMMs (sm90). Facts: ``deep_gemm.yaml``.

One rank's layer (``T`` tokens, top-k ``K``, ``S = T*K`` routing slots, ``E`` local experts), every buffer
sized from ``T`` alone (no host synchronisation, so a forward can be captured in a CUDA graph):

1. :func:`~.triton_moe_kernels.moe_align` with ``block_m`` = DeepGEMM's M alignment of the contiguous layout
   (``deep_gemm.get_mk_alignment_for_contiguous_layout()``, 128): this rank's slots sorted by local expert,
   each expert's run padded to a multiple of 128 rows, in a buffer of the static size ``R =``
   :func:`~.triton_moe_kernels.max_padded_rows` ``(S, E, 128)``.
2. :func:`gather` (one Triton kernel): the operand rows ``a [R, H]`` (row ``r`` holds token ``slot // K`` of its
   sorted slot; padding rows zero, as DeepGEMM's own tests build the layout), ``grouped_layout [R]`` int32 (the
   local expert of each row, ``-1`` for padding rows and for rows past the device-side row count: DeepGEMM
   skips them) and ``row_of_slot [S]`` (the inverse permutation for the combine). FP8: the hidden states
   are first quantized per token and 128 columns (:func:`~.triton_moe_kernels.group_quant`, e4m3, multiplier
   ``448 / amax``) and the kernel gathers the e4m3 rows and their float32 scales, written MN-major
   (``[H/128, R]`` transposed: the TMA-aligned layout DeepGEMM's sm90 kernel reads, so it copies nothing).
3. GEMM1 ``h = a @ w13[e].T`` (``m_grouped_bf16_gemm_nt_contiguous`` or ``m_grouped_fp8_fp4_gemm_nt_contiguous``
   with 1x128 activation and 128x128 weight scales), bf16 out ``[R, N13]``.
4. :func:`activation` (one Triton kernel): the gated activation of ``h`` (silu, gelu; relu2 not gated) in
   float32, stored bf16, or for FP8 quantized per row and 128 columns to e4m3 with MN-major scales; rows
   whose layout is -1 are written as zeros.
5. GEMM2 ``y = act @ w2[e].T``, bf16 ``[R, H]``.
6. :func:`combine` (one Triton kernel): ``out[t] = sum_k weight[t, k] * y[row_of_slot[t*K + k]]`` over this
   rank's slots, in float32, stored in the input dtype. Rows of other slots are never read.

Precision: bf16 operands (FP8: e4m3 with float32 scales; fp8_channel's row scales in float32 after the GEMMs), float32 accumulation inside DeepGEMM; ``h``,
the activation (bf16 only) and ``y`` rounded once to bf16; the routing weight applied in float32 in the combine.

Weights (``prepare_weights``, once): the canonical ``w13 [E, N13, H]`` / ``w2 [E, H, I]`` are already the
``[G, N, K]`` K-major operands DeepGEMM asserts (made contiguous); fp8_block scales ``[E, ceil(N/128),
ceil(K/128)]`` float32 are passed once through ``deep_gemm.transform_sf_into_required_layout`` (on sm90 a check
of the SFB layout, no copy).

``deep_gemm`` (SGLang's fork sgl-deep-gemm, or upstream DeepGEMM with the same API) is imported when a core is
built, never when this module is imported. DeepGEMM JIT-compiles each kernel configuration at its first call
(cached on disk by DeepGEMM): run one eager forward at a token count before capturing a CUDA graph at it, or
pass ``warmup_tokens``. On the CPU the core runs only under Triton's interpreter with a stand-in ``deep_gemm``
module (tests). Sources for the DeepGEMM contract: deepseek-ai/DeepGEMM@54e22612409371 csrc/apis/gemm.hpp
(m_grouped_bf16_gemm_nt_contiguous, m_grouped_fp8_fp4_gemm_nt_contiguous), csrc/apis/layout.hpp
(transform_sf_into_required_layout), csrc/utils/layout.hpp (check_sf_layout), tests/generators.py
(generate_m_grouped_contiguous), deep_gemm/include/deep_gemm/scheduler/gemm.cuh (is_computation_valid).

fp8_channel (one float32 scale per output row of each expert, e4m3 weights): DeepGEMM's sm90 grouped FP8 GEMM
takes 128x128 weight-scale blocks only (csrc/apis/gemm.hpp: sm90_m_grouped_fp8_gemm_contiguous_1d2d), so the GEMMs
run with unit weight scales and the per-row scale, a factor of each output column, is applied after them in float32:
to the gate and up columns of ``h`` in :func:`activation` (before the activation), and to ``y`` in :func:`combine`
(with the routing weight). The activations are quantized per token and 128 columns (fp8_group), as for fp8_block.

Status (issue 26): on an H200 with torch 2.11 the sgl-deep-gemm 0.1.7 wheel (its _C.so built against torch 2.13)
failed DeepGEMM's first tensor checks (benchmarks/results/deep_gemm_h200_2026-12-01/); DeepGEMM with _C built
against the running torch passes (benchmarks/results/deep_gemm_h200_2026-12-02/). :func:`load_deep_gemm` refuses
a sgl-deep-gemm wheel whose torch / apache-tvm-ffi differ from its build's.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import torch
import triton
import triton.language as tl

from moe_select.contracts import Registrar
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec

from . import triton_moe_kernels as K
from .triton_moe import checked_forward

FORMATS = ("bf16", "fp8_block", "fp8_channel")
#: Activations the core computes between the GEMMs (the shared epilogue function of the triton runner);
#: swiglu_oai is left out: gpt-oss's expert biases cannot be added to DeepGEMM's output here.
ACTIVATIONS = ("silu", "gelu", "relu2")
#: The M alignment of DeepGEMM's contiguous layout this core was written and checked against (DeepGEMM's
#: kLegacyMKAlignmentForContiguousLayout, csrc/jit_kernels/heuristics/runtime.hpp @54e22612409371).
M_ALIGNMENT = 128
#: fp8_block: activations per 1x128, weights per 128x128 (DeepGEMM's sm90 recipe (1, 128, 128)).
GROUP = 128
#: Hopper's bf16 grouped GEMM asserts K % 64 == 0 (csrc/jit_kernels/impls/sm90_bf16_gemm.hpp).
BF16_K_MULTIPLE = 64
_API = ("get_mk_alignment_for_contiguous_layout", "m_grouped_bf16_gemm_nt_contiguous",
        "m_grouped_fp8_fp4_gemm_nt_contiguous", "transform_sf_into_required_layout")


#: sgl-deep-gemm wheels ship a prebuilt ``_C.so`` linked against one torch's C++ ABI (SGLang's release workflow
#: builds it against a pinned TORCH_VER, sgl-project/sglang@00ac7105db02:.github/workflows/release-whl-deepgemm.yml)
#: and one apache-tvm-ffi (its Requires-Dist pin). Version -> the torch ``major.minor`` its ``_C.so`` was compiled
#: against: 0.1.7's torch-header assert sites (file:line strings in ``_C.so``) match torch 2.13.0's line for line.
#: On torch 2.11 + tvm-ffi 0.1.15 (H200, 2026-12-01, benchmarks/results/deep_gemm_h200_2026-12-01/) DeepGEMM's
#: first check of the first tensor failed (bf16: ``dim == 2 or dim == 3``; fp8_block: segfault, unsupported
#: TypeMeta) although the tensors satisfy those checks: a runtime other than the wheel's is refused here.
WHEEL_TORCH = {"0.1.7": "2.13"}
WHEEL_DIST = "sgl-deep-gemm"


def _dist_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None when not installed)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _dist_requires(name: str) -> list[str]:
    """The Requires-Dist lines of installed distribution ``name``."""
    from importlib import metadata

    return list(metadata.requires(name) or [])


def wheel_runtime_problems(wheel: str, requires: Sequence[str], tvm_ffi: str | None, torch_version: str) -> list[str]:
    """What in this runtime differs from the one sgl-deep-gemm ``wheel``'s prebuilt ``_C.so`` was built for:
    apache-tvm-ffi against the wheel's ``==`` pin in ``requires``, torch's ``major.minor`` against
    :data:`WHEEL_TORCH` (a wheel not listed there was not checked, which is a problem too). Empty when none."""
    out = []
    for req in requires:
        name, _, pin = req.partition("==")
        if name.strip().lower().replace("_", "-") == "apache-tvm-ffi" and pin:
            pin = pin.split(";")[0].strip()
            if tvm_ffi != pin:
                out.append(f"apache-tvm-ffi {tvm_ffi or 'not installed'} (sgl-deep-gemm {wheel} requires =={pin})")
    want = WHEEL_TORCH.get(wheel)
    have = ".".join(torch_version.split("+")[0].split(".")[:2])
    if want is None:
        out.append(f"sgl-deep-gemm {wheel}: the torch its prebuilt _C.so links against was not checked here "
                   f"(checked: {', '.join(f'{w} -> torch {t}' for w, t in WHEEL_TORCH.items())})")
    elif have != want:
        out.append(f"torch {torch_version} (sgl-deep-gemm {wheel}'s prebuilt _C.so is compiled against torch {want}: "
                   "another torch's C++ ABI makes DeepGEMM misread tensors)")
    return out


def load_deep_gemm() -> ModuleType:
    """Import ``deep_gemm`` and check it has the grouped-GEMM API this core calls; raises
    :class:`RunnerInputError` naming what is missing (a look-alike or an older DeepGEMM), or, when the
    distribution is sgl-deep-gemm (a prebuilt ``_C.so``), naming the torch / apache-tvm-ffi that differ from the
    wheel's (:func:`wheel_runtime_problems`; checked before the import, which loads ``_C.so``). A DeepGEMM built
    from source is compiled against the installed torch and is not checked for it."""
    wheel = _dist_version(WHEEL_DIST)
    if wheel is not None:
        problems = wheel_runtime_problems(wheel, _dist_requires(WHEEL_DIST), _dist_version("apache-tvm-ffi"),
                                          torch.__version__)
        if problems:
            raise RunnerInputError("deep_gemm: this runtime is not the one the installed sgl-deep-gemm wheel was "
                                   "built for: " + "; ".join(problems) + " (install torch "
                                   f"{WHEEL_TORCH.get(wheel, '?')} and the pinned apache-tvm-ffi, or build "
                                   "DeepGEMM from source against this torch)")
    try:
        dg = importlib.import_module("deep_gemm")
    except Exception as exc:  # ImportError, or DeepGEMM's own load-time failures (CUDA home, _C build)
        raise RunnerInputError(f"deep_gemm: cannot import the deep_gemm module (pip install sgl-deep-gemm==0.1.7): "
                               f"{type(exc).__name__}: {exc}") from exc
    missing = [n for n in _API if not callable(getattr(dg, n, None))]
    if missing:
        raise RunnerInputError(f"deep_gemm: the installed deep_gemm module ({getattr(dg, '__file__', '?')}) has no "
                               f"{', '.join(missing)}: not the DeepGEMM grouped-GEMM API this core calls "
                               "(sgl-deep-gemm 0.1.7, deepseek-ai/DeepGEMM 2.x)")
    return dg


# ------------------------------------------------------------------------------------------------
# Triton kernels: gather (before GEMM1), activation (between the GEMMs), combine (after GEMM2)
# ------------------------------------------------------------------------------------------------

def _gather_kernel(x_ptr, xs_ptr, a_ptr, as_ptr, sorted_ptr, block_expert_ptr, num_rows_ptr, layout_ptr, inv_ptr,
                   num_slots, top_k, H, R, stride_x, stride_xs, stride_a,
                   NG: tl.constexpr, HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_H: tl.constexpr, BLOCK_G: tl.constexpr):
    """Rows ``[pid0*BLOCK_R, +BLOCK_R)`` x columns ``[pid1*BLOCK_H, +BLOCK_H)``: ``a[r] = x[slot // top_k]`` for
    sorted slots (zeros for padding rows; rows past ``num_rows`` are not written). Column block 0 also
    writes ``layout[r]`` (local expert, -1 for padding and past ``num_rows``), ``inv[slot] = r`` and, with
    HAS_SCALE, the scales ``as[g * R + r] = xs[token, g]`` (MN-major)."""
    num_rows = tl.load(num_rows_ptr)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    slot = tl.load(sorted_ptr + rows, mask=r_ok, other=num_slots)
    valid = r_ok & (rows < num_rows) & (slot < num_slots)
    tok = tl.where(valid, slot // top_k, 0).to(tl.int64)
    if tl.program_id(1) == 0:
        be = tl.load(block_expert_ptr + rows // BLOCK_M, mask=r_ok, other=-1)
        tl.store(layout_ptr + rows, tl.where(valid, be, -1), mask=r_ok)
        tl.store(inv_ptr + slot, rows, mask=valid)
        if HAS_SCALE:
            g = tl.arange(0, BLOCK_G)
            g_ok = g < NG
            live = r_ok & (rows < num_rows)
            sc = tl.load(xs_ptr + tok[:, None] * stride_xs + g[None, :], mask=valid[:, None] & g_ok[None, :], other=0.0)
            tl.store(as_ptr + g[None, :].to(tl.int64) * R + rows[:, None], sc, mask=live[:, None] & g_ok[None, :])
    live = r_ok & (rows < num_rows)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    c_ok = cols < H
    v = tl.load(x_ptr + tok[:, None] * stride_x + cols[None, :], mask=valid[:, None] & c_ok[None, :], other=0)
    tl.store(a_ptr + rows.to(tl.int64)[:, None] * stride_a + cols[None, :], v, mask=live[:, None] & c_ok[None, :])


gather_kernel = K._kernel(do_not_specialize=["num_slots", "R"])(_gather_kernel)


def _activation_kernel(h_ptr, q_ptr, s_ptr, layout_ptr, num_rows_ptr, cs_ptr, inter, R, stride_h, stride_q,
                       stride_cs, swiglu_limit, ACT: tl.constexpr, GATED: tl.constexpr, QUANT: tl.constexpr,
                       HAS_CS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Rows ``[pid0*BLOCK_R, +BLOCK_R)`` below ``num_rows`` x columns ``[pid1*BLOCK_C, +BLOCK_C)``: the activation of
    ``h`` (gate ``[0, inter)``, up ``[inter, 2*inter)`` when GATED) in float32 -> ``q`` (bf16), or with QUANT
    e4m3 per row and group of BLOCK_C columns, scale ``amax / 448`` at ``s[pid1 * R + r]`` (MN-major). With HAS_CS
    each column of ``h`` is first multiplied by its expert's output-row scale ``cs[layout[r], col]`` (fp8_channel).
    Rows whose layout is -1 are zero."""
    num_rows = tl.load(num_rows_ptr)
    if tl.program_id(0) * BLOCK_R >= num_rows:
        return
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < num_rows
    lay = tl.load(layout_ptr + rows, mask=r_ok, other=-1)
    live = r_ok & (lay >= 0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cols < inter
    rows64 = rows.to(tl.int64)
    m = live[:, None] & c_ok[None, :]
    g = tl.load(h_ptr + rows64[:, None] * stride_h + cols[None, :], mask=m, other=0.0).to(tl.float32)
    if GATED:
        u = tl.load(h_ptr + rows64[:, None] * stride_h + inter + cols[None, :], mask=m, other=0.0).to(tl.float32)
    else:
        u = g
    if HAS_CS:
        cs_row = cs_ptr + tl.where(live, lay, 0).to(tl.int64)[:, None] * stride_cs
        g = g * tl.load(cs_row + cols[None, :], mask=m, other=0.0)
        if GATED:
            u = u * tl.load(cs_row + inter + cols[None, :], mask=m, other=0.0)
        else:
            u = g
    v = tl.where(m, K._activation(g, u, swiglu_limit, ACT), 0.0)
    out_mask = r_ok[:, None] & c_ok[None, :]
    if QUANT:
        amax = tl.maximum(tl.max(tl.abs(v), 1), 1e-12)
        qv = tl.clamp(v * tl.math.div_rn(tl.full([BLOCK_R], 448.0, tl.float32), amax)[:, None], -448.0, 448.0)
        tl.store(q_ptr + rows64[:, None] * stride_q + cols[None, :], qv.to(q_ptr.dtype.element_ty), mask=out_mask)
        tl.store(s_ptr + tl.program_id(1).to(tl.int64) * R + rows64,
                 tl.math.div_rn(amax, tl.full([BLOCK_R], 448.0, tl.float32)), mask=r_ok)
    else:
        tl.store(q_ptr + rows64[:, None] * stride_q + cols[None, :], v.to(q_ptr.dtype.element_ty), mask=out_mask)


activation_kernel = K._kernel(do_not_specialize=["R"])(_activation_kernel)


def _combine_kernel(y_ptr, inv_ptr, ids_ptr, w_ptr, out_ptr, cs_ptr, num_tokens, top_k, H, stride_y, stride_o,
                    stride_cs, expert_offset, num_local, HAS_CS: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_H: tl.constexpr):
    """``out[t] = sum_k w[t, k] * y[inv[t*top_k + k]]`` over the slots of this rank's experts (float32); with HAS_CS
    each ``y`` column also times its expert's output-row scale ``cs[e, col]`` (fp8_channel)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = offs_t < num_tokens
    h_ok = offs_h < H
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for k in range(0, top_k):
        slot = offs_t * top_k + k
        e = tl.load(ids_ptr + slot, mask=t_ok, other=-1).to(tl.int32) - expert_offset
        ok = t_ok & (e >= 0) & (e < num_local)
        row = tl.load(inv_ptr + slot, mask=ok, other=0).to(tl.int64)
        w = tl.load(w_ptr + slot, mask=ok, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + row[:, None] * stride_y + offs_h[None, :], mask=ok[:, None] & h_ok[None, :],
                    other=0.0).to(tl.float32)
        if HAS_CS:
            y = y * tl.load(cs_ptr + tl.where(ok, e, 0).to(tl.int64)[:, None] * stride_cs + offs_h[None, :],
                            mask=ok[:, None] & h_ok[None, :], other=0.0)
        acc += w[:, None] * y
    tl.store(out_ptr + offs_t.to(tl.int64)[:, None] * stride_o + offs_h[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=t_ok[:, None] & h_ok[None, :])


combine_kernel = K._kernel(do_not_specialize=["num_tokens"])(_combine_kernel)


@dataclass
class Gathered:
    """The first GEMM's operands and the layout of one forward: ``a [R, H]`` (bf16 or e4m3), ``sfa`` the
    MN-major activation scales (``[R, H/128]`` with strides ``(1, R)``) or None, ``layout [R]`` int32,
    ``row_of_slot [S]`` int32 (valid for this rank's slots only), ``num_rows [1]`` int32."""

    a: torch.Tensor
    sfa: torch.Tensor | None
    layout: torch.Tensor
    row_of_slot: torch.Tensor
    num_rows: torch.Tensor


def gather(x: torch.Tensor, x_scale: torch.Tensor | None, topk_ids: torch.Tensor, align: K.Alignment) -> Gathered:
    """Step 2 of the module doc: ``x [T, H]`` (bf16, or e4m3 with ``x_scale [T, H/128]`` float32) and the sort
    ``align`` of ``topk_ids [T, K]`` -> :class:`Gathered` (one kernel launch, no host synchronisation)."""
    t, h = x.shape
    s = topk_ids.numel()
    r = align.rows
    dev = x.device
    a = torch.empty(r, h, dtype=x.dtype, device=dev)
    layout = torch.empty(r, dtype=torch.int32, device=dev)
    inv = torch.empty(max(s, 1), dtype=torch.int32, device=dev)
    ng = 0
    sfa_buf = None
    if x_scale is not None:
        ng = x_scale.shape[1]
        sfa_buf = torch.empty(ng, r, dtype=torch.float32, device=dev)
    xv, av = (x.view(torch.uint8), a.view(torch.uint8)) if x.dtype == torch.float8_e4m3fn else (x, a)
    block_r = 16
    block_h = min(512, max(16, K._pow2(h)))
    gather_kernel.launch((triton.cdiv(r, block_r), triton.cdiv(h, block_h)), dev, xv,
                         x_scale if x_scale is not None else layout, av, sfa_buf if sfa_buf is not None else layout,
                         align.sorted_slots, align.block_expert, align.num_rows, layout, inv, s, topk_ids.shape[1], h, r, x.stride(0), x_scale.stride(0) if x_scale is not None else 0, a.stride(0),
                         NG=ng, HAS_SCALE=x_scale is not None, BLOCK_M=align.block_m, BLOCK_R=block_r, BLOCK_H=block_h,
                         BLOCK_G=max(16, K._pow2(ng)), num_warps=4)
    return Gathered(a, None if sfa_buf is None else sfa_buf.t(), layout, inv, align.num_rows)


def activation(h: torch.Tensor, layout: torch.Tensor, num_rows: torch.Tensor, *, inter: int, activation: str,
               gated: bool, quant: bool, swiglu_limit: float = 7.0,
               col_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Step 4 of the module doc: ``h [R, N13]`` bf16 -> ``act [R, inter]`` bf16, or (``quant``) e4m3 with MN-major
    scales ``[R, inter/128]`` (strides ``(1, R)``). ``col_scale [E, N13]`` float32 (fp8_channel): ``h``'s columns
    times the row's expert's scales first. Rows at or past ``num_rows[0]`` are not written."""
    r = h.shape[0]
    dev = h.device
    block_c = GROUP if quant else min(256, max(16, K._pow2(inter)))
    q = torch.empty(r, inter, dtype=torch.float8_e4m3fn if quant else torch.bfloat16, device=dev)
    ng = triton.cdiv(inter, block_c)
    s = torch.empty(ng, r, dtype=torch.float32, device=dev) if quant else None
    block_r = 16
    cs = h if col_scale is None else col_scale
    activation_kernel.launch((triton.cdiv(r, block_r), ng), dev, h, q, s if s is not None else layout, layout, num_rows,
                             cs, inter, r, h.stride(0), q.stride(0), cs.stride(0), float(swiglu_limit),
                             ACT=K.ACTIVATIONS[activation], GATED=gated, QUANT=quant, HAS_CS=col_scale is not None,
                             BLOCK_R=block_r, BLOCK_C=block_c, num_warps=4)
    return q, (None if s is None else s.t())


def combine(y: torch.Tensor, row_of_slot: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            out: torch.Tensor, num_local: int, expert_offset: int, col_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Step 6 of the module doc: ``out [T, H] = sum_k weight * y[row_of_slot[slot]]`` over this rank's slots
    (float32 sums, stored in ``out.dtype``); ``col_scale [E, H]`` float32 (fp8_channel): ``y`` times its expert's
    output-row scales. Returns ``out``."""
    t, k = topk_ids.shape
    h = out.shape[1]
    block_h = min(1024, max(16, K._pow2(h)))
    block_t = max(1, 2048 // block_h)
    cs = y if col_scale is None else col_scale
    combine_kernel.launch((triton.cdiv(t, block_t), triton.cdiv(h, block_h)), out.device, y, row_of_slot, topk_ids,
                          topk_weights, out, cs, t, k, h, y.stride(0), out.stride(0), cs.stride(0), expert_offset,
                          num_local, HAS_CS=col_scale is not None, BLOCK_T=block_t, BLOCK_H=block_h, num_warps=4)
    return out


# ------------------------------------------------------------------------------------------------
# the core
# ------------------------------------------------------------------------------------------------

@dataclass
class DeepGemmWeights:
    """Weights as DeepGEMM takes them: ``w13 [E, N13, H]``, ``w2 [E, H, I]`` contiguous (K-major ``[G, N, K]``),
    bf16 or e4m3; FP8: ``s13 [E, N13/128, H/128]``, ``s2 [E, H/128, I/128]`` float32 as
    ``transform_sf_into_required_layout`` returned them (None for bf16; all ones for fp8_channel); fp8_channel:
    ``c13 [E, N13]``, ``c2 [E, H]`` float32, the per-output-row scales applied after the GEMMs (else None).
    ``keep``: the scale tensors given to ``transform_sf_into_required_layout``. On sm90 it returns a view of its
    input's memory that does not own it (DeepGEMM's convert_to_torch_tensor wraps the pointer with
    ``torch::from_blob``), so the input must live as long as the weights: a freed input left ``s13``/``s2``
    dangling (H200, 2026-12-02: wrong output, then "pointer resides on host memory")."""

    w13: torch.Tensor
    w2: torch.Tensor
    s13: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    c13: torch.Tensor | None = None
    c2: torch.Tensor | None = None
    keep: tuple[torch.Tensor, ...] = ()


class DeepGemmMoeCore:
    """Expert compute core of the ``deep_gemm`` runner for one rank (see :class:`~moe_select.layer.LayerSpec`;
    module doc for the pipeline). Imports ``deep_gemm`` here (:func:`load_deep_gemm`).

    ``device``: a CUDA device of compute capability 9.x (the CPU only under ``TRITON_INTERPRET=1`` with a
    stand-in ``deep_gemm``: tests). ``warmup_tokens``: token counts to run one forward at in
    ``prepare_weights`` (DeepGEMM's JIT compiles the configurations they use; default none).

    Raises :class:`RunnerInputError` for a format other than bf16/fp8_block/fp8_channel, an activation other than
    silu/gelu/relu2, router weights on the input, an fp8_block block shape other than 128x128, a hidden or
    per-rank intermediate size that is not a multiple of 64 (bf16: DeepGEMM's sm90 K alignment) or 128
    (FP8: whole scale blocks), another GPU than sm90, a ``deep_gemm`` without the API, or a contiguous
    layout alignment other than 128."""

    def __init__(self, spec: LayerSpec, device: torch.device | str, *, warmup_tokens: Sequence[int] = ()):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"deep_gemm does not implement {spec.quant} here (it runs {', '.join(FORMATS)})")
        if spec.activation not in ACTIVATIONS:
            raise RunnerInputError(f"deep_gemm does not implement the activation {spec.activation!r} here "
                                   f"(it runs {', '.join(ACTIVATIONS)})")
        if spec.weight_on_input:
            raise RunnerInputError("deep_gemm: router weights on the input (llama4 routing) are not implemented here")
        fp8 = spec.quant in ("fp8_block", "fp8_channel")
        if spec.quant == "fp8_block" and spec.block_shape is not None and tuple(int(v) for v in spec.block_shape) != (GROUP, GROUP):
            raise RunnerInputError(f"deep_gemm fp8_block: block shape {list(spec.block_shape)} is not supported: "
                                   f"DeepGEMM's sm90 recipe is {GROUP}x{GROUP} weight blocks")
        mult = GROUP if fp8 else BF16_K_MULTIPLE
        for name, v in (("hidden_size", spec.hidden_size), ("intermediate_size per rank", spec.intermediate_size)):
            if v % mult:
                raise RunnerInputError(f"deep_gemm {spec.quant}: {name} {v} is not a multiple of {mult} "
                                       + ("(whole 128x128 scale blocks of DeepGEMM's sm90 FP8 GEMM)" if fp8 else "(DeepGEMM's sm90 bf16 GEMM asserts K % 64 == 0)"))
        self.spec = spec
        self.fp8 = fp8
        self.channel = spec.quant == "fp8_channel"
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            cc = torch.cuda.get_device_capability(self.device)
            if cc[0] != 9:
                raise RunnerInputError(f"deep_gemm here runs on sm90 (Hopper) only; {self.device} is sm{cc[0]}{cc[1]}")
        elif self.device.type == "cpu":
            if not K.interpreting():
                raise RunnerInputError("deep_gemm runs on CUDA GPUs; on the CPU only through Triton's interpreter "
                                       "(TRITON_INTERPRET=1) with a stand-in deep_gemm module (tests only)")
        else:
            raise RunnerInputError(f"deep_gemm runs on CUDA devices, got {self.device}")
        self.dg = load_deep_gemm()
        self.block_m = int(self.dg.get_mk_alignment_for_contiguous_layout())
        if self.block_m != M_ALIGNMENT:
            raise RunnerInputError(f"deep_gemm: the contiguous layout's M alignment is {self.block_m} "
                                   f"(deep_gemm.get_mk_alignment_for_contiguous_layout()); this core was checked at "
                                   f"{M_ALIGNMENT} (DeepGEMM's default)")
        self.warmup_tokens = tuple(int(t) for t in warmup_tokens)
        self.compile_s: float | None = None

    def __repr__(self) -> str:
        return f"DeepGemmMoeCore({self.spec.quant}, {self.spec.activation}, block_m={self.block_m})"

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None) -> DeepGemmWeights:
        """Canonical ``w13 [E, N13, H]`` (gate rows then up rows; ``N13 = 2*I``, ``I`` for relu2) and ``w2 [E, H, I]``:
        bf16, or e4m3 with ``w13_scale [E, N13/128, H/128]`` / ``w2_scale [E, H/128, I/128]`` float32 (fp8_block),
        or ``w13_scale [E, N13]`` / ``w2_scale [E, H]`` (also ``[E, N, 1]``) float32 (fp8_channel). Raises
        :class:`RunnerInputError` naming the tensor on a wrong dtype or shape. Runs ``warmup_tokens``."""
        s = self.spec
        e, h, i, n13 = s.num_local_experts, s.hidden_size, s.intermediate_size, s.w13_rows
        want = torch.float8_e4m3fn if self.fp8 else torch.bfloat16
        for name, w, shape in (("w13", w13, (e, n13, h)), ("w2", w2, (e, h, i))):
            if w.dtype != want:
                raise RunnerInputError(f"{name}: deep_gemm {s.quant} weights must be {want}, got {w.dtype}")
            if tuple(w.shape) != shape:
                raise RunnerInputError(f"{name}: expected {list(shape)} ([E, N, K]), got {list(w.shape)}")
        w13c = w13.to(self.device).contiguous()
        w2c = w2.to(self.device).contiguous()
        if not self.fp8:
            if w13_scale is not None or w2_scale is not None:
                raise RunnerInputError("bf16 weights take no scales")
            out = DeepGemmWeights(w13c, w2c)
        elif self.channel:
            chan = []
            for name, sc, n in (("w13_scale", w13_scale, n13), ("w2_scale", w2_scale, h)):
                if sc is None:
                    raise RunnerInputError(f"{name} is required for fp8_channel")
                if tuple(sc.shape) not in ((e, n), (e, n, 1)):
                    raise RunnerInputError(f"{name}: fp8_channel scale must be [E, N] = {[e, n]} (or [E, N, 1]), "
                                           f"got {list(sc.shape)}")
                chan.append(sc.reshape(e, n).to(self.device, torch.float32).contiguous())
            ones = [torch.ones(e, -(-n // GROUP), -(-k // GROUP), dtype=torch.float32, device=self.device)
                    for n, k in ((n13, h), (h, i))]
            unit = [self.dg.transform_sf_into_required_layout(o, n, k, (1, GROUP, GROUP), e, False)
                    for o, (n, k) in zip(ones, ((n13, h), (h, i)))]
            out = DeepGemmWeights(w13c, w2c, unit[0], unit[1], chan[0], chan[1], keep=tuple(ones))
        else:
            scales, keep = [], []
            for name, sc, n, k in (("w13_scale", w13_scale, n13, h), ("w2_scale", w2_scale, h, i)):
                shape = (e, -(-n // GROUP), -(-k // GROUP))
                if sc is None:
                    raise RunnerInputError(f"{name} is required for fp8_block")
                if tuple(sc.shape) != shape:
                    raise RunnerInputError(f"{name}: fp8_block scale must be [E, ceil(N/128), ceil(K/128)] = "
                                           f"{list(shape)}, got {list(sc.shape)}")
                sc = sc.to(self.device, torch.float32).contiguous()
                keep.append(sc)
                scales.append(self.dg.transform_sf_into_required_layout(sc, n, k, (1, GROUP, GROUP), e, False))
            out = DeepGemmWeights(w13c, w2c, scales[0], scales[1], keep=tuple(keep))
        if self.warmup_tokens:
            self._warm(out)
        return out

    def _warm(self, weights: DeepGemmWeights) -> None:
        import time

        s = self.spec
        t0 = time.perf_counter()
        gen = torch.Generator(device=self.device).manual_seed(0)
        for t in self.warmup_tokens:
            x = torch.randn(t, s.hidden_size, generator=gen, device=self.device).to(torch.bfloat16)
            ids = torch.randint(-1, s.num_experts, (t, s.top_k), generator=gen, device=self.device, dtype=torch.int32)
            self.forward(x, ids, torch.rand(t, s.top_k, generator=gen, device=self.device), weights)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_s = time.perf_counter() - t0

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: DeepGemmWeights) -> torch.Tensor:
        """``hidden_states [T, H]`` (any float dtype), ``topk_ids [T, K]`` int32/int64 global ids, ``topk_weights
        [T, K]`` -> ``[T, H]`` in ``hidden_states.dtype``: the sum over this rank's experts of routing weight x
        expert output (module doc). Raises :class:`RunnerInputError` on shapes or dtypes it cannot take."""
        return checked_forward(self, hidden_states, topk_ids, topk_weights, weights)

    def _forward(self, hidden_states, topk_ids, topk_weights, w: DeepGemmWeights) -> torch.Tensor:
        s, dg = self.spec, self.dg
        dev = hidden_states.device
        ids = topk_ids.contiguous()
        tw = topk_weights.to(torch.float32).contiguous()
        x = hidden_states.to(torch.bfloat16).contiguous()
        align = K.moe_align(ids, s.num_local_experts, s.expert_offset, self.block_m)
        xs = None
        if self.fp8:
            x, xs = K.group_quant(x, GROUP)
        g = gather(x, xs, ids, align)
        r = align.rows
        h = torch.empty(r, s.w13_rows, dtype=torch.bfloat16, device=dev)
        y = torch.empty(r, s.hidden_size, dtype=torch.bfloat16, device=dev)
        if self.fp8:
            dg.m_grouped_fp8_fp4_gemm_nt_contiguous((g.a, g.sfa), (w.w13, w.s13), h, g.layout)
            a2, s2 = activation(h, g.layout, g.num_rows, inter=s.intermediate_size, activation=s.activation,
                                gated=s.gated, quant=True, col_scale=w.c13)
            dg.m_grouped_fp8_fp4_gemm_nt_contiguous((a2, s2), (w.w2, w.s2), y, g.layout)
        else:
            dg.m_grouped_bf16_gemm_nt_contiguous(g.a, w.w13, h, g.layout)
            a2, _ = activation(h, g.layout, g.num_rows, inter=s.intermediate_size, activation=s.activation,
                               gated=s.gated, quant=False)
            dg.m_grouped_bf16_gemm_nt_contiguous(a2, w.w2, y, g.layout)
        out = torch.empty(ids.shape[0], s.hidden_size, dtype=hidden_states.dtype, device=dev)
        return combine(y, g.row_of_slot, ids, tw, out, s.num_local_experts, s.expert_offset, col_scale=w.c2)


def register(registry: Registrar) -> None:
    """Register the deep_gemm core for standard (token-major) dispatch (``a2a: none``). ``deep_gemm`` itself
    is imported when a core is built (:class:`DeepGemmMoeCore`), not here."""
    registry.register_core("deep_gemm", "standard", DeepGemmMoeCore)

"""``torch_grouped_mm``: MoE expert compute on PyTorch's grouped GEMMs. Facts: ``torch_grouped_mm.yaml``.

Pipeline for one rank (``S = T*K`` routing slots, ``E`` local experts), every shape fixed by T and K:

1. :func:`route_plan`: sort the slots by local expert (slots of other ranks and ``-1`` last), group end
   offsets from ``scatter_add_`` + ``cumsum`` on the device, the inverse permutation for the combine.
2. Row 0 of the grouped-GEMM operand is a zero row that belongs to the first non-empty group (to the
   last group when no slot is local), rows ``1..`` hold the sorted slots' tokens. Rows past the last
   offset (other ranks' slots) are never computed; the combine reads row 0 (exactly zero) for them,
   so no uninitialised output row is ever read and no mask pass is needed.
3. ``h = A @ w13[e].T`` by ``torch._grouped_mm`` (bf16, fp16) or ``torch._scaled_grouped_mm`` (FP8
   e4m3 with row-wise scales), the gated activation (:func:`moe_select.ops.gated_act`, in the dtype of
   ``h``) times the routing weight (FP8: folded into the row scale of the second GEMM), ``y = a @
   w2[e].T`` by the same kernel, then ``out[t] = sum_k y[row(t, k)]`` (float32 accumulation).

No host synchronisation in ``forward`` for bf16 and FP8 (no ``.item()``, ``nonzero``, ``unique``,
``bincount``, ``.tolist()``; no data-dependent shape), so it can be captured in a CUDA graph.
fp16: PyTorch has no fast grouped kernel for fp16 and runs a per-group fallback that copies the
offsets to the host (``_grouped_mm_fallback``, aten/src/ATen/native/cuda/GroupedBlas.cpp, torch 2.11),
so fp16 runs eagerly only and ``forward`` refuses while a CUDA graph is being captured.

Precision: bf16/fp16 operands, float32 accumulation inside the kernels; ``h``, the activation's
steps (e.g. ``silu(gate)``, ``* up``, ``* weight``) and ``y`` each rounded to the weight dtype. FP8: the hidden states are quantized per token
(row) to e4m3 with scale ``amax/448``, the activation per row the same way; weight scales as in
:mod:`moe_select.ops` (``fp8_tensor``'s per-expert scale broadcast to every row); output bf16.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import FP8_DTYPE, FP8_MAX, gated_act

FORMATS = ("bf16", "fp16", "fp8_channel", "fp8_tensor")
#: ``use_fast_accum`` of torch._scaled_grouped_mm (FP8): Hopper's FP8 tensor-core accumulation without
#: periodic promotion to float32. On the H200 (benchmarks/moe_layer.py, 2026-11-29) it was faster on 22
#: of 25 layer shapes (up to 1.8x: Qwen3-30B-A3B at 8192 tokens, 3.28 -> 1.79 ms; at most 5% slower on
#: the other 3) with no measurable change in the error against float64 (3.9e-2 to 6.0e-2 either way,
#: dominated by the e4m3 activations). A core's ``fast_accum`` attribute overrides it.
FP8_FAST_ACCUM = True
_WEIGHT_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


class RoutePlan(NamedTuple):
    """Device tensors of one forward (``S = T*K``): ``order [S]`` int64 (slot of each sorted position),
    ``tokens [S]`` int64 (its token), ``offs [E]`` int32 (end row of each expert's group in the operand
    with the zero row 0), ``rows [T, K]`` int64 (operand row of each slot; 0 for slots not on this rank)."""

    order: torch.Tensor
    tokens: torch.Tensor
    offs: torch.Tensor
    rows: torch.Tensor


def route_plan(topk_ids: torch.Tensor, num_local: int, offset: int) -> RoutePlan:
    """Sort the ``[T, K]`` global ``topk_ids`` by local expert ``id - offset``; ids outside
    ``[0, num_local)`` after the shift (other ranks, -1) sort last and map to row 0. Pure torch, no sync."""
    t, k = topk_ids.shape
    dev = topk_ids.device
    local = topk_ids.reshape(-1)
    if offset:
        local = local - offset
    key = local.clamp(-1, num_local).remainder_(num_local + 1)        # -1 and >= num_local -> num_local
    sorted_key, order = torch.sort(key, stable=True)
    experts = torch.arange(num_local, device=dev, dtype=key.dtype)
    ends = torch.searchsorted(sorted_key, experts, right=True, out_int32=True)   # end of each group
    last = (experts == num_local - 1).to(torch.int32)
    offs = ends + ((ends + last) > 0)           # +1 for the zero row from the first non-empty (or last) group
    pos = torch.empty_like(order).scatter_(0, order, torch.arange(1, t * k + 1, device=dev))
    rows = torch.where(key < num_local, pos, 0).view(t, k)
    return RoutePlan(order, torch.div(order, k, rounding_mode="floor"), offs, rows)


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``[1 + len(index), C]``: a zero row, then ``x[index]`` (FP8 rows are moved as bytes)."""
    src = x.view(torch.uint8) if x.dtype == FP8_DTYPE else x
    out = src.new_empty(index.numel() + 1, x.shape[1])
    out[0].zero_()
    torch.index_select(src, 0, index, out=out[1:])
    return out.view(x.dtype) if x.dtype == FP8_DTYPE else out


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-row FP8: ``x [M, C]`` (bf16/fp16/fp32) -> (``q [M, C]`` e4m3, ``scale [M]`` float32),
    ``x ~ q * scale``. The multiplier ``448 / amax`` is rounded to ``x.dtype`` and ``scale`` is its exact
    reciprocal, so the only extra error is one rounding of ``x * multiplier`` to ``x.dtype`` before e4m3
    (2^-9 relative for bf16, against e4m3's 2^-4). Zero rows give ``q = 0``."""
    amax = torch.linalg.vector_norm(x, ord=float("inf"), dim=1, dtype=torch.float32).clamp_(min=1e-12)
    mult = (FP8_MAX / amax).to(x.dtype)
    q = (x * mult[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, mult.float().reciprocal()


def combine(y: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``out [T, H] = sum_k y[rows[t, k]]`` (float32 accumulation, result in ``y.dtype``)."""
    t, k = rows.shape
    return y.index_select(0, rows.reshape(-1)).view(t, k, y.shape[1]).sum(1)


@dataclass
class GroupedWeights:
    """Weights as the kernels take them: ``w13 [E, H, N1]`` and ``w2 [E, I, H]`` K-major (transposed
    views of the canonical contiguous tensors, N1 = 2*I or I for relu2); FP8: e4m3 plus float32 row
    scales ``s13 [E, N1]``, ``s2 [E, H]``."""

    w13: torch.Tensor
    w2: torch.Tensor
    s13: torch.Tensor | None = None
    s2: torch.Tensor | None = None


def _check_scale(name: str, s: torch.Tensor | None, quant: str, e: int, n: int) -> torch.Tensor:
    if s is None:
        raise RunnerInputError(f"{name} is required for {quant}")
    if quant == "fp8_tensor":
        if tuple(s.shape) != (e,):
            raise RunnerInputError(f"{name}: fp8_tensor scale must be [E] = [{e}], got {list(s.shape)}")
        return s.float()[:, None].expand(e, n).contiguous()
    s = s[:, :, 0] if s.dim() == 3 and s.shape[2] == 1 else s
    if tuple(s.shape) != (e, n):
        raise RunnerInputError(f"{name}: fp8_channel scale must be [E, N] = [{e}, {n}], got {list(s.shape)}")
    return s.float().contiguous()


class TorchGroupedMMCore:
    """Expert compute core of ``torch_grouped_mm`` for one rank (see :class:`~moe_select.layer.LayerSpec`).

    Raises :class:`RunnerInputError` for a format it does not run (fp8_block, FP4, int) or sizes the
    kernels refuse (rows must be 16-byte aligned: H and I multiples of 8 for 16-bit weights, of 16
    for FP8, the check in ``torch._scaled_grouped_mm``)."""

    def __init__(self, spec: LayerSpec, device: torch.device | str):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"torch_grouped_mm does not implement {spec.quant} (it runs {', '.join(FORMATS)})")
        align = 16 if spec.quant.startswith("fp8") else 8
        for name, v in (("hidden_size", spec.hidden_size), ("intermediate_size per rank", spec.intermediate_size)):
            if v % align:
                raise RunnerInputError(f"torch_grouped_mm {spec.quant}: {name} {v} is not a multiple of {align}")
        self.spec = spec
        self.device = torch.device(device)
        self.fp8 = spec.quant.startswith("fp8")
        self.fast_accum = FP8_FAST_ACCUM

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None) -> GroupedWeights:
        """Canonical ``w13 [E, 2*I, H]`` (gate rows then up rows) and ``w2 [E, H, I]``: bf16/fp16 tensors
        of the spec's format, or e4m3 with ``w13_scale``/``w2_scale`` (fp8_channel ``[E, N]``, fp8_tensor
        ``[E]``). Raises :class:`RunnerInputError` naming the tensor on a wrong dtype or scale."""
        q = self.spec.quant
        want = FP8_DTYPE if self.fp8 else _WEIGHT_DTYPE[q]
        for name, t in (("w13", w13), ("w2", w2)):
            if t.dtype != want:
                raise RunnerInputError(f"{name}: {q} weights must be {want}, got {t.dtype}")
        w13t, w2t = w13.contiguous().transpose(1, 2), w2.contiguous().transpose(1, 2)
        if not self.fp8:
            if w13_scale is not None or w2_scale is not None:
                raise RunnerInputError(f"{q} weights take no scales")
            return GroupedWeights(w13t, w2t)
        e = w13.shape[0]
        return GroupedWeights(w13t, w2t, _check_scale("w13_scale", w13_scale, q, e, w13.shape[1]),
                              _check_scale("w2_scale", w2_scale, q, e, w2.shape[1]))

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: GroupedWeights) -> torch.Tensor:
        """``[T, H]`` in ``hidden_states.dtype``: this rank's share of the MoE layer (module doc)."""
        s = self.spec
        if not self.fp8 and hidden_states.is_cuda and s.quant == "fp16" and torch.cuda.is_current_stream_capturing():
            raise RunnerInputError("torch_grouped_mm fp16 cannot be captured in a CUDA graph: torch._grouped_mm runs "
                                   "fp16 through a per-group fallback that copies the offsets to the host")
        plan = route_plan(topk_ids, s.num_local_experts, s.expert_offset)
        w_rows = gather_rows(topk_weights.reshape(-1, 1), plan.order)[:, 0]
        if self.fp8:
            xq, xs = quantize_rows_fp8(hidden_states)
            a1, s1 = gather_rows(xq, plan.tokens), gather_rows(xs[:, None], plan.tokens)[:, 0]
            h = torch._scaled_grouped_mm(a1, weights.w13, s1, weights.s13, offs=plan.offs, out_dtype=torch.bfloat16,
                                         use_fast_accum=self.fast_accum)
            a2, s2 = quantize_rows_fp8(gated_act(h, s.activation, s.swiglu_limit))
            y = torch._scaled_grouped_mm(a2, weights.w2, s2 * w_rows, weights.s2, offs=plan.offs, out_dtype=torch.bfloat16,
                                         use_fast_accum=self.fast_accum)
        else:
            dt = weights.w13.dtype
            a1 = gather_rows(hidden_states.to(dt), plan.tokens)
            h = torch._grouped_mm(a1, weights.w13, offs=plan.offs)
            a2 = gated_act(h, s.activation, s.swiglu_limit).mul_(w_rows.to(dt)[:, None])
            y = torch._grouped_mm(a2, weights.w2, offs=plan.offs)
        return combine(y, plan.rows).to(hidden_states.dtype)


def register(registry) -> None:
    """Register the torch_grouped_mm core for standard (token-major) dispatch (``a2a: none``)."""
    registry.register_core("torch_grouped_mm", "none", TorchGroupedMMCore)

"""``torch_grouped_mm``: MoE expert compute on PyTorch's grouped GEMMs. Facts: ``torch_grouped_mm.yaml``.

Pipeline for one rank (``S = T*K`` routing slots, ``E`` local experts), every shape fixed by T and K:

1. :func:`route_plan`: sort the slots by local expert (slots of other ranks and ``-1`` last), group end
   offsets from ``searchsorted`` on the sorted keys, the inverse permutation for the combine.
2. Row 0 of the grouped-GEMM operand is a zero row that belongs to the first non-empty group (to the
   last group when no slot is local), rows ``1..`` hold the sorted slots' tokens. Rows past the last
   offset (other ranks' slots) are never computed; the combine reads row 0 (exactly zero) for them,
   so no uninitialised output row is ever read and no mask pass is needed.
3. ``h = A @ w13[e].T`` by ``torch._grouped_mm`` (bf16, fp16) or ``torch._scaled_grouped_mm`` (FP8
   e4m3 with row-wise scales), the gated activation, ``y = a @ w2[e].T`` by the same kernel, then
   ``out[t] = sum_k weight[t, k] * y[row(t, k)]`` (float32 accumulation).

Two implementations of the passes around the GEMMs (the GEMMs are the same), chosen per core and
exposed as ``core.path`` (``"fused"`` or ``"eager"``, also in ``repr(core)`` and the runner's repr):

- ``fused`` (the default on CUDA for bf16 and FP8 when it compiles): three small pure functions
  compiled with ``torch.compile`` (Inductor, default mode, so no CUDA graphs of its own and the
  runner's own capture records its Triton kernels; ``dynamic=True`` with ``fullgraph=True``):
  routing + gather (+ FP8 row quantization of the hidden states) before the first GEMM, the gated
  activation (+ FP8 row quantization) between the GEMMs, and the weighted combine after them. The
  sort and the operand gather inside them are ATen's (two opaque custom ops, :func:`_ops`). They
  are compiled and run once at ``prepare_weights`` (about a thousand tokens, then 1: dynamo
  specialises a size of 1; with ordinary and with inference tensors), so a forward at any other
  token count neither compiles nor autotunes; the compiled functions are shared by all cores of the
  process (keyed by format kind, activation and K). Inputs are canonicalised first (ids to int32,
  hidden states to the GEMM dtype, contiguous with canonical strides) so that other input dtypes
  and layouts do not compile again; a forward under ``torch.inference_mode`` on ordinary tensors
  compiles once on its first call. While a CUDA graph is being captured the calls run under
  ``torch.compiler.set_stance("fail_on_recompile")``: a capture never compiles, it raises (warm up
  eagerly in the same mode first, as for any capture). Arithmetic inside each fused function is
  float32, rounded once at its output. On the H200 the fused path's CUDA-graph replay was faster
  than the eager path's on every measured layer shape and token count (1.01x to 1.84x), its eager
  (un-captured) calls at small T are slower (more host work per call); README "Benchmark (H200)".
- ``eager``: separate PyTorch operators (the reference implementation; on the CPU by default, for fp16
  always, and whenever ``fused=False``). With ``fused=None`` (default) on CUDA a failed compile
  falls back to ``eager`` with a logged warning and ``core.fused_error`` set; ``fused=True`` raises.

No host synchronisation in ``forward`` for bf16 and FP8 (no ``.item()``, ``nonzero``, ``unique``,
``bincount``, ``.tolist()``; no data-dependent shape), so it can be captured in a CUDA graph.
fp16: PyTorch has no fast grouped kernel for fp16 and runs a per-group fallback that copies the
offsets to the host (``_grouped_mm_fallback``, aten/src/ATen/native/cuda/GroupedBlas.cpp, torch 2.11),
so fp16 runs eagerly only and ``forward`` refuses while a CUDA graph is being captured.

Precision: bf16/fp16 operands, float32 accumulation inside the kernels. Eager path: ``h``, the
activation's steps (e.g. ``silu(gate)``, ``* up``, ``* weight``) and ``y`` each rounded to the weight
dtype, the routing weight applied before the second GEMM (FP8: folded into its row scale). Fused path:
``h``, the activation (one rounding, weight not applied) and ``y`` rounded to the weight dtype; the
routing weight is applied in float32 in the combine. FP8: the hidden states are quantized per token
(row) to e4m3 with multiplier ``448/amax`` (eager: rounded to the input dtype; fused: float32, hidden
states first converted to bf16), the activation per row the same way; weight scales as in
:mod:`moe_select.ops` (``fp8_tensor``'s per-expert scale broadcast to every row); output bf16.
"""
from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from moe_select.contracts import Registrar
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
#: ``backend`` of ``torch.compile`` for the fused path (tests on the CPU set ``"aot_eager"``).
FUSED_BACKEND = "inductor"
#: K above which the fused combine sums with a reduction over K instead of K unrolled loads.
_UNROLL_K = 16
log = logging.getLogger(__name__)


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


# --- fused path: small pure functions, compiled with torch.compile (module doc) --------------------

_OPS: Any = None


def _ops() -> Any:
    """``torch.ops.moe_select`` with two opaque custom ops that Inductor calls as they are (ATen
    kernels) inside the compiled functions:

    - ``stable_sort(key)``: ``torch.sort(key, stable=True)``. Inductor's own sort lowering guards on
      the sorted length (``S < 32767``, torch 2.13 lowering.py), which would recompile at large T*K.
    - ``gather_rows(x, index)``: :func:`gather_rows` (zero row 0, then ATen's vectorised
      ``index_select``). Inductor's own gather of the operand (every size dynamic) ran at about
      0.2 TB/s on the H200 (2026-11-29: 379 us for the 67 MB operand of Qwen3-30B-A3B at 2048
      tokens, against 29 us for ``index_select``; probably per-element 64-bit index arithmetic)."""
    global _OPS
    if _OPS is None:
        try:
            @torch.library.custom_op("moe_select::stable_sort", mutates_args=())
            def stable_sort(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                values, order = torch.sort(key, stable=True)
                return values, order

            @stable_sort.register_fake
            def _(key):
                return torch.empty_like(key), torch.empty_like(key, dtype=torch.int64)

            @torch.library.custom_op("moe_select::gather_rows", mutates_args=())
            def gather_rows_op(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
                return gather_rows(x, index)

            @gather_rows_op.register_fake
            def _(x, index):
                return x.new_empty(index.shape[0] + 1, x.shape[1])
        except RuntimeError:            # defined already (this file imported under another module name)
            pass
        _OPS = torch.ops.moe_select
    return _OPS


def _route_fused(ids: torch.Tensor, experts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`route_plan` for the compiled path: ``ids [T, K]`` int32 global ids, ``experts [E]`` int32
    ``arange(offset, offset + E)`` (a tensor, so neither the offset nor E is a compile-time constant).
    Returns (``order [S]`` int64, ``offs [E]`` int32, ``rows [T, K]`` int64) as in :class:`RoutePlan`."""
    t, k = ids.shape
    e = experts.shape[0]
    local = ids.reshape(-1) - experts[0]
    key = torch.where((local >= 0) & (local < e), local, e)              # other ranks and -1 -> e
    sorted_key, order = _ops().stable_sort(key)
    rel = experts - experts[0]
    ends = torch.searchsorted(sorted_key, rel, right=True, out_int32=True)
    offs = ends + ((ends + (rel == e - 1).to(torch.int32)) > 0).to(torch.int32)
    pos = torch.empty_like(order).scatter_(0, order, torch.arange(1, t * k + 1, device=ids.device))
    rows = torch.where(key < e, pos, 0).view(t, k)
    return order, offs, rows


def fused_gather(x: torch.Tensor, ids: torch.Tensor, experts: torch.Tensor):
    """Routing and the first GEMM's operand: (``a1 [S+1, H]`` in ``x.dtype``, zero row 0; ``offs``; ``rows``)."""
    order, offs, rows = _route_fused(ids, experts)
    tok = torch.div(order, ids.shape[1], rounding_mode="floor")
    return _ops().gather_rows(x, tok), offs, rows


def fused_gather_fp8(x: torch.Tensor, ids: torch.Tensor, experts: torch.Tensor):
    """Routing, per-token FP8 quantization and gather: (``a1 [S+1, H]`` e4m3, ``s1 [S+1]`` float32, both
    zero in row 0; ``offs``; ``rows``). Multiplier ``448 / amax`` in float32, ``s1`` its reciprocal."""
    order, offs, rows = _route_fused(ids, experts)
    tok = torch.div(order, ids.shape[1], rounding_mode="floor")
    xf = x.float()
    mult = FP8_MAX / xf.abs().amax(1).clamp(min=1e-12)
    q = (xf * mult[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return _ops().gather_rows(q, tok), torch.nn.functional.pad(mult.reciprocal()[tok], (1, 0)), offs, rows


def _make_act(activation: str, limit: float | None, fp8: bool) -> Callable:
    if fp8:
        def act(h: torch.Tensor):
            """Gated activation and per-row FP8 quantization: (``q [M, I]`` e4m3, ``scale [M]`` float32)."""
            a = gated_act(h.float(), activation, limit)
            mult = FP8_MAX / a.abs().amax(1).clamp(min=1e-12)
            return (a * mult[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), mult.reciprocal()
    else:
        def act(h: torch.Tensor):
            """Gated activation in float32, rounded once to ``h.dtype``."""
            return gated_act(h.float(), activation, limit).to(h.dtype)
    return act


def _make_combine(k: int) -> Callable:
    def combine_weighted(y: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``out [T, H] = sum_k weights[t, k] * y[rows[t, k]]`` in float32, rounded to ``y.dtype``."""
        if k > _UNROLL_K:
            return (y[rows].float() * weights[:, :, None]).sum(1).to(y.dtype)
        acc = y[rows[:, 0]].float() * weights[:, :1]
        for j in range(1, k):
            acc = acc + y[rows[:, j]].float() * weights[:, j:j + 1]
        return acc.to(y.dtype)
    return combine_weighted


def _fresh(fn: Callable) -> Callable:
    """A copy of ``fn`` with its own code object: dynamo keeps compiled entries (and counts its
    recompile limit) per code object, so each variant (format kind, activation, K) gets its own."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """``t`` contiguous with the canonical strides (a view when it is contiguous already): dynamo guards
    on strides, and a contiguous ``[1, K]`` tensor may carry any stride in its size-1 dimension."""
    return t.reshape(-1).view(t.shape)


_COMPILED: dict[tuple, Callable] = {}


def _compiled(key: tuple, make: Callable[[], Callable]) -> Callable:
    """One ``torch.compile``d function per ``key`` for the process (shared by cores: no recompiles
    for a second core of another layer shape, since every size is dynamic). The key holds what dynamo
    would specialise on anyway (activation, K: a K of 1 is specialised), so each code object keeps
    at most 4 entries (1 token or more, ordinary or inference tensors), under dynamo's limit of 8."""
    key = (FUSED_BACKEND,) + key
    fn = _COMPILED.get(key)
    if fn is None:
        fn = _COMPILED[key] = torch.compile(_fresh(make()), backend=FUSED_BACKEND, dynamic=True, fullgraph=True)
    return fn


class FusedFns(NamedTuple):
    gather: Callable
    act: Callable
    combine: Callable


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

    ``fused``: ``None`` (default) uses the fused path on CUDA for bf16 and FP8 when it compiles at
    ``prepare_weights`` and the eager path otherwise (a failed compile is logged and kept in
    ``fused_error``); ``True`` requires it (raises when it cannot compile or the format is fp16);
    ``False`` always runs the eager path. ``path`` says which one runs (``"pending"`` until
    ``prepare_weights`` or the first forward decides); ``compile_s`` is the compile and warm-up time.

    Raises :class:`RunnerInputError` for a format it does not run (fp8_block, FP4, int) or sizes the
    kernels refuse (rows must be 16-byte aligned: H and I multiples of 8 for 16-bit weights, of 16
    for FP8, the check in ``torch._scaled_grouped_mm``)."""

    def __init__(self, spec: LayerSpec, device: torch.device | str, fused: bool | None = None):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"torch_grouped_mm does not implement {spec.quant} (it runs {', '.join(FORMATS)})")
        align = 16 if spec.quant.startswith("fp8") else 8
        for name, v in (("hidden_size", spec.hidden_size), ("intermediate_size per rank", spec.intermediate_size)):
            if v % align:
                raise RunnerInputError(f"torch_grouped_mm {spec.quant}: {name} {v} is not a multiple of {align}")
        if fused and spec.quant == "fp16":
            raise RunnerInputError("torch_grouped_mm: the fused path runs bf16 and FP8, not fp16 (fused=True)")
        self.spec = spec
        self.device = torch.device(device)
        self.fp8 = spec.quant.startswith("fp8")
        self.fast_accum = FP8_FAST_ACCUM
        self.fused = fused
        self.fused_error: str | None = None
        self.compile_s: float | None = None
        self._fns: FusedFns | None = None
        auto_off = fused is None and self.device.type != "cuda"
        self.path = "eager" if fused is False or spec.quant == "fp16" or auto_off else "pending"

    def __repr__(self) -> str:
        why = f", fused_error={self.fused_error!r}" if self.fused_error else ""
        return f"TorchGroupedMMCore({self.spec.quant}, path={self.path}{why})"

    def set_path(self, path: str) -> None:
        """Switch between ``"fused"`` (compiles and warms up if not done yet) and ``"eager"``."""
        if path == "eager":
            self.path = "eager"
            return
        if path != "fused":
            raise ValueError(f"path must be 'fused' or 'eager', got {path!r}")
        if self.spec.quant == "fp16":
            raise RunnerInputError("torch_grouped_mm: the fused path runs bf16 and FP8, not fp16")
        if self._fns is None:
            self._build_fused(required=True)
        self.path = "fused"

    def _build_fused(self, required: bool) -> None:
        """Compile the fused functions (shared per process) and run each at about a thousand tokens and
        at 1, with ordinary and with inference tensors, so that no forward compiles or autotunes later
        (a forward under ``torch.inference_mode`` on ordinary tensors compiles once on its first call).
        Sets ``path``; logs one line."""
        s = self.spec
        kind = "fp8" if self.fp8 else "16"
        t0 = time.perf_counter()
        try:
            _ops()
            fns = FusedFns(
                _compiled(("gather", kind, s.top_k), lambda: fused_gather_fp8 if self.fp8 else fused_gather),
                _compiled(("act", kind, s.activation, s.swiglu_limit), lambda: _make_act(s.activation, s.swiglu_limit, self.fp8)),
                _compiled(("combine", s.top_k), lambda: _make_combine(s.top_k)))
            self._experts = torch.arange(s.expert_offset, s.expert_offset + s.num_local_experts, dtype=torch.int32,
                                         device=self.device)
            gen = torch.Generator(device=self.device).manual_seed(0)
            dt = torch.bfloat16 if self.fp8 else _WEIGHT_DTYPE[s.quant]
            # about a thousand tokens first: Inductor autotunes each kernel at its first launch, and the
            # activation's graph (operand rows T*K+1 >= 2) serves 1 token as well
            for mode, t in [(m, t) for m in (torch.no_grad, torch.inference_mode) for t in (self._warm_tokens(), 1)]:
                with mode():                    # inputs made here: ordinary tensors, then inference tensors
                    x = torch.randn(t, s.hidden_size, generator=gen, device=self.device).to(dt)
                    ids = torch.randint(-1, s.num_experts, (t, s.top_k), generator=gen, device=self.device, dtype=torch.int32)
                    tw = torch.rand(t, s.top_k, generator=gen, device=self.device)
                    rows = fns.gather(x, ids, self._experts)[-1]
                    h = torch.randn(t * s.top_k + 1, s.w13_rows, generator=gen, device=self.device).to(dt)
                    fns.act(h)
                    y = torch.randn(t * s.top_k + 1, s.hidden_size, generator=gen, device=self.device).to(torch.bfloat16 if self.fp8 else dt)
                    fns.combine(y, rows, tw)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # any compile failure: say so, keep the eager path unless required
            inner = getattr(exc, "inner_exception", None) or exc      # dynamo wraps a backend's error
            self.fused_error = " ".join(f"{type(inner).__name__}: {inner}".split())[:500]
            if required:
                raise RunnerInputError(f"torch_grouped_mm: the fused path did not compile: {self.fused_error}") from exc
            self.path = "eager"
            log.warning("torch_grouped_mm %s: fused path unavailable (%s); running the eager path", s.quant, self.fused_error)
            return
        self._fns = fns
        self.compile_s = time.perf_counter() - t0
        self.path = "fused"
        log.info("torch_grouped_mm %s: fused path (torch.compile, %s backend), compiled and warmed up in %.1f s",
                 s.quant, FUSED_BACKEND, self.compile_s)

    def _warm_tokens(self) -> int:
        """About a thousand tokens whose sizes (T, T*K, T*K+1) equal no other size of the layer, so that
        dynamo's duck sizing does not tie T to H, I or E in the compiled graph."""
        s = self.spec
        taken = {s.hidden_size, s.intermediate_size, s.w13_rows, s.num_local_experts, s.num_experts, s.top_k}
        t = 1021
        while {t, t * s.top_k, t * s.top_k + 1} & taken:
            t += 2
        return t

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None) -> GroupedWeights:
        """Canonical ``w13 [E, 2*I, H]`` (gate rows then up rows) and ``w2 [E, H, I]``: bf16/fp16 tensors
        of the spec's format, or e4m3 with ``w13_scale``/``w2_scale`` (fp8_channel ``[E, N]``, fp8_tensor
        ``[E]``). Raises :class:`RunnerInputError` naming the tensor on a wrong dtype or scale.
        Decides the path (compiles the fused functions, class doc) on its first call."""
        q = self.spec.quant
        want = FP8_DTYPE if self.fp8 else _WEIGHT_DTYPE[q]
        for name, t in (("w13", w13), ("w2", w2)):
            if t.dtype != want:
                raise RunnerInputError(f"{name}: {q} weights must be {want}, got {t.dtype}")
        w13t, w2t = w13.contiguous().transpose(1, 2), w2.contiguous().transpose(1, 2)
        if not self.fp8:
            if w13_scale is not None or w2_scale is not None:
                raise RunnerInputError(f"{q} weights take no scales")
            out = GroupedWeights(w13t, w2t)
        else:
            e = w13.shape[0]
            out = GroupedWeights(w13t, w2t, _check_scale("w13_scale", w13_scale, q, e, w13.shape[1]),
                                 _check_scale("w2_scale", w2_scale, q, e, w2.shape[1]))
        if self.path == "pending":
            self._build_fused(required=bool(self.fused))
        return out

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: GroupedWeights) -> torch.Tensor:
        """``[T, H]`` in ``hidden_states.dtype``: this rank's share of the MoE layer (module doc)."""
        s = self.spec
        capturing = hidden_states.is_cuda and torch.cuda.is_current_stream_capturing()
        if s.quant == "fp16" and capturing:
            raise RunnerInputError("torch_grouped_mm fp16 cannot be captured in a CUDA graph: torch._grouped_mm runs "
                                   "fp16 through a per-group fallback that copies the offsets to the host")
        if self.path == "pending":
            if capturing:
                raise RunnerInputError("torch_grouped_mm: call prepare_weights (it compiles the fused path) before "
                                       "capturing a CUDA graph")
            self._build_fused(required=bool(self.fused))
        if self.path == "fused" and hidden_states.shape[0]:
            if capturing:
                with torch.compiler.set_stance("fail_on_recompile"):
                    return self._forward_fused(hidden_states, topk_ids, topk_weights, weights)
            return self._forward_fused(hidden_states, topk_ids, topk_weights, weights)
        return self._forward_eager(hidden_states, topk_ids, topk_weights, weights)

    def _forward_fused(self, hidden_states, topk_ids, topk_weights, weights: GroupedWeights) -> torch.Tensor:
        fns = self._fns
        assert fns is not None  # the fused path runs only after prepare_weights compiled it
        ids = _canonical(topk_ids if topk_ids.dtype == torch.int32 else topk_ids.to(torch.int32))
        x = _canonical(hidden_states.to(torch.bfloat16 if self.fp8 else weights.w13.dtype))
        tw = _canonical(topk_weights)
        with torch.no_grad():
            if self.fp8:
                assert weights.s13 is not None and weights.s2 is not None  # FP8 weights always carry row scales
                a1, s1, offs, rows = fns.gather(x, ids, self._experts)
                h = torch._scaled_grouped_mm(a1, weights.w13, s1, weights.s13, offs=offs, out_dtype=torch.bfloat16,
                                             use_fast_accum=self.fast_accum)
                a2, s2 = fns.act(h)
                y = torch._scaled_grouped_mm(a2, weights.w2, s2, weights.s2, offs=offs, out_dtype=torch.bfloat16,
                                             use_fast_accum=self.fast_accum)
            else:
                a1, offs, rows = fns.gather(x, ids, self._experts)
                h = torch._grouped_mm(a1, weights.w13, offs=offs)
                y = torch._grouped_mm(fns.act(h), weights.w2, offs=offs)
            out = fns.combine(y, rows, tw)
        return out.to(hidden_states.dtype)

    def _forward_eager(self, hidden_states, topk_ids, topk_weights, weights: GroupedWeights) -> torch.Tensor:
        s = self.spec
        plan = route_plan(topk_ids, s.num_local_experts, s.expert_offset)
        w_rows = gather_rows(topk_weights.reshape(-1, 1), plan.order)[:, 0]
        if self.fp8:
            assert weights.s13 is not None and weights.s2 is not None  # FP8 weights always carry row scales
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


def register(registry: Registrar) -> None:
    """Register the torch_grouped_mm core for standard (token-major) dispatch (``a2a: none``)."""
    registry.register_core("torch_grouped_mm", "standard", TorchGroupedMMCore)

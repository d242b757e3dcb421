"""``triton``: the fused-MoE Triton runner (adapter). Facts for its capability file:
``backends/triton_adapter_facts.md`` (``backends/triton.yaml`` keeps the engines' facts for planning).

One rank's MoE layer in four steps (kernels and their design: :mod:`moe_select.backends.triton_moe_kernels`):
device-side sort of the (token, expert) slots into per-expert blocks of ``BLOCK_M`` rows, the first
GEMM with the operand gather and the gated activation inside it, the second GEMM with the routing weight
in its epilogue (or on the input: ``apply_router_weight_on_input``), and the top-k sum in float32.

- Formats: bf16, fp16, fp8_tensor, fp8_channel, fp8_block (any ``[bn, bk]`` block with ``bk`` a power
  of two >= 16; default 128x128), int4_w4a16 and int8_w8a16 (weight-only, group scales, optional zero
  points; AWQ and GPTQ checkpoint layouts converted at load, :mod:`moe_select.quant_int`), mxfp4 and
  nvfp4 as W4A16 (packed e2m1 weights kept packed in memory, dequantized to bf16 in the GEMMs' main loop,
  bf16 activations; checkpoint layouts (gpt-oss, ModelOpt) converted by :mod:`moe_select.checkpoint_layouts`).
- Activations: silu, gelu (erf), relu2 (not gated: w13 has I rows), swiglu_oai (gpt-oss: alpha 1.702,
  limit ``spec.swiglu_limit`` or 7.0). Expert biases (gpt-oss's ``gate_up_proj_bias``/``down_proj_bias``)
  when given: added in the GEMMs' epilogues, before the activation and before the routing weight.
- Expert parallelism: the rank's experts are ``[spec.expert_offset, + spec.num_local_experts)``; other
  ids and -1 are skipped (their slots contribute nothing).
- CUDA graphs: no host synchronisation in ``forward`` and no data-dependent shape; ``prepare_weights``
  compiles every kernel variant the layer can use (one tile configuration per token bucket) unless
  ``warmup=False``, so no token count compiles later.
- Precision: float32 accumulation; the first GEMM's activation output and the per-slot second-GEMM rows
  are rounded once to the activation dtype (bf16, or fp16 for fp16 inputs/weights); the top-k sum is
  float32, rounded once to the input dtype. FP8: activations quantized per token (per token and
  ``bk`` group for fp8_block) to e4m3 inside the GEMMs, multiplier ``448 / amax`` (fp8_tensor/fp8_channel with
  a tile config's ``PREQUANT``: by a pass before the GEMM with the same multiplier, the same values); weight scales
  multiply (``w = q * scale``). Int formats: weights dequantized in the kernel to the activation dtype.
  mxfp4 / nvfp4: each e2m1 value times its block scale is exact in bf16 (at most 6 significant bits), so
  the GEMMs see the checkpoint's weights exactly; nvfp4's per-expert global scale multiplies the float32
  accumulator; the activations are bf16 (an fp16 input is converted; the output has the input's dtype).
- CPU: only under ``TRITON_INTERPRET=1`` (Triton's interpreter; tests). ``meta``: shapes only, for
  compile checks that replace the kernels' launch (tests/test_triton_moe.py compiles every kernel for
  sm90 that way, without a GPU).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from moe_select import quant_int
from moe_select.contracts import Registrar
from moe_select.errors import RunnerInputError
from moe_select.formats import Format, lookup
from moe_select.formats import block_shape as format_block_shape
from moe_select.layer import LayerSpec
from moe_select.ops import expert_biases

from . import triton_moe_kernels as K

FORMATS = K.FORMATS
FP8_DTYPE = torch.float8_e4m3fn
_DTYPE16 = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _row(quant: str) -> Format:
    """The row of a format this adapter implements (backends/formats.yaml)."""
    row = lookup(quant)
    if row is None:  # pragma: no cover - every W_MODES format has a row (tests/test_formats.py)
        raise RunnerInputError(f"triton: {quant} has no row in backends/formats.yaml")
    return row


#: Bits per weight element of the formats the kernel dequantizes as integers (weight modes 4 and 5), from their rows.
INT_BITS = {q: _row(q).bits for q, mode in K.W_MODES.items() if mode in (4, 5)}
#: Packed e2m1 formats (weight modes 6 and 7) -> elements along K per scale byte (their rows' ``params.block``).
FP4_GROUP = {q: int(_row(q).params["block"]) for q, mode in K.W_MODES.items() if mode in K.FP4_MODES}  # type: ignore[call-overload]
#: Stored dtypes accepted for packed FP4 tensors besides uint8 (viewed as uint8): torch's own FP4/e8m0 dtypes.
_FP4_X2 = tuple(getattr(torch, n) for n in ("float4_e2m1fn_x2",) if hasattr(torch, n))
_E8M0 = tuple(getattr(torch, n) for n in ("float8_e8m0fnu",) if hasattr(torch, n))


def _default_block_shape() -> tuple[int, int]:
    shape = format_block_shape("fp8_block")
    if shape is None:  # pragma: no cover - fp8_block's row gives params.block [bn, bk] (tests/test_formats.py)
        raise RunnerInputError("triton: fp8_block's row in backends/formats.yaml gives no [bn, bk] block")
    return shape


#: fp8_block's default ``(bn, bk)`` (its row's ``params.block``), for a spec that gives none.
DEFAULT_BLOCK_SHAPE = _default_block_shape()


@dataclass
class TritonMoeWeights:
    """Weights as the kernels read them (all contiguous, on the core's device):

    ``w13 [E, N13, H]`` and ``w2 [E, H, I]`` (N13 = 2*I gate rows then up rows, or I for relu2):
    bf16/fp16, or e4m3 for FP8 formats, or uint8 codes for int formats (int4 packed two per byte along
    the last dimension: ``[E, N13, H/2]``, ``[E, H, I/2]``). ``s13``/``s2``: float32 weight scales
    (fp8_tensor ``[E]``, fp8_channel ``[E, N]``, fp8_block ``[E, ceil(N/bn), ceil(K/bk)]``, int ``[E, N,
    K/group]``; mxfp4 / nvfp4: ``[E, N, K/32]`` / ``[E, N, K/16]`` uint8, the e8m0 / e4m3 scale bytes), None for
    16-bit. ``z13``/``z2``: int zero points ``[E, N, K/group]`` uint8 or None (symmetric). ``g13``/``g2``: int
    group sizes along K, the FP4 scale group (32 / 16), 0 otherwise. ``gs13``/``gs2``: nvfp4's per-expert
    global scales ``[E]`` float32, else None. ``b13 [E, N13]`` / ``b2 [E, H]``: float32 expert biases
    (gpt-oss) or None. mxfp4 / nvfp4 weights: ``[E, N13, H/2]``, ``[E, H, I/2]`` uint8 (packed e2m1)."""

    w13: torch.Tensor
    w2: torch.Tensor
    s13: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    z13: torch.Tensor | None = None
    z2: torch.Tensor | None = None
    g13: int = 0
    g2: int = 0
    b13: torch.Tensor | None = None
    b2: torch.Tensor | None = None
    gs13: torch.Tensor | None = None
    gs2: torch.Tensor | None = None
    #: mxfp4 / nvfp4: ``w13``/``w2`` are in the shuffled layout of the GPU decode
    #: (:func:`~.triton_moe_kernels.fp4_shuffle`; ``s13``/``s2`` then hold the kernel's scale bytes,
    #: :func:`~.triton_moe_kernels.fp4_kernel_e8m0` / :func:`~.triton_moe_kernels.fp4_kernel_e4m3`), so the GEMMs decode with
    #: :data:`~.triton_moe_kernels.FP4_DECODE_ASM`; False: the canonical layout, decoded portably.
    fp4_shuffled: bool = False


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _no_gluon(module: str) -> str | None:
    """Import this package's Gluon ``module`` (``triton_moe_gluon``, ``triton_moe_wgmma``) now, at the core's
    construction, so a Triton without Gluon is known before any weight is loaded: None when it imports, else why not."""
    import importlib

    try:
        importlib.import_module(f".{module}", __package__)
    except ImportError as exc:
        return f"this Triton ({getattr(K.triton, '__version__', '?')}) has no Gluon ({exc})"
    return None


class TritonMoeCore:
    """Expert compute core of the ``triton`` runner for one rank (see :class:`~moe_select.layer.LayerSpec`).

    ``spec``: the rank's layer; ``device``: a CUDA device (the CPU only under ``TRITON_INTERPRET=1``;
    ``meta`` for compile checks, module doc).
    Keywords:

    - ``apply_router_weight_on_input``: multiply the routing weight into the first GEMM's accumulator
      (before the activation, i.e. on the input, as llama4's routing does) instead of the second GEMM's
      output. Default: ``spec.weight_on_input`` (the model's routing, llama4).
    - ``act_quant``: ``"token"`` (default: one dynamic scale per token row) or ``"tensor"`` (one dynamic
      scale over all rows) for the FP8 activations of fp8_tensor / fp8_channel.
    - ``block_shape``: fp8_block's ``(bn, bk)`` as the checkpoint declares it (``weight_block_size``);
      default ``spec.block_shape`` (the plan's quant_params), else 128x128.
    - ``int_layout``: ``"auto"`` (by dtype and shape), ``"kernel"``, ``"awq"`` or ``"gptq"``: the layout
      of int weights given to ``prepare_weights`` (:mod:`moe_select.quant_int`); ``gptq_zeros_minus_one``
      (default True: GPTQ's v1 format stores zero - 1; False for gptq_v2).
    - ``config_dir``: where tuned tile configurations are read (default ``backends/triton_configs``).
    - ``warmup``: compile every kernel variant at ``prepare_weights`` (default: True on CUDA).
    - ``fp4_decode``: mxfp4 / nvfp4 only: ``"auto"`` (the PTX decode on a GPU, the portable one under the
      interpreter), ``"asm"`` or ``"portable"`` (both exact: the same output bit for bit; tests compare them).
      ``"asm"``: ``prepare_weights`` stores the packed weights in the shuffled layout the PTX decode reads
      (:func:`~.triton_moe_kernels.fp4_shuffle`, same size) with the scales as the kernel's bytes, and refuses e8m0
      scales above :data:`~.triton_moe_kernels.FP4_MAX_E8M0` (2^33) and negative or NaN e4m3 block scales (no real
      checkpoint has them; ``"portable"`` runs them).

    Raises :class:`RunnerInputError` for a format it does not run, a CPU device without the
    interpreter, a block shape it cannot tile, or an FP4 layer whose hidden or intermediate size is not a
    multiple of the format's scale group (32 for mxfp4, 16 for nvfp4)."""

    def __init__(self, spec: LayerSpec, device: torch.device | str, *, apply_router_weight_on_input: bool = False,
                 act_quant: str = "token", block_shape: tuple[int, int] | None = None, int_layout: str = "auto",
                 gptq_zeros_minus_one: bool = True, config_dir=None, warmup: bool | None = None,
                 fp4_decode: str = "auto"):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"triton does not implement {spec.quant} (it runs {', '.join(FORMATS)})")
        if spec.activation not in K.ACTIVATIONS:
            raise RunnerInputError(f"triton does not implement the activation {spec.activation!r} "
                                   f"(it runs {', '.join(K.ACTIVATIONS)})")
        self.spec = spec
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type == "cpu" and not K.interpreting():
            raise RunnerInputError("triton runs on CUDA GPUs; on the CPU only through Triton's interpreter "
                                   "(TRITON_INTERPRET=1 before triton is imported; tests only)")
        if self.device.type not in ("cuda", "cpu", "meta"):
            raise RunnerInputError(f"triton runs on CUDA devices, got {self.device}")
        if act_quant not in ("token", "tensor"):
            raise RunnerInputError(f"act_quant must be 'token' or 'tensor', got {act_quant!r}")
        if act_quant == "tensor" and spec.quant not in ("fp8_tensor", "fp8_channel"):
            raise RunnerInputError(f"act_quant='tensor' applies to fp8_tensor and fp8_channel, not {spec.quant}")
        if int_layout not in ("auto", "kernel", "awq", "gptq"):
            raise RunnerInputError(f"int_layout must be auto, kernel, awq or gptq, got {int_layout!r}")
        self.on_input = bool(apply_router_weight_on_input or spec.weight_on_input)
        self.act_quant = act_quant
        self.int_layout = int_layout
        self.gptq_zeros_minus_one = gptq_zeros_minus_one
        self.w_mode = K.W_MODES[spec.quant]
        self.block_shape: tuple[int, int] | None = None
        if spec.quant == "fp8_block":
            bs = block_shape or spec.block_shape or DEFAULT_BLOCK_SHAPE
            bn, bk = (int(v) for v in bs)
            if bn < 1 or bk < 16 or bk & (bk - 1):
                raise RunnerInputError(f"triton fp8_block: block shape [{bn}, {bk}] is not supported: the K size of "
                                       "a block must be a power of two >= 16 (it is the GEMM's K tile)")
            self.block_shape = (bn, bk)
        elif block_shape is not None:
            raise RunnerInputError(f"block_shape applies to fp8_block, not {spec.quant}")
        if spec.quant == "int4_w4a16" and (spec.hidden_size % 2 or spec.intermediate_size % 2):
            raise RunnerInputError(f"triton int4_w4a16: hidden_size {spec.hidden_size} and intermediate_size "
                                   f"{spec.intermediate_size} must be even (two codes per byte along K)")
        self.fp4_group = FP4_GROUP.get(spec.quant, 0)
        if self.fp4_group and (spec.hidden_size % self.fp4_group or spec.intermediate_size % self.fp4_group):
            raise RunnerInputError(f"triton {spec.quant}: hidden_size {spec.hidden_size} and intermediate_size (per rank) "
                                   f"{spec.intermediate_size} must be multiples of {self.fp4_group} (one scale per "
                                   f"{self.fp4_group} elements along K; a scale block cannot be split between ranks)")
        if fp4_decode not in ("auto", "asm", "portable"):
            raise RunnerInputError(f"fp4_decode must be auto, asm or portable, got {fp4_decode!r}")
        if fp4_decode != "auto" and not self.fp4_group:
            raise RunnerInputError(f"fp4_decode applies to mxfp4 and nvfp4, not {spec.quant}")
        if fp4_decode == "asm" and K.interpreting():
            raise RunnerInputError("fp4_decode='asm' is PTX: it cannot run under Triton's interpreter")
        self.fp4_asm = fp4_decode == "asm" or (fp4_decode == "auto" and not K.interpreting())
        self.config_dir = config_dir
        self.warmup = (self.device.type == "cuda") if warmup is None else bool(warmup)
        self.device_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        self.smem_limit = None
        if self.device.type == "cuda":
            self.smem_limit = getattr(torch.cuda.get_device_properties(self.device), "shared_memory_per_block_optin", None)
        self._table, self.config_source = self._load_configs()
        self._buckets = tuple(sorted(self._table))
        self.compile_s: float | None = None
        #: DIRECT buckets with SPLIT_SLOTS: the second GEMM's counters per (device, stream) (direct_forward)
        self._direct_counters: dict[tuple[torch.device, int], torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"TritonMoeCore({self.spec.quant}, {self.spec.activation}, configs={self.config_source})"

    # --- configurations -------------------------------------------------------------------------

    def _load_configs(self) -> tuple[dict[int, dict], str]:
        s = self.spec
        name = K.config_file_name(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, self.device_name,
                                  self.block_shape)
        path = Path(self.config_dir or K.CONFIG_DIR) / name
        if path.is_file():
            try:
                table = dict(K.load_config_file(str(path)))
                K.check_file_key(path, s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, self.device_name,
                                 self.block_shape)
            except ValueError as exc:
                raise RunnerInputError(str(exc)) from None
            swap = sorted(t for t, c in table.items() if c["gemm1"].get("SWAP_AB") or c["gemm2"].get("SWAP_AB"))
            if swap and self.fp4_asm:
                raise RunnerInputError(f"{path}: tokens {swap} set SWAP_AB: {K.SWAP_AB_ASM_ERROR} "
                                       f"(fp4_decode='portable' reads this file)")
            gluon = sorted(t for t, c in table.items() if c["gemm1"].get("GLUON") or c["gemm2"].get("GLUON"))
            why = None
            if gluon and not self.fp4_asm:
                why = "the portable decode (fp4_decode='portable' or the interpreter) cannot run the Gluon GEMV"
            elif gluon:
                why = _no_gluon("triton_moe_gluon")
            if why:          # those GEMMs run the tl GEMV's own tiles (gemv_config), and the source says so
                tl_gemv = K.gemv_config(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, 1, s.top_k, s.gated)
                for t in gluon:
                    table[t] = {**table[t], **{g: tl_gemv[g] for g in ("gemm1", "gemm2") if table[t][g].get("GLUON")}}
                name = f"{name} (tokens {gluon}: GLUON buckets run the tl GEMV of gemv_config: {why})"
            gu = sorted(t for t, c in table.items() if c["gemm1"].get("GU_DOT"))
            if gu and not s.gated:   # before any weight: the gate and up tiles of one MMA need a gated layer
                raise RunnerInputError(f"{path}: tokens {gu}: gemm1: GU_DOT (the gate and up tiles as one MMA) is an "
                                       f"option of gated layers; activation {s.activation} has no up rows")
            wgmma = sorted(t for t, c in table.items() if c["gemm2"].get("WGMMA"))
            for t in wgmma:  # against this layer's shapes, before any weight
                try:
                    K.wgmma_check(table[t]["gemm2"], block_m=table[t]["BLOCK_M"], fmt=s.quant, n_out=s.hidden_size,
                                  k=s.intermediate_size)
                except ValueError as exc:
                    raise RunnerInputError(f"{path}: tokens {t}: gemm2: {exc}") from None
            why = None
            if wgmma and (self.device.type != "cuda" or K.interpreting()):
                why = "Gluon has no interpreter: the CPU cannot run it"
            elif wgmma and torch.cuda.get_device_capability(self.device) != (9, 0):
                why = f"wgmma is sm90's; this GPU is compute capability {torch.cuda.get_device_capability(self.device)}"
            elif wgmma:
                why = _no_gluon("triton_moe_wgmma")
            if why:          # those second GEMMs run the tl tiles of the same BLOCK_N / BLOCK_K / warps / stages
                for t in wgmma:
                    table[t] = {**table[t], "gemm2": {k: v for k, v in table[t]["gemm2"].items()
                                                    if k not in ("WGMMA", "PINGPONG")}}
                name = f"{name} (tokens {wgmma}: WGMMA second GEMMs run the tl tiles: {why})"
            if self.block_shape:
                bk = self.block_shape[1]
                table = {t: {**c, "gemm1": {**c["gemm1"], "BLOCK_K": bk, "BLOCK_N": max(bk, c["gemm1"]["BLOCK_N"])},
                             "gemm2": {**c["gemm2"], "BLOCK_K": bk}} for t, c in table.items()}
            return table, name
        table = {b: K.default_config(s.num_local_experts, s.w13_rows, s.hidden_size, s.quant, b, s.top_k,
                                     self.block_shape, s.gated, self.smem_limit) for b in K.TOKEN_BUCKETS}
        return table, "default"

    def config_for(self, tokens: int) -> dict:
        """The tile configuration used for ``tokens`` tokens (the nearest bucket in log scale)."""
        return self._table[K.token_bucket(tokens, self._buckets)]

    def warm_token_counts(self) -> list[int]:
        """Token counts at which one forward each compiles every kernel variant the layer can use
        (:func:`~moe_select.backends.triton_moe_kernels.warm_token_counts`)."""
        return K.warm_token_counts(self._table, self.spec.top_k, num_local=self.spec.num_local_experts)

    # --- weights -----------------------------------------------------------------------------------

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None, w13_zeros: torch.Tensor | None = None,
                        w2_zeros: torch.Tensor | None = None, w13_g_idx: torch.Tensor | None = None,
                        w2_g_idx: torch.Tensor | None = None, w13_bias: torch.Tensor | None = None,
                        w2_bias: torch.Tensor | None = None, w13_global_scale: torch.Tensor | None = None,
                        w2_global_scale: torch.Tensor | None = None) -> TritonMoeWeights:
        """Convert the rank's expert weights once, at load.

        16-bit: ``w13 [E, N13, H]``, ``w2 [E, H, I]`` in the format's dtype (N13 = 2*I, gate rows then up
        rows; I for relu2). FP8: e4m3 weights plus float32 ``w13_scale``/``w2_scale``: fp8_tensor ``[E]``,
        fp8_channel ``[E, N]`` (or ``[E, N, 1]``), fp8_block ``[E, ceil(N/bn), ceil(K/bk)]``. Int formats
        (:mod:`moe_select.quant_int` layouts, chosen by ``int_layout``): ``kernel`` (``w [E, N, K/2]``
        (int4) or ``[E, N, K]`` (int8) uint8, ``scale [E, N, K/group]`` float, ``zeros [E, N, K/group]``
        uint8 or None), ``awq`` (``qweight [E, K, N/8]`` int32, ``zeros`` = qzeros ``[E, K/group, N/8]``
        int32, ``scale [E, K/group, N]``) or ``gptq`` (``qweight [E, K*bits/32, N]`` int32, qzeros
        ``[E, K/group, N*bits/32]`` int32 or None for symmetric, ``scale [E, K/group, N]``, ``g_idx`` [K]
        or [E, K], trivial only: desc_act is refused). mxfp4: ``w13 [E, N13, H/2]``, ``w2 [E, H, I/2]`` uint8
        (packed e2m1, element ``2j`` in the low nibble; torch.float4_e2m1fn_x2 accepted), ``w13_scale [E, N13,
        H/32]``, ``w2_scale [E, H, I/32]`` uint8 e8m0 (or torch.float8_e8m0fnu). nvfp4: the same packed weights,
        ``w13_scale [E, N13, H/16]``, ``w2_scale [E, H, I/16]`` float8_e4m3fn and ``w13_global_scale``,
        ``w2_global_scale`` ``[E]`` float32 (ModelOpt's ``weight_scale_2``; ``w = e2m1 * scale * global``).
        Checkpoint layouts (gpt-oss's interleaved gate/up rows, ModelOpt's swizzled scales):
        :mod:`moe_select.checkpoint_layouts`. Expert biases (gpt-oss): ``w13_bias [E, N13]`` and
        ``w2_bias [E, H]`` in any float dtype (kept in float32), added before the activation and before
        the routing weight; with tensor parallelism one rank of an expert's group passes the nonzero
        ``w2_bias`` (the ranks' outputs are summed). Compiles the kernels (``warmup``). Raises
        :class:`RunnerInputError` naming the tensor and the expected shape/dtype."""
        s = self.spec
        e, h, i, n13 = s.num_local_experts, s.hidden_size, s.intermediate_size, s.w13_rows
        q = s.quant
        for name, t in (("w13", w13), ("w2", w2)):
            if not isinstance(t, torch.Tensor):
                raise RunnerInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.device.type != self.device.type:
                raise RunnerInputError(f"{name} is on {t.device}; this core runs on {self.device}")
        if not self.fp4_group and (w13_global_scale is not None or w2_global_scale is not None):
            raise RunnerInputError(f"{q} weights take no global scale (nvfp4 does)")
        if q in INT_BITS:
            out = self._prepare_int(w13, w2, w13_scale, w2_scale, w13_zeros, w2_zeros, w13_g_idx, w2_g_idx)
        elif self.fp4_group:
            if any(t is not None for t in (w13_zeros, w2_zeros, w13_g_idx, w2_g_idx)):
                raise RunnerInputError(f"{q} weights take no zero points or g_idx")
            out = self._prepare_fp4(w13, w2, w13_scale, w2_scale, w13_global_scale, w2_global_scale)
        else:
            if any(t is not None for t in (w13_zeros, w2_zeros, w13_g_idx, w2_g_idx)):
                raise RunnerInputError(f"{q} weights take no zero points or g_idx")
            want = getattr(torch, _row(q).dtype)  # the stored element dtype of the format's row
            for name, t, shape in (("w13", w13, (e, n13, h)), ("w2", w2, (e, h, i))):
                if t.dtype != want:
                    raise RunnerInputError(f"{name}: {q} weights must be {want}, got {t.dtype}")
                if tuple(t.shape) != shape:
                    raise RunnerInputError(f"{name} must be {list(shape)} ([E_local, {'N13, H' if name == 'w13' else 'H, I'}]), "
                                           f"got {_shape(t)}")
            if q in _DTYPE16:
                if w13_scale is not None or w2_scale is not None:
                    raise RunnerInputError(f"{q} weights take no scales")
                out = TritonMoeWeights(w13.contiguous(), w2.contiguous())
            else:
                out = TritonMoeWeights(w13.contiguous(), w2.contiguous(),
                                       self._fp8_scale("w13_scale", w13_scale, e, n13, h),
                                       self._fp8_scale("w2_scale", w2_scale, e, h, i))
        out.b13, out.b2 = expert_biases(s, self.device, w13_bias, w2_bias)
        if self.warmup and self.device.type == "cuda":
            self._warm(out)
        return out

    def _fp8_scale(self, name: str, sc: torch.Tensor | None, e: int, n: int, k: int) -> torch.Tensor:
        q = self.spec.quant
        if sc is None:
            raise RunnerInputError(f"{name} is required for {q}")
        if not isinstance(sc, torch.Tensor) or not sc.is_floating_point() or sc.dtype == FP8_DTYPE:
            raise RunnerInputError(f"{name}: {q} scales must be a float tensor (float32; a scale multiplies)")
        if sc.device.type != self.device.type:
            raise RunnerInputError(f"{name} is on {sc.device}; this core runs on {self.device}")
        want: tuple[int, ...]
        if q == "fp8_tensor":
            want = (e,)
            if sc.numel() == e and sc.dim() in (2, 3) and sc.shape[0] == e:
                sc = sc.reshape(e)
        elif q == "fp8_channel":
            want = (e, n)
            if sc.dim() == 3 and sc.shape[2] == 1:
                sc = sc[:, :, 0]
        else:
            assert self.block_shape is not None  # fp8_block: set in __init__
            bn, bk = self.block_shape
            want = (e, -(-n // bn), -(-k // bk))
        if tuple(sc.shape) != want:
            what = {"fp8_tensor": "[E]", "fp8_channel": "[E, N]",
                    "fp8_block": f"[E, ceil(N/{self.block_shape[0] if self.block_shape else 0}), "
                                 f"ceil(K/{self.block_shape[1] if self.block_shape else 0})]"}[q]
            raise RunnerInputError(f"{name}: {q} scale must be {what} = {list(want)}, got {_shape(sc)}")
        return sc.float().contiguous()

    def _prepare_fp4(self, w13, w2, s13, s2, gs13, gs2) -> TritonMoeWeights:
        """mxfp4 / nvfp4 weights as given (prepare_weights' doc), checked and viewed as uint8, contiguous."""
        s = self.spec
        q, group = s.quant, self.fp4_group
        e, h, i, n13 = s.num_local_experts, s.hidden_size, s.intermediate_size, s.w13_rows
        nv = q == "nvfp4"
        scale_dt = (FP8_DTYPE,) if nv else (torch.uint8, *_E8M0)
        scale_what = "float8_e4m3fn (e4m3)" if nv else "uint8 (e8m0; or float8_e8m0fnu)"
        parts: list = []
        for name, w, sc, gsc, n, k in (("w13", w13, s13, gs13, n13, h), ("w2", w2, s2, gs2, h, i)):
            if w.dtype in _FP4_X2:
                w = w.view(torch.uint8)
            if w.dtype != torch.uint8 or tuple(w.shape) != (e, n, k // 2):
                raise RunnerInputError(f"{name}: {q} weights must be packed e2m1 uint8 [E, {'N13, H' if name == 'w13' else 'H, I'}"
                                       f"/2] = {[e, n, k // 2]} (element 2j in the low nibble), got {w.dtype} {_shape(w)}")
            if sc is None:
                raise RunnerInputError(f"{name}_scale is required for {q}")
            if not isinstance(sc, torch.Tensor) or sc.dtype not in scale_dt or tuple(sc.shape) != (e, n, k // group):
                got = f"{sc.dtype} {_shape(sc)}" if isinstance(sc, torch.Tensor) else type(sc).__name__
                raise RunnerInputError(f"{name}_scale: {q} scales must be {scale_what} [E, {'N13' if name == 'w13' else 'H'}, "
                                       f"{'H' if name == 'w13' else 'I'}/{group}] = {[e, n, k // group]}, got {got}")
            if sc.device.type != self.device.type:
                raise RunnerInputError(f"{name}_scale is on {sc.device}; this core runs on {self.device}")
            g = None
            if nv:
                if gsc is None:
                    raise RunnerInputError(f"{name}_global_scale [E] float32 is required for nvfp4 (ModelOpt's weight_scale_2)")
                if not isinstance(gsc, torch.Tensor) or not gsc.is_floating_point() or gsc.numel() != e or gsc.shape[0] != e:
                    got = f"{gsc.dtype} {_shape(gsc)}" if isinstance(gsc, torch.Tensor) else type(gsc).__name__
                    raise RunnerInputError(f"{name}_global_scale: nvfp4 global scales must be a float tensor [E] = [{e}], got {got}")
                if gsc.device.type != self.device.type:
                    raise RunnerInputError(f"{name}_global_scale is on {gsc.device}; this core runs on {self.device}")
                g = gsc.reshape(e).to(torch.float32).contiguous()
                if self.device.type != "meta" and not bool(torch.isfinite(g).all()):  # at load: a sync is fine
                    raise RunnerInputError(f"{name}_global_scale has non-finite values")
            elif gsc is not None:
                raise RunnerInputError(f"{name}_global_scale: mxfp4 takes no global scale (nvfp4 does)")
            w, sc = w.contiguous(), sc.view(torch.uint8).contiguous()
            if self.fp4_asm and self.device.type != "meta":
                w, sc = self._fp4_kernel_layout(name, w, sc, nv, group)
            parts.append((w, sc, g))
        (q13, sc13, g13), (q2, sc2, g2) = parts
        return TritonMoeWeights(q13, q2, sc13, sc2, g13=group, g2=group, gs13=g13, gs2=g2, fp4_shuffled=self.fp4_asm)

    @staticmethod
    def _fp4_kernel_layout(name: str, w: torch.Tensor, sc: torch.Tensor, nv: bool,
                           group: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed e2m1 weights ``w [E, N, K/2]`` and their scale bytes ``sc [E, N, K/group]`` (uint8, canonical) ->
        the PTX decode's layout: words shuffled (:func:`~.triton_moe_kernels.fp4_shuffle`) and kernel scale bytes
        (:func:`~.triton_moe_kernels.fp4_kernel_e8m0` / :func:`~.triton_moe_kernels.fp4_kernel_e4m3`); nvfp4 blocks
        with a zero scale get zero codes (the same weights). Raises RunnerInputError for an e8m0 byte above
        :data:`~.triton_moe_kernels.FP4_MAX_E8M0` or a negative or NaN e4m3 byte, naming the tensor (one host
        synchronisation: at load)."""
        if nv:
            bad = (sc >= 0x7F).nonzero()
            if len(bad):
                at = tuple(int(x) for x in bad[0])
                raise RunnerInputError(
                    f"{name}_scale{list(at)}: e4m3 byte {int(sc[at]):#04x} is negative or NaN; the GPU decode takes "
                    f"positive finite nvfp4 block scales (TritonMoeCore(..., fp4_decode='portable') runs any)")
            zero = sc == 0
            if bool(zero.any()):
                w = w.view(*w.shape[:-1], -1, group // 2).masked_fill(zero[..., None], 0).view(w.shape)
            return K.fp4_shuffle(w), K.fp4_kernel_e4m3(sc)
        bad = (sc > K.FP4_MAX_E8M0).nonzero()
        if len(bad):
            at = tuple(int(x) for x in bad[0])
            top = int(sc[at])
            raise RunnerInputError(
                f"{name}_scale{list(at)}: an e8m0 scale byte of {top} (2^{top - 127}) is above what the GPU decode scales exactly "
                f"({K.FP4_MAX_E8M0}: 2^{K.FP4_MAX_E8M0 - 127}; triton_moe_kernels.FP4_EPI_LOG2); TritonMoeCore(..., "
                f"fp4_decode='portable') runs it")
        return K.fp4_shuffle(w), K.fp4_kernel_e8m0(sc)

    def _prepare_int(self, w13, w2, s13, s2, z13, z2, g13, g2) -> TritonMoeWeights:
        s = self.spec
        bits = INT_BITS[s.quant]
        e, h, i, n13 = s.num_local_experts, s.hidden_size, s.intermediate_size, s.w13_rows
        parts = []
        for name, w, sc, z, gi, n, k in (("w13", w13, s13, z13, g13, n13, h), ("w2", w2, s2, z2, g2, h, i)):
            layout = self.int_layout
            if layout == "auto":
                layout = self._detect_layout(name, w, bits, n, k)
            if sc is None:
                raise RunnerInputError(f"{name}_scale is required for {s.quant}")
            try:
                if layout == "kernel":
                    if gi is not None:
                        raise ValueError(f"{name}_g_idx applies to the gptq layout only")
                    want = (e, n, k // 2 if bits == 4 else k)
                    if w.dtype != torch.uint8 or tuple(w.shape) != want:
                        raise ValueError(f"{name}: {s.quant} kernel-layout weights must be uint8 {list(want)}, "
                                         f"got {w.dtype} {_shape(w)}")
                    iw = quant_int.from_kernel(w, sc, z, bits)
                elif layout == "awq":
                    if bits != 4:
                        raise ValueError("AWQ checkpoints are 4-bit only")
                    if gi is not None:
                        raise ValueError(f"{name}_g_idx applies to the gptq layout only")
                    if tuple(w.shape) != (e, k, n // 8) or w.dtype != torch.int32:
                        raise ValueError(f"{name}: AWQ qweight must be int32 [E, K, N/8] = {[e, k, n // 8]}, "
                                         f"got {w.dtype} {_shape(w)}")
                    iw = quant_int.from_awq(w, z, sc)
                else:
                    per = 32 // bits
                    if tuple(w.shape) != (e, k // per, n) or w.dtype != torch.int32:
                        raise ValueError(f"{name}: GPTQ qweight must be int32 [E, K*{bits}/32, N] = {[e, k // per, n]}, "
                                         f"got {w.dtype} {_shape(w)}")
                    iw = quant_int.from_gptq(w, z, sc, bits, g_idx=gi, zeros_minus_one=self.gptq_zeros_minus_one)
            except ValueError as exc:
                raise RunnerInputError(f"{name} ({s.quant}, {layout} layout): {exc}") from None
            if tuple(iw.q.shape) != (e, n, k):
                raise RunnerInputError(f"{name}: {s.quant} weights unpack to {_shape(iw.q)}, expected [{e}, {n}, {k}]")
            kq, ks, kz = quant_int.to_kernel(iw)
            parts.append((kq, ks, kz, iw.group_size))
        (q13, sc13, zz13, gs13), (q2, sc2, zz2, gs2) = parts
        return TritonMoeWeights(q13, q2, sc13, sc2, zz13, zz2, gs13, gs2)

    @staticmethod
    def _detect_layout(name: str, w: torch.Tensor, bits: int, n: int, k: int) -> str:
        e = w.shape[0] if w.dim() else 0
        if w.dtype == torch.uint8:
            return "kernel"
        if w.dtype == torch.int32 and w.dim() == 3:
            if bits == 4 and tuple(w.shape) == (e, k, n // 8) and n % 8 == 0:
                return "awq"
            if tuple(w.shape) == (e, k * bits // 32, n):
                return "gptq"
        raise RunnerInputError(f"{name}: cannot tell the int{bits} layout of a {w.dtype} {_shape(w)} tensor: kernel "
                               f"layout is uint8 [E, {n}, {k // 2 if bits == 4 else k}], AWQ int32 [E, {k}, {n // 8}], "
                               f"GPTQ int32 [E, {k * bits // 32}, {n}] (int_layout= chooses one)")

    def _warm(self, weights: TritonMoeWeights) -> None:
        """Run one forward at each of :meth:`warm_token_counts` (compiles every variant; module doc)."""
        import time

        s = self.spec
        t0 = time.perf_counter()
        gen = torch.Generator(device=self.device).manual_seed(0)
        dt = torch.float16 if s.quant == "fp16" else torch.bfloat16
        for t in self.warm_token_counts():
            x = torch.randn(t, s.hidden_size, generator=gen, device=self.device).to(dt)
            ids = torch.randint(-1, s.num_experts, (t, s.top_k), generator=gen, device=self.device, dtype=torch.int32)
            tw = torch.rand(t, s.top_k, generator=gen, device=self.device)
            self.forward(x, ids, tw, weights)
        torch.cuda.synchronize(self.device)
        self.compile_s = time.perf_counter() - t0

    # --- forward -------------------------------------------------------------------------------------

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: TritonMoeWeights) -> torch.Tensor:
        """``hidden_states [T, H]`` (bf16/fp16/fp32/fp64), ``topk_ids [T, K]`` int32/int64 global ids,
        ``topk_weights [T, K]`` float32 -> ``[T, H]`` in ``hidden_states.dtype``: the sum over this rank's
        experts of routing weight x expert output (module doc). Raises :class:`RunnerInputError` on a
        shape, dtype or device the kernels cannot take."""
        return checked_forward(self, hidden_states, topk_ids, topk_weights, weights)

    def _forward(self, hidden_states, topk_ids, topk_weights, w: TritonMoeWeights) -> torch.Tensor:
        cfg = self.config_for(topk_ids.shape[0])
        if cfg.get("DIRECT"):
            return direct_forward(self, w, hidden_states, topk_ids, topk_weights, cfg)
        p = ForwardPass(self, w, hidden_states, topk_ids, topk_weights, cfg["BLOCK_M"],
                        prequant_first=bool(cfg["gemm1"].get("PREQUANT")))
        p.gemm1(cfg["gemm1"])
        p.gemm2(cfg["gemm2"])
        return p.combine()


class ForwardPass:
    """The buffers and launches of one forward of ``core`` (used by :meth:`TritonMoeCore.forward` and by
    ``benchmarks/tune_triton_moe.py``, which times each step with several configurations).

    Construction casts/quantizes the hidden states (FP8: per-token amax, or per-token-group e4m3 for
    fp8_block), allocates every buffer from ``T`` alone and sorts the slots with ``block_m``; then
    :meth:`gemm1`, :meth:`gemm2` (each with a GEMM config; ``warmup=True`` compiles without running) and
    :meth:`combine` (returns ``[T, H]`` in the input dtype). :meth:`sort` re-runs the sort (timing).

    ``prequant_first``: the first GEMM's config sets ``PREQUANT``; with a per-token activation scale the amax
    and the e4m3 copy of the hidden states are then made by one launch here
    (:func:`~.triton_moe_kernels.token_quant`, the same bits), and :meth:`gemm1` reads that copy whenever its
    config sets ``PREQUANT``."""

    def __init__(self, core: TritonMoeCore, w: TritonMoeWeights, hidden_states: torch.Tensor,
                 topk_ids: torch.Tensor, topk_weights: torch.Tensor, block_m: int, *, prequant_first: bool = False):
        s = core.spec
        self.core, self.w, self.block_m = core, w, block_m
        dev = hidden_states.device
        t, k = topk_ids.shape
        q = s.quant
        if q in _DTYPE16:
            act_dtype = _DTYPE16[q]
        elif core.fp4_group:                 # packed FP4: bf16 operands (the decoded weights are bf16)
            act_dtype = torch.bfloat16
        else:
            act_dtype = hidden_states.dtype if hidden_states.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        self.out_dtype = hidden_states.dtype
        self.x = hidden_states.to(act_dtype).contiguous()
        self.ids = topk_ids.contiguous()
        self.tw = topk_weights.to(torch.float32).contiguous()
        self.x_scale = self.act_scale = None
        self.x_q: torch.Tensor | None = None
        rows, _ = K.max_padded_rows(t * k, s.num_local_experts, block_m)
        self.a_mode = 0
        bits = INT_BITS.get(q, 0)
        self.zero_default = (1 << (bits - 1)) if bits else 0
        if core.w_mode in (1, 2):
            if core.act_quant == "token":
                self.a_mode = 1
                if prequant_first:
                    self.x_scale = torch.empty(t, dtype=torch.float32, device=dev)
                    self.x_q = torch.empty(self.x.shape, dtype=torch.float8_e4m3fn, device=dev)
                    K.token_quant(self.x, self.x_scale, self.x_q)
                else:
                    self.x_scale = torch.linalg.vector_norm(self.x, float("inf"), dim=1, dtype=torch.float32)
                self.act_scale = torch.empty(rows, dtype=torch.float32, device=dev)
            else:
                self.a_mode = 2
                self.x_scale = torch.linalg.vector_norm(self.x, float("inf"), dtype=torch.float32).reshape(1)
                self.act_scale = torch.empty(1, dtype=torch.float32, device=dev)
            self.act = torch.empty(rows, s.intermediate_size, dtype=act_dtype, device=dev)
            self.groups = (0, 0, 1)
        elif core.w_mode == 3:
            assert core.block_shape is not None  # fp8_block: set in __init__
            bn, bk = core.block_shape
            self.a_mode = 3
            self.x, self.x_scale = K.group_quant(self.x, bk)
            self.act = torch.empty(rows, s.intermediate_size, dtype=torch.float8_e4m3fn, device=dev)
            self.act_scale = torch.empty(rows, -(-s.intermediate_size // bk), dtype=torch.float32, device=dev)
            self.groups = (bk, bk, bn)
        else:
            self.act = torch.empty(rows, s.intermediate_size, dtype=act_dtype, device=dev)
            self.groups = (w.g13, w.g2, 1)
        self.align = K.moe_align(self.ids, s.num_local_experts, s.expert_offset, block_m,
                                 amax=self.act_scale if self.a_mode in (1, 2) else None)
        self.y = torch.empty(t * k, s.hidden_size, dtype=act_dtype, device=dev)

    def sort(self) -> None:
        s = self.core.spec
        K.moe_align(self.ids, s.num_local_experts, s.expert_offset, self.block_m,
                    amax=self.act_scale if self.a_mode in (1, 2) else None)

    def _fit(self, config: dict, group: int) -> dict:
        """Int formats: ``BLOCK_K`` at most the largest power of two dividing the group size (>= 16), so a
        K tile lies in one group (one scale per column; the kernel's per-element path otherwise)."""
        if self.core.w_mode not in (4, 5) or not group or group % config["BLOCK_K"] == 0:
            return config
        bk = group & -group
        return {**config, "BLOCK_K": bk} if bk >= 16 else config

    def _prequant(self, a: torch.Tensor, amax: torch.Tensor | None, config: dict, num_rows: torch.Tensor | None,
                  warmup: bool) -> torch.Tensor:
        """The GEMM's A operand: ``a`` itself, or (fp8_tensor/fp8_channel with config ``PREQUANT``) ``a``
        quantized to e4m3 by :func:`~.triton_moe_kernels.row_quant` from ``amax`` into a new buffer, with the
        multiplier the GEMM's main loop would apply (the same result, no conversion in the loop)."""
        if not config.get("PREQUANT") or self.core.w_mode not in (1, 2) or amax is None:
            return a
        q = torch.empty(a.shape, dtype=torch.float8_e4m3fn, device=a.device)
        K.row_quant(a, amax, q, per_row=self.a_mode == 1, num_rows=num_rows, warmup=warmup)
        return q

    def gemm1(self, config: dict, warmup: bool = False):
        s, w = self.core.spec, self.w
        config = self._fit(config, self.groups[0])
        if config.get("SPLIT"):
            return self._gemm1_split(config, warmup)
        if self.x_q is not None and config.get("PREQUANT"):
            a = self.x_q
        else:
            a = self._prequant(self.x, self.x_scale, config, None, warmup)
        return K.moe_gemm(a, w.w13, self.act, self.align, top_k=s.top_k, n_out=s.intermediate_size, gather=True,
                          by_slot=False, activation=s.activation, gated=s.gated,
                          weight=self.tw if self.core.on_input else None, a_amax=self.x_scale,
                          a_scale_mode=self.a_mode, c_amax=self.act_scale, c_amax_mode=self.a_mode,
                          w_mode=self.core.w_mode, b_scale=w.s13, b_zero=w.z13, zero_default=self.zero_default,
                          group_k=self.groups[0], group_n=self.groups[2], swiglu_limit=s.swiglu_limit or 7.0,
                          bias=w.b13, bias_before_weight=False, b_gscale=w.gs13, fp4_asm=w.fp4_shuffled,
                          config=config, warmup=warmup)

    def _gemm1_split(self, config: dict, warmup: bool):
        """fp8_block's first GEMM split in two: one accumulator over the ``2*I`` gate and up rows (bias and
        weight-on-input as the fused tile), bf16 out ``h [R, 2*I]`` (bf16 whatever the input dtype: it is
        quantized to e4m3 next), then :func:`~.triton_moe_kernels.act_quant`
        (activation and per-group e4m3 quantization into the same ``act``/``act_scale`` as the fused
        epilogue). Raises ValueError for a format other than fp8_block."""
        s, w = self.core.spec, self.w
        if self.core.w_mode != 3:
            raise ValueError(f"SPLIT is an fp8_block first-GEMM option; this layer is {s.quant}")
        n13 = s.w13_rows
        assert self.act_scale is not None  # fp8_block: allocated in __init__
        h = torch.empty(self.act.shape[0], n13, dtype=torch.bfloat16, device=self.x.device)
        K.moe_gemm(self.x, w.w13, h, self.align, top_k=s.top_k, n_out=n13, gather=True, by_slot=False, activation=None,
                   gated=False, weight=self.tw if self.core.on_input else None, a_amax=self.x_scale, a_scale_mode=3,
                   c_amax_mode=0, w_mode=3, b_scale=w.s13, group_k=self.groups[0], group_n=self.groups[2], bias=w.b13,
                   bias_before_weight=False, config={k: v for k, v in config.items() if k != "SPLIT"}, warmup=warmup)
        return K.act_quant(h, self.act, self.act_scale, self.align.num_rows, inter=s.intermediate_size,
                           activation=s.activation, gated=s.gated, group=self.groups[0],
                           swiglu_limit=s.swiglu_limit or 7.0, warmup=warmup)

    def gemm2(self, config: dict, warmup: bool = False):
        s, w = self.core.spec, self.w
        config = self._fit(config, self.groups[1])
        a = self._prequant(self.act, self.act_scale, config, self.align.num_rows, warmup)
        return K.moe_gemm(a, w.w2, self.y, self.align, top_k=s.top_k, n_out=s.hidden_size, gather=False,
                          by_slot=True, activation=None, gated=False, weight=None if self.core.on_input else self.tw,
                          a_amax=self.act_scale, a_scale_mode=self.a_mode, c_amax_mode=0, w_mode=self.core.w_mode,
                          b_scale=w.s2, b_zero=w.z2, zero_default=self.zero_default, group_k=self.groups[1],
                          group_n=self.groups[2], bias=w.b2, bias_before_weight=True, b_gscale=w.gs2,
                          fp4_asm=w.fp4_shuffled, config=config, warmup=warmup)

    def combine(self) -> torch.Tensor:
        s = self.core.spec
        out = torch.empty(self.ids.shape[0], s.hidden_size, dtype=self.out_dtype, device=self.x.device)
        return K.topk_sum(self.y, self.ids, out, s.num_local_experts, s.expert_offset)


def direct_forward(core: TritonMoeCore, w: TritonMoeWeights, hidden_states: torch.Tensor, topk_ids: torch.Tensor,
                   topk_weights: torch.Tensor, cfg: dict) -> torch.Tensor:
    """The forward of a packed-FP4 layer at a bucket whose config sets ``DIRECT`` (decode): two launches of
    :func:`~.triton_moe_kernels.fp4_direct_gemm` and no sort. The first GEMM reads each routing slot's expert from
    ``topk_ids`` and writes the activated intermediate ``[T*K, I]`` bf16 per slot; the second walks each token's
    ``top_k`` slots and sums their outputs in float32 (the top-k sum fused; the routing weight and nvfp4's second
    global scale are applied by the first GEMM's epilogue, to each slot's intermediate row; with ``SPLIT_SLOTS`` one
    program per slot and strip, the strip's last one summing, through zeroed counters the core keeps per device and
    stream, so forwards of one core on two streams at once, as two-batch overlap runs them, do not share them). Slots
    of other ranks' experts (and ids of -1) are skipped. Returns ``[T, H]`` in ``hidden_states.dtype``."""
    s = core.spec
    t, k = topk_ids.shape
    dev = hidden_states.device
    x = hidden_states.to(torch.bfloat16).contiguous()
    ids = topk_ids.contiguous()
    tw = topk_weights.to(torch.float32).contiguous()
    act = torch.empty(t * k, s.intermediate_size, dtype=torch.bfloat16, device=dev)
    assert w.s13 is not None and w.s2 is not None  # packed FP4: the scale bytes (prepare_weights)
    common: dict[str, Any] = dict(w_mode=core.w_mode, expert_offset=s.expert_offset, num_local=s.num_local_experts,
                                  swiglu_limit=s.swiglu_limit or 7.0, fp4_asm=w.fp4_shuffled)
    K.fp4_direct_gemm(x, w.w13, w.s13, act, ids, group=w.g13, n_out=s.intermediate_size, sum_topk=False,
                      gated=s.gated, activation=s.activation, weight=tw, weight_on_input=core.on_input, gscale=w.gs13,
                      post_gscale=w.gs2, bias=w.b13, config=cfg["gemm1"], **common)
    out = torch.empty(t, s.hidden_size, dtype=hidden_states.dtype, device=dev)
    counters = None
    if cfg["gemm2"].get("SPLIT_SLOTS"):      # zeros, kept per device; the kernel leaves them zero after each launch
        need = t * -(-s.hidden_size // cfg["gemm2"]["BLOCK_N"])
        key = (dev, torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0)
        counters = core._direct_counters.get(key)
        if counters is None or counters.numel() < need:
            counters = core._direct_counters[key] = torch.zeros(max(need, 4096), dtype=torch.int32, device=dev)
    return K.fp4_direct_gemm(act, w.w2, w.s2, out, ids, group=w.g2, n_out=s.hidden_size, sum_topk=True,
                             weight=None if core.on_input else tw, gscale=w.gs2, bias=w.b2, counters=counters,
                             config=cfg["gemm2"], **common)


def checked_forward(core: Any, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                    weights: Any) -> torch.Tensor:
    """The input checks a fused core's ``forward`` makes before ``core._forward(hidden_states, topk_ids,
    topk_weights, weights)`` (this module's and backends/deep_gemm_moe.py's cores): ``hidden_states [T, H]``,
    ``topk_ids [T, K]`` int32/int64 and ``topk_weights [T, K]`` on the core's device type (``core.spec``,
    ``core.device``); ``[0, H]`` for ``T = 0``; on CUDA, ``core._forward`` runs with the input's device current.
    Raises :class:`RunnerInputError` naming the shape, dtype or device it cannot take."""
    s = core.spec
    if hidden_states.dim() != 2 or hidden_states.shape[1] != s.hidden_size:
        raise RunnerInputError(f"hidden_states must be [T, H={s.hidden_size}], got {_shape(hidden_states)}")
    t = hidden_states.shape[0]
    if tuple(topk_ids.shape) != (t, s.top_k) or tuple(topk_weights.shape) != (t, s.top_k):
        raise RunnerInputError(f"topk_ids and topk_weights must be [T={t}, K={s.top_k}], got "
                               f"{_shape(topk_ids)} and {_shape(topk_weights)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise RunnerInputError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if hidden_states.device.type != core.device.type:
        raise RunnerInputError(f"hidden_states is on {hidden_states.device}; this core runs on {core.device}")
    if t == 0:
        return hidden_states.new_empty(0, s.hidden_size)
    if core.device.type == "cuda" and hidden_states.device.index != torch.cuda.current_device():
        with torch.cuda.device(hidden_states.device):
            return core._forward(hidden_states, topk_ids, topk_weights, weights)
    return core._forward(hidden_states, topk_ids, topk_weights, weights)


def register(registry: Registrar) -> None:
    """Register the triton core for standard (token-major) dispatch, what a2a ``none`` and ``torch`` hand
    over (rows of tokens with global ``topk_ids``; ids of other ranks' experts and -1 are skipped)."""
    registry.register_core("triton", "standard", TritonMoeCore)

"""Packed-FP4 expert weights as checkpoints store them and engines load them, converted to the canonical layout
``prepare_weights`` takes (README, "Python API"; :mod:`moe_select.ops` module doc for the formats):

- canonical mxfp4: ``w13 [E, 2*I, H/2]`` uint8 (gate rows, then up rows), ``w2 [E, H, I/2]`` uint8, packed e2m1
  with element ``2j`` of a row in the low nibble of byte ``j``; e8m0 scales ``w13_scale [E, 2*I, H/32]``,
  ``w2_scale [E, H, I/32]`` uint8 (value ``2^(s - 127)``); gpt-oss's biases ``w13_bias [E, 2*I]`` (gate
  entries, then up entries) and ``w2_bias [E, H]``, float32.
- canonical nvfp4: the same packed weights, e4m3 scales ``w13_scale [E, 2*I, H/16]``, ``w2_scale [E, H, I/16]``
  (float8_e4m3fn), and one float32 global scale per expert and tensor, ``w13_global_scale [E]``,
  ``w2_global_scale [E]``: ``w = e2m1 * scale * global_scale``.

Checkpoint layouts read here (each cited at a commit):

- **gpt-oss (MXFP4)**, :func:`from_gpt_oss`: per layer ``gate_up_proj_blocks [E, 2*I, H/32, 16]`` uint8 (32
  e2m1 codes of one scale group in 16 bytes, low nibble first), ``gate_up_proj_scales [E, 2*I, H/32]`` uint8
  (e8m0, ``2^(s - 127)``), ``gate_up_proj_bias [E, 2*I]``, ``down_proj_blocks [E, H, I/32, 16]``,
  ``down_proj_scales [E, H, I/32]``, ``down_proj_bias [E, H]``: transformers'
  ``Mxfp4GptOssExperts`` and ``convert_moe_packed_tensors``
  (huggingface/transformers@0189b1d09a03a87ec4f59831acb93cc1832d14e7:src/transformers/integrations/mxfp4.py).
  The ``2*I`` rows (and the bias entries) *interleave* gate and up: gate at even rows, up at odd rows
  (``gate, up = gate_up[..., ::2], gate_up[..., 1::2]`` in ``GptOssExperts.forward``,
  huggingface/transformers@00d4b3d2142cb4ced2f51b90614b5d26bc045015:src/transformers/models/gpt_oss/modeling_gpt_oss.py);
  they are de-interleaved into gate rows then up rows.
- **ModelOpt NVFP4** (NVIDIA's ``hf_quant_config.json`` ``quant_algo: NVFP4`` checkpoints),
  :func:`from_modelopt_nvfp4`: per expert ``e`` and projection (``gate_proj``, ``up_proj``, ``down_proj``)
  ``weight [N, K/2]`` uint8, ``weight_scale [N, K/16]`` float8_e4m3fn, ``weight_scale_2 []`` float32 (and an
  ``input_scale``, unused by a W4A16 runner); :func:`stack_modelopt_experts` stacks them per layer as the
  engines do (``w13 = [gate; up]``, ``w13_weight_scale_2 [E, 2]``: vLLM's ``ModelOptNvFp4FusedMoE``). Block
  scales are read *linear* (as the checkpoint stores them) or *swizzled* (the 128x4 interleave the engines
  write for their FP4 grouped-GEMM kernels after loading: ``swizzle_blockscale``,
  vllm-project/vllm@0b70ce189816f5dbfcdd323f5b49640f97fc78c4:vllm/model_executor/layers/quantization/utils/nvfp4_utils.py),
  which :func:`unswizzle_nvfp4_scale` inverts. Gate and up global scales that differ are reconciled as that
  file's ``reconcile_nvfp4_moe_w13_scales`` does (one shared per-expert global scale, the larger; the other
  half's block scales rescaled and rounded to e4m3, a :class:`Fp4LayoutWarning` says so).

Tensor parallelism: ``tp_rank``/``tp_size`` keep this rank's slice of the intermediate dimension (gate rows,
up rows, w2's input columns and their scales); a slice must hold whole scale groups (``I / tp_size`` a multiple
of 32 for mxfp4, 16 for nvfp4). ``w2_bias`` goes to ``tp_rank`` 0 only (the ranks' outputs are summed; README).
Expert parallelism: pass the rank's experts (``tensor[e0:e1]``). Every function raises ValueError naming the
tensor, the expected shape and dtype, and what it got.
"""
from __future__ import annotations

import warnings
from typing import Mapping

import torch

MX_GROUP = 32
NV_GROUP = 16
#: Rows and scale columns of one tile of the swizzled NVFP4 scale layout (vLLM ``swizzle_blockscale``).
SWIZZLE_ROWS = 128
SWIZZLE_COLS = 4

_FP4_X2 = tuple(getattr(torch, n) for n in ("float4_e2m1fn_x2",) if hasattr(torch, n))
_E8M0 = tuple(getattr(torch, n) for n in ("float8_e8m0fnu",) if hasattr(torch, n))


class Fp4LayoutWarning(UserWarning):
    """A conversion that is not exact (NVFP4 gate/up global scales reconciled: block scales re-rounded)."""


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _packed(name: str, t: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 weights as uint8 (torch.float4_e2m1fn_x2 viewed as uint8)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype in _FP4_X2:
        t = t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise ValueError(f"{name} must be uint8 (packed e2m1, two codes per byte), got {t.dtype}")
    return t


def _want(name: str, t: torch.Tensor, shape: tuple[int, ...], what: str) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be {what} = {list(shape)}, got {t.dtype} {_shape(t)}")


def _tp_slice(inter: int, group: int, tp_rank: int, tp_size: int) -> tuple[int, int]:
    """(start, size) of rank ``tp_rank``'s slice of the intermediate dimension ``inter``."""
    if tp_size < 1 or not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank {tp_rank} must be in [0, tp_size = {tp_size})")
    if inter % tp_size or (inter // tp_size) % group:
        raise ValueError(f"intermediate size {inter} over tp_size {tp_size}: each rank's slice must be a whole number of "
                         f"scale groups of {group} (a scale block cannot be split between ranks)")
    size = inter // tp_size
    return tp_rank * size, size


def _gates_then_ups(t: torch.Tensor, start: int, size: int) -> torch.Tensor:
    """Rows (dim 1) of a canonical ``[E, 2*I, ...]`` tensor (gate rows, then up rows) for one TP slice."""
    inter = t.shape[1] // 2
    return torch.cat([t[:, start:start + size], t[:, inter + start:inter + start + size]], dim=1).contiguous()


def from_gpt_oss(gate_up_proj_blocks: torch.Tensor, gate_up_proj_scales: torch.Tensor, down_proj_blocks: torch.Tensor,
                 down_proj_scales: torch.Tensor, gate_up_proj_bias: torch.Tensor | None = None,
                 down_proj_bias: torch.Tensor | None = None, *, tp_rank: int = 0,
                 tp_size: int = 1) -> dict[str, torch.Tensor]:
    """gpt-oss's MXFP4 experts (module doc) -> the keyword arguments of ``prepare_weights`` for an mxfp4 layer:
    ``w13 [E, 2*I/tp, H/2]``, ``w2 [E, H, I/tp/2]`` uint8, ``w13_scale [E, 2*I/tp, H/32]``, ``w2_scale [E, H,
    I/tp/32]`` uint8, and ``w13_bias [E, 2*I/tp]``, ``w2_bias [E, H]`` float32 when given (rank 0 keeps
    ``w2_bias``; other ranks get zeros). Rows and bias entries are de-interleaved (gate = even rows, up = odd
    rows). No copy of the weights is kept beyond the outputs; no value changes (the conversion is a
    permutation). Raises ValueError on shapes or dtypes that are not gpt-oss's."""
    gu = _packed("gate_up_proj_blocks", gate_up_proj_blocks)
    dn = _packed("down_proj_blocks", down_proj_blocks)
    if gu.dim() != 4 or gu.shape[-1] != MX_GROUP // 2:
        raise ValueError(f"gate_up_proj_blocks must be uint8 [E, 2*I, H/32, 16], got {gu.dtype} {_shape(gu)}")
    e, rows, hg, _ = gu.shape
    if rows % 2:
        raise ValueError(f"gate_up_proj_blocks has {rows} rows: gate and up rows interleave, so 2*I is even")
    inter, hidden = rows // 2, hg * MX_GROUP
    _want("down_proj_blocks", dn, (e, hidden, inter // MX_GROUP, MX_GROUP // 2), "uint8 [E, H, I/32, 16]")
    if inter % MX_GROUP:
        raise ValueError(f"intermediate size {inter} is not a multiple of {MX_GROUP} (down_proj's scale groups)")
    scales = []
    for name, s, shape in (("gate_up_proj_scales", gate_up_proj_scales, (e, rows, hg)),
                           ("down_proj_scales", down_proj_scales, (e, hidden, inter // MX_GROUP))):
        if not isinstance(s, torch.Tensor) or s.dtype not in (torch.uint8, *_E8M0):
            raise ValueError(f"{name} must be uint8 e8m0 scales, got {getattr(s, 'dtype', type(s).__name__)}")
        _want(name, s, shape, "uint8 [E, rows, K/32]")
        scales.append(s.view(torch.uint8))
    start, size = _tp_slice(inter, MX_GROUP, tp_rank, tp_size)
    # de-interleave: rows 0, 2, 4, ... are gate rows; 1, 3, 5, ... up rows
    w13 = torch.cat([gu[:, 0::2], gu[:, 1::2]], dim=1).reshape(e, rows, hidden // 2)
    s13 = torch.cat([scales[0][:, 0::2], scales[0][:, 1::2]], dim=1)
    out = {"w13": _gates_then_ups(w13, start, size), "w13_scale": _gates_then_ups(s13, start, size),
           "w2": dn.reshape(e, hidden, inter // 2)[:, :, start // 2:(start + size) // 2].contiguous(),
           "w2_scale": scales[1][:, :, start // MX_GROUP:(start + size) // MX_GROUP].contiguous()}
    if gate_up_proj_bias is not None:
        _want("gate_up_proj_bias", gate_up_proj_bias, (e, rows), "float [E, 2*I]")
        b = gate_up_proj_bias.float()
        out["w13_bias"] = _gates_then_ups(torch.cat([b[:, 0::2], b[:, 1::2]], dim=1), start, size)
    if down_proj_bias is not None:
        _want("down_proj_bias", down_proj_bias, (e, hidden), "float [E, H]")
        b2 = down_proj_bias.float().contiguous()
        out["w2_bias"] = b2 if tp_rank == 0 else torch.zeros_like(b2)
    return out


def unswizzle_nvfp4_scale(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Swizzled NVFP4 block scales ``[E, round_up(rows, 128), round_up(cols, 4)]`` (or 2-D without ``E``) -> the
    linear ``[E, rows, cols]``: the inverse of vLLM's ``swizzle_blockscale`` (module doc), which pads to whole
    128 x 4 tiles, views the padded tensor as ``[E, rows/128, 4, 32, cols/4, 4]`` and stores it permuted
    ``(0, 1, 4, 3, 2, 5)``; that permutation is its own inverse. The padding is dropped. Raises ValueError
    on a shape that is not a padded tile grid of ``rows x cols``."""
    two_d = scale.dim() == 2
    s = scale[None] if two_d else scale
    rp = -(-rows // SWIZZLE_ROWS) * SWIZZLE_ROWS
    cp = -(-cols // SWIZZLE_COLS) * SWIZZLE_COLS
    if s.dim() != 3 or tuple(s.shape[1:]) != (rp, cp):
        raise ValueError(f"swizzled NVFP4 scales for {rows} x {cols} must be [E, {rp}, {cp}] (padded to 128 x 4 tiles), "
                         f"got {_shape(scale)}")
    e = s.shape[0]
    lin = (s.view(torch.uint8).reshape(e, rp // SWIZZLE_ROWS, cp // SWIZZLE_COLS, 32, 4, SWIZZLE_COLS)
           .permute(0, 1, 4, 3, 2, 5).reshape(e, rp, cp)[:, :rows, :cols].contiguous().view(scale.dtype))
    return lin[0] if two_d else lin


def _nv_scales(name: str, s: torch.Tensor, e: int, n: int, k: int, layout: str) -> torch.Tensor:
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{name} must be float8_e4m3fn (NVFP4 block scales), got {getattr(s, 'dtype', type(s).__name__)}")
    if layout == "swizzled":
        return unswizzle_nvfp4_scale(s, n, k // NV_GROUP)
    _want(name, s, (e, n, k // NV_GROUP), "float8_e4m3fn [E, N, K/16] (linear)")
    return s.contiguous()


def _global(name: str, g: torch.Tensor, e: int, parts: int) -> torch.Tensor:
    if not isinstance(g, torch.Tensor) or not g.is_floating_point():
        raise ValueError(f"{name} must be a float tensor, got {getattr(g, 'dtype', type(g).__name__)}")
    g = g.float()
    if parts == 2 and tuple(g.shape) == (e,):
        g = g[:, None].expand(e, 2)
    if parts == 1 and tuple(g.shape) in ((e, 1),):
        g = g[:, 0]
    want = (e, 2) if parts == 2 else (e,)
    if tuple(g.shape) != want:
        raise ValueError(f"{name} must be float32 {list(want)}{' (gate, up) or [E]' if parts == 2 else ''}, got {_shape(g)}")
    if not bool(torch.isfinite(g).all()) or bool((g <= 0).any()):
        raise ValueError(f"{name} must be finite and positive")
    return g


def from_modelopt_nvfp4(w13_weight: torch.Tensor, w13_weight_scale: torch.Tensor, w13_weight_scale_2: torch.Tensor,
                        w2_weight: torch.Tensor, w2_weight_scale: torch.Tensor, w2_weight_scale_2: torch.Tensor, *,
                        scale_layout: str = "linear", tp_rank: int = 0, tp_size: int = 1) -> dict[str, torch.Tensor]:
    """ModelOpt NVFP4 experts stacked per layer as the engines load them (:func:`stack_modelopt_experts`) -> the
    keyword arguments of ``prepare_weights`` for an nvfp4 layer.

    ``w13_weight [E, 2*I, H/2]`` uint8 (gate rows, then up rows; torch.float4_e2m1fn_x2 accepted),
    ``w13_weight_scale`` float8_e4m3fn ``[E, 2*I, H/16]`` (``scale_layout="linear"``, the checkpoint's) or
    ``[E, round_up(2*I, 128), round_up(H/16, 4)]`` (``"swizzled"``: taken from an engine after its
    ``swizzle_blockscale``), ``w13_weight_scale_2 [E, 2]`` (gate, up) or ``[E]`` float32, ``w2_weight [E, H,
    I/2]``, ``w2_weight_scale [E, H, I/16]`` (or swizzled), ``w2_weight_scale_2 [E]``. Returns ``w13``,
    ``w2``, ``w13_scale``, ``w2_scale`` (linear float8_e4m3fn), ``w13_global_scale``, ``w2_global_scale``
    ``[E]`` float32 (the rank's TP slice). Exact unless an expert's gate and up global scales differ: then they
    are reconciled (module doc) and a :class:`Fp4LayoutWarning` is issued. Raises ValueError on shapes, dtypes
    or a ``scale_layout`` it does not know."""
    if scale_layout not in ("linear", "swizzled"):
        raise ValueError(f"scale_layout must be 'linear' (the checkpoint's) or 'swizzled' (an engine's 128x4 layout), "
                         f"got {scale_layout!r}")
    w13 = _packed("w13_weight", w13_weight)
    w2 = _packed("w2_weight", w2_weight)
    if w13.dim() != 3 or w13.shape[1] % 2:
        raise ValueError(f"w13_weight must be uint8 [E, 2*I, H/2] (gate rows, then up rows), got {w13.dtype} {_shape(w13)}")
    e, rows, hh = w13.shape
    inter, hidden = rows // 2, 2 * hh
    _want("w2_weight", w2, (e, hidden, inter // 2), "uint8 [E, H, I/2]")
    if hidden % NV_GROUP or inter % NV_GROUP:
        raise ValueError(f"hidden size {hidden} and intermediate size {inter} must be multiples of {NV_GROUP} (NVFP4 groups)")
    s13 = _nv_scales("w13_weight_scale", w13_weight_scale, e, rows, hidden, scale_layout)
    s2 = _nv_scales("w2_weight_scale", w2_weight_scale, e, hidden, inter, scale_layout)
    g13 = _global("w13_weight_scale_2", w13_weight_scale_2, e, 2)
    g2 = _global("w2_weight_scale_2", w2_weight_scale_2, e, 1)
    shared = torch.maximum(g13[:, 0], g13[:, 1])
    if not torch.equal(g13[:, 0], g13[:, 1]):
        warnings.warn("NVFP4 gate and up global scales (w13_weight_scale_2) differ for some experts: reconciled to the larger "
                      "one per expert, the other half's block scales rescaled and rounded to e4m3 (as vLLM's "
                      "reconcile_nvfp4_moe_w13_scales); the weights change within e4m3 rounding", Fp4LayoutWarning, stacklevel=2)
        factor = (g13 / shared[:, None])  # [E, 2] <= 1
        s13 = (s13.float().reshape(e, 2, inter, -1) * factor[:, :, None, None]).reshape(e, rows, -1).to(torch.float8_e4m3fn)
    start, size = _tp_slice(inter, NV_GROUP, tp_rank, tp_size)
    return {"w13": _gates_then_ups(w13, start, size), "w13_scale": _gates_then_ups(s13, start, size),
            "w2": w2[:, :, start // 2:(start + size) // 2].contiguous(),
            "w2_scale": s2[:, :, start // NV_GROUP:(start + size) // NV_GROUP].contiguous(),
            "w13_global_scale": shared.contiguous(), "w2_global_scale": g2.contiguous()}


def stack_modelopt_experts(tensors: Mapping[str, torch.Tensor], prefix: str, num_experts: int,
                           experts: range | None = None) -> dict[str, torch.Tensor]:
    """Per-expert ModelOpt NVFP4 checkpoint tensors -> the stacked arguments of :func:`from_modelopt_nvfp4`.

    ``tensors``: a mapping of checkpoint names (a safetensors file's, merged) with, for each expert ``e``,
    ``{prefix}.{e}.{gate_proj,up_proj,down_proj}.{weight,weight_scale,weight_scale_2}`` (``prefix`` e.g.
    ``model.layers.3.mlp.experts``; Qwen3-MoE's and DeepSeek-V3's names); ``experts``: the ids to stack (default
    all ``num_experts``; an EP rank's range). Returns ``w13_weight`` (gate rows then up rows),
    ``w13_weight_scale``, ``w13_weight_scale_2 [E, 2]``, ``w2_weight``, ``w2_weight_scale``, ``w2_weight_scale_2
    [E]``. Raises ValueError naming a missing key."""
    ids = range(num_experts) if experts is None else experts

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise ValueError(f"checkpoint tensor {key!r} not found (ModelOpt NVFP4 names: {prefix}.<e>.gate_proj.weight, "
                             f".weight_scale, .weight_scale_2; up_proj; down_proj)")
        return tensors[key]

    out: dict[str, list[torch.Tensor]] = {k: [] for k in ("w13_weight", "w13_weight_scale", "w13_weight_scale_2",
                                                         "w2_weight", "w2_weight_scale", "w2_weight_scale_2")}
    for e in ids:
        p = f"{prefix}.{e}"
        out["w13_weight"].append(torch.cat([get(f"{p}.gate_proj.weight"), get(f"{p}.up_proj.weight")], dim=0))
        out["w13_weight_scale"].append(torch.cat([get(f"{p}.gate_proj.weight_scale"), get(f"{p}.up_proj.weight_scale")], dim=0))
        out["w13_weight_scale_2"].append(torch.stack([get(f"{p}.gate_proj.weight_scale_2").float().reshape(()),
                                                      get(f"{p}.up_proj.weight_scale_2").float().reshape(())]))
        out["w2_weight"].append(get(f"{p}.down_proj.weight"))
        out["w2_weight_scale"].append(get(f"{p}.down_proj.weight_scale"))
        out["w2_weight_scale_2"].append(get(f"{p}.down_proj.weight_scale_2").float().reshape(()))
    return {k: torch.stack(v) for k, v in out.items()}

"""Tensor helpers shared by runners, tests and benchmarks (torch): gated activations and the FP8
weight formats' quantize/dequantize. Kernels come from PyTorch; this file only composes them.

FP8 conventions (as in SGLang/vLLM checkpoints): e4m3 (``torch.float8_e4m3fn``, max 448); a scale
multiplies (``w = q * scale``, DeepSeek's ``weight_scale_inv``). Scale shapes for expert weights
``w [E, N, K]``: ``fp8_tensor`` -> ``[E]``; ``fp8_channel`` -> ``[E, N]`` (one per output row);
``fp8_block`` -> ``[E, ceil(N/bn), ceil(K/bk)]`` (the checkpoint's block ``[bn, bk]``, 128 x 128 by default).

MXFP4 (OCP Microscaling v1.0; gpt-oss checkpoints): e2m1 values packed two per byte, element ``2j`` in
the low nibble and ``2j+1`` in the high nibble, ``q [E, N, K/2]`` uint8; one e8m0 scale per 32
elements along K, ``scale [E, N, K/32]`` uint8, value ``2^(scale - 127)``. K must be a multiple of 32.

NVFP4 (NVIDIA ModelOpt checkpoints): the same packed e2m1 ``q [E, N, K/2]`` uint8, one e4m3 scale per 16
elements ``scale [E, N, K/16]`` (``float8_e4m3fn``) and one float32 ``global_scale [E]`` per expert:
``w = e2m1 * scale * global_scale`` (ModelOpt's ``weight_scale`` and ``weight_scale_2``). K must be a
multiple of 16.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

FP8_MAX = 448.0
FP8_DTYPE = torch.float8_e4m3fn
BLOCK = 128
#: gpt-oss clamped SwiGLU constants (openai/gpt-oss reference model: alpha 1.702, limit 7.0)
SWIGLU_OAI_ALPHA = 1.702
SWIGLU_OAI_LIMIT = 7.0


def gated_act(h: torch.Tensor, activation: str, limit: float | None = None, *, situ_beta: float | None = None,
              situ_linear_beta: float | None = None, swiglu_alpha: float = SWIGLU_OAI_ALPHA,
              swiglu_beta: float = 1.0) -> torch.Tensor:
    """Apply the MoE activation to ``h = x @ w13.T``.

    Gated (silu, gelu, swiglu_oai): ``h [..., 2*I]`` holds the gate half then the up half (canonical
    order); returns ``[..., I]``. relu2 is not gated: ``h [..., I]`` -> ``relu(h)**2``.
    gelu is the exact (erf) GELU. swiglu_oai: gate clamped above at ``limit``, up clamped to
    [-limit, limit], ``(up + 1) * gate * sigmoid(1.702 * gate)``. silu_clamped (DeepSeek-V4): gate clamped
    above at ``limit``, up clamped to [-limit, limit], ``silu(gate) * up``; ``limit`` is required (ValueError).
    situ (Kimi K3's SiTU): ``b*tanh(gate/b) * sigmoid(gate) * lb*tanh(up/lb)`` with ``b = situ_beta`` (required,
    positive: ValueError) and ``lb = situ_linear_beta`` (positive; None leaves up uncapped), as the model's
    ``SituAndMul`` and TensorRT-LLM's ``SiTuActivation`` compute it (config.json ``activation_situ_beta``,
    ``activation_situ_linear_beta``).
    swiglu_oai_split (MiniMax-M3's clamped SwiGLU-OAI on split halves, vLLM's ``swigluoai_uninterleave``): gate
    clamped above at ``limit``, up clamped to [-limit, limit], ``gate * sigmoid(swiglu_alpha * gate) * (up +
    swiglu_beta)`` (vLLM's ``SiluAndMulWithClamp``; config.json ``swiglu_alpha`` 1.702, ``swiglu_beta`` 1.0 by
    default); ``limit`` is required (ValueError). In this canonical layout it is gpt-oss's formula; the name tells
    the checkpoints apart (gpt-oss interleaves gate and up rows, MiniMax-M3 stores all gates then all ups).
    """
    if activation == "relu2":
        return torch.relu(h).square()
    gate, up = h.chunk(2, dim=-1)
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    if activation == "gelu":
        return torch.nn.functional.gelu(gate) * up
    if activation == "silu_clamped":
        if limit is None:
            raise ValueError("silu_clamped needs its swiglu_limit (the model's clamp); none was given")
        return torch.nn.functional.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)
    if activation == "situ":
        if situ_beta is None or not situ_beta > 0 or (situ_linear_beta is not None and not situ_linear_beta > 0):
            raise ValueError(f"situ needs a positive situ_beta and a positive or absent situ_linear_beta (the model's "
                             f"activation_situ_beta, activation_situ_linear_beta); got {situ_beta!r}, {situ_linear_beta!r}")
        a = situ_beta * torch.tanh(gate / situ_beta) * torch.sigmoid(gate)
        return a * (up if situ_linear_beta is None else situ_linear_beta * torch.tanh(up / situ_linear_beta))
    if activation == "swiglu_oai_split":
        if limit is None:
            raise ValueError("swiglu_oai_split needs its swiglu_limit (the model's clamp); none was given")
        gate = gate.clamp(max=limit)
        return gate * torch.sigmoid(swiglu_alpha * gate) * (up.clamp(min=-limit, max=limit) + swiglu_beta)
    if activation == "swiglu_oai":
        lim = SWIGLU_OAI_LIMIT if limit is None else limit
        gate = gate.clamp(max=lim)
        up = up.clamp(min=-lim, max=lim)
        return (up + 1) * gate * torch.sigmoid(SWIGLU_OAI_ALPHA * gate)
    raise ValueError(f"unknown activation {activation!r}")


def _amax_scale(amax: torch.Tensor) -> torch.Tensor:
    return (amax.float() / FP8_MAX).clamp(min=1e-12)


def quantize_fp8_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` float -> (``q [E, N, K]`` e4m3, ``scale [E]`` float32), one scale per expert."""
    scale = _amax_scale(w.abs().amax(dim=(1, 2)))
    q = (w.float() / scale[:, None, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def quantize_fp8_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` -> (``q`` e4m3, ``scale [E, N]`` float32), one scale per output row."""
    scale = _amax_scale(w.abs().amax(dim=2))
    q = (w.float() / scale[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def _block_view(n: int, k: int, block: tuple[int, int]) -> tuple[int, int]:
    return -(-n // block[0]), -(-k // block[1])


def _block_pair(block: "int | tuple[int, int] | Sequence[int] | None") -> tuple[int, int]:
    """``(bn, bk)`` of an fp8_block block given as one size, a pair, or None (128 x 128)."""
    if block is None:
        return BLOCK, BLOCK
    if isinstance(block, int):
        return block, block
    bn, bk = (int(v) for v in block)
    return bn, bk


def _check_block_scale(q_shape: Sequence[int], scale_shape: Sequence[int],
                       block: "int | tuple[int, int] | Sequence[int] | None") -> tuple[int, int]:
    """``(bn, bk)``; ValueError naming the expected fp8_block scale shape when ``scale_shape`` is not
    ``[E, ceil(N/bn), ceil(K/bk)]`` for weights ``q_shape [E, N, K]``."""
    e, n, k = q_shape
    bn, bk = _block_pair(block)
    nb, kb = _block_view(n, k, (bn, bk))
    if tuple(scale_shape) != (e, nb, kb):
        raise ValueError(f"fp8_block scale must be [E, ceil(N/{bn}), ceil(K/{bk})] = [{e}, {nb}, {kb}] (block [{bn}, {bk}]), "
                         f"got {list(scale_shape)}")
    return bn, bk


def quantize_fp8_block(w: torch.Tensor, block: "int | tuple[int, int] | Sequence[int] | None" = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` -> (``q`` e4m3, ``scale [E, ceil(N/bn), ceil(K/bk)]`` float32); ``block``: ``(bn, bk)`` or one
    size for both (default 128 x 128)."""
    e, n, k = w.shape
    bn, bk = _block_pair(block)
    nb, kb = _block_view(n, k, (bn, bk))
    pad = torch.zeros(e, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    pad[:, :n, :k] = w.float()
    blocks = pad.view(e, nb, bn, kb, bk)
    scale = _amax_scale(blocks.abs().amax(dim=(2, 4)))
    q = (blocks / scale[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view(e, nb * bn, kb * bk)[:, :n, :k]
    return q.to(FP8_DTYPE).contiguous(), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor | None, quant: str, dtype: torch.dtype = torch.float32,
               global_scale: torch.Tensor | None = None, block: "tuple[int, int] | Sequence[int] | None" = None) -> torch.Tensor:
    """Expert weights ``q [E, N, K]`` (FP4: ``[E, N, K/2]`` packed) of format ``quant`` back to ``dtype``,
    one expert at a time (the temporaries stay one expert large; scale shapes: module doc; ``block``: fp8_block's
    ``(bn, bk)``, default 128 x 128). Raises ValueError naming the expected scale shape when ``scale`` does not fit
    ``quant``."""
    if quant in ("bf16", "fp16") or q.shape[0] <= 1:
        return _dequantize(q, scale, quant, dtype, global_scale, block)
    if quant == "fp8_block" and scale is not None:  # checked whole: the message names the layer's E, not one expert's
        _check_block_scale(q.shape, scale.shape, block)
    if scale is not None and scale.shape[:1] != q.shape[:1]:
        raise ValueError(f"{quant} scale must have one entry per expert ({q.shape[0]} experts), got shape {list(scale.shape)}")
    if global_scale is not None and global_scale.shape[:1] != q.shape[:1]:
        raise ValueError(f"{quant} global_scale must be [E] = [{q.shape[0]}], got shape {list(global_scale.shape)}")
    first = _dequantize(q[:1], None if scale is None else scale[:1], quant, dtype,  # checks the shapes
                        None if global_scale is None else global_scale[:1], block)
    out = torch.empty((q.shape[0], *first.shape[1:]), dtype=dtype, device=q.device)
    out[0] = first[0]
    for i in range(1, q.shape[0]):
        out[i] = _dequantize(q[i:i + 1], None if scale is None else scale[i:i + 1], quant, dtype,
                             None if global_scale is None else global_scale[i:i + 1], block)[0]
    return out


def _dequantize(q: torch.Tensor, scale: torch.Tensor | None, quant: str, dtype: torch.dtype = torch.float32,
                global_scale: torch.Tensor | None = None, block: "tuple[int, int] | Sequence[int] | None" = None
                ) -> torch.Tensor:
    """One batch of experts; see :func:`dequantize`."""
    if quant in ("bf16", "fp16"):
        return q.to(dtype)
    if scale is None:
        raise ValueError(f"{quant} weights need a scale")
    if quant == "mxfp4":
        return dequantize_mxfp4(q, scale, dtype)
    if quant == "nvfp4":
        if global_scale is None:
            raise ValueError("nvfp4 weights need a global_scale [E] besides the block scale")
        return dequantize_nvfp4(q, scale, global_scale, dtype)
    e, n, k = q.shape
    if not scale.is_floating_point() or scale.dtype == FP8_DTYPE:
        raise ValueError(f"{quant} scales must be float32 (a scale multiplies), got {scale.dtype}")
    s = scale.float()
    if quant == "fp8_tensor":
        if s.shape != (e,):
            raise ValueError(f"fp8_tensor scale must be [E] = [{e}], got {list(s.shape)}")
        return (q.float() * s[:, None, None]).to(dtype)
    if quant == "fp8_channel":
        if s.dim() == 3 and s.shape[2] == 1:
            s = s[:, :, 0]
        if s.shape != (e, n):
            raise ValueError(f"fp8_channel scale must be [E, N] = [{e}, {n}], got {list(scale.shape)}")
        return (q.float() * s[:, :, None]).to(dtype)
    if quant == "fp8_block":
        bn, bk = _check_block_scale(q.shape, s.shape, block)
        full = s.repeat_interleave(bn, dim=1)[:, :n].repeat_interleave(bk, dim=2)[:, :, :k]
        return (q.float() * full).to(dtype)
    raise ValueError(f"dequantize does not handle {quant!r}")


#: e2m1 code -> value (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), OCP MX v1.0 table 5.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
MX_BLOCK = 32


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` float (K a multiple of 32) -> (``q [E, N, K/2]`` uint8 packed e2m1, ``scale
    [E, N, K/32]`` uint8 e8m0). Block scale ``2^ceil(log2(amax / 6))`` (no element clips), values rounded
    to the nearest e2m1 (ties to the smaller magnitude). Raises ValueError when K is not a multiple of 32."""
    e, n, k = w.shape
    if k % MX_BLOCK:
        raise ValueError(f"mxfp4 needs K a multiple of {MX_BLOCK}, got {k}")
    blocks = w.float().reshape(e, n, k // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1).clamp(min=2.0 ** -126)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = blocks / torch.exp2(exp)[..., None]
    return _pack(_e2m1_codes(scaled).reshape(e, n, k)), (exp + 127).to(torch.uint8)


def dequantize_mxfp4(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Packed ``q [E, N, K/2]`` uint8 and ``scale [E, N, K/32]`` uint8 -> ``[E, N, K]`` in ``dtype``.
    Raises ValueError naming the expected shapes and dtypes."""
    if q.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise ValueError(f"mxfp4 weights and scales are uint8 (packed e2m1, e8m0), got {q.dtype} and {scale.dtype}")
    e, n, half = q.shape
    k = 2 * half
    if k % MX_BLOCK or tuple(scale.shape) != (e, n, k // MX_BLOCK):
        raise ValueError(f"mxfp4 scale must be [E, N, K/32] = [{e}, {n}, {k // MX_BLOCK}] for packed weights "
                         f"[{e}, {n}, {half}], got {list(scale.shape)}")
    factor = torch.exp2(scale.float() - 127.0).repeat_interleave(MX_BLOCK, dim=-1)
    return (_unpack(q) * factor).to(dtype)


NV_BLOCK = 16


def _e2m1_codes(scaled: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code of each value (a tie goes to the smaller magnitude), sign in bit 3."""
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=scaled.device)
    code = torch.bucketize(scaled.abs(), mids).to(torch.uint8)
    return code | ((scaled < 0).to(torch.uint8) << 3)


def _pack(code: torch.Tensor) -> torch.Tensor:
    return (code[..., 0::2] | (code[..., 1::2] << 4)).contiguous()


def _unpack(q: torch.Tensor) -> torch.Tensor:
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=q.device)
    e, n, half = q.shape
    return torch.stack([lut[(q & 0xF).long()], lut[(q >> 4).long()]], dim=-1).reshape(e, n, 2 * half)


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` float (K a multiple of 16) -> (``q [E, N, K/2]`` uint8 packed e2m1, ``scale
    [E, N, K/16]`` float8_e4m3fn, ``global_scale [E]`` float32), as ModelOpt computes them: global =
    amax / (448 * 6) per expert, block scale = block amax / (6 * global) rounded to e4m3, values to the
    nearest e2m1. Raises ValueError when K is not a multiple of 16."""
    e, n, k = w.shape
    if k % NV_BLOCK:
        raise ValueError(f"nvfp4 needs K a multiple of {NV_BLOCK}, got {k}")
    wf = w.float()
    glob = (wf.abs().amax(dim=(1, 2)) / (FP8_MAX * 6.0)).clamp(min=1e-12)
    blocks = wf.reshape(e, n, k // NV_BLOCK, NV_BLOCK)
    scale = (blocks.abs().amax(dim=-1) / (6.0 * glob[:, None, None])).clamp(max=FP8_MAX).to(FP8_DTYPE)
    denom = (scale.float() * glob[:, None, None]).clamp(min=1e-30)[..., None]
    code = _e2m1_codes((blocks / denom).clamp(-6.0, 6.0)).reshape(e, n, k)
    return _pack(code), scale, glob


def dequantize_nvfp4(q: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Packed ``q [E, N, K/2]`` uint8, ``scale [E, N, K/16]`` e4m3 and ``global_scale [E]`` -> ``[E, N, K]``.
    Raises ValueError naming the expected shapes and dtypes."""
    e, n, half = q.shape
    k = 2 * half
    if q.dtype != torch.uint8 or scale.dtype != FP8_DTYPE:
        raise ValueError(f"nvfp4 weights are uint8 (packed e2m1) with float8_e4m3fn scales, got {q.dtype} and {scale.dtype}")
    if k % NV_BLOCK or tuple(scale.shape) != (e, n, k // NV_BLOCK):
        raise ValueError(f"nvfp4 scale must be [E, N, K/16] = [{e}, {n}, {k // NV_BLOCK}] for packed weights "
                         f"[{e}, {n}, {half}], got {list(scale.shape)}")
    if tuple(global_scale.shape) != (e,) or global_scale.dtype != torch.float32:
        raise ValueError(f"nvfp4 global_scale must be float32 [E] = [{e}], got {global_scale.dtype} {list(global_scale.shape)}")
    if not bool(torch.isfinite(global_scale).all()):  # at load time: a sync here is fine
        raise ValueError("nvfp4 global_scale has non-finite values")
    factor = scale.float().repeat_interleave(NV_BLOCK, dim=-1) * global_scale.float()[:, None, None]
    return (_unpack(q) * factor).to(dtype)


def quantize(w: torch.Tensor, quant: str, block: "tuple[int, int] | Sequence[int] | None" = None
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quantize float ``w [E, N, K]`` to ``quant`` (bf16/fp16: a cast, scale None; ``block``: fp8_block's ``(bn, bk)``,
    default 128 x 128). nvfp4 has two scales: use :func:`quantize_nvfp4`."""
    if quant == "bf16":
        return w.to(torch.bfloat16), None
    if quant == "fp16":
        return w.to(torch.float16), None
    if quant == "fp8_block":
        return quantize_fp8_block(w, block)
    fn = {"fp8_tensor": quantize_fp8_tensor, "fp8_channel": quantize_fp8_channel, "mxfp4": quantize_mxfp4}.get(quant)
    if fn is None:
        hint = " (it has two scales: use quantize_nvfp4)" if quant == "nvfp4" else ""
        raise ValueError(f"quantize does not handle {quant!r}{hint}")
    return fn(w)


def quantize_named(w: torch.Tensor, quant: str, block: "tuple[int, int] | Sequence[int] | None" = None
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Quantize ``w [E, N, K]`` to ``quant`` for any format here: (stored weights, named scales), the
    names being the suffixes of ``prepare_weights``' keywords: ``scale`` (FP8, FP4 formats) and
    ``global_scale`` (nvfp4). bf16/fp16: no scales. ``block``: fp8_block's ``(bn, bk)`` (default 128 x 128)."""
    if quant == "nvfp4":
        q, scale, glob = quantize_nvfp4(w)
        return q, {"scale": scale, "global_scale": glob}
    q, maybe = quantize(w, quant, block)
    return q, ({} if maybe is None else {"scale": maybe})


def dequantize_named(q: torch.Tensor, scales: dict[str, torch.Tensor], quant: str,
                     dtype: torch.dtype = torch.float32, block: "tuple[int, int] | Sequence[int] | None" = None
                     ) -> torch.Tensor:
    """Inverse of :func:`quantize_named`."""
    return dequantize(q, scales.get("scale"), quant, dtype, global_scale=scales.get("global_scale"), block=block)


def expert_biases(spec: Any, device: torch.device, w13_bias: Any, w2_bias: Any
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Check a runner's expert biases (gpt-oss's ``gate_up_proj_bias``/``down_proj_bias``) against the rank's
    layer ``spec`` (:class:`~moe_select.layer.LayerSpec`): ``w13_bias [E_local, N13]`` (gate entries then up
    entries) and ``w2_bias [E_local, H]``, any float dtype, on ``device``'s type; returns them float32 and
    contiguous on ``device`` (None where not given). Raises :class:`~moe_select.errors.RunnerInputError`
    naming the tensor, the expected shape and what it got."""
    from .errors import RunnerInputError

    e = spec.num_local_experts
    out: list[torch.Tensor | None] = []
    for name, b, shape, dims in (("w13_bias", w13_bias, (e, spec.w13_rows), "N13"),
                                 ("w2_bias", w2_bias, (e, spec.hidden_size), "H")):
        if b is None:
            out.append(None)
            continue
        if not isinstance(b, torch.Tensor) or not b.is_floating_point() or tuple(b.shape) != shape:
            got = f"{b.dtype} {list(b.shape)}" if isinstance(b, torch.Tensor) else type(b).__name__
            raise RunnerInputError(f"{name} must be a float tensor of shape {list(shape)} ([E_local, {dims}]), got {got}")
        if b.device.type != device.type:
            raise RunnerInputError(f"{name} is on {b.device}; this core runs on {device}")
        out.append(b.to(device, torch.float32).contiguous())
    return out[0], out[1]

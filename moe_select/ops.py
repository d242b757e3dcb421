"""Tensor helpers shared by runners, tests and benchmarks (torch): gated activations and the FP8
weight formats' quantize/dequantize. Kernels come from PyTorch; this file only composes them.

FP8 conventions (as in SGLang/vLLM checkpoints): e4m3 (``torch.float8_e4m3fn``, max 448); a scale
multiplies (``w = q * scale``, DeepSeek's ``weight_scale_inv``). Scale shapes for expert weights
``w [E, N, K]``: ``fp8_tensor`` -> ``[E]``; ``fp8_channel`` -> ``[E, N]`` (one per output row);
``fp8_block`` -> ``[E, ceil(N/128), ceil(K/128)]``.
"""
from __future__ import annotations

import torch

FP8_MAX = 448.0
FP8_DTYPE = torch.float8_e4m3fn
BLOCK = 128
#: gpt-oss clamped SwiGLU constants (openai/gpt-oss reference model: alpha 1.702, limit 7.0)
SWIGLU_OAI_ALPHA = 1.702
SWIGLU_OAI_LIMIT = 7.0


def gated_act(h: torch.Tensor, activation: str, limit: float | None = None) -> torch.Tensor:
    """Apply the MoE activation to ``h = x @ w13.T``.

    Gated (silu, gelu, swiglu_oai): ``h [..., 2*I]`` holds the gate half then the up half (canonical
    order); returns ``[..., I]``. relu2 is not gated: ``h [..., I]`` -> ``relu(h)**2``.
    gelu is the exact (erf) GELU. swiglu_oai: gate clamped above at ``limit``, up clamped to
    [-limit, limit], ``(up + 1) * gate * sigmoid(1.702 * gate)``.
    """
    if activation == "relu2":
        return torch.relu(h).square()
    gate, up = h.chunk(2, dim=-1)
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    if activation == "gelu":
        return torch.nn.functional.gelu(gate) * up
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


def _block_view(n: int, k: int, block: int) -> tuple[int, int]:
    return -(-n // block), -(-k // block)


def quantize_fp8_block(w: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, N, K]`` -> (``q`` e4m3, ``scale [E, ceil(N/128), ceil(K/128)]`` float32)."""
    e, n, k = w.shape
    nb, kb = _block_view(n, k, block)
    pad = torch.zeros(e, nb * block, kb * block, dtype=torch.float32, device=w.device)
    pad[:, :n, :k] = w.float()
    blocks = pad.view(e, nb, block, kb, block)
    scale = _amax_scale(blocks.abs().amax(dim=(2, 4)))
    q = (blocks / scale[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view(e, nb * block, kb * block)[:, :n, :k]
    return q.to(FP8_DTYPE).contiguous(), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor | None, quant: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Expert weights ``q [E, N, K]`` of format ``quant`` back to ``dtype`` (scale shapes: module doc).

    Raises ValueError naming the expected scale shape when ``scale`` does not fit ``quant``."""
    if quant in ("bf16", "fp16"):
        return q.to(dtype)
    if scale is None:
        raise ValueError(f"{quant} weights need a scale")
    e, n, k = q.shape
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
        nb, kb = _block_view(n, k, BLOCK)
        if s.shape != (e, nb, kb):
            raise ValueError(f"fp8_block scale must be [E, ceil(N/128), ceil(K/128)] = [{e}, {nb}, {kb}], got {list(s.shape)}")
        full = s.repeat_interleave(BLOCK, dim=1)[:, :n].repeat_interleave(BLOCK, dim=2)[:, :, :k]
        return (q.float() * full).to(dtype)
    raise ValueError(f"dequantize does not handle {quant!r}")


def quantize(w: torch.Tensor, quant: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quantize float ``w [E, N, K]`` to ``quant`` (bf16/fp16: a cast, scale None)."""
    if quant == "bf16":
        return w.to(torch.bfloat16), None
    if quant == "fp16":
        return w.to(torch.float16), None
    fn = {"fp8_tensor": quantize_fp8_tensor, "fp8_channel": quantize_fp8_channel, "fp8_block": quantize_fp8_block}.get(quant)
    if fn is None:
        raise ValueError(f"quantize does not handle {quant!r}")
    return fn(w)

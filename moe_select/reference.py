"""The float64 reference MoE layer that every runner is checked against (tests, ``run``, ``verify``).

Written for clarity, not speed: token by token, expert by expert, in float64, from the canonical
layout, with its own activation formulas (independent of :mod:`moe_select.ops`, so a bug there cannot
hide in both). ``out[t] = sum_k topk_weights[t, k] * w2[e] @ act(w13[e] @ x[t])`` with ``e =
topk_ids[t, k]``; gate rows are w13[:I], up rows w13[I:]. With expert biases (gpt-oss, the model behind
``swiglu_oai``: transformers' ``GptOssExperts`` has ``gate_up_proj_bias`` and ``down_proj_bias``) each
expert computes ``w2[e] @ act(w13[e] @ x + b13[e]) + b2[e]`` and the routing weight scales all of it.
"""
from __future__ import annotations

import math

import torch

from .formats import tolerance


def _act64(h: torch.Tensor, activation: str, limit: float | None, situ_beta: float | None = None,
           situ_linear_beta: float | None = None, swiglu_alpha: float = 1.702, swiglu_beta: float = 1.0) -> torch.Tensor:
    if activation == "relu2":
        r = torch.clamp(h, min=0)
        return r * r
    i = h.shape[-1] // 2
    gate, up = h[..., :i], h[..., i:]
    if activation == "silu":
        return gate / (1 + torch.exp(-gate)) * up
    if activation == "gelu":
        return 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2))) * up
    if activation == "silu_clamped":
        if limit is None:
            raise ValueError("silu_clamped needs its swiglu_limit")
        g = torch.clamp(gate, max=limit)
        return g / (1 + torch.exp(-g)) * torch.clamp(up, min=-limit, max=limit)
    if activation == "situ":
        # Kimi K3's SiTU: b*tanh(g/b) * sigmoid(g) * lb*tanh(u/lb); tanh(x) = 1 - 2/(exp(2x) + 1).
        if situ_beta is None:
            raise ValueError("situ needs its activation_situ_beta")
        def cap(x: torch.Tensor, c: float) -> torch.Tensor:
            return c * (1 - 2 / (torch.exp(2 * x / c) + 1))
        u = up if situ_linear_beta is None else cap(up, situ_linear_beta)
        return cap(gate, situ_beta) / (1 + torch.exp(-gate)) * u
    if activation == "swiglu_oai_split":
        # MiniMax-M3 (vLLM's swigluoai_uninterleave, SiluAndMulWithClamp): g*sigmoid(alpha*g)*(u+beta), both clamped.
        if limit is None:
            raise ValueError("swiglu_oai_split needs its swiglu_limit")
        g = torch.clamp(gate, max=limit)
        return g / (1 + torch.exp(-swiglu_alpha * g)) * (torch.clamp(up, min=-limit, max=limit) + swiglu_beta)
    if activation == "swiglu_oai":
        lim = 7.0 if limit is None else limit
        g = torch.clamp(gate, max=lim)
        u = torch.clamp(up, min=-lim, max=lim)
        return (u + 1) * g / (1 + torch.exp(-1.702 * g))
    raise ValueError(activation)


def reference_moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w13: "torch.Tensor | QuantizedExperts",
                  w2: "torch.Tensor | QuantizedExperts", activation: str = "silu", *, expert_offset: int = 0,
                  swiglu_limit: float | None = None, weight_on_input: bool = False, device: "str | torch.device" = "cpu",
                  w13_bias: torch.Tensor | None = None, w2_bias: torch.Tensor | None = None) -> torch.Tensor:
    """float64 MoE forward.

    ``x [T, H]``; ``topk_ids [T, K]`` (global ids; those outside ``[expert_offset, expert_offset + E)``
    or -1 are skipped); ``topk_weights [T, K]``; ``w13 [E, 2*I, H]`` (``[E, I, H]`` for relu2) and
    ``w2 [E, H, I]`` already dequantized (any float dtype), or :class:`QuantizedExperts` (dequantized
    here, one expert at a time). ``weight_on_input``: the routing weight multiplies the expert's input
    (llama4 routing: ``out[t] = sum_k w2[e] @ act(w13[e] @ (weight * x[t]))``). ``device``: where the
    float64 arithmetic runs (the same code on any device; a GPU's IEEE float64 checks a DeepSeek-V3 layer
    in seconds where the host takes a minute). ``w13_bias [E, 2*I]`` and ``w2_bias [E, H]`` (any float
    dtype, or None): expert biases, added to the first GEMM's output before the activation and to the
    expert's output before the routing weight (module doc). Returns ``[T, H]`` float64 on the CPU.
    """
    x64 = x.detach().to(device, torch.float64)
    ids = topk_ids.detach().to("cpu", torch.int64)
    wts = topk_weights.detach().to("cpu", torch.float64)
    e_local = w13.shape[0]
    out = torch.zeros_like(x64)
    # Expert by expert (one expert's weights in float64 at a time), then token by token.
    for e in sorted({int(v) - expert_offset for v in ids.flatten().tolist()}):
        if not 0 <= e < e_local:
            continue
        a = w13[e].detach().to(device, torch.float64)
        b = w2[e].detach().to(device, torch.float64)
        ba = 0.0 if w13_bias is None else w13_bias[e].detach().to(device, torch.float64)
        bb = 0.0 if w2_bias is None else w2_bias[e].detach().to(device, torch.float64)
        for t, k in (ids == e + expert_offset).nonzero().tolist():
            w = float(wts[t, k])
            if weight_on_input:  # llama4: out = expert(weight * x)
                out[t] += b @ _act64(a @ (w * x64[t]) + ba, activation, swiglu_limit) + bb
            else:
                out[t] += w * (b @ _act64(a @ x64[t] + ba, activation, swiglu_limit) + bb)
    return out.cpu()


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |out - ref| / max(max |ref|, tiny)``: the error measure quoted by tests and ``run``."""
    diff = (out.detach().to("cpu", torch.float64) - ref).abs().max().item()
    return diff / max(ref.abs().max().item(), 1e-30)


#: Tolerances on :func:`rel_error` against the float64 reference for a computation whose activations and
#: output are in one dtype (torch's names), read from :func:`moe_select.formats.tolerance`, the one table.
TOLERANCE = {"float64": 1e-12, "float32": tolerance("float32", "float32"), "bfloat16": tolerance("bf16", "bf16"),
             "float16": tolerance("fp16", "fp16")}


def _e2m1_value(code: torch.Tensor) -> torch.Tensor:
    """float64 value of 4-bit e2m1 codes (OCP MX v1.0, section 5.3.3: 1 sign, 2 exponent (bias 1), 1 mantissa
    bit; exponent 0 is subnormal: 0.5 x mantissa), computed from the bit fields rather than a table."""
    c = code.to(torch.int64)
    sign = torch.where((c >> 3) & 1 == 1, -1.0, 1.0).to(torch.float64)
    exp, man = (c >> 1) & 3, (c & 1).to(torch.float64)
    normal = torch.pow(2.0, (exp - 1).to(torch.float64)) * (1.0 + man / 2.0)
    return sign * torch.where(exp == 0, man * 0.5, normal)


def reference_dequantize(q: torch.Tensor, scales: dict, quant: str, block: tuple[int, int] = (128, 128),
                         device: "str | torch.device" = "cpu") -> torch.Tensor:
    """Expert weights ``q [E, N, K]`` (packed FP4: ``[E, N, K/2]`` uint8) of format ``quant`` as float64,
    written apart from :mod:`moe_select.ops` so that a bug there cannot hide in both.

    ``scales``: ``{"scale": ...}`` (FP8 formats: float, ``[E]`` tensor / ``[E, N]`` channel / ``[E, ceil(N/bn),
    ceil(K/bk)]`` block; mxfp4: e8m0 uint8 ``[E, N, K/32]``; nvfp4: e4m3 ``[E, N, K/16]``) and, for nvfp4,
    ``"global_scale"`` ``[E]``. A scale multiplies (``w = q * scale``). Element ``2j`` of a packed byte is
    its low nibble. Block scales are applied one row block at a time, each column taking the scale of
    block ``column // bk`` (an explicit index, not a reshape). ``device``: where the result is built
    (float64 there); the scales' arithmetic is the same on every device."""
    if quant in ("bf16", "fp16"):
        return q.detach().to(device, torch.float64)
    s = scales["scale"].detach().to(device)
    if quant in ("fp8_tensor", "fp8_channel", "fp8_block"):
        w = q.detach().to(device, torch.float64)
        e, n, k = w.shape
        out = torch.empty_like(w)
        for x in range(e):
            if quant == "fp8_tensor":
                out[x] = w[x] * s.reshape(e)[x].to(torch.float64)
            elif quant == "fp8_channel":
                out[x] = w[x] * s.reshape(e, n)[x].to(torch.float64)[:, None]
            else:
                bn, bk = block
                column_block = torch.arange(k, device=w.device) // bk
                for i in range(0, n, bn):
                    out[x, i:i + bn] = w[x, i:i + bn] * s[x, i // bn].to(torch.float64)[column_block][None, :]
        return out
    if quant in ("mxfp4", "nvfp4"):
        packed = q.detach().to(device).to(torch.int64)
        e, n, half = packed.shape
        values = torch.empty(e, n, 2 * half, dtype=torch.float64, device=packed.device)
        values[..., 0::2] = _e2m1_value(packed & 0xF)
        values[..., 1::2] = _e2m1_value(packed >> 4)
        group = 32 if quant == "mxfp4" else 16
        if quant == "mxfp4":  # e8m0: 2^(code - 127)
            factor = torch.pow(2.0, s.to(torch.int64).to(torch.float64) - 127.0)
        else:
            factor = s.to(torch.float64) * scales["global_scale"].detach().to(device, torch.float64)[:, None, None]
        return values * factor.repeat_interleave(group, dim=-1)
    raise ValueError(f"reference_dequantize does not handle {quant!r}")


class QuantizedExperts:
    """Stored expert weights ``q [E, N, K(/2)]`` with their ``scales`` (as :func:`reference_dequantize`
    takes them, each with a leading E dimension), dequantized to float64 one expert at a time when
    indexed: ``experts[e] -> [N, K]``. :func:`reference_moe` accepts it in place of a float tensor, so a
    large layer is never held in float64 whole."""

    def __init__(self, q: torch.Tensor, scales: dict, quant: str, block: tuple[int, int] | None = None):
        self.q, self.scales, self.quant = q, {k: v for k, v in scales.items() if v is not None}, quant
        self.block: tuple[int, int] = (int(block[0]), int(block[1])) if block else (128, 128)  # fp8_block's (bn, bk)
        self.shape = (q.shape[0],)

    def __getitem__(self, e: int) -> torch.Tensor:
        return reference_dequantize(self.q[e:e + 1], {k: v[e:e + 1] for k, v in self.scales.items()}, self.quant,
                                    self.block)[0]

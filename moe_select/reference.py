"""The float64 reference MoE layer that every runner is checked against (tests, ``run``, ``verify``).

Written for clarity, not speed: token by token, expert by expert, in float64, from the canonical
layout, with its own activation formulas (independent of :mod:`moe_select.ops`, so a bug there cannot
hide in both). ``out[t] = sum_k topk_weights[t, k] * w2[e] @ act(w13[e] @ x[t])`` with ``e =
topk_ids[t, k]``; gate rows are w13[:I], up rows w13[I:].
"""
from __future__ import annotations

import math

import torch


def _act64(h: torch.Tensor, activation: str, limit: float | None) -> torch.Tensor:
    if activation == "relu2":
        r = torch.clamp(h, min=0)
        return r * r
    i = h.shape[-1] // 2
    gate, up = h[..., :i], h[..., i:]
    if activation == "silu":
        return gate / (1 + torch.exp(-gate)) * up
    if activation == "gelu":
        return 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2))) * up
    if activation == "swiglu_oai":
        lim = 7.0 if limit is None else limit
        g = torch.clamp(gate, max=lim)
        u = torch.clamp(up, min=-lim, max=lim)
        return (u + 1) * g / (1 + torch.exp(-1.702 * g))
    raise ValueError(activation)


def reference_moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w13: torch.Tensor,
                  w2: torch.Tensor, activation: str = "silu", *, expert_offset: int = 0,
                  swiglu_limit: float | None = None) -> torch.Tensor:
    """float64 MoE forward.

    ``x [T, H]``; ``topk_ids [T, K]`` (global ids; those outside ``[expert_offset, expert_offset + E)``
    or -1 are skipped); ``topk_weights [T, K]``; ``w13 [E, 2*I, H]`` (``[E, I, H]`` for relu2) and
    ``w2 [E, H, I]`` already dequantized (any float dtype). Returns ``[T, H]`` float64 on the CPU.
    """
    x64 = x.detach().to("cpu", torch.float64)
    ids = topk_ids.detach().to("cpu", torch.int64)
    wts = topk_weights.detach().to("cpu", torch.float64)
    e_local = w13.shape[0]
    out = torch.zeros_like(x64)
    # Expert by expert (one expert's weights in float64 at a time), then token by token.
    for e in sorted({int(v) - expert_offset for v in ids.flatten().tolist()}):
        if not 0 <= e < e_local:
            continue
        a = w13[e].detach().to("cpu", torch.float64)
        b = w2[e].detach().to("cpu", torch.float64)
        for t, k in (ids == e + expert_offset).nonzero().tolist():
            out[t] += wts[t, k] * (b @ _act64(a @ x64[t], activation, swiglu_limit))
    return out


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |out - ref| / max(max |ref|, tiny)``: the error measure quoted by tests and ``run``."""
    diff = (out.detach().to("cpu", torch.float64) - ref).abs().max().item()
    return diff / max(ref.abs().max().item(), 1e-30)


#: Tolerances on :func:`rel_error` against the float64 reference, per activation/weight dtype of the
#: runner's compute. bf16 keeps 8 mantissa bits (2^-8 ~ 3.9e-3 per rounding); sums over K experts
#: and H/I products accumulate in float32, so a few roundings of the output dominate.
TOLERANCE = {"float64": 1e-12, "float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}

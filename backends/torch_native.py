"""``torch_native``: the PyTorch reference runner (any device, incl. CPU). Facts: ``torch_native.yaml``.

Per local expert: gather its tokens, ``h = x @ w13[e].T`` in float32, gated activation,
``y = act(h) @ w2[e].T``, scale by the routing weight and add into the output (float32), cast to the
input dtype at the end. Expert biases (gpt-oss): ``h += w13_bias[e]`` before the activation, ``y +=
w2_bias[e]`` before the routing weight. FP8 weights, and MXFP4 / NVFP4 weights (packed e2m1 with e8m0, or e4m3 plus a
global, block scales), are dequantized once in ``prepare_weights`` (activations are not quantized). Not CUDA-graph capturable
(``nonzero`` gives data-dependent shapes).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_select.contracts import Registrar
from moe_select.errors import RunnerInputError
from moe_select.formats import lookup
from moe_select.layer import LayerSpec
from moe_select.ops import dequantize, expert_biases, gated_act

FORMATS = ("bf16", "fp16", "fp8_tensor", "fp8_channel", "fp8_block", "mxfp4", "nvfp4")
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


@dataclass
class TorchNativeWeights:
    """``w13 [E_local, 2*I or I, H]`` and ``w2 [E_local, H, I]`` in a float dtype (fp8 dequantized to float32);
    ``b13 [E_local, 2*I or I]`` and ``b2 [E_local, H]`` float32 expert biases, or None."""

    w13: torch.Tensor
    w2: torch.Tensor
    b13: torch.Tensor | None = None
    b2: torch.Tensor | None = None


class TorchNativeCore:
    """Expert compute core of ``torch_native`` for one rank (see :class:`~moe_select.layer.LayerSpec`)."""

    def __init__(self, spec: LayerSpec, device: torch.device | str):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"torch_native does not implement {spec.quant} (it runs {', '.join(FORMATS)})")
        self.spec = spec
        self.device = torch.device(device)

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None, w13_global_scale: torch.Tensor | None = None,
                        w2_global_scale: torch.Tensor | None = None, w13_bias: torch.Tensor | None = None,
                        w2_bias: torch.Tensor | None = None) -> TorchNativeWeights:
        """Canonical ``w13 [E_local, 2*I, H]`` (gate rows, then up rows) and ``w2 [E_local, H, I]``.

        16-bit formats: float tensors (bf16/fp16, or fp32/fp64 for reference use). FP8 formats: e4m3
        tensors plus ``w13_scale``/``w2_scale``; mxfp4: packed uint8 ``[E, N, K/2]`` plus e8m0 uint8
        scales ``[E, N, K/32]``; nvfp4: packed uint8 plus e4m3 scales ``[E, N, K/16]`` and
        ``w13_global_scale``/``w2_global_scale`` ``[E]`` float32 (shapes in :mod:`moe_select.ops`).
        ``w13_bias [E_local, 2*I]`` / ``w2_bias [E_local, H]`` (any float dtype, kept in float32): expert
        biases (gpt-oss); with tensor parallelism only one rank of an expert's TP group passes a nonzero
        ``w2_bias`` (the ranks' outputs are summed). Raises :class:`RunnerInputError` naming the tensor on a
        wrong dtype, shape or scale."""
        b13, b2 = expert_biases(self.spec, self.device, w13_bias, w2_bias)
        q = self.spec.quant
        row = lookup(q)  # every format of FORMATS has one (tests/test_formats.py); the stored dtype and scales
        if row is not None and row.quantized:
            stored = getattr(torch, row.dtype)
            scale = row.scales[0]
            for name, t, s in (("w13", w13, w13_scale), ("w2", w2, w2_scale)):
                if t.dtype != stored:
                    raise RunnerInputError(f"{name}: {q} weights must be {stored}, got {t.dtype}")
                if s is None:
                    raise RunnerInputError(f"{name}_scale is required for {q} ({scale.shape} {scale.dtype})")
            if "global_scale" not in row.scale_names and (w13_global_scale is not None or w2_global_scale is not None):
                raise RunnerInputError(f"{q} weights take no global scales")
            try:
                block = self.spec.block_shape  # fp8_block: the checkpoint's [bn, bk] (the plan's quant_params)
                w13 = dequantize(w13, w13_scale, q, global_scale=w13_global_scale, block=block)
                w2 = dequantize(w2, w2_scale, q, global_scale=w2_global_scale, block=block)
            except ValueError as exc:
                raise RunnerInputError(str(exc)) from None
        else:
            if any(t is not None for t in (w13_scale, w2_scale, w13_global_scale, w2_global_scale)):
                raise RunnerInputError(f"{q} weights take no scales")
            for name, t in (("w13", w13), ("w2", w2)):
                if t.dtype not in FLOAT_DTYPES:
                    raise RunnerInputError(f"{name}: {q} weights must be a float dtype, got {t.dtype}")
        return TorchNativeWeights(w13.contiguous(), w2.contiguous(), b13, b2)

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: TorchNativeWeights) -> torch.Tensor:
        """``[T, H]`` in ``hidden_states.dtype``: the sum over this rank's experts of routing weight x expert
        output (``spec.weight_on_input``: of the expert output for the weighted input, as llama4 routes)."""
        spec = self.spec
        t, k = topk_ids.shape
        out = torch.zeros(t, spec.hidden_size, dtype=torch.float32, device=hidden_states.device)
        local = topk_ids.to(torch.int64) - spec.expert_offset
        flat = local.reshape(-1)
        valid = (flat >= 0) & (flat < spec.num_local_experts)
        slots = torch.nonzero(valid).squeeze(1)
        if slots.numel():
            experts = flat[slots]
            order = torch.argsort(experts, stable=True)
            slots, experts = slots[order], experts[order]
            counts = torch.bincount(experts, minlength=spec.num_local_experts).tolist()
            tokens = slots // k
            wts = topk_weights.reshape(-1)[slots].float()
            start = 0
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                tok = tokens[start:start + n]
                xe = hidden_states[tok].float()
                w = wts[start:start + n, None]
                if spec.weight_on_input:  # llama4: the routing weight scales the expert's input
                    xe = xe * w
                h = xe @ weights.w13[e].float().t()
                if weights.b13 is not None:
                    h = h + weights.b13[e]
                y = gated_act(h, spec.activation, spec.swiglu_limit) @ weights.w2[e].float().t()
                if weights.b2 is not None:
                    y = y + weights.b2[e]
                out.index_add_(0, tok, y if spec.weight_on_input else y * w)
                start += n
        return out.to(hidden_states.dtype)


def register(registry: Registrar) -> None:
    """Register the torch_native core for standard (token-major) dispatch from a2a ``none`` and ``torch``
    (both give rows of tokens with global ``topk_ids``; ids of other ranks' experts and -1 are skipped)."""
    registry.register_core("torch_native", "standard", TorchNativeCore)

"""``flashinfer_cutlass``: adapter over ``flashinfer.fused_moe.cutlass_fused_moe`` (flashinfer-python
0.6.4). Facts: ``flashinfer_cutlass.yaml``. Everything below was read in the installed 0.6.4 source:
``flashinfer/fused_moe/core.py`` (signature, return value) and
``data/csrc/fused_moe/cutlass_backend/{flashinfer_cutlass_fused_moe_binding.cu, cutlass_fused_moe_kernels.cuh}``.

Layout: FlashInfer's gated activation reads the *linear* (up) value from fc1 rows ``[0, I)`` and the
gate from rows ``[I, 2I)`` (``doActivationKernel``/``doGatedActivation``: ``fn(gemm[i + inter_size],
gemm[i])``), the reverse of the canonical ``w13`` (gate rows first): :func:`swap_gate_up` makes
``fc1 = [up; gate]`` once at load. ``fc2 = w2 [E, H, I]`` unchanged. Scales (``getQuantParams``):
- bf16/fp16: none (``quant_scales=None``);
- fp8_tensor (activation dtype e4m3, static per-tensor activation scales): ``[fc1_dequant [E] =
  w13_scale * a13_scale, fc2_quant = 1/a2_scale (scalar or [E]), fc2_dequant [E] = w2_scale *
  a2_scale, fc1_input_dequant = a13_scale (0-dim)]``; the input is quantized with ``a13_scale``.
  ``prepare_weights`` therefore needs the checkpoint's activation scales ``a13_scale``/``a2_scale``;
- fp8_block (Hopper only, ``use_deepseek_fp8_block_scale=True``, bf16 input): ``[w13 block scales
  [E, 2I/128, H/128] with the same half swap, w2 block scales [E, H/128, I/128]]``.
Activations by name (``ActivationType``, whose integers changed between releases): silu -> Swiglu,
gelu -> Geglu (erf GELU), relu2 -> Relu2 (not gated), swiglu_oai -> SwigluBias with per-expert
``swiglu_alpha`` 1.702, ``swiglu_beta`` 1.0, ``swiglu_limit`` (``gate.clamp(max=l) *
sigmoid(alpha*gate) * (up.clamp(-l, l) + beta)``, ``SwigluBiasAdaptor``).
Parallelism: weights are this rank's slice; ``tp_size = tp/ep`` (the MoE TP size), ``tp_rank``,
``ep_size``, ``ep_rank``; FlashInfer skips ids outside this rank's experts (and -1).
0.6.4 returns a list whose first element is the output; ``output=`` is passed so it is written in place.
The FP4/MXFP8 formats (packed weights, swizzled block scales) are not implemented by this adapter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from moe_select.contracts import Registrar
from moe_select.errors import RunnerInputError
from moe_select.layer import LayerSpec
from moe_select.ops import BLOCK, FP8_DTYPE, FP8_MAX, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT

FORMATS = ("bf16", "fp16", "fp8_tensor", "fp8_block")
ACTIVATION_TYPE = {"silu": "Swiglu", "gelu": "Geglu", "relu2": "Relu2", "swiglu_oai": "SwigluBias"}
_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def swap_gate_up(t: torch.Tensor, half: int) -> torch.Tensor:
    """``t [E, 2*half, ...]`` canonical (gate, up) -> FlashInfer's (up, gate) order along dim 1."""
    return torch.cat([t[:, half:], t[:, :half]], dim=1).contiguous()


def _scalar(name: str, s: Any) -> torch.Tensor:
    if not isinstance(s, torch.Tensor) or s.numel() != 1:
        raise RunnerInputError(f"{name} must be a one-element tensor (the checkpoint's static activation scale), "
                               f"got {getattr(s, 'shape', type(s).__name__)}")
    return s.reshape(()).float()


@dataclass
class FlashInferWeights:
    """Weights in FlashInfer's layout: ``fc1 [E, 2I, H]`` (up rows, then gate rows), ``fc2 [E, H, I]``,
    ``quant_scales`` (list or None, per format: module doc), ``a13_scale`` (fp8_tensor input scale),
    ``swiglu`` (per-expert alpha/beta/limit tensors for swiglu_oai)."""

    fc1: torch.Tensor
    fc2: torch.Tensor
    quant_scales: list[torch.Tensor] | None = None
    a13_scale: torch.Tensor | None = None
    swiglu: dict[str, torch.Tensor] = field(default_factory=dict)


class FlashInferCutlassCore:
    """Expert compute core of ``flashinfer_cutlass`` for one rank. ``kernel``: the function to call
    (default ``flashinfer.fused_moe.cutlass_fused_moe``, imported here; tests pass a stand-in).
    Raises :class:`RunnerInputError` for a format or shape this adapter does not implement."""

    def __init__(self, spec: LayerSpec, device: torch.device | str, kernel: Any = None):
        if spec.quant not in FORMATS:
            raise RunnerInputError(f"flashinfer_cutlass adapter does not implement {spec.quant} (it runs {', '.join(FORMATS)})")
        if spec.quant == "fp8_block" and spec.intermediate_size % BLOCK:
            raise RunnerInputError(f"fp8_block: intermediate_size per rank {spec.intermediate_size} is not a multiple of {BLOCK}")
        if spec.quant == "fp8_block" and spec.block_shape not in (None, (BLOCK, BLOCK)):
            raise RunnerInputError(f"fp8_block: the kernel takes {BLOCK}x{BLOCK} weight blocks only, the plan's are "
                                   f"{list(spec.block_shape)}")
        from flashinfer.fused_moe import ActivationType, cutlass_fused_moe

        self.kernel = kernel or cutlass_fused_moe
        self.activation_type = getattr(ActivationType, ACTIVATION_TYPE[spec.activation])
        self.spec = spec
        self.device = torch.device(device)

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, *, w13_scale: torch.Tensor | None = None,
                        w2_scale: torch.Tensor | None = None, a13_scale: torch.Tensor | None = None,
                        a2_scale: torch.Tensor | None = None, w13_bias: torch.Tensor | None = None,
                        w2_bias: torch.Tensor | None = None) -> FlashInferWeights:
        """Canonical ``w13 [E, 2*I, H]`` (gate, up) and ``w2 [E, H, I]`` -> FlashInfer's layout (module doc).

        bf16/fp16: weights of that dtype, no scales. fp8_tensor: e4m3 weights, ``w13_scale``/``w2_scale``
        ``[E]`` and the static activation scales ``a13_scale`` (one element) and ``a2_scale`` (one element
        or ``[E]``). fp8_block: e4m3 weights with ``[E, ceil(N/128), ceil(K/128)]`` block scales.
        Expert biases (gpt-oss) are not passed to the kernel yet: ``w13_bias``/``w2_bias`` are refused.
        Raises :class:`RunnerInputError` naming the tensor that is wrong."""
        s, q = self.spec, self.spec.quant
        if w13_bias is not None or w2_bias is not None:
            raise RunnerInputError("flashinfer_cutlass does not pass expert biases (w13_bias, w2_bias) to its kernel yet")
        want = _DTYPE.get(q, FP8_DTYPE)
        for name, t in (("w13", w13), ("w2", w2)):
            if t.dtype != want:
                raise RunnerInputError(f"{name}: {q} weights must be {want}, got {t.dtype}")
        e, i = w13.shape[0], s.intermediate_size
        fc1 = swap_gate_up(w13, i) if s.gated else w13.contiguous()
        out = FlashInferWeights(fc1, w2.contiguous())
        if s.activation == "swiglu_oai":
            limit = SWIGLU_OAI_LIMIT if s.swiglu_limit is None else s.swiglu_limit
            out.swiglu = {k: torch.full((e,), v, dtype=torch.float32, device=w13.device) for k, v in
                          (("swiglu_alpha", SWIGLU_OAI_ALPHA), ("swiglu_beta", 1.0), ("swiglu_limit", limit))}
        if q in _DTYPE:
            if any(x is not None for x in (w13_scale, w2_scale, a13_scale, a2_scale)):
                raise RunnerInputError(f"{q} weights take no scales")
            return out
        if w13_scale is None or w2_scale is None:
            raise RunnerInputError(f"w13_scale and w2_scale are required for {q}")
        if q == "fp8_tensor":
            for name, t in (("w13_scale", w13_scale), ("w2_scale", w2_scale)):
                if tuple(t.shape) != (e,):
                    raise RunnerInputError(f"{name}: fp8_tensor scale must be [E] = [{e}], got {list(t.shape)}")
            if a13_scale is None or a2_scale is None:
                raise RunnerInputError("fp8_tensor on flashinfer_cutlass needs the static activation scales a13_scale and "
                                       "a2_scale (the checkpoint's input_scale of w13 and w2): its kernel takes FP8 input")
            a1 = _scalar("a13_scale", a13_scale)
            a2 = a2_scale.float().reshape(()) if a2_scale.numel() == 1 else a2_scale.float()
            if a2.dim() == 1 and a2.shape[0] != e:
                raise RunnerInputError(f"a2_scale must have one element or [E] = [{e}], got {list(a2_scale.shape)}")
            out.quant_scales = [(w13_scale.float() * a1).contiguous(), (1.0 / a2).contiguous(),
                                (w2_scale.float() * a2).contiguous(), a1]
            out.a13_scale = a1
            return out
        if a13_scale is not None or a2_scale is not None:
            raise RunnerInputError("fp8_block quantizes activations per token group inside the kernel: no a13_scale/a2_scale")
        h = s.hidden_size
        want13 = (e, -(-s.w13_rows // BLOCK), -(-h // BLOCK))
        want2 = (e, -(-h // BLOCK), -(-i // BLOCK))
        for name, t, w in (("w13_scale", w13_scale, want13), ("w2_scale", w2_scale, want2)):
            if tuple(t.shape) != w:
                raise RunnerInputError(f"{name}: fp8_block scale must be {list(w)}, got {list(t.shape)}")
        s13 = swap_gate_up(w13_scale.float(), i // BLOCK) if s.gated else w13_scale.float().contiguous()
        out.quant_scales = [s13, w2_scale.float().contiguous()]
        return out

    def call_args(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  weights: FlashInferWeights, output: torch.Tensor) -> dict[str, Any]:
        """The keyword arguments of one ``cutlass_fused_moe`` call (pure; tested without a GPU)."""
        s = self.spec
        x = hidden_states
        if s.quant == "fp8_tensor":
            assert weights.a13_scale is not None  # prepare_weights refuses fp8_tensor without it
            x = (hidden_states.float() / weights.a13_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        return dict(input=x, token_selected_experts=topk_ids.to(torch.int32), token_final_scales=topk_weights,
                    fc1_expert_weights=weights.fc1, fc2_expert_weights=weights.fc2, output_dtype=output.dtype,
                    quant_scales=weights.quant_scales, tp_size=s.tp // s.ep, tp_rank=s.tp_rank, ep_size=s.ep,
                    ep_rank=s.ep_rank, output=output, use_deepseek_fp8_block_scale=s.quant == "fp8_block",
                    activation_type=self.activation_type, **weights.swiglu)

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: FlashInferWeights) -> torch.Tensor:
        """``[T, H]`` in ``hidden_states.dtype`` (bf16 for the FP8 formats). The first call JIT-compiles
        FlashInfer's module unless it is prebuilt (see ``plan.jit``)."""
        out = torch.empty_like(hidden_states)
        res = self.kernel(**self.call_args(hidden_states, topk_ids, topk_weights, weights, out))
        first = res[0] if isinstance(res, (list, tuple)) else res
        if first is not out and first.data_ptr() != out.data_ptr():
            raise RuntimeError("cutlass_fused_moe did not return the output= tensor: check the flashinfer-python version")
        return out


def register(registry: Registrar) -> None:
    """Register the flashinfer_cutlass core for the standard (token-major) dispatch format."""
    registry.register_core("flashinfer_cutlass", "standard", FlashInferCutlassCore)

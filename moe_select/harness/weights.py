"""Seeded synthetic expert weights and routed tokens, the same everywhere they are used (``run``,
``run --nproc``, ``resolve(verify=True)``, tests, benchmarks).

Weights: expert ``e``'s intermediate slice ``j`` of ``moe_tp`` is drawn from its own generator, seeded by
``(seed, e, j)``, standard normal scaled by ``1/sqrt(H)`` (w13) and ``1/sqrt(I)`` (w2) so every stage of
the layer stays O(1), then quantized to the format (:func:`moe_select.ops.quantize_named`). So a rank
builds only its shard, and the float64 reference rebuilds exactly the experts the tokens touch, one at a
time, whatever the split. Tokens: ``x ~ N(0, 1)``, router logits ``x @ router`` (router ~ N(0, 1/H)),
plus a correction bias ~ N(0, 0.1^2) for the routing methods that take one, routed with the model's
method (:func:`moe_select.routing.route`). Expert biases, for the models that have them (gpt-oss: the
activation ``swiglu_oai``), are drawn from a generator of their own, ``~N(0, 0.2^2)``: ``w13_bias`` for
each intermediate slice, ``w2_bias`` on slice 0 only (the down projection's slices are summed, so one
slice carries the bias; the others get zeros).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..vocab import WEIGHT_ON_INPUT_ROUTINGS

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..layer import LayerSpec

#: Routing methods whose choice adds a per-expert correction bias (DeepSeek-V3 noaux_tc, MiniMax-M2).
BIASED_ROUTING = ("deepseek_v3", "sigmoid_topk")


#: Activations whose models carry expert biases: swiglu_oai is gpt-oss's (transformers ``GptOssExperts``:
#: ``gate_up_proj_bias [E, 2*I]``, ``down_proj_bias [E, H]``).
BIASED_ACTIVATIONS = ("swiglu_oai",)
BIAS_STD = 0.2


def has_expert_bias(model: dict[str, Any]) -> bool:
    """True when the model's experts carry biases (:data:`BIASED_ACTIVATIONS`)."""
    return model.get("activation") in BIASED_ACTIVATIONS


def seed64(value: int) -> int:
    """``value`` as a generator seed: unchanged inside the signed 64-bit range torch takes, else reduced
    modulo 2**63 (every seed the CLI accepts, |seed| < 2**62, then draws reproducibly)."""
    return value if -(1 << 63) <= value < (1 << 63) else value % (1 << 63)


def _rows(model: dict[str, Any], inter: int) -> int:
    return inter if model.get("activation") == "relu2" else 2 * inter


def expert_slice(model: dict[str, Any], quant: str, moe_tp: int, seed: int, e: int, j: int, generate_on: Any = "cpu",
                 block: tuple[int, int] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Expert ``e``'s intermediate slice ``j`` of ``moe_tp``, as stored: ``(w13 [1, rows, H], w2 [1, H,
    I/moe_tp], w13 scales, w2 scales)``; rows = the gate slice then the up slice (``2*I/moe_tp``;
    ``I/moe_tp`` for relu2); scales named as :func:`~moe_select.ops.quantize_named` names them
    (``scale``, ``global_scale``; none for bf16/fp16). Packed FP4 formats store K/2 columns.

    ``generate_on``: the device whose generator draws the numbers (and where they are quantized and
    returned). The same seed gives the same weights on every device of one type (CPU, CUDA), not across
    types: the float64 reference must rebuild experts on the device type the layer was built on. ``block``: fp8_block's
    ``(bn, bk)`` (the plan's, :attr:`~moe_select.layer.LayerSpec.block_shape`; default 128 x 128)."""
    import torch

    from ..ops import quantize_named

    h, i = model["hidden_size"], model["moe_intermediate_size"]
    ir = i // moe_tp
    g = torch.Generator(device=generate_on).manual_seed(seed64((seed * 1_000_003 + e) * 1_009 + j))
    q13, s13 = quantize_named(torch.randn(1, _rows(model, ir), h, generator=g, device=generate_on) * h ** -0.5, quant, block)
    q2, s2 = quantize_named(torch.randn(1, h, ir, generator=g, device=generate_on) * i ** -0.5, quant, block)
    return q13, q2, s13, s2


def expert_bias(model: dict[str, Any], moe_tp: int, seed: int, e: int, j: int, generate_on: Any = "cpu"
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ``e``'s biases for intermediate slice ``j`` of ``moe_tp`` (module doc): ``(w13_bias [1, rows],
    w2_bias [1, H])`` float32 on ``generate_on``, rows as :func:`expert_slice` (gate slice then up slice);
    ``w2_bias`` is zero for ``j > 0``."""
    import torch

    h, i = model["hidden_size"], model["moe_intermediate_size"]
    g = torch.Generator(device=generate_on).manual_seed(seed64(((seed * 1_000_003 + e) * 1_009 + j) * 31 + 17))
    b13 = torch.randn(1, _rows(model, i // moe_tp), generator=g, device=generate_on) * BIAS_STD
    b2 = torch.randn(1, h, generator=g, device=generate_on) * BIAS_STD
    return b13, b2 if j == 0 else torch.zeros_like(b2)


def layer_weights(spec: LayerSpec, model: dict[str, Any], seed: int, device: Any = "cpu",
                  generate_on: Any = "cpu", progress: Callable[[int], None] | None = None) -> dict[str, torch.Tensor]:
    """The keyword arguments of ``prepare_weights`` for rank ``spec`` (its experts ``[expert_offset,
    +num_local_experts)``, its intermediate slice ``tp_rank`` of ``tp/ep``) in ``spec.quant``: ``w13``,
    ``w2`` and ``w13_<scale>``/``w2_<scale>``, and ``w13_bias [E, rows]``/``w2_bias [E, H]`` float32 for
    models with expert biases (:func:`has_expert_bias`), built expert by expert into tensors on
    ``device``, drawn on ``generate_on`` (:func:`expert_slice`; a GPU draws a DeepSeek-V3 layer in seconds).
    ``progress``: called with 1 after each expert (a :class:`~moe_select.harness.progress.Phase` counts them)."""
    import torch

    moe_tp = spec.tp // spec.ep
    out: dict[str, torch.Tensor] = {}
    n = spec.num_local_experts
    for k, e in enumerate(range(spec.expert_offset, spec.expert_offset + n)):
        q13, q2, s13, s2 = expert_slice(model, spec.quant, moe_tp, seed, e, spec.tp_rank, generate_on, spec.block_shape)
        parts = {"w13": q13, "w2": q2, **{f"w13_{a}": v for a, v in s13.items()}, **{f"w2_{a}": v for a, v in s2.items()}}
        if has_expert_bias(model):
            parts["w13_bias"], parts["w2_bias"] = expert_bias(model, moe_tp, seed, e, spec.tp_rank, generate_on)
        for name, t in parts.items():
            if name not in out:
                out[name] = torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=device)
            out[name][k] = t[0]
        if progress is not None:
            progress(1)
    return out


def full_expert(model: dict[str, Any], quant: str, moe_tp: int, seed: int, e: int, generate_on: Any = "cpu",
                device: Any = "cpu", block: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ``e`` as the reference sees it: ``(w13 [1, rows, H], w2 [1, H, I])`` float64 on ``device``, each
    slice dequantized by :func:`~moe_select.reference.reference_dequantize` (not :mod:`moe_select.ops`) and
    put back in canonical order (all gate rows, then all up rows)."""
    import torch

    from ..reference import reference_dequantize

    w13s, w2s = [], []
    for j in range(moe_tp):
        q13, q2, s13, s2 = expert_slice(model, quant, moe_tp, seed, e, j, generate_on, block)
        w13s.append(reference_dequantize(q13, s13, quant, block or (128, 128), device=device))
        w2s.append(reference_dequantize(q2, s2, quant, block or (128, 128), device=device))
    return _gates_then_ups(model, w13s), torch.cat(w2s, dim=2)


def _gates_then_ups(model: dict[str, Any], slices: list[torch.Tensor]) -> torch.Tensor:
    """Per-slice ``[1, rows, ...]`` tensors (each a gate slice then an up slice, as :func:`expert_slice` and
    :func:`expert_bias` draw them) joined along dim 1 in canonical order: all gate rows, then all up rows
    (relu2: the rows as they are)."""
    import torch

    halves = [t.shape[1] // 2 if model.get("activation") != "relu2" else t.shape[1] for t in slices]
    return torch.cat([t[:, :h] for t, h in zip(slices, halves)] + [t[:, h:] for t, h in zip(slices, halves)], dim=1)


def full_expert_bias(model: dict[str, Any], moe_tp: int, seed: int, e: int, generate_on: Any = "cpu",
                     device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor] | None:
    """Expert ``e``'s biases as the reference sees them: ``(w13_bias [1, rows], w2_bias [1, H])`` float64 on
    ``device`` in canonical order (all gate entries, then all up entries; ``w2_bias`` the sum over the
    slices), or None for a model without expert biases."""
    import torch

    if not has_expert_bias(model):
        return None
    parts = [[t.to(device, torch.float64) for t in expert_bias(model, moe_tp, seed, e, j, generate_on)]
             for j in range(moe_tp)]
    return _gates_then_ups(model, [b13 for b13, _ in parts]), sum((b2 for _, b2 in parts[1:]), parts[0][1])


def routed_tokens(model: dict[str, Any], tokens: int, seed: int, dtype: str = "bfloat16"
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The seeded batch: ``x [T, H]`` in ``dtype``, and ``topk_ids [T, K]`` int32 and ``topk_weights [T, K]``
    float32 from the model's routing of ``x @ router`` (module doc)."""
    import torch

    from ..routing import route

    g = torch.Generator().manual_seed(seed64(seed * 7 + 1))
    h, e = model["hidden_size"], model["num_experts"]
    x = torch.randn(tokens, h, generator=g).to(getattr(torch, dtype))
    router = torch.randn(e, h, generator=g) * h ** -0.5
    bias = torch.randn(e, generator=g) * 0.1 if model.get("routing") in BIASED_ROUTING else None
    wts, ids = route(x.float() @ router.t(), model["routing"], model["top_k"], n_group=model.get("n_group"),
                     topk_group=model.get("topk_group"), routed_scaling_factor=model.get("routed_scaling_factor"),
                     correction_bias=bias)
    return x, ids, wts


def reference_output(model: dict[str, Any], quant: str, moe_tp: int, seed: int, x: torch.Tensor, ids: torch.Tensor,
                     wts: torch.Tensor, generate_on: Any = "cpu", device: Any = "cpu",
                     progress: Callable[[int], None] | None = None, block: tuple[int, int] | None = None
                     ) -> tuple[torch.Tensor, int]:
    """The float64 layer output ``[T, H]`` on the CPU (:func:`moe_select.reference.reference_moe`) for
    weights seeded by ``seed`` and drawn on ``generate_on`` (as the layer's were), built one touched expert
    at a time (only one expert is ever held in float64), the float64 arithmetic done on ``device`` (``run``
    passes the GPU it ran on). Returns it and the number of experts touched. ``progress``: called with 1
    after each touched expert (:func:`touched_experts` says how many there will be). ``block``: fp8_block's ``(bn, bk)``
    the layer was built with (default 128 x 128)."""
    import torch

    from ..reference import reference_moe

    ref = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    touched = sorted(int(e) for e in ids.unique() if e >= 0)
    for e in touched:
        rows = (ids == e).any(dim=1).nonzero().squeeze(1)
        w13, w2 = full_expert(model, quant, moe_tp, seed, e, generate_on, device, block)
        bias = full_expert_bias(model, moe_tp, seed, e, generate_on, device)
        ref.index_add_(0, rows, reference_moe(x[rows], ids[rows], wts[rows], w13, w2, model.get("activation", "silu"),
                                              expert_offset=e, swiglu_limit=model.get("swiglu_limit"),
                                              weight_on_input=model.get("routing") in WEIGHT_ON_INPUT_ROUTINGS,
                                              device=device, w13_bias=None if bias is None else bias[0],
                                              w2_bias=None if bias is None else bias[1]))
        if progress is not None:
            progress(1)
    return ref, len(touched)


def touched_experts(ids: torch.Tensor) -> int:
    """How many distinct experts the routed ``ids [T, K]`` touch (negative ids, dropped slots, not counted):
    the steps of :func:`reference_output`."""
    return int((ids.unique() >= 0).sum())

"""Startup self-check: a few fresh random tokens through a resolved runner and through the float64
reference (:func:`moe_select.reference.reference_moe`); ``resolve(plan, verify=True)`` calls it.

Inputs (seeded): ``x ~ N(0, 1)`` in the runner's activation dtype, drawn on the runner's device;
this rank's weights from :func:`moe_select.harness.weights.layer_weights` (``w13 ~ N(0, 1/H)``,
``w2 ~ N(0, 1/I)``, quantized to the plan's format); routing ``K`` distinct global experts per token drawn from all ranks'
experts (so an ep > 1 rank also sees ids it must skip), one slot set to -1, weights uniform in
[0.1, 1) renormalised to sum 1. The reference gets the dequantized weights, so weight quantization
error is not counted; what is counted is the runner's arithmetic. The reference is this rank's part
(its experts, its intermediate slice) when the dispatcher returns a partial output (a2a none), and the
whole layer (every expert rebuilt from the same seeds) when it returns each token's complete output
(a2a torch with tp > 1).

Size cap: when the rank's local experts take more than ``max_weight_bytes`` (default 256 MiB), the
check runs a twin of the runner (same core class, dispatcher class, H, I, K, activation, format and
rank) built for a spec with ``max(K, 8)`` local experts, so a DeepSeek-V3 rank is checked with 8
experts' weights rather than 256. What differs from the real runner is only the number of groups.

Tolerance on :func:`~moe_select.reference.rel_error` (``max |out - ref| / max |ref|``):
:func:`moe_select.formats.tolerance` of the plan's ``activation_precision`` and the output dtype (bf16
1.6e-2, fp16 2.0e-3, FP8 activations 0.14: its docstring derives them and quotes the H200
measurements). A wrong scale, layout or expert gives errors of order 1 (a doubled w2 scale: > 0.5).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .errors import ResolveError
from .formats import tolerance
from .reference import QuantizedExperts, reference_moe, rel_error
from .plans import Reason, ReasonCode

_ACT_DTYPE = {"fp16": torch.float16}
SOURCE = "moe_select.verify (resolve(verify=True))"


def _refuse(detail: str, code: ReasonCode = "plan_mismatch", fix: str | None = None) -> ResolveError:
    return ResolveError([Reason(code=code, detail=f"verify: {detail}", source=SOURCE, fix=fix)])


def _twin(runner: Any, num_local: int) -> Any:
    """A runner like ``runner`` whose spec has ``num_local`` local experts (same class of core and dispatcher)."""
    from .runner import MoeRunner

    spec = dataclasses.replace(runner.spec, num_experts=num_local * runner.spec.ep)
    core = type(runner.core)(spec, runner.device)
    dispatcher = type(runner.dispatcher)(spec, getattr(runner.dispatcher, "group", None))
    return MoeRunner(runner.plan, spec, core, dispatcher, runner.device)


def verify_runner(runner: Any, tokens: int = 16, seed: int = 0, *, max_weight_bytes: int = 256 << 20) -> float:
    """Check ``runner`` (a :class:`~moe_select.runner.MoeRunner`) against the float64 reference on
    ``tokens`` fresh random tokens; return the relative error (module doc) when within tolerance.

    Raises :class:`ResolveError`: ``plan_mismatch`` when the output differs from the reference by more
    than the format's tolerance, has the wrong shape or dtype, is not finite, or the runner raises;
    ``quant_unsupported`` for a format whose row says the harness does not generate its weights (``generated:
    false`` in ``backends/formats.yaml``: the int formats, mxfp8); ``no_adapter`` for a format without a row
    (no scales, no tolerance: :func:`moe_select.weight_checks.weights_refusal`)."""
    from .formats import lookup
    from .weight_checks import weights_refusal

    spec = runner.spec
    quant = spec.quant
    refused = weights_refusal(quant, "verify")
    if refused is not None:
        raise ResolveError([refused])
    row = lookup(quant)
    assert row is not None  # weights_refusal refuses a name without a row
    h_size, i_size = spec.hidden_size, spec.intermediate_size
    bytes_per_expert = 3 * h_size * i_size * row.stored_bytes
    if spec.num_local_experts * bytes_per_expert > max_weight_bytes:
        runner = _twin(runner, max(spec.top_k, 8))
        spec = runner.spec
    from .harness.weights import layer_weights

    dev = runner.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    act_dtype = _ACT_DTYPE.get(quant, torch.bfloat16)
    x = torch.randn(tokens, h_size, generator=gen, device=dev).to(act_dtype)
    model = {"hidden_size": h_size, "moe_intermediate_size": i_size * (spec.tp // spec.ep), "activation": spec.activation}
    built = layer_weights(spec, model, seed, dev)
    q13, q2 = built.pop("w13"), built.pop("w2")
    s13 = {k[4:]: v for k, v in built.items() if k.startswith("w13_")}
    s2 = {k[3:]: v for k, v in built.items() if k.startswith("w2_")}
    keys = torch.rand(tokens, spec.num_experts, generator=gen, device=dev)
    ids = keys.argsort(dim=1)[:, :spec.top_k].to(torch.int32)
    ids[0, -1] = -1
    wts = torch.rand(tokens, spec.top_k, generator=gen, device=dev) * 0.9 + 0.1
    wts = (wts / wts.sum(dim=1, keepdim=True)).float()
    try:
        out = runner.run(x, ids, wts, runner.prepare_weights(q13, q2, **built))
    except Exception as exc:   # a plugin's core may raise anything (an AssertionError, its own class)
        raise _refuse(f"{runner.name} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise _refuse(f"{runner.name} returned {type(out).__name__}; expected a [{tokens}, {h_size}] {x.dtype} tensor")
    if tuple(out.shape) != (tokens, h_size) or out.dtype != x.dtype:
        raise _refuse(f"{runner.name} returned {list(out.shape)} {out.dtype}; expected [{tokens}, {h_size}] {x.dtype}")
    if getattr(runner.dispatcher, "output", "partial") == "complete" and spec.tp > 1:
        # The dispatcher returns each token's whole layer output (every expert, every intermediate slice: a2a
        # torch): the reference is the whole layer, rebuilt expert by expert from the same seeds.
        from .harness.weights import reference_output
        from .vocab import WEIGHT_ON_INPUT_ROUTINGS

        whole = {**model, "swiglu_limit": spec.swiglu_limit,
                 "routing": WEIGHT_ON_INPUT_ROUTINGS[0] if spec.weight_on_input else "renormalize"}
        ref, _ = reference_output(whole, quant, spec.tp // spec.ep, seed, x.cpu(), ids.cpu(), wts.cpu(), block=spec.block_shape)
    else:  # this rank's partial output: its experts, its intermediate slice
        ref = reference_moe(x, ids, wts, QuantizedExperts(q13, s13, quant, spec.block_shape),
                            QuantizedExperts(q2, s2, quant, spec.block_shape), spec.activation,
                            expert_offset=spec.expert_offset, swiglu_limit=spec.swiglu_limit, weight_on_input=spec.weight_on_input)
    err = rel_error(out, ref)
    precision = runner.plan.activation_precision
    tol = tolerance(precision, str(out.dtype).removeprefix("torch."))
    if not err <= tol:  # also refuses NaN
        raise _refuse(f"{runner.name} output differs from the float64 reference by {err:.3g} (tolerance {tol:g} for "
                      f"{quant} with {precision} activations) on {tokens} random tokens", fix="do not serve with this runner; report it with the plan")
    return err

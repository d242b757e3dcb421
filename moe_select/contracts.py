"""The contracts between the engine and the backends, in one place: what an expert compute core and a
token dispatcher are, and the dispatch formats that connect them. The resolver builds a
:class:`~moe_select.runner.MoeRunner` from one of each; adapters in ``backends/`` implement them.

Dispatch formats (the layout a dispatcher hands a core; names as vLLM's modular kernel and SGLang's
token dispatchers use them):

- ``standard``: token-major. ``hidden_states [T, H]``, ``topk_ids [T, K]`` global expert ids (ids of
  other ranks' experts and -1 are skipped by the core), ``topk_weights [T, K]`` float32. A dispatcher
  of this format may pass every token (``a2a: none``) or only the tokens routed to this rank.
- ``batched``: expert-major. Per local expert a buffer of at most ``max_tokens_per_rank`` rows and a
  count of valid rows (the low-latency all-to-all kernels hand tokens over this way).

Nothing here imports torch at run time (annotations only).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - annotations only; planning never imports torch
    import torch

    from .layer import LayerSpec

DispatchFormat = Literal["standard", "batched"]
DISPATCH_FORMATS: tuple[str, ...] = ("standard", "batched")


@runtime_checkable
class ExpertCore(Protocol):
    """The expert computation of one rank for one dispatch format.

    Built as ``factory(spec, device)`` (:class:`~moe_select.layer.LayerSpec`, a ``torch.device``).
    ``prepare_weights(w13, w2, **scales)`` converts canonical weights once at load (``w13 [E_local,
    2*I, H]`` gate rows then up rows, ``[E_local, I, H]`` for relu2; ``w2 [E_local, H, I]``; scale names
    per format) and returns an opaque object; ``forward(hidden_states, topk_ids, topk_weights,
    weights)`` returns ``[T, H]`` in ``hidden_states.dtype``: the weighted sum over this rank's experts
    (and intermediate slice) of each token's expert outputs. Errors: :class:`~moe_select.errors.RunnerInputError`."""

    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, **scales: torch.Tensor) -> object: ...

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: object) -> torch.Tensor: ...


@runtime_checkable
class TokenDispatcher(Protocol):
    """Moves tokens to the ranks that hold their experts and the results back.

    Built as ``factory(spec, group)`` (``group``: the torch.distributed process group of the layer's
    ranks, or None on one rank). ``format`` is the dispatch format it hands the core; ``run(core,
    hidden_states, topk_ids, topk_weights, weights)`` returns ``[T, H]`` for the caller's tokens (see the
    a2a capability file for what "the caller's tokens" are). Errors:
    :class:`~moe_select.parallel.DispatchError`."""

    format: str

    def run(self, core: ExpertCore, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            weights: object) -> torch.Tensor: ...


class CoreFactory(Protocol):
    """``(spec, device) -> ExpertCore``: a core class or a function."""

    def __call__(self, spec: LayerSpec, device: torch.device) -> ExpertCore: ...


class DispatcherFactory(Protocol):
    """``(spec, group) -> TokenDispatcher``: a dispatcher class or a function."""

    def __call__(self, spec: LayerSpec, group: object) -> TokenDispatcher: ...


class Registrar(Protocol):
    """What an adapter module's ``register(registry)`` may call (:class:`~moe_select.registry.Registry`)."""

    def register_core(self, runner: str, dispatch_format: str, factory: CoreFactory) -> None: ...

    def register_dispatcher(self, a2a: str, factory: DispatcherFactory) -> None: ...

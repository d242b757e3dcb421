"""The contracts between the engine and the backends, in one place: what an expert compute core and a
token dispatcher are, and the dispatch formats that connect them. The resolver builds a
:class:`~moe_select.runner.MoeRunner` from one of each; adapters in ``backends/`` implement them.

Dispatch formats (the layout a dispatcher hands a core; names as vLLM's modular kernel and SGLang's
token dispatchers use them):

- ``standard``: token-major. ``hidden_states [T, H]``, ``topk_ids [T, K]`` global expert ids (ids of
  other ranks' experts and -1 are skipped by the core), ``topk_weights [T, K]`` float32. A dispatcher
  of this format may pass every token (``a2a: none``) or only the tokens routed to this rank.
- ``padded_standard``: token-major like ``standard``, but the row count is an upper bound: rows that hold no
  route (all their ``topk_ids`` -1) are padding, uninitialized or zeroed (an engine's all-to-all may hand its
  receive buffer over whole). Which runners take it, and which all-to-alls hand it, are facts per engine and release
  (backends/a2a/*.yaml, each runner's dispatch facts).
- ``batched``: expert-major. Per local expert a buffer of at most ``max_tokens_per_rank`` rows and a
  count of valid rows (the low-latency all-to-all kernels hand tokens over this way).
- ``fused``: no hand-over. The all-to-all runs inside the runner's own kernel (dispatch, both GEMMs and the
  combine in one launch over a symmetric-memory buffer; the a2a capability files name which backends hand it over);
  only a runner built around that kernel consumes it, and no core of this install does.

Nothing here imports torch at run time (annotations only). mypy checks every bundled adapter against these
Protocols: each adapter's ``register(registry: Registrar)`` passes its classes as factories, so a core whose
``prepare_weights``/``forward`` (or a dispatcher whose ``run``) does not match is a type error there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - annotations only; planning never imports torch
    import torch

    from .layer import LayerSpec

DispatchFormat = Literal["standard", "padded_standard", "batched", "fused"]
DISPATCH_FORMATS: tuple[str, ...] = ("standard", "padded_standard", "batched", "fused")

#: The prepared weights of one core: what its ``prepare_weights`` returns is what its ``forward`` takes.
W = TypeVar("W")


@runtime_checkable
class ExpertCore(Protocol[W]):
    """The expert computation of one rank for one dispatch format.

    Built as ``factory(spec, device)`` (:class:`~moe_select.layer.LayerSpec`, a ``torch.device``).
    ``prepare_weights(w13, w2, **scales)`` converts canonical weights once at load (``w13 [E_local,
    2*I, H]`` gate rows then up rows, ``[E_local, I, H]`` for relu2; ``w2 [E_local, H, I]``; scale names
    per format) and returns an object opaque to the caller (``W``); ``forward(hidden_states, topk_ids, topk_weights,
    weights)`` takes that object and returns ``[T, H]`` in ``hidden_states.dtype``: the weighted sum over this rank's experts
    (and intermediate slice) of each token's expert outputs. Errors: :class:`~moe_select.errors.RunnerInputError`."""

    # The scales are the core's own keyword-only parameters with defaults (``w13_scale=None``, ...: the names of
    # its formats' scales), passed by name (``MoeRunner.prepare_weights``); the Protocol states what every core
    # takes, so that a core with another required parameter or other positional ones does not match.
    def prepare_weights(self, w13: torch.Tensor, w2: torch.Tensor, /) -> W: ...

    def forward(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: W, /) -> torch.Tensor: ...


@runtime_checkable
class TokenDispatcher(Protocol):
    """Moves tokens to the ranks that hold their experts and the results back.

    Built as ``factory(spec, group)`` (``group``: the torch.distributed process group of the layer's
    ranks, or None on one rank). ``format`` is the dispatch format it hands the core; ``run(core,
    hidden_states, topk_ids, topk_weights, weights)`` returns ``[T, H]`` for the caller's tokens (see the
    a2a capability file for what "the caller's tokens" are). Errors:
    :class:`~moe_select.parallel.DispatchError`."""

    format: str

    def run(self, core: ExpertCore[Any], hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            weights: Any, /) -> torch.Tensor: ...


class CoreFactory(Protocol):
    """``(spec, device) -> ExpertCore``: a core class or a function."""

    def __call__(self, spec: LayerSpec, device: torch.device, /) -> ExpertCore[Any]: ...


class DispatcherFactory(Protocol):
    """``(spec, group) -> TokenDispatcher``: a dispatcher class or a function."""

    def __call__(self, spec: LayerSpec, group: Any, /) -> TokenDispatcher: ...


class Registrar(Protocol):
    """What an adapter module's ``register(registry)`` may call (:class:`~moe_select.registry.Registry`)."""

    def register_core(self, runner: str, dispatch_format: str, factory: CoreFactory) -> None: ...

    def register_dispatcher(self, a2a: str, factory: DispatcherFactory) -> None: ...

"""``a2a: none``: no token dispatch. Every rank sees every token and computes its local experts'
share; with tp or ep > 1 the outputs are partial sums (reduce them with
:func:`moe_select.parallel.all_reduce` unless the engine does)."""
from __future__ import annotations

from typing import Any


class NoDispatch:
    """Identity dispatcher: ``run`` calls the core directly on the local tokens."""

    format = "standard"

    def __init__(self, spec: Any, group: Any = None):
        self.spec = spec
        self.group = group

    def run(self, core: Any, hidden_states: Any, topk_ids: Any, topk_weights: Any, weights: Any) -> Any:
        return core.forward(hidden_states, topk_ids, topk_weights, weights)


def register(registry) -> None:
    """Register the identity dispatcher as ``none``."""
    registry.register_dispatcher("none", NoDispatch)

"""The explicit registry of expert compute cores and token dispatchers.

Nothing registers itself on import. An adapter module exposes ``register(registry)``; the resolver
imports the module named by the plan and calls it, then checks that every (a2a, runner) pair the
capability file promises is there. Registration is idempotent (the same factory twice is a no-op)
and thread-safe; a different factory under a taken key is an error naming both.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from .errors import MoeSelectError


class RegistrationError(MoeSelectError):
    """Two different factories claimed the same (a2a, runner) pair or dispatcher name."""


def _name(f: Any) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


class Registry:
    """(a2a, runner) -> core factory, and a2a -> dispatcher factory.

    A core factory is called as ``factory(spec: LayerSpec, device)`` and returns an object with
    ``prepare_weights(w13, w2, **scales)`` and ``forward(hidden_states, topk_ids, topk_weights, weights)``.
    A dispatcher factory is called as ``factory(spec, group)`` and returns an object with
    ``run(core, hidden_states, topk_ids, topk_weights, weights)``.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cores: dict[tuple[str, str], Callable[..., Any]] = {}
        self._dispatchers: dict[str, Callable[..., Any]] = {}
        self.loaded_modules: set[str] = set()

    def register_core(self, runner: str, a2a: str, factory: Callable[..., Any]) -> None:
        """Register ``factory`` as the core of ``runner`` for dispatch from ``a2a``."""
        with self._lock:
            old = self._cores.get((a2a, runner))
            if old is not None and old is not factory:
                raise RegistrationError(f"({a2a}, {runner}) is registered to {_name(old)}; {_name(factory)} tried to take it")
            self._cores[(a2a, runner)] = factory

    def register_dispatcher(self, a2a: str, factory: Callable[..., Any]) -> None:
        """Register ``factory`` as the token dispatcher of all-to-all backend ``a2a``."""
        with self._lock:
            old = self._dispatchers.get(a2a)
            if old is not None and old is not factory:
                raise RegistrationError(f"dispatcher {a2a} is registered to {_name(old)}; {_name(factory)} tried to take it")
            self._dispatchers[a2a] = factory

    def core(self, runner: str, a2a: str) -> Callable[..., Any] | None:
        """The core factory registered for (``a2a``, ``runner``), or None."""
        with self._lock:
            return self._cores.get((a2a, runner))

    def dispatcher(self, a2a: str) -> Callable[..., Any] | None:
        """The dispatcher factory registered for ``a2a``, or None."""
        with self._lock:
            return self._dispatchers.get(a2a)

    def pairs(self) -> set[tuple[str, str]]:
        """Every registered (a2a, runner) pair."""
        with self._lock:
            return set(self._cores)


#: The process-wide registry that ``resolve`` fills.
REGISTRY = Registry()

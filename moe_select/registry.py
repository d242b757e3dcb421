"""The explicit registry of expert compute cores and token dispatchers.

Cores are keyed by (runner, dispatch format) -- ``standard`` (token-major) or ``batched`` (expert-major;
:mod:`moe_select.contracts`) -- and dispatchers by all-to-all backend name, so a new all-to-all that hands
over an existing format needs no runner change. Nothing registers itself on import. An adapter module
exposes ``register(registry)``; the resolver imports the module named by the plan and calls it, then
checks that every format the capability file promises is there. Registration is idempotent (the same
factory twice is a no-op) and thread-safe; a different factory under a taken key is an error naming both.
"""
from __future__ import annotations

import threading

from typing import TYPE_CHECKING

from .contracts import DISPATCH_FORMATS, CoreFactory, DispatcherFactory
from .errors import MoeSelectError


class RegistrationError(MoeSelectError):
    """Two different factories claimed the same (runner, format) or dispatcher name, or a format is unknown."""


def _name(f: object) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


class Registry:
    """(runner, dispatch format) -> core factory, and a2a name -> dispatcher factory.

    A core factory is called as ``factory(spec: LayerSpec, device)`` and returns an
    :class:`~moe_select.contracts.ExpertCore`; a dispatcher factory as ``factory(spec, group)`` and
    returns a :class:`~moe_select.contracts.TokenDispatcher` (``format`` says which cores it feeds).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cores: dict[tuple[str, str], CoreFactory] = {}
        self._dispatchers: dict[str, DispatcherFactory] = {}
        self.loaded_modules: set[str] = set()
        #: Module -> the (runner, dispatch format) cores its ``register(registry)`` registered at its last call
        #: (:meth:`recording`): what a refusal names, whatever else the process registered.
        self.registered_by: dict[str, list[tuple[str, str]]] = {}

    def recording(self, module: str, owns: frozenset[str] | None = None) -> "_Recording":
        """A registrar that forwards to this registry and records, under ``module``, the cores registered through it.
        ``owns``: the runners whose capability files name ``module`` (None: any); a core for another runner is a
        :class:`RegistrationError` before the registry is touched (a plugin that registered under a runner it does
        not own took that runner from its own module for the rest of the process: break53)."""
        self.registered_by[module] = []
        return _Recording(self, self.registered_by[module], module, owns)

    def unregister_core(self, runner: str, dispatch_format: str, factory: CoreFactory) -> None:
        """Remove (``runner``, ``dispatch_format``) where ``factory`` holds it (a module whose ``register`` failed
        midway takes back what it registered); a key another factory holds is left alone."""
        with self._lock:
            if self._cores.get((runner, dispatch_format)) is factory:
                del self._cores[(runner, dispatch_format)]

    def unregister_dispatcher(self, a2a: str, factory: DispatcherFactory) -> None:
        """Remove dispatcher ``a2a`` where ``factory`` holds it."""
        with self._lock:
            if self._dispatchers.get(a2a) is factory:
                del self._dispatchers[a2a]

    def register_core(self, runner: str, dispatch_format: str, factory: CoreFactory) -> None:
        """Register ``factory`` as ``runner``'s core for ``dispatch_format`` (``standard`` or ``batched``).
        Raises :class:`RegistrationError` for an unknown format or a key another factory holds."""
        if dispatch_format not in DISPATCH_FORMATS:
            raise RegistrationError(f"{_name(factory)}: dispatch format {dispatch_format!r} is not one of "
                                    f"{', '.join(DISPATCH_FORMATS)}")
        with self._lock:
            old = self._cores.get((runner, dispatch_format))
            if old is not None and old is not factory:
                raise RegistrationError(f"({runner}, {dispatch_format}) is registered to {_name(old)}; {_name(factory)} tried to take it")
            self._cores[(runner, dispatch_format)] = factory

    def register_dispatcher(self, a2a: str, factory: DispatcherFactory) -> None:
        """Register ``factory`` as the token dispatcher of all-to-all backend ``a2a``."""
        with self._lock:
            old = self._dispatchers.get(a2a)
            if old is not None and old is not factory:
                raise RegistrationError(f"dispatcher {a2a} is registered to {_name(old)}; {_name(factory)} tried to take it")
            self._dispatchers[a2a] = factory

    def core(self, runner: str, dispatch_format: str) -> CoreFactory | None:
        """The core factory registered for (``runner``, ``dispatch_format``), or None."""
        with self._lock:
            return self._cores.get((runner, dispatch_format))

    def dispatcher(self, a2a: str) -> DispatcherFactory | None:
        """The dispatcher factory registered for ``a2a``, or None."""
        with self._lock:
            return self._dispatchers.get(a2a)

    def pairs(self) -> set[tuple[str, str]]:
        """Every registered (runner, dispatch format)."""
        with self._lock:
            return set(self._cores)


#: The process-wide registry that ``resolve`` fills.
REGISTRY = Registry()


if TYPE_CHECKING:  # pragma: no cover - mypy: a Registry is what an adapter's register(registry: Registrar) is given
    from .contracts import Registrar

    def _is_a_registrar(registry: Registry) -> Registrar:
        return registry


class _Recording:
    """What :meth:`Registry.recording` returns: a :class:`~moe_select.contracts.Registrar` that forwards every
    registration to the registry and appends the cores' ``(runner, dispatch format)`` to ``made``; refuses a core for
    a runner outside ``owns`` (None: any); :meth:`undo` takes back what this registrar added."""

    def __init__(self, registry: Registry, made: list[tuple[str, str]], module: str = "?",
                 owns: frozenset[str] | None = None) -> None:
        self._registry, self._made, self._module, self._owns = registry, made, module, owns
        #: what this registrar put in the registry (keys another factory held before are not its to take back)
        self._added_cores: list[tuple[str, str, CoreFactory]] = []
        self._added_dispatchers: list[tuple[str, DispatcherFactory]] = []

    def register_core(self, runner: str, dispatch_format: str, factory: CoreFactory) -> None:
        """Forward to :meth:`Registry.register_core`; recorded when it succeeds. Raises :class:`RegistrationError`
        for a runner this module does not own."""
        if self._owns is not None and runner not in self._owns:
            raise RegistrationError(f"{_name(factory)} registers a core for runner {runner!r}, whose capability file does "
                                    f"not name module {self._module} (this module implements "
                                    f"{', '.join(sorted(self._owns)) or 'no runner'})")
        new = self._registry.core(runner, dispatch_format) is None
        self._registry.register_core(runner, dispatch_format, factory)
        if new:
            self._added_cores.append((runner, dispatch_format, factory))
        self._made.append((runner, dispatch_format))

    def register_dispatcher(self, a2a: str, factory: DispatcherFactory) -> None:
        """Forward to :meth:`Registry.register_dispatcher`."""
        new = self._registry.dispatcher(a2a) is None
        self._registry.register_dispatcher(a2a, factory)
        if new:
            self._added_dispatchers.append((a2a, factory))

    def undo(self) -> None:
        """Take back every core and dispatcher this registrar added (its module's ``register`` failed)."""
        for runner, fmt, core in self._added_cores:
            self._registry.unregister_core(runner, fmt, core)
        for a2a, dispatcher in self._added_dispatchers:
            self._registry.unregister_dispatcher(a2a, dispatcher)
        self._added_cores.clear()
        self._added_dispatchers.clear()
        self._made.clear()

"""moe-select: choose, check and build the Mixture-of-Experts kernel backend of a deployment.

Planning (``explain``, ``plan``) is pure and imports no torch; ``resolve`` checks a plan against this
machine at engine startup and returns a ready :class:`~moe_select.runner.MoeRunner`.

    >>> import moe_select
    >>> report = moe_select.explain({"gpu": "H200", "quant": "bf16", "model": {...}, "tp": 8})
    >>> plan = moe_select.plan("deployment.yaml")          # or raises SelectionError
    >>> runner = moe_select.resolve(plan)                   # at startup, before weights load
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - what type checkers see of the lazy exports below (issue 19)
    from .catalog import load_catalog as load_catalog
    from .deployment import Deployment as Deployment
    from .errors import InputError as InputError
    from .errors import MoeSelectError as MoeSelectError
    from .errors import ResolveError as ResolveError
    from .errors import RunnerInputError as RunnerInputError
    from .errors import RunnerOutputError as RunnerOutputError
    from .errors import SelectionError as SelectionError
    from .plans import REASON_CODES as REASON_CODES
    from .plans import Plan as Plan
    from .plans import Reason as Reason
    from .report import Report as Report
    from .resolver import resolve as resolve
    from .resolver import resolve_layers as resolve_layers
    from .runner import MoeRunner as MoeRunner
    from .selector import explain as explain
    from .selector import plan as plan

_LAZY = {
    "explain": ("moe_select.selector", "explain"),
    "plan": ("moe_select.selector", "plan"),
    "resolve": ("moe_select.resolver", "resolve"),
    "resolve_layers": ("moe_select.resolver", "resolve_layers"),
    "Plan": ("moe_select.plans", "Plan"),
    "Report": ("moe_select.report", "Report"),
    "Reason": ("moe_select.plans", "Reason"),
    "REASON_CODES": ("moe_select.plans", "REASON_CODES"),
    "Deployment": ("moe_select.deployment", "Deployment"),
    "load_catalog": ("moe_select.catalog", "load_catalog"),
    "MoeRunner": ("moe_select.runner", "MoeRunner"),
    "MoeSelectError": ("moe_select.errors", "MoeSelectError"),
    "InputError": ("moe_select.errors", "InputError"),
    "SelectionError": ("moe_select.errors", "SelectionError"),
    "ResolveError": ("moe_select.errors", "ResolveError"),
    "RunnerInputError": ("moe_select.errors", "RunnerInputError"),
    "RunnerOutputError": ("moe_select.errors", "RunnerOutputError"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str) -> Any:
    # Lazy exports keep `import moe_select` light: the runner (torch) loads only when asked for.
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'moe_select' has no attribute {name!r}")

"""Backend adapters and their capability files (facts), installed as ``moe_select.backends``.

Each runner has ``<runner>.yaml`` (what it can do, with the source of every fact) and, where this
project ships an adapter, a module that registers its expert compute core explicitly through
``register(registry)``. All-to-all (token dispatcher) backends live in ``a2a/``.
"""
if __name__ != "moe_select.backends":  # pragma: no cover - exercised by tests/test_packaging.py
    raise ImportError(
        "backends is not a top-level module: import moe_select.backends (install with `pip install -e .`)"
    )

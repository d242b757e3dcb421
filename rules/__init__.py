"""Bundled selection policy (rule files), installed as ``moe_select.rules``."""
if not __name__.startswith("moe_select."):  # pragma: no cover
    raise ImportError("import moe_select.rules, not a bare top-level module")

"""JSON Schemas generated from the pydantic models, installed as ``moe_select.schemas``."""
if not __name__.startswith("moe_select."):  # pragma: no cover
    raise ImportError("import moe_select.schemas, not a bare top-level module")

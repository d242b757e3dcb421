"""All-to-all token dispatchers (a2a backends): capability files and the adapters this project ships."""
if not __name__.startswith("moe_select."):  # pragma: no cover
    raise ImportError("import moe_select.backends.a2a, not a bare top-level module")

"""Engine launch vocabularies (``moe_select.backends.engines``): the flag, environment and config-key tables
of SGLang, vLLM and TensorRT-LLM that :mod:`moe_select.launch_line` reads launch lines with, and the names
table (``names.yaml``: this project's runner and all-to-all names against each engine's own), all data,
validated by :mod:`moe_select.engine_tables`."""

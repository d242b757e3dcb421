"""JSON Schemas of the file formats, generated from the pydantic models (``schemas/*.schema.json``).

``moe-select schemas --write`` regenerates them; ``tests/test_schemas.py`` fails when the committed
files drift from the models. Rule and capability files reference them with a ``yaml-language-server``
modeline so editors validate as operators type.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .capability import A2ACapability, CommonFacts, PackageTable, RunnerCapability
from .deployment import Deployment
from .formats import FormatsFile
from .policy import RuleFile
from .plans import Plan
from .vocabulary import Vocabulary

SCHEMAS: dict[str, type[BaseModel]] = {
    "deployment": Deployment,
    "runner": RunnerCapability,
    "a2a": A2ACapability,
    "common": CommonFacts,
    "packages": PackageTable,
    "rules": RuleFile,
    "plan": Plan,
    "vocabulary": Vocabulary,
    "formats": FormatsFile,
}


#: The committed schemas are the JSON text that pydantic writes from this version on. Older versions (the
#: package supports pydantic >= 2.6) write the same schemas as other text (``allOf`` around a ``$ref``, no
#: ``type`` beside a ``const``), so they can neither check nor rewrite the committed files.
SCHEMA_TEXT_PYDANTIC = (2, 11)


def text_differs() -> str | None:
    """Why this install's pydantic cannot check or write the committed schema files (it is older than
    :data:`SCHEMA_TEXT_PYDANTIC`), or None when it can."""
    import pydantic

    have = tuple(int(p) for p in pydantic.VERSION.split(".")[:2])
    if have >= SCHEMA_TEXT_PYDANTIC:
        return None
    want = ".".join(map(str, SCHEMA_TEXT_PYDANTIC))
    return (f"the committed schemas are the JSON text pydantic >= {want} writes; pydantic {pydantic.VERSION} writes the same "
            f"models as other text, so it can neither check nor rewrite them: use pydantic >= {want} for moe-select schemas")


def _build_deferred() -> None:
    """Build every file model now (:class:`~moe_select.located.Located` defers its validator and serializer
    to the first validation). A schema encodes each field's default with the default's own serializer, and
    a deferred one is a placeholder: pydantic 2.13 raises ``TypeError: 'MockValSer' object is not an
    instance of 'SchemaSerializer'`` for ``Rule.when``'s default in a fresh process (2.14 builds it on
    the way)."""
    from .located import Located

    todo: list[type[BaseModel]] = [Located]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls is not Located:
            cls.model_rebuild(force=True)


def generate() -> dict[str, dict[str, Any]]:
    """``{file name: schema}`` for every format. Builds the deferred file models first (:func:`_build_deferred`)."""
    _build_deferred()
    out = {}
    for name, model in SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://moe-select.invalid/schemas/{name}.schema.json"
        out[f"{name}.schema.json"] = schema
    return out


def render(schema: dict[str, Any]) -> str:
    """Canonical text of a schema (sorted keys, 2-space indent, final newline)."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def schemas_dir() -> Path:
    """The installed ``schemas/`` directory."""
    import importlib

    return Path(importlib.import_module("moe_select.schemas").__file__ or ".").parent


def write(directory: Path | None = None) -> list[Path]:
    """Write every schema into ``directory`` (default: the installed ``schemas/``)."""
    d = directory or schemas_dir()
    paths = []
    for name, schema in generate().items():
        p = d / name
        p.write_text(render(schema), encoding="utf-8")
        paths.append(p)
    return paths


def drift(directory: Path | None = None) -> list[str]:
    """Names of the schema files that differ from the models (empty: in sync)."""
    d = directory or schemas_dir()
    return [name for name, schema in generate().items()
            if not (d / name).is_file() or (d / name).read_text(encoding="utf-8") != render(schema)]

"""Base class of every model read from a file: strict, frozen, unknown keys refused, marks kept."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from .yamlio import MarkedDict


class Located(BaseModel):
    """A strict pydantic model that remembers where it was read: ``where()`` gives ``file:line``.

    ``extra='forbid'`` makes unknown keys errors; ``strict=True`` refuses silent coercion (the YAML
    number 12.10 is never read as the version "12.1", "8" is never read as the integer 8).
    """

    #: ``defer_build``: a model's validator is built at its first validation, not at import (a catalog read
    #: from the on-disk cache is never validated again, so a planning process builds only what it validates).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, protected_namespaces=(), defer_build=True)

    _file: str = PrivateAttr("<input>")
    _line: int = PrivateAttr(0)
    _lines: dict = PrivateAttr(default_factory=dict)
    _sources: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_marks(cls, data: Any, handler: Any) -> Any:
        obj = handler(data)
        if isinstance(data, MarkedDict) and isinstance(obj, Located):
            obj._file, obj._line, obj._lines = data.file, data.line, dict(data.key_lines)
            obj._sources = dict(getattr(data, "key_sources", {}))
        return obj

    def source_of(self, field: str) -> str | None:
        """Where ``field`` was given: ``file:line``, a recorded source (e.g. ``command line (--tp)``),
        or None when it was not given (a default)."""
        if field in self._sources:
            return self._sources[field]
        if field in self._lines:
            return self.where(field)
        return None

    def where(self, field: str | None = None) -> str:
        """``file:line`` of this object, or of the key ``field`` inside it when given and known."""
        if field and field in self._sources:
            return self._sources[field]
        line = self._lines.get(field, self._line) if field else self._line
        return f"{self._file}:{line}" if line else self._file

    def relocate(self, file: str) -> None:
        """Set the display file name of this object and every Located object inside it."""
        self._file = file
        for value in self.__dict__.values():
            for item in value if isinstance(value, (list, tuple)) else value.values() if isinstance(value, dict) else [value]:
                if isinstance(item, Located):
                    item.relocate(file)

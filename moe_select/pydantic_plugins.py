"""pydantic's plugin lookup, kept off the planning commands' start-up path when no plugin can exist.

pydantic (2.6-2.14) looks for plugins (entry-point group ``pydantic``) when it builds its first validator,
in ``pydantic.plugin._loader.get_plugins``. That module imports :mod:`importlib.metadata` when it loads
(8-14 ms on a 2-CPU VM: ``email``, ``zipfile``, ``csv``) even when plugins are switched off with pydantic's
documented ``PYDANTIC_DISABLE_PLUGINS``, where ``get_plugins()`` returns ``()`` before using it.

:func:`skip_plugin_lookup` (called by ``moe-select``'s planning commands, never on import) switches them off
when no installed distribution declares the group, unless the user set the variable, and, while they are
off, puts :class:`_PluginsOff` in that module's place: its ``get_plugins()`` returns the same ``()``; any
other use of the module, or a call after the variable was changed, loads pydantic's own module in its place
and hands over to it. So behaviour is pydantic's own in every case; only the import is saved.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

ENV = "PYDANTIC_DISABLE_PLUGINS"
#: The values with which pydantic's ``get_plugins`` returns no plugins at all.
OFF = ("__all__", "1", "true")
LOADER = "pydantic.plugin._loader"


class _PluginsOff(types.ModuleType):
    """Stands in for ``pydantic.plugin._loader`` while ``$PYDANTIC_DISABLE_PLUGINS`` switches every plugin off."""

    def get_plugins(self) -> Any:
        if os.environ.get(ENV) in OFF:
            return ()
        return self._real().get_plugins()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (__path__, ...): a plain module has none
            raise AttributeError(name)
        return getattr(self._real(), name)

    def _real(self) -> types.ModuleType:
        if sys.modules.get(LOADER) is self:
            del sys.modules[LOADER]
        return importlib.import_module(LOADER)


def skip_plugin_lookup() -> bool:
    """Switch pydantic's plugins off when no distribution declares the ``pydantic`` entry-point group (the
    quick look of :mod:`moe_select.entrypoints`, exact in that direction) and the user did not set
    ``$PYDANTIC_DISABLE_PLUGINS``; while they are off, stand in for pydantic's plugin loader (module doc).
    Returns True when the stand-in is in place."""
    from .entrypoints import may_declare

    if ENV not in os.environ and not may_declare("pydantic"):
        os.environ[ENV] = "__all__"
    if os.environ.get(ENV) in OFF and LOADER not in sys.modules:
        sys.modules[LOADER] = _PluginsOff(LOADER)
        return True
    return False

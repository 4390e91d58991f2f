"""Target discovery: framework name -> :class:`~converter.targets.base.Target`.

The four built-in targets are listed by module path and imported on first use (keeps the CLI
fast).  Any other target registers itself with :func:`register` — a fifth framework is one new
package that calls ``converter.targets.register("name", TARGET)`` (plus its entries in the support
matrix, e.g. through ``--matrix-overlay``); nothing else changes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import BadInput
from .base import Target

_BUILTIN = {
    "tflite": "converter.targets.tflite",
    "tnn": "converter.targets.tnn",
    "mace": "converter.targets.mace",
    "coreml": "converter.targets.coreml",
}
#: name -> a Target, a module exposing ``TARGET``, or the dotted path of such a module.
_REGISTERED: dict[str, Target | ModuleType | str] = {}


def register(name: str, target: Target | ModuleType | str, replace: bool = False) -> None:
    """Make ``target`` the exporter for ``--to name``: a :class:`Target`, a module exposing
    ``TARGET``, or a module's dotted path (imported on first use)."""
    if not replace and (name in _BUILTIN or name in _REGISTERED):
        raise ValueError(f"a target named '{name}' is already registered")
    _REGISTERED[name] = target


def unregister(name: str) -> None:
    """Forget a target added with :func:`register` (the built-ins stay)."""
    _REGISTERED.pop(name, None)


def names() -> list[str]:
    return list(_BUILTIN) + [n for n in _REGISTERED if n not in _BUILTIN]


def get(name: str) -> Target:
    entry = _REGISTERED.get(name, _BUILTIN.get(name))
    if entry is None:
        raise BadInput(f"unknown target '{name}'; choose one of: {', '.join(names())}")
    if isinstance(entry, str):
        entry = importlib.import_module(entry)
    return entry.TARGET if isinstance(entry, ModuleType) else entry

"""Target registry: framework name -> module exposing ``TARGET`` (imported lazily)."""

from __future__ import annotations

import importlib

from ..errors import BadInput

_MODULES = {
    "tflite": "converter.targets.tflite",
    "tnn": "converter.targets.tnn",
    "mace": "converter.targets.mace",
    "coreml": "converter.targets.coreml",
}


def names() -> list[str]:
    return list(_MODULES)


def get(name: str):
    try:
        module = _MODULES[name]
    except KeyError:
        raise BadInput(f"unknown target '{name}'; choose one of: {', '.join(_MODULES)}") from None
    return importlib.import_module(module).TARGET

"""Option values that already have their type skip typer's Pydantic validation.

typer (>= 0.2x) coerces every parameter of a command through a Pydantic ``TypeAdapter``, built
per parameter on each run: importing Pydantic and building the adapters of ``edgeconv port``
cost ~0.1 s of a cold process, more than the port of a small model.  Almost every value edgeconv
receives needs no coercion: click hands a ``str`` option its string, a flag its bool, a
repeatable option a tuple of strings, and an unset option its default, already of its type.
For exactly those cases (plain ``str``/``bool``/``int``/``float``/``list[str]`` annotations, no
custom parser, no choices, paths or files, an ``int``/``float`` inside its ``min``/``max``) the
value is returned as typer's adapter would return it; anything else (a number given as text, a
value out of range, any other annotation) goes to typer's own coercion, built only then, so its
conversions and error messages are unchanged.

This leans on typer's internals (``typer.core._TyperParameter.get_runtime_param`` and
``typer._coercion.RuntimeParam``); with a typer that lacks them nothing is installed and typer
works as it ships.  tests/test_cli_coercion.py checks the values and errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_NOT_PLAIN = object()


def _plain_value(annotation, info, value):
    """``value`` as typer's adapter would return it, when it needs no conversion; else _NOT_PLAIN."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return _NOT_PLAIN
    if annotation is str:
        return value if type(value) is str else _NOT_PLAIN
    if annotation is bool:
        return value if type(value) is bool else _NOT_PLAIN
    if annotation is int or annotation is float:
        if type(value) is not annotation:
            return _NOT_PLAIN
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        if (low is not None and value < low) or (high is not None and value > high):
            return _NOT_PLAIN  # typer's adapter says why (or clamps)
        return value
    if annotation == list[str]:
        if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        return _NOT_PLAIN
    return _NOT_PLAIN


def install() -> bool:
    """Make typer's parameters try :func:`_plain_value` before building their adapter."""
    try:
        from typer import _coercion, core
    except ImportError:
        return False
    param_class = getattr(core, "_TyperParameter", None)
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if param_class is None or base is None or build is None or not hasattr(param_class, "get_runtime_param"):
        return False
    if getattr(param_class, "_edgeconv_plain_first", False):
        return True

    @dataclass(frozen=True)
    class PlainFirst(base):
        descriptor: Any = None

        def _coerce_value(self, value, param, ctx):
            plain = _plain_value(self.annotation, self.parameter_info, value)
            if plain is not _NOT_PLAIN:
                return plain
            if param._edgeconv_typer_runtime is None:
                param._edgeconv_typer_runtime = build(self.descriptor)
            return param._edgeconv_typer_runtime._coerce_value(value, param=param, ctx=ctx)

    original = param_class.get_runtime_param

    def get_runtime_param(self):
        if getattr(self, "_runtime_param", None) is not None:
            return self._runtime_param
        descriptor = getattr(self, "type_descriptor", None)
        if descriptor is None or any(getattr(descriptor, kind, True) for kind in ("is_file", "is_path", "is_choice")):
            return original(self)
        self._edgeconv_typer_runtime = None
        self._runtime_param = PlainFirst(parameter_info=descriptor.parameter_info,
                                         annotation=descriptor.annotation, descriptor=descriptor)
        return self._runtime_param

    param_class.get_runtime_param = get_runtime_param
    param_class._edgeconv_plain_first = True
    return True

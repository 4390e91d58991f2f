"""Reading ONNX node attributes the way every exporter needs them."""

from __future__ import annotations

from typing import Any

from ..ir.graph import attr


def text(value: Any) -> Any:
    """A string attribute as ``str`` (ONNX stores strings as bytes); other values unchanged."""
    return value.decode() if isinstance(value, bytes) else value


def str_attr(node, name: str, default: str | None = None) -> str | None:
    """The string attribute ``name`` of ``node`` (``default`` when absent)."""
    return text(attr(node, name, default))

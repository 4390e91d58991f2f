"""The ONNX op -> MIL mapping registry shared by the ``ops_*`` family modules.

A mapping is ``fn(ctx, node, out) -> MIL Var | list[Var] | np.ndarray``: ``ctx.value(tensor)`` is
the MIL Var or constant of an ONNX tensor, ``ctx.const(node, i, what)`` an input MIL needs at
build time, ``ctx.mb`` coremltools' builder; ``out`` is the MIL name for the node's first output.
"""

from __future__ import annotations

from typing import Callable

from ...errors import Unsupported
from ...graph import attr, static_shape

MAPPINGS: dict[str, Callable] = {}


def maps(*onnx_ops: str):
    """Register ``fn`` as the mapping of ``onnx_ops``."""
    def register(fn):
        for op in onnx_ops:
            MAPPINGS[op] = fn
        return fn

    return register


def output_shape(node, index: int = 0) -> list[int]:
    shape = static_shape(node.outputs[index])
    if shape is None:
        raise Unsupported(f"node '{node.name}' ({node.op}): output shape must be static for CoreML")
    return list(shape)


def input_shape(node, index: int = 0) -> list[int]:
    shape = static_shape(node.inputs[index])
    if shape is None:
        raise Unsupported(f"node '{node.name}' ({node.op}): input {index} shape must be static for CoreML")
    return list(shape)


def str_attr(node, name: str, default: str) -> str:
    value = attr(node, name, default)
    return value.decode() if isinstance(value, bytes) else value


def unsupported(node, what: str) -> Unsupported:
    return Unsupported(f"node '{node.name}' ({node.op}): {what}")

"""ONNX op -> MIL op(s): one small function per ONNX op, registered in ``MAPPINGS``.

Each function takes the build context (``ctx.value(tensor)`` = the MIL Var or constant of an ONNX
tensor, ``ctx.const(node, i, what)`` = an input MIL needs at build time, ``ctx.mb`` = coremltools'
builder) and the node, and returns the MIL Var(s) for the node's outputs, named ``out``.  The MIL
semantics followed are Apple's op specs (the op docstrings in apple/coremltools@e0e2f42
``coremltools/converters/mil/mil/ops/defs/iOS1x/*.py``).

The mappings live in family modules (``ops_elementwise``, ``ops_nn``, ``ops_tensor``,
``ops_indexing``, ``ops_vision``, ``ops_recurrent``); importing them registers them here.
"""

from __future__ import annotations

from . import ops_elementwise, ops_indexing, ops_nn, ops_recurrent, ops_tensor, ops_vision  # noqa: F401
from .mil_registry import MAPPINGS

__all__ = ["MAPPINGS", "supported_onnx_ops"]


def supported_onnx_ops() -> list[str]:
    return sorted(MAPPINGS)

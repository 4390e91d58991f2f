"""ONNX op -> MIL op(s): importing this module fills the CoreML registry :data:`OPS`.

One small function per ONNX op (``handler(ctx, node)``, see ``mil_registry.py``) binds the MIL
Var(s) for the node's outputs, named ``ctx.out``.  The MIL semantics followed are Apple's op specs
(the op docstrings in apple/coremltools@e0e2f42 ``coremltools/converters/mil/mil/ops/defs/iOS1x/*.py``).

The mappings live in family modules (``ops_elementwise``, ``ops_nn``, ``ops_tensor``,
``ops_indexing``, ``ops_vision``, ``ops_recurrent``); each registers its functions with
``@OPS.register(...)``.
"""

from __future__ import annotations

from . import ops_elementwise, ops_indexing, ops_nn, ops_recurrent, ops_tensor, ops_vision  # noqa: F401
from .mil_registry import OPS

__all__ = ["OPS", "supported_onnx_ops"]


def supported_onnx_ops() -> list[str]:
    return sorted(OPS)

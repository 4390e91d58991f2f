"""The MACE op registry: ONNX op -> op converter (``handler(em, node)``, ``em`` the
:class:`~.netdef_writer.Emitter`).  The family modules under ``ops/`` fill it."""

from __future__ import annotations

from ..registry import OpRegistry

OPS = OpRegistry("mace", title="MACE", missing="no MACE op for this ONNX op")

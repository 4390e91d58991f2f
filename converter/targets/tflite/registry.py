"""The TFLite op registry: ONNX op -> lowering function (``handler(Lw, node)``, ``Lw`` the
:class:`~.lower.Lowering`).  The family modules (``ops_*.py``) fill it; ``ops.py`` imports them all."""

from __future__ import annotations

from ..registry import OpRegistry

OPS = OpRegistry("tflite", title="TFLite", skip={"Constant"},
                 # fuse.py writes the Erf-GELU subgraph as one Gelu node (TFLite's builtin GELU)
                 foreign={"Gelu"},
                 missing="no TFLite builtin mapping (only builtin ops are written; no Flex)")

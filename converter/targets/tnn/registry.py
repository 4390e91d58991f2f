"""The TNN op registry: ONNX op -> layer converter (``handler(ctx, node)``, ``ctx`` the
:class:`~.context.ExportContext`).  The ``layers*.py`` family modules fill it."""

from __future__ import annotations

from ..registry import OpRegistry

# Constant: no layer.  A consumer reads the value through ``ctx.const`` and, where it is a blob,
# it goes to the .tnnmodel constant map (model_interpreter.cc InterpretModel).  TNN's own
# ``Const`` layer has an interpreter but no ``Layer`` (source/tnn/layer has no const_layer.cc),
# so it cannot run.
OPS = OpRegistry("tnn", title="TNN", skip={"Constant"}, missing="no TNN layer type for this op")

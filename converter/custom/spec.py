"""What a custom layer is made from: one ONNX node's op, attributes and static tensor shapes.

A :class:`CustomOp` is read once from the legalized graph and handed to every framework's
scaffold generator, so all of them agree on the layer's name, attribute kinds and shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from ..errors import Unsupported
from ..ir.graph import dtype_name, static_shape, constant_value

#: Ops with a complete reference kernel in ``kernels/``: op -> (header, check(attrs, op) -> why not | None).
KERNELS: dict[str, str] = {"GridSample": "gridsample.hpp", "Einsum": "einsum.hpp"}
_GRIDSAMPLE_MODES = ("bilinear", "linear", "nearest")


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    constant: np.ndarray | None = None


@dataclass
class CustomOp:
    node: str
    op: str
    domain: str
    attrs: dict[str, Any]            # sorted by name; int | float | str | list[int] | list[float]
    kinds: dict[str, str]            # name -> "int" | "float" | "string" | "ints" | "floats"
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    kernel: str | None = None        # header in kernels/ when edgeconv knows the op's math
    kernel_note: str = ""            # why the body must be filled in, when kernel is None
    skipped_attrs: list[str] = field(default_factory=list)

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op}" if self.domain else self.op

    @property
    def symbol(self) -> str:
        """A C/C++ identifier for the op ("GridSample", "ScaledTanh")."""
        clean = re.sub(r"[^A-Za-z0-9_]", "_", self.op)
        return clean if re.match(r"[A-Za-z_]", clean) else f"Op_{clean}"

    @property
    def slug(self) -> str:
        """File-name stem: the symbol in lower case."""
        return self.symbol.lower()


def _attr_kind(value) -> tuple[str, Any] | None:
    if isinstance(value, (bool, int, np.integer)):
        return "int", int(value)
    if isinstance(value, (float, np.floating)):
        return "float", float(value)
    if isinstance(value, bytes):
        return "string", value.decode()
    if isinstance(value, str):
        return "string", value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) for v in value):
            return "ints", [int(v) for v in value]
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
            return "floats", [float(v) for v in value]
    return None


def _tensor_spec(tensor: gs.Tensor, node: gs.Node) -> TensorSpec:
    value = constant_value(tensor)
    shape = tuple(value.shape) if value is not None else static_shape(tensor)
    if shape is None:
        raise Unsupported(f"custom layer for node '{node.name}' ({node.op}) needs static shapes; "
                          f"tensor '{tensor.name}' has {getattr(tensor, 'shape', None)}")
    dtype = str(value.dtype) if value is not None else (dtype_name(tensor) or "float32")
    return TensorSpec(tensor.name, tuple(int(d) for d in shape), dtype, value)


def _kernel_for(op: str, domain: str, attrs: dict, inputs: list[TensorSpec]) -> tuple[str | None, str]:
    if domain not in ("", "ai.onnx") or op not in KERNELS:
        return None, f"edgeconv has no reference kernel for {op}" + (f" (domain {domain})" if domain else "")
    if any(t.dtype != "float32" for t in inputs):
        return None, "the reference kernel is float32 only"
    if op == "GridSample":
        if attrs.get("mode", "bilinear") not in _GRIDSAMPLE_MODES:
            return None, f"GridSample mode '{attrs['mode']}' has no reference kernel (bilinear/nearest do)"
        if len(inputs[0].shape) != 4:
            return None, "the GridSample reference kernel is 4-D only"
    return KERNELS[op], ""


def read_custom_op(node: gs.Node) -> CustomOp:
    attrs, kinds, skipped = {}, {}, []
    for name in sorted(node.attrs):
        found = _attr_kind(node.attrs[name])
        if found is None:  # tensor / graph attributes have no plugin-parameter form
            skipped.append(name)
            continue
        kinds[name], attrs[name] = found
    inputs = [_tensor_spec(t, node) for t in node.inputs if t.name]
    outputs = [_tensor_spec(t, node) for t in node.outputs]
    domain = node.domain or ""
    kernel, note = _kernel_for(node.op, domain, attrs, inputs)
    return CustomOp(node.name, node.op, "" if domain == "ai.onnx" else domain, attrs, kinds, inputs,
                    outputs, kernel, note, skipped)

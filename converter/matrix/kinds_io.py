"""Constraint kinds about a node's outputs and its input -> output size ratio.

Compiled by :func:`converter.matrix.constraints.compile_constraint` like the other kinds: each
``compile_*`` validates the mapping and returns ``(test, text)``, where ``test(node, op)`` is None
when the node passes, else ``(known, what)``.
"""

from __future__ import annotations

import numpy as np

from .values import ConstraintError, _const, _static_shape, _tensor, _where, _where_text


def compile_unused_outputs(spec):
    """``{unused_outputs: [2]}``: output 2 is absent (empty name) or read by no node."""
    indices = spec["unused_outputs"]
    if not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                for i in indices):
        raise ConstraintError("'unused_outputs' must be a list of output indices")
    text = f"output(s) {indices} absent or unread"

    def test(node, op):
        # An output no node reads passes: torch leaves LSTM's Y_c dangling like that, and the
        # exporters skip it the same way.  (A graph output has no reader node either; the node
        # alone cannot tell, and the exporter then fails on the missing model output.)
        read = [i for i in indices if i < len(node.outputs) and node.outputs[i].name and node.outputs[i].outputs]
        return None if not read else (True, f"output(s) {read} read by another node")

    return test, text


def compile_scales(spec):
    """``{scales: N, exact: true}``: every scale (input N) x input dim == output dim, as a runtime
    that takes output *sizes* (and derives the scale from them) needs to match ONNX's grid, which
    uses the given scale; absent/empty scales pass (the sizes input sets the ratio itself).
    ``{scales: N, integer: true}``: every output dim is a whole multiple of the input dim."""
    where = _where(spec["scales"], "scales")
    tests = [k for k in ("exact", "integer") if k in spec]
    if not tests or any(spec[k] is not True for k in tests):
        raise ConstraintError("'scales' needs 'exact: true' and/or 'integer: true'")
    parts = []
    if spec.get("exact"):
        parts.append(f"scales ({_where_text(where)}) x input size == output size")
    if spec.get("integer"):
        parts.append("output size a whole multiple of the input size")
    text = " and ".join(parts)

    def test(node, op):
        in_shape = _static_shape(_tensor(node, 0))
        out_shape = _static_shape(_tensor(node, "output"))
        if in_shape is None or out_shape is None or len(in_shape) != len(out_shape):
            return (False, "input or output of unknown shape")
        if spec.get("integer") and any(i == 0 or o % i for i, o in zip(in_shape, out_shape)):
            return (True, f"resizes {list(in_shape)} to {list(out_shape)}")
        if spec.get("exact"):
            tensor = _tensor(node, where)
            scales = None if tensor is None else _const(tensor)
            if tensor is not None and scales is None:
                return (False, f"scales ({_where_text(where)}) computed at runtime")
            if scales is not None and scales.size:
                scales = [float(s) for s in np.asarray(scales).reshape(-1)]
                if len(scales) != len(in_shape) or any(float(i) * s != float(o)
                                                       for i, s, o in zip(in_shape, scales, out_shape)):
                    return (True, f"scales {scales} resize {list(in_shape)} to {list(out_shape)}")
        return None

    return test, text


def padding_only_taps(node, out_shape=None) -> list[tuple[int, int]] | None:
    """The (spatial axis, tap) pairs of a Conv whose every read falls in the padding (with
    explicit pads; ``auto_pad`` VALID has none); None when the shapes or kernel are not known.
    ``out_shape``: the output's, when the node no longer holds its output tensor."""
    x = _static_shape(_tensor(node, 0))
    y = _static_shape(_tensor(node, "output")) if out_shape is None else tuple(out_shape)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if x is None or y is None or len(x) < 3 or len(x) != len(y) or auto_pad not in ("NOTSET", "VALID"):
        return None
    spatial = len(x) - 2
    kernel = node.attrs.get("kernel_shape")
    if kernel is None:
        w = _static_shape(_tensor(node, 1)) if len(node.inputs) > 1 else None
        kernel = None if w is None else w[2:]
    if kernel is None:
        return None
    strides = node.attrs.get("strides", [1] * spatial)
    dilations = node.attrs.get("dilations", [1] * spatial)
    pads = [0] * (2 * spatial) if auto_pad == "VALID" else node.attrs.get("pads", [0] * (2 * spatial))
    out = []
    for axis in range(spatial):
        first = -int(pads[axis])
        last = first + (int(y[2 + axis]) - 1) * int(strides[axis])
        for tap in range(int(kernel[axis])):
            lo, hi = first + tap * int(dilations[axis]), last + tap * int(dilations[axis])
            if hi < 0 or lo >= int(x[2 + axis]):
                out.append((axis, tap))
    return out


def compile_taps(spec):
    """``{taps: inside}``: every kernel tap of a Conv reads at least one input element (a tap
    whose every read falls in the zero padding contributes nothing, and some kernels mishandle it)."""
    if spec["taps"] != "inside":
        raise ConstraintError("'taps' must be 'inside'")
    text = "every kernel tap reads the input (none only the padding)"

    def test(node, op):
        bad = padding_only_taps(node)
        if bad is None:
            return (False, "shapes, kernel or pads unknown")
        if not bad:
            return None
        axis, tap = bad[0]
        return (True, f"kernel tap {tap} of spatial axis {axis} reads only padding "
                      f"({len(bad)} such tap row(s)/column(s))")

    return test, text

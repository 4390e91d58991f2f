"""What the MACE reader's op handlers share: argument access, the ONNX graph being built, the
fused activations, and the table of handlers (:data:`OP_READERS`, MACE op type -> handler).

A handler is ``read(b, op, args, ins) -> list of output tensors``: ``b`` the :class:`Builder`,
``op`` the MACE ``OperatorDef``, ``args`` its :class:`Args`, ``ins`` the ONNX tensors of its
inputs.  ``reader.py`` and ``reader_extra_ops.py`` register them.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ..registry import OpRegistry

OP_READERS = OpRegistry("mace-reader", title="MACE reader")

#: MACE's NHWC axis -> the NCHW axis the CPU kernel uses (concat.cc:64-68, reduce.cc:101-106).
NHWC_TO_NCHW_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}


class Args:
    def __init__(self, op):
        self._by_name = {a.name: a for a in op.arg}

    def i(self, name, default):
        return int(self._by_name[name].i) if name in self._by_name else default

    def f(self, name, default):
        return float(self._by_name[name].f) if name in self._by_name else default

    def s(self, name, default):
        return self._by_name[name].s.decode() if name in self._by_name else default

    def ints(self, name, default=None):
        return [int(v) for v in self._by_name[name].ints] if name in self._by_name else default

    def floats(self, name, default=None):
        return [float(v) for v in self._by_name[name].floats] if name in self._by_name else default


class Builder:
    def __init__(self):
        self.nodes: list[gs.Node] = []
        self.values: dict[str, gs.Tensor] = {}
        self.counter = 0

    def fresh(self, base: str) -> gs.Variable:
        self.counter += 1
        return gs.Variable(f"{base}__r{self.counter}")

    def const(self, value, base="c") -> gs.Constant:
        self.counter += 1
        return gs.Constant(f"{base}__k{self.counter}", np.asarray(value))

    def node(self, op, inputs, out=None, **attrs) -> gs.Variable:
        out = out or self.fresh(op)
        self.nodes.append(gs.Node(op, name=f"n{len(self.nodes)}_{op}", attrs=attrs, inputs=inputs, outputs=[out]))
        return out


def rank_hint(tensor):
    if isinstance(tensor, gs.Constant):
        return tensor.values.ndim
    return None if tensor.shape is None else len(tensor.shape)


def rank_of(tensor, what):
    rank = rank_hint(tensor)
    if rank is None:
        raise ValueError(f"{what} needs the rank of its input (output_shape missing upstream)")
    return rank


def fused_activation(b, args, x):
    """Fused activation of Conv2D/Deconv2D/FullyConnected (``activation`` default NOOP)."""
    kind = args.s("activation", "NOOP")
    return apply_activation(b, kind, args, x, None)


def apply_activation(b, kind, args, x, alpha):
    coef = args.f("activation_coefficient", 0.0)
    if kind == "NOOP":
        return x
    if kind == "RELU":
        return b.node("Relu", [x])
    if kind == "RELUX":  # min(max(x, 0), max_limit)
        return b.node("Clip", [x, b.const(np.float32(0)), b.const(np.float32(args.f("max_limit", 0.0)))])
    if kind == "LEAKYRELU":
        return b.node("LeakyRelu", [x], alpha=coef)
    if kind == "ELU":
        return b.node("Elu", [x], alpha=coef)
    if kind == "TANH":
        return b.node("Tanh", [x])
    if kind == "SIGMOID":
        return b.node("Sigmoid", [x])
    if kind == "HARDSIGMOID":
        return b.node("HardSigmoid", [x], alpha=args.f("hardsigmoid_alpha", 0.0),
                      beta=args.f("hardsigmoid_beta", 0.0))
    if kind == "PRELU":  # one slope per channel of NCHW (activation.h PReLUActivation)
        slope = b.node("Reshape", [alpha, b.const(np.array([-1, 1, 1], np.int64))])
        return b.node("PRelu", [x, slope])
    raise ValueError(f"activation '{kind}' not modelled")

"""Named subgraph patterns a matrix constraint can require: ``{pattern: gelu_erf}``.

Some targets have no kernel for an op on its own but do for a pattern that contains it: TFLite has
no ERF builtin, yet its exporter turns the exact-GELU subgraph into the builtin GELU.  The matrix
says so declaratively (``Erf: {supported: [cpu], constraints: [{pattern: gelu_erf}]}``); this
module maps the *name* to a finder that looks only at the node's neighbours (the producer and
consumer links of its tensors), so it runs inside :meth:`Matrix.check_node` without the graph.

A pattern is defined once and serves both sides: :meth:`Pattern.match` answers the matrix
constraint ("does this node sit inside the pattern?") and :meth:`Pattern.find` hands an exporter
the matched subgraph (its nodes, the tensor it reads and the tensor it computes) to rewrite —
``converter/targets/tflite/fuse.py:fuse_gelu`` fuses exactly what ``gelu_erf`` finds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np


@dataclass(frozen=True)
class Match:
    """One occurrence of a pattern: its nodes (in data-flow order), what it reads and computes."""

    nodes: tuple
    input: object
    output: object


#: ``find(anchor, keep) -> Match | None``; ``keep``: names of tensors that must stay visible (graph
#: outputs), so a subgraph whose intermediate is one of them does not match.
Finder = Callable[..., "Match | None"]


@dataclass(frozen=True)
class Pattern:
    name: str
    #: what a reader sees in reasons, e.g. "the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2)))"
    title: str
    #: op types the pattern can be checked from (the constraint's node)
    anchors: tuple[str, ...]
    find: Finder

    def match(self, node) -> bool:
        """Does ``node`` sit inside the pattern?  (The matrix constraint; it cannot see graph
        outputs, which only :meth:`find`'s ``keep`` can rule out.)"""
        return self.find(node) is not None


PATTERNS: dict[str, Pattern] = {}


def pattern(name: str, title: str, anchors: tuple[str, ...]):
    """Register ``find(node, keep=frozenset()) -> Match | None`` as the pattern ``name``."""

    def register(fn: Finder) -> Finder:
        PATTERNS[name] = Pattern(name, title, anchors, fn)
        return fn

    return register


# ----------------------------------------------------------------------------- helpers


def _producer(tensor):
    producers = getattr(tensor, "inputs", None) or []
    return producers[0] if len(producers) == 1 else None


def _sole_consumer(tensor, keep=frozenset()):
    consumers = getattr(tensor, "outputs", None) or []
    return consumers[0] if len(consumers) == 1 and tensor.name not in keep else None


def _scalar(tensor) -> float | None:
    from ..ir.graph import constant_value

    value = constant_value(tensor)
    if value is None or np.asarray(value).size != 1:
        return None
    return float(np.asarray(value).reshape(()))


def _close(tensor, want: float) -> bool:
    value = _scalar(tensor)
    return value is not None and math.isclose(value, want, rel_tol=1e-4)


def _other(node, tensor):
    return node.inputs[1] if node.inputs[0] is tensor else node.inputs[0]


# ----------------------------------------------------------------------------- patterns


@pattern("gelu_erf", "the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2)))", ("Erf",))
def gelu_erf(erf, keep=frozenset()) -> Match | None:
    """The exact GELU as torch exports it, seen from its Erf::

        u = Div(x, √2) | Mul(x, 1/√2)      (u read only by the Erf)
        e = Erf(u);  a = Add(e, 1)         (e read only by the Add)
        y = Mul(Mul(x, a), 0.5)   or   y = Mul(Mul(x, 0.5), a)   (a read only by the first Mul)

    Constants match within a relative 1e-4.  The match is (pre, Erf, Add, Mul, Mul), x and y.
    """
    if erf.op != "Erf" or len(erf.inputs) != 1 or len(erf.outputs) != 1:
        return None
    scaled = erf.inputs[0]
    pre = _producer(scaled)
    if pre is None or _sole_consumer(scaled, keep) is not erf or pre.op not in ("Div", "Mul") or len(pre.inputs) != 2:
        return None
    if not _close(pre.inputs[1], math.sqrt(2.0) if pre.op == "Div" else 1.0 / math.sqrt(2.0)):
        return None
    x = pre.inputs[0]
    add = _sole_consumer(erf.outputs[0], keep)
    if add is None or add.op != "Add" or len(add.inputs) != 2 or not _close(_other(add, erf.outputs[0]), 1.0):
        return None
    mul1 = _sole_consumer(add.outputs[0], keep)
    if mul1 is None or mul1.op != "Mul" or len(mul1.inputs) != 2:
        return None
    other = _other(mul1, add.outputs[0])
    if other is x:  # y = Mul(Mul(x, a), 0.5)
        mul2 = _sole_consumer(mul1.outputs[0], keep)
        if (mul2 is None or mul2.op != "Mul" or len(mul2.inputs) != 2
                or not _close(_other(mul2, mul1.outputs[0]), 0.5)):
            return None
        return Match((pre, erf, add, mul1, mul2), x, mul2.outputs[0])
    half = _producer(other)  # y = Mul(Mul(x, 0.5), a)
    if (half is None or half.op != "Mul" or _sole_consumer(other, keep) is not mul1 or len(half.inputs) != 2
            or x not in half.inputs or not _close(_other(half, x), 0.5)):
        return None
    return Match((pre, erf, add, half, mul1), x, mul1.outputs[0])


@pattern("output_padding_in_end_pads",
         "a ConvTranspose whose output_padding is at most its end pads (a smaller crop)", ("ConvTranspose",))
def output_padding_in_end_pads(node, keep=frozenset()) -> Match | None:
    """A one-node pattern: ``output_padding[i] <= pads[end_i]`` on every axis, so the extra rows are
    real transposed-convolution outputs the exporter keeps by cropping less (CoreML's and TNN's
    exporters do exactly that).  Beyond the end pad the rows hold only the bias: the planner's
    ``convtranspose_output_padding_to_pad`` rule adds them with a Pad."""
    from ..ir.graph import attr

    whole = Match((node,), node.inputs[0], node.outputs[0])
    adj = [int(a) for a in (attr(node, "output_padding") or [])]
    if not any(adj):
        return whole
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = [int(p) for p in (attr(node, "pads") or [0] * (2 * len(adj)))]
    if auto_pad not in ("NOTSET",) or attr(node, "output_shape") is not None:
        return None
    return whole if all(a <= pads[len(adj) + i] for i, a in enumerate(adj)) else None


def width_broadcast_first(node) -> bool:
    """Is ``node`` a binary op whose *first* operand is broadcast along all but the last axis of a
    4-D output with one channel and several rows ([1, 1, 1, W] against [N, 1, H, W])?"""
    from ..ir.graph import static_shape

    if len(node.inputs) != 2:
        return False
    a, b, out = (static_shape(t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if a is None or b is None or out is None or len(out) != 4 or len(a) > 4:
        return False
    a4 = (1,) * (4 - len(a)) + tuple(a)
    return a4[:3] == (1, 1, 1) and a4[3] == out[3] and out[1] == 1 and out[2] > 1 and tuple(a4) != tuple(out)


@pattern("broadcast_operand_not_first_over_rows",
         "a binary op whose first operand is not a [1, 1, 1, W] broadcast over a one-channel [N, 1, H, W]",
         ("Add", "Sub", "Mul", "Div", "Max", "Min"))
def broadcast_operand_not_first_over_rows(node, keep=frozenset()) -> Match | None:
    """A one-node pattern that holds unless :func:`width_broadcast_first`: TNN's x86 binary kernel
    picks the broadcast operand of a width broadcast by comparing the channel dims
    (x86_binary_op_layer_acc.cc:156-161, ``dims0[1] < dims1[1]``), which are equal (1) here, so it
    reads the [1, 1, 1, W] operand as if it were [N, 1, H, W]."""
    return None if width_broadcast_first(node) else Match((node,), node.inputs[0], node.outputs[0])


#: Ops the TFLite exporter runs in NHWC, and ops it runs in whatever layout their input has
#: (converter/targets/tflite/__init__.py ``_NHWC_OPS`` / ``_LAYOUT_FREE_OPS``).
_NHWC_CONSUMERS = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "Resize", "DepthToSpace", "SpaceToDepth"}
_ANY_LAYOUT = {"Add", "Sub", "Mul", "Div", "Relu", "Clip", "PRelu", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish",
               "BatchNormalization", "Identity"}
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _reaches_nhwc_ops(tensor, depth: int = 6) -> bool:
    """Every reader of ``tensor`` runs in NHWC, directly or through ops of any layout."""
    readers = getattr(tensor, "outputs", None) or []
    return bool(readers) and all(
        (r.op in _NHWC_CONSUMERS and r.inputs[0] is tensor)
        or (depth and r.op in _ANY_LAYOUT and all(_reaches_nhwc_ops(o, depth - 1) for o in r.outputs))
        for r in readers)


@pattern("interface_layout",
         "a Transpose that only relabels the layout at the model's interface (NHWC image in -> NCHW convolutions, "
         "or NCHW -> NHWC out): edgeconv's TFLite file stores the tensor NHWC and writes no TRANSPOSE",
         ("Transpose",))
def interface_layout(node, keep=frozenset()) -> Match | None:
    """``input (NHWC) -> Transpose[0,3,1,2] -> NHWC ops`` or ``... -> Transpose[0,2,3,1] -> output``:
    the layout a TensorFlow model's import adds around an NCHW graph (tf2onnx).  The TFLite exporter
    relabels a Transpose instead of moving data (converter/targets/tflite/layout.py ``relabel``), and
    stores those tensors NHWC anyway, so the file has no op for it."""
    if node.op != "Transpose" or len(node.inputs) != 1:
        return None
    perm = list(node.attrs.get("perm") or [])
    source, result = node.inputs[0], node.outputs[0]
    is_input = not getattr(source, "inputs", None) and getattr(source, "values", None) is None
    is_output = not getattr(result, "outputs", None)
    if perm == _TO_NCHW and is_input and _reaches_nhwc_ops(result):
        return Match((node,), source, result)
    if perm == _TO_NHWC and is_output and (_producer(source) is not None and _producer(source).op in
                                            _NHWC_CONSUMERS | _ANY_LAYOUT):
        return Match((node,), source, result)
    return None

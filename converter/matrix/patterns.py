"""Named subgraph patterns a matrix constraint can require: ``{pattern: gelu_erf}``.

Some targets have no kernel for an op on its own but do for a pattern that contains it: TFLite has
no ERF builtin, yet its exporter turns the exact-GELU subgraph into the builtin GELU.  The matrix
says so declaratively (``Erf: {supported: [cpu], constraints: [{pattern: gelu_erf}]}``); this
module maps the *name* to a matcher that looks only at the node's neighbours (the producer and
consumer links of its tensors), so it runs inside :meth:`Matrix.check_node` without the graph.

A matcher returns True when the node sits inside the pattern.  Each pattern documents the
subgraph it accepts; keep it the same set of forms the exporter that relies on it rewrites
(tests/test_matrix.py checks ``gelu_erf`` against ``converter.targets.tflite.fuse.fuse_gelu``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Pattern:
    name: str
    #: what a reader sees in reasons, e.g. "the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2)))"
    title: str
    #: op types the pattern can be checked from (the constraint's node)
    anchors: tuple[str, ...]
    match: Callable[[object], bool]


PATTERNS: dict[str, Pattern] = {}


def pattern(name: str, title: str, anchors: tuple[str, ...]):
    """Register ``fn(node) -> bool`` as the matcher of the pattern ``name``."""

    def register(fn: Callable[[object], bool]) -> Callable[[object], bool]:
        PATTERNS[name] = Pattern(name, title, anchors, fn)
        return fn

    return register


# ----------------------------------------------------------------------------- helpers


def _producer(tensor):
    producers = getattr(tensor, "inputs", None) or []
    return producers[0] if len(producers) == 1 else None


def _sole_consumer(tensor):
    consumers = getattr(tensor, "outputs", None) or []
    return consumers[0] if len(consumers) == 1 else None


def _scalar(tensor) -> float | None:
    from ..graph import constant_value

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
def gelu_erf(erf) -> bool:
    """The exact GELU as torch exports it, seen from its Erf::

        u = Div(x, √2) | Mul(x, 1/√2)      (u read only by the Erf)
        e = Erf(u);  a = Add(e, 1)         (e read only by the Add)
        y = Mul(Mul(x, a), 0.5)   or   y = Mul(Mul(x, 0.5), a)   (a read only by the first Mul)

    These are the forms ``converter/targets/tflite/fuse.py:fuse_gelu`` turns into one GELU.
    """
    if erf.op != "Erf" or len(erf.inputs) != 1 or len(erf.outputs) != 1:
        return False
    scaled = erf.inputs[0]
    pre = _producer(scaled)
    if pre is None or _sole_consumer(scaled) is not erf or pre.op not in ("Div", "Mul") or len(pre.inputs) != 2:
        return False
    if not _close(pre.inputs[1], math.sqrt(2.0) if pre.op == "Div" else 1.0 / math.sqrt(2.0)):
        return False
    x = pre.inputs[0]
    add = _sole_consumer(erf.outputs[0])
    if add is None or add.op != "Add" or len(add.inputs) != 2 or not _close(_other(add, erf.outputs[0]), 1.0):
        return False
    mul1 = _sole_consumer(add.outputs[0])
    if mul1 is None or mul1.op != "Mul" or len(mul1.inputs) != 2:
        return False
    other = _other(mul1, add.outputs[0])
    if other is x:  # y = Mul(Mul(x, a), 0.5)
        mul2 = _sole_consumer(mul1.outputs[0])
        return (mul2 is not None and mul2.op == "Mul" and len(mul2.inputs) == 2
                and _close(_other(mul2, mul1.outputs[0]), 0.5))
    half = _producer(other)  # y = Mul(Mul(x, 0.5), a)
    return (half is not None and half.op == "Mul" and _sole_consumer(other) is mul1 and len(half.inputs) == 2
            and x in half.inputs and _close(_other(half, x), 0.5))


@pattern("output_padding_in_end_pads",
         "a ConvTranspose whose output_padding is at most its end pads (a smaller crop)", ("ConvTranspose",))
def output_padding_in_end_pads(node) -> bool:
    """A one-node pattern: ``output_padding[i] <= pads[end_i]`` on every axis, so the extra rows are
    real transposed-convolution outputs the exporter keeps by cropping less (CoreML's and TNN's
    exporters do exactly that).  Beyond the end pad the rows hold only the bias: the planner's
    ``convtranspose_output_padding_to_pad`` rule adds them with a Pad."""
    from ..graph import attr

    adj = [int(a) for a in (attr(node, "output_padding") or [])]
    if not any(adj):
        return True
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = [int(p) for p in (attr(node, "pads") or [0] * (2 * len(adj)))]
    if auto_pad not in ("NOTSET",) or attr(node, "output_shape") is not None:
        return False
    return all(a <= pads[len(adj) + i] for i, a in enumerate(adj))

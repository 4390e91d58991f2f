"""Normalizations: BatchNormalization-7/9 (inference outputs only), GroupNormalization-18/21
and RMSNormalization-23 in the opset-17 ops torch's exporter writes for them."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, constant_value
from .base import Unadaptable, adapter, positive_axes, rank_of, shape_of


@adapter("BatchNormalization", 7, 9)
def batchnorm_inference_outputs(rw, node: gs.Node) -> None:
    """BatchNormalization-7/9 → -15: inference reads only Y; ``spatial=1`` (per channel, -7's
    default) is what -15 does.

    before: x ─► BatchNormalization(x, scale, B, mean, var; epsilon, momentum, spatial=1) ─► Y[, mean, var, …]
    after:  x ─► BatchNormalization(x, scale, B, mean, var; epsilon, momentum) ─► Y
    """
    if int(node.attrs.pop("spatial", 1)) != 1:
        raise Unadaptable("spatial=0 (statistics per element, not per channel) has no opset-17 form")
    if any(out.outputs for out in node.outputs[1:]):
        raise Unadaptable("its running statistics are read (training mode)")
    while len(node.outputs) > 1:
        node.outputs.pop()


@adapter("BatchNormalization", 14)
def batchnorm14_inference(rw, node: gs.Node) -> None:
    """BatchNormalization-14 → -15 (types only), in inference mode.

    before: x ─► BatchNormalization(…; training_mode=0) ─► Y
    after:  the same node
    """
    if int(attr(node, "training_mode", 0)):
        raise Unadaptable("training_mode=1")


@adapter("GroupNormalization", 18)
def groupnorm18_as_instancenorm(rw, node: gs.Node) -> None:
    """GroupNormalization-18 → the opset-17 form torch exports nn.GroupNorm as: each group an
    instance of InstanceNormalization; -18's scale and bias are per group.

    before: x[N,C,…] ─► GroupNormalization(x, scale[G], bias[G]; num_groups=G, epsilon) ─► y
    after:  x ─► Reshape[N,G,-1] ─► InstanceNormalization(ones(G), zeros(G); epsilon)
              ─► Mul(scale[G,1]) ─► Add(bias[G,1]) ─► Reshape(shape of x) ─► y
    """
    _groupnorm(rw, node, per_group=True)


@adapter("GroupNormalization", 21)
def groupnorm21_as_instancenorm(rw, node: gs.Node) -> None:
    """GroupNormalization-21 → opset 17 as for -18; -21's scale and bias are per channel.

    before: x[N,C,…] ─► GroupNormalization(x, scale[C], bias[C]; num_groups=G, epsilon) ─► y
    after:  x ─► Reshape[N,G,-1] ─► InstanceNormalization(ones(G), zeros(G); epsilon)
              ─► Reshape(shape of x) ─► Mul(scale[C,1,…]) ─► Add(bias[C,1,…]) ─► y
    """
    if int(attr(node, "stash_type", 1)) != 1 and str(node.inputs[0].dtype) != "float32":
        raise Unadaptable("stash_type other than float32 for a non-float32 input")
    _groupnorm(rw, node, per_group=False)


def _groupnorm(rw, node: gs.Node, per_group: bool) -> None:
    x, scale, bias = node.inputs[:3]
    groups, eps = int(attr(node, "num_groups")), float(attr(node, "epsilon", 1e-5))
    shape = shape_of(x)
    grouped = rw.reshape(x, [shape[0], groups, -1])
    normed = rw.emit("InstanceNormalization", [grouped, rw.const("ones", np.ones(groups)),
                                               rw.const("zeros", np.zeros(groups))], {"epsilon": eps})
    if per_group:
        affine = rw.emit("Add", [rw.emit("Mul", [normed, _column(rw, scale, 2)]), _column(rw, bias, 2)])
        rw.out("Reshape", [affine, rw.ints("shape", shape)])
        return
    back = rw.reshape(normed, list(shape))
    rw.out("Add", [rw.emit("Mul", [back, _column(rw, scale, len(shape) - 1)]), _column(rw, bias, len(shape) - 1)])


def _column(rw, tensor, rank: int):
    """A 1-D tensor [K] as [K, 1, …] of ``rank`` dimensions, to broadcast over the axes after K."""
    value = constant_value(tensor)
    if value is not None:
        return rw.const("affine", np.asarray(value).reshape([-1] + [1] * (rank - 1)), dtype=np.asarray(value).dtype)
    return rw.emit("Unsqueeze", [tensor, rw.ints("axes", list(range(1, rank)))])


@adapter("RMSNormalization", 23)
def rmsnorm_as_reducemean(rw, node: gs.Node) -> None:
    """before: x ─► RMSNormalization(x, scale; axis, epsilon) ─► y
    after:  x ─► Div(x, Sqrt(Add(ReduceMean(Mul(x, x); axes=[axis…]), epsilon))) ─► Mul(scale) ─► y
    """
    x, scale = node.inputs[:2]
    rank = rank_of(x)
    axis = positive_axes([int(attr(node, "axis", -1))], rank)[0]
    mean = rw.reduce("ReduceMean", rw.emit("Mul", [x, x]), list(range(axis, rank)))
    root = rw.emit("Sqrt", [rw.emit("Add", [mean, rw.scalar(float(attr(node, "epsilon", 1e-5)))])])
    rw.out("Mul", [rw.emit("Div", [x, root]), scale])

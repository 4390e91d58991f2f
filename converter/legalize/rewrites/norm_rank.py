"""Normalizations on a 2-D, 3-D or 5-D input run on a 4-D view of it (exact: a reshape moves no data).

BatchNormalization normalizes each channel (axis 1) with constant statistics, InstanceNormalization
each (sample, channel) over all the remaining axes: neither cares how the axes after the channel
are laid out, so ``[N, C, L]`` viewed as ``[N, C, L, 1]`` (``[N, C]`` as ``[N, C, 1, 1]``,
``[N, C, D, H, W]`` as ``[N, C, D·H·W, 1]``) gives the same numbers.  MACE's kernels check for a
4-D input (XiaoMi/mace@0fc55a5:mace/ops/batch_norm.cc#L65, mace/ops/instance_norm.cc#L74), and
real models normalize other ranks: LeViT and RepViT's BatchNorm1d after a Linear (``[B·N, C]``),
PoolFormer's GroupNorm(1, C), which torch exports as an InstanceNormalization of ``[N, 1, C·H·W]``.
"""

from __future__ import annotations

from ...ir.graph import attr, static_shape, tensor_rank
from .base import all_of, float_input, only_first_output_used, rule


def _view_of(node):
    """(4-D view, the shape to restore) or a reason string."""
    rank = tensor_rank(node.inputs[0])
    least = 3 if node.op == "InstanceNormalization" else 2
    if rank is None:
        return "input rank unknown"
    if rank == 4 or rank < least:
        return f"input is {rank}-D"
    shape = static_shape(node.inputs[0])
    if shape is None:
        return "input shape is not static"
    return [0, 0, -1, 1], list(shape)


def _liftable(node, graph):
    view = _view_of(node)
    if isinstance(view, str):
        return view
    if node.op == "BatchNormalization" and attr(node, "training_mode", 0):
        return "BatchNormalization runs in training mode"
    return None


_lift_ok = all_of(_liftable, only_first_output_used, float_input)


def _lift(rw, node):
    view, shape = _view_of(node)
    x4 = rw.reshape(node.inputs[0], view)
    y4 = rw.emit(node.op, [x4] + list(node.inputs[1:]), dict(node.attrs))
    rw.reshape(y4, shape, outputs=rw.outputs[:1])


@rule("BatchNormalization", emits=["Reshape", "BatchNormalization", "Reshape"], when=_lift_ok)
def batchnorm_to_4d(rw, node):
    """before: x[N, C, *S] ─► BatchNormalization(γ, β, μ, σ²) ─► y          (S: 0, 1 or ≥ 3 axes)
    after:  x ─► Reshape[N, C, ΠS, 1] ─► BatchNormalization(γ, β, μ, σ²) ─► Reshape[N, C, *S] ─► y
    """
    _lift(rw, node)


@rule("InstanceNormalization", emits=["Reshape", "InstanceNormalization", "Reshape"], when=_lift_ok)
def instancenorm_to_4d(rw, node):
    """before: x[N, C, *S] ─► InstanceNormalization(γ, β) ─► y          (S: 1 or ≥ 3 axes)
    after:  x ─► Reshape[N, C, ΠS, 1] ─► InstanceNormalization(γ, β) ─► Reshape[N, C, *S] ─► y
    """
    _lift(rw, node)

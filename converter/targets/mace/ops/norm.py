"""Normalizations and softmax -> BatchNorm / Softmax."""

from __future__ import annotations

import numpy as np

from ....ir.graph import attr
from ..registry import OPS
from .common import const_input, fail, rank_of


@OPS.register("Softmax", "LogSoftmax")
def softmax(em, node):
    """Softmax/LogSoftmax (``mace/ops/softmax.cc:49-66,242-246``): a 4-D NCHW input with
    axis 1 is a channel softmax (``isNCHW() && axis_ == 1``); every other case normalizes the
    LAST axis whatever ``axis`` says.  Any other axis of a rank 2..4 tensor is moved last with
    Transpose (``transpose.cc``, rank 2..4, CPU only), normalized, and moved back."""
    rank = rank_of(em, node.inputs[0])
    axis = int(attr(node, "axis", -1)) % rank
    use_log = ("use_log", "i", int(node.op == "LogSoftmax"))
    x, out = em.name_of(node.inputs[0]), em.name_of(node.outputs[0])
    if axis == rank - 1 or (rank == 4 and axis == 1):
        em.op("Softmax", node.name, [x], [out], transposable=rank == 4, args=[("axis", "i", axis), use_log])
        return
    if not 2 <= rank <= 4:
        raise fail(node, f"softmax over axis {axis} of a rank-{rank} tensor (MACE: last axis, or channels "
                          f"of 4-D; Transpose covers rank 2..4)")
    perm = [d for d in range(rank) if d != axis] + [axis]
    inverse = [perm.index(d) for d in range(rank)]
    shape = em.shape(node.inputs[0])
    moved = em.tensor(f"{node.name}_moved", [shape[d] for d in perm])
    normalized = em.tensor(f"{node.name}_norm", [shape[d] for d in perm])
    em.op("Transpose", f"{node.name}_to_last", [x], [moved], args=[("dims", "ints", perm)])
    em.op("Softmax", node.name, [moved], [normalized], transposable=rank == 4,
          args=[("axis", "i", rank - 1), use_log])
    em.op("Transpose", f"{node.name}_back", [normalized], [out], args=[("dims", "ints", inverse)])


@OPS.register("BatchNormalization")
def batch_norm(em, node):
    """BatchNormalization -> BatchNorm with folded scale/offset (inference form, 3 inputs;
    ``mace/ops/batch_norm.cc:38-63``), as MACE's ONNX converter folds it."""
    scale, bias, mean, var = (const_input(node, i, "statistics") for i in range(1, 5))
    if rank_of(em, node.inputs[0]) != 4:
        raise fail(node, "BatchNorm needs a 4-D input")
    factor = scale / np.sqrt(var + float(attr(node, "epsilon", 1e-5)))
    em.op("BatchNorm", node.name, [em.name_of(node.inputs[0]),
                                   em.weight(f"{node.name}_scale", factor.astype(np.float32)),
                                   em.weight(f"{node.name}_offset", (bias - mean * factor).astype(np.float32))],
          [em.name_of(node.outputs[0])], fixed=True, args=[])


@OPS.register("InstanceNormalization")
def instance_norm(em, node):
    """InstanceNormalization -> InstanceNorm (``mace/ops/instance_norm.cc:38-190``): inputs x
    (4-D), scale [C], offset [C] read only when ``affine`` is set; ``epsilon`` (default 1e-4,
    so always written); mean and biased variance over H*W, y = x*scale/sqrt(var+eps) +
    (offset - mean*scale/sqrt(var+eps)).  Fixed-format op."""
    if rank_of(em, node.inputs[0]) != 4:
        raise fail(node, "InstanceNorm needs a 4-D input (instance_norm.cc:75)")
    scale, offset = const_input(node, 1, "scale"), const_input(node, 2, "B")
    em.op("InstanceNorm", node.name, [em.name_of(node.inputs[0]),
                                      em.weight(node.inputs[1].name, scale.reshape(-1)),
                                      em.weight(node.inputs[2].name, offset.reshape(-1))],
          [em.name_of(node.outputs[0])], fixed=True,
          args=[("epsilon", "f", float(attr(node, "epsilon", 1e-5))), ("affine", "i", 1)])


@OPS.register("LpNormalization")
def lp_norm(em, node):
    """LpNormalization -> LpNorm (``mace/ops/lpnorm.cc:38-110``): ``p`` 1 or 2, ``axis``
    (negative allowed).  The kernel normalizes over ALL dims from ``axis`` to the end
    (inner_loop = prod(shape[axis:])) and adds 1e-6 to the norm, so ONNX's single-axis norm is
    expressed only when every dim after ``axis`` is 1 (MACE's converter passes other axes
    through and gets them wrong).  Fixed-format op."""
    shape = em.shape(node.inputs[0])
    axis = int(attr(node, "axis", -1)) % len(shape)
    p = int(attr(node, "p", 2))
    if p not in (1, 2):
        raise fail(node, f"p={p} (lpnorm.cc: 1 or 2)")
    if any(d != 1 for d in shape[axis + 1:]):
        raise fail(node, f"axis {axis} is not the last non-unit axis (MACE's LpNorm spans axis..end)")
    em.op("LpNorm", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], fixed=True,
          args=[("p", "i", p), ("axis", "i", axis)])


@OPS.register("LRN")
def lrn(em, node):
    """LRN -> LocalResponseNorm (``mace/ops/local_response_norm.cc:30-80``, TF form):
    y = x * (bias + alpha * sum_{|c'-c| <= depth_radius} x^2)^-beta over channels of a 4-D
    NCHW input.  ONNX divides alpha by ``size`` and its window is c-floor((size-1)/2) ..
    c+ceil((size-1)/2), so an odd ``size`` maps to depth_radius (size-1)/2, alpha/size.
    MACE's ONNX converter comments LRN out; the CPU kernel exists."""
    size = int(attr(node, "size"))
    if size % 2 == 0:
        raise fail(node, "even LRN size (asymmetric window; MACE's window is symmetric)")
    if rank_of(em, node.inputs[0]) != 4:
        raise fail(node, "LocalResponseNorm needs a 4-D input")
    em.op("LocalResponseNorm", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], args=[
        ("depth_radius", "i", (size - 1) // 2), ("bias", "f", float(attr(node, "bias", 1.0))),
        ("alpha", "f", float(attr(node, "alpha", 1e-4)) / size), ("beta", "f", float(attr(node, "beta", 0.75)))])

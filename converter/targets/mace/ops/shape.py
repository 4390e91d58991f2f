"""Shape, layout and data-movement ops -> Reshape / Transpose / Concat / Pad / Cast / Identity /
Shape / Fill / DepthToSpace / SpaceToDepth."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....ir.graph import attr, constant_value
from ..data_file import DT_FLOAT, DT_INT32
from ..registry import OPS
from .common import (NCHW_TO_NHWC_AXIS, PAD_CONSTANT, PAD_REFLECT, const_input, fail, optional_const,
                     pad_nchw_to_nhwc_list, rank_of)


def _reshape_to(em, node: gs.Node, shape) -> None:
    """Reshape with the ``dim`` arg (``mace/ops/reshape.cc``), source format, no has_data_format
    so a 4-D ``dim`` is taken as-is (NCHW)."""
    em.op("Reshape", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          args=[("dim", "ints", [int(d) for d in shape])])


@OPS.register("Reshape")
def reshape(em, node):
    if int(attr(node, "allowzero", 0)):
        raise fail(node, "allowzero=1")
    _reshape_to(em, node, em.shape(node.outputs[0]))


@OPS.register("Flatten")
def flatten(em, node):
    _reshape_to(em, node, em.shape(node.outputs[0]))


@OPS.register("Squeeze", "Unsqueeze")
def squeeze(em, node):
    """Squeeze/Unsqueeze are shape-only; static shapes are known, so Reshape is exact and
    avoids the opset-13 axes-as-input forms MACE's converter crashes on."""
    _reshape_to(em, node, em.shape(node.outputs[0]))


@OPS.register("Transpose")
def transpose(em, node):
    """Transpose (``mace/ops/transpose.cc:36-50``): ``dims`` = perm, rank 2..4."""
    rank = rank_of(em, node.inputs[0])
    perm = [int(p) for p in attr(node, "perm", list(range(rank))[::-1])]
    if not 2 <= rank <= 4:
        raise fail(node, f"Transpose of rank {rank} (MACE supports 2..4)")
    em.op("Transpose", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          args=[("dims", "ints", perm)])


@OPS.register("Concat")
def concat(em, node):
    """Concat (``mace/ops/concat.cc:33,58-68``): ``axis`` default 3; with has_data_format on
    4-D inputs the axis is NHWC-ordered.  A constant operand below rank 4 (a ViT's class token
    before the patch tokens) is a weight tensor read as any other input; a 4-D one would need
    the NHWC constant layout, which is not written for Concat."""
    rank = rank_of(em, node.outputs[0])
    axis = int(attr(node, "axis")) % rank
    inputs = []
    for tensor in node.inputs:
        value = constant_value(tensor)
        if value is not None:
            if rank == 4:
                raise fail(node, "constant 4-D Concat operand")
            inputs.append(em.weight(tensor.name, value))
            continue
        inputs.append(em.name_of(tensor))
    em.op("Concat", node.name, inputs, [em.name_of(node.outputs[0])], transposable=rank == 4,
          args=[("axis", "i", NCHW_TO_NHWC_AXIS[axis] if rank == 4 else axis)])



@OPS.register("Pad")
def pad(em, node):
    """Pad (``mace/ops/pad.cc:64-75``): exactly 8 ``paddings`` ([before, after] per dim, NHWC
    order with has_data_format), ``pad_type`` CONSTANT 0 / REFLECT 1 (the CPU kernel reads
    ``pad_type``; MACE's converter writes ``padding`` and loses the mode), ``constant_value``."""
    if rank_of(em, node.inputs[0]) != 4:
        raise fail(node, "MACE Pad is 4-D only")
    pads = [int(p) for p in const_input(node, 1, "pads").reshape(-1)]
    if len(node.inputs) > 3 and node.inputs[3].name:
        raise fail(node, "Pad axes input")
    if any(p < 0 for p in pads):
        raise fail(node, "negative pads")
    value = optional_const(node, 2)
    mode = attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect"):
        raise fail(node, f"mode '{mode}' (MACE has constant, reflect and symmetric)")
    em.op("Pad", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], transposable=True, args=[
        ("paddings", "ints", pad_nchw_to_nhwc_list(pads[:4], pads[4:])),
        ("pad_type", "i", PAD_CONSTANT if mode == "constant" else PAD_REFLECT),
        ("constant_value", "f", float(value.reshape(-1)[0]) if value is not None and value.size else 0.0)])


@OPS.register("Cast")
def cast(em, node):
    """Cast (``mace/ops/cast.cc:25-60``): kernels are registered by SOURCE type, so ``T`` is the
    input dtype (MACE's converter copies the producer's float and reads ints as floats), and
    the destination goes in ``output_type``.  int64/bool travel as int32 (see ``__init__``);
    a cast TO bool is refused (MACE would truncate instead of testing != 0) unless the source
    is bool already."""
    import onnx

    src_name = em.dtype(node.inputs[0])
    dst_name = onnx.helper.tensor_dtype_to_np_dtype(int(attr(node, "to"))).name
    if dst_name == "bool" and src_name != "bool":
        raise fail(node, f"cast {src_name} -> bool (MACE's Cast truncates; no != 0 test)")
    if src_name not in ("float32", "int32", "int64", "bool") or dst_name not in ("float32", "int32", "int64", "bool"):
        raise fail(node, f"cast {src_name} -> {dst_name} (MACE casts between float32 and int32)")
    em.op("Cast", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          T=em.mace_dtype(node.inputs[0]), output_types=[DT_FLOAT if dst_name == "float32" else DT_INT32])


@OPS.register("Identity", "Dropout")
def identity(em, node):
    """Identity / Dropout (inference) -> Identity (``mace/ops/identity.cc``: copies input 0;
    registered CPU float/int32 and GPU)."""
    if len(node.outputs) > 1 and node.outputs[1].name and node.outputs[1].outputs:
        raise fail(node, "Dropout mask output is used")
    em.op("Identity", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          T=em.mace_dtype(node.inputs[0]))


@OPS.register("Constant")
def constant(em, node):
    """Constant: consumers read the value as a weight (``constant_value``); only a constant that
    is itself a graph output needs an op, an Identity of the stored tensor."""
    out = node.outputs[0]
    if out.name in em.graph_outputs:
        value = constant_value(out)
        em.op("Identity", node.name, [em.weight(f"{out.name}_value", value)], [out.name],
              T=em.mace_dtype(out))


@OPS.register("Shape")
def shape(em, node):
    """Shape (``mace/ops/shape.cc``): int32 output of the input's dims (registered for float
    input only); without has_data_format the dims are the tensor's own (NCHW)."""
    rank = rank_of(em, node.inputs[0])
    if int(attr(node, "start", 0)) % max(rank, 1) != 0 or attr(node, "end") not in (None, rank, -0) and \
            int(attr(node, "end")) % (rank + 1) != rank:
        raise fail(node, "Shape with start/end")
    if em.mace_dtype(node.inputs[0]) != DT_FLOAT:
        raise fail(node, "MACE registers Shape for float input only")
    em.op("Shape", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          output_types=[DT_INT32])


@OPS.register("ConstantOfShape")
def constant_of_shape(em, node):
    """ConstantOfShape with a constant shape -> the filled tensor itself, stored as a weight and
    read through an Identity.  (MACE's ``Fill`` takes the shape as input 0, an int32 weight, and
    the CPU runtime's constant transposition refuses any int32 weight at input 0:
    ``transpose_const.cc:60`` "Only support transform DT_FLOAT or DT_HALF"; measured in mace_run.)"""
    dims = const_input(node, 0, "the shape").reshape(-1)
    value = attr(node, "value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(getattr(value, "values", value))
    if value.dtype != np.float32:
        raise fail(node, "MACE registers Fill for float only")
    if dims.size == 0 or (dims <= 0).any():
        raise fail(node, "Fill needs a 1-D shape with every dim > 0 (fill.cc)")
    filled = np.full([int(d) for d in dims], value.reshape(-1)[0], np.float32)
    em.op("Identity", node.name, [em.weight(f"{node.name}_value", filled)], [em.name_of(node.outputs[0])],
          T=em.mace_dtype(node.outputs[0]))


@OPS.register("DepthToSpace")
def depth_to_space(em, node):
    """DepthToSpace (``mace/ops/depth_to_space.cc:30-118``): ``block_size``, ``mode`` "DCR" (default)
    or "CRD", both indexed exactly as ONNX; fixed-format 4-D op."""
    mode = attr(node, "mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    em.op("DepthToSpace", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], fixed=True,
          args=[("block_size", "i", int(attr(node, "blocksize"))), ("mode", "s", mode)])


@OPS.register("SpaceToDepth")
def space_to_depth(em, node):
    """SpaceToDepth (``mace/ops/space_to_depth.cc:30-88``): ``block_size``; out channel
    d + (offset_h*bs + offset_w)*C, as ONNX."""
    em.op("SpaceToDepth", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], fixed=True,
          args=[("block_size", "i", int(attr(node, "blocksize")))])

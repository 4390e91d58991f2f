"""ONNX node -> MACE ``OperatorDef``(s): one small function per ONNX op, grouped by family.

Each function reads one onnx-graphsurgeon node and emits MACE ops through an :class:`Emitter`
(``netdef_writer.py``); it registers itself in ``mace/registry.py``'s ``OPS`` with
``@OPS.register(...)``, and importing this package imports every family.  Type strings,
argument names, enums, defaults and input order follow MACE's kernels (XiaoMi/mace
``mace/ops/*.cc``) and its ONNX converter (``tools/python/transform/onnx_converter.py``); each
function cites the file it follows.

Data-format convention (MACE's own for ONNX, ``tools/python/transform/base_converter.py`` and
``transformer.py:transpose_data_format``): CPU float runs NCHW.  Fixed-format ops (Conv2D,
Deconv2D, DepthwiseConv2d, Pooling, BatchNorm, Resize*, DepthToSpace, SpaceToDepth,
InstanceNorm) get ``data_format=AUTO``; transposable ops whose input is 4-D (Activation,
Eltwise, Concat, Split, Pad, Reduce, Softmax) get ``data_format=AUTO`` and
``has_data_format=1``, and then their axis/padding arguments are written in NHWC order (the CPU
kernels remap them to NCHW).  All other ops keep the source format ``data_format=NCHW`` and
index the tensor as it is.  Unlike MACE's converter we never store 4-D non-filter constants
(which MACE would expect in NHWC order): per-channel operands are written 1-D ``[C]``.

MACE has no int64 or bool tensors: ONNX int64 and bool tensors are carried as int32 (MACE's
logical Eltwise ops write int32, ``mace/ops/eltwise.cc:990-992``; ArgMax and Shape write
int32).
"""

from __future__ import annotations

from ..registry import OPS  # noqa: F401  (the filled registry: Target.ops, netdef_writer)
from . import activation, conv, dense, eltwise, index, norm, reduce, resize, shape  # noqa: F401  (they fill OPS)
from .common import DF_AUTO, DF_NCHW, DF_NHWC, DF_NONE, FRAMEWORK_ONNX, NCHW_TO_NHWC_AXIS  # noqa: F401

#: MACE op types with an OpenCL (GPU) kernel (``op_registrations.txt``, MACE_REGISTER_GPU_OP).
GPU_OPS = frozenset({"Conv2D", "DepthwiseConv2d", "Deconv2D", "DepthwiseDeconv2d", "Pooling", "Eltwise",
                     "Activation", "Softmax", "Concat", "Split", "Pad", "Reduce", "Reshape", "BatchNorm",
                     "Squeeze", "Identity", "AddN", "ResizeBilinear", "ResizeNearestNeighbor",
                     "DepthToSpace", "SpaceToDepth", "InstanceNorm", "LpNorm"})
#: Hexagon DSP (``tools/python/transform/hexagon_converter.py:159-186``) and MTK APU
#: (``apu_converter.py:35-76``) op sets.
DSP_OPS = frozenset({"Activation", "BatchNorm", "Concat", "Conv2D", "Deconv2D", "DepthwiseConv2d",
                     "Eltwise", "Pad", "Pooling", "Reduce", "Reshape", "Softmax", "Split", "StridedSlice",
                     "ResizeBilinear", "ResizeNearestNeighbor", "DepthToSpace", "SpaceToDepth",
                     "InstanceNorm"})
APU_OPS = frozenset({"Activation", "Concat", "Conv2D", "DepthwiseConv2d", "Deconv2D", "Eltwise",
                     "Pad", "Pooling", "Reduce", "Reshape", "Softmax", "ResizeBilinear", "DepthToSpace",
                     "SpaceToDepth"})

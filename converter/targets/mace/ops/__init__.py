"""ONNX node -> MACE ``OperatorDef``(s): one small function per ONNX op, grouped by family.

Each function reads one onnx-graphsurgeon node and emits MACE ops through an :class:`Emitter`
(``netdef_writer.py``).  Type strings, argument names, enums, defaults and input order follow
MACE's kernels (XiaoMi/mace ``mace/ops/*.cc``) and its ONNX converter
(``tools/python/transform/onnx_converter.py``); each function cites the file it follows.

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

from typing import Callable

from .activation import clip, elu, hard_sigmoid, leaky_relu, prelu, relu, sigmoid, tanh
from .common import (DF_AUTO, DF_NCHW, DF_NHWC, DF_NONE, FRAMEWORK_ONNX,  # noqa: F401
                     NCHW_TO_NHWC_AXIS)
from .conv import conv, conv_transpose, pool
from .dense import gemm, matmul
from .eltwise import _ELTWISE, eltwise, equal, sign, sum_n, unary_eltwise
from .index import arg_max, cumsum, gather, slice_, split, tile
from .norm import batch_norm, instance_norm, lp_norm, lrn, softmax
from .reduce import _REDUCE, global_pool, reduce
from .resize import resize
from .shape import (cast, concat, constant, constant_of_shape, depth_to_space, flatten, identity, pad,
                    reshape, shape, space_to_depth, squeeze, transpose)

CONVERTERS: dict[str, Callable] = {
    "Conv": conv, "ConvTranspose": conv_transpose,
    "Relu": relu, "Sigmoid": sigmoid, "Tanh": tanh, "LeakyRelu": leaky_relu, "Elu": elu,
    "HardSigmoid": hard_sigmoid, "PRelu": prelu, "Clip": clip,
    **{op: eltwise for op in _ELTWISE},
    "Abs": unary_eltwise, "Neg": unary_eltwise, "Sqrt": unary_eltwise, "Reciprocal": unary_eltwise,
    "Sum": sum_n, "Equal": equal, "Sign": sign,
    "MaxPool": pool, "AveragePool": pool, "GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool,
    **{op: reduce for op in _REDUCE},
    "ArgMax": arg_max, "ArgMin": arg_max, "CumSum": cumsum,
    "Gemm": gemm, "MatMul": matmul,
    "Reshape": reshape, "Flatten": flatten, "Squeeze": squeeze, "Unsqueeze": squeeze,
    "Transpose": transpose, "Concat": concat, "Split": split, "Slice": slice_, "Gather": gather,
    "Tile": tile, "Pad": pad, "Cast": cast, "Identity": identity, "Dropout": identity,
    "Constant": constant, "Shape": shape, "ConstantOfShape": constant_of_shape,
    "DepthToSpace": depth_to_space, "SpaceToDepth": space_to_depth,
    "Resize": resize, "Upsample": resize,
    "Softmax": softmax, "LogSoftmax": softmax,
    "BatchNormalization": batch_norm, "InstanceNormalization": instance_norm,
    "LpNormalization": lp_norm, "LRN": lrn,
}

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

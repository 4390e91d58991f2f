"""ONNX op -> lowering function (which writes TFLite builtin ops).  Builtins only: no Flex/select
TensorFlow ops and no custom ops, so plain LiteRT runs every file.

Ops not listed here raise :class:`~converter.errors.Unsupported` naming the node and op; the
planner is expected to have legalized them away for the chosen hardware.
"""

from __future__ import annotations

from . import ops_nn as nn
from . import ops_tensor as t

HANDLERS = {
    # convolution, pooling, dense
    "Conv": nn.lower_conv,
    "ConvTranspose": nn.lower_conv_transpose,
    "MaxPool": nn.lower_max_pool,
    "AveragePool": nn.lower_average_pool,
    "GlobalAveragePool": t.lower_reduce,
    "GlobalMaxPool": t.lower_reduce,
    "Gemm": nn.lower_gemm,
    "MatMul": nn.lower_matmul,
    "LayerNormalization": nn.lower_layer_norm,
    "BatchNormalization": nn.lower_batch_norm,
    "Resize": nn.lower_resize,
    "DepthToSpace": nn.lower_depth_to_space,
    "SpaceToDepth": nn.lower_space_to_depth,
    # element-wise
    "Add": t.binary("ADD", "AddOptions"),
    "Sub": t.binary("SUB", "SubOptions"),
    "Mul": t.binary("MUL", "MulOptions"),
    "Div": t.binary("DIV", "DivOptions"),
    "Max": t.binary("MAXIMUM", "MaximumMinimumOptions"),
    "Min": t.binary("MINIMUM", "MaximumMinimumOptions"),
    "Pow": t.lower_pow,
    "PRelu": t.lower_prelu,
    "Clip": t.lower_clip,
    "Relu": t.unary("RELU"),
    "Sigmoid": t.unary("LOGISTIC"),
    "Tanh": t.unary("TANH"),
    "Exp": t.unary("EXP", "ExpOptions"),
    "Log": t.unary("LOG"),
    "Sqrt": t.unary("SQRT"),
    "Abs": t.unary("ABS", "AbsOptions"),
    "Neg": t.unary("NEG", "NegOptions"),
    "Floor": t.unary("FLOOR"),
    "Sign": t.unary("SIGN"),
    "Reciprocal": lambda Lw, node: t.lower_reciprocal(Lw, node),
    "Ceil": t.unary("CEIL"),
    "Sin": t.unary("SIN"),
    "Cos": t.unary("COS", "CosOptions"),
    "HardSwish": t.unary("HARD_SWISH", "HardSwishOptions"),
    "LeakyRelu": lambda Lw, node: t.unary("LEAKY_RELU", "LeakyReluOptions",
                                          alpha=float(node.attrs.get("alpha", 0.01)))(Lw, node),
    "Elu": t.unary("ELU"),
    "Erf": t.lower_erf,
    "Gelu": t.lower_gelu,
    "Identity": t.lower_identity,
    "Dropout": t.lower_identity,
    # softmax and reductions
    "Softmax": t.lower_softmax,
    "LogSoftmax": t.lower_log_softmax,
    "ReduceMean": t.lower_reduce,
    "ReduceMax": t.lower_reduce,
    "ReduceMin": t.lower_reduce,
    "ReduceSum": t.lower_reduce,
    "ReduceProd": t.lower_reduce,
    # shapes
    "Reshape": t.lower_reshape,
    "Flatten": t.lower_reshape,
    "Squeeze": t.lower_reshape,
    "Unsqueeze": t.lower_reshape,
    "Transpose": t.lower_transpose,
    "Concat": t.lower_concat,
    "Split": t.lower_split,
    "Slice": t.lower_slice,
    "Gather": t.lower_gather,
    "Pad": t.lower_pad,
    "Expand": t.lower_expand,
    "Tile": t.lower_tile,
}

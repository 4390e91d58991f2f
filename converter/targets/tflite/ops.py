"""ONNX op -> lowering function (which writes TFLite builtin ops).  Builtins only: no Flex/select
TensorFlow ops and no custom ops, so plain LiteRT runs every file.  Families: ``ops_nn`` (2-D
conv/pool/matmul/norm), ``ops_conv_nd`` (1-D, 3-D, grouped/dilated transpose), ``ops_resize``,
``ops_tensor`` (element-wise, reductions, shapes), ``ops_logic`` (compare/select/cast/arg/top-k),
``ops_index`` (gather/scatter/one-hot/range/shape), ``ops_norm`` (normalizations, activations),
``ops_rnn`` (LSTM).

Ops not listed here raise :class:`~converter.errors.Unsupported` naming the node and op; the
planner is expected to have legalized them away for the chosen hardware.
"""

from __future__ import annotations

from . import ops_conv_nd as nd
from . import ops_index as idx
from . import ops_logic as logic
from . import ops_nn as nn
from . import ops_norm as norm
from . import ops_resize as resize
from . import ops_rnn as rnn
from . import ops_tensor as t

HANDLERS = {
    # convolution, pooling, dense
    "Conv": nd.lower_conv,
    "ConvTranspose": nd.lower_conv_transpose,
    "MaxPool": nd.lower_max_pool,
    "AveragePool": nd.lower_average_pool,
    "GlobalAveragePool": t.lower_reduce,
    "GlobalMaxPool": t.lower_reduce,
    "Gemm": nn.lower_gemm,
    "MatMul": nn.lower_matmul,
    "LayerNormalization": nn.lower_layer_norm,
    "BatchNormalization": nn.lower_batch_norm,
    "Resize": resize.lower_resize,
    "Upsample": resize.lower_upsample,
    "DepthToSpace": nn.lower_depth_to_space,
    "SpaceToDepth": nn.lower_space_to_depth,
    # element-wise
    "Add": t.binary("ADD", "AddOptions"),
    "Sub": t.binary("SUB", "SubOptions"),
    "Mul": t.binary("MUL", "MulOptions"),
    "Div": t.binary("DIV", "DivOptions"),
    "Max": logic.chain("MAXIMUM", "MaximumMinimumOptions"),
    "Min": logic.chain("MINIMUM", "MaximumMinimumOptions"),
    "Sum": logic.chain("ADD", "AddOptions"),
    "Mean": logic.lower_mean,
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
    "Elu": norm.lower_elu,
    "Selu": norm.lower_selu,
    "Softplus": norm.lower_softplus,
    "HardSigmoid": norm.lower_hard_sigmoid,
    "Round": t.unary("ROUND"),
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
    "ReduceL2": norm.lower_reduce_l2,
    "ArgMax": logic.lower_arg,
    "ArgMin": logic.lower_arg,
    "TopK": logic.lower_topk,
    "CumSum": logic.lower_cumsum,
    # normalization
    "InstanceNormalization": norm.lower_instance_norm,
    "LRN": norm.lower_lrn,
    "LpNormalization": norm.lower_lp_norm,
    # comparisons, logic, selection, types
    **{op: logic.nary(builtin, options) for op, (builtin, options) in logic.COMPARISONS.items()},
    "Xor": logic.lower_xor,
    "Not": t.unary("LOGICAL_NOT"),
    "Where": logic.nary("SELECT_V2", "SelectV2Options"),
    "Cast": logic.lower_cast,
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
    "GatherND": idx.lower_gather_nd,
    "ScatterND": idx.lower_scatter_nd,
    "OneHot": idx.lower_one_hot,
    "Range": idx.lower_range,
    "Shape": idx.lower_shape,
    "ConstantOfShape": idx.lower_constant_of_shape,
    "NonZero": idx.lower_nonzero,
    # recurrent
    "LSTM": rnn.lower_lstm,
}

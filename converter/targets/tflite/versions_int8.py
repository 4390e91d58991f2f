"""Builtin op versions for integer (int8) and hybrid (float activations, int8 weights) ops.

Transcribed from LiteRT's ``GetBuiltinOperatorVersion``
(google-ai-edge/LiteRT@f67457790c, tflite/converter/tools/versioning/op_version.cc): the int8
kernel of most ops is version 2 ("if (op_sig.inputs.at(0).type == kTfLiteInt8) return 2;"),
CONV_2D and DEPTHWISE_CONV_2D are 3, FULLY_CONNECTED is 4 ("Int8 fully fixed point kernel is
at version 4"), a bias-carrying TRANSPOSE_CONV is 3, MUL is 3 when
``input1_scale * input2_scale / output_scale >= 1``, QUANTIZE is 1 (per-tensor, not int16/int4)
and DEQUANTIZE of int8 is 2.  Features the float rules bump (rank > 4, broadcasting, options)
bump here in the same order as in op_version.cc.  An op without a rule raises: an integer op
is never written with a guessed version.
"""

from __future__ import annotations

import numpy as np

from ...errors import Unsupported

#: Ops whose int8 kernel is version 2 and that have no other version-raising feature we write.
_INT8_V2 = {"ADD", "MAX_POOL_2D", "AVERAGE_POOL_2D", "CONCATENATION", "SOFTMAX", "LOGISTIC", "TANH", "MEAN",
            "REDUCE_MAX", "REDUCE_MIN", "RELU6", "RSQRT", "RELU", "GELU", "SPLIT_V", "SPACE_TO_DEPTH",
            "DEPTH_TO_SPACE", "SUM", "PACK", "UNPACK", "ARG_MAX", "ARG_MIN", "BATCH_MATMUL", "SQUARED_DIFFERENCE",
            "EXP", "LOG", "SQRT", "ABS"}
#: Ops whose version does not depend on the int8 type (not in op_version.cc's switch, or only for
#: other types): RESHAPE, SQUEEZE, EXPAND_DIMS, PRELU, HARD_SWISH, LEAKY_RELU (2 is int16),
#: QUANTIZE (2 is int16 output, 3 per-channel).
_TYPE_FREE = {"RESHAPE": 1, "SQUEEZE": 1, "EXPAND_DIMS": 1, "PRELU": 1, "HARD_SWISH": 1, "LEAKY_RELU": 1,
              "QUANTIZE": 1, "TILE": 3, "BROADCAST_TO": 3}


def _is_int8(tensors, i) -> bool:
    return i >= 0 and tensors[i].dtype == np.int8


def _per_channel(tensors, i) -> bool:
    q = tensors[i].quant if i >= 0 else None
    return q is not None and len(q.scale) > 1


def _rank(tensors, i) -> int:
    return len(tensors[i].shape)


def _first_input(op) -> int:
    return next((i for i in op.inputs if i >= 0), -1)


def quantized_version(op, tensors) -> int:
    """The version of integer or hybrid ``op`` (``tensors``: the writer's); Unsupported when no
    rule gives one."""
    name = op.builtin
    if name in _ANY_ACTIVATION_RULES:  # int8 and hybrid kernels
        version = _ANY_ACTIVATION_RULES[name](op, tensors)
    elif name in _TYPE_FREE:
        version = _TYPE_FREE[name]
    elif not _is_int8(tensors, _first_input(op)) and name != "SPLIT":
        version = None  # not an int8 kernel
    elif name in _INT8_V2:
        version = 2
    else:
        rule = _INT8_RULES.get(name)
        version = rule(op, tensors) if rule is not None else None
    if version is None:
        raise Unsupported(f"tflite: no int8 op version rule for {name} "
                          f"({', '.join(np.dtype(tensors[i].dtype).name for i in op.inputs if i >= 0)})")
    return version


# -- ops with int8 weights, whose activations may be int8 or float (hybrid) ------------------


def _conv_version(op, tensors) -> int | None:
    ins, name = op.inputs, op.builtin
    if name == "CONV_2D" and op.extra.get("grouped"):
        return 6
    if _is_int8(tensors, ins[0]) and _is_int8(tensors, ins[1]) and _is_int8(tensors, op.outputs[0]):
        return 3
    if tensors[ins[0]].dtype == np.float32 and _is_int8(tensors, ins[1]):  # hybrid
        if name == "CONV_2D":
            return 5 if _per_channel(tensors, ins[1]) else 2
        return 6 if _per_channel(tensors, ins[1]) else 4
    return None


def _fully_connected_version(op, tensors) -> int | None:
    ins = op.inputs
    hybrid = tensors[ins[0]].dtype == np.float32 and _is_int8(tensors, ins[1])
    if hybrid and _per_channel(tensors, ins[1]):
        return 12
    if len(ins) == 2 or ins[2] < 0:
        return 6
    if op.options.keepNumDims:
        return 5
    if _is_int8(tensors, ins[0]) and _is_int8(tensors, ins[1]) and _is_int8(tensors, op.outputs[0]):
        return 4
    if hybrid:
        return 3
    return None


def _transpose_conv_version(op, tensors) -> int:
    ins = op.inputs
    if op.options.fusedActivationFunction:
        return 4
    if len(ins) == 4 and ins[3] >= 0:
        return 3
    return 2 if _is_int8(tensors, ins[1]) else 1


def _dequantize_version(op, tensors) -> int:
    x = _first_input(op)
    if tensors[x].dtype == np.int8:
        return 5 if _per_channel(tensors, x) else 2
    return 1


_ANY_ACTIVATION_RULES = {"CONV_2D": _conv_version, "DEPTHWISE_CONV_2D": _conv_version,
                         "FULLY_CONNECTED": _fully_connected_version, "TRANSPOSE_CONV": _transpose_conv_version,
                         "DEQUANTIZE": _dequantize_version}


# -- int8 kernels whose version a feature raises --------------------------------------------


def _mul_version(op, tensors) -> int:
    a, b, out = (tensors[i].quant for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    if a is not None and b is not None and out is not None and a.scale[0] * b.scale[0] / out.scale[0] >= 1.0:
        return 3
    return 2


def _broadcast_binary_version(op, tensors) -> int:
    a, b = op.inputs[0], op.inputs[1]
    broadcast = tensors[a].shape != tensors[b].shape
    return 3 if broadcast and max(_rank(tensors, a), _rank(tensors, b)) > 4 else 2


def _transpose_version(op, tensors) -> int:
    r = _rank(tensors, _first_input(op))
    return 8 if r > 6 else 6 if r > 5 else 4 if r > 4 else 2


def _strided_slice_version(op, tensors) -> int:
    if op.options.ellipsisMask or op.options.newAxisMask:
        return 6
    return 4 if _rank(tensors, _first_input(op)) > 4 else 2


def _pad_version(op, tensors) -> int:
    return 4 if _rank(tensors, _first_input(op)) > 4 else 2


def _slice_version(op, tensors) -> int:
    return 5 if _rank(tensors, _first_input(op)) > 4 else 2


def _space_batch_version(op, tensors) -> int:
    return 3 if _rank(tensors, _first_input(op)) != 4 else 2


def _split_version(op, tensors) -> int | None:
    return 2 if _is_int8(tensors, op.inputs[1]) else None


_INT8_RULES = {
    "MUL": _mul_version,
    "SUB": _broadcast_binary_version, "MAXIMUM": _broadcast_binary_version, "MINIMUM": _broadcast_binary_version,
    "TRANSPOSE": _transpose_version,
    "PAD": _pad_version, "PADV2": _pad_version,
    "STRIDED_SLICE": _strided_slice_version,
    "SLICE": _slice_version,
    "SPLIT": _split_version,
    "GATHER": lambda op, tensors: 5 if op.options.batchDims else 2,
    "RESIZE_BILINEAR": lambda op, tensors: 3 if op.options.halfPixelCenters else 2,
    "RESIZE_NEAREST_NEIGHBOR": lambda op, tensors: 3 if (op.options.halfPixelCenters or op.options.alignCorners)
    else 2,
    "SPACE_TO_BATCH_ND": _space_batch_version, "BATCH_TO_SPACE_ND": _space_batch_version,
}

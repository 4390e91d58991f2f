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


def quantized_version(op, tensors) -> int:
    name, opts = op.builtin, op.options
    ins = [i for i in op.inputs]
    x = next((i for i in ins if i >= 0), -1)

    def rank(i):
        return len(tensors[i].shape)

    def per_channel(i) -> bool:
        q = tensors[i].quant if i >= 0 else None
        return q is not None and len(q.scale) > 1

    if name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        if name == "CONV_2D" and op.extra.get("grouped"):
            return 6
        if _is_int8(tensors, ins[0]) and _is_int8(tensors, ins[1]) and _is_int8(tensors, op.outputs[0]):
            return 3
        if tensors[ins[0]].dtype == np.float32 and _is_int8(tensors, ins[1]):  # hybrid
            if name == "CONV_2D":
                return 5 if per_channel(ins[1]) else 2
            return 6 if per_channel(ins[1]) else 4
    elif name == "FULLY_CONNECTED":
        hybrid = tensors[ins[0]].dtype == np.float32 and _is_int8(tensors, ins[1])
        if hybrid and per_channel(ins[1]):
            return 12
        if len(ins) == 2 or ins[2] < 0:
            return 6
        if opts.keepNumDims:
            return 5
        if _is_int8(tensors, ins[0]) and _is_int8(tensors, ins[1]) and _is_int8(tensors, op.outputs[0]):
            return 4
        if hybrid:
            return 3
    elif name == "TRANSPOSE_CONV":
        if opts.fusedActivationFunction:
            return 4
        if len(ins) == 4 and ins[3] >= 0:
            return 3
        return 2 if _is_int8(tensors, ins[1]) else 1
    elif name == "DEQUANTIZE":
        if tensors[x].dtype == np.int8:
            return 5 if per_channel(x) else 2
        return 1
    elif name in _TYPE_FREE:
        return _TYPE_FREE[name]
    elif not _is_int8(tensors, x) and name != "SPLIT":
        pass  # not an int8 kernel: fall through to the error below
    elif name in _INT8_V2:
        return 2
    elif name == "MUL":
        a, b, out = (tensors[i].quant for i in (ins[0], ins[1], op.outputs[0]))
        if a is not None and b is not None and out is not None and a.scale[0] * b.scale[0] / out.scale[0] >= 1.0:
            return 3
        return 2
    elif name in ("SUB", "MAXIMUM", "MINIMUM"):
        broadcast = tensors[ins[0]].shape != tensors[ins[1]].shape
        return 3 if broadcast and max(rank(ins[0]), rank(ins[1])) > 4 else 2
    elif name == "TRANSPOSE":
        r = rank(x)
        return 8 if r > 6 else 6 if r > 5 else 4 if r > 4 else 2
    elif name in ("PAD", "PADV2"):
        return 4 if rank(x) > 4 else 2
    elif name == "STRIDED_SLICE":
        if opts.ellipsisMask or opts.newAxisMask:
            return 6
        return 4 if rank(x) > 4 else 2
    elif name == "SLICE":
        return 5 if rank(x) > 4 else 2
    elif name == "SPLIT":
        if _is_int8(tensors, ins[1]):
            return 2
    elif name == "GATHER":
        return 5 if opts.batchDims else 2
    elif name == "RESIZE_BILINEAR":
        return 3 if opts.halfPixelCenters else 2
    elif name == "RESIZE_NEAREST_NEIGHBOR":
        return 3 if (opts.halfPixelCenters or opts.alignCorners) else 2
    elif name in ("SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"):
        return 3 if rank(x) != 4 else 2
    raise Unsupported(f"tflite: no int8 op version rule for {name} "
                      f"({', '.join(np.dtype(tensors[i].dtype).name for i in ins if i >= 0)})")

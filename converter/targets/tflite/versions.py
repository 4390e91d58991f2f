"""The builtin op version each written op needs (float32 graphs, float16 weights).

Rules transcribed from LiteRT's ``GetBuiltinOperatorVersion``
(google-ai-edge/LiteRT@f67457790c, tflite/converter/tools/versioning/op_version.cc; for some ops
tensorflow/tensorflow@0208740, tensorflow/lite/tools/versioning/op_version.cc): a float op is version 1 unless a
feature listed there bumps it.  Writing the lowest sufficient version keeps files loadable by the
oldest runtime that can run them, exactly as TensorFlow's converter does.  Ops touching int8
tensors or quantized constants take their versions from ``versions_int8.py``.
"""

from __future__ import annotations

import numpy as np

from ...errors import Unsupported


def builtin_version(op, tensors) -> int:
    def dtype(i):
        return tensors[i].dtype if i >= 0 else None

    def rank(i):
        return len(tensors[i].shape)

    first = dtype(op.inputs[0]) if op.inputs else None
    if any(i >= 0 and (tensors[i].dtype in (np.int8, np.uint8) or tensors[i].quant is not None)
           for i in list(op.inputs) + list(op.outputs)):
        # Integer (int8) and hybrid (float activations, int8 weights) kernels: versions_int8.py.
        from .versions_int8 import quantized_version

        return quantized_version(op, tensors)
    if first is not None and first not in (np.float32, np.int32, np.int64, np.float16, np.bool_):
        raise Unsupported(f"tflite: {op.builtin} on {np.dtype(first).name} tensors: no op version rule")
    name = op.builtin
    opts = op.options
    if name == "CAST" and np.float16 in (dtype(op.inputs[0]), tensors[op.outputs[0]].dtype):
        return 5
    if name == "FILL":
        return 2 if dtype(op.inputs[1]) == np.bool_ else 4 if dtype(op.inputs[1]) == np.float16 else 1

    if name == "CONV_2D":
        return 6 if op.extra.get("grouped") else 1
    if name == "DEPTHWISE_CONV_2D":
        return 2 if (opts.dilationWFactor != 1 or opts.dilationHFactor != 1) else 1
    if name == "TRANSPOSE_CONV":
        if opts.fusedActivationFunction:
            return 4
        return 3 if len(op.inputs) == 4 and op.inputs[3] >= 0 else 1
    if name == "FULLY_CONNECTED":
        if len(op.inputs) == 2 or op.inputs[2] < 0:
            return 6
        return 5 if opts.keepNumDims else 1
    if name == "SUB" and first == np.int64:
        return 4
    if name in ("SUB", "DIV", "MAXIMUM", "MINIMUM"):
        shapes = [tensors[i].shape for i in op.inputs]
        broadcast = len(set(shapes)) > 1
        if broadcast and max(len(s) for s in shapes) > 4:
            return {"SUB": 3, "DIV": 2, "MAXIMUM": 3, "MINIMUM": 3}[name]
        return 1
    if name in ("ADD", "MUL"):
        if first == np.int64:
            return {"ADD": 4, "MUL": 5}[name]
        return 1
    if name == "TRANSPOSE":
        r = rank(op.inputs[0])
        return 6 if r > 5 else 4 if r > 4 else 3 if first == np.bool_ else 1
    if name == "SLICE":
        return 5 if rank(op.inputs[0]) > 4 else 1
    if name == "STRIDED_SLICE":
        if opts.ellipsisMask or opts.newAxisMask:
            return 6
        return 4 if rank(op.inputs[0]) > 4 else 3 if first == np.bool_ else 1
    if name in ("PAD", "PADV2"):
        return 4 if rank(op.inputs[0]) > 4 else 1
    if name == "GATHER":
        return 5 if opts.batchDims else 3 if first == np.bool_ else 1
    if name == "RESIZE_BILINEAR":
        return 3 if opts.halfPixelCenters else 1
    if name == "RESIZE_NEAREST_NEIGHBOR":
        return 3 if (opts.halfPixelCenters or opts.alignCorners) else 1
    if name == "SPLIT":
        return 3 if dtype(op.inputs[1]) == np.int32 else 1
    if name == "DEQUANTIZE":
        return 3 if first == np.float16 else 1
    if name == "CONCATENATION" and first == np.int64:
        return 1
    return _VERSION_BY_TYPE.get((name, np.dtype(first).name if first is not None else None),
                                _MIN_VERSION.get(name, 1))


#: Versions that depend only on the first input's type (op_version.cc case blocks; float32 = 1).
_VERSION_BY_TYPE = {
    ("SIGN", "int32"): 2, ("ABS", "int32"): 5, ("GATHER_ND", "bool"): 5, ("REVERSE_V2", "bool"): 2,
    ("ARG_MAX", "bool"): 3, ("ARG_MIN", "bool"): 3, ("RANGE", "int64"): 2, ("WHERE", "bool"): 1,
    ("CAST", "float16"): 5,
}

#: Ops whose lowest version is not 1: BROADCAST_TO v1 was rolled back ("The version one of broadcast
#: to op won't be not supported", op_version.cc; register.cc registers 2..); WHERE is 2 unless the
#: condition is bool.
_MIN_VERSION = {"BROADCAST_TO": 2, "WHERE": 2}

"""Every ONNX op that op_support_matrix.yaml marks supported/unverified for TFLite on at least one
hardware: a seeded single-op model (opset 17), exported with the TFLite target, loaded with
LiteRT's builtin-only resolver (no Flex, no custom ops) and run, must match onnxruntime: max error
<= 1e-5 (1e-4 for transcendental ops; relative to the output's scale when it exceeds 1), integer
and boolean results exactly.  The export must be byte-identical on re-run.

Ops the exporter cannot map are listed in ``UNMAPPED`` with the reason; the first test asserts
that matrix ops == mapped | listed, so the list stays honest when the matrix changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from converter.errors import Unsupported
from converter.matrix import load_matrix
from converter.targets.base import ExportOptions
from converter.targets.tflite import TARGET
from converter.targets.tflite.ops import OPS
from tflite_helpers import op_names, opcodes

RNG = np.random.default_rng(2024)

#: Ops the matrix lists for TFLite that the exporter refuses, and why (checked in
#: test_unmapped_ops_are_refused where a model can be built).
UNMAPPED: dict[str, str] = {}  # NonMaxSuppression left the matrix's TFLite column (see test_unmapped_ops_are_refused)

#: Ops whose kernels are transcendental (exp/log/pow/erf/trig): 1e-4 instead of 1e-5.
TRANSCENDENTAL = {"Cos", "Sin", "Elu", "Selu", "Erf", "Exp", "Log", "Pow", "Sigmoid", "Softmax", "LogSoftmax",
                  "Softplus", "Tanh", "LRN", "LayerNormalization", "InstanceNormalization", "Sqrt",
                  "Reciprocal", "ReduceL2", "LpNormalization", "HardSwish", "Resize", "Upsample", "LSTM",
                  "BatchNormalization", "Div"}


@dataclass
class Case:
    op: str
    id: str
    model: onnx.ModelProto
    feeds: dict
    expect: tuple = ()  # builtins that must appear in the file


def f32(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


def model_of(nodes, feeds: dict, inits: dict, outputs, opset=17) -> onnx.ModelProto:
    """A model whose inputs are ``feeds`` (name -> array: dtype and shape) and whose outputs get the
    exact shapes and types onnxruntime produces (data-dependent shapes such as NonZero's too)."""
    def info(name, value):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))

    graph = helper.make_graph(nodes, "g", [info(k, v) for k, v in feeds.items()],
                              [onnx.ValueInfoProto(name=o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    values = sess.run(None, feeds)
    del model.graph.output[:]
    model.graph.output.extend(info(o, v) for o, v in zip(outputs, values))
    return onnx.shape_inference.infer_shapes(model)


def one(op, feeds: dict, attrs=None, inits=None, order=None, n_out=1, id="", expect=(), opset=17,
        outputs=None) -> Case:
    inits = inits or {}
    outs = outputs or ([f"y{i}" for i in range(n_out)] if n_out > 1 else ["y"])
    node = helper.make_node(op, order or [*feeds, *inits], outs, name=f"{op.lower()}_node", **(attrs or {}))
    return Case(op, id or op, model_of([node], feeds, inits, [o for o in outs if o], opset), feeds, tuple(expect))


def chain(op, nodes, feeds, inits=None, outputs=("y",), id="", expect=()) -> Case:
    return Case(op, id or op, model_of(nodes, feeds, inits or {}, list(outputs)), feeds, tuple(expect))


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


_UNARY = {"Abs": "ABS", "Ceil": "CEIL", "Cos": "COS", "Exp": "EXP", "Floor": "FLOOR", "Neg": "NEG", "Relu": "RELU",
          "Sigmoid": "LOGISTIC", "Sign": "SIGN", "Sin": "SIN", "Tanh": "TANH", "HardSwish": "HARD_SWISH",
          "Softplus": "LOG"}
_POSITIVE = {"Log": "LOG", "Sqrt": "SQRT", "Reciprocal": "DIV"}


def _unary_cases():
    cases = [one(op, {"x": f32(2, 3, 5) * 3}, expect=[b] if b else []) for op, b in _UNARY.items()]
    cases += [one(op, {"x": f32(2, 3, 5, low=0.1, high=4.0)}, expect=[b]) for op, b in _POSITIVE.items()]
    cases += [chain(op, [node("Relu", ["x"], ["r"]), node(op, ["r"])], {"x": f32(2, 3)}, expect=["RELU"])
              for op in ("Identity", "Dropout")]
    rounding = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51]], np.float32)
    cases += [one("Round", {"x": np.concatenate([rounding, f32(1, 8) * 3])}, expect=["ROUND"]),
              one("Erf", {"x": f32(2, 7)}, expect=["EXP"]),
              one("Elu", {"x": f32(2, 7)}, id="Elu-alpha1", expect=["ELU"]),
              one("Elu", {"x": f32(2, 7)}, dict(alpha=0.4), id="Elu-alpha0.4", expect=["ELU", "MINIMUM"]),
              one("Selu", {"x": f32(2, 7)}, expect=["ELU"]),
              one("Softplus", {"x": f32(2, 7) * 30}, id="Softplus-large"),
              one("LeakyRelu", {"x": f32(1, 3, 4, 5)}, dict(alpha=0.2), expect=["LEAKY_RELU"]),
              one("PRelu", {"x": f32(1, 3, 4, 5)}, inits={"s": f32(3, 1, 1)}, expect=["PRELU"]),
              one("HardSigmoid", {"x": f32(2, 7) * 4}, dict(alpha=0.3, beta=0.4), expect=["RELU_0_TO_1"]),
              one("Clip", {"x": f32(2, 7)}, inits={"lo": np.float32(-0.3), "hi": np.float32(0.7)}),
              one("Pow", {"x": f32(2, 7, low=0.2, high=2.0)}, inits={"e": np.float32(1.5)}, expect=["POW"])]
    return cases


def _binary_cases():
    cases = [one(op, {"x": f32(2, 3, 4, 5)}, inits={"k": f32(4, 1)}, id=f"{op}-broadcast-const", expect=[b])
             for op, b in (("Add", "ADD"), ("Sub", "SUB"), ("Mul", "MUL"), ("Max", "MAXIMUM"), ("Min", "MINIMUM"))]
    cases += [one("Div", {"x": f32(2, 3, 4, 5), "z": f32(1, 3, 1, 5, low=0.5, high=2.0)}, expect=["DIV"]),
              # a constant divisor becomes a multiplication by its reciprocal (faster in XNNPACK)
              one("Div", {"x": f32(1, 3, 4, 5)}, inits={"s": f32(3, 1, 1, low=0.2, high=0.3)}, id="Div-const",
                  expect=["MUL"]),
              one("Div", {"x": f32(2, 7)}, inits={"s": np.float32(1.4142135)}, id="Div-scalar-const", expect=["MUL"]),
              one("Add", {"a": i64(1, -2, 3).reshape(3, 1), "b": i64(10, 20)}, id="Add-int64", expect=["ADD"]),
              one("Sum", {"a": f32(2, 3), "b": f32(2, 3), "c": f32(2, 3)}, id="Sum-same-shape", expect=["ADD_N"]),
              one("Sum", {"a": f32(2, 3), "b": f32(3)}, id="Sum-broadcast", expect=["ADD"]),
              one("Max", {"a": f32(2, 3), "b": f32(3), "c": f32(2, 1)}, id="Max-3-inputs"),
              one("Min", {"a": f32(4)}, id="Min-1-input"),
              one("Mean", {"a": f32(2, 3), "b": f32(3)}, id="Mean-broadcast")]
    x, y = f32(2, 3, 4), f32(3, 1)
    y[0, 0] = x[0, 0, 0]  # one exact tie for Equal
    for op, b in (("Equal", "EQUAL"), ("Greater", "GREATER"), ("Less", "LESS")):
        cases.append(one(op, {"x": x, "z": y}, id=f"{op}-float-broadcast", expect=[b]))
    ints = {"x": i64(3, -1, 7, 7).reshape(2, 2), "z": i64(7, -1)}
    cases += [one("Equal", ints, id="Equal-int64"), one("Greater", ints, id="Greater-int64"),
              one("GreaterOrEqual", {"x": x, "z": y}, expect=["GREATER_EQUAL"]),
              one("LessOrEqual", ints, expect=["LESS_EQUAL"])]
    bools = {"a": np.array([[True, False, True], [False, False, True]]), "b": np.array([True, False, False])}
    cases += [one("Not", {"a": bools["a"]}, expect=["LOGICAL_NOT"]), one("And", bools, expect=["LOGICAL_AND"]),
              one("Or", bools, expect=["LOGICAL_OR"]), one("Xor", bools, expect=["NOT_EQUAL"])]
    cases += [one("Where", {"c": bools["a"][:, None, :].repeat(4, 1), "x": f32(4, 3), "z": f32(2, 1, 1)},
                  expect=["SELECT_V2"])]
    return cases


def _conv_pool_cases():
    c = [one("Conv", {"x": f32(1, 4, 9, 11)}, dict(kernel_shape=[3, 5], strides=[2, 1], pads=[1, 2, 1, 2], group=2),
             inits={"w": f32(6, 2, 3, 5), "b": f32(6)}, id="Conv-2d-grouped", expect=["CONV_2D"]),
         one("Conv", {"x": f32(1, 3, 12)}, dict(kernel_shape=[3], strides=[2], pads=[1, 2], dilations=[2]),
             inits={"w": f32(5, 3, 3), "b": f32(5)}, id="Conv-1d", expect=["CONV_2D"]),
         one("Conv", {"x": f32(1, 4, 10)}, dict(kernel_shape=[3], group=4, pads=[1, 1]),
             inits={"w": f32(8, 1, 3)}, id="Conv-1d-depthwise", expect=["DEPTHWISE_CONV_2D"]),
         one("Conv", {"x": f32(1, 2, 5, 6, 7)}, dict(kernel_shape=[3, 3, 2], strides=[1, 2, 1], pads=[1, 0, 1, 1, 1, 0]),
             inits={"w": f32(4, 2, 3, 3, 2), "b": f32(4)}, id="Conv-3d", expect=["CONV_3D"]),
         one("ConvTranspose", {"x": f32(1, 4, 5, 6)}, dict(kernel_shape=[3, 4], strides=[2, 3], pads=[1, 1, 1, 1]),
             inits={"w": f32(4, 3, 3, 4)}, id="ConvTranspose-2d", expect=["TRANSPOSE_CONV"]),
         one("ConvTranspose", {"x": f32(1, 4, 5, 5)}, dict(kernel_shape=[3, 3], strides=[2, 2], group=2, dilations=[2, 1],
                                                            output_padding=[1, 0]),
             inits={"w": f32(4, 3, 3, 3), "b": f32(6)}, id="ConvTranspose-grouped-dilated",
             expect=["SPLIT", "TRANSPOSE_CONV", "CONCATENATION"]),
         one("ConvTranspose", {"x": f32(1, 3, 7)}, dict(kernel_shape=[4], strides=[2], pads=[1, 1]),
             inits={"w": f32(3, 2, 4), "b": f32(2)}, id="ConvTranspose-1d", expect=["TRANSPOSE_CONV"]),
         one("AveragePool", {"x": f32(1, 2, 9, 10)}, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 0])),
         one("AveragePool", {"x": f32(1, 2, 8, 9)}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                         ceil_mode=1), id="AveragePool-ceil-pad-exclude"),
         one("AveragePool", {"x": f32(1, 2, 8, 9)}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                         ceil_mode=1, count_include_pad=1), id="AveragePool-ceil-pad-include"),
         one("AveragePool", {"x": f32(1, 3, 11)}, dict(kernel_shape=[3], strides=[2], pads=[1, 1]), id="AveragePool-1d"),
         one("MaxPool", {"x": f32(1, 2, 9, 10)}, dict(kernel_shape=[2, 3], strides=[1, 2]), expect=["MAX_POOL_2D"]),
         one("MaxPool", {"x": f32(1, 3, 11)}, dict(kernel_shape=[3], strides=[2], ceil_mode=1), id="MaxPool-1d-ceil"),
         one("GlobalAveragePool", {"x": f32(1, 3, 5, 7)}, expect=["MEAN"]),
         one("GlobalMaxPool", {"x": f32(1, 3, 5, 7)}, expect=["REDUCE_MAX"]),
         one("MatMul", {"a": f32(2, 3, 4)}, inits={"w": f32(4, 6)}, expect=["FULLY_CONNECTED"]),
         one("MatMul", {"a": f32(2, 3, 4), "b": f32(1, 4, 5)}, id="MatMul-batched-broadcast", expect=["BATCH_MATMUL"]),
         one("Gemm", {"a": f32(3, 5)}, dict(transB=1, alpha=0.5, beta=2.0), inits={"w": f32(4, 5), "c": f32(4)})]
    return c


def _norm_cases():
    return [one("BatchNormalization", {"x": f32(1, 3, 4, 5)},
                inits={"g": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, low=0.5, high=2.0)}),
            one("InstanceNormalization", {"x": f32(2, 3, 4, 5)}, inits={"g": f32(3), "b": f32(3)},
                expect=["SQUARED_DIFFERENCE", "RSQRT"]),
            one("LayerNormalization", {"x": f32(2, 3, 8)}, dict(axis=-1), inits={"g": f32(8), "b": f32(8)}),
            one("LRN", {"x": f32(1, 7, 3, 4)}, dict(size=5, alpha=0.02, beta=0.6, bias=1.5),
                expect=["LOCAL_RESPONSE_NORMALIZATION"]),
            one("LpNormalization", {"x": f32(2, 5, 3)}, dict(axis=-2, p=2), expect=["L2_NORMALIZATION"]),
            one("LpNormalization", {"x": f32(2, 5, 3)}, dict(axis=1, p=1), id="LpNormalization-p1"),
            one("Softmax", {"x": f32(2, 3, 5)}, dict(axis=-2), expect=["SOFTMAX"]),
            one("LogSoftmax", {"x": f32(2, 3, 5)}, dict(axis=1), expect=["LOG_SOFTMAX"])]


def _reduce_cases():
    c = [one(op, {"x": f32(2, 3, 4, 5)}, dict(axes=[1, -1], keepdims=k), id=f"{op}-keep{k}", expect=[b])
         for (op, b), k in zip((("ReduceMax", "REDUCE_MAX"), ("ReduceMin", "REDUCE_MIN"), ("ReduceMean", "MEAN"),
                                ("ReduceProd", "REDUCE_PROD")), (0, 1, 0, 1))]
    c += [one("ReduceSum", {"x": f32(2, 3, 4)}, dict(keepdims=0), inits={"ax": i64(-2)}, expect=["SUM"]),
          one("ReduceL2", {"x": f32(2, 3, 4)}, dict(keepdims=1, axes=[0, -1]), expect=["SQRT"]),
          one("ArgMax", {"x": f32(2, 5, 3)}, dict(axis=-2, keepdims=0), expect=["ARG_MAX"]),
          one("ArgMax", {"x": np.array([[1, 3, 3], [2, 2, 0]], np.float32)}, dict(axis=1, select_last_index=1),
              id="ArgMax-last-index", expect=["REVERSE_V2"]),
          one("ArgMin", {"x": f32(2, 5, 3)}, dict(axis=2), expect=["ARG_MIN"]),
          one("TopK", {"x": f32(3, 7, 2)}, dict(axis=1), inits={"k": i64(3)}, n_out=2, expect=["TOPK_V2"]),
          one("TopK", {"x": f32(2, 6)}, dict(largest=0), inits={"k": i64(2)}, n_out=2, id="TopK-smallest"),
          one("CumSum", {"x": f32(2, 3, 4)}, inits={"ax": np.array(-2, np.int64)}, expect=["CUMSUM"]),
          one("CumSum", {"x": f32(2, 5)}, dict(exclusive=1, reverse=1), inits={"ax": np.array(1, np.int32)},
              id="CumSum-exclusive-reverse")]
    return c


def _shape_cases():
    x = f32(2, 3, 4)
    c = [one("Flatten", {"x": x}, dict(axis=-1)),
         one("Reshape", {"x": x}, inits={"s": i64(0, -1, 2)}, expect=["RESHAPE"]),
         one("Squeeze", {"x": f32(2, 1, 3)}, inits={"a": i64(-2)}),
         one("Unsqueeze", {"x": x}, inits={"a": i64(-1, 0)}),
         one("Transpose", {"x": x}, dict(perm=[2, 0, 1]), expect=["TRANSPOSE"]),
         one("Concat", {"x": f32(1, 2, 3)}, dict(axis=-2), inits={"k": f32(1, 4, 3)}, expect=["CONCATENATION"]),
         one("Split", {"x": f32(2, 7)}, dict(axis=-1), inits={"sp": i64(3, 4)}, n_out=2, expect=["SPLIT_V"]),
         one("Slice", {"x": f32(4, 10)}, inits={"st": i64(1, -8), "en": i64(100, -1), "ax": i64(0, -1), "sp": i64(2, 3)},
             expect=["STRIDED_SLICE"]),
         one("Gather", {"x": f32(4, 5, 6)}, dict(axis=-2), inits={"i": i64(0, -1, 3)}, expect=["GATHER"]),
         one("Gather", {"x": f32(4, 5), "i": i64(3, 0, 3)}, id="Gather-runtime-indices"),
         one("GatherND", {"x": f32(3, 4, 5)}, inits={"i": np.array([[0, -1], [2, 1]], np.int64)}, expect=["GATHER_ND"]),
         one("GatherND", {"x": f32(3, 4), "i": np.array([[[2, 3]], [[-1, 0]]], np.int64)}, id="GatherND-runtime-indices",
             expect=["FLOOR_MOD"]),
         one("ScatterND", {"x": f32(4, 3)}, inits={"i": np.array([[2], [0]], np.int64), "u": f32(2, 3)},
             expect=["SCATTER_ND", "SELECT_V2"]),
         one("ScatterND", {"x": f32(5), "u": f32(2)}, dict(reduction="add"), inits={"i": np.array([[1], [-1]], np.int64)},
             order=["x", "i", "u"], id="ScatterND-add"),
         one("Expand", {"x": f32(3, 1)}, inits={"s": i64(2, 3, 4)}, expect=["BROADCAST_TO"]),
         one("Tile", {"x": x}, inits={"r": i64(2, 1, 3)}, expect=["TILE"]),
         one("Pad", {"x": f32(1, 2, 5, 6)}, inits={"p": i64(0, 0, 1, 2, 0, 0, 3, 1)}, id="Pad-constant", expect=["PAD"]),
         one("Pad", {"x": f32(1, 2, 5, 6)}, dict(mode="reflect"), inits={"p": i64(0, 0, 1, 2, 0, 0, 3, 1)},
             id="Pad-reflect", expect=["MIRROR_PAD"]),
         one("Pad", {"x": f32(2, 5)}, inits={"p": i64(1, 2, 0, 3), "v": np.float32(0.5)}, id="Pad-value",
             expect=["PADV2"]),
         one("Pad", {"x": f32(1, 2, 4, 5)}, dict(mode="edge"), inits={"p": i64(0, 0, 2, 1, 0, 1, 0, 3)},
             id="Pad-edge", expect=["GATHER"]),
         one("DepthToSpace", {"x": f32(1, 8, 2, 3)}, dict(blocksize=2, mode="CRD"), expect=["DEPTH_TO_SPACE"]),
         one("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, dict(blocksize=2), expect=["SPACE_TO_DEPTH"]),
         one("Cast", {"x": f32(2, 5) * 4}, dict(to=onnx.TensorProto.INT32), id="Cast-float-int32", expect=["CAST"]),
         one("Cast", {"x": i64(0, 3, -2)}, dict(to=onnx.TensorProto.FLOAT), id="Cast-int64-float"),
         one("Cast", {"x": np.array([0.0, 1.5, -0.0, 2], np.float32)}, dict(to=onnx.TensorProto.BOOL), id="Cast-float-bool"),
         one("Shape", {"x": x}, expect=["SHAPE"]),
         one("Shape", {"x": x}, dict(start=-2), id="Shape-start", expect=["GATHER"]),
         chain("ConstantOfShape", [node("Shape", ["x"], ["s"]),
                                   node("ConstantOfShape", ["s"], value=numpy_helper.from_array(np.array([2.5], np.float32)))],
               {"x": x}, expect=["FILL"]),
         one("Range", {"a": np.array(2, np.int64), "b": np.array(11, np.int64), "d": np.array(3, np.int64)},
             expect=["RANGE"]),
         one("Range", {"a": np.array(1.0, np.float32), "b": np.array(-2.0, np.float32), "d": np.array(-0.75, np.float32)},
             id="Range-float"),
         one("OneHot", {"i": i64(0, -1, 2, 4)}, dict(axis=0), inits={"d": i64(4), "v": np.array([-1.0, 3.0], np.float32)},
             expect=["ONE_HOT"]),
         one("NonZero", {"x": np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)}, expect=["WHERE"]),
         chain("Constant", [node("Constant", [], ["k"], value=numpy_helper.from_array(f32(2, 3))), node("Add", ["x", "k"])],
               {"x": f32(2, 3)})]
    return c


def _resize_cases():
    roi = np.zeros(0, np.float32)
    return [one("Resize", {"x": f32(1, 2, 3, 4)}, dict(mode="linear", coordinate_transformation_mode="align_corners"),
                inits={"roi": roi, "sc": np.array([1, 1, 2, 1.5], np.float32)}, expect=["RESIZE_BILINEAR"]),
            one("Resize", {"x": f32(1, 2, 3, 4)}, dict(mode="nearest"), inits={"roi": roi, "sc": np.array([1, 1, 2, 2], np.float32)},
                id="Resize-nearest-2x", expect=["RESIZE_NEAREST_NEIGHBOR"]),
            one("Resize", {"x": f32(1, 2, 5, 4)}, dict(mode="nearest", nearest_mode="ceil",
                                                       coordinate_transformation_mode="pytorch_half_pixel"),
                inits={"roi": roi, "sc": np.array([1, 1, 1.6, 1.75], np.float32)}, id="Resize-nearest-ceil-gather",
                expect=["GATHER"]),
            one("Upsample", {"x": f32(1, 2, 3, 4)}, dict(mode="nearest"), inits={"sc": np.array([1, 1, 2, 3], np.float32)},
                opset=9, expect=["RESIZE_NEAREST_NEIGHBOR"]),
            one("Upsample", {"x": f32(1, 2, 3, 4)}, dict(mode="linear"), inits={"sc": np.array([1, 1, 2, 2], np.float32)},
                opset=9, id="Upsample-linear", expect=["RESIZE_BILINEAR"])]


def _lstm_cases():
    seq, batch, n_in, hidden = 5, 2, 3, 4

    def weights(dirs):
        return {"W": f32(dirs, 4 * hidden, n_in, low=-0.6, high=0.6), "R": f32(dirs, 4 * hidden, hidden, low=-0.6, high=0.6),
                "B": f32(dirs, 8 * hidden, low=-0.3, high=0.3)}

    x = {"x": f32(seq, batch, n_in)}
    forward = weights(1)
    bidir = dict(weights(2), P=f32(2, 3 * hidden, low=-0.5, high=0.5))
    zeros = {"h0": np.zeros((1, batch, hidden), np.float32), "c0": np.zeros((1, batch, hidden), np.float32)}
    return [one("LSTM", x, dict(hidden_size=hidden), inits=forward, outputs=["y", "yh"],
                expect=["UNIDIRECTIONAL_SEQUENCE_LSTM"]),
            one("LSTM", x, dict(hidden_size=hidden, direction="reverse"), inits=dict(weights(1), **zeros),
                order=["x", "W", "R", "B", "", "h0", "c0"], outputs=["y", "yh"], id="LSTM-reverse-zero-state",
                expect=["REVERSE_V2"]),
            one("LSTM", x, dict(hidden_size=hidden, direction="bidirectional"), inits=bidir,
                order=["x", "W", "R", "B", "", "", "", "P"], outputs=["y", "yh"], id="LSTM-bidirectional-peephole")]


def _all_cases() -> list[Case]:
    return (_unary_cases() + _binary_cases() + _conv_pool_cases() + _norm_cases() + _reduce_cases()
            + _shape_cases() + _resize_cases() + _lstm_cases())


CASES = _all_cases()


def _matrix_ops() -> set[str]:
    m = load_matrix()
    ops = m.data["frameworks"]["tflite"]["ops"]
    return {op for op in ops if any(m.op_status("tflite", hw, op) != "unsupported" for hw in m.hardware("tflite"))}


def test_matrix_ops_are_mapped_or_listed():
    matrix = _matrix_ops()
    mapped = {c.op for c in CASES}
    assert not mapped & set(UNMAPPED)
    assert matrix == (mapped | set(UNMAPPED)) & matrix, sorted(matrix - mapped - set(UNMAPPED))
    assert set(UNMAPPED) <= matrix  # a listed op the matrix no longer claims must leave the list
    assert {op for op in mapped if op != "Constant"} <= set(OPS)


def _max_error(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if ref.dtype.kind in "biu":
        assert got.dtype.kind == ref.dtype.kind and np.array_equal(got, ref), (got, ref)
        return 0.0
    scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    return float(np.max(np.abs(got.astype(np.float64) - ref), initial=0.0)) / scale


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(case, tmp_path):
    art = TARGET.export(case.model, tmp_path / "a", "cpu", ExportOptions(name="m"))
    again = TARGET.export(case.model, tmp_path / "b", "cpu", ExportOptions(name="m"))
    assert art.files[0].read_bytes() == again.files[0].read_bytes()
    names = op_names(art.files[0])  # builtin-only resolver: fails on any Flex/custom op
    assert not any(n.startswith("Flex") or n == "CUSTOM" for n in names)
    for builtin in case.expect:
        assert builtin in names, (builtin, names)
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, case.feeds)))
    got = TARGET.run(art, case.feeds)
    tol = 1e-4 if case.op in TRANSCENDENTAL else 1e-5
    for name, value in ref.items():
        assert got[name].dtype == value.dtype or value.dtype.kind == "f", (name, got[name].dtype, value.dtype)
        assert _max_error(value, got[name]) <= tol, (name, _max_error(value, got[name]))


def test_op_versions_follow_op_version_cc(tmp_path):
    """BROADCAST_TO starts at version 2 (v1 was rolled back), int64 RANGE is 2, WHERE on a
    non-bool condition is 2 (tensorflow/lite/tools/versioning/op_version.cc)."""
    by_id = {c.id: c for c in CASES}
    for case_id, builtin, version in (("Expand", "BROADCAST_TO", 2), ("Range", "RANGE", 2),
                                      ("Range-float", "RANGE", 1), ("NonZero", "WHERE", 2),
                                      ("Add-int64", "ADD", 4), ("Conv-3d", "CONV_3D", 1)):
        art = TARGET.export(by_id[case_id].model, tmp_path / case_id, "cpu", ExportOptions(name="m"))
        assert opcodes(art.files[0])[builtin] == version, case_id


def test_unmapped_ops_are_refused(tmp_path):
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7]]], np.float32)
    case = one("NonMaxSuppression", {"b": boxes, "s": scores}, inits={"m": i64(2)})
    with pytest.raises(Unsupported) as err:
        TARGET.export(case.model, tmp_path, "cpu", ExportOptions(name="m"))
    assert "NonMaxSuppression" in str(err.value) and "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())


def test_lstm_state_is_reset_between_sequences(tmp_path):
    """UNIDIRECTIONAL_SEQUENCE_LSTM keeps its state in variable tensors across Invoke calls: the
    second run of the same sequence differs unless the app resets them (reset_all_variables)."""
    from ai_edge_litert.interpreter import Interpreter

    case = next(c for c in CASES if c.id == "LSTM")
    art = TARGET.export(case.model, tmp_path, "cpu", ExportOptions(name="m"))
    interp = Interpreter(model_path=str(art.files[0]))
    interp.allocate_tensors()
    x_index = interp.get_input_details()[0]["index"]
    y_index = next(d["index"] for d in interp.get_output_details() if d["name"] == "y")
    runs = []
    for reset in (False, False, True):
        if reset:
            interp.reset_all_variables()
        interp.set_tensor(x_index, case.feeds["x"])
        interp.invoke()
        runs.append(interp.get_tensor(y_index).copy())
    assert not np.allclose(runs[0], runs[1])  # state carried over
    assert np.array_equal(runs[0], runs[2])  # reset: the same sequence, the same result


def test_refused_variants_name_the_reason(tmp_path):
    """Variants without an exact builtin mapping fail with one line naming the node."""
    refused = [
        one("MaxPool", {"x": f32(1, 2, 4, 4, 4)}, dict(kernel_shape=[2, 2, 2]), id="MaxPool-3d"),
        one("Resize", {"x": f32(1, 2, 3, 4)}, dict(mode="cubic"), inits={"roi": np.zeros(0, np.float32),
                                                                         "sc": np.array([1, 1, 2, 2], np.float32)},
            id="Resize-cubic"),
        one("LSTM", {"x": f32(3, 1, 2)}, dict(hidden_size=2), inits={"W": f32(1, 8, 2), "R": f32(1, 8, 2),
                                                                      "B": f32(1, 16), "h0": f32(1, 1, 2)},
            order=["x", "W", "R", "B", "", "h0"], id="LSTM-nonzero-initial-h"),
    ]
    for case in refused:
        with pytest.raises(Unsupported) as err:
            TARGET.export(case.model, tmp_path / case.id, "cpu", ExportOptions(name="m"))
        assert case.op in str(err.value) and "\n" not in str(err.value), case.id


_NHWC_TAILS = [
    ("ArgMax", [node("ArgMax", ["h"], axis=1, keepdims=1)], {}),
    ("ArgMin-last", [node("ArgMin", ["h"], axis=-1, keepdims=0, select_last_index=1)], {}),
    ("TopK", [node("TopK", ["h", "k"], ["y", "yi"], axis=1)], {"k": i64(2)}),
    ("CumSum", [node("CumSum", ["h", "ax"], reverse=1)], {"ax": np.array(1, np.int64)}),
    ("LpNormalization", [node("LpNormalization", ["h"], axis=1)], {}),
    ("InstanceNormalization", [node("InstanceNormalization", ["h", "g", "b"])], {"g": f32(4), "b": f32(4)}),
    ("ReduceL2", [node("ReduceL2", ["h"], axes=[2, 3], keepdims=0)], {}),
    ("Where", [node("Greater", ["h", "t"], ["m"]), node("Where", ["m", "h", "t"])], {"t": f32(4, 1, 1)}),
    ("Shape", [node("Shape", ["h"], start=1)], {}),
    ("Elu", [node("Elu", ["h"], alpha=0.3)], {}),
    ("Pad-edge", [node("Pad", ["h", "p"], mode="edge")], {"p": i64(0, 1, 2, 0, 0, 0, 1, 2)}),
    ("LRN", [node("LRN", ["h"], size=3)], {}),
]


@pytest.mark.parametrize("tail", _NHWC_TAILS, ids=[t[0] for t in _NHWC_TAILS])
def test_op_on_nhwc_data(tmp_path, tail):
    """The same ops reading a convolution's output, which the file stores NHWC: axes must be
    renumbered to memory positions (or the data re-laid out) and results still match."""
    _, nodes, inits = tail
    front = [node("Conv", ["x", "front_w"], ["h"])]
    outputs = [o for n in nodes for o in n.output if o in ("y", "yi")]
    case = chain(tail[0], front + nodes, {"x": f32(1, 4, 5, 6)}, dict(inits, front_w=f32(4, 4, 1, 1)), outputs=outputs)
    art = TARGET.export(case.model, tmp_path, "cpu", ExportOptions(name="m"))
    assert "CONV_2D" in op_names(art.files[0])
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, case.feeds)))
    got = TARGET.run(art, case.feeds)
    for name, value in ref.items():
        assert _max_error(value, got[name]) <= 1e-4, name


def test_lstm_with_a_runtime_bias_is_refused_not_zeroed(tmp_path):
    import pytest
    from onnx import TensorProto, helper, numpy_helper

    from converter.errors import Unsupported
    from converter.targets import get
    from converter.targets.base import ExportOptions

    rng = np.random.default_rng(0)
    hidden, size = 3, 2
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, size)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R")
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=hidden)], "lstm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 1, size]),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, [1, 8 * hidden])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 1, 1, hidden])], [w, r])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(Unsupported, match="B and P must be constants"):
        get("tflite").export(model, tmp_path, "cpu", ExportOptions())
    assert not list(tmp_path.iterdir())

"""Per-layer TNN field order, written from TNN's parsers (Tencent/TNN, commit f0cb081).

Each case builds one ONNX op, exports it, and checks the raw parameter tokens of the emitted
.tnnproto layer line against the order in which the cited
``source/tnn/interpreter/tnn/layer_interpreter/<file>`` ``InterpretProto`` reads them; shapes
and kernels are chosen non-square so a swapped h/w or a shifted field fails.  Each case also
runs the files through the round-trip reader and onnxruntime (max abs error <= 1e-5).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from converter.targets.tnn import TARGET
from test_tnn_helpers import layer_params, layer_tokens, single_node_model

RNG = np.random.default_rng(7)

from rank_runtimes import real_runtime_fixture  # noqa: E402

#: Every file these tests read back with the reader also runs in TNN's own runtime.
_real_runtime = real_runtime_fixture("tnn", devices={
    "test_layer_fields_follow_tnn_parser[instance_norm]":
        ("NAIVE", "epsilon 1e-3: TNN's x86 kernel hard-codes 1e-5 (x86_inst_norm_layer_acc.cc:49), the file is for arm")})


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


F = "%.9g"
# (id, model, expected [(layer type, params)], TNN parser file)
CASES = [
    ("conv", single_node_model("Conv", {"x": (1, 4, 9, 11)}, dict(kernel_shape=[3, 5], strides=[2, 1], pads=[1, 2, 1, 2], dilations=[2, 1], group=2),
                               {"w": _w(6, 2, 3, 5), "b": _w(6)}),
     # group input_channel output_channel kh kw sh sw ph pw has_bias pad_type dh dw activation
     [("Convolution", "2 2 6 3 5 2 1 1 2 1 -1 2 1 0")], "conv_layer_interpreter.cc"),
    ("conv_uneven_pads", single_node_model("Conv", {"x": (1, 3, 8, 8)}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 2]),
                                           {"w": _w(4, 3, 3, 3)}),
     # pad_layer_interpreter.cc: n1 n2 t b l r c_b c_e type value, then an unpadded conv (no bias)
     [("Pad", "0 0 0 1 1 2 0 0 0 0"), ("Convolution", "1 3 4 3 3 2 2 0 0 0 -1 1 1 0")], "pad_layer_interpreter.cc"),
    ("deconv_output_padding", single_node_model("ConvTranspose", {"x": (1, 4, 5, 6)},
                                                dict(kernel_shape=[9, 7], strides=[3, 2], pads=[4, 3, 4, 3], output_padding=[2, 1]),
                                                {"w": _w(4, 3, 9, 7), "b": _w(3)}),
     # deconv with the symmetric part of the pads (2, 2), then StridedSliceV2 n begins n ends n axes n strides
     [("Deconvolution", "1 4 3 9 7 3 2 2 2 1 -1 1 1 0"), ("StridedSliceV2", "2 2 1 2 17 13 2 2 3 2 1 1")],
     "conv_layer_interpreter.cc + stride_slice_v2_layer_interpreter.cc"),
    ("maxpool", single_node_model("MaxPool", {"x": (1, 2, 9, 10)}, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 0])),
     # pool_type kh kw sh sw ph pw kernel_index_h kernel_index_w pad_type ceil_mode adaptive out_h out_w
     [("Pooling", "0 3 2 2 1 1 0 -1 -1 -1 0 0 0 0")], "pooling_layer_interpreter.cc"),
    ("avgpool_ceil", single_node_model("AveragePool", {"x": (1, 2, 8, 9)}, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
     [("Pooling", "1 3 3 2 2 0 0 -1 -1 -1 1 0 0 0")], "pooling_layer_interpreter.cc"),
    ("global_avgpool", single_node_model("GlobalAveragePool", {"x": (1, 3, 5, 7)}),
     [("Pooling", "1 0 0 1 1 0 0 -1 -1 -1 0 0 0 0")], "pooling_layer_interpreter.cc (kernel 0 0 = global)"),
    ("gemm", single_node_model("Gemm", {"x": (2, 5)}, dict(transB=1), {"w": _w(3, 5), "c": _w(3)}),
     # num_output has_bias transpose axis
     [("InnerProduct", "3 1 0 1")], "inner_product_layer_interpreter.cc"),
    ("matmul_const_b", single_node_model("MatMul", {"x": (2, 3, 4)}, None, {"w": _w(4, 6)}),
     [("MatMul", "1")], "mat_mul_layer_interpreter.cc (weight_position)"),
    ("matmul_blobs", single_node_model("MatMul", {"a": (2, 3, 4), "b": (2, 4, 5)}),
     [("MatMul", "-1")], "mat_mul_layer_interpreter.cc"),
    ("add_const_first", single_node_model("Add", {"x": (1, 3, 4, 5)}, None, {"k": _w(1, 3, 1, 1)}, input_order=["k", "x"]),
     [("Add", "0")], "add_layer_interpreter.cc (weight_input_index)"),
    ("sub_const", single_node_model("Sub", {"x": (1, 3, 4, 5)}, None, {"k": _w(5)}),
     [("Sub", "1")], "sub_layer_interpreter.cc"),
    ("mul_blobs", single_node_model("Mul", {"x": (1, 3, 4, 5), "z": (1, 1, 4, 1)}),
     [("Mul", "-1")], "mul_layer_interpreter.cc"),
    ("div_const", single_node_model("Div", {"x": (2, 3)}, None, {"k": np.array(4.0, np.float32)}),
     [("Div", "1")], "div_layer_interpreter.cc"),
    ("max_blobs", single_node_model("Max", {"x": (2, 3), "z": (2, 3)}), [("Maximum", "-1")], "max_layer_interpreter.cc"),
    ("min_const", single_node_model("Min", {"x": (2, 3)}, None, {"k": _w(3)}), [("Minimum", "1")], "min_layer_interpreter.cc"),
    ("relu", single_node_model("Relu", {"x": (2, 3)}), [("ReLU", "")], "no interpreter: no params"),
    ("sigmoid", single_node_model("Sigmoid", {"x": (2, 3)}), [("Sigmoid", "")], "unary_op_layer_interpreter.h"),
    ("erf", single_node_model("Erf", {"x": (2, 3)}), [("Erf", "")], "unary_op_layer_interpreter.h"),
    ("tanh", single_node_model("Tanh", {"x": (2, 3)}), [("Tanh", "")], "no interpreter: no params"),
    ("relu6", single_node_model("Clip", {"x": (2, 3)}, None, {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}),
     [("ReLU6", "")], "no interpreter: no params"),
    ("clip", single_node_model("Clip", {"x": (2, 3)}, None, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.25, np.float32)}),
     [("Clip", "-0.5 0.25")], "clip_layer_interpreter.cc (min max)"),
    ("elu", single_node_model("Elu", {"x": (2, 3)}, dict(alpha=0.3)), [("Elu", F % np.float32(0.3))], "elu_layer_interpreter.cc"),
    ("selu", single_node_model("Selu", {"x": (2, 3)}, dict(alpha=1.5, gamma=0.75)), [("Selu", "1.5 0.75")], "selu_layer_interpreter.cc (alpha gamma)"),
    ("prelu", single_node_model("PRelu", {"x": (1, 3, 4, 4)}, None, {"s": _w(3, 1, 1)}),
     [("PReLU", "0 0")], "prelu_layer_interpreter.cc (channel_shared has_filler)"),
    ("leaky_relu", single_node_model("LeakyRelu", {"x": (1, 3, 4)}, dict(alpha=0.25)), [("PReLU", "1 0")], "prelu_layer_interpreter.cc"),
    ("hard_sigmoid", single_node_model("HardSigmoid", {"x": (2, 3)}, dict(alpha=0.25, beta=0.375)), [("HardSigmoid", "0.25 0.375")],
     "hard_sigmoid_layer_interpreter.cc (alpha beta)"),
    ("hard_swish", single_node_model("HardSwish", {"x": (2, 3)}), [("HardSwish", f"{F % np.float32(1 / 6)} 0.5")],
     "hard_swish_layer_interpreter.cc (alpha beta)"),
    ("pow", single_node_model("Pow", {"x": (2, 3)}, None, {"e": np.array(2.0, np.float32)}), [("Power", "2 1 0")],
     "pow_layer_interpreter.cc (exponent scale shift)"),
    ("softmax_default_axis", single_node_model("Softmax", {"x": (2, 3, 4)}), [("Softmax", "2")],
     "softmax_layer_interpreter.cc (axis; its default 1 must not be relied on)"),
    ("log_softmax", single_node_model("LogSoftmax", {"x": (2, 3, 4)}, dict(axis=1)), [("LogSoftmax", "1")], "log_softmax_layer_interpreter.cc"),
    ("reduce_mean", single_node_model("ReduceMean", {"x": (2, 3, 4, 5)}, dict(axes=[-1, 1], keepdims=0)), [("ReduceMean", "0 1 3")],
     "reduce_op_interpreter.cc (keep_dims axes..)"),
    ("reduce_sum", single_node_model("ReduceSum", {"x": (2, 3, 4)}, None, {"axes": np.array([2], np.int64)}), [("ReduceSum", "1 2")],
     "reduce_op_interpreter.cc"),
    ("reshape", single_node_model("Reshape", {"x": (2, 3, 4)}, None, {"s": np.array([0, -1, 2], np.int64)}),
     [("Reshape", "0 3 3 2 6 2 0")], "reshape_layer_interpreter.cc (axis num_axes size dims.. reshape_type)"),
    ("flatten", single_node_model("Flatten", {"x": (2, 3, 4)}, dict(axis=-1)), [("Flatten", "2")], "flatten_layer_interpreter.cc"),
    ("transpose", single_node_model("Transpose", {"x": (2, 3, 4, 5)}, dict(perm=[0, 2, 3, 1])), [("Permute", "4 0 2 3 1")],
     "permute_layer_interpreter.cc (n orders..)"),
    ("concat_with_const", single_node_model("Concat", {"x": (1, 2, 3)}, dict(axis=-2), {"k": _w(1, 4, 3)}), [("Concat", "1")],
     "concat_layer_interpreter.cc"),
    ("split", single_node_model("Split", {"x": (2, 7)}, dict(axis=1), {"sp": np.array([3, 4], np.int64)}, n_outputs=2),
     [("SplitV", "1 2 3 4")], "splitv_layer_interpreter.cc (axis count slices..)"),
    ("squeeze", single_node_model("Squeeze", {"x": (1, 3, 1, 2)}, None, {"a": np.array([-2, 0], np.int64)}), [("Squeeze", "2 0 2")],
     "squeeze_layer_interpreter.cc"),
    ("unsqueeze", single_node_model("Unsqueeze", {"x": (3, 2)}, None, {"a": np.array([-1, 0], np.int64)}), [("Unsqueeze", "2 0 3")],
     "unsqueeze_layer_interpreter.cc"),
    ("gather", single_node_model("Gather", {"x": (4, 5, 6)}, dict(axis=1), {"i": np.array([[0, -1], [2, 3]], np.int64)}),
     [("Gather", "1 0 1")], "gather_layer_interpreter.cc (axis data_in_resource indices_in_resource)"),
    ("slice", single_node_model("Slice", {"x": (4, 10)}, None, {"st": np.array([1, -8], np.int64), "en": np.array([100, -1], np.int64),
                                                              "ax": np.array([0, 1], np.int64), "sp": np.array([2, 3], np.int64)}),
     [("StridedSliceV2", "2 1 2 2 4 9 2 0 1 2 2 3")], "stride_slice_v2_layer_interpreter.cc"),
    ("pad_reflect", single_node_model("Pad", {"x": (1, 2, 5, 6)}, dict(mode="reflect"), {"p": np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64)}),
     [("Pad", "0 0 1 3 2 1 0 0 1 0")], "pad_layer_interpreter.cc"),
    ("pad_3d", single_node_model("Pad", {"x": (2, 5, 6)}, None, {"p": np.array([1, 0, 2, 0, 1, 1], np.int64), "v": np.array(1.5, np.float32)}),
     [("PadV2", "3 1 0 2 0 1 1 0 1.5")], "padv2_layer_interpreter.cc (ndims pads.. type value)"),
    ("resize_nearest", single_node_model("Resize", {"x": (1, 2, 3, 4)}, dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                                         {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 3], np.float32)}),
     [("Upsample", "1 2 3 0 6 12")], "upsample_layer_interpreter.cc (mode scale_h scale_w align_corners h w)"),
    ("resize_bilinear", single_node_model("Resize", {"x": (1, 2, 3, 4)}, dict(mode="linear", coordinate_transformation_mode="half_pixel"),
                                          {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)}),
     [("Upsample", "2 2 2 0 6 8")], "upsample_layer_interpreter.cc"),
    ("argmax", single_node_model("ArgMax", {"x": (2, 5, 3)}, dict(axis=-2, keepdims=0), out_type=7), [("ArgMaxOrMin", "1 1 0 0")],
     "arg_max_or_min_layer_interpreter.cc (mode axis keep_dims select_last_index)"),
    ("argmin", single_node_model("ArgMin", {"x": (2, 5, 3)}, dict(axis=2), out_type=7), [("ArgMaxOrMin", "0 2 1 0")],
     "arg_max_or_min_layer_interpreter.cc"),
    ("tile", single_node_model("Tile", {"x": (2, 3)}, None, {"r": np.array([2, 3], np.int64)}), [("Tile", "2 3")],
     "tile_layer_interpreter.cc (reps = every remaining token)"),
    ("expand", single_node_model("Expand", {"x": (3, 1)}, None, {"s": np.array([2, 1, 4], np.int64)}), [("Expand", "3 2 3 4")],
     "expand_layer_interpreter.cc (shape_size shape..)"),
    ("batchnorm", single_node_model("BatchNormalization", {"x": (1, 3, 4, 4)}, None,
                                    {"g": _w(3), "b": _w(3), "m": _w(3), "v": np.abs(_w(3)) + 0.5}),
     [("BatchNormCxx", "")], "batch_norm_layer_interpreter.cc (no params)"),
    ("instance_norm", single_node_model("InstanceNormalization", {"x": (1, 3, 4, 4)}, dict(epsilon=1e-3), {"g": _w(3), "b": _w(3)}),
     [("InstBatchNormCxx", f"3 {F % np.float32(1e-3)}")], "instance_norm_layer_interpreter.cc (channels eps)"),
    ("layer_norm", single_node_model("LayerNormalization", {"x": (2, 3, 4)}, dict(axis=-2, epsilon=1e-4), {"g": _w(3, 4), "b": _w(3, 4)}),
     [("LayerNorm", f"2 {F % np.float32(1e-4)}")], "layer_norm_layer_interpreter.cc (reduce_dims_size eps)"),
]


@pytest.mark.parametrize("case_id,model,expected,source", CASES, ids=[c[0] for c in CASES])
def test_layer_fields_follow_tnn_parser(case_id, model, expected, source, tmp_path):
    art = TARGET.export(model, tmp_path, "arm")
    lines = layer_tokens(art.files[0].read_text())
    got = [(tokens[0], " ".join(layer_params(tokens))) for tokens in lines]
    assert got == expected, source

    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}}
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    out = TARGET.run(art, feeds)
    for r, o in zip(ref, model.graph.output):
        assert out[o.name].shape == r.shape
        assert float(np.max(np.abs(out[o.name] - r), initial=0.0)) <= 1e-5, case_id


def test_every_layer_type_the_target_emits_has_a_field_order_case():
    """The converters' emit() calls and this table must cover the same TNN layer types."""
    import re
    from pathlib import Path

    import converter.targets.tnn as pkg

    emitted = set()
    for module in ("layers.py", "layers_nn.py", "layers_shape.py"):
        text = (Path(pkg.__file__).parent / module).read_text()
        emitted |= set(re.findall(r'ctx\.emit\(\s*"(\w+)"', text))
    from converter.targets.tnn import layers

    emitted |= set(layers._UNARY.values()) | set(layers._BINARY.values()) | set(layers._REDUCE) | {"Softmax", "LogSoftmax"}
    covered = {t for _, _, expected, _ in CASES for t, _ in expected}
    # Unary layers share one parser (no params); reductions share reduce_op_interpreter.cc.
    shared = (set(layers._UNARY.values()) - {"ReLU", "Sigmoid", "Erf", "Tanh"}) | (set(layers._REDUCE) - {"ReduceMean", "ReduceSum"})
    assert emitted - shared <= covered, sorted(emitted - shared - covered)

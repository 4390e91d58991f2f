"""Op-level MACE tests.  Each checks the arguments we emit against MACE's own kernel source
(cited per test) and the numbers against onnxruntime on the original ONNX node; the
``*_from_source`` tests run hand-built MACE nets through the reader and compare with numpy
re-implementations of MACE's C++ loops, so the reader is checked independently of the writer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.errors import Unsupported
from converter.targets.base import ExportOptions
from converter.targets.mace import TARGET, reader
from converter.targets.mace._generated import mace_pb2

RNG = np.random.default_rng(0)


def _model(op, in_shapes, out_shape, inits=(), out_dtype=TensorProto.FLOAT, in_dtype=TensorProto.FLOAT,
           extra_inputs=(), **attrs):
    inputs = [helper.make_tensor_value_info(f"x{i}", in_dtype, s) for i, s in enumerate(in_shapes)]
    names = [f"x{i}" for i in range(len(in_shapes))] + [n for n, _ in inits] + list(extra_inputs)
    node = helper.make_node(op, names, ["y"], name="node0", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", out_dtype, out_shape)],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


#: Every model _roundtrip checked, for test_every_roundtrip_runs_in_mace_runtime (last in this file:
#: one mace_run invocation for all of them, since mace_run measures the CPU for ~1 s at every start).
_ROUNDTRIPS: list = []


def _roundtrip(model, tmp_path, feeds=None, tol=1e-5):
    art = TARGET.export(model, tmp_path, "cpu", ExportOptions(name="m"))
    if feeds is None:
        feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                 for i in model.graph.input}
    _ROUNDTRIPS.append((model, feeds, tol))
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = TARGET.run(art, feeds)["y"]
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= tol
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString((tmp_path / "m.pb").read_bytes())
    return multi.net_def[0]


def _args(op):
    out = {}
    for a in op.arg:
        out[a.name] = list(a.ints) or list(a.floats) or (a.s.decode() if a.s else (a.f if a.f else a.i))
    return out


def test_conv2d_args_and_top_heavy_pads(tmp_path):
    """conv_pool_2d_base.h:30-34 (strides, padding_values, dilations); ref/conv_2d.cc:66 pads
    total>>1 on top, so ONNX pads top=2,bottom=1 need an explicit Pad (pad.cc:64-75)."""
    w, bias = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    net = _roundtrip(_model("Conv", [[1, 3, 9, 9]], [1, 4, 5, 9], [("w", w), ("b", bias)], pads=[2, 1, 1, 1],
                            strides=[2, 1]), tmp_path)
    assert [op.type for op in net.op] == ["Pad", "Conv2D"]
    pad_args, conv_args = _args(net.op[0]), _args(net.op[1])
    assert pad_args["paddings"] == [0, 0, 2, 1, 1, 1, 0, 0] and pad_args["has_data_format"] == 1  # NHWC order
    assert conv_args["padding_values"] == [0, 0] and conv_args["strides"] == [2, 1]
    assert conv_args["data_format"] == 1000  # AUTO, fixed-format op
    assert list(net.tensors[0].dims) == [4, 3, 3, 3]  # OIHW


def test_conv2d_symmetric_pads_need_no_pad_op(tmp_path):
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    net = _roundtrip(_model("Conv", [[1, 3, 8, 8]], [1, 4, 8, 8], [("w", w)], pads=[1, 1, 1, 1], dilations=[1, 1]),
                     tmp_path)
    assert [op.type for op in net.op] == ["Conv2D"] and _args(net.op[0])["padding_values"] == [2, 2]


def test_depthwise_conv2d_filter_layout(tmp_path):
    """onnx_converter.py convert_conv2d: group == C and one filter per group -> DepthwiseConv2d,
    filter re-dimmed [C,1,kh,kw] -> [1,C,kh,kw]."""
    w = RNG.standard_normal((6, 1, 3, 3)).astype(np.float32)
    net = _roundtrip(_model("Conv", [[1, 6, 7, 7]], [1, 6, 7, 7], [("w", w)], pads=[1, 1, 1, 1], group=6), tmp_path)
    assert net.op[0].type == "DepthwiseConv2d" and list(net.tensors[0].dims) == [1, 6, 3, 3]


def test_grouped_conv_is_unsupported(tmp_path):
    w = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    with pytest.raises(Unsupported, match=r"node 'node0' \(Conv\): group=2"):
        TARGET.export(_model("Conv", [[1, 4, 7, 7]], [1, 4, 5, 5], [("w", w)], group=2), tmp_path, "cpu")


def test_deconv2d_output_padding_becomes_slices(tmp_path):
    """deconv_2d.cc:74-82 (framework_type != 0 -> input 2 is bias); MACE's converter refuses
    output_padding, we crop a padding-free Deconv2D with Slice (slice.cc)."""
    w, bias = RNG.standard_normal((4, 2, 9, 9)).astype(np.float32), RNG.standard_normal(2).astype(np.float32)
    net = _roundtrip(_model("ConvTranspose", [[1, 4, 5, 5]], [1, 2, 15, 15], [("w", w), ("b", bias)],
                            strides=[3, 3], pads=[4, 4, 4, 4], output_padding=[2, 2]), tmp_path)
    assert [op.type for op in net.op] == ["Deconv2D", "Slice", "Slice"]
    deconv = _args(net.op[0])
    assert deconv["framework_type"] == 2 and deconv["padding_values"] == [0, 0]
    assert list(net.tensors[0].dims) == [2, 4, 9, 9]  # [O, I, kh, kw]
    assert [_args(op)["starts"] + _args(op)["ends"] + _args(op)["axes"] for op in net.op[1:]] == [
        [4, 19, 2], [4, 19, 3]]


def test_deconv2d_symmetric_uses_padding_values(tmp_path):
    w = RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)
    net = _roundtrip(_model("ConvTranspose", [[1, 3, 5, 5]], [1, 2, 10, 10], [("w", w)], strides=[2, 2],
                            pads=[1, 1, 1, 1]), tmp_path)
    assert [op.type for op in net.op] == ["Deconv2D"] and _args(net.op[0])["padding_values"] == [2, 2]


def _mace_net(ops, tensors, inputs, outputs):
    """Hand-build a MACE net (independent of our writer); ``tensors``: name -> float32 array."""
    multi = mace_pb2.MultiNetDef()
    net = multi.net_def.add()
    net.arg.add(name="runtime_type", i=0)
    blob = bytearray()
    for name, value in tensors.items():
        net.tensors.add(name=name, dims=value.shape, data_type=1, offset=len(blob), data_size=value.size)
        blob += value.astype("<f4").tobytes()
    for op_type, ins, args, rank in ops:
        op = net.op.add(type=op_type, name=f"op{len(net.op)}", input=ins, output=[f"t{len(net.op)}"])
        op.output_shape.add(dims=[1] * rank)
        for k, v in args.items():
            a = op.arg.add(name=k)
            if isinstance(v, list):
                a.ints.extend(v)
            elif isinstance(v, float):
                a.f = v
            elif isinstance(v, str):
                a.s = v.encode()
            else:
                a.i = v
    for name, dims in inputs:
        net.input_info.add(name=name, dims=dims, data_format=0)
    net.output_info.add(name=net.op[-1].output[0], dims=outputs, data_format=0)
    return multi.SerializeToString(), bytes(blob)


def _run_mace(tmp_path, pb, data, feeds):
    (tmp_path / "h.pb").write_bytes(pb)
    (tmp_path / "h.data").write_bytes(data)
    model = reader.read(tmp_path / "h.pb", tmp_path / "h.data")
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]


def test_deconv2d_crop_from_source(tmp_path):
    """ref/deconv_2d.cc: scatter x*w into a (in-1)*s+k buffer, crop pad_total/2 at top/left
    (CalcDeconvShape_Caffe: out = padded - pad_total).  Numpy transcription of that loop."""
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)  # [O, I, kh, kw]
    s, total = 2, [3, 1]
    full = np.zeros((1, 3, 7, 7), np.float32)
    for oc in range(3):
        for i in range(3):
            for j in range(3):
                for ic in range(2):
                    full[0, oc, i * s:i * s + 3, j * s:j * s + 3] += x[0, ic, i, j] * w[oc, ic]
    want = full[:, :, total[0] // 2: 7 - (total[0] - total[0] // 2), total[1] // 2: 7 - (total[1] - total[1] // 2)]
    pb, data = _mace_net([("Deconv2D", ["x", "w"], {"strides": [2, 2], "padding_values": total,
                                                   "framework_type": 2}, 4)], {"w": w}, [("x", [1, 2, 3, 3])], list(want.shape))
    np.testing.assert_allclose(_run_mace(tmp_path, pb, data, {"x": x}), want, atol=1e-5)
    # framework_type defaults to TENSORFLOW (0), whose input 2 is an output shape: refused.
    pb, data = _mace_net([("Deconv2D", ["x", "w"], {"strides": [2, 2], "padding_values": total}, 4)],
                         {"w": w}, [("x", [1, 2, 3, 3])], list(want.shape))
    with pytest.raises(ValueError, match="TENSORFLOW"):
        _run_mace(tmp_path, pb, data, {"x": x})


def test_pad_reflect_from_source(tmp_path):
    """pad.cc REFLECT: left j starts at pad (+0) and walks down, right starts at width-2; with
    has_data_format the 8 paddings are NHWC-ordered and remapped {0,1,6,7,2,3,4,5}."""
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    pads_hw = (1, 2, 2, 3)  # top, bottom, left, right

    def src(o, n, p):  # get_src_idx for REFLECT
        i = o - p
        return -i if i < 0 else (2 * (n - 1) - i if i >= n else i)

    want = np.empty((1, 2, 4 + 3, 5 + 5), np.float32)
    for h in range(want.shape[2]):
        for w in range(want.shape[3]):
            want[:, :, h, w] = x[:, :, src(h, 4, 1), src(w, 5, 2)]
    pb, data = _mace_net([("Pad", ["x"], {"paddings": [0, 0, 1, 2, 2, 3, 0, 0], "pad_type": 1,
                                          "has_data_format": 1}, 4)], {}, [("x", [1, 2, 4, 5])], list(want.shape))
    np.testing.assert_allclose(_run_mace(tmp_path, pb, data, {"x": x}), want)
    # and our writer emits exactly that for ONNX Pad reflect (MACE's converter loses the mode).
    pads = np.array([0, 0, pads_hw[0], pads_hw[2], 0, 0, pads_hw[1], pads_hw[3]], np.int64)
    net = _roundtrip(_model("Pad", [[1, 2, 4, 5]], list(want.shape), [("p", pads)], mode="reflect"), tmp_path / "w")
    assert _args(net.op[0])["pad_type"] == 1 and _args(net.op[0])["paddings"] == [0, 0, 1, 2, 2, 3, 0, 0]


def test_pad_edge_is_unsupported(tmp_path):
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
    with pytest.raises(Unsupported, match="mode 'edge'"):
        TARGET.export(_model("Pad", [[1, 2, 4, 5]], [1, 2, 6, 7], [("p", pads)], mode="edge"), tmp_path, "cpu")


def test_pooling_round_mode_default_is_ceil_from_source(tmp_path):
    """pooling.cc:48: round_mode defaults to CEIL; the writer therefore always writes FLOOR."""
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)
    pb, data = _mace_net([("Pooling", ["x"], {"pooling_type": 2, "kernels": [3, 3], "strides": [2, 2],
                                              "padding_values": [0, 0]}, 4)], {}, [("x", [1, 1, 6, 6])], [1, 1, 3, 3])
    got = _run_mace(tmp_path, pb, data, {"x": x})
    assert got.shape == (1, 1, 3, 3)  # ceil((6-3)/2)+1 = 3; FLOOR would give 2
    assert got[0, 0, 2, 2] == x[0, 0, 4:6, 4:6].max()
    net = _roundtrip(_model("MaxPool", [[1, 1, 6, 6]], [1, 1, 2, 2], kernel_shape=[3, 3], strides=[2, 2]),
                     tmp_path / "w")
    assert _args(net.op[0])["round_mode"] == 0 and _args(net.op[0])["pooling_type"] == 2


def test_average_pool_counts_valid_elements(tmp_path):
    """pooling.cc AVG divides by the number of unpadded elements = count_include_pad=0."""
    net = _roundtrip(_model("AveragePool", [[1, 2, 5, 5]], [1, 2, 3, 3], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1]), tmp_path)
    assert _args(net.op[0])["padding_values"] == [2, 2] and _args(net.op[0])["pooling_type"] == 1
    # count_include_pad=1: an explicit zero Pad, then a pool without padding (numbers in
    # tests/test_real_zoo_patterns.py, against mace_run); with ceil_mode it stays refused.
    net = _roundtrip(_model("AveragePool", [[1, 2, 5, 5]], [1, 2, 3, 3], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], count_include_pad=1), tmp_path / "y")
    assert [op.type for op in net.op] == ["Pad", "Pooling"]
    assert _args(net.op[1])["padding_values"] == [0, 0] and _args(net.op[0])["constant_value"] == 0.0
    with pytest.raises(Unsupported, match="count_include_pad"):
        TARGET.export(_model("AveragePool", [[1, 2, 5, 5]], [1, 2, 3, 3], kernel_shape=[3, 3], strides=[2, 2],
                             pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1), tmp_path / "x", "cpu")


@pytest.mark.parametrize("op,attrs,kind,extra", [
    ("Relu", {}, "RELU", {}),
    ("LeakyRelu", {"alpha": 0.2}, "LEAKYRELU", {"activation_coefficient": pytest.approx(0.2)}),
    ("Elu", {"alpha": 0.7}, "ELU", {"activation_coefficient": pytest.approx(0.7)}),
    ("Sigmoid", {}, "SIGMOID", {}),
    ("Tanh", {}, "TANH", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "HARDSIGMOID", {"hardsigmoid_alpha": pytest.approx(0.3)}),
])
def test_activation_args(tmp_path, op, attrs, kind, extra):
    """activation.cc:42-52 arg names; ref/activation.cc math (LEAKYRELU/ELU use
    activation_coefficient, HARDSIGMOID hardsigmoid_alpha/beta)."""
    net = _roundtrip(_model(op, [[1, 3, 4, 4]], [1, 3, 4, 4], **attrs), tmp_path)
    args = _args(net.op[0])
    assert net.op[0].type == "Activation" and args["activation"] == kind and args["has_data_format"] == 1
    for k, v in extra.items():
        assert args[k] == v


def test_clip_relux_and_prelu(tmp_path):
    """Clip(0,6) -> RELUX max_limit (ref/activation.cc); PRelu slope per channel as input 1
    (activation.cc:59-70)."""
    net = _roundtrip(_model("Clip", [[1, 3, 4, 4]], [1, 3, 4, 4], [("lo", np.float32(0)), ("hi", np.float32(6))]),
                     tmp_path / "a", feeds={"x0": RNG.standard_normal((1, 3, 4, 4)).astype(np.float32) * 8})
    assert _args(net.op[0])["activation"] == "RELUX" and _args(net.op[0])["max_limit"] == 6.0
    net = _roundtrip(_model("Clip", [[1, 3, 4, 4]], [1, 3, 4, 4], [("lo", np.float32(-1)), ("hi", np.float32(2))]),
                     tmp_path / "b")
    assert net.op[0].type == "Eltwise" and _args(net.op[0])["type"] == 12 and _args(net.op[0])["coeff"] == [-1.0, 2.0]
    slope = RNG.random((3, 1, 1)).astype(np.float32)
    net = _roundtrip(_model("PRelu", [[1, 3, 4, 4]], [1, 3, 4, 4], [("s", slope)]), tmp_path / "c")
    assert _args(net.op[0])["activation"] == "PRELU" and list(net.tensors[0].dims) == [3]


def test_eltwise_scalar_index_and_per_channel(tmp_path):
    """eltwise.cc:954-1075: scalar operand in scalar_input at scalar_input_index (index 0 swaps
    SUB); with has_data_format a 1-D [C] operand broadcasts per channel."""
    net = _roundtrip(_sub_scalar_first(), tmp_path / "a")
    args = _args(net.op[0])
    assert args["type"] == 1 and args["scalar_input"] == 2.0 and args["scalar_input_index"] == 0
    mean = RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)
    net = _roundtrip(_model("Div", [[1, 3, 4, 4]], [1, 3, 4, 4], [("m", mean)]), tmp_path / "b")
    assert _args(net.op[0])["type"] == 3 and list(net.tensors[0].dims) == [3]
    net = _roundtrip(_model("Add", [[1, 3, 4, 4], [1, 3, 4, 4]], [1, 3, 4, 4]), tmp_path / "c")
    assert _args(net.op[0])["type"] == 0 and list(net.op[0].input) == ["x0", "x1"]


def _sub_scalar_first():
    node = helper.make_node("Sub", ["two", "x0"], ["y"], name="node0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_reduce_axes_nhwc_and_keepdims(tmp_path):
    """reduce.cc:39-43 (keepdims default false) and :101-106 (has_data_format: NHWC axis
    1->2, 2->3, 3->1 on CPU)."""
    net = _roundtrip(_model("ReduceMean", [[1, 3, 4, 5]], [1, 3, 1, 1], axes=[2, 3], keepdims=1), tmp_path / "a")
    assert _args(net.op[0])["axis"] == [1, 2] and _args(net.op[0])["keepdims"] == 1
    net = _roundtrip(_model("ReduceMax", [[1, 3, 4, 5]], [1, 4, 5], axes=[1], keepdims=0), tmp_path / "b")
    assert _args(net.op[0])["axis"] == [3] and _args(net.op[0])["reduce_type"] == 2
    net = _roundtrip(_model("ReduceSum", [[2, 6]], [2], [("ax", np.array([1], np.int64))], keepdims=0), tmp_path / "c")
    assert _args(net.op[0])["axis"] == [1] and _args(net.op[0])["reduce_type"] == 4


def test_concat_axis_nhwc(tmp_path):
    """concat.cc:33 axis default 3; :64-68 with has_data_format 4-D axis is NHWC-ordered."""
    net = _roundtrip(_model("Concat", [[1, 2, 3, 3], [1, 4, 3, 3]], [1, 6, 3, 3], axis=1), tmp_path / "a")
    assert _args(net.op[0])["axis"] == 3 and _args(net.op[0])["has_data_format"] == 1
    net = _roundtrip(_model("Concat", [[2, 3], [2, 5]], [2, 8], axis=-1), tmp_path / "b")
    assert _args(net.op[0])["axis"] == 1 and "has_data_format" not in _args(net.op[0])


def test_softmax_axes(tmp_path):
    """softmax.cc:49-66,242-246: channel softmax for 4-D axis 1, otherwise the last axis."""
    net = _roundtrip(_model("Softmax", [[1, 4, 3, 3]], [1, 4, 3, 3], axis=1), tmp_path / "a")
    assert _args(net.op[0])["axis"] == 1
    _roundtrip(_model("LogSoftmax", [[2, 3, 7]], [2, 3, 7], axis=-1), tmp_path / "b")
    # Any other axis (rank <= 4) is moved last with Transpose (transpose.cc), normalized, moved back.
    net = _roundtrip(_model("Softmax", [[2, 3, 7]], [2, 3, 7], axis=1), tmp_path / "c")
    assert [op.type for op in net.op] == ["Transpose", "Softmax", "Transpose"]
    assert [_args(op).get("dims") for op in net.op] == [[0, 2, 1], None, [0, 2, 1]]
    with pytest.raises(Unsupported, match="axis 1 of a rank-5"):
        TARGET.export(_model("Softmax", [[1, 2, 3, 2, 2]], [1, 2, 3, 2, 2], axis=1), tmp_path / "d", "cpu")


def test_matmul_gemm_transpose_and_bias(tmp_path):
    """matmul.cc:52-53 transpose_a/transpose_b; :195-207 bias [cols] as input 2."""
    w, c = RNG.standard_normal((5, 8)).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    net = _roundtrip(_model("Gemm", [[2, 8]], [2, 5], [("w", w), ("c", c)], transB=1), tmp_path / "a")
    assert _args(net.op[0])["transpose_b"] == 1 and len(net.op[0].input) == 3
    _roundtrip(_model("MatMul", [[2, 3, 4], [2, 4, 5]], [2, 3, 5]), tmp_path / "b")


def test_reshape_transpose_squeeze(tmp_path):
    """reshape.cc `dim` (no has_data_format: taken as-is); transpose.cc `dims` = perm."""
    net = _roundtrip(_model("Reshape", [[1, 4, 3, 2]], [1, 2, 12], [("s", np.array([1, 2, -1], np.int64))]), tmp_path / "a")
    assert _args(net.op[0])["dim"] == [1, 2, 12]
    net = _roundtrip(_model("Transpose", [[2, 3, 4]], [4, 2, 3], perm=[2, 0, 1]), tmp_path / "b")
    assert _args(net.op[0])["dims"] == [2, 0, 1]
    net = _roundtrip(_model("Squeeze", [[1, 3, 1, 4]], [3, 4], [("ax", np.array([0, 2], np.int64))]), tmp_path / "c")
    assert net.op[0].type == "Reshape" and _args(net.op[0])["dim"] == [3, 4]


def test_cast_t_is_source_type(tmp_path):
    """cast.cc:25-60: kernels registered by source type (T), destination in output_type."""
    model = _model("Cast", [[2, 3]], [2, 3], in_dtype=TensorProto.INT32, to=TensorProto.FLOAT)
    feeds = {"x0": RNG.integers(-50, 50, (2, 3)).astype(np.int32)}
    net = _roundtrip(model, tmp_path, feeds=feeds)
    assert _args(net.op[0])["T"] == 4 and list(net.op[0].output_type) == [1]
    assert net.input_info[0].data_type == 4


def test_batch_norm_folded(tmp_path):
    """batch_norm.cc:38-63: 3-input form x*scale + offset per channel."""
    stats = [("s", RNG.random(3).astype(np.float32) + 0.5), ("b", RNG.standard_normal(3).astype(np.float32)),
             ("m", RNG.standard_normal(3).astype(np.float32)), ("v", RNG.random(3).astype(np.float32) + 0.5)]
    net = _roundtrip(_model("BatchNormalization", [[1, 3, 4, 4]], [1, 3, 4, 4], stats), tmp_path)
    assert net.op[0].type == "BatchNorm" and len(net.op[0].input) == 3


# ------------------------------------------------------------ layers added for matrix coverage

def test_strided_slice_masks_from_source(tmp_path):
    """strided_slice.cc:193-231: begin/end += dim when negative, clamp to [-1, dim-1] for a
    negative stride, so an end of -1 would mean dim-1: a slice to the front needs end_mask."""
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    net = _roundtrip(_model("Slice", [[5, 6]], [3, 6], [("s", np.array([-1], np.int64)), ("e", np.array([-100], np.int64)),
                                                        ("a", np.array([0], np.int64)), ("p", np.array([-2], np.int64))]),
                     tmp_path / "w", feeds={"x0": x})
    args = _args(net.op[0])
    assert net.op[0].type == "StridedSlice" and args["end_mask"] == 1 and args["begin_mask"] == 0
    begin, end, strides = (np.frombuffer((tmp_path / "w/m.data").read_bytes()[t.offset:t.offset + 4 * t.data_size],
                                         "<i4").tolist() for t in net.tensors)
    assert (begin, end, strides) == ([4, 0], [0, 6], [-2, 1])
    # Numpy transcription of the kernel's 2-D loop for begin 4, end_mask -> end -1, stride -2.
    want = np.stack([x[i, 0:6] for i in range(4, -1, -2)])
    pb, data = _mace_net([("StridedSlice", ["x", "b", "e", "s"], {"end_mask": 1}, 2)],
                         {}, [("x", [5, 6])], [3, 6])
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(pb)
    blob = bytearray()
    for name, value in (("b", [4, 0]), ("e", [-1, 6]), ("s", [-2, 1])):  # -1 with end_mask: ignored
        multi.net_def[0].tensors.add(name=name, dims=[2], data_type=4, offset=len(blob), data_size=2)
        blob += np.array(value, "<i4").tobytes()
    np.testing.assert_array_equal(_run_mace(tmp_path, multi.SerializeToString(), bytes(blob), {"x": x}), want)


def test_argmax_tie_rule_from_source(tmp_path):
    """argmax.cc: partial_sort of (value, index) with std::greater -> ties pick the LAST index;
    ONNX ArgMax (select_last_index=0) picks the first, so the writer negates and uses argmin."""
    x = np.array([[1.0, 3.0, 3.0, 0.0]], np.float32)
    pb, data = _mace_net([("ArgMax", ["x"], {"axis": 1, "keepdims": 0, "framework_type": 2}, 1)], {},
                         [("x", [1, 4])], [1])
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(pb)
    multi.net_def[0].output_info[0].data_type = 4  # ArgMax writes int32
    assert _run_mace(tmp_path, multi.SerializeToString(), data, {"x": x}).tolist() == [2]
    model = _model("ArgMax", [[1, 4]], [1], out_dtype=TensorProto.INT64, axis=1, keepdims=0)
    art = TARGET.export(model, tmp_path / "w", "cpu", ExportOptions(name="m"))
    assert TARGET.run(art, {"x0": x})["y"].tolist() == [1]
    assert art.meta["ops"] == ["Eltwise", "ArgMax"]


def test_depthwise_deconv2d_group_filter_from_source(tmp_path):
    """ref/depthwise_deconv_2d.cc GroupDeconv2d: out channel g*out_g + p accumulates
    x[g*in_g + q] * filter[(p*group + g)*in_g + q]; CalcDeconvShape_Caffe: C_out = filter.dim(0)*group."""
    x = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32)
    filt = RNG.standard_normal((3, 4, 2, 2)).astype(np.float32)  # [out_g, C_in, kh, kw], group 2
    group, in_g, out_g = 2, 2, 3
    want = np.zeros((1, 6, 4, 4), np.float32)
    for g in range(group):
        for p in range(out_g):
            for q in range(in_g):
                for i in range(3):
                    for j in range(3):
                        want[0, g * out_g + p, i:i + 2, j:j + 2] += x[0, g * in_g + q, i, j] * \
                            filt.reshape(-1, 2, 2)[(p * group + g) * in_g + q]
    pb, data = _mace_net([("DepthwiseDeconv2d", ["x", "w"], {"strides": [1, 1], "padding_values": [0, 0],
                                                             "group": 2, "framework_type": 2}, 4)],
                         {"w": filt}, [("x", [1, 4, 3, 3])], [1, 6, 4, 4])
    np.testing.assert_allclose(_run_mace(tmp_path, pb, data, {"x": x}), want, atol=1e-5)


def test_resize_nearest_half_pixel_from_source(tmp_path):
    """resize_nearest_neighbor.cc ResizeImageNCHW: HALF_PIXEL source = floor((y + 0.5) * in/out)
    with no -0.5 (ONNX tf_half_pixel_for_nn); the writer maps it back the same way."""
    x = RNG.standard_normal((1, 1, 3, 5)).astype(np.float32)
    rows = [min(int(np.floor((y + 0.5) * 3 / 7)), 2) for y in range(7)]
    cols = [min(int(np.floor((c + 0.5) * 5 / 4)), 4) for c in range(4)]
    want = x[:, :, rows][:, :, :, cols]
    pb, data = _mace_net([("ResizeNearestNeighbor", ["x"], {"size": [7, 4], "coordinate_transformation_mode": 1}, 4)],
                         {}, [("x", [1, 1, 3, 5])], [1, 1, 7, 4])
    np.testing.assert_array_equal(_run_mace(tmp_path, pb, data, {"x": x}), want)
    model = _model("Resize", [[1, 1, 3, 5]], [1, 1, 7, 4], [("roi", np.zeros(0, np.float32)),
                                                            ("sc", np.zeros(0, np.float32)),
                                                            ("sz", np.array([1, 1, 7, 4], np.int64))],
                   mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="floor")
    net = _roundtrip(model, tmp_path / "w", feeds={"x0": x})
    args = _args(net.op[0])
    assert args["size"] == [7, 4] and args["coordinate_transformation_mode"] == 1 and args["nearest_mode"] == "floor"


def test_lpnorm_spans_axis_to_end_from_source(tmp_path):
    """lpnorm.cc: inner_loop = prod(shape[axis:]) and norm += 1e-6, so axis 1 of [2,3,4]
    normalizes 12 values together; the writer therefore refuses a non-last ONNX axis."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    want = x / (np.sqrt((x * x).sum(axis=(1, 2), keepdims=True)) + 1e-6)
    pb, data = _mace_net([("LpNorm", ["x"], {"axis": 1, "p": 2}, 3)], {}, [("x", [2, 3, 4])], [2, 3, 4])
    np.testing.assert_allclose(_run_mace(tmp_path, pb, data, {"x": x}), want, atol=1e-6)
    with pytest.raises(Unsupported, match="spans axis..end"):
        TARGET.export(_model("LpNormalization", [[2, 3, 4]], [2, 3, 4], axis=1), tmp_path / "r", "cpu")


def test_lrn_alpha_and_radius_from_source(tmp_path):
    """local_response_norm.cc: x * (bias + alpha * sum_{|c'-c|<=r} x^2)^-beta; ONNX size 5 ->
    depth_radius 2 and alpha/size."""
    net = _roundtrip(_model("LRN", [[1, 7, 2, 3]], [1, 7, 2, 3], size=5, alpha=0.5, beta=0.7, bias=2.0), tmp_path)
    args = _args(net.op[0])
    assert args["depth_radius"] == 2 and args["alpha"] == pytest.approx(0.1) and args["beta"] == pytest.approx(0.7)
    with pytest.raises(Unsupported, match="even LRN size"):
        TARGET.export(_model("LRN", [[1, 7, 2, 3]], [1, 7, 2, 3], size=4), tmp_path / "e", "cpu")


def test_split_instance_norm_equal_args(tmp_path):
    """split.cc:36-49 axis NHWC-ordered with has_data_format, int32 sizes as input 1;
    instance_norm.cc epsilon default 1e-4 (always written) and affine; eltwise.cc EQUAL -> int32."""
    model = _model("Split", [[1, 6, 2, 2]], [1, 2, 2, 2], [("sp", np.array([2, 4], np.int64))], axis=1)
    model.graph.node[0].output.append("y1")
    model.graph.output.append(helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 2, 2]))
    net = _roundtrip(model, tmp_path / "s")
    assert _args(net.op[0])["axis"] == 3 and _args(net.op[0])["has_data_format"] == 1 and len(net.op[0].input) == 2
    stats = [("s", RNG.random(3).astype(np.float32)), ("b", RNG.standard_normal(3).astype(np.float32))]
    net = _roundtrip(_model("InstanceNormalization", [[1, 3, 4, 4]], [1, 3, 4, 4], stats), tmp_path / "i")
    assert _args(net.op[0])["epsilon"] == pytest.approx(1e-5) and _args(net.op[0])["affine"] == 1


def test_every_roundtrip_runs_in_mace_runtime(tmp_path):
    """The files of every _roundtrip above, in MACE's own runtime (mace_run, CPU), one invocation."""
    from rank_runtimes import MACE_RUN, mace_runtime, need, prove_in_runtime

    need(MACE_RUN)
    if not _ROUNDTRIPS:
        pytest.skip("no _roundtrip test ran before this one (run the whole file)")
    cases = [(m, f) for m, f, _ in _ROUNDTRIPS]
    tols = [t for _, _, t in _ROUNDTRIPS]

    def compare(got, want, tol=max(tols)):
        if got.size != want.size:
            return f"shape {list(got.shape)}, expected {list(want.shape)}"
        err = float(np.max(np.abs(got.reshape(want.shape).astype(np.float64) - want), initial=0.0))
        return "" if err <= tol else f"max abs error {err:.3g}"

    failures = prove_in_runtime(cases, lambda model, path: TARGET.export(model, path, "cpu", ExportOptions(name="m")),
                                mace_runtime().run, compare, tmp_path)
    assert not failures, {f"{cases[i][0].graph.node[0].op_type}#{i}": why for i, why in failures.items()}

"""Op-level tests: each mapped ONNX op, in LiteRT vs onnxruntime, incl. broadcasting, negative axes,
and data in NHWC (a 1x1 Conv in front makes the op see NHWC-stored data)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from converter.targets.tflite import layout as L
from tflite_helpers import make_model, op_names, opcodes, roundtrip

RNG = np.random.default_rng(42)


def w(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_front(c=4):
    """x (1,c,6,6) -> 1x1 Conv -> 'h': downstream ops see NHWC data."""
    return [helper.make_node("Conv", ["x", "front_w"], ["h"])], {"front_w": w(c, c, 1, 1)}


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def check(nodes, inputs, inits=None, outputs=("y",), tol=1e-4, tmp_path=None, **opts):
    model = make_model(nodes, inputs, inits or {}, outputs)
    art, err = roundtrip(model, tmp_path, **opts)
    assert err <= tol, err
    return art


# -- convolutions --------------------------------------------------------------------------
@pytest.mark.parametrize("attrs, expect", [
    (dict(pads=[1, 1, 1, 1]), "CONV_2D"),                                 # TF SAME
    (dict(pads=[1, 1, 1, 1], strides=[2, 2]), "PAD"),                      # symmetric: explicit PAD
    (dict(pads=[0, 2, 1, 0], dilations=[2, 2]), "PAD"),
    (dict(auto_pad="SAME_UPPER", strides=[2, 2]), "CONV_2D"),
])
def test_conv_padding(tmp_path, attrs, expect):
    art = check([node("Conv", ["x", "w", "b"], **attrs)], {"x": (1, 3, 8, 8)},
                {"w": w(5, 3, 3, 3), "b": w(5)}, tmp_path=tmp_path)
    assert expect in op_names(art.files[0])


def test_depthwise_with_multiplier_and_grouped_conv(tmp_path):
    art = check([node("Conv", ["x", "w"], ["d"], group=4, pads=[1, 1, 1, 1]),
                 node("Conv", ["d", "g"], group=2, pads=[1, 1, 1, 1])],
                {"x": (1, 4, 7, 7)}, {"w": w(8, 1, 3, 3), "g": w(6, 4, 3, 3)}, tmp_path=tmp_path)
    ops = op_names(art.files[0])
    assert ops == ["DEPTHWISE_CONV_2D", "CONV_2D"]
    assert opcodes(art.files[0])["CONV_2D"] == 6  # grouped convolution (op_version.cc)


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2]), dict(strides=[3, 3], pads=[4, 4, 4, 4], output_padding=[2, 2]),
                                   dict(strides=[2, 2], pads=[1, 0, 1, 0])])
def test_conv_transpose(tmp_path, attrs):
    kernel = 9 if attrs["strides"][0] == 3 else 3
    art = check([node("ConvTranspose", ["x", "w", "b"], **attrs)], {"x": (1, 4, 5, 5)},
                {"w": w(4, 2, kernel, kernel), "b": w(2)}, tmp_path=tmp_path)
    assert "TRANSPOSE_CONV" in op_names(art.files[0])


# -- pooling -------------------------------------------------------------------------------
@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2])),
])
def test_pools(tmp_path, op, attrs):
    front, inits = conv_front()
    check(front + [node(op, ["h"], **attrs)], {"x": (1, 4, 7, 7)}, inits, tmp_path=tmp_path)


def test_global_pools(tmp_path):
    front, inits = conv_front()
    check(front + [node("GlobalAveragePool", ["h"], ["a"]), node("GlobalMaxPool", ["h"], ["m"]),
                   node("Add", ["a", "m"])], {"x": (1, 4, 6, 6)}, inits, tmp_path=tmp_path)


# -- dense ---------------------------------------------------------------------------------
@pytest.mark.parametrize("attrs, bshape", [(dict(transB=1), (5, 8)), (dict(transA=1, alpha=0.5, beta=2.0), (8, 5))])
def test_gemm(tmp_path, attrs, bshape):
    ashape = (8, 3) if attrs.get("transA") else (3, 8)
    art = check([node("Gemm", ["a", "b", "c"], **attrs)], {"a": ashape}, {"b": w(*bshape), "c": w(5)}, tmp_path=tmp_path)
    assert "FULLY_CONNECTED" in op_names(art.files[0])


def test_matmul_constant_and_batched_with_broadcast(tmp_path):
    art = check([node("MatMul", ["x", "wt"], ["p"]), node("Add", ["p", "bias"], ["q"]),
                 node("MatMul", ["q", "k"])],
                {"x": (2, 3, 4, 6), "k": (3, 8, 5)}, {"wt": w(6, 8), "bias": w(8)}, tmp_path=tmp_path)
    ops = op_names(art.files[0])
    assert ops == ["FULLY_CONNECTED", "BATCH_MATMUL"]  # bias ADD folded into FULLY_CONNECTED


def test_matmul_of_transposed_operand_uses_adj(tmp_path):
    art = check([node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), node("MatMul", ["q", "kt"])],
                {"q": (2, 4, 6), "k": (2, 5, 6)}, tmp_path=tmp_path)
    assert op_names(art.files[0]) == ["BATCH_MATMUL"]


# -- element-wise --------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_binary_broadcasting_in_nhwc(tmp_path, op):
    front, inits = conv_front()
    inits["c"] = np.abs(w(4, 1, 1)) + 0.5
    inits["eps"] = np.array(0.25, np.float32)
    nodes = front + [node("Abs", ["h"], ["habs"]), node("Add", ["habs", "eps"], ["ha"]),  # > 0: Div, Pow stay finite
                     node(op, ["ha", "c"], ["u"]), node(op, ["v", "u"])]
    if op == "Pow":
        nodes[-1] = node(op, ["u", "v"])
    art = check(nodes, {"x": (1, 4, 5, 5), "v": (5,)}, inits, tmp_path=tmp_path, tol=1e-4)
    assert "TRANSPOSE" not in op_names(art.files[0])


@pytest.mark.parametrize("exponent, expect", [(2.0, "MUL"), (0.5, "SQRT"), (3.0, "POW")])
def test_pow_constant_exponent(tmp_path, exponent, expect):
    art = check([node("Abs", ["x"], ["a"]), node("Pow", ["a", "e"])], {"x": (2, 3)},
                {"e": np.array(exponent, np.float32)}, tmp_path=tmp_path)
    assert expect in op_names(art.files[0])


@pytest.mark.parametrize("lo, hi, expect", [(0.0, 6.0, "RELU6"), (-1.0, 1.0, "RELU_N1_TO_1"),
                                            (-0.5, 0.7, "MINIMUM"), (0.0, None, "RELU")])
def test_clip(tmp_path, lo, hi, expect):
    inits = {"lo": np.array(lo, np.float32)}
    ins = ["x", "lo"]
    if hi is not None:
        inits["hi"] = np.array(hi, np.float32)
        ins.append("hi")
    art = check([node("Clip", ins, ["c"]), node("Mul", ["c", "k"])], {"x": (2, 8)},
                dict(inits, k=np.array(4.0, np.float32)), tmp_path=tmp_path)
    assert expect in op_names(art.files[0])
    fused = check([node("Mul", ["x", "k"], ["x3"]), node("Clip", ["x3"] + ins[1:])], {"x": (2, 8)},
                  dict(inits, k=np.array(4.0, np.float32)), tmp_path=tmp_path / "fused")
    assert op_names(fused.files[0]) == (["MUL"] if expect != "MINIMUM" else ["MUL", "MAXIMUM", "MINIMUM"])


def test_activation_fused_into_conv(tmp_path):
    front, inits = conv_front()
    art = check(front + [node("Relu", ["h"])], {"x": (1, 4, 5, 5)}, inits, tmp_path=tmp_path)
    assert op_names(art.files[0]) == ["CONV_2D"]


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Sqrt", "Log", "Erf",
                                "LeakyRelu", "HardSwish", "Elu", "Floor", "Sign", "Reciprocal"])
def test_unary(tmp_path, op):
    front, inits = conv_front()
    pre = [node("Abs", ["h"], ["p"]), node("Add", ["p", "eps"], ["q"])] if op in ("Sqrt", "Log", "Reciprocal") else \
        [node("Identity", ["h"], ["q"])]
    inits["eps"] = np.array(0.1, np.float32)
    art = check(front + pre + [node(op, ["q"])], {"x": (1, 4, 5, 5)}, inits, tmp_path=tmp_path, tol=2e-6 if op == "Erf" else 1e-4)
    assert not any(o.startswith("Flex") for o in op_names(art.files[0]))


def test_prelu_per_channel(tmp_path):
    front, inits = conv_front()
    check(front + [node("PRelu", ["h", "slope"])], {"x": (1, 4, 5, 5)}, dict(inits, slope=w(4, 1, 1)), tmp_path=tmp_path)


def test_gelu_pattern_becomes_builtin_gelu(tmp_path):
    nodes = [node("Div", ["x", "s2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["a"]),
             node("Mul", ["x", "a"], ["m"]), node("Mul", ["m", "half"])]
    inits = {"s2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}
    art = check(nodes, {"x": (3, 7)}, inits, tmp_path=tmp_path)
    assert op_names(art.files[0]) == ["GELU"]


# -- softmax, reductions, normalization ----------------------------------------------------
@pytest.mark.parametrize("axis", [1, -1, 2])
def test_softmax_any_axis_in_nhwc(tmp_path, axis):
    front, inits = conv_front()
    art = check(front + [node("Softmax", ["h"], axis=axis)], {"x": (1, 4, 5, 6)}, inits, tmp_path=tmp_path)
    # the channel axis is innermost in NHWC: no TRANSPOSE needed
    assert ("TRANSPOSE" in op_names(art.files[0])) == (axis != 1)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMean", "ReduceMin"])
@pytest.mark.parametrize("axes, keepdims", [([1], 0), ([-1, -2], 1), ([1, 3], 0)])
def test_reductions_negative_axes(tmp_path, op, axes, keepdims):
    front, inits = conv_front()
    check(front + [node(op, ["h"], ["r"], axes=axes, keepdims=keepdims), node("Relu", ["r"])],
          {"x": (1, 4, 5, 6)}, inits, tmp_path=tmp_path)


def test_reduce_sum_axes_input(tmp_path):
    front, inits = conv_front()
    check(front + [node("ReduceSum", ["h", "axes"], keepdims=0)], {"x": (1, 4, 5, 6)},
          dict(inits, axes=np.array([-3], np.int64)), tmp_path=tmp_path)


def test_layer_norm(tmp_path):
    art = check([node("LayerNormalization", ["x", "g", "b"], axis=-1, epsilon=1e-5)], {"x": (2, 5, 16)},
                {"g": w(16) + 1, "b": w(16)}, tmp_path=tmp_path)
    assert "RSQRT" in op_names(art.files[0])


def test_batch_norm(tmp_path):
    front, inits = conv_front()
    bn = {"s": w(4) + 1, "bb": w(4), "mu": w(4), "var": np.abs(w(4)) + 0.5}
    check(front + [node("BatchNormalization", ["h", "s", "bb", "mu", "var"])], {"x": (1, 4, 5, 5)},
          dict(inits, **bn), tmp_path=tmp_path)


# -- shape ops -----------------------------------------------------------------------------
def test_flatten_after_global_pool_needs_no_transpose(tmp_path):
    front, inits = conv_front()
    art = check(front + [node("GlobalAveragePool", ["h"], ["g"]), node("Flatten", ["g"])], {"x": (1, 4, 5, 5)},
                inits, tmp_path=tmp_path)
    assert "TRANSPOSE" not in op_names(art.files[0])


def test_reshape_split_channels_keeps_layout(tmp_path):
    """(n, a*k, h, w) -> (n, a, k, h, w) is a free reshape of NHWC data: stored (n, h, w, a, k)."""
    front, inits = conv_front(6)
    art = check(front + [node("Reshape", ["h", "shape"], ["r"]), node("Softmax", ["r"], ["s"], axis=2),
                         node("Reshape", ["s", "back"])],
                {"x": (1, 6, 4, 5)}, dict(inits, shape=np.array([1, 2, 3, 4, 5]), back=np.array([1, 6, 4, 5])),
                tmp_path=tmp_path)
    assert "TRANSPOSE" not in op_names(art.files[0])


def test_reshape_that_needs_onnx_order(tmp_path):
    front, inits = conv_front()
    check(front + [node("Reshape", ["h", "shape"])], {"x": (1, 4, 3, 5)}, dict(inits, shape=np.array([1, 12, 5])),
          tmp_path=tmp_path)


def test_transpose_squeeze_unsqueeze(tmp_path):
    front, inits = conv_front()
    nodes = front + [node("Transpose", ["h"], ["t"], perm=[0, 3, 1, 2]), node("Unsqueeze", ["t", "ax"], ["u"]),
                     node("Squeeze", ["u", "ax"], ["s"]), node("Relu", ["s"])]
    check(nodes, {"x": (1, 4, 3, 5)}, dict(inits, ax=np.array([-1])), tmp_path=tmp_path)


def test_concat_negative_axis_with_constant(tmp_path):
    front, inits = conv_front()
    art = check(front + [node("Concat", ["h", "c", "h"], axis=-3)], {"x": (1, 4, 3, 5)},
                dict(inits, c=w(1, 2, 3, 5)), tmp_path=tmp_path)
    assert op_names(art.files[0]) == ["CONV_2D", "CONCATENATION"]


@pytest.mark.parametrize("sizes", [None, [1, 3]])
def test_split(tmp_path, sizes):
    front, inits = conv_front()
    ins = ["h"] + (["sp"] if sizes else [])
    if sizes:
        inits["sp"] = np.array(sizes, np.int64)
    nodes = front + [node("Split", ins, ["a", "b"], axis=1), node("Mul", ["a", "a"], ["y1"]), node("Relu", ["b"], ["y2"])]
    art = check(nodes, {"x": (1, 4, 3, 5)}, inits, outputs=("y1", "y2"), tmp_path=tmp_path)
    assert ("SPLIT_V" if sizes else "SPLIT") in op_names(art.files[0])


def test_slice_negative_and_steps(tmp_path):
    front, inits = conv_front()
    s = dict(starts=np.array([-1, 1, 0]), ends=np.array([-100, 100, 5]), axes=np.array([-1, 1, 2]),
             steps=np.array([-2, 2, 1]))
    check(front + [node("Slice", ["h", "starts", "ends", "axes", "steps"])], {"x": (1, 4, 6, 7)},
          dict(inits, **s), tmp_path=tmp_path)


@pytest.mark.parametrize("indices", [np.array(-1), np.array([[2, 0], [1, -2]])])
def test_gather(tmp_path, indices):
    front, inits = conv_front()
    check(front + [node("Gather", ["h", "i"], axis=1)], {"x": (1, 4, 3, 5)}, dict(inits, i=indices.astype(np.int64)),
          tmp_path=tmp_path)


def test_pad_constant_and_reflect(tmp_path):
    front, inits = conv_front()
    p = np.array([0, 0, 1, 2, 0, 1, 0, 1], np.int64)
    check(front + [node("Pad", ["h", "p", "v"], ["a"]), node("Pad", ["a", "p"], mode="reflect")],
          {"x": (1, 4, 4, 5)}, dict(inits, p=p, v=np.array(0.5, np.float32)), tmp_path=tmp_path)


# -- resize and depth/space ----------------------------------------------------------------
@pytest.mark.parametrize("attrs", [
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    dict(mode="nearest"),  # half_pixel + round_prefer_floor, exact for 2x
    dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
])
def test_resize(tmp_path, attrs):
    front, inits = conv_front()
    check(front + [node("Resize", ["h", "", "scales"], **attrs)], {"x": (1, 4, 5, 6)},
          dict(inits, scales=np.array([1, 1, 2, 2], np.float32)), tmp_path=tmp_path)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_folds_crd_into_conv(tmp_path, mode):
    nodes = [node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]), node("DepthToSpace", ["c"], blocksize=2, mode=mode)]
    art = check(nodes, {"x": (1, 3, 5, 5)}, {"cw": w(8, 3, 3, 3), "cb": w(8)}, tmp_path=tmp_path)
    assert op_names(art.files[0]) == ["CONV_2D", "DEPTH_TO_SPACE"]


def test_depth_to_space_crd_without_conv_uses_gather(tmp_path):
    art = check([node("Relu", ["x"], ["r"]), node("DepthToSpace", ["r"], blocksize=2, mode="CRD")],
                {"x": (1, 8, 3, 3)}, tmp_path=tmp_path)
    assert "GATHER" in op_names(art.files[0])


def test_space_to_depth(tmp_path):
    front, inits = conv_front()
    check(front + [node("SpaceToDepth", ["h"], blocksize=2)], {"x": (1, 4, 4, 6)}, inits, tmp_path=tmp_path)


# -- layout algebra ------------------------------------------------------------------------
def test_reshape_layout_algebra():
    assert L.reshape_layout((1, 6, 4, 5), L.NHWC, (1, 2, 3, 4, 5)) == (0, 3, 4, 1, 2)
    assert L.reshape_layout((1, 8, 1, 1), L.NHWC, (1, 8)) == (0, 1)
    assert L.reshape_layout((1, 4, 3, 5), L.NHWC, (1, 12, 5)) is None
    assert L.relabel(L.NHWC, (0, 2, 3, 1)) == (0, 1, 2, 3)  # torch's NCHW->NHWC permute on NHWC data
    assert L.relabel(L.NHWC, (0, 3, 1, 2)) == (0, 3, 1, 2)
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    stored = x.transpose(L.NHWC)
    assert L.reshape_layout(x.shape, L.NHWC, (6, 4, 5)) is None  # N*C: not contiguous in NHWC
    for out_shape in [(2, 3, 20), (2, 3, 2, 2, 5)]:
        out_perm = L.reshape_layout(x.shape, L.NHWC, out_shape)  # H*W merge: contiguous in NHWC
        assert out_perm is not None
        assert np.array_equal(stored.reshape(L.stored_shape(out_shape, out_perm)),
                              x.reshape(out_shape).transpose(out_perm))
    assert L.reshape_layout(x.shape, L.NHWC, (2, 60)) is None  # C*H*W: not contiguous in NHWC
    assert np.array_equal(stored.transpose(L.transpose_between(L.NHWC, (0, 1, 2, 3))), x)

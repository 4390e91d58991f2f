"""The numpy MIL kernels (written from Apple's op specs) against onnxruntime on the ONNX op.

These kernels are what executes conv/pooling/normalization when a saved ML Program is run on
Linux, so each is checked here independently of coremltools and of our ONNX->MIL builder: the
MIL arguments are written out by hand from the MIL spec (pad order [begin0, end0, begin1, end1],
weight layouts, ...), the reference is onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from converter.targets.coreml.kernels import KERNELS

ATOL = 1e-5


def _ort(op_type, inputs: dict[str, np.ndarray], out_shape_rank: int, initializers=(), **attrs):
    """Run one ONNX node on onnxruntime; ``inputs`` are graph inputs, ``initializers`` consts."""
    node = helper.make_node(op_type, list(inputs) + [i.name for i in initializers], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "k",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_shape_rank)],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def _init(name, value):
    return onnx.numpy_helper.from_array(np.asarray(value), name)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _close(got, want, atol=ATOL):
    assert got.shape == want.shape
    err = float(np.abs(got - want).max())
    assert err <= atol, f"max abs error {err}"


@pytest.mark.parametrize(
    "case",
    [
        # (x shape, w shape, group, strides, dilations, onnx pads [b..., e...])
        ((1, 4, 9, 11), (6, 4, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1)),
        ((2, 4, 9, 11), (8, 2, 3, 2), 2, (2, 1), (1, 2), (0, 2, 1, 0)),  # asymmetric, grouped
        ((1, 6, 8, 8), (6, 1, 3, 3), 6, (2, 2), (1, 1), (1, 1, 1, 1)),   # depthwise
        ((1, 3, 10), (5, 3, 4), 1, (3,), (2,), (2, 1)),                 # 1-D
    ],
)
def test_conv_matches_onnxruntime(case):
    xs, ws, group, strides, dilations, pads = case
    x = _rng(1).standard_normal(xs).astype(np.float32)
    w = _rng(2).standard_normal(ws).astype(np.float32)
    b = _rng(3).standard_normal(ws[0]).astype(np.float32)
    want = _ort("Conv", {"x": x}, len(xs), [_init("w", w), _init("b", b)], group=group,
                strides=list(strides), dilations=list(dilations), pads=list(pads))
    n = len(strides)
    mil_pad = [pads[i + j] for i in range(n) for j in (0, n)]
    got = KERNELS["conv"](None, dict(x=x, weight=w, bias=b, strides=np.array(strides), pad_type="custom",
                                     pad=np.array(mil_pad), dilations=np.array(dilations), groups=group))
    _close(got, want)


@pytest.mark.parametrize("auto_pad,pad_type", [("SAME_UPPER", "same"), ("SAME_LOWER", "same_lower"),
                                               ("VALID", "valid")])
def test_conv_pad_types_match_onnx_auto_pad(auto_pad, pad_type):
    x = _rng(4).standard_normal((1, 2, 7, 8)).astype(np.float32)
    w = _rng(5).standard_normal((3, 2, 4, 3)).astype(np.float32)
    want = _ort("Conv", {"x": x}, 4, [_init("w", w)], strides=[2, 3], auto_pad=auto_pad)
    got = KERNELS["conv"](None, dict(x=x, weight=w, strides=np.array([2, 3]), pad_type=pad_type))
    _close(got, want)


@pytest.mark.parametrize(
    "case",
    [
        # (x shape, w shape [Cin, Cout/g, k...], group, strides, dilations, pads, output_padding)
        ((1, 4, 5, 5), (4, 2, 9, 9), 1, (3, 3), (1, 1), (4, 4, 4, 4), (2, 2)),  # superres deconv
        ((1, 4, 4, 6), (4, 3, 2, 3), 2, (2, 1), (1, 2), (0, 1, 1, 2), (0, 0)),
        ((2, 3, 7), (3, 2, 3), 1, (2,), (1,), (1, 1), (1,)),
    ],
)
def test_conv_transpose_matches_onnxruntime(case):
    xs, ws, group, strides, dilations, pads, output_padding = case
    x = _rng(6).standard_normal(xs).astype(np.float32)
    w = _rng(7).standard_normal(ws).astype(np.float32)
    b = _rng(8).standard_normal(ws[1] * group).astype(np.float32)
    want = _ort("ConvTranspose", {"x": x}, len(xs), [_init("w", w), _init("b", b)], group=group,
                strides=list(strides), dilations=list(dilations), pads=list(pads),
                output_padding=list(output_padding))
    n = len(strides)
    # output_padding as a smaller end crop (the builder's mapping, see mil_builder._conv_transpose)
    mil_pad = [pads[i + j] - (output_padding[i] if j else 0) for i in range(n) for j in (0, n)]
    args = dict(x=x, weight=w, bias=b, strides=np.array(strides), pad_type="custom",
                pad=np.array(mil_pad), dilations=np.array(dilations), groups=group)
    got = KERNELS["conv_transpose"](None, args)
    _close(got, want)
    # The output_shape coremltools adds (pass add_conv_transpose_output_shape) is honoured.
    args["output_shape"] = np.array(want.shape)
    _close(KERNELS["conv_transpose"](None, args), want)
    args["output_shape"] = np.array(want.shape) + 1
    with pytest.raises(Exception, match="output_shape"):
        KERNELS["conv_transpose"](None, args)


POOL_CASES = [
    # (x shape, kernel, strides, onnx pads, ceil_mode)
    ((1, 3, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), 0),
    ((2, 2, 10, 7), (2, 3), (2, 2), (0, 1, 1, 0), 0),
    ((1, 2, 8, 8), (3, 3), (2, 2), (0, 0, 0, 0), 1),
    ((1, 2, 9, 10), (3, 2), (3, 2), (1, 0, 1, 0), 1),
    ((1, 2, 11), (4,), (3,), (1, 2), 0),
    ((1, 3, 12, 12), (9, 9), (3, 3), (1, 2, 1, 0), 1),  # 81 positions: reduced over a window view
]


def _mil_pool_args(x, kernel, strides, pads, ceil_mode):
    n = len(kernel)
    return dict(x=x, kernel_sizes=np.array(kernel), strides=np.array(strides), pad_type="custom",
                pad=np.array([pads[i + j] for i in range(n) for j in (0, n)]), ceil_mode=bool(ceil_mode))


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool_matches_onnxruntime(case):
    xs, kernel, strides, pads, ceil_mode = case
    x = _rng(9).standard_normal(xs).astype(np.float32)
    want = _ort("MaxPool", {"x": x}, len(xs), kernel_shape=list(kernel), strides=list(strides),
                pads=list(pads), ceil_mode=ceil_mode)
    _close(KERNELS["max_pool"](None, _mil_pool_args(x, kernel, strides, pads, ceil_mode)), want)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES)
def test_avg_pool_matches_onnxruntime(case, count_include_pad):
    xs, kernel, strides, pads, ceil_mode = case
    x = _rng(10).standard_normal(xs).astype(np.float32)
    want = _ort("AveragePool", {"x": x}, len(xs), kernel_shape=list(kernel), strides=list(strides),
                pads=list(pads), ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    args = _mil_pool_args(x, kernel, strides, pads, ceil_mode)
    args["exclude_padding_from_average"] = not count_include_pad
    _close(KERNELS["avg_pool"](None, args), want)


def test_batch_norm_matches_onnxruntime():
    x = _rng(11).standard_normal((2, 5, 4, 3)).astype(np.float32)
    g, b, m = (_rng(s).standard_normal(5).astype(np.float32) for s in (12, 13, 14))
    v = _rng(15).uniform(0.5, 2.0, 5).astype(np.float32)
    want = _ort("BatchNormalization", {"x": x}, 4,
                [_init("g", g), _init("b", b), _init("m", m), _init("v", v)], epsilon=1e-3)
    got = KERNELS["batch_norm"](None, dict(x=x, mean=m, variance=v, gamma=g, beta=b, epsilon=np.float32(1e-3)))
    _close(got, want)


def test_instance_norm_matches_onnxruntime():
    x = (_rng(16).standard_normal((2, 3, 5, 6)) * 3 + 1).astype(np.float32)
    g, b = (_rng(s).standard_normal(3).astype(np.float32) for s in (17, 18))
    want = _ort("InstanceNormalization", {"x": x}, 4, [_init("g", g), _init("b", b)], epsilon=1e-5)
    got = KERNELS["instance_norm"](None, dict(x=x, gamma=g, beta=b, epsilon=np.float32(1e-5)))
    _close(got, want)


def test_silu_matches_onnxruntime_mul_sigmoid():
    x = (_rng(19).standard_normal((2, 3, 7)) * 4).astype(np.float32)
    sig = helper.make_node("Sigmoid", ["x"], ["s"])
    mul = helper.make_node("Mul", ["x", "s"], ["y"])
    graph = helper.make_graph([sig, mul], "silu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    _close(KERNELS["silu"](None, {"x": x}), want)


def test_upsample_nearest_matches_onnxruntime_resize():
    x = _rng(20).standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = _ort("Resize", {"x": x}, 4, [_init("roi", np.zeros(0, np.float32)),
                                        _init("scales", np.array([1, 1, 2, 3], np.float32))],
                mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    got = KERNELS["upsample_nearest_neighbor"](None, dict(x=x, scale_factor_height=2, scale_factor_width=3))
    _close(got, want)


def test_depth_to_space_matches_onnxruntime_dcr():
    x = _rng(21).standard_normal((2, 12, 3, 2)).astype(np.float32)
    want = _ort("DepthToSpace", {"x": x}, 4, blocksize=2, mode="DCR")
    _close(KERNELS["depth_to_space"](None, dict(x=x, block_size=np.int32(2))), want, atol=0)


def test_pixel_shuffle_matches_onnxruntime_crd():
    x = _rng(22).standard_normal((2, 12, 3, 2)).astype(np.float32)
    want = _ort("DepthToSpace", {"x": x}, 4, blocksize=2, mode="CRD")
    _close(KERNELS["pixel_shuffle"](None, dict(x=x, upscale_factor=np.int32(2))), want, atol=0)


def test_space_to_depth_matches_onnxruntime():
    x = _rng(23).standard_normal((2, 3, 4, 6)).astype(np.float32)
    want = _ort("SpaceToDepth", {"x": x}, 4, blocksize=2)
    _close(KERNELS["space_to_depth"](None, dict(x=x, block_size=np.int32(2))), want, atol=0)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_matches_onnxruntime(exclusive, reverse):
    x = _rng(24).standard_normal((2, 5, 3)).astype(np.float32)
    want = _ort("CumSum", {"x": x}, 3, [_init("axis", np.int64(1))], exclusive=exclusive, reverse=reverse)
    got = KERNELS["cumsum"](None, dict(x=x, axis=np.int32(1), exclusive=bool(exclusive), reverse=bool(reverse)))
    _close(got, want)

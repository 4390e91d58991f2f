"""TFLite files with no op a peer converter's file does without (converter/targets/tflite):
a per-channel offset after a Conv goes into its bias, Convs padding one tensor alike share one
PAD, and a keep-dims reduction + flattening RESHAPE is one reduction.  Same numbers as
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tflite_helpers import make_model, op_names, roundtrip

RNG = np.random.default_rng(11)


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


@pytest.mark.parametrize("op, order, bias", [("Sub", "yc", True), ("Add", "yc", True), ("Add", "cy", False)])
def test_channel_offset_after_conv_goes_into_the_bias(tmp_path, op, order, bias):
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    pair = ["y", "c"] if order == "yc" else ["c", "y"]
    nodes = [helper.make_node("Conv", conv_in, ["y"], pads=[1, 1, 1, 1]), helper.make_node(op, pair, ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    inits = {"w": _w(6, 4, 3, 3), "b": _w(6), "c": _w(1, 6, 1, 1)}
    if not bias:
        inits.pop("b")
    art, err = roundtrip(make_model(nodes, {"x": (1, 4, 9, 9)}, inits, outputs=("out",)), tmp_path)
    assert err <= 1e-5, err
    assert op_names(art.files[0]) == ["CONV_2D"]  # offset in the bias, the Relu fused


@pytest.mark.parametrize("case", ["reversed_sub", "output_read_twice", "not_per_channel"])
def test_offsets_that_must_stay(tmp_path, case):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w": _w(6, 4, 3, 3), "b": _w(6), "c": _w(1, 6, 1, 1)}
    outputs = ("z",)
    if case == "reversed_sub":  # c - y is not y + const
        nodes.append(helper.make_node("Sub", ["c", "y"], ["z"]))
    elif case == "output_read_twice":  # the Conv's own output is needed as it is
        nodes += [helper.make_node("Add", ["y", "c"], ["z"]), helper.make_node("Relu", ["y"], ["r"])]
        outputs = ("z", "r")
    else:  # varies over space, not over channels
        inits["c"] = _w(1, 1, 9, 9)
        nodes.append(helper.make_node("Add", ["y", "c"], ["z"]))
    art, err = roundtrip(make_model(nodes, {"x": (1, 4, 9, 9)}, inits, outputs=outputs), tmp_path)
    assert err <= 1e-5, err
    ops = op_names(art.files[0])
    assert ops.count("CONV_2D") == 1 and len(ops) >= 2, ops


def test_convs_padding_one_tensor_alike_share_the_pad(tmp_path):
    # torch's stride-2 pad-1 convolution is not TFLite's SAME (which pads 0 before, 1 after)
    stride2 = dict(pads=[1, 1, 1, 1], strides=[2, 2])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], **stride2),
             helper.make_node("Conv", ["x", "w2", "b2"], ["b"], **stride2),
             helper.make_node("Conv", ["x", "w3", "b3"], ["c"], pads=[2, 2, 2, 2], strides=[2, 2])]
    inits = {"w1": _w(8, 4, 3, 3), "b1": _w(8), "w2": _w(5, 4, 3, 3), "b2": _w(5), "w3": _w(3, 4, 3, 3), "b3": _w(3)}
    art, err = roundtrip(make_model(nodes, {"x": (1, 4, 10, 10)}, inits, outputs=("a", "b", "c")), tmp_path)
    assert err <= 1e-5, err
    ops = op_names(art.files[0])
    assert ops.count("CONV_2D") == 3 and ops.count("PAD") == 2, ops  # pads 1 shared; pads 2 its own


@pytest.mark.parametrize("flatten", ["Flatten", "Reshape"])
def test_global_pool_and_flatten_are_one_mean(tmp_path, flatten):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"])]
    inits = {}
    if flatten == "Flatten":
        nodes.append(helper.make_node("Flatten", ["p"], ["y"]))
    else:
        inits["s"] = np.array([1, -1], np.int64)
        nodes.append(helper.make_node("Reshape", ["p", "s"], ["y"]))
    art, err = roundtrip(make_model(nodes, {"x": (1, 6, 5, 7)}, inits), tmp_path)
    assert err <= 1e-6, err
    assert op_names(art.files[0]) == ["MEAN"]


def test_kept_dims_that_are_needed_stay(tmp_path):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Relu", ["p"], ["y"])]
    art, err = roundtrip(make_model(nodes, {"x": (1, 6, 5, 7)}), tmp_path)
    assert err <= 1e-6, err
    assert "RESHAPE" not in op_names(art.files[0])

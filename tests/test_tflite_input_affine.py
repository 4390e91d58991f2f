"""Per-channel input normalization ((x - m) / s, (x + c) * a) folded into the next Conv on TFLite
(converter/targets/tflite/fuse.py: fold_channel_affine_into_conv): no SUB/MUL/DIV left, a border
correction ADD only when the Conv pads, and the same numbers as onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tflite_helpers import make_model, op_names, roundtrip

RNG = np.random.default_rng(7)
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def _model(first, second, conv_attrs, bias=True):
    nodes = [helper.make_node(first, ["x", "c1"], ["u"]), helper.make_node(second, ["u", "c2"], ["v"]),
             helper.make_node("Conv", ["v", "w", "b"] if bias else ["v", "w"], ["y"], **conv_attrs)]
    inits = {"c1": MEAN if first in ("Sub", "Add") else 1 / STD, "c2": STD if second == "Div" else 1 / STD,
             "w": (RNG.standard_normal((8, 3, 3, 3)) * 0.5).astype(np.float32),
             "b": (RNG.standard_normal(8) * 0.1).astype(np.float32)}
    if not bias:
        inits.pop("b")
    return make_model(nodes, {"x": (1, 3, 17, 15)}, inits)


@pytest.mark.parametrize("first, second, conv_attrs, adds", [
    ("Sub", "Div", dict(pads=[1, 1, 1, 1], strides=[2, 2]), 1),          # torchvision-style, padded
    ("Sub", "Mul", dict(pads=[0, 2, 1, 0], dilations=[2, 2]), 1),        # asymmetric pads, dilated
    ("Add", "Div", dict(pads=[0, 0, 0, 0]), 0),                          # unpadded: no correction
    ("Mul", "Sub", dict(pads=[1, 1, 1, 1]), 1),                          # scale first, then shift
])
def test_affine_folded_into_conv(tmp_path, first, second, conv_attrs, adds):
    art, err = roundtrip(_model(first, second, conv_attrs), tmp_path)
    ops = op_names(art.files[0])
    assert err <= 1e-5, err
    assert [o for o in ops if o in ("SUB", "MUL", "DIV")] == [], ops
    assert ops.count("ADD") == adds, ops
    assert ops.count("CONV_2D") == 1, ops


def test_conv_without_bias(tmp_path):
    art, err = roundtrip(_model("Sub", "Div", dict(pads=[1, 1, 1, 1]), bias=False), tmp_path)
    assert err <= 1e-5, err
    assert "SUB" not in op_names(art.files[0]) and "DIV" not in op_names(art.files[0])


def test_normalization_read_elsewhere_stays(tmp_path):
    """The normalized tensor is also a graph output: nothing is folded."""
    model = _model("Sub", "Div", dict(pads=[1, 1, 1, 1]))
    nodes = list(model.graph.node)
    model = make_model(nodes, {"x": (1, 3, 17, 15)},
                       {i.name: numpy_helper.to_array(i) for i in model.graph.initializer},
                       outputs=("y", "v"))
    art, err = roundtrip(model, tmp_path)
    assert err <= 1e-5, err
    assert op_names(art.files[0]).count("SUB") == 1


def test_padded_conv_on_wide_feature_maps_keeps_the_affine_ops(tmp_path):
    """16 channels: the border correction would be a constant as large as the output; not folded."""
    nodes = [helper.make_node("Sub", ["x", "m"], ["u"]), helper.make_node("Mul", ["u", "a"], ["v"]),
             helper.make_node("Conv", ["v", "w"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"m": RNG.standard_normal((1, 16, 1, 1)).astype(np.float32),
             "a": RNG.standard_normal((1, 16, 1, 1)).astype(np.float32),
             "w": (RNG.standard_normal((4, 16, 3, 3)) * 0.3).astype(np.float32)}
    art, err = roundtrip(make_model(nodes, {"x": (1, 16, 9, 9)}, inits), tmp_path)
    assert err <= 1e-5, err
    ops = op_names(art.files[0])
    assert ops.count("SUB") + ops.count("ADD") == 1 and ops.count("MUL") == 1, ops

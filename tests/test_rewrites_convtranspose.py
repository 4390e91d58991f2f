"""ConvTranspose → stride-1 Conv + depth-to-space (+ crop): exact weight transfer, checked by
onnxruntime on a grid of geometries and on the zoo's own layers."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.ir.graph import op_histogram, to_graph
from converter.legalize.rewrites import REGISTRY, apply_rule
from converter.legalize.rewrites.convtranspose import geometry, phase_selector

EXACT_RULES = ("convtranspose_to_subpixel", "convtranspose_to_depth_to_space")


def ct_model(cin, cout, kernel, size, stride, *, dilation=1, pads=None, output_padding=None, group=1,
             bias=True, auto_pad=None, output_shape=None, seed=0):
    nd = len(size)
    rng = np.random.default_rng(seed)
    ks = [kernel] * nd if isinstance(kernel, int) else list(kernel)
    fan_in = cin // group * int(np.prod(ks))
    w = (rng.standard_normal((cin, cout // group, *ks)) / np.sqrt(fan_in)).astype(np.float32)
    inits, ins = [numpy_helper.from_array(w, "W")], ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B"))
        ins.append("B")
    attrs = {"strides": [stride] * nd if isinstance(stride, int) else list(stride),
             "dilations": [dilation] * nd, "group": group}
    for key, value in (("pads", pads), ("output_padding", output_padding), ("auto_pad", auto_pad),
                       ("output_shape", output_shape)):
        if value is not None:
            attrs[key] = value
    x_shape = [2, cin, *size]
    graph = helper.make_graph([helper.make_node("ConvTranspose", ins, ["y"], name="deconv", **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def max_err(model, rewritten, feeds):
    ref, got = run(model, feeds), run(rewritten, feeds)
    assert got.shape == ref.shape
    return float(np.max(np.abs(got.astype(np.float64) - ref)))


# (stride, kernel, pads, output_padding, dilation, group) for 2-D; 1-D uses the first half.
GRID_2D = [
    (2, 2, [0, 0, 0, 0], None, 1, 1),            # unet's up-sampling
    (3, 9, [4, 4, 4, 4], [2, 2], 1, 1),          # superres' last layer
    (2, 3, [1, 1, 1, 1], [1, 1], 1, 1),
    (2, 4, [1, 1, 1, 1], None, 1, 2),
    (3, 5, [2, 1, 0, 3], [1, 2], 1, 1),
    (2, 3, [0, 0, 0, 0], None, 2, 1),            # dilation shares a factor with the stride
    (3, 3, [1, 2, 2, 1], [0, 1], 2, 3),          # dilation coprime with the stride, groups
    (1, 3, [1, 1, 1, 1], None, 1, 1),            # stride 1: no rearrangement at all
    ((2, 3), (3, 4), [1, 0, 0, 2], [1, 2], 1, 1),  # unequal strides and kernels
    (4, 2, [0, 0, 0, 0], None, 1, 6),            # kernel smaller than stride: phases without taps
    (2, 1, [0, 0, 0, 0], [1, 1], 1, 1),
]
GRID_1D = [
    (2, 4, [1, 1], None, 1, 1),
    (3, 7, [3, 2], [2], 1, 2),
    (5, 3, [0, 0], [4], 2, 1),
    (2, 5, [4, 0], [1], 3, 6),
]


def _cases():
    for i, (s, k, p, op, d, g) in enumerate(GRID_2D):
        yield pytest.param(dict(cin=6, cout=6 if g > 1 else 4, kernel=k, size=(7, 6), stride=s, pads=p,
                                output_padding=op, dilation=d, group=g, seed=i), id=f"2d-{i}")
    for i, (s, k, p, op, d, g) in enumerate(GRID_1D):
        yield pytest.param(dict(cin=6, cout=12 if g > 1 else 5, kernel=k, size=(11,), stride=s, pads=p,
                                output_padding=op, dilation=d, group=g, seed=100 + i), id=f"1d-{i}")
    yield pytest.param(dict(cin=4, cout=4, kernel=3, size=(5, 5), stride=2, auto_pad="SAME_UPPER"), id="same_upper")
    yield pytest.param(dict(cin=4, cout=4, kernel=3, size=(5, 5), stride=2, auto_pad="SAME_LOWER"), id="same_lower")
    yield pytest.param(dict(cin=4, cout=4, kernel=3, size=(5, 5), stride=2, output_shape=[10, 9]), id="output_shape")
    yield pytest.param(dict(cin=2, cout=2, kernel=3, size=(3, 4, 3), stride=2, pads=[1, 0, 1, 1, 1, 0]), id="3d")
    yield pytest.param(dict(cin=3, cout=2, kernel=3, size=(5, 5), stride=2, bias=False, pads=[1, 1, 1, 1]), id="no-bias")


@pytest.mark.parametrize("spec", list(_cases()))
def test_subpixel_is_exact(spec):
    model, feeds = ct_model(**spec)
    rewritten = apply_rule(model, "convtranspose_to_subpixel")
    ops = op_histogram(rewritten)
    assert "ConvTranspose" not in ops and ops["Conv"] == 1
    strided = any(s > 1 for s in np.atleast_1d(spec["stride"]))
    assert ops.get("Reshape", 0) == (2 if strided else 0) and ops.get("Transpose", 0) == (1 if strided else 0)
    assert ops.get("Slice", 0) <= 1 and sum(ops.values()) == 1 + 3 * strided + ops.get("Slice", 0)
    assert max_err(model, rewritten, feeds) <= 1e-5


@pytest.mark.parametrize("spec", [c for c in _cases() if len(c.values[0]["size"]) == 2
                                  and np.ndim(c.values[0]["stride"]) == 0])
def test_depth_to_space_is_exact(spec):
    model, feeds = ct_model(**spec)
    rewritten = apply_rule(model, "convtranspose_to_depth_to_space")
    ops = op_histogram(rewritten)
    assert ops["Conv"] == 1 and ops.get("DepthToSpace", 0) == (1 if spec["stride"] > 1 else 0)
    assert set(ops) <= {"Conv", "DepthToSpace", "Slice"}
    assert max_err(model, rewritten, feeds) <= 1e-5


def test_depth_to_space_declines_unequal_strides():
    model, _ = ct_model(4, 4, 3, (5, 5), (2, 3))
    graph = to_graph(model)
    assert "equal strides" in REGISTRY["convtranspose_to_depth_to_space"].why_not(graph.nodes[0], graph)


def test_phase_selector_places_every_tap_once():
    # Each transposed-kernel tap lands in exactly one (phase, conv tap) slot.
    for k, s, d in itertools.product(range(1, 8), range(1, 5), range(1, 4)):
        sel = phase_selector(k, s, d)
        assert sel.sum(axis=(0, 1)).tolist() == [1.0] * k
        assert sel.shape == (s, d * (k - 1) // s + 1, k)


@pytest.mark.parametrize("name, count", [("superres", 1), ("unet", 2)])
def test_zoo_layers_are_exact(zoo_model, name, count):
    model = zoo_model(name)
    feeds = {model.graph.input[0].name: np.random.default_rng(3).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    ref = run(model, feeds)
    for rule_name in EXACT_RULES:
        rewritten = model
        for _ in range(count):
            rewritten = apply_rule(rewritten, rule_name)
        assert op_histogram(rewritten).get("ConvTranspose", 0) == 0
        err = float(np.max(np.abs(run(rewritten, feeds) - ref)))
        assert err <= 1e-5, f"{name} via {rule_name}: {err}"


def test_superres_geometry():
    """The zoo's 9×9 stride-3 layer: 4-tap phase kernels, 9 phases, crop of 4 at the start."""
    model, _ = ct_model(16, 1, 9, (16, 16), 3, pads=[4, 4, 4, 4], output_padding=[2, 2])
    geo = geometry(to_graph(model).nodes[0])
    assert geo.taps == (3, 3) and geo.pad_begin == (4, 4) and geo.out_size == (48, 48)
    rewritten = apply_rule(model, "convtranspose_to_subpixel")
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    w = next(i for i in rewritten.graph.initializer if i.name == conv.input[1])
    assert list(w.dims) == [9, 16, 3, 3]


def test_resize_conv_is_not_exact_but_has_the_right_shape():
    """The retrain replacement: same output shape, different function until fitted."""
    for spec in (dict(cin=16, cout=1, kernel=9, size=(16, 16), stride=3, pads=[4, 4, 4, 4], output_padding=[2, 2]),
                 dict(cin=8, cout=4, kernel=2, size=(8, 8), stride=2),
                 dict(cin=6, cout=5, kernel=7, size=(11,), stride=3, pads=[3, 2], output_padding=[2])):
        model, feeds = ct_model(**spec)
        rewritten = apply_rule(model, "convtranspose_to_resize_conv")
        assert set(op_histogram(rewritten)) <= {"Resize", "Conv", "Slice"}
        assert REGISTRY["convtranspose_to_resize_conv"].kind == "retrain"
        assert max_err(model, rewritten, feeds) > 1e-2


def test_dynamic_shape_is_declined_with_reason():
    model, _ = ct_model(4, 4, 3, (5, 5), 2)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    del model.graph.value_info[:]
    graph = to_graph(model)
    for rule_name in EXACT_RULES:
        assert REGISTRY[rule_name].why_not(graph.nodes[0], graph) == "input spatial shape is not static"


@pytest.mark.parametrize("spec", list(_cases()))
def test_resize_conv_fit_computes_both_layers_as_onnxruntime_does(spec):
    """The closed-form fit (rewrites/retrain.py) computes the ConvTranspose and the rule's
    Resize + Conv + Slice in numpy: both must be what onnxruntime runs, for every geometry."""
    from converter.legalize.rewrites import retrain

    model, feeds = ct_model(**spec)
    graph = to_graph(model)
    if REGISTRY["convtranspose_to_resize_conv"].why_not(graph.nodes[0], graph):
        pytest.skip("the retrain rule declines this geometry")
    geo = geometry(graph.nodes[0])
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    w, b = inits["W"], inits.get("B")
    x = feeds["x"]
    np.testing.assert_allclose(retrain._conv_transpose_outputs(x, w, b, geo), run(model, feeds), atol=2e-5)
    rewritten = apply_rule(model, "convtranspose_to_resize_conv")
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    conv_w = next(numpy_helper.to_array(i) for i in rewritten.graph.initializer if i.name == conv.input[1])
    np.testing.assert_allclose(retrain._resize_conv_outputs(x, conv_w, b, geo), run(rewritten, feeds), atol=2e-5)
    fitted, fitted_b, report = retrain.fit_onnx_resize_conv(w, b, geo, conv_w)
    assert fitted.shape == conv_w.shape and fitted.dtype == conv_w.dtype
    assert report.error_after <= report.error_before and report.max_abs_after <= report.max_abs_before * 1.5

"""Every opset adapter (converter/frontend/opsets) against onnxruntime on both sides: the opset-N model
in onnxruntime vs the adapted opset-17 model in onnxruntime, max abs error asserted; and the
refusals, each one line naming the node, the operator version and the reason."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.errors import EdgeconvError
from converter.ir.graph import CANONICAL_OPSET, model_opset
from tests.opset_cases import RNG, adapted, f32, max_error, model, ort_run

I64 = np.int64


def i64(*values):
    return np.asarray(values, I64)


# name -> (model, feeds, atol, ops that must be gone after adapting)
def _cases():
    x4 = f32(2, 3, 6, 8)
    x3 = f32(2, 5, 16)
    img = f32(1, 2, 5, 7)
    yield "gelu20_erf", model("Gelu", {"x": x3}), 1e-6
    yield "gelu20_tanh", model("Gelu", {"x": x3}, attrs={"approximate": "tanh"}), 1e-6
    yield "mish18", model("Mish", {"x": x3}, opset=18), 1e-6
    yield "mish22", model("Mish", {"x": x3}, opset=22), 1e-6
    yield "swish24", model("Swish", {"x": x3}, attrs={"alpha": 1.5}, opset=24), 1e-6
    yield "pad18_axes_reflect", model("Pad", {"x": x4}, {"pads": i64(1, 2, 1, 0), "value": None, "axes": i64(2, -1)},
                                      {"mode": "reflect"}, opset=18), 0
    yield "pad19_wrap", model("Pad", {"x": x4}, {"pads": i64(0, 0, 2, 1, 0, 0, 1, 3)}, {"mode": "wrap"}, opset=19), 0
    yield "pad21_constant_value", model("Pad", {"x": x4}, {"pads": i64(0, 1, 1, 0, 0, 0, 2, 2),
                                                           "value": np.float32(1.5)}, opset=21), 0
    yield "pad23_edge_axes", model("Pad", {"x": x4}, {"pads": i64(2, 3), "value": None, "axes": i64(1)},
                                   {"mode": "edge"}, opset=23), 0
    yield "reducemean18_axes", model("ReduceMean", {"x": x4}, {"axes": i64(2, 3)}, opset=18), 1e-6
    yield "reducemax20_keepdims0", model("ReduceMax", {"x": x4}, {"axes": i64(-1)}, {"keepdims": 0}, opset=20), 0
    yield "reducel2_18_all", model("ReduceL2", {"x": x4}, opset=18), 1e-5
    yield "reduceprod18_noop", model("ReduceProd", {"x": x4}, {"axes": np.zeros(0, I64)},
                                     {"noop_with_empty_axes": 1}, opset=18), 0
    for op in ("ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ReduceMin", "ReduceSumSquare"):
        yield f"{op.lower()}18", model(op, {"x": np.abs(x4) + 0.1}, {"axes": i64(1)}, opset=18), 1e-5
    yield "split18_num_outputs", model("Split", {"x": f32(2, 8, 3)}, attrs={"axis": 1, "num_outputs": 3},
                                       outputs=3, opset=18), 0
    yield "resize18_axes_linear", model("Resize", {"x": img}, {"roi": None, "scales": np.float32([2.0, 1.5])},
                                        {"mode": "linear", "axes": [2, 3]}, opset=18), 1e-6
    yield "resize18_antialias_upscale", model("Resize", {"x": img}, {"roi": None, "scales": np.float32([1, 1, 2, 2])},
                                              {"mode": "linear", "antialias": 1}, opset=18), 1e-6
    yield "resize18_not_larger", model("Resize", {"x": img}, {"roi": None, "scales": None, "sizes": i64(10, 21)},
                                       {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
                                       opset=18), 0
    yield "resize19_symmetric", model("Resize", {"x": img}, {"roi": None, "scales": np.float32([1, 1, 3, 2])},
                                      {"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"},
                                      opset=19), 1e-5
    yield "resize19_sizes_axes", model("Resize", {"x": img}, {"roi": None, "scales": None, "sizes": i64(9)},
                                       {"mode": "linear", "axes": [-1], "coordinate_transformation_mode": "align_corners"},
                                       opset=19), 1e-6
    yield "groupnorm18", model("GroupNormalization", {"x": x4}, {"s": f32(3), "b": f32(3)},
                               {"num_groups": 3, "epsilon": 1e-3}, opset=18), 1e-5
    yield "groupnorm21", model("GroupNormalization", {"x": f32(2, 4, 3, 5)}, {"s": f32(4), "b": f32(4)},
                               {"num_groups": 2}, opset=21), 1e-5
    yield "scatternd18_add", model("ScatterND", {"x": x3}, {"i": i64(1, 0, 1).reshape(3, 1), "u": f32(3, 5, 16)},
                                   {"reduction": "add"}, opset=18), 1e-6
    yield "scatterelements18_mul", model("ScatterElements", {"x": x3}, {"i": np.ones((2, 5, 16), I64), "u": f32(2, 5, 16)},
                                         {"axis": 1, "reduction": "mul"}, opset=18), 1e-6
    grid = f32(1, 4, 6, 2, low=-1.1, high=1.1)
    for mode in ("linear", "cubic", "nearest"):
        yield f"gridsample20_{mode}", model("GridSample", {"x": img, "g": grid}, attrs={"mode": mode}, opset=20), 1e-5
    yield "gridsample22_align", model("GridSample", {"x": img, "g": grid}, attrs={"align_corners": 1,
                                                                                "padding_mode": "border"}, opset=22), 1e-5
    for align in (0, 1):
        yield f"affinegrid20_2d_align{align}", model("AffineGrid", {"t": f32(2, 2, 3)}, {"size": i64(2, 3, 4, 5)},
                                                     {"align_corners": align}, opset=20), 1e-6
    yield "affinegrid20_3d", model("AffineGrid", {"t": f32(1, 3, 4)}, {"size": i64(1, 1, 2, 3, 4)}, opset=20), 1e-6
    yield "col2im18", model("Col2Im", {"x": f32(1, 2 * 6, 15)}, {"image": i64(5, 6), "block": i64(2, 3)},
                            {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 1]}, opset=18), 1e-6
    yield "col2im18_overlap", model("Col2Im", {"x": f32(2, 4, 9)}, {"image": i64(4, 4), "block": i64(2, 2)}, opset=18), 1e-6
    yield "cast19", model("Cast", {"x": x3 * 10}, attrs={"to": TensorProto.INT32},
                                   out_types=[TensorProto.INT32], opset=19), 0
    yield "cast21", model("Cast", {"x": x3}, attrs={"to": TensorProto.FLOAT16}, out_types=[TensorProto.FLOAT16], opset=21), 0
    yield "castlike19", model("CastLike", {"x": x3}, {"like": np.zeros(1, np.float16)},
                              out_types=[TensorProto.FLOAT16], opset=19), 0
    yield "quantize19", model("QuantizeLinear", {"x": x3}, {"s": np.float32(0.02), "z": np.uint8(128)},
                              attrs={"saturate": 1}, out_types=[TensorProto.UINT8], opset=19), 0
    yield "quantize21_blocked", model("QuantizeLinear", {"x": x3}, {"s": f32(2, 5, 4, low=0.01, high=0.03),
                                                                  "z": RNG.integers(-5, 5, (2, 5, 4)).astype(np.int8)},
                                      {"axis": 2, "block_size": 4}, out_types=[TensorProto.INT8], opset=21), 0
    yield "dequantize19", model("DequantizeLinear", {"q": RNG.integers(0, 255, (2, 5), dtype=np.uint8)},
                                {"s": f32(5, low=0.1, high=0.2), "z": RNG.integers(0, 255, 5).astype(np.uint8)},
                                {"axis": 1}, opset=19), 0
    yield "dequantize21_blocked", model("DequantizeLinear", {"q": RNG.integers(-128, 127, (4, 6), dtype=np.int8)},
                                        {"s": f32(4, 2, low=0.1, high=0.2), "z": RNG.integers(-3, 3, (4, 2)).astype(np.int8)},
                                        {"axis": 1, "block_size": 3}, opset=21), 0
    yield "dequantize21_int4", _int4_weights(), 1e-4  # the dequantized weights and the MatMul within 1e-4
    yield "rmsnorm23", model("RMSNormalization", {"x": x3}, {"s": f32(16)}, {"epsilon": 1e-4}, opset=23), 1e-5
    yield "averagepool19_dilations1", model("AveragePool", {"x": x4}, attrs={"kernel_shape": [2, 2],
                                                                             "dilations": [1, 1]}, opset=19), 1e-6
    yield "conv22", model("Conv", {"x": x4}, {"w": f32(4, 3, 3, 3)}, {"pads": [1, 1, 1, 1]}, opset=22), 1e-5
    # opsets 7-16 up to 17
    yield "softmax11_axis1", model("Softmax", {"x": x4}, attrs={"axis": 1}, opset=11), 1e-6
    yield "logsoftmax11_last", model("LogSoftmax", {"x": x4}, attrs={"axis": 3}, opset=11), 1e-6
    yield "hardmax9", model("Hardmax", {"x": x4}, opset=9), 0
    yield "clip6", model("Clip", {"x": x3}, attrs={"min": -0.5, "max": 1.0}, opset=9), 0
    yield "clip6_max_only", model("Clip", {"x": x3}, attrs={"max": 0.3}, opset=8), 0
    yield "pad2_reflect", model("Pad", {"x": x4}, attrs={"pads": [0, 0, 1, 2, 0, 0, 2, 1], "mode": "reflect"}, opset=9), 0
    yield "pad2_value", model("Pad", {"x": x4}, attrs={"pads": [0, 1, 0, 0, 0, 0, 0, 2], "value": 2.5}, opset=10), 0
    yield "slice1", model("Slice", {"x": x4}, attrs={"starts": [1, -5], "ends": [3, 100], "axes": [2, 3]}, opset=9), 0
    yield "topk1", model("TopK", {"x": x4}, attrs={"k": 3, "axis": 2}, outputs=2,
                         out_types=[TensorProto.FLOAT, TensorProto.INT64], opset=9), 0
    yield "upsample7_nearest", model("Upsample", {"x": img}, attrs={"scales": [1.0, 1.0, 2.0, 3.0]}, opset=7, ir=3), 0
    yield "upsample9_linear", model("Upsample", {"x": img}, {"s": np.float32([1, 1, 2, 2])}, {"mode": "linear"},
                                    opset=9), 1e-6
    yield "resize10_nearest", model("Resize", {"x": img}, {"s": np.float32([1, 1, 2.5, 1.5])}, opset=10), 0
    yield "resize11_half_pixel", model("Resize", {"x": img}, {"roi": np.zeros(0, np.float32),
                                                            "s": np.float32([1, 1, 2, 2])}, {"mode": "linear"}, opset=11), 1e-6
    yield "squeeze11", model("Squeeze", {"x": f32(2, 1, 3, 1)}, attrs={"axes": [1, -1]}, opset=11), 0
    yield "unsqueeze11", model("Unsqueeze", {"x": f32(2, 3)}, attrs={"axes": [0, -1]}, opset=11), 0
    yield "split11", model("Split", {"x": f32(2, 7)}, attrs={"axis": -1, "split": [3, 4]}, outputs=2, opset=11), 0
    yield "split2", model("Split", {"x": f32(2, 6)}, attrs={"axis": 1}, outputs=3, opset=8), 0
    yield "reducesum11", model("ReduceSum", {"x": x4}, attrs={"axes": [1, 3], "keepdims": 0}, opset=11), 1e-5
    bn = {"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, low=0.5, high=1.5)}
    yield "batchnorm7", model("BatchNormalization", {"x": x4}, bn, {"epsilon": 1e-3, "spatial": 1}, opset=7, ir=3), 1e-5
    yield "batchnorm9", model("BatchNormalization", {"x": x4}, bn, opset=9), 1e-5
    yield "batchnorm14", model("BatchNormalization", {"x": x4}, bn, opset=14), 1e-5
    yield "dropout7", model("Dropout", {"x": x3}, attrs={"ratio": 0.3}, opset=7, ir=3), 0
    yield "dropout10", model("Dropout", {"x": x3}, attrs={"ratio": 0.3}, opset=10), 0
    yield "scatter9", model("Scatter", {"x": x3}, {"i": np.zeros((2, 1, 16), I64), "u": f32(2, 1, 16)}, {"axis": 1},
                            opset=9), 0
    rois = np.float32([[0.5, 0.5, 4.5, 3.5], [1.0, 0.0, 6.0, 4.0]])
    yield "roialign10", model("RoiAlign", {"x": img}, {"r": rois, "bi": i64(0, 0)},
                              {"output_height": 3, "output_width": 2, "sampling_ratio": 2}, opset=10), 1e-5


def _int4_weights():
    """DequantizeLinear-21 of int4 weights (per channel), its output and a MatMul reading it."""
    weights = RNG.integers(-8, 7, (6, 4)).astype(np.int8)
    w = helper.make_tensor("w", TensorProto.INT4, [6, 4], weights.reshape(-1).tolist())
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1), helper.make_node("MatMul", ["x", "wf"], ["y0"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                              [helper.make_tensor_value_info("wf", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
                              [w, onnx.numpy_helper.from_array(f32(4, low=0.1, high=0.3), "s")])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    made.ir_version = 10
    return made


CASES = {name: (m, atol) for name, m, atol in _cases()}
#: Operators of the cases that opset 17 does not have (or has deprecated).
NOT_IN_OPSET_17 = {"Gelu", "Mish", "Swish", "GroupNormalization", "AffineGrid", "Col2Im", "RMSNormalization",
                   "Upsample", "Scatter"}


def _feeds(m: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(11)
    feeds = {}
    for vi in m.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = (rng.uniform(-2, 2, shape) if np.dtype(dtype).kind == "f" else
                          rng.integers(0, 120, shape)).astype(dtype)
    return feeds


@pytest.mark.parametrize("name", list(CASES))
def test_adapter_matches_onnxruntime_on_both_sides(name):
    m, atol = CASES[name]
    feeds = _feeds(m)
    before = ort_run(m, feeds)
    after_model = adapted(m)
    assert model_opset(after_model) == CANONICAL_OPSET and after_model.ir_version >= 8
    assert not {n.op_type for n in after_model.graph.node} & NOT_IN_OPSET_17
    err = max_error(before, ort_run(after_model, feeds))
    assert err <= atol, f"{name}: max abs error {err:.3g} > {atol}"


def test_every_adapter_is_exercised():
    """Each registered adapter (but those of opsets onnxruntime cannot run: 27, 28) runs in one
    of the cases above."""
    from converter.frontend.opsets import ADAPTERS, driver

    used = set()
    real = driver._apply

    def record(found, graph, node, names):
        used.add(found.name)
        real(found, graph, node, names)

    driver._apply = record
    try:
        for m, _ in CASES.values():
            adapted(m)
    finally:
        driver._apply = real
    runnable = {a.name for key, a in ADAPTERS.items() if max(a.versions) <= 26 or min(a.versions) <= 26}
    assert runnable - used == set()


@pytest.mark.parametrize("build, needle", [
    (lambda: model("Resize", {"x": f32(1, 2, 8, 8)}, {"roi": None, "scales": np.float32([1, 1, 0.5, 0.5])},
                   {"mode": "linear", "antialias": 1}, opset=18),
     "(Resize-18, opset 18) cannot be brought to opset 17: antialias=1 while downscaling axis 2 (scale 0.5) has no opset-17 form"),
    (lambda: model("AveragePool", {"x": f32(1, 2, 8, 8)}, attrs={"kernel_shape": [2, 2], "dilations": [2, 2]},
                   opset=19), "(AveragePool-19, opset 19) cannot be brought to opset 17: attribute dilations=[2, 2] has no opset-17 form"),
    (lambda: model("ScatterND", {"x": f32(3, 4)}, {"i": i64(0).reshape(1, 1), "u": f32(1, 4)}, {"reduction": "max"},
                   opset=18), "reduction='max' has no opset-17 form"),
    (lambda: model("DFT", {"x": f32(1, 8, 1)}, opset=20), "(DFT-20, opset 20) cannot be brought to opset 17: no adapter from DFT-20 to DFT-17"),
    (lambda: model("Attention", {"q": f32(1, 2, 4, 8), "k": f32(1, 2, 4, 8), "v": f32(1, 2, 4, 8)}, opset=23),
     "(Attention-23, opset 23) cannot be brought to opset 17: Attention has no opset-17 form in edgeconv"),
    (lambda: model("Cast", {"x": f32(4)}, attrs={"to": TensorProto.FLOAT8E4M3FN}, out_types=[TensorProto.FLOAT8E4M3FN],
                   opset=19), "has type FLOAT8E4M3FN, which edgeconv does not support"),
    (lambda: model("Conv", {"x": f32(1, 1, 4, 4).astype(np.float32)}, {"w": f32(1, 1, 1, 1)}, opset=22,
                   out_types=[TensorProto.FLOAT]), None),
    (lambda: model("Upsample", {"x": f32(1, 1, 2, 2)}, attrs={"scales": [1.0, 1.0, 2.0, 2.0]}, opset=5, ir=3),
     "model uses opset 5; edgeconv reads opset 7 to"),
])
def test_refusals_are_one_line(build, needle):
    from converter.frontend.opsets import adapt_to_canonical

    m = build()
    if needle is None:
        adapt_to_canonical(m)
        return
    with pytest.raises(EdgeconvError) as err:
        adapt_to_canonical(m)
    text = str(err.value)
    assert needle in text and "\n" not in text and "Error" not in text and "Assertion" not in text, text


def test_bfloat16_input_refused_where_opset_17_lacks_it():
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 1, 4, 4])
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BFLOAT16), helper.make_node("Elu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    from converter.frontend.opsets import adapt_to_canonical

    with pytest.raises(EdgeconvError, match=r"\(Elu-22, opset 22\) cannot be brought to opset 17: input 'c' is bfloat16, which Elu-6 \(opset 17\) "
                                            r"does not take"):
        adapt_to_canonical(m)


def test_opset_28_adapters_against_numpy():
    """onnxruntime does not run opset 28: Mod-28 (fmod=0 on floats) and SpaceToDepth-28 (CRD)
    are checked against the ONNX definitions in numpy instead, their adapted models in onnxruntime."""
    a, b = f32(3, 4) * 5, f32(3, 4) + 3.0
    got = ort_run(adapted(model("Mod", {"a": a, "b": b}, opset=28)), {"a": a, "b": b})[0]
    assert np.max(np.abs(got - (a - np.floor(a / b) * b))) <= 1e-5
    x = f32(1, 2, 4, 6)
    got = ort_run(adapted(model("SpaceToDepth", {"x": x}, attrs={"blocksize": 2, "mode": "CRD"}, opset=28)), {"x": x})[0]
    want = x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 3, 5, 2, 4).reshape(1, 8, 2, 3)
    assert np.array_equal(got, want)
    m = adapted(model("ReduceLogSumExp", {"x": x}, {"axes": i64(1)}, opset=28))
    assert np.max(np.abs(ort_run(m, {"x": x})[0] - np.log(np.exp(x).sum(1, keepdims=True)))) <= 1e-5


def test_gelu_erf_form_is_the_matrix_pattern():
    """The exact GELU comes out as torch's opset-17 exporter writes it: TFLite's exporter fuses
    it into its GELU builtin (matrix pattern gelu_erf)."""
    from converter.ir.graph import to_graph
    from converter.matrix.patterns import PATTERNS

    g = to_graph(adapted(CASES["gelu20_erf"][0]))
    erf = next(n for n in g.nodes if n.op == "Erf")
    found = PATTERNS["gelu_erf"].find(erf)
    assert found is not None and [n.op for n in found.nodes] == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert math.isclose(float(np.asarray(found.nodes[0].inputs[1].values).reshape(-1)[0]), math.sqrt(2.0), rel_tol=1e-6)


def test_adapters_document_before_and_after():
    from converter.frontend.opsets import ADAPTERS

    for adapter in set(ADAPTERS.values()):
        assert "before:" in adapter.doc and "after:" in adapter.doc, adapter.name


@pytest.mark.parametrize("opset", [7, 10, 13])
@pytest.mark.parametrize("name", ["mobilenetv2", "superres", "detector", "transformer"])
def test_zoo_of_old_opsets_upgrades(name, opset, tmp_path):
    """The zoo exported by torch's TorchScript exporter at opsets 7-13 normalizes to opset 17
    with the same outputs in onnxruntime (the normalization self-check)."""
    from converter.demo import zoo
    from converter.frontend.normalize import check_equivalent, normalize

    m = onnx.load(zoo.export_onnx(name, tmp_path / "m.onnx", opset=opset))
    if name == "transformer" and opset == 7:  # torch writes an Erf, which opset 7 does not have
        with pytest.raises(EdgeconvError, match=r"^node '/act/Erf' \(Erf, opset 7\) cannot be brought to opset 17: "
                                                r"onnx knows no operator Erf at opset 7$"):
            normalize(m)
        return
    norm = normalize(m)
    assert model_opset(norm) == CANONICAL_OPSET
    assert check_equivalent(m, norm) <= 1e-5


def _saved(tmp_path, nodes, inputs, outputs, opset, inits=()) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    path = tmp_path / f"m{opset}.onnx"
    onnx.save(m, path)
    return str(path)


def test_cli_refusals_are_one_line_exit_3_and_write_nothing(tmp_path):
    """What a user sees: one line, exit 3 (unsupported), no output directory."""
    from test_cli_qa import assert_one_error, run_cli

    from converter.errors import EXIT_UNSUPPORTED

    vi = helper.make_tensor_value_info
    resize = _saved(tmp_path, [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)],
                    [vi("x", TensorProto.FLOAT, [1, 1, 8, 8])], [vi("y", TensorProto.FLOAT, [1, 1, 4, 4])], 18,
                    [onnx.numpy_helper.from_array(np.float32([1, 1, 0.5, 0.5]), "s")])
    cast = _saved(tmp_path, [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2)],
                  [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT8E5M2, [4])], 19)
    for path, fragment in ((resize, "node 'Resize' (Resize-18, opset 18) cannot be brought to opset 17: antialias=1"),
                           (cast, "output 'y' has type FLOAT8E5M2, which edgeconv does not support")):
        out = tmp_path / "out"
        assert_one_error(run_cli("port", path, "--to", "tflite", "-o", out), EXIT_UNSUPPORTED, fragment)
        assert not out.exists()

"""Every ONNX op the support matrix marks supported/unverified for CoreML: a seeded single-op model
exported to an ML Program, executed as saved (numpy executor on Linux, Core ML on macOS), compared
with onnxruntime (fp32 max abs error <= 1e-4, ints and bools exact), re-exported byte-identically.

Cases exercise broadcasting and negative axes where the op has them.  Ops producing build-time
constants (Shape, ConstantOfShape, Range) feed an Add with a graph input, since a program output
must be computed.  Upsample exists only up to opset 9, so its case is an opset-9 model.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

pytest.importorskip("coremltools")

from converter.matrix import load_matrix  # noqa: E402
from converter.targets.base import ExportOptions  # noqa: E402
from converter.targets.coreml import TARGET  # noqa: E402
from converter.targets.coreml.mil_builder import supported_onnx_ops  # noqa: E402

FP32_ATOL = 1e-4

#: Matrix ops without a MIL mapping, each with the reason.  Must stay short and honest: the test
#: below fails if an op here gets mapped or the matrix changes.
NOT_MAPPED: dict[str, str] = {}
#: Ops that never reach an exporter: normalize() removes them and the builder reads constants
#: through graph.constant_value().
NEVER_EXPORTED = {"Constant": "folded into the consumers' constant inputs by normalize()"}


@dataclass
class Case:
    op: str
    inputs: dict  # name -> np.ndarray (graph inputs, fed at run time)
    consts: dict = field(default_factory=dict)  # name -> np.ndarray (initializers)
    attrs: dict = field(default_factory=dict)
    outputs: int = 1
    then_add: bool = False  # follow with Add(result, graph input 'z') (build-time-constant ops)
    opset: int = 17
    label: str = ""


def _rng(seed):
    return np.random.default_rng(seed)


def _f(shape, seed=0, scale=1.0, shift=0.0):
    return (_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


def _pos(shape, seed=0):
    return _rng(seed).uniform(0.5, 2.0, shape).astype(np.float32)


def _i64(*values):
    return np.array(values, dtype=np.int64)


X4 = (2, 3, 4, 5)


def _unary_cases():
    ops = ["Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "Neg", "Relu", "Round", "Sigmoid", "Sign", "Sin",
           "Softplus", "Softsign", "Tanh", "Identity", "Dropout", "HardSwish", "Selu"]
    cases = [Case(op, {"x": _f(X4, 1, 2.0)}) for op in ops]
    cases += [Case(op, {"x": _pos(X4, 2)}) for op in ("Log", "Sqrt", "Reciprocal")]
    cases += [
        Case("Not", {"x": _f(X4, 3) > 0}),
        Case("Clip", {"x": _f(X4, 4)}, {"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
        Case("Clip", {"x": _f(X4, 4, 5)}, {"lo": np.float32(0), "hi": np.float32(6)}, label="relu6"),
        Case("LeakyRelu", {"x": _f(X4, 5)}, attrs={"alpha": 0.2}),
        Case("Elu", {"x": _f(X4, 6)}, attrs={"alpha": 0.7}),
        Case("HardSigmoid", {"x": _f(X4, 7, 3)}, attrs={"alpha": 0.3, "beta": 0.4}),
        Case("PRelu", {"x": _f(X4, 8)}, {"slope": _pos((3, 1, 1), 9) / 4}),
        Case("PRelu", {"x": _f(X4, 8)}, {"slope": _pos((5,), 9) / 4}, label="last-axis-slope"),
    ]
    return cases


def _binary_cases():
    x, y = _f(X4, 10), _f((4, 1), 11)  # y broadcasts over axes 0, 1 and 3
    cases = [Case(op, {"x": x, "y": y}) for op in ("Add", "Sub", "Mul", "Max", "Min", "Sum", "Greater", "Less")]
    cases += [
        Case("Div", {"x": x, "y": _pos((4, 1), 12)}),
        Case("Pow", {"x": _pos(X4, 13), "y": _f((5,), 14)}),
        Case("Equal", {"x": _rng(15).integers(0, 3, X4), "y": _rng(16).integers(0, 3, (1, 5))}),
        Case("Where", {"c": _f(X4, 17) > 0, "x": x, "y": y}),
        # an attention mask: the condition is the bigger operand (MIL types select from a and b)
        Case("Where", {"c": _f(X4, 17) > 0}, {"x": np.float32(0), "y": np.float32(-1e4)},
             label="scalar-branches"),
    ]
    bools = {"x": _f(X4, 18) > 0, "y": _f((4, 1), 19) > 0}
    cases += [Case(op, dict(bools)) for op in ("And", "Or", "Xor")]
    return cases


def _reduce_cases():
    x = _f(X4, 20)
    return [
        Case("ArgMax", {"x": x}, attrs={"axis": -2, "keepdims": 0}),
        Case("ArgMin", {"x": x}, attrs={"axis": 1}),
        Case("ReduceMean", {"x": x}, attrs={"axes": [-1, 1], "keepdims": 0}),
        Case("ReduceMax", {"x": x}, attrs={"axes": [-2]}),
        Case("ReduceMin", {"x": x}, attrs={"axes": [0, 2], "keepdims": 0}),
        Case("ReduceProd", {"x": _pos(X4, 21)}, attrs={"axes": [-1]}),
        Case("ReduceSum", {"x": x}, {"axes": _i64(-3)}),
        Case("ReduceL2", {"x": x}, attrs={"axes": [-1, -2], "keepdims": 1}),
        Case("Softmax", {"x": x}, attrs={"axis": -3}),
        Case("LogSoftmax", {"x": x}, attrs={"axis": -1}),
        Case("CumSum", {"x": x}, {"axis": _i64(-1)}, attrs={"exclusive": 1, "reverse": 1}),
        Case("GlobalAveragePool", {"x": x}),
        Case("GlobalMaxPool", {"x": x}),
    ]


def _nn_cases():
    x = _f((1, 4, 9, 8), 30)
    w = _f((6, 2, 3, 3), 31, 0.3)
    return [
        Case("Conv", {"x": x}, {"w": w, "b": _f(6, 32)}, {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2]}),
        Case("ConvTranspose", {"x": x}, {"w": _f((4, 3, 3, 3), 33, 0.3), "b": _f(3, 34)},
             {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]}),
        Case("MaxPool", {"x": x}, attrs={"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
        Case("AveragePool", {"x": x}, attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                             "count_include_pad": 1}),
        Case("BatchNormalization", {"x": x}, {"g": _f(4, 35), "b": _f(4, 36), "m": _f(4, 37), "v": _pos(4, 38)}),
        Case("InstanceNormalization", {"x": x}, {"g": _f(4, 39), "b": _f(4, 40)}),
        Case("LayerNormalization", {"x": x}, {"g": _f((9, 8), 41), "b": _f((9, 8), 42)}, {"axis": -2}),
        Case("LRN", {"x": x}, attrs={"size": 3, "alpha": 0.02, "beta": 0.6, "bias": 1.5}),
        Case("LpNormalization", {"x": x}, attrs={"axis": 1, "p": 2}),
        Case("LpNormalization", {"x": x}, attrs={"axis": -1, "p": 1}, label="p1"),
        Case("Gemm", {"x": _f((3, 5), 43)}, {"w": _f((4, 5), 44), "c": _f(4, 45)},
             {"transB": 1, "alpha": 0.5, "beta": 2.0}),
        Case("MatMul", {"x": _f(X4, 46), "y": _f((5, 6), 47)}),
        Case("MatMul", {"x": _f((3, 4), 46), "y": _f((2, 4, 6), 47)}, label="broadcast-batch"),
        Case("Einsum", {"x": _f((2, 3, 4), 48), "y": _f((2, 4, 5), 49)}, attrs={"equation": "bij,bjk->bik"}),
        Case("Einsum", {"x": _f((2, 3, 4), 48), "y": _f((4, 5), 49)}, attrs={"equation": "bij,jk->bki"},
             label="transposed"),
    ]


def _tensor_cases():
    x = _f(X4, 50)
    return [
        Case("Reshape", {"x": x}, {"shape": _i64(0, -1, 5)}),
        Case("Flatten", {"x": x}, attrs={"axis": 2}),
        Case("Squeeze", {"x": _f((2, 1, 4, 1), 51)}, {"axes": _i64(-3)}),
        Case("Unsqueeze", {"x": _f((3, 4, 5), 51)}, {"axes": _i64(-1, 0)}),  # Core ML: rank <= 5
        Case("Transpose", {"x": x}, attrs={"perm": [0, 2, 3, 1]}),
        Case("Concat", {"x": x, "y": _f((2, 3, 4, 2), 52)}, attrs={"axis": -1}),
        Case("Split", {"x": x}, {"sizes": _i64(2, 3)}, {"axis": -1}, outputs=2),
        Case("Slice", {"x": x}, {"starts": _i64(1, -3), "ends": _i64(100, -1), "axes": _i64(1, -1),
                                 "steps": _i64(1, 2)}),
        Case("Gather", {"x": x}, {"idx": _i64(2, -1, 0)}, {"axis": -1}),
        # token ids from the model's input (an int32 placeholder), negative ones wrapped by MIL
        Case("Gather", {"x": x, "idx": np.array([[1, -2], [0, 4]], np.int64)}, attrs={"axis": -1}, label="runtime-indices"),
        Case("Gather", {"x": x > 0}, {"idx": _i64(2, -1, 0)}, {"axis": -1}, label="bool-data"),
        Case("Pad", {"x": x}, {"pads": _i64(0, 0, 1, 2, 0, 0, 3, 0), "v": np.float32(0.5)}),
        Case("Pad", {"x": x}, {"pads": _i64(0, 0, 1, 2, 0, 0, 2, 1)}, {"mode": "reflect"}, label="reflect"),
        Case("Tile", {"x": x}, {"reps": _i64(1, 2, 1, 3)}),
        Case("Expand", {"x": _f((3, 1, 5), 53)}, {"shape": _i64(2, 1, 4, 1)}),
        Case("DepthToSpace", {"x": _f((1, 8, 3, 4), 54)}, attrs={"blocksize": 2, "mode": "DCR"}),
        Case("DepthToSpace", {"x": _f((1, 8, 3, 4), 54)}, attrs={"blocksize": 2, "mode": "CRD"}, label="crd"),
        Case("SpaceToDepth", {"x": _f((1, 3, 4, 6), 55)}, attrs={"blocksize": 2}),
        Case("Cast", {"x": _f(X4, 56, 4)}, attrs={"to": TensorProto.INT64}),
        Case("Cast", {"x": _rng(57).integers(-9, 9, X4)}, attrs={"to": TensorProto.FLOAT}, label="int-to-float"),
        Case("Shape", {"x": x}, attrs={"start": -3}, then_add=True),
        Case("ConstantOfShape", {}, {"shape": _i64(4, 5)},
             {"value": helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])}, then_add=True),
        Case("Range", {}, {"start": np.float32(-1), "limit": np.float32(1.5), "delta": np.float32(0.5)},
             then_add=True),
    ]


def _indexing_cases():
    data = _f((2, 3, 4), 60)
    return [
        Case("GatherND", {"x": data}, {"idx": np.array([[[1, -1]], [[0, 2]]], np.int64)}, {"batch_dims": 1}),
        Case("GatherND", {"x": data, "idx": np.array([[1, 2], [0, -3]], np.int64)}, label="runtime-indices"),
        Case("ScatterND", {"x": data, "u": _f((2, 4), 61)}, {"idx": np.array([[1, 0], [0, -1]], np.int64)}),
        Case("ScatterND", {"x": data, "u": _f((2, 4), 61)}, {"idx": np.array([[1, 0], [1, 0]], np.int64)},
             {"reduction": "add"}, label="add"),
        Case("OneHot", {"i": np.array([[0, -1, 3], [2, 1, -4]], np.int64)},
             {"depth": _i64(4), "values": np.float32([-1.0, 2.0])}, {"axis": -2}),
        Case("TopK", {"x": _f(X4, 62)}, {"k": _i64(3)}, {"axis": -1}, outputs=2),
        Case("TopK", {"x": _f(X4, 63)}, {"k": _i64(2)}, {"axis": 1, "largest": 0}, outputs=2, label="smallest"),
        Case("NonZero", {"x": np.where(_f((3, 4), 64) > 0.3, _f((3, 4), 65), 0).astype(np.float32)}),
    ]


def _grid(shape, seed):
    return _rng(seed).uniform(-1.15, 1.15, shape).astype(np.float32)


def _nms_boxes():
    centers = _rng(70).uniform(0, 10, (2, 12, 2))
    sizes = _rng(71).uniform(1, 5, (2, 12, 2))
    corners = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=-1)  # x1, y1, x2, y2
    return corners[..., [1, 0, 3, 2]].astype(np.float32)  # ONNX center_point_box=0: [y1, x1, y2, x2]


def _vision_cases():
    img = _f((1, 2, 5, 6), 80)
    rois = np.array([[0.5, 1.0, 4.0, 3.5], [2.0, 0.2, 5.5, 4.0], [1.0, 1.0, 2.5, 2.0]], np.float32)
    return [
        Case("Resize", {"x": img}, {"roi": np.zeros(0, np.float32), "scales": np.float32([1, 1, 2, 3])},
             {"mode": "nearest"}),
        Case("Resize", {"x": img}, {"roi": np.zeros(0, np.float32), "scales": np.float32([1, 1, 2, 2])},
             {"mode": "linear"}, label="linear-half-pixel"),
        Case("Resize", {"x": img}, {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                                    "sizes": _i64(1, 2, 7, 4)},
             {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, label="linear-align-corners"),
        Case("Resize", {"x": img}, {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                                    "sizes": _i64(1, 2, 8, 9)},
             {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, label="linear-asymmetric"),
        Case("Upsample", {"x": img}, {"scales": np.float32([1, 1, 2, 2])}, {"mode": "nearest"}, opset=9),
        Case("Upsample", {"x": img}, {"scales": np.float32([1, 1, 2, 3])}, {"mode": "linear"}, opset=9,
             label="linear"),
        Case("GridSample", {"x": img, "g": _grid((1, 4, 7, 2), 81)}),
        Case("GridSample", {"x": img, "g": _grid((1, 4, 7, 2), 82)}, attrs={"align_corners": 1,
                                                                            "padding_mode": "border"}, label="border"),
        Case("GridSample", {"x": img, "g": _grid((1, 4, 7, 2), 83)}, attrs={"padding_mode": "reflection"},
             label="reflection"),
        Case("GridSample", {"x": img, "g": _grid((1, 4, 7, 2), 84)}, attrs={"padding_mode": "reflection",
                                                                            "align_corners": 1},
             label="reflection-align"),
        Case("GridSample", {"x": img, "g": _grid((1, 4, 7, 2), 85)}, attrs={"mode": "nearest"}, label="nearest"),
        Case("RoiAlign", {"x": _f((1, 3, 8, 10), 86), "rois": rois}, {"bi": _i64(0, 0, 0)},
             {"output_height": 3, "output_width": 2, "sampling_ratio": 2, "spatial_scale": 1.5}),
        Case("RoiAlign", {"x": _f((1, 3, 8, 10), 86), "rois": rois}, {"bi": _i64(0, 0, 0)},
             {"output_height": 2, "output_width": 3, "sampling_ratio": 1,
              "coordinate_transformation_mode": "output_half_pixel"}, label="output-half-pixel"),
        Case("NonMaxSuppression", {"b": _nms_boxes(), "s": _rng(72).uniform(0, 1, (2, 2, 12)).astype(np.float32)},
             {"m": _i64(4), "iou": np.float32([0.3]), "st": np.float32([0.2])}),
        Case("NonMaxSuppression", {"b": np.concatenate(  # center_point_box=1: [x, y, w, h]
            [_rng(73).uniform(0, 10, (2, 12, 2)), _rng(74).uniform(1, 5, (2, 12, 2))], -1).astype(np.float32),
            "s": _rng(75).uniform(0, 1, (2, 1, 12)).astype(np.float32)},
             {"m": _i64(20), "iou": np.float32([0.4])}, {"center_point_box": 1}, label="center-no-threshold"),
    ]


def _recurrent_cases():
    seq, batch, inp, hid = 5, 2, 3, 4
    x = _f((seq, batch, inp), 90)
    lstm = {"W": _f((2, 4 * hid, inp), 91, 0.5), "R": _f((2, 4 * hid, hid), 92, 0.5), "B": _f((2, 8 * hid), 93, 0.3),
            "lens": np.full(batch, seq, np.int32), "h0": _f((2, batch, hid), 94), "c0": _f((2, batch, hid), 95),
            "P": _f((2, 3 * hid), 96, 0.3)}
    gru = {"W": _f((1, 3 * hid, inp), 97, 0.5), "R": _f((1, 3 * hid, hid), 98, 0.5), "B": _f((1, 6 * hid), 99, 0.3)}
    gru2 = {k: np.concatenate([v, _f(v.shape, 100 + i, 0.5)]) for i, (k, v) in enumerate(gru.items())}
    return [
        Case("LSTM", {"x": x}, lstm, {"hidden_size": hid, "direction": "bidirectional"}, outputs=3),
        Case("LSTM", {"x": x}, {k: lstm[k][:1] for k in ("W", "R", "B")}, {"hidden_size": hid}, outputs=2,
             label="forward-no-state"),
        Case("GRU", {"x": x}, gru, {"hidden_size": hid}, outputs=2),
        Case("GRU", {"x": x, "h0": _f((2, batch, hid), 104)}, {**gru2, "lens": np.full(batch, seq, np.int32)},
             {"hidden_size": hid, "direction": "bidirectional", "linear_before_reset": 1}, outputs=2,
             label="bidirectional-lbr"),
        Case("GRU", {"x": x}, gru, {"hidden_size": hid, "direction": "reverse"}, outputs=2, label="reverse"),
    ]


#: Where an op's inputs go: graph inputs and initializers interleave in ONNX input order.
INPUT_ORDER = {
    "Clip": ["x", "lo", "hi"], "Where": ["c", "x", "y"], "Pad": ["x", "pads", "v"],
    "Resize": ["x", "roi", "scales", "sizes"], "RoiAlign": ["x", "rois", "bi"],
    "NonMaxSuppression": ["b", "s", "m", "iou", "st"], "ScatterND": ["x", "idx", "u"],
    "OneHot": ["i", "depth", "values"], "LSTM": ["x", "W", "R", "B", "lens", "h0", "c0", "P"],
    "GRU": ["x", "W", "R", "B", "lens", "h0"], "Range": ["start", "limit", "delta"],
}

CASES = (_unary_cases() + _binary_cases() + _reduce_cases() + _nn_cases() + _tensor_cases()
         + _indexing_cases() + _vision_cases() + _recurrent_cases())


def _graph_model(case: Case, nodes, inputs: dict, outs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "single",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        initializer=[onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in case.consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)],
                              ir_version=8 if case.opset > 9 else 4)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _model(case: Case) -> tuple[onnx.ModelProto, dict]:
    """The single-op model (output types and shapes by ONNX shape inference) and its feeds."""
    names = INPUT_ORDER.get(case.op, list(case.inputs) + list(case.consts))
    names = [n if n in case.inputs or n in case.consts else "" for n in names]
    while names and names[-1] == "":
        names.pop()
    outs = [f"y{i}" for i in range(case.outputs)]
    node = helper.make_node(case.op, names, outs, name=f"the_{case.op}", **case.attrs)
    feeds = dict(case.inputs)
    if not case.then_add:
        return _graph_model(case, [node], feeds, outs), feeds
    result = _reference(_graph_model(case, [node], feeds, outs), feeds)["y0"]
    feeds["z"] = (_f(result.shape, 99) * 4).astype(result.dtype)
    node.output[0] = "r"
    return _graph_model(case, [node, helper.make_node("Add", ["r", "z"], ["y0"], name="then_add")], feeds,
                        outs), feeds


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _case_id(case: Case) -> str:
    return f"{case.op}-{case.label}" if case.label else case.op


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_op_matches_onnxruntime_and_reexports_identically(tmp_path, case):
    model, feeds = _model(case)
    want = _reference(model, feeds)
    options = ExportOptions(name="op")
    artifact = TARGET.export(model, tmp_path / "a", "cpu", options)
    assert artifact.meta["onnx_ops"][case.op] == 1
    got = TARGET.run(artifact, feeds)
    assert list(got) == list(want)
    for name, ref in want.items():
        assert got[name].dtype == ref.dtype, name
        assert got[name].shape == ref.shape, name
        if ref.dtype.kind == "f":
            err = float(np.abs(got[name] - ref).max()) if ref.size else 0.0
            assert err <= FP32_ATOL, f"{name}: max abs error {err}"
        else:
            np.testing.assert_array_equal(got[name], ref)
    TARGET.export(model, tmp_path / "b", "cpu", options)
    assert _files(tmp_path / "a" / "op.mlpackage") == _files(tmp_path / "b" / "op.mlpackage")


def test_matrix_ops_are_mapped_or_listed_with_a_reason():
    matrix = load_matrix()
    claimed = {op for hw in matrix.hardware("coreml") for op in matrix.ops("coreml")
               if matrix.op_status("coreml", hw, op) in ("supported", "unverified")}
    mapped = set(supported_onnx_ops())
    listed = set(NOT_MAPPED) | set(NEVER_EXPORTED)
    assert claimed == (mapped & claimed) | listed, (
        f"unmapped and unlisted: {sorted(claimed - mapped - listed)}; "
        f"listed but not in the matrix: {sorted(listed - claimed)}")
    assert not mapped & set(NOT_MAPPED), f"mapped now, drop from NOT_MAPPED: {sorted(mapped & set(NOT_MAPPED))}"
    assert all(NOT_MAPPED.values()) and all(NEVER_EXPORTED.values())


def test_every_matrix_op_has_a_numeric_case():
    """Each mapped matrix op is exercised by at least one case above."""
    matrix = load_matrix()
    claimed = {op for hw in matrix.hardware("coreml") for op in matrix.ops("coreml")
               if matrix.op_status("coreml", hw, op) in ("supported", "unverified")}
    covered = {case.op for case in CASES}
    assert sorted(claimed - set(NOT_MAPPED) - set(NEVER_EXPORTED) - covered) == []


@pytest.mark.skipif(sys.platform == "darwin", reason="the numpy executor is the Linux runtime")
def test_runtime_is_the_numpy_executor_of_the_saved_program(tmp_path):
    case = next(c for c in CASES if c.op == "LSTM")
    model, feeds = _model(case)
    artifact = TARGET.export(model, tmp_path, "cpu")
    TARGET.run(artifact, feeds)
    assert artifact.runtime == "mil-numpy"


REFUSED = [
    # (case, message): mapped ops whose unmappable variants must fail with one clear line
    (Case("RoiAlign", {"x": _f((2, 3, 8, 10), 86), "rois": np.float32([[0, 0, 4, 4]])}, {"bi": _i64(1)},
          {"sampling_ratio": 2}), "only batch 1"),
    (Case("RoiAlign", {"x": _f((1, 3, 8, 10), 86), "rois": np.float32([[0, 0, 4, 4]])}, {"bi": _i64(0)}),
     "sampling_ratio > 0"),
    (Case("LRN", {"x": _f((1, 4, 3, 3), 1)}, attrs={"size": 2}), "even size"),
    (Case("GridSample", {"x": _f((1, 2, 4, 4), 1), "g": _grid((1, 2, 2, 2), 2)}, attrs={"mode": "bicubic"}),
     "no resample equivalent"),
    (Case("Resize", {"x": _f((1, 2, 4, 4), 1)}, {"roi": np.zeros(0, np.float32), "scales": np.float32([1, 1, 1.3, 1.3])},
          {"mode": "linear"}), "whole output sizes"),
    (Case("Unsqueeze", {"x": _f(X4, 1)}, {"axes": _i64(0, -1)}), "rank <= 5"),
    (Case("GRU", {"x": _f((2, 1, 3), 1)}, {"W": _f((1, 6, 3), 2), "R": _f((1, 6, 2), 3)},
          {"hidden_size": 2, "activations": ["Relu", "Tanh"]}), "only the defaults"),
]


@pytest.mark.parametrize("case,message", REFUSED, ids=[f"{c.op}-{m}" for c, m in REFUSED])
def test_unmappable_variants_are_unsupported_and_write_nothing(tmp_path, case, message):
    from converter.errors import Unsupported

    model, _ = _model(case)
    with pytest.raises(Unsupported, match=message) as info:
        TARGET.export(model, tmp_path / "out", "cpu")
    assert "\n" not in str(info.value)
    assert not list(tmp_path.rglob("*.mlpackage"))

"""Every ONNX op that op_support_matrix.yaml marks supported/unverified for TNN on at least one
device: a seeded single-op (or minimal) model, exported with the TNN target and run back through
the round-trip reader on onnxruntime, must match onnxruntime on the original (max abs error
<= 1e-5; integer and boolean results exactly).

And in TNN's own runtime (``tnn_run`` from ../shared/runtimes, devices X86 and NAIVE): every case
whose op the matrix says that device supports runs there, all cases of a device in one
invocation (``rank_runtimes.prove_in_runtime``), against onnxruntime.  ``NOT_PROVABLE`` lists the
few the runner cannot feed; docs/targets.md states how many matrix ops each device proves, and
``test_targets_doc_states_the_proved_op_counts`` asserts the numbers.

The layers added for the matrix (layers_extra.py) also get their raw .tnnproto fields checked
against the order the cited Tencent/TNN (f0cb081) ``layer_interpreter/*.cc`` parser reads them.
Ops the exporter refuses are listed in ``UNMAPPED`` with the reason from TNN's source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.errors import Unsupported
from converter.matrix import load_matrix
from converter.targets.tnn import TARGET
from rank_runtimes import TNN_RUN, need, prove_in_runtime, runtime_mismatch, tnn_runtime
from test_tnn_helpers import Bytes, layer_params, layer_tokens

RNG = np.random.default_rng(11)
F = "%.9g"


@dataclass
class Case:
    op: str
    model: onnx.ModelProto
    feeds: dict
    #: expected [(TNN layer type, params text or None = not checked here)]
    layers: list = field(default_factory=list)
    source: str = ""


def _w(*shape, low=None, high=None):
    if low is not None:
        return RNG.uniform(low, high, shape).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def model_of(nodes, inputs: dict, inits: dict | None = None, outputs=("y",), opset: int = 17) -> onnx.ModelProto:
    """``inputs``: name -> array (its dtype and shape declare the graph input)."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.value_info[:]
    return model


def one(op, inputs: dict, attrs=None, inits=None, order=None, layers=(), source="", n_out=1, opset=17) -> Case:
    """A single ``op`` node; ``inputs`` are the feeds (name -> array), ``inits`` constants."""
    outs = [f"y{i}" if n_out > 1 else "y" for i in range(n_out)]
    node = helper.make_node(op, order or [*inputs, *(inits or {})], outs, name=f"{op.lower()}_node", **(attrs or {}))
    return Case(op, model_of([node], inputs, inits, outs, opset), inputs, list(layers), source)


def x(*shape, low=None, high=None):
    return _w(*shape, low=low, high=high)


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731
SCALAR = lambda v, t=np.float32: np.array(v, t)  # noqa: E731

_UNARY = {"Abs": "Abs", "Ceil": "Ceil", "Cos": "Cos", "Exp": "Exp", "Floor": "Floor", "Neg": "Neg", "Relu": "ReLU",
          "Sigmoid": "Sigmoid", "Sign": "Sign", "Sin": "Sin", "Softplus": "Softplus", "Softsign": "Softsign",
          "Tanh": "Tanh", "Erf": "Erf", "Atan": "Atan"}
_RANGED = {"Acos": (-0.95, 0.95), "Asin": (-0.95, 0.95), "Tan": (-1.2, 1.2), "Log": (0.1, 4.0), "Sqrt": (0.0, 4.0),
           "Reciprocal": (0.5, 3.0)}
_REDUCE = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
           "ReduceProd", "ReduceSum", "ReduceSumSquare")


def _cases() -> list[Case]:
    c: list[Case] = []
    c += [one(op, {"x": x(2, 3, 5)}, layers=[(t, "")]) for op, t in _UNARY.items()]
    c += [one(op, {"x": x(2, 3, 5, low=lo, high=hi)}) for op, (lo, hi) in _RANGED.items()]
    c += [one("Elu", {"x": x(2, 7)}, dict(alpha=0.4)), one("Selu", {"x": x(2, 7)}),
          one("LeakyRelu", {"x": x(1, 3, 4, 5)}, dict(alpha=0.2)),
          one("PRelu", {"x": x(1, 3, 4, 5)}, inits={"s": _w(3, 1, 1)}),
          one("HardSigmoid", {"x": x(2, 7)}, dict(alpha=0.3, beta=0.4)), one("HardSwish", {"x": x(2, 7) * 4}),
          one("Clip", {"x": x(2, 7)}, inits={"lo": SCALAR(-0.3), "hi": SCALAR(0.7)}),
          one("Pow", {"x": x(2, 7, low=0.2, high=2.0)}, inits={"e": SCALAR(1.5)})]
    # broadcasting binaries: lower-rank constant, blob + blob with 1-dims
    c += [one(op, {"x": x(2, 3, 4, 5)}, inits={"k": _w(4, 1)}) for op in ("Add", "Sub", "Mul", "Max", "Min")]
    c += [one("Div", {"x": x(2, 3, 4, 5), "z": x(1, 3, 1, 5, low=0.5, high=2.0)})]
    c += [one("MatMul", {"a": x(2, 3, 4)}, inits={"w": _w(4, 6)}),
          one("Gemm", {"a": x(3, 5)}, dict(transB=1, alpha=0.5, beta=2.0), inits={"w": _w(4, 5), "c": _w(4)}),
          one("Conv", {"x": x(1, 4, 9, 11)}, dict(kernel_shape=[3, 5], strides=[2, 1], pads=[1, 2, 1, 2], group=2),
              inits={"w": _w(6, 2, 3, 5), "b": _w(6)}),
          one("ConvTranspose", {"x": x(1, 4, 5, 6)}, dict(kernel_shape=[3, 4], strides=[2, 3], pads=[1, 1, 1, 1]),
              inits={"w": _w(4, 3, 3, 4)}),
          one("AveragePool", {"x": x(1, 2, 9, 10)}, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 0])),
          one("MaxPool", {"x": x(1, 2, 9, 10)}, dict(kernel_shape=[2, 3], strides=[1, 2])),
          one("GlobalAveragePool", {"x": x(1, 3, 5, 7)}), one("GlobalMaxPool", {"x": x(1, 3, 5, 7)}),
          one("BatchNormalization", {"x": x(1, 3, 4, 5)},
              inits={"g": _w(3), "b": _w(3), "m": _w(3), "v": _w(3, low=0.5, high=2.0)}),
          one("InstanceNormalization", {"x": x(1, 3, 4, 5)}, inits={"g": _w(3), "b": _w(3)}),
          one("LayerNormalization", {"x": x(2, 3, 8)}, dict(axis=-1), inits={"g": _w(8), "b": _w(8)}),
          one("Softmax", {"x": x(2, 3, 5)}, dict(axis=-2)),
          one("ArgMax", {"x": x(2, 5, 3)}, dict(axis=-2, keepdims=0)), one("ArgMin", {"x": x(2, 5, 3)}, dict(axis=2)),
          one("Concat", {"x": x(1, 2, 3)}, dict(axis=-2), inits={"k": _w(1, 4, 3)}),
          one("Flatten", {"x": x(2, 3, 4)}, dict(axis=-1)),
          one("Gather", {"x": x(4, 5, 6)}, dict(axis=-2), inits={"i": I64(0, -1, 3)}),
          one("Expand", {"x": x(3, 1)}, inits={"s": I64(2, 3, 4)}),
          one("Pad", {"x": x(1, 2, 5, 6)}, dict(mode="reflect"), inits={"p": I64(0, 0, 1, 2, 0, 0, 3, 1)}),
          one("Pad", {"x": x(1, 2, 5, 6)}, dict(mode="constant"), inits={"p": I64(0, 1, 1, 2, 0, 0, 3, 1), "v": SCALAR(0.5)}),
          one("Reshape", {"x": x(2, 3, 4)}, inits={"s": I64(0, -1, 2)}),
          one("Resize", {"x": x(1, 2, 3, 4)}, dict(mode="linear", coordinate_transformation_mode="align_corners"),
              inits={"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 1.5], np.float32)}),
          one("Slice", {"x": x(4, 10)}, inits={"st": I64(1, -8), "en": I64(100, -1), "ax": I64(0, -1), "sp": I64(2, 3)}),
          one("Split", {"x": x(2, 7)}, dict(axis=-1), inits={"sp": I64(3, 4)}, n_out=2),
          one("Squeeze", {"x": x(1, 3, 1, 2)}, inits={"a": I64(-2)}),
          one("Unsqueeze", {"x": x(3, 2)}, inits={"a": I64(-1, 0)}),
          one("Tile", {"x": x(2, 3)}, inits={"r": I64(2, 3)}),
          one("Transpose", {"x": x(2, 3, 4, 5)}, dict(perm=[0, 2, 3, 1]))]
    c += [one(op, {"x": x(2, 3, 4, 5, low=0.2, high=1.5)}, dict(axes=[-1, 1], keepdims=0))
          for op in _REDUCE if op != "ReduceSum"]
    c += [one("ReduceSum", {"x": x(2, 3, 4)}, inits={"axes": I64(-1)})]

    # -- graph plumbing -----------------------------------------------------------------------
    c.append(Case("Identity", model_of([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                        helper.make_node("Identity", ["r"], ["y"], name="identity")],
                                       {"x": x(2, 3)}), {"x": x(2, 3)}, [("ReLU", "")], "no layer (alias)"))
    c.append(Case("Constant", model_of([helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(_w(3), "k")),
                                        helper.make_node("Add", ["x", "k"], ["y"], name="add")],
                                       {"x": x(2, 3)}), {"x": x(2, 3)}, [("Add", "1")], "no layer (constant operand)"))

    # -- layers_extra.py: field order checked ----------------------------------------------------
    c.append(one("Cast", {"x": x(2, 3, 4) * 5}, dict(to=TensorProto.INT32), layers=[("Cast", "3")],
                 source="cast_layer_interpreter.cc (to = TNN DataType, 3 int32)"))
    c.append(one("Cast", {"x": RNG.integers(-9, 9, (2, 5)).astype(np.int64)}, dict(to=TensorProto.FLOAT),
                 layers=[("Cast", "0")], source="cast_layer_interpreter.cc"))
    c.append(one("ConstantOfShape", {"s": I64(2, 3, 4)}, dict(value=numpy_helper.from_array(np.array([2.5], np.float32))),
                 layers=[("ConstantOfShape", "")], source="constantofshape_layer_interpreter.cc (no params; Raw value)"))
    c.append(one("DepthToSpace", {"x": x(1, 12, 2, 3)}, dict(blocksize=2, mode="CRD"), layers=[("Reorg", "2 1 0 1")],
                 source="reorg_layer_interpreter.cc (stride forward run_with_output_dims mode)"))
    c.append(one("DepthToSpace", {"x": x(2, 18, 2, 3)}, dict(blocksize=3), layers=[("Reorg", "3 1 0 0")],
                 source="reorg_layer_interpreter.cc (DCR = mode 0)"))
    c.append(one("SpaceToDepth", {"x": x(1, 3, 4, 6)}, dict(blocksize=2), layers=[("Reorg", "2 0 0 0")],
                 source="reorg_layer_interpreter.cc (forward 0)"))
    eq_a = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)
    c.append(one("Equal", {"a": eq_a}, inits={"k": np.array([0, 1, 2, 1], np.float32)},
                 layers=[("Equal", "")], source="no interpreter: no params (equal_layer.cc)"))
    cond = RNG.integers(0, 2, (2, 3, 4)).astype(bool)
    c.append(one("Where", {"c": cond, "a": x(2, 3, 4)}, inits={"b": _w(4)}, order=["c", "a", "b"],
                 layers=[("Where", "")], source="no interpreter; inputs X, Y, condition (where_layer.cc)"))
    c.append(one("GatherND", {"x": x(3, 4, 5)}, inits={"i": np.array([[0, -1], [2, 1], [1, 3]], np.int64)},
                 layers=[("GatherND", "0")], source="gathernd_layer_interpreter.cc (batch_dims)"))
    c.append(one("ScatterND", {"x": x(4, 3, 2), "u": x(2, 3, 2)}, inits={"i": np.array([[3], [-3]], np.int64)},
                 order=["x", "i", "u"], layers=[("ScatterND", "")], source="scatter_nd_layer_interpreter.cc (no params)"))
    c.append(one("LRN", {"x": x(1, 6, 3, 4)}, dict(size=3, alpha=0.5, beta=0.6, bias=1.5),
                 layers=[("LRN", "0.5 0.600000024 1.5 3")], source="lrn_layer_interpreter.cc (alpha beta bias size)"))
    c.append(one("Range", {"s": SCALAR(0.5), "l": SCALAR(4.0), "d": SCALAR(0.75)}, layers=[("Range", "")],
                 source="range_layer_interpreter.cc (no params)"))
    c.append(one("Range", {"s": SCALAR(-3, np.int64), "l": SCALAR(9, np.int64), "d": SCALAR(3, np.int64)},
                 layers=[("Range", "")], source="range_layer_interpreter.cc"))
    c.append(one("Shape", {"x": x(2, 3, 5)}, layers=[("Shape", "")], source="shape_layer_interpreter.cc (no params)"))
    c.append(one("Size", {"x": x(2, 3, 5)}, layers=[("Size", "")], source="size_layer_interpreter.cc (no params)"))
    nz = x(3, 4)
    nz[nz < 0.3] = 0.0
    c.append(one("NonZero", {"x": nz}, layers=[("NonZero", "")], source="no interpreter: no params"))
    rois = np.array([[0.5, 1.0, 6.0, 5.5], [2.0, 0.0, 7.5, 7.0], [1.0, 1.5, 3.0, 2.5]], np.float32)
    c.append(one("RoiAlign", {"x": x(2, 3, 8, 9), "r": rois}, inits={"b": I64(0, 1, 1)},
                 attrs=dict(output_height=3, output_width=2, sampling_ratio=2, spatial_scale=0.75,
                            coordinate_transformation_mode="output_half_pixel"),
                 layers=[("RoiAlign", "1 3 2 2 0.75")],
                 source="roialign_layer_interpreter.cc (mode out_h out_w sampling_ratio spatial_scale)"))
    c.append(one("GridSample", {"x": x(1, 2, 5, 7), "g": x(1, 3, 4, 2, low=-1.1, high=1.1)},
                 layers=[("GridSample", "2 0 0")], source="gridsample_layer_interpreter.cc (mode pad_type align_corners)"))
    c.append(one("Einsum", {"a": x(2, 3, 4), "b": x(2, 4, 5)}, dict(equation="bij, bjk -> bik"),
                 layers=[("Einsum", "bij;bjk->bik")], source="einsum_layer_interpreter.cc (one token, ';' between operands)"))
    c.append(one("BitShift", {"x": RNG.integers(0, 2**31, (2, 5)).astype(np.uint32)}, dict(direction="RIGHT"),
                 inits={"n": np.array([3], np.uint32)}, layers=[("BitShift", "0 3")],
                 source="bitshift_layer_interpreter.cc (direction bits)"))
    c.append(one("Upsample", {"x": x(1, 2, 3, 4)}, dict(mode="nearest"), inits={"s": np.array([1, 1, 2, 3], np.float32)},
                 layers=[("Upsample", "1 2 3 0 6 12")], source="upsample_layer_interpreter.cc", opset=9))
    return c


CASES = _cases()

#: Ops the exporter refuses that the matrix marks unsupported on every TNN device, with TNN's reason.
REFUSED = {
    "OneHot": "onehot_layer.cc FillLayerParamWithConstantResource reads input_blobs_[1] (depth, int32) "
              "a second time as the float values blob and fails, so a OneHot with a constant depth cannot "
              "initialize; negative/out-of-range indices are not wrapped/ignored (cpu_onehot_layer_acc.cc)",
}

#: Ops the matrix lists for TNN that the exporter refuses, with TNN's reason.
UNMAPPED = {
    "LSTM": "LSTMONNX needs its W/R/B packing (lstm_layer_interpreter.cc / onnx_converter_lstm.cc) and "
            "sequence semantics not mapped yet",
}


#: Ops the exporter maps that TNN's own runtime refuses on every device we can run (the matrix
#: marks them unsupported everywhere, with the measurement in its notes).
RUNTIME_REFUSED = {
    "ConstantOfShape": "naive crashes on a runtime shape blob; x86 has no kernel",
    "Range": "sized before its inputs hold values: an empty output on naive; x86 InferOutputShape fails",
    "NonZero": "naive crashes (data-dependent output size); x86 has no kernel",
}

#: (op, device) pairs the matrix supports that ``tnn_run`` cannot feed, with why.
NOT_PROVABLE = {
    ("BitShift", "naive"): "uint32 input: tnn_run reads every input as float32 (exact only below 2^24) and "
                           "converts to int32 blobs only",
}

#: How many of the matrix's TNN ops each device proves in TNN's runtime (docs/targets.md states them).
PROVED = {"x86": 74, "naive": 82}


def _matrix_ops() -> set[str]:
    m = load_matrix()
    return {op for op in m.data["frameworks"]["tnn"]["ops"]
            if any(m.op_status("tnn", hw, op) in ("supported", "unverified") for hw in m.hardware("tnn"))}


def test_every_matrix_op_has_a_round_trip_case_or_a_listed_reason():
    covered = {case.op for case in CASES}
    assert covered.isdisjoint(UNMAPPED) and covered.isdisjoint(REFUSED)
    m = load_matrix()
    # what TNN's runtime refuses on every device we can run is claimed on none of them (Apple's
    # NPU has a CoreML converter for ConstantOfShape, tests/test_kernel_registrations.py)
    assert set(RUNTIME_REFUSED) <= covered
    assert all(m.op_status("tnn", hw, op) == "unsupported" for op in RUNTIME_REFUSED for hw in ("arm", "x86", "naive"))
    claimed = _matrix_ops() - set(RUNTIME_REFUSED)
    assert claimed == (covered - set(RUNTIME_REFUSED)) | set(UNMAPPED), \
        sorted(claimed ^ ((covered - set(RUNTIME_REFUSED)) | set(UNMAPPED)))
    assert all(m.op_status("tnn", hw, op) == "unsupported" for op in REFUSED for hw in m.hardware("tnn"))


def _compare(got: np.ndarray, ref: np.ndarray, op: str) -> None:
    if ref.dtype.kind == "f":
        assert got.shape == ref.shape, op
        assert float(np.max(np.abs(got.astype(np.float64) - ref), initial=0.0)) <= 1e-5, op
    else:  # integer / boolean results: exact (TNN holds ints as int32, booleans as int8)
        assert got.shape == ref.shape, op
        assert np.array_equal(got.astype(np.int64), ref.astype(np.int64)), op


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{i}" for i, c in enumerate(CASES)])
def test_round_trip_matches_onnxruntime(case, tmp_path):
    art = TARGET.export(case.model, tmp_path, "arm")
    again = TARGET.export(case.model, tmp_path / "again", "x86")
    assert [f.read_bytes() for f in again.files] == [f.read_bytes() for f in art.files]
    lines = layer_tokens(art.files[0].read_text())
    if case.layers:
        assert [(t[0], " ".join(layer_params(t))) for t in lines] == case.layers, case.source
    ref = ort.InferenceSession(case.model.SerializeToString()).run(None, case.feeds)
    got = TARGET.run(art, case.feeds)
    for r, out in zip(ref, case.model.graph.output):
        if case.op == "Size":  # size_layer.cc: dims {1} where ONNX has a scalar
            assert got[out.name].shape == (1,) and got[out.name].dtype == np.int32
            got[out.name] = got[out.name].reshape(())
        _compare(got[out.name], r, case.op)


@pytest.mark.parametrize("op", sorted(set(UNMAPPED) | set(REFUSED)))
def test_unmapped_ops_are_refused_with_one_line(op, tmp_path):
    if op == "OneHot":
        model = model_of([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n")], {"i": I64(0, 2, 1)},
                         {"d": I64(4), "v": np.array([0, 1], np.float32)})
    else:
        model = model_of([helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="n", hidden_size=2)],
                         {"x": x(3, 1, 4)}, {"w": _w(1, 8, 4), "r": _w(1, 8, 2)})
    with pytest.raises(Unsupported, match=rf"\({op}\): no TNN layer type") as err:
        TARGET.export(model, tmp_path / "out", "arm")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_every_layer_type_of_layers_extra_has_a_field_order_case():
    import re
    from pathlib import Path

    import converter.targets.tnn as pkg

    text = (Path(pkg.__file__).parent / "layers_extra.py").read_text()
    emitted = set(re.findall(r'ctx\.emit\(\s*"(\w+)"', text))
    checked = {t for case in CASES for t, _ in case.layers if case.source}
    # Unsqueeze (rank alignment) is checked in test_tnn_layers.py.
    assert emitted - {"Unsqueeze"} <= checked, sorted(emitted - checked)


# -- semantics where TNN differs from ONNX -----------------------------------------------------------

def test_equal_lower_rank_blob_gets_a_leading_unsqueeze(tmp_path):
    """DimsVectorUtils::Max aligns dims from the left: a rank-1 blob next to a rank-3 one must be
    unsqueezed to [1, 1, n] first (unsqueeze_layer_interpreter.cc: n axes..)."""
    feeds = {"a": RNG.integers(0, 2, (2, 3, 4)).astype(np.float32), "b": RNG.integers(0, 2, (4,)).astype(np.float32)}
    case = one("Equal", feeds)
    art = TARGET.export(case.model, tmp_path, "arm")
    lines = layer_tokens(art.files[0].read_text())
    assert [(t[0], " ".join(layer_params(t))) for t in lines] == [("Unsqueeze", "2 0 1"), ("Equal", "")]
    got = TARGET.run(art, feeds)["y"]
    assert got.dtype == np.int8  # equal_layer.cc: DATA_TYPE_INT8
    assert np.array_equal(got.astype(bool), feeds["a"] == feeds["b"])


def test_scatter_nd_resource_layout(tmp_path):
    """scatter_nd_layer_interpreter.cc InterpretResource: bool has_indices ; Raw indices (int32,
    negatives resolved) ; bool has_update."""
    case = next(c for c in CASES if c.op == "ScatterND")
    art = TARGET.export(case.model, tmp_path, "arm")
    data = Bytes(art.files[1].read_bytes())
    assert data.u32() == 0xFABC0004 and data.i32() == 1
    assert (data.i32(), data.string(), data.string()) == (305, "ScatterND", "scatternd_node")
    assert data.data[data.pos] == 1
    data.pos += 1
    dtype, dims, payload = data.raw()
    assert (dtype, dims, np.frombuffer(payload, "<i4").tolist()) == (3, [2, 1], [3, 1])
    assert data.data[data.pos] == 0 and data.pos + 1 == len(data.data)


def test_refused_cases_follow_tnn_kernels(tmp_path):
    refused = [
        one("LRN", {"x": x(1, 6, 3, 4)}, dict(size=4)),  # even window one channel short
        one("Cast", {"x": x(2, 3)}, dict(to=TensorProto.BOOL)),  # int8 truncation, not x != 0
        one("GridSample", {"x": x(1, 2, 5, 7), "g": x(1, 3, 4, 2)}, dict(align_corners=1)),
        one("RoiAlign", {"x": x(1, 3, 8, 9), "r": rois_()}, inits={"b": I64(0)}),  # default half_pixel
        one("Upsample", {"x": x(1, 2, 3, 4)}, dict(mode="linear"), inits={"s": np.array([1, 1, 2, 2], np.float32)}, opset=9),
    ]
    for case in refused:
        with pytest.raises(Unsupported, match=rf"node '{case.op.lower()}_node' \({case.op}\)"):
            TARGET.export(case.model, tmp_path / case.op, "arm")
        assert not (tmp_path / case.op).exists()


def rois_():
    return np.array([[0.5, 1.0, 6.0, 5.5]], np.float32)


def test_reader_follows_tnn_where_it_differs_from_onnx(tmp_path):
    """Files TNN would compute differently from ONNX: the reader reproduces TNN, not ONNX.
    int Range counts trunc((limit-start)/delta) (DimsFunctionUtils::Range); an even LRN window
    loses its last channel (cpu_lrn_layer_acc.cc); NonZero counts -0.0 (byte test)."""
    case = one("Range", {"s": SCALAR(0, np.int64), "l": SCALAR(7, np.int64), "d": SCALAR(3, np.int64)})
    art = TARGET.export(case.model, tmp_path / "range", "arm")
    assert TARGET.run(art, case.feeds)["y"].tolist() == [0, 3]  # ONNX: [0, 3, 6]

    feeds = {"x": np.array([[0.0, -0.0, 1.5], [0.0, 2.0, 0.0]], np.float32)}
    art = TARGET.export(one("NonZero", feeds).model, tmp_path / "nz", "arm")
    assert TARGET.run(art, feeds)["y"].tolist() == [[0, 0, 1], [1, 2, 1]]  # ONNX omits the -0.0

    lrn = one("LRN", {"x": x(1, 6, 3, 4)}, dict(size=3, alpha=0.5, beta=0.6, bias=1.5))
    art = TARGET.export(lrn.model, tmp_path / "lrn", "arm")
    text = art.files[0].read_text().replace("1.5 3 ,", "1.5 4 ,")
    art.files[0].write_text(text)
    got = TARGET.run(art, lrn.feeds)["y"]
    v = lrn.feeds["x"].astype(np.float64)
    sq = np.stack([np.sum(v[:, max(0, c - 1):min(6, c + 2)] ** 2, axis=1) for c in range(6)], axis=1)
    expected = v / (1.5 + 0.5 / 4 * sq) ** 0.6
    assert np.max(np.abs(got - expected)) <= 1e-5


# -- the same cases in TNN's own runtime ----------------------------------------------------------------

def _runtime_cases(hw: str) -> list[Case]:
    """The cases whose op (and node constraints) the matrix supports on ``hw``, opset 17."""
    from converter.legalize.check import check_model

    m = load_matrix()
    picked = []
    for case in CASES:
        if (case.op, hw) in NOT_PROVABLE or case.model.opset_import[0].version != 17:
            continue
        if m.op_status("tnn", hw, case.op) != "supported":
            continue
        if check_model(onnx.shape_inference.infer_shapes(case.model), "tnn", hw, m).ok:
            picked.append(case)
    return picked


@pytest.fixture(scope="module")
def proved(tmp_path_factory):
    """{hw: (cases run, failures)} for x86 and naive, one tnn_run invocation each."""
    need(TNN_RUN)
    out = {}
    for hw, device in (("x86", "X86"), ("naive", "NAIVE")):
        cases = _runtime_cases(hw)
        failures = prove_in_runtime([(c.model, c.feeds) for c in cases],
                                    lambda model, path, hw=hw: TARGET.export(model, path, hw),
                                    tnn_runtime(device).run, runtime_mismatch, tmp_path_factory.mktemp(hw))
        out[hw] = (cases, failures)
    return out


@pytest.mark.parametrize("hw", ["x86", "naive"])
def test_matrix_ops_run_in_tnn_runtime(proved, hw):
    cases, failures = proved[hw]
    assert not failures, {f"{cases[i].op}-{i}": why for i, why in failures.items()}
    ops = {c.op for c in cases}
    assert len(ops) == PROVED[hw], (hw, len(ops), sorted(ops))


def test_targets_doc_states_the_proved_op_counts():
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "targets.md").read_text().split())
    assert (f"{PROVED['x86']} of the matrix's TNN ops in TNN's x86 runtime and {PROVED['naive']} in its naive "
            "runtime") in readme

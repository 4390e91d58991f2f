"""Every ONNX op the support matrix marks supported/unverified for MACE on any hardware gets a
small seeded ONNX model, is exported with the MACE target and round-tripped through the reader
against onnxruntime (max abs error <= 1e-5; integer and bool outputs exact).  The few ops the
exporter cannot map are listed in ``UNMAPPED`` with the MACE source that says why.

And in MACE's own runtime (``mace_run`` from ../shared/runtimes, CPU): every case runs there, all
in one invocation (mace_run measures the CPU for about a second at every start), against
onnxruntime; ``HOST_BUILD_LACKS`` lists what this host build of MACE cannot run (kernels
registered for ARM only).  docs/targets.md states the number proved; a test asserts it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.errors import Unsupported
from converter.matrix import load_matrix
from converter.targets.base import ExportOptions
from converter.targets.mace import TARGET
from converter.targets.mace._generated import mace_pb2
from rank_runtimes import MACE_RUN, mace_runtime, need, prove_in_runtime, runtime_mismatch

F, I32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL

#: Ops the exporter refuses, with the reason from MACE's source; the matrix marks them unsupported
#: on every MACE device (test_every_matrix_op_has_a_case_or_a_reason checks that they agree).
UNMAPPED = {
    "Where": "where.cc reads the condition as bool (condition->data<bool>()), but MACE has no bool "
             "tensors: logical Eltwise writes int32 (eltwise.cc:990-992) and input_info is float/int32",
    "OneHot": "one_hot.cc compares float indices with no ONNX negative-index wrap, and MACE's ONNX "
              "converter comments OneHot out; not expressible exactly for runtime indices",
}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _node_model(op, inputs, outputs, inits=(), opset=17, **attrs):
    """``inputs``/``outputs``: [(name, elem_type, shape)]; ``inits``: [(name, array)]."""
    names = [n for n, *_ in inputs] + [n for n, _ in inits]
    node = helper.make_node(op, names, [n for n, *_ in outputs], name="node0", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _unary(op, shape=(1, 3, 4, 5), out=None, **attrs):
    return _node_model(op, [("x", F, list(shape))], [("y", F, list(out or shape))], **attrs)


def _w(*shape, seed=1):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


def _float_feeds(model, seed=0, positive=False, away_from_zero=False):
    feeds = {}
    for i, inp in enumerate(model.graph.input):
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        value = _rng(seed + i).standard_normal(shape).astype(np.float32)
        if positive:
            value = np.abs(value) + 0.1
        if away_from_zero:
            value = np.sign(value) * (np.abs(value) + 0.5)
        feeds[inp.name] = value
    return feeds


def _case(model, feeds=None, **kw):
    return model, feeds if feeds is not None else _float_feeds(model, **kw)


def _cases():
    c = {}
    c["Conv"] = _case(_node_model("Conv", [("x", F, [1, 3, 9, 8])], [("y", F, [1, 4, 5, 8])],
                                  [("w", _w(4, 3, 3, 2)), ("b", _w(4, seed=2))], pads=[1, 1, 1, 0], strides=[2, 1]))
    c["ConvTranspose"] = _case(_node_model(  # grouped (2 groups of 2 in -> 3 out) -> DepthwiseDeconv2d
        "ConvTranspose", [("x", F, [1, 4, 5, 4])], [("y", F, [1, 6, 9, 8])],
        [("w", _w(4, 3, 3, 4)), ("b", _w(6, seed=2))], group=2, strides=[2, 2], pads=[1, 1, 1, 1]))
    c["Gemm"] = _case(_node_model("Gemm", [("x", F, [3, 8])], [("y", F, [3, 5])],
                                  [("w", _w(5, 8)), ("c", _w(5, seed=2))], transB=1, alpha=0.5, beta=2.0))
    c["MatMul"] = _case(_node_model("MatMul", [("a", F, [2, 3, 4])], [("y", F, [2, 3, 6])], [("b", _w(4, 6))]))
    c["BatchNormalization"] = _case(_node_model(
        "BatchNormalization", [("x", F, [1, 3, 4, 5])], [("y", F, [1, 3, 4, 5])],
        [("s", _w(3)), ("bb", _w(3, seed=2)), ("m", _w(3, seed=3)), ("v", np.abs(_w(3, seed=4)) + 0.5)]))
    c["InstanceNormalization"] = _case(_node_model(
        "InstanceNormalization", [("x", F, [2, 3, 4, 5])], [("y", F, [2, 3, 4, 5])],
        [("s", _w(3)), ("bb", _w(3, seed=2))], epsilon=1e-3))
    c["LRN"] = _case(_unary("LRN", (1, 6, 3, 4), size=3, alpha=0.3, beta=0.6, bias=1.5))
    c["LpNormalization"] = _case(_unary("LpNormalization", (2, 3, 7), axis=-1, p=2))
    for op, attrs in [("Relu", {}), ("LeakyRelu", {"alpha": 0.15}), ("Sigmoid", {}), ("Tanh", {}),
                      ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Elu", {"alpha": 0.8}),
                      ("Abs", {}), ("Neg", {}), ("Sign", {})]:
        c[op] = _case(_unary(op, **attrs))
    c["Sign"] = _case(c["Sign"][0], {"x": np.round(_w(1, 3, 4, 5)).astype(np.float32)})  # exact zeros too
    c["PRelu"] = _case(_node_model("PRelu", [("x", F, [1, 3, 4, 5])], [("y", F, [1, 3, 4, 5])],
                                   [("slope", np.abs(_w(3, 1, 1)))]))
    c["Clip"] = _case(_node_model("Clip", [("x", F, [1, 3, 4, 5])], [("y", F, [1, 3, 4, 5])],
                                  [("lo", np.float32(-0.5)), ("hi", np.float32(0.7))]))
    c["Softmax"] = _case(_unary("Softmax", (2, 5, 3), axis=1))
    c["LogSoftmax"] = _case(_unary("LogSoftmax", (2, 3, 6), axis=-1))
    c["Add"] = _case(_node_model("Add", [("a", F, [1, 3, 4, 5])], [("y", F, [1, 3, 4, 5])],
                                 [("b", _w(1, 3, 1, 1))]))
    c["Sub"] = _case(_node_model("Sub", [("a", F, [2, 3, 4]), ("b", F, [1, 3, 1])], [("y", F, [2, 3, 4])]))
    c["Mul"] = _case(_node_model("Mul", [("a", F, [2, 6])], [("y", F, [2, 6])], [("b", np.float32(1.7))]))
    c["Div"] = _case(_node_model("Div", [("a", F, [2, 3, 4]), ("b", F, [2, 3, 4])], [("y", F, [2, 3, 4])]),
                     away_from_zero=True)
    c["Pow"] = _case(_node_model("Pow", [("a", F, [2, 5])], [("y", F, [2, 5])], [("e", np.float32(1.5))]),
                     positive=True)
    c["Sqrt"] = _case(_unary("Sqrt", (2, 5)), positive=True)
    c["Reciprocal"] = _case(_unary("Reciprocal", (2, 5)), away_from_zero=True)
    c["Max"] = _case(_node_model("Max", [("a", F, [1, 3, 4, 5]), ("b", F, [1, 3, 4, 5])], [("y", F, [1, 3, 4, 5])]))
    c["Min"] = _case(_node_model("Min", [("a", F, [2, 4]), ("b", F, [2, 4])], [("y", F, [2, 4])]))
    ints = {"a": _rng(3).integers(0, 3, (2, 6)).astype(np.int32), "b": _rng(4).integers(0, 3, (2, 6)).astype(np.int32)}
    c["Equal"] = _case(_node_model("Equal", [("a", I32, [2, 6]), ("b", I32, [2, 6])], [("y", BOOL, [2, 6])]), ints)
    c["Sum"] = _case(_node_model("Sum", [("a", F, [2, 3, 4]), ("b", F, [2, 3, 4]), ("c", F, [2, 3, 4])],
                                 [("y", F, [2, 3, 4])]))
    c["MaxPool"] = _case(_unary("MaxPool", (1, 2, 7, 6), (1, 2, 3, 5), kernel_shape=[3, 2], strides=[2, 1]))
    c["AveragePool"] = _case(_unary("AveragePool", (1, 2, 7, 6), (1, 2, 4, 3), kernel_shape=[3, 2], strides=[2, 2],
                                    pads=[1, 0, 1, 0]))
    c["GlobalAveragePool"] = _case(_unary("GlobalAveragePool", (1, 3, 4, 5), (1, 3, 1, 1)))
    c["GlobalMaxPool"] = _case(_unary("GlobalMaxPool", (1, 3, 4, 5), (1, 3, 1, 1)))
    c["Flatten"] = _case(_unary("Flatten", (2, 3, 4, 5), (6, 20), axis=2))
    c["Reshape"] = _case(_node_model("Reshape", [("x", F, [2, 3, 4])], [("y", F, [4, 6])], [("s", _i64(4, -1))]))
    c["Transpose"] = _case(_unary("Transpose", (2, 3, 4, 5), (5, 2, 4, 3), perm=[3, 0, 2, 1]))
    c["Squeeze"] = _case(_node_model("Squeeze", [("x", F, [1, 3, 1, 5])], [("y", F, [3, 5])], [("ax", _i64(0, -2))]))
    c["Unsqueeze"] = _case(_node_model("Unsqueeze", [("x", F, [3, 5])], [("y", F, [3, 1, 5, 1])],
                                       [("ax", _i64(1, -1))]))
    c["Concat"] = _case(_node_model("Concat", [("a", F, [1, 2, 3, 4]), ("b", F, [1, 2, 3, 2])], [("y", F, [1, 2, 3, 6])],
                                    axis=-1))
    c["Split"] = _case(_node_model("Split", [("x", F, [1, 6, 3, 4])], [("y0", F, [1, 2, 3, 4]), ("y1", F, [1, 4, 3, 4])],
                                   [("sp", _i64(2, 4))], axis=-3))
    c["Slice"] = _case(_node_model("Slice", [("x", F, [2, 5, 6, 7])], [("y", F, [2, 3, 3, 5])],
                                   [("st", _i64(-1, 0, 100)), ("en", _i64(-100, 6, 1)), ("ax", _i64(1, 2, -1)),
                                    ("sp", _i64(-2, 2, -1))]))
    c["Gather"] = _case(_node_model("Gather", [("x", F, [3, 5, 4])], [("y", F, [3, 2, 2, 4])],
                                    [("idx", np.array([[0, -1], [2, 1]], np.int64))], axis=1))
    c["Tile"] = _case(_node_model("Tile", [("x", F, [2, 3, 2])], [("y", F, [4, 3, 6])], [("r", _i64(2, 1, 3))]))
    c["Pad"] = _case(_node_model("Pad", [("x", F, [1, 2, 4, 5])], [("y", F, [1, 2, 7, 6])],
                                 [("p", _i64(0, 0, 1, 0, 0, 0, 2, 1)), ("v", np.float32(0.5))]))
    c["Resize"] = _case(_node_model("Resize", [("x", F, [1, 2, 3, 4])], [("y", F, [1, 2, 6, 12])],
                                    [("roi", np.zeros(0, np.float32)), ("sc", np.array([1, 1, 2, 3], np.float32))],
                                    mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
    c["Upsample"] = _case(_node_model("Upsample", [("x", F, [1, 2, 3, 4])], [("y", F, [1, 2, 6, 8])],
                                      [("sc", np.array([1, 1, 2, 2], np.float32))], opset=9, mode="nearest"))
    c["DepthToSpace"] = _case(_unary("DepthToSpace", (1, 8, 2, 3), (1, 2, 4, 6), blocksize=2, mode="CRD"))
    c["SpaceToDepth"] = _case(_unary("SpaceToDepth", (1, 2, 4, 6), (1, 8, 2, 3), blocksize=2))
    c["ReduceMean"] = _case(_unary("ReduceMean", (2, 3, 4, 5), (2, 3, 1, 1), axes=[-1, -2], keepdims=1))
    c["ReduceMax"] = _case(_unary("ReduceMax", (2, 3, 4), (2, 4), axes=[1], keepdims=0))
    c["ReduceMin"] = _case(_unary("ReduceMin", (1, 3, 4, 5), (1, 1, 4, 5), axes=[1], keepdims=1))
    c["ReduceProd"] = _case(_unary("ReduceProd", (2, 3, 4), (2, 3), axes=[-1], keepdims=0))
    c["ReduceSum"] = _case(_node_model("ReduceSum", [("x", F, [2, 3, 4])], [("y", F, [3])], [("ax", _i64(0, 2))],
                                       keepdims=0))
    c["ArgMax"] = _case(_node_model("ArgMax", [("x", F, [3, 4, 5])], [("y", I64, [3, 4])], axis=-1, keepdims=0),
                        {"x": np.round(_w(3, 4, 5)).astype(np.float32)})  # ties: first index, as ONNX
    c["ArgMin"] = _case(_node_model("ArgMin", [("x", F, [3, 4])], [("y", I64, [1, 4])], axis=0, keepdims=1,
                                    select_last_index=1), {"x": np.round(_w(3, 4)).astype(np.float32)})
    c["CumSum"] = _case(_node_model("CumSum", [("x", F, [2, 5, 3])], [("y", F, [2, 5, 3])], [("ax", np.int64(-2))],
                                    exclusive=1, reverse=1))
    c["Cast"] = _case(_node_model("Cast", [("x", I64, [2, 5])], [("y", F, [2, 5])], to=F),
                      {"x": _rng(5).integers(-1000, 1000, (2, 5)).astype(np.int64)})
    c["Shape"] = _case(_node_model("Shape", [("x", F, [2, 3, 5])], [("y", I64, [3])]))
    c["ConstantOfShape"] = _case(_constant_of_shape())
    c["Constant"] = _case(_constant_model())
    c["Identity"] = _case(_unary("Identity", (2, 3)))
    c["Dropout"] = _case(_unary("Dropout", (2, 3)))
    return c


def _constant_of_shape():
    """ConstantOfShape on a constant shape, added to a runtime input (Fill feeds an Eltwise)."""
    value = helper.make_tensor("v", F, [1], [2.5])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill", value=value),
             helper.make_node("Add", ["x", "filled"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])], [numpy_helper.from_array(_i64(2, 3), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _constant_model():
    """A Constant node used by an op and also returned as a graph output."""
    const = helper.make_node("Constant", [], ["k"], name="const", value=numpy_helper.from_array(_w(2, 3), "kv"))
    nodes = [const, helper.make_node("Mul", ["x", "k"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3]), helper.make_tensor_value_info("k", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


CASES = _cases()


def _matrix_ops():
    m = load_matrix()
    return sorted(op for op in m.data["frameworks"]["mace"]["ops"]
                  if any(m.op_status("mace", hw, op) != "unsupported" for hw in m.hardware("mace")))


def test_every_matrix_op_has_a_case_or_a_reason():
    ops = set(_matrix_ops())
    assert ops == set(CASES), (sorted(ops - set(CASES)), sorted(set(CASES) - ops))
    assert not ops & set(UNMAPPED)  # what the exporter refuses, the matrix does not claim
    assert not set(CASES) & set(UNMAPPED)
    assert len(UNMAPPED) <= 3


def _export(model, path):
    return TARGET.export(model, path, "cpu", ExportOptions(name="m"))


@pytest.mark.parametrize("op", sorted(CASES))
def test_round_trip_matches_onnxruntime(op, tmp_path):
    model, feeds = CASES[op]
    art = _export(model, tmp_path)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = TARGET.run(art, feeds)
    for info, ref in zip(model.graph.output, want):
        out = got[info.name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype, ref.dtype)
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(out, ref)
        else:
            assert float(np.max(np.abs(out - ref))) <= 1e-5
    # byte-identical on re-export
    again = _export(model, tmp_path / "again")
    assert [f.read_bytes() for f in art.files] == [f.read_bytes() for f in again.files]


@pytest.mark.parametrize("op", sorted(UNMAPPED))
def test_unmapped_ops_are_refused_with_one_line(op, tmp_path):
    if op == "Where":
        model = _node_model("Where", [("c", BOOL, [2, 3]), ("a", F, [2, 3]), ("b", F, [2, 3])], [("y", F, [2, 3])])
    else:
        model = _node_model("OneHot", [("i", I64, [4])], [("y", F, [4, 3])],
                            [("d", np.int64(3)), ("v", np.array([0.0, 1.0], np.float32))])
    with pytest.raises(Unsupported, match=rf"node 'node0' \({op}\)"):
        _export(model, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def _net(tmp_path):
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString((tmp_path / "m.pb").read_bytes())
    return multi.net_def[0]


def test_emitted_op_types(tmp_path):
    """The MACE layer each case lands on (per-layer argument tests citing MACE source: test_mace_ops.py)."""
    expected = {"ConvTranspose": ["DepthwiseDeconv2d"], "Slice": ["StridedSlice"], "Sum": ["AddN"],
                "Equal": ["Eltwise"], "Split": ["Split"], "Resize": ["ResizeNearestNeighbor"],
                "Upsample": ["ResizeNearestNeighbor"], "ArgMax": ["Eltwise", "ArgMax"],
                "ArgMin": ["Eltwise", "Reshape", "ArgMax", "Reshape", "Eltwise"], "ConstantOfShape": ["Identity", "Eltwise"],
                "Constant": ["Identity", "Eltwise"], "Dropout": ["Identity"], "LRN": ["LocalResponseNorm"],
                "InstanceNormalization": ["InstanceNorm"], "LpNormalization": ["LpNorm"], "CumSum": ["Cumsum"]}
    for op, types in expected.items():
        _export(CASES[op][0], tmp_path / op)
        assert [o.type for o in _net(tmp_path / op).op] == types, op


# -- the same cases in MACE's own runtime --------------------------------------------------------------

#: Cases this host (x86) build of MACE cannot run although ARM CPUs do, with the source line.
HOST_BUILD_LACKS = {
    "ConvTranspose": "a grouped ConvTranspose is DepthwiseDeconv2d/GroupDeconv2d, whose CPU delegators are "
                     "registered under mace/ops/arm only (XiaoMi/mace@0fc55a5:mace/ops/arm/base/"
                     "depthwise_deconv_2d_general.cc#L207): 'Delegator not exist' on x86",
}

#: Cases run in an invocation of their own, with why (none now: the ArgMin mapping ends in a
#: Reshape whose output mace_run overwrote when a later op took over its buffer, until the
#: exporter copied such outputs: netdef_writer._copy_aliased_outputs).
ISOLATED: dict[str, str] = {}

#: How many of the matrix's MACE ops mace_run (CPU) proves (docs/targets.md states it).
PROVED = 64


def test_matrix_ops_run_in_mace_runtime(tmp_path):
    need(MACE_RUN)
    ops = [op for op in sorted(CASES) if op not in HOST_BUILD_LACKS and op not in ISOLATED]
    failures = prove_in_runtime([CASES[op] for op in ops], lambda model, path: _export(model, path),
                                mace_runtime().run, runtime_mismatch, tmp_path)
    assert not failures, {ops[i]: why for i, why in failures.items()}
    for op in ISOLATED:
        alone = prove_in_runtime([CASES[op]], lambda model, path: _export(model, path), mace_runtime().run,
                                 runtime_mismatch, tmp_path / op)
        assert not alone, (op, alone)
    proved = set(ops) | set(ISOLATED)
    assert len(proved) == PROVED and proved | set(HOST_BUILD_LACKS) == set(_matrix_ops())


def test_targets_doc_states_the_proved_op_count():
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "targets.md").read_text().split())
    assert f"{PROVED} of the matrix's {len(_matrix_ops())} MACE ops in MACE's CPU runtime" in readme

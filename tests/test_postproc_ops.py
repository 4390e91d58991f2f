"""Every generated op against onnxruntime, on seeded random inputs with broadcasting.

All cases live in one ONNX model (independent branches, one per case) that is moved into
post-processing as a whole; the model's inputs are then the boundary.  onnxruntime runs the
original model; the generated Python and the generated C++ (compiled once) must agree with it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.postproc import SUPPORTED_OPS, split
from test_postproc_harness import build_harness, load_postprocess, max_abs_diff, needs_gxx, run_cpp, run_onnx

TOL = 1e-5
rng = np.random.default_rng(7)
I64_MAX = np.iinfo(np.int64).max


def f32(*shape, low=None, high=None):
    if low is None:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.uniform(low, high, shape).astype(np.float32)


def i64(*shape, low=-9, high=10, nonzero=False):
    value = rng.integers(low, high, shape).astype(np.int64)
    if nonzero:
        value[value == 0] = 3
    return value


# case -> (op, runtime inputs (name suffix -> array), constant inputs (suffix -> array), attrs, input order, n outputs)
# An input order entry "" is an omitted optional input.
CASES = {
    "add": ("Add", {"a": f32(2, 3, 4), "b": f32(3, 1)}, {}, {}, "a b", 1),
    "sub": ("Sub", {"a": f32(2, 1, 4), "b": f32(3, 1)}, {}, {}, "a b", 1),
    "mul": ("Mul", {"a": f32(4), "b": f32(2, 3, 4)}, {}, {}, "a b", 1),
    "mul_const": ("Mul", {"a": f32(2, 3, 4)}, {"k": f32(3, 1)}, {}, "a k", 1),
    "div": ("Div", {"a": f32(2, 3, 4), "b": f32(1, 3, 1, low=0.5, high=2.0)}, {}, {}, "a b", 1),
    "div_int": ("Div", {"a": i64(2, 3, low=-50, high=50), "b": i64(3, nonzero=True)}, {}, {}, "a b", 1),
    "max3": ("Max", {"a": f32(2, 3, 4), "b": f32(4), "c": f32(3, 1)}, {}, {}, "a b c", 1),
    "min": ("Min", {"a": f32(2, 1, 4), "b": f32(3, 4)}, {}, {}, "a b", 1),
    "greater": ("Greater", {"a": f32(2, 3, 4), "b": f32(3, 1)}, {}, {}, "a b", 1),
    "less": ("Less", {"a": f32(4), "b": f32(2, 3, 4)}, {}, {}, "a b", 1),
    "equal": ("Equal", {"a": i64(2, 3, low=0, high=3), "b": i64(3, low=0, high=3)}, {}, {}, "a b", 1),
    "exp": ("Exp", {"x": f32(2, 3, 4)}, {}, {}, "x", 1),
    "log": ("Log", {"x": f32(2, 3, 4, low=0.1, high=5.0)}, {}, {}, "x", 1),
    "sqrt": ("Sqrt", {"x": f32(2, 3, 4, low=0.0, high=5.0)}, {}, {}, "x", 1),
    "neg": ("Neg", {"x": f32(2, 3)}, {}, {}, "x", 1),
    "abs": ("Abs", {"x": f32(2, 3)}, {}, {}, "x", 1),
    "tanh": ("Tanh", {"x": f32(2, 3, 4)}, {}, {}, "x", 1),
    "relu": ("Relu", {"x": f32(2, 3, 4)}, {}, {}, "x", 1),
    "sigmoid": ("Sigmoid", {"x": f32(2, 3, 4, low=-60.0, high=60.0)}, {}, {}, "x", 1),
    "identity": ("Identity", {"x": f32(3)}, {}, {}, "x", 1),
    "softmax": ("Softmax", {"x": f32(2, 3, 4) * 5}, {}, {"axis": 1}, "x", 1),
    "softmax_last": ("Softmax", {"x": f32(2, 3, 5)}, {}, {}, "x", 1),
    "clip": ("Clip", {"x": f32(2, 3, 4)}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}, {}, "x lo hi", 1),
    "clip_max_only": ("Clip", {"x": f32(2, 3, 4)}, {"hi": np.array(0.25, np.float32)}, {}, "x  hi", 1),
    "cast_f2i": ("Cast", {"x": f32(2, 3, 4) * 10}, {}, {"to": TensorProto.INT64}, "x", 1),
    "cast_i2f": ("Cast", {"x": i64(2, 3)}, {}, {"to": TensorProto.FLOAT}, "x", 1),
    "cast_f2bool": ("Cast", {"x": np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]], np.float32)}, {}, {"to": TensorProto.BOOL}, "x", 1),
    "reshape": ("Reshape", {"x": f32(2, 3, 4)}, {"shape": np.array([0, -1], np.int64)}, {}, "x shape", 1),
    "flatten": ("Flatten", {"x": f32(2, 3, 4, 5)}, {}, {"axis": 2}, "x", 1),
    "transpose": ("Transpose", {"x": f32(2, 3, 4)}, {}, {"perm": [2, 0, 1]}, "x", 1),
    "transpose_default": ("Transpose", {"x": f32(2, 3, 4)}, {}, {}, "x", 1),
    "squeeze": ("Squeeze", {"x": f32(2, 1, 4, 1)}, {"axes": np.array([1], np.int64)}, {}, "x axes", 1),
    "squeeze_all": ("Squeeze", {"x": f32(2, 1, 4, 1)}, {}, {}, "x", 1),
    "unsqueeze": ("Unsqueeze", {"x": f32(2, 3)}, {"axes": np.array([0, -1], np.int64)}, {}, "x axes", 1),
    "concat": ("Concat", {"a": f32(2, 1, 4), "b": f32(2, 3, 4), "c": f32(2, 2, 4)}, {}, {"axis": 1}, "a b c", 1),
    "split": ("Split", {"x": f32(2, 3, 4)}, {"sizes": np.array([1, 2], np.int64)}, {"axis": 1}, "x sizes", 2),
    "split_equal": ("Split", {"x": f32(2, 3, 4)}, {}, {"axis": -1}, "x", 2),
    "slice": ("Slice", {"x": f32(5, 4, 6)},
              {"st": np.array([-2, 1], np.int64), "en": np.array([-1000, I64_MAX], np.int64),
               "ax": np.array([2, 0], np.int64), "sp": np.array([-2, 2], np.int64)}, {}, "x st en ax sp", 1),
    "slice_simple": ("Slice", {"x": f32(5, 4)}, {"st": np.array([1], np.int64), "en": np.array([-1], np.int64)},
                     {}, "x st en", 1),
    "gather_const": ("Gather", {"x": f32(2, 3, 4)}, {"idx": np.array([[0, -1], [2, 1]], np.int64)}, {"axis": 1}, "x idx", 1),
    "gather_runtime": ("Gather", {"x": f32(5, 3), "idx": i64(4, low=-5, high=5)}, {}, {}, "x idx", 1),
    "reducemax": ("ReduceMax", {"x": f32(2, 3, 4)}, {}, {"axes": [1]}, "x", 1),
    "reducemin": ("ReduceMin", {"x": f32(2, 3, 4)}, {}, {"axes": [0, 2], "keepdims": 0}, "x", 1),
    "reducesum": ("ReduceSum", {"x": f32(2, 3, 4)}, {"axes": np.array([-1], np.int64)}, {"keepdims": 0}, "x axes", 1),
    "reducesum_all": ("ReduceSum", {"x": f32(2, 3, 4)}, {}, {}, "x", 1),
    "reducemean": ("ReduceMean", {"x": f32(2, 3, 4)}, {}, {"axes": [1, 2]}, "x", 1),
    "argmax": ("ArgMax", {"x": f32(2, 3, 4)}, {}, {"axis": 1, "keepdims": 0}, "x", 1),
    "argmax_last": ("ArgMax", {"x": rng.integers(0, 3, (3, 8)).astype(np.float32)}, {}, {"axis": 1, "select_last_index": 1}, "x", 1),
    "argmin": ("ArgMin", {"x": f32(2, 3, 4)}, {}, {"axis": -1}, "x", 1),
    "topk": ("TopK", {"x": f32(2, 3, 6)}, {"k": np.array([3], np.int64)}, {}, "x k", 2),
    "topk_smallest": ("TopK", {"x": f32(2, 5, 3)}, {"k": np.array([2], np.int64)}, {"axis": 1, "largest": 0}, "x k", 2),
    "where": ("Where", {"c": rng.random((3, 1)) > 0.5, "a": f32(2, 3, 4), "b": f32(4)}, {}, {}, "c a b", 1),
}

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64, np.dtype(bool): TensorProto.BOOL}


def build_model():
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for case, (op, runtime, consts, attrs, order, n_out) in CASES.items():
        for suffix, value in runtime.items():
            name = f"{case}_{suffix}"
            inputs.append(helper.make_tensor_value_info(name, _ELEM[value.dtype], value.shape))
            feeds[name] = value
        for suffix, value in consts.items():
            inits.append(numpy_helper.from_array(value, f"{case}_{suffix}"))
        node_inputs = [f"{case}_{s}" if s else "" for s in order.split(" ")]
        node_outputs = [f"{case}_out{k}" for k in range(n_out)]
        nodes.append(helper.make_node(op, node_inputs, node_outputs, name=case, **attrs))
        outputs += node_outputs
    graph = helper.make_graph(nodes, "ops", inputs, [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    by_name = {v.name: v for v in inferred.graph.value_info}
    inferred.graph.output.extend(by_name[name] for name in outputs)
    del inferred.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(inferred)
    onnx.checker.check_model(inferred)
    return inferred, feeds


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("postproc_ops")
    model, feeds = build_model()
    result = split(model, set(CASES), None, root / "postproc", cpp_namespace="pp_ops")
    expected = run_onnx(model, feeds)
    python = load_postprocess(root / "postproc" / "postprocess.py", "pp_ops").postprocess(feeds)
    return root, model, feeds, result, expected, python


def test_every_op_is_covered():
    covered = {op for op, *_ in CASES.values()}
    assert covered == set(SUPPORTED_OPS)


def test_whole_model_moves(setup):
    _, model, feeds, result, _, _ = setup
    assert sorted(result.cut.moved_nodes) == sorted(CASES)
    assert sorted(result.cut.boundary) == sorted(feeds)
    assert len(result.model.graph.node) == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_python_kernel_matches_onnxruntime(case, setup):
    *_, expected, python = setup
    for k in range(CASES[case][5]):
        name = f"{case}_out{k}"
        err = max_abs_diff(python[name], expected[name])
        assert err <= TOL, (name, err)
        if expected[name].dtype.kind in "iub":
            assert np.array_equal(python[name], expected[name])


@pytest.fixture(scope="module")
def cpp_outputs(setup):
    root, _, feeds, result, _, _ = setup
    exe = build_harness({"ops": (root / "postproc" / "postprocess.hpp", result.manifest)}, root)
    return run_cpp(exe, "ops", result.manifest, feeds, root / "run")


@needs_gxx
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_kernel_matches_onnxruntime(case, setup, cpp_outputs):
    expected = setup[4]
    for k in range(CASES[case][5]):
        name = f"{case}_out{k}"
        err = max_abs_diff(cpp_outputs[name], expected[name])
        assert err <= TOL, (name, err)
        if expected[name].dtype.kind in "iub":
            assert np.array_equal(cpp_outputs[name], expected[name])

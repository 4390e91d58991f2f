"""find_cut: the smallest boundary, and clear refusals."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from converter.postproc import find_cut


def make_model(nodes, outputs, inits=(), inputs=(("x", TensorProto.FLOAT, [1, 4]),)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


W = ("w", np.ones((4, 4), np.float32))


def test_moves_cheap_legal_nodes_when_that_removes_a_boundary_tensor():
    # a -> Relu -> b -> Softmax -> d;  a -> Sigmoid -> c;  Mul(d, c) -> y
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Sigmoid", ["a"], ["c"], name="sigmoid"),
        helper.make_node("Softmax", ["b"], ["d"], name="softmax"),
        helper.make_node("Mul", ["d", "c"], ["y"], name="mul"),
    ], ["y"], [W])
    cut = find_cut(model, {"softmax"})
    assert cut.ok, cut.reason
    assert cut.boundary == ["a"]
    assert cut.moved_nodes == ["relu", "sigmoid", "softmax", "mul"]


def test_does_not_move_more_than_needed_at_equal_boundary():
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Softmax", ["b"], ["y"], name="softmax"),
    ], ["y"], [W])
    cut = find_cut(model, {"softmax"})
    assert (cut.moved_nodes, cut.boundary) == (["softmax"], ["b"])


def test_prefers_fewer_boundary_elements_at_equal_count():
    # Slice shrinks a (4 elements) to s (2): keep the Slice on the device.
    slice_inits = [W, ("st", np.array([0], np.int64)), ("en", np.array([2], np.int64)), ("ax", np.array([1], np.int64))]
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Slice", ["a", "st", "en", "ax"], ["s"], name="slice"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax"),
    ], ["y"], slice_inits)
    cut = find_cut(model, {"softmax"})
    assert (cut.moved_nodes, cut.boundary) == (["softmax"], ["s"])
    # Concat grows a (4 elements) to c (8): move the Concat.
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Concat", ["a", "a"], ["c"], name="concat", axis=1),
        helper.make_node("Softmax", ["c"], ["y"], name="softmax"),
    ], ["y"], [W])
    cut = find_cut(model, {"softmax"})
    assert (cut.moved_nodes, cut.boundary) == (["concat", "softmax"], ["a"])
    # With both branches, a crosses anyway, so moving the Slice too saves the tensor s.
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Slice", ["a", "st", "en", "ax"], ["s"], name="slice"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax"),
        helper.make_node("Concat", ["a", "a"], ["c"], name="concat", axis=1),
        helper.make_node("Softmax", ["c"], ["z"], name="softmax2"),
    ], ["y", "z"], slice_inits)
    cut = find_cut(model, {"softmax", "softmax2"})
    assert (cut.moved_nodes, cut.boundary) == (["slice", "softmax", "concat", "softmax2"], ["a"])


def test_refuses_a_node_that_is_not_trailing():
    model = make_model([
        helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
        helper.make_node("Softmax", ["a"], ["s"], name="softmax"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="matmul_after"),
    ], ["y"], [W])
    cut = find_cut(model, {"softmax"})
    assert not cut.ok
    assert "'softmax' (Softmax) is not trailing" in cut.reason
    assert "'matmul_after' (MatMul)" in cut.reason and "no post-processing kernel for MatMul" in cut.reason


def test_refuses_an_op_without_a_kernel():
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")], ["y"], [W])
    cut = find_cut(model, {"matmul"})
    assert not cut.ok
    assert cut.reason.startswith("cannot move node 'matmul' (MatMul): no post-processing kernel for MatMul")


def test_refuses_a_shape_computed_at_run_time():
    model = make_model([
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"),
    ], ["y"])
    cut = find_cut(model, {"reshape"})
    assert not cut.ok
    assert "'reshape' (Reshape): its shape is computed at run time" in cut.reason


def test_refuses_unknown_dtype_and_unknown_node():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], ["y"],
                       inputs=(("x", TensorProto.FLOAT16, [1, 4]),))
    cut = find_cut(model, {"relu"})
    assert not cut.ok and "dtype float16" in cut.reason
    cut = find_cut(model, {"nope"})
    assert not cut.ok and "no node named 'nope'" in cut.reason


def test_nothing_to_move_passes_outputs_through():
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")], ["y"], [W])
    cut = find_cut(model, set())
    assert cut.ok and cut.moved_nodes == [] and cut.boundary == ["y"] and cut.passthrough == ["y"]

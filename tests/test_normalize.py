"""Normalization: canonical opset, cleanup, stable names, and unchanged outputs for the zoo."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from converter.demo import zoo
from converter.errors import BadInput
from converter.ir.graph import CANONICAL_OPSET, model_opset
from converter.frontend.normalize import NORMALIZE_ATOL, check_equivalent, dynamic_inputs, normalize


def _run(model: onnx.ModelProto, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_normalizes_with_same_outputs(name, zoo_onnx_path):
    raw = onnx.load(zoo_onnx_path(name))
    norm = normalize(raw)
    assert model_opset(norm) == CANONICAL_OPSET
    feeds = zoo.example_inputs(name, seed=3)
    for a, b in zip(_run(raw, feeds), _run(norm, feeds)):
        assert np.max(np.abs(a - b)) <= NORMALIZE_ATOL
    ops = {n.op_type for n in norm.graph.node}
    assert not ops & {"Identity", "Dropout", "Constant"}
    names = [n.name for n in norm.graph.node]
    assert len(set(names)) == len(names) and all(names)
    # Graph interface names are kept.
    assert [o.name for o in norm.graph.output] == list(zoo.output_names(name))
    assert [i.name for i in norm.graph.input] == ["input"]
    # Idempotent and deterministic: byte-identical when normalized again.
    assert normalize(norm).SerializeToString() == norm.SerializeToString()
    assert normalize(onnx.load(zoo_onnx_path(name))).SerializeToString() == norm.SerializeToString()


def test_zoo_node_counts_after_normalization(zoo_model):
    # Exact counts: Constant nodes become initializers, Identity (superres' PReLU slopes) goes.
    counts = {name: len(zoo_model(name).graph.node) for name in zoo.NAMES}
    assert counts == {"mobilenetv2": 28, "resnet": 23, "unet": 17, "superres": 11, "detector": 17,
                      "transformer": 30, "normalized_input": 5}


def _model(nodes, inputs, outputs, inits=(), opset=CANONICAL_OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_identity_and_dropout_removed_even_before_outputs():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Dropout", ["a"], ["b"]),
        helper.make_node("Identity", ["b"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["d"]),
        helper.make_node("Identity", ["d"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    norm = normalize(model)
    assert [n.op_type for n in norm.graph.node] == ["Relu", "Sigmoid"]
    assert norm.graph.output[0].name == "y"
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(norm, {"x": x})[0], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


def test_unused_initializers_dropped_and_constants_folded():
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1, 2, 3])
    unused = helper.make_tensor("unused", TensorProto.FLOAT, [2], [5, 6])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2])
    nodes = [
        helper.make_node("Mul", ["w", "two"], ["w2"]),  # constant subgraph: folded
        helper.make_node("Add", ["x", "w2"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])], [w, unused, two])
    norm = normalize(model)
    assert [n.op_type for n in norm.graph.node] == ["Add"]
    assert len(norm.graph.initializer) == 1
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(norm.graph.initializer[0]), [2, 4, 6])


def test_older_opset_is_converted():
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=1)]  # opset 11 softmax flattens
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], opset=11)
    norm = normalize(model)
    assert model_opset(norm) == CANONICAL_OPSET
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(norm, {"x": x})[0], _run(model, {"x": x})[0], atol=1e-6)


def test_opset_too_new_is_bad_input():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], opset=99)
    with pytest.raises(BadInput, match="opset 99"):
        normalize(model)


def test_cycle_is_bad_input():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Relu", ["a"], ["y"])]
    model = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(BadInput, match="cycle"):
        normalize(model)


def test_input_shapes_fix_dynamic_dims():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = _model(nodes, [_vi("x", ["N", 3])], [_vi("y", ["N", 3])])
    assert dynamic_inputs(normalize(model)) == [
        "input 'x' has a dynamic dimension 'N' at axis 0; fix it with --input-shape x=1x3"]
    fixed = normalize(model, {"x": (4, 3)})
    assert dynamic_inputs(fixed) == []
    dims = [d.dim_value for d in fixed.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [4, 3]
    with pytest.raises(BadInput, match="conflicts"):
        normalize(model, {"x": (4, 5)})
    with pytest.raises(BadInput, match="inputs are: x"):
        normalize(model, {"z": (4, 3)})


def test_check_equivalent_catches_a_changed_model(zoo_model, zoo_onnx_path):
    raw = onnx.load(zoo_onnx_path("resnet"))
    norm = zoo_model("resnet")
    assert check_equivalent(raw, norm) <= NORMALIZE_ATOL
    norm.graph.initializer[0].raw_data = (
        -onnx.numpy_helper.to_array(norm.graph.initializer[0])).astype(np.float32).tobytes()
    with pytest.raises(Exception, match="changed the outputs"):
        check_equivalent(raw, norm)


def test_unsafe_names_are_sanitized_for_the_edge_formats():
    nodes = [helper.make_node("Relu", ["in put:0"], ["out,\"1\""])]
    model = _model(nodes, [_vi("in put:0", [2])], [_vi("out,\"1\"", [2])])
    norm = normalize(model)
    assert norm.graph.input[0].name == "in_put_0"
    assert norm.graph.output[0].name == "out__1_"


@pytest.mark.parametrize("name", ["unet", "resnet", "mobilenetv2", "detector", "transformer"])
def test_skipping_a_fold_with_nothing_to_fold_changes_no_byte(name, zoo_onnx_path, monkeypatch):
    """``_nothing_to_fold`` lets normalization skip graphsurgeon's folding (which copies the whole
    graph first) only where folding would change nothing: the result is the same bytes as with
    folding forced.  mobilenetv2's Constant nodes (Clip bounds) are initializers before the
    fold, so it skips it like unet and resnet; the transformer block folds (shape arithmetic)."""
    import converter.frontend.normalize as normalize_module

    raw = onnx.load(zoo_onnx_path(name))
    answers = []
    real = normalize_module._nothing_to_fold
    monkeypatch.setattr(normalize_module, "_nothing_to_fold", lambda g: answers.append(real(g)) or answers[-1])
    skipped = normalize(raw).SerializeToString()
    monkeypatch.setattr(normalize_module, "_nothing_to_fold", lambda g: False)
    assert normalize(raw).SerializeToString() == skipped
    monkeypatch.setattr(normalize_module, "FOLD_LIMIT_BYTES", -1)  # no Constant node inlined before folding
    assert normalize(raw).SerializeToString() == skipped
    assert answers == ([False] if name == "transformer" else [True])


def test_nothing_to_fold_sees_every_kind_of_folding():
    import onnx_graphsurgeon as gs

    from converter.frontend.normalize import _nothing_to_fold

    def graph(op, const_inputs=False, **attrs):
        x = gs.Variable("x", np.float32, (1, 4))
        w = gs.Constant("w", np.ones((1, 4), np.float32))
        y = gs.Variable("y", np.float32, (1, 4))
        inputs = [w, w] if const_inputs else [x, w]
        return gs.Graph(nodes=[gs.Node(op, inputs=inputs if op != "Constant" else [], outputs=[y], attrs=attrs)],
                        inputs=[x], outputs=[y])

    assert _nothing_to_fold(graph("Add"))
    assert not _nothing_to_fold(graph("Add", const_inputs=True))  # computable now
    for op in ("Constant", "Shape", "Size", "Cast"):
        assert not _nothing_to_fold(graph(op))
    assert not _nothing_to_fold(graph("If", then_branch=gs.Graph(), else_branch=gs.Graph()))

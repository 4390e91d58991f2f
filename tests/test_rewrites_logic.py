"""The predicate rules of converter/legalize/rewrites/logic.py (issue 27): torch's SDPA
decomposition guards every softmax with ``Where(IsNaN(p), 0, p)``.  IsNaN becomes Not(Equal(x, x))
(exact) where the target compares and negates (TFLite, CoreML); without a mask the guard is
dropped where the target has neither (TNN, MACE), and never where an additive mask feeds the
softmax.  Each against onnxruntime on both sides, and in the real runtimes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.legalize.rewrites import REGISTRY, apply_rule
from converter.port import port
from converter.runtimes.onnxruntime import onnx_runner
from rank_runtimes import MACE_RUN, TNN_RUN, need

#: The rules this file runs (test_rewrites_rules.py checks every registered rule is run somewhere).
RULES_TESTED = {"isnan_as_not_equal_self", "softmax_nan_guard_dropped"}


def _model(nodes, inits, shape=(1, 4, 8)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def guarded_attention(masked: bool = False, zero_bias: bool = False) -> onnx.ModelProto:
    """scores = (x W) * 0.5 [+ Where(m, 0, -inf)] [+ zeros], p = Softmax(scores),
    y = Where(IsNaN(p), 0, p)."""
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"])]
    inits = {"w": w, "scale": np.float32(0.5), "zero": np.zeros(1, np.float32)}
    if zero_bias:  # what torch's SDPA decomposition adds when no mask is given (HF's ViT)
        nodes[-1].output[0] = "s1"
        nodes.append(helper.make_node("Add", ["s1", "no_mask"], ["s"]))
        inits["no_mask"] = np.zeros((1, 4, 8), np.float32)
    if masked:
        nodes += [helper.make_node("Where", ["m", "zero", "minus_inf"], ["bias"]),
                  helper.make_node("Add", ["s", "bias"], ["scores"])]
        inits.update(m=np.array([True] * 6 + [False] * 2), minus_inf=np.array([-np.inf], np.float32))
    nodes += [helper.make_node("Softmax", ["scores" if masked else "s"], ["p"], axis=-1),
              helper.make_node("IsNaN", ["p"], ["n"]), helper.make_node("Where", ["n", "zero", "p"], ["y"])]
    return _model(nodes, inits)


def test_isnan_rule_is_exact_on_nan_and_infinities():
    from converter.legalize.rewrites import apply_rule

    graph = helper.make_graph([helper.make_node("IsNaN", ["x"], ["nan"]),
                               helper.make_node("Where", ["nan", "zero", "x"], ["y"])], "isnan",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rewritten = apply_rule(model, "isnan_as_not_equal_self")
    assert sorted(n.op_type for n in rewritten.graph.node) == ["Equal", "Not", "Where"]
    x = np.array([[np.nan, 1.0, -np.inf, np.inf], [0.0, -0.0, np.nan, 3e38]], np.float32)
    want, got = _onnxruntime(model, {"x": x})["y"], _onnxruntime(rewritten, {"x": x})["y"]
    assert np.array_equal(want, got) and not np.isnan(got).any()


def _onnxruntime(model, feeds):
    return onnx_runner(model)(feeds)


def test_guard_is_dropped_only_without_a_mask():
    rule = REGISTRY["softmax_nan_guard_dropped"]
    from converter.ir.graph import to_graph

    plain = to_graph(guarded_attention())
    guard = next(n for n in plain.nodes if n.op == "Where")
    assert rule.when(guard, plain) is None
    masked = to_graph(guarded_attention(masked=True))
    guard = [n for n in masked.nodes if n.op == "Where"][-1]
    assert "additive mask" in rule.when(guard, masked)
    rewritten = apply_rule(guarded_attention(), "softmax_nan_guard_dropped")
    assert sorted(n.op_type for n in rewritten.graph.node) == ["Identity", "MatMul", "Mul", "Softmax"]
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32) * 10
    assert np.array_equal(_onnxruntime(guarded_attention(), {"x": x})["y"], _onnxruntime(rewritten, {"x": x})["y"])


def test_normalize_drops_an_add_of_zeros_that_does_not_broadcast():
    from converter.frontend.normalize import normalize

    ops = [n.op_type for n in normalize(guarded_attention(zero_bias=True)).graph.node]
    assert ops == ["MatMul", "Mul", "Softmax", "IsNaN", "Where"]
    broadcast = _model([helper.make_node("Add", ["x", "zeros"], ["y"])], {"zeros": np.zeros((2, 4, 8), np.float32)},
                       shape=(1, 4, 8))
    broadcast.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 2
    assert [n.op_type for n in normalize(broadcast).graph.node] == ["Add"]  # it makes x bigger: kept


@pytest.mark.parametrize("zero_bias", [False, True])
@pytest.mark.parametrize("to, hw, tool", [("tnn", "x86", TNN_RUN), ("mace", "cpu", MACE_RUN)])
def test_unmasked_attention_ports_to_tnn_and_mace(tmp_path, to, hw, tool, zero_bias):
    """ViT's and Whisper's attention from the dynamo exporter (with the all-zero bias it adds when
    no mask is given): no custom layer for the guard's IsNaN (left unused, removed), judged by
    tnn_run / mace_run; the plan says why."""
    need(tool)
    result = port(guarded_attention(zero_bias=zero_bias), to=to, hw=hw, out=tmp_path / "out",
                  runtimes={to: str(tool)})
    assert result.status == "ok", result.reason
    stage = next(s for s in result.verification.stages if s.name.startswith("target:"))
    assert stage.status == "pass" and stage.oracle["kind"] == "runtime" and stage.outputs[0].metrics.max_abs < 1e-6
    entries = {e["op"]: e for e in result.report["plan"]["entries"]}
    assert entries["IsNaN"]["remedy"] == "rewrite" and entries["IsNaN"]["reason"].startswith("unused once its consumers")
    assert not (tmp_path / "out" / "custom").exists()
    assert [a["rule"] for a in result.report["applied_rules"]] == ["softmax_nan_guard_dropped"]

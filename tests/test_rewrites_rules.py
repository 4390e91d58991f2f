"""Every rewrite rule against onnxruntime on seeded inputs, with exact op counts."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.ir.graph import Provenance, op_histogram
from converter.legalize.rewrites import REGISTRY, apply_rule

RNG_SEED = 1234


def make_model(nodes, inputs, inits=None, opset=17, out_type=TensorProto.FLOAT):
    """``inputs``: {name: shape} (float32); ``inits``: {name: array}; the graph output is ``y``."""
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", out_type, None)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8 if opset <= 17 else 9)
    return onnx.shape_inference.infer_shapes(model)


def run(model, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def feeds_for(inputs, scale=3.0, positive=False):
    rng = np.random.default_rng(RNG_SEED)
    out = {}
    for name, shape in inputs.items():
        v = rng.standard_normal(shape).astype(np.float32) * scale
        out[name] = np.abs(v) + 0.1 if positive else v
    return out


def rnd(*shape, seed=7, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


N = helper.make_node
X4 = {"x": [2, 3, 5, 6]}

# (rule, model, expected op histogram after the rewrite, atol, feed options)
CASES = [
    ("sub_const_to_add", make_model([N("Sub", ["x", "c"], ["y"])], X4, {"c": rnd(3, 1, 1)}), {"Add": 1}, 1e-6, {}),
    ("sub_to_add_neg", make_model([N("Sub", ["x", "z"], ["y"])], {"x": [2, 3], "z": [2, 3]}), {"Add": 1, "Neg": 1}, 1e-6, {}),
    ("sub_to_add_mul", make_model([N("Sub", ["x", "z"], ["y"])], {"x": [2, 3], "z": [3]}), {"Add": 1, "Mul": 1}, 1e-6, {}),
    ("add_const_to_sub", make_model([N("Add", ["x", "c"], ["y"])], X4, {"c": rnd(3, 1, 1)}), {"Sub": 1}, 0.0, {}),
    ("add_to_sub_neg", make_model([N("Add", ["x", "z"], ["y"])], {"x": [2, 3], "z": [2, 3]}), {"Sub": 1, "Neg": 1}, 0.0, {}),
    ("div_const_to_mul", make_model([N("Div", ["x", "c"], ["y"])], X4, {"c": np.float32([0.229, 0.224, 0.225]).reshape(3, 1, 1)}),
     {"Mul": 1}, 1e-5, {}),
    ("neg_to_mul", make_model([N("Neg", ["x"], ["y"])], X4), {"Mul": 1}, 0.0, {}),
    ("reciprocal_to_div", make_model([N("Reciprocal", ["x"], ["y"])], X4), {"Div": 1}, 0.0, {"positive": True}),
    ("sqrt_to_pow", make_model([N("Sqrt", ["x"], ["y"])], X4), {"Pow": 1}, 1e-6, {"positive": True}),
    ("pow_to_mul", make_model([N("Pow", ["x", "e"], ["y"])], X4, {"e": np.float32(3.0)}), {"Mul": 2}, 1e-4, {}),
    ("remove_identity", make_model([N("Relu", ["x"], ["a"]), N("Identity", ["a"], ["y"])], X4), {"Relu": 1}, 0.0, {}),
    ("remove_dropout", make_model([N("Relu", ["x"], ["a"]), N("Dropout", ["a"], ["b"]), N("Neg", ["b"], ["y"])], X4),
     {"Relu": 1, "Neg": 1}, 0.0, {}),
    ("remove_noop_cast", make_model([N("Relu", ["x"], ["a"]), N("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
                                     N("Neg", ["b"], ["y"])], X4), {"Relu": 1, "Neg": 1}, 0.0, {}),
    ("fold_batchnorm", make_model(
        [N("Conv", ["x", "w", "cb"], ["a"], pads=[1, 1, 1, 1]), N("BatchNormalization", ["a", "g", "b", "m", "v"], ["y"], epsilon=1e-3)],
        X4, {"w": rnd(4, 3, 3, 3), "cb": rnd(4, seed=1), "g": rnd(4, seed=2) + 1.5, "b": rnd(4, seed=3),
             "m": rnd(4, seed=4), "v": np.abs(rnd(4, seed=5)) + 0.5}), {"Conv": 1}, 1e-5, {"scale": 1.0}),
    ("fold_batchnorm", make_model(
        [N("ConvTranspose", ["x", "w"], ["a"], strides=[2, 2], group=3), N("BatchNormalization", ["a", "g", "b", "m", "v"], ["y"])],
        X4, {"w": rnd(3, 2, 3, 3), "g": rnd(6, seed=2) + 1.5, "b": rnd(6, seed=3), "m": rnd(6, seed=4),
             "v": np.abs(rnd(6, seed=5)) + 0.5}), {"ConvTranspose": 1}, 1e-5, {"scale": 1.0}),
    ("fold_batchnorm", make_model(
        [N("Gemm", ["x", "w", "c"], ["a"], transB=1, alpha=0.5, beta=2.0), N("BatchNormalization", ["a", "g", "b", "m", "v"], ["y"])],
        {"x": [4, 6]}, {"w": rnd(5, 6), "c": rnd(5, seed=1), "g": rnd(5, seed=2) + 1.5, "b": rnd(5, seed=3),
                        "m": rnd(5, seed=4), "v": np.abs(rnd(5, seed=5)) + 0.5}), {"Gemm": 1}, 1e-5, {"scale": 1.0}),
    ("fold_pad", make_model([N("Pad", ["x", "p"], ["a"]), N("Conv", ["a", "w"], ["y"], pads=[0, 1, 0, 1])],
                            X4, {"p": np.int64([0, 0, 1, 2, 0, 0, 3, 0]), "w": rnd(2, 3, 3, 3)}), {"Conv": 1}, 1e-5, {"scale": 1.0}),
    ("fold_pad", make_model([N("Pad", ["x", "p"], ["a"]), N("AveragePool", ["a"], ["y"], kernel_shape=[3, 3], count_include_pad=1)],
                            X4, {"p": np.int64([0, 0, 1, 1, 0, 0, 1, 1])}), {"AveragePool": 1}, 1e-6, {}),
    ("gemm_to_matmul_add", make_model([N("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=3.0)],
                                      {"x": [4, 6]}, {"w": rnd(5, 6), "c": rnd(5, seed=1)}), {"MatMul": 1, "Add": 1}, 1e-5, {"scale": 1.0}),
    ("gemm_to_conv1x1", make_model([N("Gemm", ["x", "w", "c"], ["y"], transB=1)],
                                   {"x": [4, 6]}, {"w": rnd(5, 6), "c": rnd(1, 5, seed=1)}), {"Reshape": 2, "Conv": 1}, 1e-5, {"scale": 1.0}),
    ("matmul_to_gemm", make_model([N("MatMul", ["x", "w"], ["y"])], {"x": [4, 6]}, {"w": rnd(6, 5)}), {"Gemm": 1}, 1e-5, {"scale": 1.0}),
    ("matmul_add_to_gemm", make_model([N("MatMul", ["x", "w"], ["a"]), N("Add", ["c", "a"], ["y"])], {"x": [4, 6]},
                                      {"w": rnd(6, 5), "c": rnd(5, seed=2)}), {"Gemm": 1}, 1e-5, {"scale": 1.0}),
    ("flatten_to_reshape", make_model([N("Flatten", ["x"], ["y"])], X4), {"Reshape": 1}, 0.0, {}),
    ("flatten_to_reshape", make_model([N("Flatten", ["x"], ["y"], axis=-2)], X4), {"Reshape": 1}, 0.0, {}),
    ("reshape_to_flatten", make_model([N("Reshape", ["x", "s"], ["y"])], X4, {"s": np.int64([6, -1])}), {"Flatten": 1}, 0.0, {}),
    ("softmax_decompose", make_model([N("Softmax", ["x"], ["y"], axis=1)], X4),
     {"ReduceMax": 1, "Sub": 1, "Exp": 1, "ReduceSum": 1, "Div": 1}, 1e-6, {}),
    ("softmax_decompose", make_model([N("Softmax", ["x"], ["y"], axis=-1)], X4, opset=18),
     {"ReduceMax": 1, "Sub": 1, "Exp": 1, "ReduceSum": 1, "Div": 1}, 1e-6, {}),
    ("softmax_decompose", make_model([N("Softmax", ["x"], ["y"], axis=2)], X4, opset=11),
     {"ReduceMax": 1, "Sub": 1, "Exp": 1, "ReduceSum": 1, "Div": 1}, 1e-6, {}),
    ("logsoftmax_decompose", make_model([N("LogSoftmax", ["x"], ["y"], axis=3)], X4),
     {"ReduceMax": 1, "Sub": 2, "Exp": 1, "ReduceSum": 1, "Log": 1}, 1e-5, {}),
    ("hardsigmoid_decompose", make_model([N("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], X4),
     {"Mul": 1, "Add": 1, "Clip": 1}, 1e-6, {}),
    ("hardswish_decompose", make_model([N("HardSwish", ["x"], ["y"])], X4), {"Mul": 2, "Add": 1, "Clip": 1}, 1e-6, {}),
    ("hardswish_to_hardsigmoid", make_model([N("HardSwish", ["x"], ["y"])], X4), {"Mul": 1, "HardSigmoid": 1}, 1e-6, {}),
    ("gelu_erf_decompose", make_model([N("Gelu", ["x"], ["y"])], X4, opset=20), {"Mul": 3, "Erf": 1, "Add": 1}, 1e-6, {}),
    ("gelu_tanh_decompose", make_model([N("Gelu", ["x"], ["y"], approximate="tanh")], X4, opset=20),
     {"Mul": 6, "Add": 2, "Tanh": 1}, 1e-5, {}),
    ("erf_polynomial", make_model([N("Erf", ["x"], ["y"])], X4), {"Abs": 1, "Sign": 1, "Mul": 11, "Add": 6, "Div": 1, "Exp": 1},
     1e-6, {"scale": 1.5}),
    ("layernorm_decompose", make_model([N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                                       {"x": [2, 7, 16]}, {"g": rnd(16, seed=1), "b": rnd(16, seed=2)}),
     {"ReduceMean": 2, "Sub": 1, "Mul": 3, "Add": 2, "Sqrt": 1, "Div": 1}, 1e-5, {}),
    ("layernorm_decompose", make_model([N("LayerNormalization", ["x", "g"], ["y"], axis=1)], {"x": [2, 4, 3, 3]},
                                       {"g": rnd(4, 3, 3, seed=1)}, opset=18),
     {"ReduceMean": 2, "Sub": 1, "Mul": 3, "Add": 1, "Sqrt": 1, "Div": 1}, 1e-5, {}),
    ("clip_to_relu", make_model([N("Clip", ["x", "lo"], ["y"])], X4, {"lo": np.float32(0)}), {"Relu": 1}, 0.0, {}),
    ("clip_to_relu_min", make_model([N("Clip", ["x", "lo", "hi"], ["y"])], X4, {"lo": np.float32(0), "hi": np.float32(6)}),
     {"Relu": 1, "Min": 1}, 0.0, {}),
    ("clip_to_min_max", make_model([N("Clip", ["x", "lo", "hi"], ["y"])], X4, {"lo": np.float32(-1), "hi": np.float32(2)}),
     {"Max": 1, "Min": 1}, 0.0, {}),
    ("clip_to_min_max", make_model([N("Clip", ["x"], ["y"], min=-0.5)], X4, opset=10), {"Max": 1}, 0.0, {}),
    ("sigmoid_decompose", make_model([N("Sigmoid", ["x"], ["y"])], X4), {"Mul": 1, "Exp": 1, "Add": 1, "Div": 1}, 1e-6, {"scale": 20.0}),
    ("softplus_decompose", make_model([N("Softplus", ["x"], ["y"])], X4),
     {"Relu": 1, "Abs": 1, "Mul": 1, "Exp": 1, "Add": 2, "Log": 1}, 1e-5, {"scale": 40.0}),
    ("mish_decompose", make_model([N("Mish", ["x"], ["y"])], X4, opset=18), {"Mul": 1, "Tanh": 1, "Softplus": 1}, 1e-5, {}),
    ("leakyrelu_to_max", make_model([N("LeakyRelu", ["x"], ["y"], alpha=0.1)], X4), {"Mul": 1, "Max": 1}, 0.0, {}),
    ("leakyrelu_to_max", make_model([N("LeakyRelu", ["x"], ["y"], alpha=-0.5)], X4), {"Mul": 1, "Max": 1}, 0.0, {}),
    ("prelu_decompose", make_model([N("PRelu", ["x", "s"], ["y"])], X4, {"s": rnd(3, 1, 1, seed=3)}),
     {"Relu": 1, "Min": 1, "Mul": 1, "Add": 1}, 1e-6, {}),
    ("relu_to_max", make_model([N("Relu", ["x"], ["y"])], X4), {"Max": 1}, 0.0, {}),
    ("reducemean_to_gap", make_model([N("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], X4), {"GlobalAveragePool": 1}, 1e-6, {}),
    ("reducemean_to_gap", make_model([N("ReduceMean", ["x", "ax"], ["y"], keepdims=1)], X4, {"ax": np.int64([-1, -2])}, opset=18),
     {"GlobalAveragePool": 1}, 1e-6, {}),
    ("reducemean_to_gap_flat", make_model([N("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)], X4),
     {"GlobalAveragePool": 1, "Reshape": 1}, 1e-6, {}),
    ("slice_to_shift_conv", make_model([N("Slice", ["x", "s", "e", "a"], ["y"])], X4,
                                       {"s": np.int64([1, 2]), "e": np.int64([-1, 100]), "a": np.int64([2, 3])}),
     {"Conv": 1}, 0.0, {}),
    ("slice_to_shift_conv", make_model([N("Slice", ["x", "s", "e"], ["y"])], {"x": [2, 3, 9]},
                                       {"s": np.int64([0, 0, 3]), "e": np.int64([2, 3, 7])}), {"Conv": 1}, 0.0, {}),
    ("gap_to_reducemean", make_model([N("GlobalAveragePool", ["x"], ["y"])], X4), {"ReduceMean": 1}, 1e-6, {}),
    # two padded axes: two Concats; begin pads repeat the first slice, end pads the last
    ("edge_pad_to_slice_concat", make_model([N("Pad", ["x", "p"], ["y"], mode="edge")], X4,
                                            {"p": np.int64([0, 0, 2, 1, 0, 0, 1, 3])}), {"Slice": 4, "Concat": 2}, 0.0, {}),
    ("edge_pad_to_slice_concat", make_model([N("Pad", ["x", "p"], ["y"], mode="edge")], {"x": [2, 7]},
                                            {"p": np.int64([0, 3, 0, 0])}), {"Slice": 1, "Concat": 1}, 0.0, {}),
    # MobileBERT's sequence pad of its [1, L, D] embeddings, and a reflect pad of rank 2
    ("pad_rank_to_4", make_model([N("Pad", ["x", "p", "v"], ["y"])], {"x": [1, 5, 3]},
                                 {"p": np.int64([0, 0, 0, 0, 1, 0]), "v": np.float32(0.5)}), {"Reshape": 2, "Pad": 1},
     0.0, {}),
    ("pad_rank_to_4", make_model([N("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": [4, 6]},
                                 {"p": np.int64([1, 2, 0, 3])}), {"Reshape": 2, "Pad": 1}, 0.0, {}),
]


@pytest.mark.parametrize("rule_name, model, expected, atol, feed_opts", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_matches_onnxruntime(rule_name, model, expected, atol, feed_opts):
    assert_rule_matches(rule_name, model, expected, atol, feed_opts)


def assert_rule_matches(rule_name, model, expected, atol, feed_opts):
    """The rule rewrites ``model``'s first matching node into exactly the ``expected`` op
    histogram, keeps the output name, and onnxruntime's outputs agree within ``atol`` (relative
    to the output's magnitude, at least 1)."""
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}}
    feeds = feeds_for(inputs, **feed_opts)
    before = run(model, feeds)
    rewritten = apply_rule(model, rule_name)
    onnx.checker.check_model(rewritten)
    assert op_histogram(rewritten) == expected
    assert [o.name for o in rewritten.graph.output] == ["y"]  # graph output names survive
    after = run(rewritten, feeds)
    assert after[0].shape == before[0].shape
    err = float(np.max(np.abs(after[0].astype(np.float64) - before[0])))
    scale = max(1.0, float(np.max(np.abs(before[0]))))
    assert err <= atol * scale, f"{rule_name}: max abs error {err:.3g}"
    if REGISTRY[rule_name].emits:  # removals and folds create no node
        prov = Provenance.from_json(next(p.value for p in rewritten.metadata_props if p.key == "edgeconv.provenance"))
        assert {v["by"] for v in prov.node_origin.values()} == {rule_name}


def test_rule_declines_with_reason():
    from converter.ir.graph import to_graph

    model = make_model([N("Div", ["x", "z"], ["y"])], {"x": [2, 3], "z": [2, 3]})
    graph = to_graph(model)
    assert REGISTRY["div_const_to_mul"].why_not(graph.nodes[0], graph) == "divisor is not a constant"
    with pytest.raises(ValueError, match="matches no node"):
        apply_rule(model, "div_const_to_mul")


def test_identity_before_graph_output_keeps_output_name():
    model = make_model([N("Relu", ["x"], ["a"]), N("Identity", ["a"], ["y"]), ], X4)
    out = apply_rule(model, "remove_identity")
    assert [n.output[0] for n in out.graph.node] == ["y"]


def test_every_rule_is_documented_and_tested():
    from test_bool_mask import RULES_TESTED as mask_rules
    from test_rewrites_accelerator import RULES_TESTED as accelerator_rules
    from test_rewrites_exact import RULES_TESTED as exact_rules
    from test_rewrites_logic import RULES_TESTED as logic_rules
    from test_rewrites_rank import RULES_TESTED as rank_rules

    tested = {c[0] for c in CASES} | rank_rules | accelerator_rules | exact_rules | logic_rules | mask_rules | {
        "convtranspose_to_subpixel", "convtranspose_to_depth_to_space", "convtranspose_to_resize_conv"}
    assert set(REGISTRY) == tested
    for r in REGISTRY.values():
        assert "─►" in r.doc or "before" in r.doc, f"{r.name} docstring lacks the before/after graph"
        assert r.kind in ("exact", "approximate", "retrain")

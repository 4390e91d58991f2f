"""The accelerator rules (activations, einsum, groups, deconv, conv3d) against onnxruntime: each
rewritten model equals the original within the rule's class (exact: float rounding; approximate:
its stated bound), with exact op counts, and each rule declines what it cannot do, saying why."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.ir.graph import op_histogram, to_graph
from converter.legalize.rewrites import REGISTRY, apply_rule

N = helper.make_node
#: The rules this module proves (tests/test_rewrites_rules.py checks every registered rule is proved).
RULES_TESTED = {"exp_via_sigmoid", "erf_polynomial_minmax", "einsum_to_matmul", "conv_group_split",
                "convtranspose_group_split", "conv_multiplier_to_depthwise", "convtranspose_output_padding_to_pad",
                "convtranspose_undilate", "conv3d_to_conv2d", "conv1d_to_conv2d"}


def model_of(nodes, inputs, inits=None, opset=17):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def run(model, feeds):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def seeded(inputs, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * scale).astype(np.float32) for k, s in inputs.items()}


def rnd(*shape, seed=3, scale=0.5):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def check(model, rule_name, inputs, max_err, expected_ops=None, feeds=None):
    feeds = feeds or seeded(inputs)
    before = run(model, feeds)
    out = apply_rule(model, rule_name)
    onnx.checker.check_model(out, full_check=True)
    after = run(out, feeds)
    assert after.shape == before.shape
    err = float(np.max(np.abs(after.astype(np.float64) - before.astype(np.float64))))
    assert err <= max_err, f"{rule_name}: max abs error {err:.3g} > {max_err:g}"
    if expected_ops is not None:
        assert op_histogram(out) == expected_ops
    return out, err


# ----------------------------------------------------------------------------------------------
# Exp and Erf from Sigmoid / Min / Max


def test_exp_via_sigmoid_for_nonpositive_exponents():
    x = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -1e-30, 1e-30, 30.0, -100.0]]).astype(np.float32)
    model = model_of([N("Mul", ["x", "x"], ["sq"]), N("Neg", ["sq"], ["e"]), N("Exp", ["e"], ["y"])], {"x": [x.size]})
    out = apply_rule(model, "exp_via_sigmoid")
    assert op_histogram(out) == {"Div": 1, "Mul": 1, "Neg": 2, "Sigmoid": 2}
    want = np.exp(-(x.astype(np.float64) ** 2))
    err = float(np.max(np.abs(run(out, {"x": x}) - want)))
    assert err <= REGISTRY["exp_via_sigmoid"].error_bound == 1e-6, err
    # c·a² with a constant c ≤ 0 qualifies (erf_polynomial's form); an arbitrary exponent does not
    scaled = model_of([N("Mul", ["x", "x"], ["sq"]), N("Mul", ["sq", "c"], ["e"]), N("Exp", ["e"], ["y"])],
                      {"x": [3, 50]}, {"c": np.float32(-0.5)})
    check(scaled, "exp_via_sigmoid", {"x": [3, 50]}, 1e-6, feeds=seeded({"x": [3, 50]}, scale=3.0))
    plain = to_graph(model_of([N("Exp", ["x"], ["y"])], {"x": [4]}))
    assert REGISTRY["exp_via_sigmoid"].why_not(plain.nodes[0], plain).startswith("the exponent is not ≤ 0")


def test_erf_polynomial_minmax_is_within_its_bound():
    x = np.concatenate([np.linspace(-6, 6, 24001), [0.0, 1e-8, -1e-8, 1e-38, -3e-4, 30.0, -1e4]]).astype(np.float32)
    model = model_of([N("Erf", ["x"], ["y"])], {"x": [x.size]})
    out = apply_rule(model, "erf_polynomial_minmax")
    assert op_histogram(out) == {"Abs": 1, "Add": 6, "Div": 1, "Exp": 1, "Max": 1, "Min": 1, "Mul": 11, "Neg": 1}
    assert "Sign" not in op_histogram(out)  # NNAPI has no Sign
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    err = float(np.max(np.abs(run(out, {"x": x}) - want)))
    assert err <= REGISTRY["erf_polynomial_minmax"].error_bound == 1e-6, err
    assert run(out, {"x": x})[x.size - 7] == 0.0  # erf(0) is 0 exactly


def test_erf_on_mace_chains_polynomial_and_sigmoid_exp():
    from converter.legalize.apply import legalize

    model = model_of([N("Erf", ["x"], ["y"])], {"x": [2, 64]})
    result = legalize(model, "mace", "cpu")
    assert [r for r, _ in result.applied] == ["erf_polynomial", "exp_via_sigmoid"]
    assert not result.unresolved and result.max_abs_error <= 1e-6
    assert "Exp" not in op_histogram(result.model) and "Erf" not in op_histogram(result.model)


# ----------------------------------------------------------------------------------------------
# Einsum

EINSUMS = [  # (equation, operand shapes, op histogram after the rewrite)
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], {"MatMul": 1, "Transpose": 1}),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)], {"MatMul": 1}),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], {"MatMul": 1}),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)], {"MatMul": 1}),
    ("...ij,...jk", [(2, 3, 4, 5), (2, 3, 5, 6)], {"MatMul": 1}),
    ("bchw,bkc->bkhw", [(2, 3, 4, 5), (2, 6, 3)], {"MatMul": 1, "Reshape": 2}),
    ("nchw,kc->nkhw", [(1, 3, 4, 5), (6, 3)], {"MatMul": 1, "Reshape": 2, "Transpose": 3}),
    ("bhwc,hkc->bhwk", [(1, 4, 5, 3), (4, 6, 3)], {"MatMul": 1, "Reshape": 2, "Transpose": 3}),
    ("bij->jb", [(2, 3, 4)], {"ReduceSum": 1, "Transpose": 1}),
    ("bij->", [(2, 3, 4)], {"ReduceSum": 1}),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], {"MatMul": 2}),
    ("bi,bj->bij", [(2, 3), (2, 4)], {"MatMul": 1, "Reshape": 2}),
    ("bnd,d->bn", [(2, 3, 4), (4,)], {"MatMul": 1, "Reshape": 3}),
]


@pytest.mark.parametrize("equation, shapes, expected", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_to_matmul(equation, shapes, expected):
    names = [f"in{i}" for i in range(len(shapes))]
    inputs = {n: list(s) for n, s in zip(names, shapes)}
    model = model_of([N("Einsum", names, ["y"], equation=equation)], inputs)
    check(model, "einsum_to_matmul", inputs, 1e-5, expected)


def test_einsum_with_constant_operand_folds_its_arrangement():
    w = rnd(6, 3)
    model = model_of([N("Einsum", ["x", "w"], ["y"], equation="nchw,kc->nkhw")], {"x": [1, 3, 4, 5]}, {"w": w})
    out, _ = check(model, "einsum_to_matmul", {"x": [1, 3, 4, 5]}, 1e-5)
    assert op_histogram(out) == {"MatMul": 1, "Reshape": 2, "Transpose": 2}  # the weight's transpose is folded


@pytest.mark.parametrize("equation, shapes, why", [
    ("bii->bi", [(2, 3, 3)], "repeated index in 'bii' (a diagonal) has no MatMul form"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "index 'j' has sizes 3 and 4 (broadcasting)"),
    ("...ij,jk->...ik", [(2, 3, 4), (4, 5)], None),  # '...' in one operand only is fine
])
def test_einsum_declines_with_reason(equation, shapes, why):
    names = [f"in{i}" for i in range(len(shapes))]
    graph = helper.make_graph([N("Einsum", names, ["y"], equation=equation)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    g = to_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert REGISTRY["einsum_to_matmul"].why_not(g.nodes[0], g) == why


# ----------------------------------------------------------------------------------------------
# Groups, output padding, dilations, 3-D


def test_conv_group_split():
    inputs = {"x": [1, 6, 7, 8]}
    model = model_of([N("Conv", ["x", "w", "b"], ["y"], group=3, pads=[1, 1, 1, 1], dilations=[2, 1], strides=[1, 2])],
                     inputs, {"w": rnd(9, 2, 3, 3), "b": rnd(9, seed=4)})
    check(model, "conv_group_split", inputs, 1e-5, {"Split": 1, "Conv": 3, "Concat": 1})


def test_conv_multiplier_to_depthwise():
    inputs = {"x": [1, 4, 7, 8]}
    model = model_of([N("Conv", ["x", "w", "b"], ["y"], group=4, pads=[1, 1, 1, 1])],
                     inputs, {"w": rnd(8, 1, 3, 3), "b": rnd(8, seed=4)})
    out, _ = check(model, "conv_multiplier_to_depthwise", inputs, 1e-5, {"Gather": 1, "Conv": 1})
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert helper.get_attribute_value(next(a for a in conv.attribute if a.name == "group")) == 8


def test_group_split_declines_depthwise_and_plain():
    for group, w in ((1, rnd(4, 4, 3, 3)), (4, rnd(4, 1, 3, 3))):
        g = to_graph(model_of([N("Conv", ["x", "w"], ["y"], group=group)], {"x": [1, 4, 7, 8]}, {"w": w}))
        assert REGISTRY["conv_group_split"].why_not(g.nodes[0], g) in (
            "group = 1", "depthwise (group = C_in = C_out) is one convolution")


@pytest.mark.parametrize("attrs", [
    dict(group=2, dilations=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(group=2, dilations=[2, 1], strides=[3, 2], pads=[0, 1, 2, 0], output_padding=[1, 1]),
])
def test_convtranspose_group_split(attrs):
    inputs = {"x": [1, 4, 5, 6]}
    model = model_of([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], inputs,
                     {"w": rnd(4, 3, 3, 3), "b": rnd(6, seed=4)})
    check(model, "convtranspose_group_split", inputs, 1e-5, {"Split": 1, "ConvTranspose": 2, "Concat": 1})


@pytest.mark.parametrize("attrs, bias, expected", [
    (dict(strides=[3, 3], output_padding=[2, 1], pads=[1, 0, 0, 0]), True, {"ConvTranspose": 1, "Pad": 1, "Add": 1}),
    (dict(strides=[3, 3], output_padding=[2, 1], pads=[1, 0, 0, 0]), False, {"ConvTranspose": 1, "Pad": 1}),
    (dict(strides=[2, 2], output_padding=[1, 1], pads=[1, 1, 1, 1]), True, {"ConvTranspose": 1}),  # fits: crop less
    (dict(strides=[2, 2], output_padding=[1, 0], auto_pad="VALID", group=2), True, {"ConvTranspose": 1, "Pad": 1, "Add": 1}),
])
def test_convtranspose_output_padding_to_pad(attrs, bias, expected):
    inputs = {"x": [1, 4, 5, 6]}
    g = attrs.get("group", 1)
    inits = {"w": rnd(4, 3, 3, 3)}
    if bias:
        inits["b"] = rnd(3 * g, seed=4) + 1.0  # a clearly non-zero bias: the padded rows hold it alone
    model = model_of([N("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)], inputs, inits)
    out, _ = check(model, "convtranspose_output_padding_to_pad", inputs, 1e-5, expected)
    ct = next(n for n in out.graph.node if n.op_type == "ConvTranspose")
    assert not any(a.name == "output_padding" for a in ct.attribute)


def test_convtranspose_undilate():
    inputs = {"x": [1, 4, 5, 6]}
    model = model_of([N("ConvTranspose", ["x", "w", "b"], ["y"], dilations=[2, 3], strides=[2, 1], pads=[1, 0, 0, 2])],
                     inputs, {"w": rnd(4, 3, 3, 2), "b": rnd(3, seed=4)})
    out, _ = check(model, "convtranspose_undilate", inputs, 1e-5, {"ConvTranspose": 1})
    ct = out.graph.node[0]
    assert [a for a in ct.attribute if a.name == "kernel_shape"][0].ints == [5, 4]


@pytest.mark.parametrize("attrs, w_shape", [
    (dict(pads=[1, 1, 1, 1, 1, 1]), (8, 3, 3, 3, 3)),
    (dict(strides=[2, 1, 2], pads=[1, 2, 0, 0, 1, 1], dilations=[2, 1, 1]), (8, 3, 3, 4, 2)),
    (dict(group=3, pads=[0, 1, 1, 1, 1, 1]), (6, 1, 2, 3, 3)),
    (dict(auto_pad="VALID"), (4, 3, 1, 1, 1)),
])
def test_conv3d_to_conv2d(attrs, w_shape):
    inputs = {"x": [2, 3, 5, 6, 7]}
    model = model_of([N("Conv", ["x", "w", "b"], ["y"], **attrs)], inputs, {"w": rnd(*w_shape), "b": rnd(w_shape[0], seed=4)})
    out, _ = check(model, "conv3d_to_conv2d", inputs, 1e-5)
    hist = op_histogram(out)
    assert hist["Conv"] == w_shape[2]  # one 2-D convolution per temporal tap
    inferred = onnx.shape_inference.infer_shapes(out)
    conv_ins = {n.input[0] for n in out.graph.node if n.op_type == "Conv"}
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in inferred.graph.value_info}
    assert all(ranks[t] == 4 for t in conv_ins)
    assert max(ranks.values()) <= 5 and sum(r == 5 for r in ranks.values()) == 0  # only the output is 5-D


@pytest.mark.parametrize("attrs", [dict(pads=[2, 1], strides=[2], dilations=[2]), dict(group=3), dict(auto_pad="SAME_UPPER")])
def test_conv1d_to_conv2d(attrs):
    inputs = {"x": [2, 6, 17]}
    model = model_of([N("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3], **attrs)], inputs,
                     {"w": rnd(6, 6 // attrs.get("group", 1), 3), "b": rnd(6, seed=4)})
    check(model, "conv1d_to_conv2d", inputs, 1e-5, {"Reshape": 2, "Conv": 1})

"""Issue 30's exact rewrites against onnxruntime, with exact op counts: Expand without Expand,
normalizations on a 4-D view, the composite reductions, ScatterND with constant indices, 3-D
pools as 2-D ones, and every ONNX function body inlined (converter/rewrites/functions.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.ir.graph import op_histogram, to_graph
from converter.legalize.rewrites import REGISTRY, apply_rule
from test_rewrites_rules import assert_rule_matches, make_model, rnd, run

N = helper.make_node
X4 = {"x": [2, 3, 5, 6]}


def _torch_like_scatter(channels: int, start: int, step: int, length: int):
    """``y[:, start::step] = u`` as torch traces it: indices [1, k, 2] = (0, c)."""
    picked = list(range(start, channels, step))
    indices = np.array([[[0, c] for c in picked]], dtype=np.int64)
    return make_model([N("ScatterND", ["x", "i", "u"], ["y"])], {"x": [1, channels, length], "u": [1, len(picked), length]},
                      {"i": indices})


def _pool3d(op, **attrs):
    return make_model([N(op, ["x"], ["y"], **attrs)], {"x": [1, 2, 7, 9, 10]})


# (rule, model, expected op histogram after the rewrite, max abs error allowed (relative to the
#  output's magnitude, at least 1), feed options)
CASES = [
    ("remove_noop_expand", make_model([N("Relu", ["x"], ["a"]), N("Expand", ["a", "s"], ["b"]), N("Neg", ["b"], ["y"])],
                                      X4, {"s": np.int64([2, 3, 5, 6])}), {"Relu": 1, "Neg": 1}, 0.0, {}),
    ("remove_broadcast_expand", make_model([N("Expand", ["x", "s"], ["e"]), N("Add", ["e", "z"], ["y"])],
                                           {"x": [1, 3, 1, 1], "z": [2, 3, 5, 6]}, {"s": np.int64([2, 3, 5, 6])}),
     {"Add": 1}, 0.0, {}),
    ("expand_to_mul_ones", make_model([N("Expand", ["x", "s"], ["y"])], {"x": [3, 1]}, {"s": np.int64([2, 3, 4])}),
     {"Mul": 1}, 0.0, {}),
    ("expand_to_tile", make_model([N("Expand", ["x", "s"], ["y"])], {"x": [3, 1]}, {"s": np.int64([2, 3, 4])}),
     {"Reshape": 1, "Tile": 1}, 0.0, {}),
    ("expand_to_tile", make_model([N("Expand", ["x", "s"], ["y"])], {"x": [1, 3, 1]}, {"s": np.int64([2, 1, 4])}),
     {"Tile": 1}, 0.0, {}),
    ("batchnorm_to_4d", make_model([N("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], epsilon=1e-3)], {"x": [4, 6]},
                                   {"g": rnd(6, seed=2) + 1.5, "b": rnd(6, seed=3), "m": rnd(6, seed=4),
                                    "v": np.abs(rnd(6, seed=5)) + 0.5}), {"Reshape": 2, "BatchNormalization": 1}, 1e-6, {}),
    ("batchnorm_to_4d", make_model([N("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])], {"x": [2, 6, 7]},
                                   {"g": rnd(6, seed=2) + 1.5, "b": rnd(6, seed=3), "m": rnd(6, seed=4),
                                    "v": np.abs(rnd(6, seed=5)) + 0.5}), {"Reshape": 2, "BatchNormalization": 1}, 1e-6, {}),
    ("batchnorm_to_4d", make_model([N("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])], {"x": [1, 3, 2, 4, 5]},
                                   {"g": rnd(3, seed=2) + 1.5, "b": rnd(3, seed=3), "m": rnd(3, seed=4),
                                    "v": np.abs(rnd(3, seed=5)) + 0.5}), {"Reshape": 2, "BatchNormalization": 1}, 1e-6, {}),
    ("instancenorm_to_4d", make_model([N("InstanceNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)], {"x": [2, 1, 96]},
                                      {"g": rnd(1, seed=2) + 1.5, "b": rnd(1, seed=3)}),
     {"Reshape": 2, "InstanceNormalization": 1}, 1e-5, {}),
    ("reducel2_decompose", make_model([N("ReduceL2", ["x"], ["y"], axes=[1, 2], keepdims=1)], X4),
     {"Mul": 1, "ReduceSum": 1, "Sqrt": 1}, 1e-6, {}),
    ("reducel2_decompose", make_model([N("ReduceL2", ["x", "ax"], ["y"], keepdims=0)], X4, {"ax": np.int64([-1])}, opset=18),
     {"Mul": 1, "ReduceSum": 1, "Sqrt": 1}, 1e-6, {}),
    ("reducel2_decompose", make_model([N("ReduceL2", ["x"], ["y"], keepdims=0)], X4), {"Mul": 1, "ReduceSum": 1, "Sqrt": 1},
     1e-6, {}),
    ("reducel1_decompose", make_model([N("ReduceL1", ["x"], ["y"], axes=[3])], X4), {"Abs": 1, "ReduceSum": 1}, 1e-6, {}),
    ("reducesumsquare_decompose", make_model([N("ReduceSumSquare", ["x"], ["y"], axes=[0, 3], keepdims=0)], X4),
     {"Mul": 1, "ReduceSum": 1}, 1e-6, {}),
    ("reducelogsum_decompose", make_model([N("ReduceLogSum", ["x"], ["y"], axes=[2])], X4), {"ReduceSum": 1, "Log": 1},
     1e-6, {"positive": True}),
    ("reducelogsumexp_decompose", make_model([N("ReduceLogSumExp", ["x"], ["y"], axes=[1])], X4),
     {"ReduceMax": 1, "Sub": 1, "Exp": 1, "ReduceSum": 1, "Log": 1, "Add": 1}, 1e-6, {"scale": 30.0}),
    ("reducelogsumexp_decompose", make_model([N("ReduceLogSumExp", ["x", "ax"], ["y"], keepdims=0)], X4,
                                             {"ax": np.int64([1, 3])}, opset=18),
     {"ReduceMax": 2, "Sub": 1, "Exp": 1, "ReduceSum": 1, "Log": 1, "Add": 1}, 1e-6, {"scale": 30.0}),
    # YOLOv8-pose's keypoint decoding, y[:, 2::3] = sigmoid(...), bit for bit
    ("scatternd_to_concat_gather", _torch_like_scatter(51, 2, 3, 20), {"Concat": 1, "Gather": 1}, 0.0, {}),
    ("scatternd_to_flat_gather", make_model([N("ScatterND", ["x", "i", "u"], ["y"])], {"x": [4, 6], "u": [3]},
                                            {"i": np.int64([[3, 5], [0, 0], [-2, 1]])}),
     {"Reshape": 3, "Concat": 1, "Gather": 1}, 0.0, {}),
    ("maxpool3d_to_2d", _pool3d("MaxPool", kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
     {"Reshape": 3, "MaxPool": 2}, 0.0, {}),
    ("maxpool3d_to_2d", _pool3d("MaxPool", kernel_shape=[2, 3, 2], strides=[2, 2, 3], pads=[0, 1, 0, 1, 0, 1], ceil_mode=1,
                                dilations=[1, 2, 1]), {"Reshape": 3, "MaxPool": 2}, 0.0, {}),
    ("maxpool3d_to_2d", _pool3d("MaxPool", kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
     {"Reshape": 3, "MaxPool": 1}, 0.0, {}),
    ("averagepool3d_to_2d", _pool3d("AveragePool", kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
     {"Reshape": 3, "AveragePool": 2}, 1e-6, {}),
    ("averagepool3d_to_2d", _pool3d("AveragePool", kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                    count_include_pad=1), {"Reshape": 3, "AveragePool": 2}, 1e-6, {}),
    ("averagepool3d_to_2d", _pool3d("AveragePool", kernel_shape=[2, 3, 4], strides=[2, 2, 3], pads=[0, 1, 1, 1, 0, 1],
                                    ceil_mode=1, count_include_pad=1), {"Reshape": 3, "AveragePool": 2}, 1e-6, {}),
    ("averagepool3d_to_2d", _pool3d("AveragePool", kernel_shape=[2, 3, 4], strides=[2, 2, 3], pads=[0, 1, 1, 1, 0, 1],
                                    ceil_mode=1), {"Reshape": 3, "AveragePool": 2}, 1e-6, {}),
    # MaxViT's attention bias, Add(b[1536], x[1, 1, 49, 1536]): the broadcast operand second
    *[(f"{op.lower()}_operands_swapped", make_model([N(op, ["c", "x"], ["y"])], {"x": [1, 1, 7, 16]}, {"c": rnd(16)}),
       {op: 1}, 0.0, {}) for op in ("Add", "Mul", "Max", "Min")],
    ("sub_operands_swapped", make_model([N("Sub", ["c", "x"], ["y"])], {"x": [2, 1, 7, 16]}, {"c": rnd(1, 16)}),
     {"Sub": 1, "Neg": 1}, 0.0, {}),
    # DeepLabV3's rate-12 ASPP branch on a 4x4 map: only the centre tap reads x
    ("conv_drop_padding_taps", make_model([N("Conv", ["x", "w", "b"], ["y"], dilations=[12, 12], pads=[12] * 4)],
                                          {"x": [1, 6, 4, 4]}, {"w": rnd(5, 6, 3, 3), "b": rnd(5, seed=2)}),
     {"Conv": 1}, 1e-6, {}),
    # a 5x5 kernel on a 2x2 map (MobileNetV3's last stage at 64x64), columns strided: rows keep
    # taps 1..3 (pads 1, 1), columns 2..3 (pads 0, 1)
    ("conv_drop_padding_taps", make_model([N("Conv", ["x", "w"], ["y"], pads=[2, 2, 2, 2], strides=[1, 2])],
                                          {"x": [1, 3, 2, 2]}, {"w": rnd(4, 3, 5, 5)}), {"Conv": 1}, 1e-6, {}),
]


@pytest.mark.parametrize("rule_name, model, expected, atol, feed_opts", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_matches_onnxruntime(rule_name, model, expected, atol, feed_opts):
    assert_rule_matches(rule_name, model, expected, atol, feed_opts)


def _why(rule_name, model):
    graph = to_graph(model)
    node = next(n for n in graph.nodes if n.op == REGISTRY[rule_name].op)
    return REGISTRY[rule_name].why_not(node, graph)


def test_declines_with_reasons():
    dup = make_model([N("ScatterND", ["x", "i", "u"], ["y"])], {"x": [4, 6], "u": [2]}, {"i": np.int64([[1, 1], [1, 1]])})
    assert "indices repeat" in _why("scatternd_to_flat_gather", dup)
    add = make_model([N("ScatterND", ["x", "i", "u"], ["y"], reduction="add")], {"x": [4, 6], "u": [1]},
                     {"i": np.int64([[1, 1]])}, opset=18)
    assert _why("scatternd_to_flat_gather", add) == "ScatterND with a reduction"
    same = make_model([N("SpaceToDepth", ["x"], ["a"], blocksize=1), N("Expand", ["a", "s"], ["b"]),
                       N("Conv", ["b", "w"], ["y"])], {"x": [1, 3, 1, 1]}, {"s": np.int64([1, 3, 4, 4]), "w": rnd(2, 3, 1, 1)})
    assert _why("remove_broadcast_expand", same) == "read by Conv, which does not broadcast"
    four = make_model([N("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])], X4,
                      {k: np.ones(3, np.float32) for k in "gbmv"})
    assert _why("batchnorm_to_4d", four) == "input is 4-D"
    same_pad = _pool3d("MaxPool", kernel_shape=[3, 3, 3], auto_pad="SAME_UPPER")
    assert _why("maxpool3d_to_2d", same_pad) == "pads come from auto_pad SAME_*"


def test_dropped_taps_shrink_the_kernel_and_its_pads():
    model = CASES[[c[0] for c in CASES].index("conv_drop_padding_taps")][1]
    conv = apply_rule(model, "conv_drop_padding_taps").graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert attrs["kernel_shape"] == [1, 1] and attrs["pads"] == [0, 0, 0, 0]
    negative = make_model([N("Conv", ["x", "w"], ["y"], pads=[5, 5, 0, 0], dilations=[4, 4])], {"x": [1, 3, 4, 4]},
                          {"w": rnd(4, 3, 3, 3)})  # keeps tap 2 only, which sits 3 rows inside x
    assert _why("conv_drop_padding_taps", negative) == "the trimmed kernel would need negative pads"
    plain = make_model([N("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": [1, 3, 5, 5]}, {"w": rnd(4, 3, 3, 3)})
    assert _why("conv_drop_padding_taps", plain) == "every tap reads the input"


def test_scatter_with_a_non_slab_pattern_takes_the_flat_form():
    model = make_model([N("ScatterND", ["x", "i", "u"], ["y"])], {"x": [4, 6], "u": [3]}, {"i": np.int64([[3, 5], [0, 0], [2, 1]])})
    assert _why("scatternd_to_concat_gather", model) == "the updates are not whole slabs along one axis"
    assert _why("scatternd_to_flat_gather", model) is None


# ------------------------------------------------------------------ the ONNX function safety net

F = {"x": (TensorProto.FLOAT, [2, 3, 4, 5])}


def _typed_model(node, inputs, inits=None, outputs=("y",)):
    ins = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    graph = helper.make_graph([node], "g", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


#: One single-node model per op with an inline rule (opset 17).
FUNCTION_MODELS = {
    "Celu": _typed_model(N("Celu", ["x"], ["y"], alpha=1.7), F),
    "Elu": _typed_model(N("Elu", ["x"], ["y"], alpha=0.6), F),
    "Selu": _typed_model(N("Selu", ["x"], ["y"]), F),
    "Softsign": _typed_model(N("Softsign", ["x"], ["y"]), F),
    "Softplus": _typed_model(N("Softplus", ["x"], ["y"]), F),
    "Shrink": _typed_model(N("Shrink", ["x"], ["y"], lambd=0.7, bias=0.2), F),
    "ThresholdedRelu": _typed_model(N("ThresholdedRelu", ["x"], ["y"], alpha=0.4), F),
    "HardSigmoid": _typed_model(N("HardSigmoid", ["x"], ["y"], alpha=0.3), F),
    "HardSwish": _typed_model(N("HardSwish", ["x"], ["y"]), F),
    "LeakyRelu": _typed_model(N("LeakyRelu", ["x"], ["y"], alpha=0.2), F),
    "Relu": _typed_model(N("Relu", ["x"], ["y"]), F),
    "PRelu": _typed_model(N("PRelu", ["x", "s"], ["y"]), F, {"s": rnd(3, 1, 1, seed=3)}),
    "Clip": _typed_model(N("Clip", ["x", "lo", "hi"], ["y"]), F, {"lo": np.float32(-0.5), "hi": np.float32(1.5)}),
    "Softmax": _typed_model(N("Softmax", ["x"], ["y"], axis=2), F),
    "LogSoftmax": _typed_model(N("LogSoftmax", ["x"], ["y"]), F),
    "LayerNormalization": _typed_model(N("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-3), F,
                                       {"g": rnd(5, seed=1), "b": rnd(5, seed=2)}),
    "MeanVarianceNormalization": _typed_model(N("MeanVarianceNormalization", ["x"], ["y"]), F),
    "GreaterOrEqual": _typed_model(N("GreaterOrEqual", ["x", "z"], ["y"]), {**F, "z": (TensorProto.FLOAT, [5])}),
    "LessOrEqual": _typed_model(N("LessOrEqual", ["x", "z"], ["y"]), {**F, "z": (TensorProto.FLOAT, [5])}),
    "CastLike": _typed_model(N("CastLike", ["x", "t"], ["y"]), F, {"t": np.zeros(1, np.int32)}),
    "BlackmanWindow": _typed_model(N("BlackmanWindow", ["n"], ["y"]), {}, {"n": np.int64(10)}),
    "HammingWindow": _typed_model(N("HammingWindow", ["n"], ["y"], periodic=0), {}, {"n": np.int64(9)}),
    "HannWindow": _typed_model(N("HannWindow", ["n"], ["y"]), {}, {"n": np.int64(8)}),
}
INLINE_RULES = sorted(r.name for r in REGISTRY.values() if r.name.startswith("inline_"))


@pytest.mark.parametrize("rule_name", INLINE_RULES)
def test_function_body_inlined_matches_onnxruntime(rule_name):
    op = REGISTRY[rule_name].op
    model = FUNCTION_MODELS[op]
    feeds = {i.name: (np.random.default_rng(5).standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]) * 2)
             .astype(np.float32) for i in model.graph.input}
    before = run(model, feeds)
    rewritten = apply_rule(model, rule_name)
    onnx.checker.check_model(rewritten)
    hist = op_histogram(rewritten)
    assert op not in hist and "Constant" not in hist and "CastLike" not in hist, hist
    assert set(hist) <= set(REGISTRY[rule_name].emits) | {"Identity"}, (hist, REGISTRY[rule_name].emits)
    assert [o.name for o in rewritten.graph.output] == [o.name for o in model.graph.output]
    for a, b in zip(before, run(rewritten, feeds)):
        assert a.shape == b.shape and a.dtype == b.dtype
        err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
        assert err <= 1e-5 * max(1.0, float(np.max(np.abs(a.astype(np.float64))))), f"{rule_name}: {err:.3g}"


def test_function_ops_have_inline_rules():
    ops = {REGISTRY[r].op for r in INLINE_RULES}
    assert {"Selu", "Softsign", "Shrink", "ThresholdedRelu", "Celu", "MeanVarianceNormalization", "GreaterOrEqual",
            "LessOrEqual", "Elu"} <= ops
    assert set(FUNCTION_MODELS) == ops  # each one tested above
    assert not ops & {"Bernoulli", "DynamicQuantizeLinear"}  # random; a body of other output shapes


RULES_TESTED = {c[0] for c in CASES} | set(INLINE_RULES)

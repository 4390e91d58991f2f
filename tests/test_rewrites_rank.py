"""Rank lowering (converter/legalize/rewrites/rank.py): every rule against onnxruntime, bit for bit, with
every tensor of the result at rank <= 4; the attention / Swin patterns real models make; and the
planner's promise that data movement never becomes a custom layer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.ir.graph import op_histogram
from converter.legalize.rewrites import REGISTRY, apply_rule
from converter.legalize.rewrites.rank import BROADCAST, LOWERED_OPS, REDUCE, SAME_ORDER, SOFTMAX, UNARY

N = helper.make_node
#: The rules this module proves (tests/test_rewrites_rules.py checks every registered rule is proved).
RULES_TESTED = ({f"lower_rank_{op.lower()}" for op in LOWERED_OPS} | {"gather_scalar_to_slice"}
                | {"attention_qkv_split_at_reshape", "attention_qkv_split_at_transpose"})


def model_of(nodes, inputs, inits=None, opset=17, out_dtype=TensorProto.FLOAT, in_dtype=TensorProto.FLOAT):
    ins = [helper.make_tensor_value_info(n, in_dtype, s) for n, s in inputs.items()]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", out_dtype, None)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)


def feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    init = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in init:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def run(model, feed):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feed)


def ranks(model) -> dict[str, int]:
    """Rank of every tensor of ``model`` (shapes re-inferred)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    infos = list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)
    out = {v.name: len(v.type.tensor_type.shape.dim) for v in infos}
    out.update({t.name: len(t.dims) for t in inferred.graph.initializer})
    return out


def assert_lowered(model, rule_name, max_err=0.0):
    """Apply ``rule_name``; the result equals the original (max abs error <= max_err) and every
    tensor has rank <= 4.  Returns the rewritten model."""
    feed = feeds(model)
    before = run(model, feed)
    out = apply_rule(model, rule_name)
    onnx.checker.check_model(out, full_check=True)
    after = run(out, feed)
    for b, a in zip(before, after):
        assert a.shape == b.shape and a.dtype == b.dtype
        diff = np.atleast_1d(np.abs(a.astype(np.float64) - b.astype(np.float64)))
        diff[np.atleast_1d(np.isnan(a) & np.isnan(b))] = 0.0  # Log/Sqrt of negatives: NaN in both
        err = float(np.max(diff)) if a.size else 0.0
        assert err <= max_err, f"{rule_name}: max abs error {err:.3g}"
    high = {k: r for k, r in ranks(out).items() if r > 4}
    assert not high, f"{rule_name} left tensors of rank > 4: {high}"
    return out


X4 = {"x": [2, 3, 4, 5]}
UNSQ = N("Unsqueeze", ["x", "ax1"], ["u"])                 # [2, 1, 3, 4, 5]
BACK = N("Reshape", ["v", "shape4"], ["y"])               # back to [2, 3, 4, 5]
BASE = {"ax1": np.int64([1]), "shape4": np.int64([2, 3, 4, 5])}


def _wrap(op_node, extra=None, x=X4, back=BACK):
    return model_of([UNSQ, op_node, back], x, {**BASE, **(extra or {})})


def _case(op):
    """A rank-5 component through ``op`` (x → Unsqueeze → op → back to rank 4)."""
    if op in SAME_ORDER:
        if op == "Reshape":
            node = N("Reshape", ["u", "s5"], ["v"])
            return _wrap(node, {"s5": np.int64([2, 3, 1, 4, 5])})
        if op == "Flatten":
            return model_of([UNSQ, N("Flatten", ["u"], ["y"], axis=2)], X4, BASE)
        if op == "Squeeze":
            return model_of([UNSQ, N("Squeeze", ["u", "ax1"], ["y"])], X4, BASE)
        if op == "Unsqueeze":
            return model_of([N("Unsqueeze", ["x", "ax1"], ["u"]), N("Relu", ["u"], ["r"]), N("Reshape", ["r", "shape4"], ["y"])],
                            X4, BASE)
        return _wrap(N("Identity", ["u"], ["v"]))
    if op in UNARY:
        attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        if op == "Not":
            return model_of([N("Greater", ["x", "zero"], ["b"]), N("Unsqueeze", ["b", "ax1"], ["u"]), N("Not", ["u"], ["v"]),
                             N("Reshape", ["v", "shape4"], ["y"])], X4, {**BASE, "zero": np.float32(0)},
                            out_dtype=TensorProto.BOOL)
        return _wrap(N(op, ["u"], ["v"], **attrs))
    if op in BROADCAST:
        rng = np.random.default_rng(3)
        c = (rng.standard_normal((1, 1, 3, 1, 5)) + 2.0).astype(np.float32)
        if op in ("And", "Or", "Xor"):
            return model_of([N("Greater", ["x", "zero"], ["b"]), N("Unsqueeze", ["b", "ax1"], ["u"]),
                             N("Less", ["c", "zero"], ["cb"]), N(op, ["u", "cb"], ["v"]),
                             N("Reshape", ["v", "shape4"], ["y"])], X4, {**BASE, "zero": np.float32(0), "c": c},
                            out_dtype=TensorProto.BOOL)
        if op in ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"):
            return model_of([UNSQ, N(op, ["u", "c"], ["v"]), BACK], X4, {**BASE, "c": c}, out_dtype=TensorProto.BOOL)
        if op == "Where":
            return model_of([UNSQ, N("Greater", ["u", "zero"], ["b"]), N("Where", ["b", "u", "c"], ["v"]), BACK], X4,
                            {**BASE, "zero": np.float32(0), "c": c})
        if op == "Clip":
            return _wrap(N("Clip", ["u", "lo", "hi"], ["v"]), {"lo": np.float32(-0.5), "hi": np.float32(0.7)})
        if op == "Pow":
            return model_of([UNSQ, N("Abs", ["u"], ["a"]), N("Pow", ["a", "c"], ["v"]), BACK], X4, {**BASE, "c": c})
        if op == "Mod":
            return _wrap(N("Mod", ["u", "c"], ["v"], fmod=1), {"c": c})
        if op == "PRelu":
            return _wrap(N("PRelu", ["u", "c"], ["v"]), {"c": c})
        return _wrap(N(op, ["u", "c"], ["v"]), {"c": c})
    if op in REDUCE:
        node = (N(op, ["u", "axes"], ["v"], keepdims=1) if op == "ReduceSum"
                else N(op, ["u"], ["v"], axes=[1, 3], keepdims=1))
        back = N("Reshape", ["v", "shape3"], ["y"])
        return model_of([UNSQ, node, back], X4, {**BASE, "axes": np.int64([1, 3]), "shape3": np.int64([2, 3, 5])})
    if op in SOFTMAX:
        return _wrap(N(op, ["u"], ["v"], axis=3))
    if op == "Transpose":
        return model_of([UNSQ, N("Transpose", ["u"], ["v"], perm=[3, 0, 4, 1, 2]), N("Reshape", ["v", "s"], ["y"])],
                        X4, {**BASE, "s": np.int64([4, 2, 5, 3])})
    if op == "Gather":
        return model_of([UNSQ, N("Gather", ["u", "i"], ["y"], axis=3)], X4, {**BASE, "i": np.int64(2)})
    if op == "Slice":
        return model_of([UNSQ, N("Slice", ["u", "st", "en", "ax", "sp"], ["v"]), N("Reshape", ["v", "s"], ["y"])], X4,
                        {**BASE, "st": np.int64([3, 1]), "en": np.int64([-100, 5]), "ax": np.int64([3, 4]),
                         "sp": np.int64([-2, 2]), "s": np.int64([2, 3, 2, 2])})
    if op == "Concat":
        return model_of([UNSQ, N("Concat", ["u", "u"], ["v"], axis=3), N("Reshape", ["v", "s"], ["y"])], X4,
                        {**BASE, "s": np.int64([2, 3, 8, 5])})
    if op == "Split":
        return model_of([UNSQ, N("Split", ["u", "sp"], ["a", "b"], axis=3), N("Add", ["a", "a"], ["v"]),
                         N("Reshape", ["v", "s"], ["y"])], X4, {**BASE, "sp": np.int64([1, 3]), "s": np.int64([2, 3, 1, 5])})
    if op == "MatMul":
        w = np.random.default_rng(4).standard_normal((5, 6)).astype(np.float32)
        return model_of([UNSQ, N("MatMul", ["u", "w"], ["v"]), N("Reshape", ["v", "s"], ["y"])], X4,
                        {**BASE, "w": w, "s": np.int64([2, 3, 4, 6])})
    if op == "LayerNormalization":
        g = np.random.default_rng(5).standard_normal((4, 5)).astype(np.float32)
        return _wrap(N(op, ["u", "g", "g"], ["v"], axis=3, epsilon=1e-5), {"g": g})
    if op in ("ArgMax", "ArgMin"):
        return model_of([UNSQ, N(op, ["u"], ["y"], axis=3, keepdims=0)], X4, BASE, out_dtype=TensorProto.INT64)
    if op == "Expand":
        return model_of([UNSQ, N("Expand", ["u", "es"], ["v"]), N("Reshape", ["v", "s"], ["y"])], X4,
                        {**BASE, "es": np.int64([2, 2, 3, 4, 5]), "s": np.int64([4, 3, 4, 5])})
    raise AssertionError(f"no case for {op}")


#: (max abs error allowed): ops computed on the same numbers in another arrangement are bit-exact,
#: except reductions and matmuls whose summation order may change.
_SUM_ORDER = set(REDUCE) | {"MatMul", "LayerNormalization", "Softmax", "LogSoftmax"}


@pytest.mark.parametrize("op", LOWERED_OPS)
def test_every_lower_rank_rule_is_exact(op):
    name = f"lower_rank_{op.lower()}"
    assert name in REGISTRY
    out = assert_lowered(_case(op), name, 1e-6 if op in _SUM_ORDER else 0.0)
    assert REGISTRY[name].kind == "exact"
    assert op_histogram(out)  # the rewritten graph is not empty


# ----------------------------------------------------------------------------------------------
# The patterns real models make


def qkv_attention_model(batch=1, tokens=6, heads=2, dim=4, seed=0, bias=False):
    """timm-style attention: qkv = x @ W  → Reshape [B, N, 3, h, d] → Transpose(2,0,3,1,4) →
    Gather 0/1/2 → softmax(q kᵀ) v → [B, N, C]."""
    rng = np.random.default_rng(seed)
    c = heads * dim
    w = rng.standard_normal((c, 3 * c)).astype(np.float32) * 0.3
    nodes = ([N("MatMul", ["x", "w"], ["qkv0"]), N("Add", ["b", "qkv0"], ["qkv"])] if bias
             else [N("MatMul", ["x", "w"], ["qkv"])]) + [N("Reshape", ["qkv", "s5"], ["q5"]),
             N("Transpose", ["q5"], ["t5"], perm=[2, 0, 3, 1, 4]),
             N("Gather", ["t5", "i0"], ["q"], axis=0), N("Gather", ["t5", "i1"], ["k"], axis=0),
             N("Gather", ["t5", "i2"], ["v"], axis=0),
             N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["a"]),
             N("Softmax", ["a"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["o"]),
             N("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), N("Reshape", ["ot", "s3"], ["y"])]
    inits = {"w": w, "b": rng.standard_normal(3 * c).astype(np.float32),
             "s5": np.int64([batch, tokens, 3, heads, dim]), "s3": np.int64([batch, tokens, c]),
             "i0": np.int64(0), "i1": np.int64(1), "i2": np.int64(2)}
    return model_of(nodes, {"x": [batch, tokens, c]}, inits)


@pytest.mark.parametrize("batch", [1, 2])
def test_qkv_split_lowers_to_rank_3(batch):
    out = assert_lowered(qkv_attention_model(batch=batch), "lower_rank_transpose")
    hist = op_histogram(out)
    # batch 1: Reshape [N, 3h, d] → Transpose(1,0,2) → one [1, 3, h·N·d] view → 3 × (Slice + Reshape)
    assert hist["Slice"] == 3 and "Gather" not in hist
    assert hist["Reshape"] == (2 + 3 + 1 if batch == 1 else hist["Reshape"])
    assert max(r for r in ranks(out).values()) == 4


@pytest.mark.parametrize("anchor", ["reshape", "transpose"])
@pytest.mark.parametrize("batch, bias", [(1, True), (2, False)])
def test_attention_qkv_split(anchor, batch, bias):
    """The packed projection becomes three: no rank-5 tensor, no Gather, bit-identical."""
    model = qkv_attention_model(batch=batch, bias=bias)
    out = assert_lowered(model, f"attention_qkv_split_at_{anchor}")
    hist = op_histogram(out)
    assert hist["MatMul"] == 3 + 2 and hist.get("Add", 0) == (3 if bias else 0) and "Gather" not in hist
    assert max(ranks(out).values()) == 4
    # the generic lowering costs more: the planner prefers the split
    from converter.legalize.plan import ChainSearch
    from converter.ir.graph import to_graph

    from converter.frontend.normalize import normalize

    g = to_graph(normalize(model))  # (named nodes: the planner tries a rule on a copy, found by name)
    node = next(n for n in g.nodes if n.op == anchor.capitalize() and len(n.outputs[0].shape) == 5)
    assert ChainSearch(_Rank4(), "fw", "hw").for_node(node, g)[1] == [f"attention_qkv_split_at_{anchor}"]


def test_attention_qkv_split_declines_with_reasons():
    from converter.ir.graph import to_graph

    model = qkv_attention_model()
    model.graph.node[3].input[1] = "i2"  # q taken twice is fine; now break the perm instead
    g = to_graph(model)
    g.nodes[2].attrs["perm"] = [2, 0, 1, 3, 4]
    reshape = g.nodes[1]
    assert REGISTRY["attention_qkv_split_at_reshape"].why_not(reshape, g) == \
        "the reshaped qkv is not read by one Transpose(2, 0, 3, 1, 4)"
    g = to_graph(model_of([N("Reshape", ["x", "s"], ["y"])], {"x": [1, 6, 24]}, {"s": np.int64([1, 6, 2, 3, 4])}))
    assert REGISTRY["attention_qkv_split_at_reshape"].why_not(g.nodes[0], g) == "not a Reshape to [B, N, 3, heads, dim]"


class _Rank4:
    """The real matrix's rank rule alone: every tensor must have rank <= 4."""

    def supports_op(self, framework, hw, op):
        return True

    def check_node(self, node, framework, hw):
        from converter.matrix import NodeVerdict

        high = [t.name for t in list(node.inputs) + list(node.outputs) if t.shape is not None and len(t.shape) > 4]
        return NodeVerdict(node.name, node.op, "unsupported" if high else "supported", f"rank > 4: {high}")


def swin_window_model(batch=1, size=4, window=2, channels=3):
    """Swin's window partition ([B,H,W,C] → [B,H/w,w,W/w,w,C] → Transpose(0,1,3,2,4,5) →
    [-1, w, w, C]), a per-window op, and the reverse."""
    hw = size // window
    nodes = [N("Reshape", ["x", "s6"], ["a"]), N("Transpose", ["a"], ["b"], perm=[0, 1, 3, 2, 4, 5]),
             N("Reshape", ["b", "win"], ["w"]), N("Sigmoid", ["w"], ["ws"]),
             N("Reshape", ["ws", "s6b"], ["c"]), N("Transpose", ["c"], ["d"], perm=[0, 1, 3, 2, 4, 5]),
             N("Reshape", ["d", "s4"], ["y"])]
    inits = {"s6": np.int64([batch, hw, window, hw, window, channels]), "win": np.int64([-1, window, window, channels]),
             "s6b": np.int64([batch, hw, hw, window, window, channels]),
             "s4": np.int64([batch, size, size, channels])}
    return model_of(nodes, {"x": [batch, size, size, channels]}, inits)


@pytest.mark.parametrize("batch", [1, 2])
def test_swin_window_partition_and_reverse_lower_to_rank_4(batch):
    model = swin_window_model(batch=batch)
    partitioned = apply_rule(model, "lower_rank_reshape")  # the partition's component
    assert {k for k, r in ranks(partitioned).items() if r > 4} == {"c", "d"}
    out = apply_rule(partitioned, "lower_rank_reshape")    # the reverse's
    assert max(ranks(out).values()) == 4
    feed = feeds(model)
    assert np.array_equal(run(out, feed)[0], run(model, feed)[0])
    hist = op_histogram(out)
    assert hist["Transpose"] == 2 and hist["Sigmoid"] == 1


def test_swin_shifted_window_mask_add_and_softmax():
    """attn.view(B, nW, h, N, N) + mask[1, nW, 1, N, N] → view(-1, h, N, N) → Softmax."""
    rng = np.random.default_rng(1)
    mask = np.where(rng.random((1, 4, 1, 6, 6)) > 0.5, 0.0, -100.0).astype(np.float32)
    nodes = [N("Reshape", ["x", "s5"], ["a"]), N("Add", ["a", "mask"], ["b"]),
             N("Reshape", ["b", "s4"], ["c"]), N("Softmax", ["c"], ["y"], axis=-1)]
    model = model_of(nodes, {"x": [8, 2, 6, 6]},
                     {"s5": np.int64([2, 4, 2, 6, 6]), "mask": mask, "s4": np.int64([-1, 2, 6, 6])})
    out = assert_lowered(model, "lower_rank_add")
    assert op_histogram(out) == {"Add": 1, "Reshape": 2, "Softmax": 1}


def test_rank_6_transpose_without_mergeable_axes_uses_rank_4_block_moves():
    shape = [2, 3, 2, 3, 2, 3]
    nodes = [N("Reshape", ["x", "s6"], ["a"]), N("Transpose", ["a"], ["b"], perm=[5, 3, 1, 4, 2, 0]),
             N("Reshape", ["b", "s2"], ["y"])]
    model = model_of(nodes, {"x": [12, 18]}, {"s6": np.int64(shape), "s2": np.int64([27, 8])})
    out = assert_lowered(model, "lower_rank_transpose")
    transposes = [n for n in out.graph.node if n.op_type == "Transpose"]
    assert 2 <= len(transposes) <= 5  # one block move per output position at most


def test_rank_lowering_declines_with_reasons():
    from converter.ir.graph import to_graph

    # a rank-5 graph output cannot be lowered away
    model = model_of([N("Unsqueeze", ["x", "ax1"], ["y"])], X4, BASE)
    g = to_graph(model)
    assert REGISTRY["lower_rank_unsqueeze"].why_not(g.nodes[0], g) == "graph input/output y has rank 5"
    # an op without a rank lowering (a 3-D convolution) in the component
    w = np.ones((2, 1, 1, 1, 1), np.float32)
    model = model_of([UNSQ, N("Conv", ["u", "w"], ["v"]), N("Reshape", ["v", "s"], ["y"])], X4,
                     {**BASE, "w": w, "s": np.int64([2, 2, 4, 5])})
    g = to_graph(model)
    why = REGISTRY["lower_rank_unsqueeze"].why_not(g.nodes[0], g)
    assert why.startswith("Conv (") and "has no rank lowering" in why
    # nothing of rank > 4
    model = model_of([N("Relu", ["x"], ["y"])], X4)
    g = to_graph(model)
    assert REGISTRY["lower_rank_relu"].why_not(g.nodes[0], g) == "no tensor of rank > 4"


@pytest.mark.parametrize("shape, axis, index", [([2, 3, 4, 5], 1, -1), ([6, 7], 1, 3), ([5], 0, 2), ([1, 6, 8], 1, 0)])
def test_gather_scalar_to_slice(shape, axis, index):
    model = model_of([N("Gather", ["x", "i"], ["y"], axis=axis)], {"x": shape}, {"i": np.int64(index)})
    out = assert_lowered(model, "gather_scalar_to_slice")
    hist = op_histogram(out)
    assert hist["Slice"] == 1 and "Gather" not in hist
    slice_in = next(n for n in out.graph.node if n.op_type == "Slice").input[0]
    assert ranks(out)[slice_in] == max(3, len(shape))  # the GPU delegate slices rank 3-4 only


def _long_rank5_component(k: int) -> onnx.ModelProto:
    """x -> Reshape to rank 5 -> k elementwise ops (rank 5) -> Reshape back: one component of
    rank-5 tensors k + 2 nodes long, beyond the planner's CONTEXT_RADIUS."""
    s5 = numpy_helper.from_array(np.array([1, 2, 3, 4, 5], np.int64), "s5")
    s4 = numpy_helper.from_array(np.array([1, 6, 4, 5], np.int64), "s4")
    nodes = [helper.make_node("Reshape", ["x", "s5"], ["r0"], name="to_rank5")]
    nodes += [helper.make_node("Relu" if i % 2 else "Neg", [f"r{i}"], [f"r{i + 1}"], name=f"act{i}") for i in range(k)]
    nodes += [helper.make_node("Reshape", [f"r{k}", "s4"], ["y"], name="to_rank4")]
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4, 5])], [s5, s4])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def test_a_component_longer_than_the_planners_context_lowers_whole():
    """Found by real_zoo (maxvit_t on tflite:gpu): the planner tried lower_rank_* on a copy of
    the node's neighbourhood, which cut a long rank-5 component, and the rule failed inside the
    trial ("no producer in the component").  The copy now holds all the rule rewrites."""
    from converter.legalize.apply import legalize

    model = _long_rank5_component(12)
    result = legalize(model, "tflite", "gpu")
    assert result.unresolved == []
    assert op_histogram(result.model) == {"Neg": 6, "Relu": 6}  # the two Reshapes cancel out
    assert result.max_abs_error == 0.0

"""HF's boolean attention mask as float arithmetic (converter/legalize/rewrites/bool_mask.py):
TNN's x86 and MACE's CPU kernels have no bool tensors and no Where, so the mask DistilBERT, BERT
and MobileBERT build from their int64 ``attention_mask`` becomes Cast/Abs/Min/Gather/Mul/Sub/Clip
on {0, 1} floats, and the softmax's NaN guard is dropped because the mask is finite.  The files
run in ``tnn_run`` and ``mace_run`` and match onnxruntime on the original model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.port import port
from rank_runtimes import MACE_RUN, TNN_RUN, need

#: The rules this file runs (test_rewrites_rules.py checks every registered rule is run somewhere).
RULES_TESTED = {"bool_mask_as_arithmetic"}
LENGTH, HEADS, DIM = 8, 2, 4
FLT_MIN = float(np.finfo(np.float32).min)


def hf_mask_model(low: float = FLT_MIN, length: int = LENGTH) -> onnx.ModelProto:
    """Attention as torch exports HF's encoders: ``Where(And(k, GatherND(Cast(mask, bool))), 0,
    low)`` added to ``q @ k``, Softmax, and SDPA's guard ``Where(IsNaN(p), 0, p)``."""
    pick = np.stack([np.zeros(length, np.int64), np.arange(length)], -1).reshape(1, 1, 1, length, 2)
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.BOOL),
        helper.make_node("GatherND", ["m", "pick"], ["keys"]),                    # [1, 1, 1, L]
        helper.make_node("And", ["rows", "keys"], ["attend"]),                    # [1, 1, L, L]
        helper.make_node("Where", ["attend", "zero", "low"], ["bias"]),
        helper.make_node("MatMul", ["q", "k"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["output"]),
    ]
    inits = {"pick": pick, "rows": np.ones((1, 1, length, 1), bool), "zero": np.zeros((), np.float32),
             "low": np.array(low, np.float32)}
    graph = helper.make_graph(
        nodes, "hf_mask",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, length]),
         helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, HEADS, length, DIM]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, HEADS, DIM, length])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, HEADS, length, length])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(mask, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"attention_mask": np.array([mask], np.int64),
            "q": rng.standard_normal((1, HEADS, LENGTH, DIM)).astype(np.float32),
            "k": rng.standard_normal((1, HEADS, DIM, LENGTH)).astype(np.float32)}


def test_the_rule_is_exact_in_onnxruntime():
    """The rewritten mask (bool nodes left unused: cleanup drops them) gives the same output as the
    original, bit for bit but the sign of zero, on any integer mask, fully masked rows included
    (finite, so no NaN for the guard to catch)."""
    from converter.legalize.rewrites import apply_rule
    from converter.runtimes.onnxruntime import onnx_runner

    model = hf_mask_model()
    rewritten = apply_rule(onnx.shape_inference.infer_shapes(model), "bool_mask_as_arithmetic")
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Where") == 1 and ops.count("Clip") == 1 and "Gather" in ops  # the guard's Where stays
    before, after = onnx_runner(model), onnx_runner(rewritten)
    for seed, mask in enumerate(([1] * 6 + [0] * 2, [0] * LENGTH, [5, -1, 0, 2, 0, 1, 1, -7])):
        feeds = _feeds(mask, seed)
        want, got = before(feeds)["output"], after(feeds)["output"]
        assert np.array_equal(want, got) and not np.isnan(got).any()


@pytest.mark.parametrize("to, hw, run", [("tnn", "x86", TNN_RUN), ("mace", "cpu", MACE_RUN)])
def test_hf_mask_runs_in_the_real_runtime(tmp_path, to, hw, run):
    """No custom layer left: the mask is 9 float ops, no guard, and the file's outputs match
    onnxruntime's on padded, unpadded and nonzero-but-not-one masks."""
    from converter.runtimes.onnxruntime import onnx_runner
    from converter.targets.oracles import bind, resolve
    from converter.verify.pipeline import TARGET_FILES, target_artifact

    need(run)
    model = hf_mask_model()
    result = port(model, to=to, hw=hw, out=tmp_path / "out", runtimes={to: str(run)})
    assert result.status == "ok", result.reason
    legalized = onnx.load(str(result.out_dir / "legalized.onnx"))
    ops = sorted(n.op_type for n in legalized.graph.node)
    # the guard of a graph output becomes an Identity (the output keeps its name)
    assert ops == ["Abs", "Add", "Cast", "Clip", "Gather", "Identity", "MatMul", "Min", "Mul", "Mul", "Reshape",
                   "Softmax", "Sub"], ops
    applied = sorted(a["rule"] for a in result.report["applied_rules"])
    assert applied == ["bool_mask_as_arithmetic", "softmax_nan_guard_dropped"]
    main = next(f for f in result.out_dir.iterdir() if f.name.endswith(TARGET_FILES))
    target, artifact = target_artifact(main)
    runner = bind(target, resolve(to, {to: str(run)}, hw))
    reference = onnx_runner(model)
    for seed, mask in enumerate(([1] * 6 + [0] * 2, [1] * LENGTH, [3, 1, -2, 0, 1, 1, 0, 1])):
        feeds = _feeds(mask, seed)
        want, got = reference(feeds)["output"], runner.run(artifact, feeds)["output"]
        hidden = np.array(mask) == 0
        assert (got[..., hidden] == 0).all() and (want[..., hidden] == 0).all()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_infinite_branch_is_left_alone():
    """``Where(mask, 0, -inf)`` (torch's own SDPA mask): ``0 * -inf`` is NaN, so the rule does not
    apply and the plan says why."""
    from converter.legalize.plan import plan_model

    model = hf_mask_model(low=-np.inf)
    for k, node in enumerate(model.graph.node):
        node.name = f"n{k}"
    entry = next(e for e in plan_model(model, "tnn", "x86").entries if e.node == "n3")
    assert entry.op == "Where" and entry.remedy == "custom"
    assert "a branch is infinite (c * inf is NaN where c is 0)" in entry.reason


def test_mace_file_of_a_two_sided_broadcast_is_right_in_mace_run(tmp_path):
    """``const [1,1,L,1] * x [1,1,1,L]``: mace_run's CPU Eltwise computes only the first row when
    both operands broadcast, so the MACE exporter writes the constant at the output's shape."""
    from converter.runtimes.onnxruntime import onnx_runner

    need(MACE_RUN)
    column = np.arange(1, LENGTH + 1, dtype=np.float32).reshape(1, 1, LENGTH, 1)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["column", "x"], ["output"])], "outer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, LENGTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, LENGTH, LENGTH])],
        [numpy_helper.from_array(column, "column")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((1, 1, 1, LENGTH)).astype(np.float32)
    result = port(model, to="mace", out=tmp_path / "out", runtimes={"mace": str(MACE_RUN)})
    assert result.status == "ok" and result.oracle == "MACE CPU runtime (mace_run)", result.reason
    from converter.targets.oracles import bind, resolve
    from converter.verify.pipeline import TARGET_FILES, target_artifact

    main = next(f for f in result.out_dir.iterdir() if f.name.endswith(TARGET_FILES))
    target, artifact = target_artifact(main)
    got = bind(target, resolve("mace", {"mace": str(MACE_RUN)}, "cpu")).run(artifact, {"x": x})["output"]
    np.testing.assert_array_equal(got, onnx_runner(model)({"x": x})["output"])

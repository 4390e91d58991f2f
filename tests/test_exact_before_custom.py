"""Issue 30: where an exact chain exists, the planner takes it and the port runs in the target's
real runtime (LiteRT, tnn_run, mace_run; the CoreML MIL executor), with no custom layer.

Each model holds the patterns that made published architectures custom layers or refusals:
ConvNeXt-V2's ReduceL2, a broadcast Expand (EdgeNeXt, XCiT, Swin-V2), BatchNorm1d on a 3-D tensor
(LeViT, RepViT), PoolFormer's InstanceNorm on [N, 1, C·H·W], YOLOv8-pose's ScatterND keypoint
decoding, S3D's 3-D pools, DeepLabV3's ASPP on a small map (TNN x86), and an op only ONNX's function
body spells (Softsign)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.legalize.plan import plan_model
from converter.port import port
from rank_runtimes import MACE_RUN, TNN_RUN, need

N = helper.make_node


def _model(nodes, x_shape, y_shape, inits, name):
    rng = np.random.default_rng(3)
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(v(rng) if callable(v) else v, k) for k, v in inits.items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def _patterns():
    """x[1, 8, 6, 6] ─► + Expand(channel mean) ─► · ReduceL2 over H, W ─► [1, 8, 36] ─►
    BatchNorm (3-D) ─► [1, 1, 288] ─► InstanceNorm (3-D) ─► [1, 8, 36] ─► ScatterND of the odd
    channels (their sigmoid) ─► y."""
    odd = np.array([[[0, c] for c in range(1, 8, 2)]], np.int64)
    nodes = [
        N("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
        N("Expand", ["m", "full"], ["e"]),
        N("Add", ["x", "e"], ["s"]),
        N("ReduceL2", ["s"], ["g"], axes=[2, 3], keepdims=1),
        N("Mul", ["s", "g"], ["t"]),
        N("Reshape", ["t", "flat"], ["r"]),
        N("BatchNormalization", ["r", "bn_g", "bn_b", "bn_m", "bn_v"], ["b"]),
        N("Reshape", ["b", "one"], ["o"]),
        N("InstanceNormalization", ["o", "in_g", "in_b"], ["i1"]),
        N("Reshape", ["i1", "flat"], ["i"]),
        N("Slice", ["i", "s1", "e8", "ax1", "st2"], ["picked"]),
        N("Sigmoid", ["picked"], ["sig"]),
        N("ScatterND", ["i", "odd", "sig"], ["y"]),
    ]
    inits = {"full": np.int64([1, 8, 6, 6]), "flat": np.int64([1, 8, 36]), "one": np.int64([1, 1, 288]),
             "bn_g": lambda r: r.uniform(0.5, 1.5, 8).astype(np.float32),
             "bn_b": lambda r: r.standard_normal(8).astype(np.float32),
             "bn_m": lambda r: r.standard_normal(8).astype(np.float32),
             "bn_v": lambda r: r.uniform(0.5, 2.0, 8).astype(np.float32),
             "in_g": np.float32([1.3]), "in_b": np.float32([0.2]),
             "s1": np.int64([1]), "e8": np.int64([8]), "ax1": np.int64([1]), "st2": np.int64([2]), "odd": odd}
    return _model(nodes, [1, 8, 6, 6], [1, 8, 36], inits, "patterns")


def _pools_3d():
    """S3D-style: a (1, 3, 3) stride (1, 2, 2) max pool, a (3, 3, 3) stride-1 padded one, and a
    (2, 2, 2) average pool."""
    nodes = [N("MaxPool", ["x"], ["a"], kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
             N("MaxPool", ["a"], ["b"], kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1]),
             N("AveragePool", ["b"], ["y"], kernel_shape=[2, 2, 2], strides=[2, 2, 2])]
    return _model(nodes, [1, 4, 8, 12, 12], [1, 4, 4, 3, 3], {}, "pools3d")


def _aspp():
    """DeepLabV3's ASPP on a 4x4 map: 3x3 convolutions at rates 12 and 24 read only their centre
    tap; TNN's x86 im2col corrupts memory on the other taps."""
    rng = np.random.default_rng(4)
    nodes = [N("Conv", ["x", "w12", "b"], ["a"], dilations=[12, 12], pads=[12] * 4),
             N("Conv", ["x", "w24", "b"], ["c"], dilations=[24, 24], pads=[24] * 4),
             N("Add", ["a", "c"], ["y"])]
    inits = {"w12": rng.standard_normal((8, 16, 3, 3)).astype(np.float32),
             "w24": rng.standard_normal((8, 16, 3, 3)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    return _model(nodes, [1, 16, 4, 4], [1, 8, 4, 4], inits, "aspp")


def _bias_first():
    """MaxViT's window attention: the qkv bias added as Add(b[W], x[1, 1, 49, W]) (constant first)."""
    rng = np.random.default_rng(5)
    nodes = [N("MatMul", ["x", "w"], ["m"]), N("Add", ["b", "m"], ["a"]), N("Mul", ["g", "a"], ["y"])]
    inits = {"w": rng.standard_normal((16, 24)).astype(np.float32), "b": rng.standard_normal(24).astype(np.float32),
             "g": rng.uniform(0.5, 1.5, (1, 1, 1, 24)).astype(np.float32)}
    return _model(nodes, [1, 1, 49, 16], [1, 1, 49, 24], inits, "bias_first")


def _softsign():
    return _model([N("Softsign", ["x"], ["y"])], [1, 4, 5, 6], [1, 4, 5, 6], {}, "softsign")


#: (model, target, hw, the chains the plan must use (first rule per rewritten op))
CASES = [
    (_patterns, "mace", "cpu", {"Expand": "remove_broadcast_expand", "ReduceL2": "reducel2_decompose",
                                "BatchNormalization": "batchnorm_to_4d", "InstanceNormalization": "instancenorm_to_4d",
                                "ScatterND": "scatternd_to_concat_gather"}),
    (_patterns, "tnn", "arm", {"ScatterND": "scatternd_to_concat_gather"}),
    (_patterns, "tflite", "cpu", {}),
    (_pools_3d, "tflite", "cpu", {"MaxPool": "maxpool3d_to_2d", "AveragePool": "averagepool3d_to_2d"}),
    (_pools_3d, "tnn", "x86", {"MaxPool": "maxpool3d_to_2d", "AveragePool": "averagepool3d_to_2d"}),
    (_pools_3d, "mace", "cpu", {"MaxPool": "maxpool3d_to_2d", "AveragePool": "averagepool3d_to_2d"}),
    (_aspp, "tnn", "x86", {"Conv": "conv_drop_padding_taps"}),
    (_aspp, "tflite", "cpu", {}),
    (_bias_first, "tnn", "x86", {"Add": "add_operands_swapped", "Mul": "mul_operands_swapped"}),
    (_bias_first, "tnn", "arm", {"Add": "add_operands_swapped", "Mul": "mul_operands_swapped"}),
    (_softsign, "mace", "cpu", {"Softsign": "inline_softsign_function"}),
    (_softsign, "tflite", "cpu", {"Softsign": "inline_softsign_function"}),
]
RUNTIME = {"tnn": ("TNN x86 runtime (tnn_run)", TNN_RUN), "mace": ("MACE CPU runtime (mace_run)", MACE_RUN),
           "tflite": ("LiteRT", None)}


@pytest.mark.parametrize("build, to, hw, chains", CASES, ids=[f"{c[0].__name__}-{c[1]}-{c[2]}" for c in CASES])
def test_exact_chain_ports_and_runs_in_the_real_runtime(build, to, hw, chains, tmp_path):
    model = build()
    plan = plan_model(model, to, hw)
    assert plan.ok and not plan.by_remedy("custom") and not plan.by_remedy("unsupported")
    assert {e.op: e.rules[0] for e in plan.entries if e.remedy == "rewrite"} == chains
    oracle, tool = RUNTIME[to]
    runtimes = {}
    if tool is not None:
        need(tool)
        runtimes = {to: str(tool)}
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = port(str(path), to=to, hw=hw, out=tmp_path / "out", runtimes=runtimes)
    assert result.status == "ok", result.reason
    assert not result.report.get("custom_layers")
    assert result.oracle.startswith(oracle), result.oracle
    stage = next(s for s in result.verification.stages if s.name.startswith("target:"))
    assert stage.status == "pass"
    assert max(o.metrics.max_abs for o in stage.outputs) < 1e-4


def test_tnn_x86_matrix_rejects_a_tap_that_reads_only_padding():
    from converter.ir.graph import to_graph
    from converter.matrix import load_matrix

    graph, matrix = to_graph(_aspp()), load_matrix()
    conv = graph.nodes[0]
    verdict = matrix.check_node(conv, "tnn", "x86")
    assert not verdict.supported and "kernel tap 0 of spatial axis 0 reads only padding" in verdict.reason
    assert matrix.check_node(conv, "tnn", "arm").supported  # ARM's kernel clips each tap to the input
    assert not plan_model(_aspp(), "tnn", "arm").by_remedy("rewrite")

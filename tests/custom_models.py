"""Seeded ONNX models whose nodes no target supports everywhere: GridSample (all reference-kernel
modes), Einsum (explicit, implicit, ellipsis, diagonal, full reduction) and ``com.example``'s
ScaledTanh, an op of a custom domain that onnxruntime runs through its function body."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

GRID_SAMPLE_MODES = [  # (mode, padding_mode, align_corners)
    ("bilinear", "zeros", 0), ("nearest", "border", 1), ("bilinear", "reflection", 1),
    ("nearest", "reflection", 0), ("bilinear", "border", 0), ("nearest", "zeros", 1),
]
EINSUM_EQUATIONS = ["bij,bjk->bik", "...ij,...jk", "bii->bi", "bij->"]


def _scaled_tanh_function() -> onnx.FunctionProto:
    """com.example.ScaledTanh(x; alpha, beta) = alpha * tanh(beta * x)."""
    alpha = helper.make_node("Constant", [], ["alpha"])
    alpha.attribute.append(onnx.AttributeProto(name="value_float", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT))
    beta = helper.make_node("Constant", [], ["beta"])
    beta.attribute.append(onnx.AttributeProto(name="value_float", ref_attr_name="beta", type=onnx.AttributeProto.FLOAT))
    body = [alpha, beta, helper.make_node("Mul", ["x", "beta"], ["bx"]), helper.make_node("Tanh", ["bx"], ["t"]),
            helper.make_node("Mul", ["t", "alpha"], ["y"])]
    return helper.make_function("com.example", "ScaledTanh", ["x"], ["y"], body,
                                [helper.make_opsetid("", 17)], attributes=["alpha", "beta"])


def custom_ops_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["x_relu"], name="relu")]
    outputs = []
    for k, (mode, pad, align) in enumerate(GRID_SAMPLE_MODES):
        nodes.append(helper.make_node("GridSample", ["x_relu", "grid"], [f"gs{k}"], name=f"grid_sample_{k}",
                                      mode=mode, padding_mode=pad, align_corners=align))
        outputs.append(helper.make_tensor_value_info(f"gs{k}", TensorProto.FLOAT, [1, 3, 5, 4]))
    nodes.append(helper.make_node("Einsum", ["gs0", "w"], ["mixed"], name="einsum_channels", equation="nchw,kc->nkhw"))
    operands = {"bij,bjk->bik": ["a", "b"], "...ij,...jk": ["a", "b"], "bii->bi": ["d"], "bij->": ["a"]}
    shapes = {"bij,bjk->bik": [2, 3, 5], "...ij,...jk": [2, 3, 5], "bii->bi": [2, 4], "bij->": []}
    for k, eq in enumerate(EINSUM_EQUATIONS):
        nodes.append(helper.make_node("Einsum", operands[eq], [f"es{k}"], name=f"einsum_{k}", equation=eq))
        outputs.append(helper.make_tensor_value_info(f"es{k}", TensorProto.FLOAT, shapes[eq]))
    nodes.append(helper.make_node("ScaledTanh", ["mixed"], ["scaled"], name="scaled_tanh", domain="com.example",
                                  alpha=0.5, beta=2.0))
    nodes.append(helper.make_node("Sigmoid", ["scaled"], ["y"], name="sigmoid"))
    graph = helper.make_graph(
        nodes, "custom_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 7]),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 5, 4, 2]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4, 5]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 4]), *outputs],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                              functions=[_scaled_tanh_function()])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def grid_sample_model(seed: int = 0) -> onnx.ModelProto:
    """x -> Relu -> GridSample(bilinear, zeros) -> Sigmoid: the smallest model a target exports."""
    nodes = [helper.make_node("Relu", ["x"], ["x_relu"], name="relu"),
             helper.make_node("GridSample", ["x_relu", "grid"], ["sampled"], name="grid_sample",
                              mode="bilinear", padding_mode="zeros", align_corners=0),
             helper.make_node("Sigmoid", ["sampled"], ["y"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, "grid_sample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 7]),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 5, 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)

"""One-node ONNX models of any opset, run in onnxruntime before and after the opset adapters
(converter/frontend/opsets): the oracle on both sides is onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

RNG = np.random.default_rng(7)


def f32(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def model(op, inputs: dict, consts: dict | None = None, attrs: dict | None = None, opset: int = 20,
          outputs: int | list = 1, out_types=None, order: list[str] | None = None, ir: int | None = None):
    """A model of one ``op`` node: ``inputs`` graph inputs (name -> example array), ``consts``
    initializers (name -> array, or None for an omitted optional input); ``order`` the node's
    input names (default: inputs then consts)."""
    consts = consts or {}
    names = order or [*inputs, *consts]
    outs = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
    types = out_types or [TensorProto.FLOAT] * len(outs)
    node = helper.make_node(op, [n if consts.get(n, 0) is not None else "" for n in names], outs, **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types)],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if v is not None])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = ir or (10 if opset <= 25 else 11)
    return made


def ort_run(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def adapted(m: onnx.ModelProto) -> onnx.ModelProto:
    from converter.ir.graph import to_model
    from converter.frontend.opsets import adapt_to_canonical

    out = onnx.shape_inference.infer_shapes(to_model(adapt_to_canonical(m)))
    onnx.checker.check_model(out)
    return out


def max_error(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        if x.dtype.kind in "iub":
            assert np.array_equal(x, y)
        elif x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst

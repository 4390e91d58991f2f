"""Shared helpers for the TFLite target tests: build small ONNX graphs, run them in onnxruntime and
in LiteRT, and read a written file back with LiteRT itself (independent of our writer)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from converter.targets.base import ExportOptions
from converter.targets.tflite import TARGET


def make_model(nodes, inputs: dict, initializers: dict | None = None, outputs=("y",), opset=17, seed=0):
    """An ONNX model with exact output shapes (taken from onnxruntime), shape-inferred."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, "t", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    feeds = feeds_for(model, seed)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    del model.graph.output[:]
    for name, value in zip(outputs, ref):
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def feeds_for(model, seed=0) -> dict[str, np.ndarray]:
    from converter.frontend.normalize import seeded_inputs

    return seeded_inputs(model, seed)


def reference(model, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def export(model, tmp_path, name="m", **opts):
    return TARGET.export(model, tmp_path, "cpu", ExportOptions(name=name, **opts))


def max_error(ref: dict, got: dict) -> float:
    """Max abs error, relative to the output's scale where outputs are large (>1)."""
    worst = 0.0
    for k, r in ref.items():
        assert got[k].shape == r.shape, (k, got[k].shape, r.shape)
        assert np.array_equal(np.isfinite(got[k]), np.isfinite(r)), f"{k}: non-finite values differ"
        finite = np.isfinite(r)
        scale = max(1.0, float(np.max(np.abs(r[finite]), initial=0.0)))
        worst = max(worst, float(np.max(np.abs(got[k][finite] - r[finite]), initial=0.0)) / scale)
    return worst


def roundtrip(model, tmp_path, name="m", seed=0, **opts):
    """Export, run in LiteRT and onnxruntime: (artifact, max error)."""
    art = export(model, tmp_path, name, **opts)
    feeds = feeds_for(model, seed)
    return art, max_error(reference(model, feeds), TARGET.run(art, feeds))


def litert_ops(path) -> list[dict]:
    """Op details as LiteRT's builtin-only resolver reads the file (no Flex, no delegates): loading
    with this resolver fails if any op is not a builtin, which proves the file is builtin-only."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    return interp._get_ops_details()  # noqa: SLF001 (the interpreter's own op listing)


def op_names(path) -> list[str]:
    return [op["op_name"] for op in litert_ops(path)]


def internal_transposes(path) -> int:
    """TRANSPOSE ops that touch neither a graph input nor a graph output."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    io = {d["index"] for d in interp.get_input_details()} | {d["index"] for d in interp.get_output_details()}
    return sum(
        1 for op in interp._get_ops_details()  # noqa: SLF001
        if op["op_name"] == "TRANSPOSE" and not (set(op["inputs"]) & io) and not (set(op["outputs"]) & io)
    )


def opcodes(path) -> dict[str, int]:
    """builtin name -> version, read from the file's operator_codes (our generated schema)."""
    from converter.targets.tflite._generated import schema_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(open(path, "rb").read(), 0))
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    return {names[c.builtinCode]: c.version for c in model.operatorCodes}

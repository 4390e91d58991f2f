"""Every tensor of a ``.tflite`` file after one LiteRT run, keyed by the legalized ONNX tensor.

At export, :func:`tensor_map` records for each ONNX tensor the op-produced TFLite tensor that
holds it (by name; names are unique in our files) and in which layout (``perm``: stored =
onnx.transpose(perm), see ``layout.py``), in ``artifact.meta["tensor_map"]``.  Several ONNX
tensors can share one TFLite tensor (a Transpose or layout-keeping Reshape is only a relabelling,
``lower.py``).  Tensors that activation fusion or bias folding (``fuse.py``) dropped from the
file are simply not there.

:func:`intermediates` runs the file with ``experimental_preserve_all_tensors=True`` and the
``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` op resolver: a delegate such as XNNPACK computes its
partition internally and leaves the intermediate buffers undefined (see the argument docs of
``Interpreter.__init__`` in tensorflow/lite/python/interpreter.py, the code ai_edge_litert
ships), so only LiteRT's builtin kernels keep every tensor readable.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..base import Artifact, Intermediates
from .writer import referenced


def tensor_map(lowering, writer, inputs: list[int], outputs: list[int], dtypes: dict[str, str]) -> dict:
    """``{onnx tensor name: {"tensor", "perm", "dtype"}}`` for the op outputs the file keeps.

    A tensor written in several layouts maps from its home layout (the op that computed it);
    the other layouts are TRANSPOSE/RESHAPE copies and are left out.
    """
    kept = set(referenced(writer.ops, inputs, outputs))
    produced = {index for op in writer.ops for index in op.outputs}
    entries = {}
    for onnx_name, forms in lowering.written().items():
        home = lowering.home_layout(onnx_name)
        index = forms.get(home) if home is not None else None
        if index is None or index not in kept or index not in produced or index in inputs:
            continue
        entries[onnx_name] = {"tensor": writer.tensors[index].name, "perm": list(home),
                              "dtype": dtypes.get(onnx_name, "float32")}
    return dict(sorted(entries.items()))


def intermediates(artifact: Artifact, inputs: dict[str, np.ndarray]) -> Intermediates:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from .interface import feed_inputs

    path = next(p for p in artifact.files if str(p).endswith(".tflite"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging": it is
        interpreter = Interpreter(
            model_path=str(path), num_threads=artifact.meta.get("num_threads"),
            experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    feed_inputs(interpreter, artifact, inputs)
    interpreter.invoke()

    ops = interpreter._get_ops_details()  # noqa: SLF001 - the runtime's own view of the ops
    producer = {int(t): (op["index"], op["op_name"]) for op in ops for t in op["outputs"]}
    details = interpreter.get_tensor_details()
    index_of = {d["name"]: d["index"] for d in details}
    # int8 tensors (a --quantize int8 file) are read as the real values they encode
    quantization = {d["index"]: d["quantization"] for d in details if d["dtype"] in (np.int8, np.uint8)
                    and d["quantization"][0] > 0}
    found = Intermediates("tflite", layer_count=len(ops))
    for onnx_name, entry in artifact.meta.get("tensor_map", {}).items():
        index = index_of.get(entry["tensor"])
        if index not in producer:
            continue
        op_index, op_name = producer[index]
        # stored = onnx.transpose(perm), so onnx = stored.transpose(argsort(perm)).
        value = np.asarray(interpreter.get_tensor(index)).transpose(np.argsort(entry["perm"]))
        if index in quantization:
            scale, zero = quantization[index]
            value = (value.astype(np.float32) - np.float32(zero)) * np.float32(scale)
        found.add(onnx_name, np.ascontiguousarray(value), op_name, f"op {op_index}", entry["tensor"], entry["dtype"])
    return found

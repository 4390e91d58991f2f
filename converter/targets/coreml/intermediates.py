"""Every variable of a saved ML Program after one run, keyed by the legalized ONNX tensor.

At export, :func:`mil_names` records the builder's naming (``mil_builder``: each MIL op output
is named after the ONNX tensor it computes, sanitized and de-duplicated) in
``artifact.meta["mil_names"]``.  coremltools' fp16 pass re-creates each op with its output named
``<name>_cast_fp16`` (``FP16ComputePrecision`` in coremltools/converters/mil/mil/passes/defs/
quantization.py), so that suffix is removed before looking a name up.

:func:`intermediates` executes the program *as saved in the package* op by op with
``mil_executor.execute(..., keep=True)`` and takes, for each ONNX tensor, the first op in
program order that computes it (an fp16 program's final fp32 ``cast`` comes after the op that
computed the output).  MIL tensors are NCHW like ONNX; values come back in the ONNX dtype.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ...ir.graph import dtype_name, to_graph
from ..base import Artifact, Intermediates

FP16_SUFFIX = "_cast_fp16"


def mil_names(model: onnx.ModelProto, tensor_names: dict[str, str]) -> dict:
    """``{MIL var name: {"onnx", "dtype"}}`` for every ONNX tensor the builder named."""
    dtypes = {name: d for name, t in to_graph(model).tensors().items() if (d := dtype_name(t))}
    return {mil: {"onnx": name, "dtype": dtypes.get(name, "float32")}
            for name, mil in sorted(tensor_names.items(), key=lambda kv: kv[1])}


def intermediates(artifact: Artifact, inputs: dict[str, np.ndarray]) -> Intermediates:
    from .mil_executor import execute, load_program

    program = load_program(Path(artifact.out_dir) / artifact.meta["package"])
    feeds = {}
    for spec in artifact.meta["inputs"]:
        value = inputs.get(spec["onnx_name"], inputs.get(spec["name"]))
        if value is None:
            from ...errors import BadInput

            raise BadInput(f"missing input '{spec['onnx_name']}'")
        feeds[spec["name"]] = np.asarray(value, dtype=np.float32)
    values = execute(program, feeds, keep=True)
    mapping = artifact.meta.get("mil_names", {})
    operations = [op for op in program.functions["main"].operations if op.op_type != "const"]
    found = Intermediates("coreml", layer_count=len(operations))
    for op in operations:
        for var in op.outputs:
            base = var.name[: -len(FP16_SUFFIX)] if var.name.endswith(FP16_SUFFIX) else var.name
            entry = mapping.get(base)
            if entry is not None and var.name in values:
                found.add(entry["onnx"], values[var.name], op.op_type, op.name, var.name, entry["dtype"])
    return found

"""Every op output of a MACE net after one run, keyed by the legalized ONNX tensor it holds.

At export, :func:`tensor_map` records which ONNX tensor each op output holds, in
``artifact.meta["tensor_map"]``: the writer names an op's output after the ONNX tensor it
computes and gives helper tensors fresh names that no ONNX tensor has (``Emitter.used_names``
starts with every ONNX name), so the map is exact even where a mapping spans several MACE ops.

:func:`intermediates` runs the reader's ONNX rendering (``reader.py``: MACE's CPU semantics, NCHW
tensors as on CPU, so values are already in ONNX layout) with every tensor made an output, and
names each value's MACE op (type and name from the ``.pb``).
"""

from __future__ import annotations

import numpy as np

from ...errors import BadInput
from ..base import Artifact, Intermediates


def tensor_map(ops, onnx_dtypes: dict[str, str]) -> dict:
    """``{MACE tensor: {"onnx", "dtype"}}`` for every op output that is an ONNX tensor."""
    produced = {out for op in ops for out in op.output}
    return {name: {"onnx": name, "dtype": onnx_dtypes.get(name, "float32")}
            for name in sorted(produced) if name in onnx_dtypes}


def feeds(artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """NCHW arrays as a MaceTensor with data_format NCHW would be fed: transposed to the model's
    NHWC ``input_info``, in the dtype MACE carries."""
    out = {}
    for info in artifact.meta["inputs"]:
        if info["name"] not in inputs:
            raise BadInput(f"missing input '{info['name']}'")
        value = np.asarray(inputs[info["name"]])
        if info["data_format"] == 1:
            value = value.transpose(0, 2, 3, 1)
        if info["dtype"] == "int32" and value.size and (value.min() < -2**31 or value.max() >= 2**31):
            raise BadInput(f"input '{info['name']}' has values outside MACE's int32")
        out[info["name"]] = np.ascontiguousarray(value, dtype=info["dtype"])
    return out


def intermediates(artifact: Artifact, inputs: dict[str, np.ndarray]) -> Intermediates:
    from ...runtimes.onnxruntime import expose_intermediates
    from ...runtimes.onnxruntime import run_session, session
    from ._generated import mace_pb2
    from .reader import read

    name = artifact.meta["name"]
    pb_path, data_path = artifact.out_dir / f"{name}.pb", artifact.out_dir / f"{name}.data"
    held_by: dict[str, str] = {}
    model = read(pb_path, data_path, tensor_names=held_by)
    exposed, _ = expose_intermediates(model)
    values = run_session(session(exposed), feeds(artifact, inputs))
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(pb_path.read_bytes())
    net = multi.net_def[0]
    mapping = artifact.meta.get("tensor_map", {})
    found = Intermediates("mace", layer_count=len(net.op))
    for op in net.op:
        for out in op.output:
            entry = mapping.get(out)
            value = values.get(held_by.get(out, out))
            if entry is not None and value is not None:
                found.add(entry["onnx"], value, op.type, op.name, out, entry["dtype"])
    return found

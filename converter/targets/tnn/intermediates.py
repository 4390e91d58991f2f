"""Every blob of a TNN network after one run, keyed by the legalized ONNX tensor it holds.

At export, :func:`blob_map` records which ONNX tensor each layer-output blob holds (TNN names
are sanitized and de-duplicated, ``context.sanitize``/``UniqueNames``; helper blobs of multi-layer
mappings hold no ONNX tensor and are left out) in ``artifact.meta["blob_map"]``.  TNN blobs are
NCHW like ONNX, so only the dtype needs undoing (int64 tensors are int32 blobs, bool are int8).

:func:`intermediates` runs the reader's ONNX rendering of the files (``reader.py``, TNN's parser
and kernel semantics) with every blob made an output, and names each value's TNN layer (type and
name from the ``.tnnproto`` as the reader parsed it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ...errors import BadInput
from ...ir.graph import dtype_name, to_graph
from ..base import Artifact, Intermediates


def blob_map(model: onnx.ModelProto, net, blob_names: dict[str, str]) -> dict:
    """``{TNN blob: {"onnx", "dtype"}}`` for every layer output that holds an ONNX tensor."""
    onnx_of = {blob: name for name, blob in blob_names.items()}
    dtypes = {name: d for name, t in to_graph(model).tensors().items() if (d := dtype_name(t))}
    produced = {blob for layer in net.layers for blob in layer.outputs}
    return {blob: {"onnx": onnx_of[blob], "dtype": dtypes.get(onnx_of[blob], "float32")}
            for blob in sorted(produced) if blob in onnx_of}


def feeds(model: onnx.ModelProto, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs by TNN blob name, in the blob types the .tnnproto declares (int64 -> int32, bool ->
    int8), as TNN's caller would have to convert its data before Instance::SetInputMat."""
    declared = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
                for i in model.graph.input}
    out = {}
    for spec in artifact.meta["inputs"]:
        if spec["name"] not in inputs:
            raise BadInput(f"missing input '{spec['name']}' for the TNN model")
        out[spec["tnn_name"]] = np.asarray(inputs[spec["name"]]).astype(declared[spec["tnn_name"]], copy=False)
    return out


def intermediates(artifact: Artifact, inputs: dict[str, np.ndarray]) -> Intermediates:
    from ...runtimes.onnxruntime import expose_intermediates
    from ...runtimes.onnxruntime import run_session, session
    from .reader import read
    from .reader_onnx import to_onnx

    proto, weights = (Path(f) for f in artifact.files[:2])
    net = read(proto, weights)
    from .reader_int8 import dequantize_int8, quantize_blobs

    scales = dequantize_int8(net)  # an int8 network: float weights, Q/DQ on its int8 blobs
    model = to_onnx(net)
    model = quantize_blobs(model, scales) if scales else model
    exposed, _ = expose_intermediates(model)
    values = run_session(session(exposed), feeds(model, artifact, inputs))
    return by_onnx_name(net, artifact.meta.get("blob_map", {}), values)


def by_onnx_name(net, mapping: dict, values: dict[str, np.ndarray]) -> Intermediates:
    """TNN blob values (by blob name, from the reader or the real runtime) as the ONNX tensors
    they stand for (``mapping``: the artifact's ``blob_map``), with the layer that wrote each."""
    found = Intermediates("tnn", layer_count=len(net.layers))
    for layer in net.layers:
        for blob in layer.outputs:
            entry = mapping.get(blob)
            if entry is not None and blob in values:
                found.add(entry["onnx"], values[blob], layer.type_str, layer.name, blob, entry["dtype"])
    return found

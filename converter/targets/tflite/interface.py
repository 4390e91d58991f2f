"""A .tflite file's interface as the interpreter sees it: ONNX-layout arrays in, file layout in
(transposed as ``artifact.meta["inputs"]`` records, int8 inputs quantized as the file says)."""

from __future__ import annotations

import numpy as np

from ...errors import BadInput
from ..base import Artifact


def feed_inputs(interpreter, artifact: Artifact, inputs: dict[str, np.ndarray]) -> None:
    """Set the interpreter's inputs from ONNX-layout arrays (transposed as the file stores them)."""
    by_name = {d["name"]: d for d in interpreter.get_input_details()}
    for spec in artifact.meta["inputs"]:
        if spec["name"] not in inputs:
            raise BadInput(f"tflite: missing input '{spec['name']}'")
        value = np.asarray(inputs[spec["name"]])
        if spec.get("quantization") and value.dtype != np.dtype(spec["dtype"]):
            # an int8 input (full-integer file) fed real values: quantize as the file says
            q, info = spec["quantization"], np.iinfo(np.dtype(spec["dtype"]))
            value = np.clip(np.rint(value.astype(np.float64) / q["scale"][0]) + q["zero_point"][0], info.min, info.max)
        value = value.astype(np.dtype(spec["dtype"]), copy=False)
        if tuple(value.shape) != tuple(spec["shape"]):
            raise BadInput(f"tflite: input '{spec['name']}' has shape {tuple(value.shape)}, "
                           f"the model wants {tuple(spec['shape'])}")
        # np.array, not np.ascontiguousarray: the latter turns a 0-d (scalar) input into shape (1,)
        interpreter.set_tensor(by_name[spec["name"]]["index"], np.array(value.transpose(spec["perm"]), order="C"))

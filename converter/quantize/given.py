"""Quantize with the scales and zero points a quantized input came with, instead of calibrating.

A QDQ ONNX model (onnxruntime's quantizer, NNCF, a QAT export) or an int8 ``.tflite`` reaches
the quantize stage as its float graph with the parameters it was quantized with
(:mod:`converter.frontend.prequantized`).  :func:`given_setup` turns them into what
:func:`.qdq.quantize_model` takes:

* onnxruntime ``TensorQuantOverrides``: every activation's scale and zero point, every weight's
  scale and zero point (per channel along its axis), exactly as given, so the QDQ model, the
  ``edgeconv.quant/1`` record and every native file carry those bytes (onnxruntime's weight-scale
  adjustment for tiny int32 bias scales is off: it would change a given weight scale);
* the ranges onnxruntime needs to quantize a tensor at all (an override replaces the scale and
  zero point computed from them): the given ones, ``s * (qmin - z) .. s * (qmax - z)``;
* a tensor onnxruntime would quantize that the input left without parameters takes those of a
  data-movement neighbour (MaxPool, Reshape, ...: the same integers in, the same out), else its
  calibrated range when ``--calibration`` is given, else it stays float, as it was in the input.

Activation parameters are converted exactly between int8 and uint8 (the same scale, zero point
moved by 128), so an NNCF model's uint8 activations become int8 ones for TFLite.  Bias
correction does not run: the biases are the input's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import onnx

#: Ops whose output holds only values of their data input: their tensors share its parameters.
_SAME_PARAMS = ("MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice",
                "Relu", "GlobalMaxPool", "DepthToSpace", "SpaceToDepth", "Resize", "Gather", "Split")


@dataclass
class GivenSetup:
    config: object
    ranges: object
    #: Tensors onnxruntime would quantize that the input gave no parameters (left float, or calibrated).
    missing: list[str] = field(default_factory=list)
    #: Given tensors the legalized model no longer has (a rewrite replaced them).
    lost: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def record(self, given: dict) -> dict:
        return {"source": given.get("source"), "activations": len(given.get("activations", {})),
                "weights": len(given.get("weights", {})), "not_given": self.missing, "lost": self.lost}


def given_record(model: onnx.ModelProto) -> dict | None:
    from ..frontend.prequantized import given_quantization

    return given_quantization(model)


def given_dtype(model: onnx.ModelProto) -> str | None:
    """The activation type a quantized input was quantized to ("int8"/"uint8"), or None."""
    record = given_record(model)
    if record is None:
        return None
    kinds = sorted({e["dtype"] for e in record["activations"].values()} - {"int32"})
    return "int8" if "int8" in kinds or not kinds else kinds[0]


def as_mode(entry: dict, mode: str) -> dict:
    """An activation entry in ``mode``'s type: the same real values (zero point moved by 128)."""
    if entry["dtype"] == mode or mode not in ("int8", "uint8"):
        return entry
    shift = 128 if mode == "uint8" else -128
    return {**entry, "dtype": mode, "zero_point": [z + shift for z in entry["zero_point"]]}


def _qtype(dtype: str):
    from onnxruntime.quantization import QuantType

    return QuantType.QInt8 if dtype == "int8" else QuantType.QUInt8


def _override(entry: dict) -> list[dict]:
    """onnxruntime's override list for one entry (one dict per channel when per channel)."""
    np_type = np.int8 if entry["dtype"] == "int8" else np.uint8
    pairs = [{"scale": np.array(s, np.float32), "zero_point": np.array(z, np_type), "quant_type": _qtype(entry["dtype"])}
             for s, z in zip(entry["scale"], entry["zero_point"])]
    if entry["axis"] is not None:
        for pair in pairs:
            pair["axis"] = entry["axis"]
    return pairs


def _real_range(entry: dict) -> tuple[float, float]:
    info = np.iinfo(np.dtype(entry["dtype"]))
    scale, zero = float(entry["scale"][0]), int(entry["zero_point"][0])
    return scale * (info.min - zero), scale * (info.max - zero)


def given_setup(model: onnx.ModelProto, config, given: dict, calibration=None) -> GivenSetup:
    """The config (with the overrides) and ranges that quantize ``model`` with ``given``'s
    parameters (module docstring); ``calibration``: samples for tensors the input left float."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    from .float_pass import tensors_to_calibrate

    activations = {name: as_mode(entry, config.mode) for name, entry in given["activations"].items()
                   if entry["axis"] is None and len(entry["scale"]) == 1}
    tensors = set(tensors_to_calibrate(model))
    present = tensors | {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    setup = GivenSetup(config, None)
    setup.lost = sorted(n for n in activations if n not in present)
    setup.lost += sorted(n for n in given["weights"] if n not in inits)
    entries = _spread(model, {n: e for n, e in activations.items() if n in present})
    setup.missing = sorted(tensors - set(entries))
    data = {}
    for name in sorted(tensors & set(entries)):
        low, high = _real_range(entries[name])
        data[name] = TensorData(lowest=np.array(low, np.float32), highest=np.array(high, np.float32))
    if calibration and setup.missing:
        from .ranges import collect_ranges

        calibrated = collect_ranges(model, calibration, "minmax")
        data.update({n: calibrated.data[n] for n in setup.missing if n in calibrated.data})
    overrides = {name: _override(entry) for name, entry in entries.items() if name in data}
    for name, entry in given["weights"].items():
        if name in inits and entry["dtype"] != "int32":
            overrides[name] = _override(entry)
    setup.config = replace(config, bias_correction=False, overrides=overrides,
                           given_options=_options(model, entries, config.mode))
    setup.ranges = TensorsData(CalibrationMethod.MinMax, dict(sorted(data.items())))
    if setup.lost:
        setup.warnings.append(f"{len(setup.lost)} of the input's quantized tensors were rewritten by legalization "
                              f"and are quantized anew: {', '.join(setup.lost[:5])}")
    if setup.missing and not calibration:
        setup.warnings.append(f"{len(setup.missing)} tensors have no scale in the input and stay float "
                              f"(give --calibration to quantize them): {', '.join(setup.missing[:5])}")
    return setup


def _options(model: onnx.ModelProto, entries: dict[str, dict], mode: str) -> tuple:
    """onnxruntime options that keep the input's form: symmetric activations when every given
    one is (onnxruntime then keeps each Relu as a node); else, when a Relu/Clip output's given
    range does not start at 0, the Relu/Clip kept (onnxruntime would fold it into the range)."""
    low = np.iinfo(np.dtype(mode)).min
    middle = 0 if mode == "int8" else 128
    if entries and all(z == middle for e in entries.values() for z in e["zero_point"]):
        return (("ActivationSymmetric", True),)
    clamped = [n.output[0] for n in model.graph.node if n.op_type in ("Relu", "Clip") and n.output[0] in entries]
    if any(entries[name]["zero_point"][0] != low for name in clamped):
        return (("QDQKeepRemovableActivations", True),)
    return ()


def _spread(model: onnx.ModelProto, entries: dict[str, dict]) -> dict[str, dict]:
    """``entries`` extended across data-movement ops (both ways) to tensors without one."""
    out = dict(entries)
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    changed = True
    while changed:
        changed = False
        for node in model.graph.node:
            if node.op_type not in _SAME_PARAMS or not node.input or not node.output:
                continue
            src, dst = node.input[0], node.output[0]
            if src in out and dst not in out:
                out[dst] = out[src]
                changed = True
            # a Relu's lone input takes its output's (onnxruntime's adjust_tensor_ranges, which
            # then drops the Relu: the tensor it quantizes is the Relu's output)
            elif dst in out and src not in out and (node.op_type != "Relu" or readers.get(src) == 1):
                out[src] = out[dst]
                changed = True
    return out

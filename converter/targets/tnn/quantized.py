"""Native int8 TNN: the float network's layers made ``Quantized*`` with TNN's int8 resources.

Written the way TNN's own post-training tool lays a model out (Tencent/TNN@f0cb081
``tools/quantization/calibration.cc``, read back by ``source/tnn/interpreter/tnn/
layer_interpreter/{conv,inner_product,blob_scale}_layer_interpreter.cc``):

* the quantized layer types are the tool's: ``Convolution``, ``InnerProduct``, ``Add`` and
  ``Concat`` (``kQuantizedLayerTypeStr``), plus ``ReLU`` and max ``Pooling`` after a quantized
  layer, whose input blob takes the output blob's scale (``MergeBlobScale``); an ``Add`` with a
  constant operand stays float.  The type string gets the ``Quantized`` prefix, which is what
  marks a layer int8 (model_interpreter.cc: ``type_str.compare(0, 9, "Quantized") == 0``);
* every input and output blob of a quantized layer has a ``BlobScale`` resource
  ``<blob>_scale_data_`` = ``zero_point (int8) ; scale (float) ; bias (int32 zeros)``: symmetric
  per-tensor scales (zero point 0, TNN's default ``MIN_MAX`` blob method; per-tensor blobs are its
  ``merge_type`` 1), ``max(|low|, |high|) / 127`` over the QDQ model's calibrated range — TNN's
  int8 ReLU and pooling kernels compare raw integers, so they need zero point 0;
* a quantized Convolution / InnerProduct resource holds int8 weights quantized per output
  channel with ``scale[oc] = input_scale * max|w[oc]| / 127`` (the tool multiplies the weights
  by the input scale before taking the channel maximum), an int32 bias ``bias / scale[oc]``
  (rounded; the tool truncates), then ``zero_point (int8 zeros) ; scale (float)`` — the order
  of ``ConvLayerInterpreter::SaveResource``; a Convolution without bias gets a zero int32 bias
  (the int8 kernels always read one);
* a Convolution followed by its only reader ReLU / ReLU6 carries it as ``activation_type``
  (the int8 kernels clamp in the integer domain).

TNN's runtime inserts the float <-> int8 ``Reformat`` layers between quantized and float layers
itself (``net_optimizer_insert_int8_reformat.cc``, on ARM, X86 and NAIVE).
"""

from __future__ import annotations

import numpy as np

from ...errors import Unsupported
from .net import RawBuffer, TnnNet

BLOB_SCALE_SUFFIX = "_scale_data_"  # objseri.h
QUANTIZED = {"Convolution", "InnerProduct", "Add", "Concat"}
MERGED = {"ReLU", "Pooling"}  # quantized after a quantized layer, sharing the output scale
ACTIVATIONS = {"ReLU": 1, "ReLU6": 2}  # layer_param.h ActivationType


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """std::round (the tool's rounding)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def symmetric_scale(entry: dict) -> float:
    """The symmetric int8 scale covering an ``edgeconv.quant/1`` activation entry's range."""
    info = np.iinfo(np.dtype(entry["dtype"]))
    scale, zero = float(entry["scale"][0]), float(entry["zero_point"][0])
    low, high = scale * (info.min - zero), scale * (info.max - zero)
    return max(abs(low), abs(high)) / 127.0 or 1.0


def quantize_net(net: TnnNet, blob_of: dict[str, str], record: dict) -> dict:
    """Rewrite ``net`` in place (module docstring); returns a summary for the artifact meta."""
    if record.get("activation_dtype") != "int8":
        raise Unsupported(f"tnn: native {record.get('mode')} export is int8 only")
    given = record.get("given") is not None  # the model came quantized: its own scales, or a refusal
    scales: dict[str, float] = {}
    for onnx_name, entry in record.get("activations", {}).items():
        if onnx_name in blob_of and len(entry["scale"]) == 1:
            scales[blob_of[onnx_name]] = given_scale(onnx_name, entry) if given else symmetric_scale(entry)
    _fuse_activations(net)
    producer = {o: layer for layer in net.layers for o in layer.outputs}
    readers: dict[str, list] = {}
    for layer in net.layers:
        for b in layer.inputs:
            readers.setdefault(b, []).append(layer)
    for blob, after in readers.items():
        # the QDQ model folds a Relu into the op before it (an Add, say): that op's own output has
        # no range; the ReLU's output scale serves it (what MergeBlobScale would give it anyway)
        if blob not in scales and len(after) == 1 and after[0].type == "ReLU" and after[0].outputs[0] in scales:
            scales[blob] = scales[after[0].outputs[0]]
    quantized: list = []
    for layer in net.layers:
        blobs = layer.inputs + layer.outputs
        if not all(b in scales for b in blobs):
            continue
        if layer.type in QUANTIZED:
            if layer.type == "Add" and (layer.resource is not None or len(layer.inputs) != 2):
                continue  # the tool: an Add with a constant operand is not quantized
            if layer.type == "Convolution" and layer.resource[2][1].data.dtype.kind != "f":
                continue
            quantized.append(layer)
        elif layer.type in MERGED:
            before = producer.get(layer.inputs[0])
            if layer.type == "Pooling" and layer.params[0] != 0:
                continue  # average pooling is not merged ("Skip average pooling")
            if before is not None and before in quantized:
                scales[layer.inputs[0]] = scales[layer.outputs[0]]
                quantized.append(layer)
    weight_scales = given_weight_scales(record) if given else {}
    for layer in quantized:
        if layer.type == "Convolution":
            _quantize_conv(layer, scales[layer.inputs[0]], weight_scales.get(layer.name))
        elif layer.type == "InnerProduct":
            _quantize_inner_product(layer, scales[layer.inputs[0]], weight_scales.get(layer.name))
        layer.type = "Quantized" + layer.type
    used = sorted({b for layer in quantized for b in layer.inputs + layer.outputs})
    net.blob_scales = {b: scales[b] for b in used}
    return {"quantized_layers": len(quantized), "float_layers": len(net.layers) - len(quantized),
            "blob_scales": len(used)}


def _fuse_activations(net: TnnNet) -> None:
    readers: dict[str, list] = {}
    for layer in net.layers:
        for b in layer.inputs:
            readers.setdefault(b, []).append(layer)
    drop = []
    for layer in net.layers:
        if layer.type != "Convolution" or layer.params[13] != 0 or layer.outputs[0] in net.outputs:
            continue
        after = readers.get(layer.outputs[0], [])
        if len(after) == 1 and after[0].type in ACTIVATIONS:
            layer.params[13] = ACTIVATIONS[after[0].type]
            layer.outputs = list(after[0].outputs)
            drop.append(after[0])
    net.layers[:] = [layer for layer in net.layers if all(layer is not d for d in drop)]


def given_scale(name: str, entry: dict) -> float:
    """A quantized input's own activation scale, which TNN keeps when it is symmetric."""
    if any(int(z) != 0 for z in entry["zero_point"]) or entry["dtype"] != "int8":
        raise Unsupported(
            f"tnn int8: the model's tensor '{name}' is quantized with zero point {entry['zero_point'][0]} "
            f"({entry['dtype']}); TNN's int8 blobs are symmetric (BlobScale: zero point 0, Tencent/TNN@f0cb081 "
            "source/tnn/interpreter/tnn/layer_interpreter/blob_scale_layer_interpreter.cc), so its scales cannot "
            "be kept: quantize it symmetrically (onnxruntime: ActivationSymmetric=True) or give --calibration")
    return float(entry["scale"][0])


def given_weight_scales(record: dict) -> dict[str, np.ndarray]:
    """Layer name -> a quantized input's own per-output-channel weight scales (symmetric int8)."""
    out = {}
    for name, entry in record.get("weights", {}).items():
        if any(int(z) != 0 for z in entry["zero_point"]) or entry["dtype"] != "int8":
            raise Unsupported(f"tnn int8: the model's weight '{name}' has zero point {entry['zero_point'][0]} "
                              f"({entry['dtype']}); TNN's int8 weights are symmetric, so it cannot be kept")
        for consumer in entry["consumers"]:
            out[consumer] = np.asarray(entry["scale"], np.float32)
    return out


def _given_weights(weight: np.ndarray, input_scale: float, given: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers of a quantized input's weights (its own scales; TNN's scale folds in the input's)."""
    w = np.asarray(weight, np.float32).reshape(weight.shape[0], -1)
    channel = np.broadcast_to(given.reshape(-1), (w.shape[0],)).astype(np.float32)
    q = np.rint(w / channel[:, None])
    if np.abs(q).max(initial=0) > 127:
        raise Unsupported("tnn int8: a weight of the model is quantized to -128; TNN's int8 weights are "
                          "symmetric in [-127, 127], so it cannot be kept")
    return q.astype(np.int8).reshape(weight.shape), (np.float32(input_scale) * channel).astype(np.float32)


def _weights(weight: np.ndarray, input_scale: float, given: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights and the per-output-channel scale (input scale folded in), as the tool; with
    ``given`` (a quantized input's per-channel weight scales), those."""
    if given is not None:
        return _given_weights(weight, input_scale, given)
    w = np.asarray(weight, np.float32).reshape(weight.shape[0], -1) * np.float32(input_scale)
    absmax = np.max(np.abs(w), axis=1)
    scale = (absmax / np.float32(127.0)).astype(np.float32)
    inv = np.where(absmax != 0, np.float32(1.0) / np.where(scale == 0, 1, scale), np.float32(1.0)).astype(np.float32)
    q = np.clip(_round_half_away(w * inv[:, None]), -127, 127).astype(np.int8)
    return q.reshape(weight.shape), scale


def _int32_bias(bias: np.ndarray | None, scale: np.ndarray) -> np.ndarray:
    if bias is None:
        return np.zeros(scale.shape, np.int32)
    b = np.asarray(bias, np.float64).reshape(-1)
    safe = np.where(scale == 0, 1.0, scale.astype(np.float64))
    return np.where(scale == 0, 0, np.clip(_round_half_away(b / safe), -(2**31), 2**31 - 1)).astype(np.int32)


def _tail(scale: np.ndarray) -> list:
    return [("raw", RawBuffer.of(np.zeros(scale.shape, np.int8))), ("raw", RawBuffer.of(scale))]


def _quantize_conv(layer, input_scale: float, given: np.ndarray | None = None) -> None:
    # resource: str name ; int has_bias ; Raw filter [O, I/g, kh, kw] ; [Raw bias]
    name, has_bias, filt = layer.resource[0], layer.resource[1][1], layer.resource[2][1]
    bias = layer.resource[3][1].data if has_bias else None
    q, scale = _weights(filt.data.reshape(filt.dims), input_scale, given)
    layer.params[9] = 1  # has_bias: the int8 kernels always add the int32 bias
    layer.resource = [name, ("int", 1), ("raw", RawBuffer.of(q)), ("raw", RawBuffer.of(_int32_bias(bias, scale))),
                      *_tail(scale)]


def _quantize_inner_product(layer, input_scale: float, given: np.ndarray | None = None) -> None:
    # resource: str name ; Raw weight [N, K] ; Raw bias [N]
    name, weight, bias = layer.resource[0], layer.resource[1][1], layer.resource[2][1]
    q, scale = _weights(weight.data.reshape(weight.dims), input_scale, given)
    layer.resource = [name, ("raw", RawBuffer.of(q)), ("raw", RawBuffer.of(_int32_bias(bias.data, scale))),
                      *_tail(scale)]

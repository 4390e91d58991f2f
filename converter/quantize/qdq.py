"""Quantize a legalized float ONNX model: QDQ (QuantizeLinear/DequantizeLinear) or float16.

Modes (``QuantConfig.mode``):

* ``int8`` / ``uint8`` — static quantization by onnxruntime (``quantize_static``,
  ``QuantFormat.QDQ``): activations of that type with the ranges of :mod:`.ranges` (handed over
  through onnxruntime's calibration cache, so the calibration runs once however many variants
  ``auto`` tries), weights per channel unless ``per_channel=False`` (int8 weights symmetric,
  uint8 weights asymmetric, onnxruntime's defaults), biases int32.  ``full_integer``: every
  graph input and output gets its Q/DQ pair too (``ForceQuantizeNoInputCheck``, plus a pair
  edgeconv adds with the calibrated range where onnxruntime left an edge float), so the QDQ
  model's float interface carries the integer I/O parameters an 8-bit-only accelerator needs.
  Given the calibration samples, the int32 biases are then corrected for the mean output shift
  of weight rounding (:mod:`.bias_correction`; kept only where it helps on those samples).
* ``int8-weights`` — weight-only: each Conv/ConvTranspose/Gemm/MatMul constant weight becomes
  int8 (symmetric, per output channel unless ``per_channel=False``) behind a DequantizeLinear;
  activations stay float.  onnxruntime's ``quantize_dynamic`` would also quantize activations
  at run time, which is not what weight-only means, so edgeconv inserts these pairs itself,
  with onnxruntime's ``quantize_data`` computing the scales.
* ``fp16`` — onnxruntime's float16 converter (``onnxruntime.transformers.float16``, the
  maintained copy of onnxconverter-common's) with float32 graph inputs and outputs.

Every mode is deterministic: the same model and calibration data give a byte-identical file.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import RuntimeUnavailable
from ..infra.fsutil import private_temp_dir
from ..ir.graph import NameAllocator, attr, constant_value, to_graph, to_model
from .ranges import quiet_onnxruntime_quantization, range_of, share_add_ranges, share_concat_ranges

MODES = ("int8", "uint8", "int8-weights", "fp16")
WEIGHT_OPS = {"Conv": 0, "ConvTranspose": 1, "Gemm": None, "MatMul": -1}  # op -> output-channel axis of input 1


@dataclass(frozen=True)
class QuantConfig:
    mode: str
    per_channel: bool = True
    #: The calibration method the ranges came from (recorded; the ranges themselves are given).
    method: str = "minmax"
    full_integer: bool = False
    #: Nodes left in float (``auto`` mixed precision).
    nodes_to_exclude: tuple[str, ...] = field(default=())
    #: Correct the int32 biases for the mean shift of weight rounding (:mod:`.bias_correction`;
    #: needs the calibration samples, and is kept only where it helps on them).
    bias_correction: bool = True
    #: The Conv weight integers of a target that quantizes weights itself
    #: (:mod:`.target_weights`): the QDQ model computes with them, and bias correction corrects
    #: only those layers.  None: onnxruntime's integers.
    weight_integers: object = None
    #: The scales and zero points a quantized input came with (:mod:`.given`): onnxruntime's
    #: ``TensorQuantOverrides``, ``{tensor: [{"scale", "zero_point", "quant_type"[, "axis"]}, ...]}``.
    overrides: object = None
    #: More of onnxruntime's ``extra_options`` a quantized input needs (``(key, value)`` pairs).
    given_options: tuple = ()

    @property
    def integer(self) -> bool:
        return self.mode in ("int8", "uint8")


def quantize_model(model: onnx.ModelProto, config: QuantConfig, ranges=None, samples=None,
                   stats=None, score=None, bias_choice: dict | None = None) -> onnx.ModelProto:
    """The quantized model for ``config`` (``ranges``: :func:`.ranges.collect_ranges` output,
    required for int8/uint8; ``samples``: the calibration samples, for bias correction, and
    ``stats`` the float statistics the calibration pass took of them, if it did; ``score``: a
    :class:`.bias_correction.Scorer` on held-out samples, which chooses the biases and layout;
    ``bias_choice``: another model's bias correction record, whose choice is taken unscored)."""
    if config.mode == "fp16":
        return to_fp16(model, config.nodes_to_exclude)
    if config.mode == "int8-weights":
        return weight_only(model, config.per_channel, config.nodes_to_exclude)
    if config.mode not in ("int8", "uint8"):
        raise ValueError(f"unknown quantization mode {config.mode!r}")
    if ranges is None:
        raise ValueError("int8/uint8 quantization needs calibration ranges")
    if not config.overrides:  # a quantized input's own parameters are kept as they are
        ranges = share_concat_ranges(model, ranges)
    shared = share_add_ranges(model, ranges)
    quantized, only = _with_weights(model, quantize_static_qdq(model, shared, config), config)
    if config.bias_correction and samples:
        from .bias_correction import correct_biases

        alternatives = {} if _same_ranges(shared, ranges) or (bias_choice or {}).get("add_ranges") == "shared" \
            else {"own": _own_ranges(model, quantized, shared, ranges, config)}
        quantized = correct_biases(model, quantized, samples, alternatives, only, stats, score, bias_choice)
    return quantized


def _own_ranges(model, quantized, shared, ranges, config: QuantConfig) -> onnx.ModelProto:
    """The QDQ model with each tensor's own range: ``quantized`` re-stamped where it can be
    (:mod:`.range_variants`), else quantized again."""
    from onnxruntime.quantization import QuantType

    from .range_variants import with_ranges

    qtype = QuantType.QInt8 if config.mode == "int8" else QuantType.QUInt8
    own = with_ranges(model, quantized, shared, ranges, qtype)
    return own if own is not None else _with_weights(model, quantize_static_qdq(model, ranges, config), config)[0]


def _with_weights(model, quantized, config: QuantConfig):
    """(the QDQ model with the target's weight integers, the weights they replaced), or
    (``quantized``, None) with onnxruntime's."""
    if config.weight_integers is None:
        return quantized, None
    from .target_weights import with_target_weights

    return with_target_weights(model, quantized, config.weight_integers)


def _same_ranges(a, b) -> bool:
    return a.data.keys() == b.data.keys() and all(
        np.array_equal(np.asarray(a.data[k].range_value), np.asarray(b.data[k].range_value)) for k in a.data)


def _check_onnxruntime():
    from onnxruntime.quantization import quantize_static

    if "calibration_cache_path" not in inspect.signature(quantize_static).parameters:
        import onnxruntime

        raise RuntimeUnavailable(f"quantization needs onnxruntime's calibration cache (onnxruntime >= 1.26; "
                                 f"this is {onnxruntime.__version__}): pip install -U onnxruntime")
    return quantize_static


def quantize_static_qdq(model: onnx.ModelProto, ranges, config: QuantConfig) -> onnx.ModelProto:
    """onnxruntime's QDQ model with exactly ``ranges`` (``quantize_model`` widens them first)."""
    quantize_static = _check_onnxruntime()
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType
    from onnxruntime.quantization.calibrate import save_tensors_data

    qtype = QuantType.QInt8 if config.mode == "int8" else QuantType.QUInt8
    extra = {"ForceQuantizeNoInputCheck": bool(config.full_integer)}
    if config.overrides:  # the input's own parameters, kept as given
        extra.update(TensorQuantOverrides=config.overrides, QDQDisableWeightAdjustForInt32Bias=True,
                     **dict(config.given_options))
    with private_temp_dir("qdq") as tmp, quiet_onnxruntime_quantization():
        src, out, cache = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx", Path(tmp) / "ranges.json"
        onnx.save(model, str(src))
        save_tensors_data(ranges, cache)
        quantize_static(str(src), str(out), calibration_data_reader=None, quant_format=QuantFormat.QDQ,
                        per_channel=config.per_channel, activation_type=qtype, weight_type=qtype,
                        nodes_to_exclude=list(config.nodes_to_exclude), calibrate_method=CalibrationMethod.MinMax,
                        calibration_cache_path=str(cache), extra_options=extra)
        quantized = onnx.load(str(out))
    if config.full_integer:
        quantized = _quantize_io_edges(quantized, ranges, qtype, config.overrides or {})
    return _canonical(quantized)


def _canonical(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop what differs between runs or machines (nothing of the graph)."""
    model.producer_name, model.producer_version = "edgeconv", ""
    return model


def _quantize_io_edges(model: onnx.ModelProto, ranges, qtype, overrides=None) -> onnx.ModelProto:
    """Add a Q/DQ pair (calibrated range, or the given parameters of ``overrides``) at every
    graph input/output onnxruntime left float."""
    from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType

    graph = to_graph(model)
    names = NameAllocator(graph)
    np_type = np.int8 if qtype.tensor_type == onnx.TensorProto.INT8 else np.uint8
    qmin, qmax = get_qmin_qmax_for_qType(qtype.tensor_type)
    changed = False

    def pair(value: gs.Variable, base: str, rng: tuple[float, float]) -> tuple[gs.Node, gs.Node, gs.Variable]:
        zp, scale = compute_scale_zp(np.array(min(rng[0], 0.0), np.float32), np.array(max(rng[1], 0.0), np.float32),
                                     qmin, qmax)
        given = (overrides or {}).get(base)
        if given:
            zp, scale = given[0]["zero_point"], given[0]["scale"]
        s = gs.Constant(names(f"{base}_scale"), np.asarray(scale, dtype=np.float32).reshape(()))
        z = gs.Constant(names(f"{base}_zero_point"), np.asarray(zp, dtype=np_type).reshape(()))
        q_out = gs.Variable(names(f"{base}_QuantizeLinear_Output"), dtype=np_type, shape=value.shape)
        dq_out = gs.Variable(names(f"{base}_DequantizeLinear_Output"), dtype=np.float32, shape=value.shape)
        return (gs.Node("QuantizeLinear", names(f"{base}_QuantizeLinear"), {}, [value, s, z], [q_out]),
                gs.Node("DequantizeLinear", names(f"{base}_DequantizeLinear"), {}, [q_out, s, z], [dq_out]), dq_out)

    for tensor in graph.inputs:
        if tensor.dtype != np.float32 or all(n.op == "QuantizeLinear" for n in tensor.outputs):
            continue
        rng = range_of(ranges, tensor.name)
        if rng is None:
            continue
        consumers = list(tensor.outputs)
        q, dq, dq_out = pair(tensor, tensor.name, rng)
        for node in consumers:
            node.inputs = [dq_out if t is tensor else t for t in node.inputs]
        graph.nodes += [q, dq]
        changed = True
    for k, tensor in enumerate(list(graph.outputs)):
        if tensor.dtype != np.float32 or (tensor.inputs and tensor.inputs[0].op == "DequantizeLinear"):
            continue
        rng = range_of(ranges, tensor.name)
        if rng is None:
            continue
        name = tensor.name
        tensor.name = names(f"{name}_QuantizeLinear_Input")
        q, dq, dq_out = pair(tensor, name, rng)
        dq_out.name = name
        graph.outputs[k] = dq_out
        graph.nodes += [q, dq]
        changed = True
    if not changed:
        return model
    out = to_model(graph)
    out.ir_version = model.ir_version
    return out


# ----------------------------------------------------------------------------- weight-only


def _channel_axis(node: gs.Node, rank: int, per_channel: bool) -> int | None:
    if not per_channel or rank < 2:
        return None
    if node.op == "Gemm":
        return 0 if int(attr(node, "transB", 0)) else 1
    axis = WEIGHT_OPS[node.op]
    if node.op == "ConvTranspose" and int(attr(node, "group", 1)) != 1:
        return None  # output channels are split across groups: one scale per tensor
    return axis % rank


def weight_only(model: onnx.ModelProto, per_channel: bool = True, exclude=()) -> onnx.ModelProto:
    """Constant weights of Conv/ConvTranspose/Gemm/MatMul as int8 + DequantizeLinear."""
    from onnxruntime.quantization.quant_utils import quantize_data

    graph = to_graph(model)
    names = NameAllocator(graph)
    done: dict[str, gs.Variable] = {}
    for node in list(graph.nodes):
        if node.op not in WEIGHT_OPS or node.name in exclude or len(node.inputs) < 2:
            continue
        weight_tensor = node.inputs[1]
        weight = constant_value(weight_tensor)
        if weight is None or weight.dtype != np.float32:
            continue
        if weight_tensor.name not in done:
            axis = _channel_axis(node, weight.ndim, per_channel)
            channels = [weight] if axis is None else [np.take(weight, i, axis=axis) for i in range(weight.shape[axis])]
            params = [quantize_data(c.ravel(), onnx.TensorProto.INT8, True) for c in channels]
            scale = np.array([float(p[1]) for p in params], dtype=np.float32)
            zero = np.zeros(len(params), dtype=np.int8)
            q = (np.stack([p[2].reshape(c.shape) for p, c in zip(params, channels)], axis=axis)
                 if axis is not None else params[0][2].reshape(weight.shape)).astype(np.int8)
            base = weight_tensor.name
            out = gs.Variable(names(f"{base}_DequantizeLinear_Output"), dtype=np.float32, shape=list(weight.shape))
            dq_attrs = {} if axis is None else {"axis": axis}
            graph.nodes.append(gs.Node("DequantizeLinear", names(f"{base}_DequantizeLinear"), dq_attrs, [
                gs.Constant(names(f"{base}_quantized"), q),
                gs.Constant(names(f"{base}_scale"), scale if axis is not None else scale.reshape(())),
                gs.Constant(names(f"{base}_zero_point"), zero if axis is not None else zero.reshape(()))], [out]))
            done[weight_tensor.name] = out
        node.inputs[1] = done[weight_tensor.name]
    out = to_model(graph)
    out.ir_version = model.ir_version
    return out


# ------------------------------------------------------------------------------------ fp16


def to_fp16(model: onnx.ModelProto, exclude=()) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the converter edits its argument
    with quiet_onnxruntime_quantization():
        converted = convert_float_to_float16(copy, keep_io_types=True, node_block_list=list(exclude) or None)
    return _canonical(converted)

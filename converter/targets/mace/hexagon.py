"""MACE for the Hexagon DSP (``--hw dsp``, ``runtime: dsp``, ``quantize: 1``): the uint8 graph
rewritten into Hexagon NN nodes the way MACE's converter does before ``hexagon_dsp_wrapper.cc``
hands it to ``hexagon_nn_append_node_list``.

Written from XiaoMi/mace@0fc55a5 ``tools/python/transform/hexagon_converter.py`` (and the
quantize passes of ``transformer.py`` it runs after), not from the CPU uint8 file:

* ranges: the QDQ model's activation ranges (as the CPU path, :func:`.quantized.activation_infos`)
  through ``quantize_util.adjust_range_for_hexagon`` (zero exactly representable, the scale
  re-fitted to the side that moved least); filters ``quantize(..., HEXAGON, non_zero=False)``;
  biases int32 at ``input_scale * filter_scale`` with ``minval/maxval = scale * (-2^31, 2^31-1)``;
  ReLU/ReLUX folded into the convolution before it (``fold_activation``);
* filters HWIO (Conv2D, OIHW ``transpose(2, 3, 1, 0)``) and HWIM (DepthwiseConv2d, MACE's
  [M, C, kh, kw] the same way) (``transpose_filters`` for HEXAGON);
* op types (``HexagonSupportedOps``; the runtime looks each up by name in nnlib's ``ops.h``,
  ``hexagon_dsp_ops.h OpMap``): Supernode_8x8p32to8 / DepthwiseSupernode_8x8p32to8 with inputs
  ``[x, filter, x_min, x_max, filter_min, filter_max, strides, bias, bias_min, bias_max,
  out_min, out_max]`` (``convert_conv2d``), QuantizedAdd_8p8to8 / QuantizedSub_8p8to8
  ``[a, b, a_min, a_max, b_min, b_max, out_min, out_max]``, QuantizedMaxPool_8 /
  QuantizedAvgPool_8 ``[x, min, max, window, strides]``, QuantizedMean_8
  ``[x, min, max, axes, out_min, out_max]`` (keepdims only), QuantizedRelu_8 / QuantizedReluX_8 /
  QuantizedSigmoid_8, QuantizedReshape ``[x, shape, min, max]``, QuantizedConcat_8
  ``[dim, x..., min..., max...]``;
* an activation's min/max are its producer's output ports 1 and 2 (``tensor:1``/``tensor:2``,
  every op outputs ``(uint8, min, max)`` with ``output_type`` ``[UINT8, FLOAT, FLOAT]``); an op's
  own output range and every constant's are float scalar constants ``<tensor>_min``/``_max``;
  argument constants are int32 tensors ``<op>/strides`` etc.;
* ``padding`` is NN_PAD_VALID (2) or NN_PAD_SAME_CAFFE (5) from the shapes
  (``add_padding_type_for_conv_pooling``), else NN_PAD_NA (0);
* ``out_max_byte_size`` per output (elements, x4 for float);
* all model inputs enter through one ``QuantizeINPUT_f_to_8`` node ``mace_input_node`` (ports
  ``3i, 3i+1, 3i+2`` for input ``i``) and all outputs leave through one ``DequantizeOUTPUT_8tof``
  (``convert_input_output_node``); model outputs' producers are renamed
  ``mace_output_node_<name>`` (``quantize_nodes``);
* ``node_id``: constant tensors numbered first, then ops, in order; ``node_input`` is
  ``(node_id, output_port)`` of each input (``add_node_id``); op input names drop ``:0``
  (``remove_port`` for non-TensorFlow models).

MACE's DSP runtime has no float fallback: an op without a Hexagon node here is ``Unsupported``
naming it.
"""

from __future__ import annotations

import math
from functools import reduce
from operator import mul

import numpy as np

from ...errors import Unsupported
from ...ir.integers import int32_bias
from .data_file import DT_FLOAT, DT_INT32, DT_UINT8
from .quantized import QInfo, _arg, _arg_i, _fold_activations, _readers, activation_infos, to_uint8

NN_PAD_NA, NN_PAD_VALID, NN_PAD_SAME_CAFFE = 0, 2, 5
INPUT_NODE, OUTPUT_PREFIX, INPUT_PREFIX = "mace_input_node", "mace_output_node", "mace_input_node"
SUM, SUB = 0, 1
POOL_AVG, POOL_MAX = 1, 2
REDUCE_MEAN = 0
ACTIVATIONS = {"RELU": "QuantizedRelu_8", "RELUX": "QuantizedReluX_8", "SIGMOID": "QuantizedSigmoid_8"}
#: What ``hexagon_converter.py`` converts at all (``_op_converters``), its activations
#: (``activation_type``) and Eltwise types (``eltwise_type`` plus CLIP 12 and POW 9 as sqrt).
MACE_HEXAGON_CONVERTERS = frozenset({
    "Activation", "BatchNorm", "BatchToSpaceND", "Concat", "Conv2D", "Deconv2D", "DepthToSpace", "DepthwiseConv2d",
    "Dequantize", "Eltwise", "ExpandDims", "FullyConnected", "InstanceNorm", "Pad", "Pooling", "Quantize", "Reduce",
    "Reshape", "ResizeBilinear", "ResizeNearestNeighbor", "Softmax", "Split", "StridedSlice", "SpaceToBatchND",
    "SpaceToDepth"})
HEXAGON_ACTIVATIONS = frozenset({"RELU", "RELUX", "TANH", "SIGMOID", "LEAKYRELU", "PRELU"})
HEXAGON_ELTWISE = frozenset({0, 1, 2, 3, 4, 5, 9, 12})


def adjust_range_for_hexagon(in_min: float, in_max: float) -> QInfo:
    """``quantize_util.adjust_range_for_hexagon`` (python floats, as MACE's converter)."""
    out_max, out_min = max(0.0, in_max), min(0.0, in_min)
    scale = (out_max - out_min) / 255.0
    eps = 1e-6
    if out_min < -eps and out_max > eps:
        zero = -out_min / scale
        zero_int = int(round(zero))
        ceil = int(math.ceil(zero))
        keep_max = (ceil - zero) / out_max < (zero + 1 - ceil) / -out_min
        if zero_int <= 0 or (zero_int < 254 and keep_max):
            zero_int = ceil
            scale = out_max / (255.0 - zero_int)
        else:
            scale = -out_min / zero_int
    elif out_min > -eps:
        zero_int = 0
    else:
        zero_int = 255
    return QInfo(scale, zero_int, -zero_int * scale, (255 - zero_int) * scale)


def quantize_for_hexagon(data: np.ndarray) -> tuple[np.ndarray, QInfo]:
    """``quantize_util.quantize(data, HEXAGON, non_zero=False)``."""
    values = np.asarray(data, np.float64)
    info = adjust_range_for_hexagon(float(values.min()), float(values.max()))
    if info.scale == 0:
        raise Unsupported("mace dsp: an all-zero constant cannot be quantized for Hexagon")
    return to_uint8(values, info), info


def _nhwc(dims):
    dims = [int(d) for d in dims]
    return [dims[0], dims[2], dims[3], dims[1]] if len(dims) == 4 else dims


def _padding(op, in_shape, out_shape, kernel, strides) -> int:
    """``add_padding_type_for_conv_pooling`` for ONNX models, and a check that nnlib's padding
    for that type (``nn_pad_compute_outsize_padding``: SAME_CAFFE puts the odd pixel before)
    is the op's own (``padding_values`` total, ``total // 2`` before)."""
    (in_h, in_w), (out_h, out_w) = in_shape[2:4], out_shape[2:4]
    if out_h == (in_h - kernel[0]) // strides[0] + 1 and out_w == (in_w - kernel[1]) // strides[1] + 1:
        mode = NN_PAD_VALID
    elif out_h == (in_h - 1) // strides[0] + 1 and out_w == (in_w - 1) // strides[1] + 1:
        mode = NN_PAD_SAME_CAFFE
    else:
        raise Unsupported(f"mace dsp: Hexagon has no padding type for {op.type} '{op.name}' "
                          f"({in_h}x{in_w} -> {out_h}x{out_w}, kernel {kernel}, strides {strides})")
    totals = list(_arg(op, "padding_values").ints) if _arg(op, "padding_values") is not None else [0, 0]
    for size, k, s, total in zip((in_h, in_w), kernel, strides, totals):
        before = 0
        if mode == NN_PAD_SAME_CAFFE:
            pad_n = ((size + s - 1) // s - 1) * s - (size - k)
            before = (pad_n + 1) >> 1 if pad_n > 0 else 0
        if before != total // 2:
            raise Unsupported(f"mace dsp: {op.type} '{op.name}' pads {total // 2} before, Hexagon's "
                              f"{'SAME_CAFFE' if mode == NN_PAD_SAME_CAFFE else 'VALID'} pads {before}")
    return mode


class _Named:
    """An op seen under its model name (before ``quantize_nodes`` prefixed it), for messages."""

    def __init__(self, op, name):
        self._op, self.name = op, name

    def __getattr__(self, key):
        return getattr(self._op, key)


class HexagonNet:
    """Builds the Hexagon op list and its constants from an :class:`Emitter`'s float MACE ops."""

    def __init__(self, em, inputs, outputs, infos: dict[str, QInfo]):
        from ._generated import mace_pb2

        self.pb = mace_pb2
        self.em, self.inputs, self.outputs, self.infos = em, inputs, outputs, infos
        self.weights: dict[str, tuple[np.ndarray, int]] = {}
        self.quant: dict[str, QInfo] = {}
        self.ops = []
        self.ranges: dict[str, QInfo] = {}  # uint8 tensor -> its range (what the ports carry)
        self.renamed: dict[str, str] = {}
        self.readers: dict[str, list] = {}
        self.shape_only: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ constants

    def const(self, name: str, value: np.ndarray, dtype: int, q: QInfo | None = None) -> str:
        if name not in self.weights:
            self.weights[name] = (value, dtype)
            if q is not None:
                self.quant[name] = q
        return name

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array([value], np.float32), DT_FLOAT)

    def arg_const(self, op, suffix: str, dims, data=None) -> str:
        """``add_arg_const_node``: an int32 tensor; without data only its dims say the value
        (window, strides: the runtime hands nnlib a NULL tensor of that shape)."""
        if data is None:
            self.shape_only[op.name + suffix] = list(dims)
            return self.const(op.name + suffix, np.zeros(0, np.int32), DT_INT32)
        return self.const(op.name + suffix, np.array(data, np.int32).reshape(dims), DT_INT32)

    def min_max(self, name: str, own: QInfo | None = None) -> list[str]:
        """``add_min_max_const_node``: an activation's producer ports, or scalar constants for a
        constant's range / an op's own output range (``own``)."""
        if own is not None:
            return [self.scalar(f"{name}_min", own.minval), self.scalar(f"{name}_max", own.maxval)]
        if name in self.quant:
            q = self.quant[name]
            return [self.scalar(f"{name}_min", q.minval), self.scalar(f"{name}_max", q.maxval)]
        return [f"{name}:1", f"{name}:2"]

    def source(self, name: str) -> str:
        return self.renamed.get(name, name)

    def range_of(self, name: str) -> QInfo:
        info = self.ranges.get(name)
        if info is None:
            raise Unsupported(f"mace dsp: tensor '{name}' has no calibrated range")
        return info

    def out_range(self, op) -> QInfo:
        name = op.output[0]
        info = self.infos.get(name)
        after = self.readers.get(name, [])
        if info is None and len(after) == 1 and after[0].type == "Activation":
            # the QDQ model folds a Relu into the op before it (an Add): its range is the Relu's
            info = self.infos.get(after[0].output[0])
        if info is None:
            raise Unsupported(f"mace dsp: {op.type} '{op.name}' output '{name}' has no calibrated range")
        return info

    # ------------------------------------------------------------------ ops

    def emit(self, op_type: str, name: str, inputs: list[str], output: str | None, dims=None,
             padding: int = NN_PAD_NA):
        op = self.pb.OperatorDef(name=name, type=op_type)
        op.input.extend(inputs)
        if output is not None:
            op.output.append(output)
            for shape, dtype in ((dims, DT_UINT8), ([1], DT_FLOAT), ([1], DT_FLOAT)):
                op.output_shape.add().dims.extend(shape)
                op.output_type.append(dtype)
                op.out_max_byte_size.append(reduce(mul, shape, 1) * (4 if dtype == DT_FLOAT else 1))
        op.padding = padding
        self.ops.append(op)
        return op

    def convert(self, op) -> None:
        em = self.em
        missing = [i for i in op.input if i not in em.weights and self.source(i) not in self.ranges]
        if missing:
            raise Unsupported(f"mace dsp: {op.type} '{op.name}' reads '{missing[0]}', which no Hexagon node produces")
        out_name = op.output[0]
        dims = _nhwc(em.shapes.get(out_name) or [])
        kind = op.type
        if kind in ("Conv2D", "DepthwiseConv2d") and len(op.input) >= 2 and op.input[1] in em.weights:
            self.convolution(op, dims)
        elif kind == "Eltwise" and _arg_i(op, "type", 14) in (SUM, SUB) and self.eltwise_operands(op):
            a, c = self.eltwise_operands(op)
            out = self.out_range(op)
            name = "QuantizedAdd_8p8to8" if _arg_i(op, "type") == SUM else "QuantizedSub_8p8to8"
            self.emit(name, op.name, [a, c, *self.min_max(a), *self.min_max(c), *self.min_max(out_name, out)],
                      out_name, dims)
            self.ranges[out_name] = out
        elif kind == "Pooling" and list(_arg(op, "dilations").ints if _arg(op, "dilations") else [1, 1]) == [1, 1]:
            x = self.source(op.input[0])
            kernel, strides = list(_arg(op, "kernels").ints), list(_arg(op, "strides").ints)
            padding = _padding(op, em.shapes[op.input[0]], em.shapes[out_name], kernel, strides)
            hop = self.emit("QuantizedMaxPool_8" if _arg_i(op, "pooling_type", POOL_AVG) == POOL_MAX
                            else "QuantizedAvgPool_8", op.name, [x, *self.min_max(x)], out_name, dims, padding)
            hop.input.extend([self.arg_const(hop, "/window", [1, kernel[0], kernel[1], 1]),
                              self.arg_const(hop, "/strides", [1, strides[0], strides[1], 1])])
            self.ranges[out_name] = self.range_of(x)
        elif kind == "Reduce" and _arg_i(op, "reduce_type", 0) == REDUCE_MEAN and _arg_i(op, "keepdims", 0) == 1 \
                and _arg_i(op, "has_data_format") == 1:
            x = self.source(op.input[0])
            axes = list(_arg(op, "axis").ints)
            out = self.out_range(op)
            hop = self.emit("QuantizedMean_8", op.name, [x, *self.min_max(x)], out_name, dims)
            hop.input.append(self.arg_const(hop, "/axes", [len(axes)], axes))
            hop.input.extend(self.min_max(out_name, out))
            self.ranges[out_name] = out
        elif kind == "Activation" and _arg(op, "activation").s.decode() in ACTIVATIONS:
            act = _arg(op, "activation").s.decode()
            x = self.source(op.input[0])
            hop = self.emit(ACTIVATIONS[act], op.name, [x, *self.min_max(x)], out_name, dims)
            if act == "RELUX":
                hop.input.append(self.scalar(op.name + "/x", _arg(op, "max_limit").f))
            self.ranges[out_name] = adjust_range_for_hexagon(0.0, 1.0) if act == "SIGMOID" else self.range_of(x)
        elif kind == "Reshape" and self.layout_safe_reshape(op):
            x = self.source(op.input[0])
            hop = self.emit("QuantizedReshape", op.name, [x], out_name, dims)
            hop.input.append(self.arg_const(hop, "/shape", [len(dims)], dims))
            hop.input.extend(self.min_max(x))
            self.ranges[out_name] = self.range_of(x)
        elif kind == "Concat" and not any(i in em.weights for i in op.input) \
                and (len(em.shapes.get(op.input[0]) or []) != 4 or _arg_i(op, "has_data_format") == 1):
            xs = [self.source(i) for i in op.input]
            hop = self.emit("QuantizedConcat_8", op.name, [], out_name, dims)
            hop.input.append(self.arg_const(hop, "/dim", [1], [_arg_i(op, "axis", 3)]))
            hop.input.extend(xs)
            hop.input.extend(self.min_max(x)[0] for x in xs)
            hop.input.extend(self.min_max(x)[1] for x in xs)
            ranges = [self.range_of(x) for x in xs]  # nnlib's concat: the union of its inputs' ranges
            self.ranges[out_name] = adjust_range_for_hexagon(min(r.minval for r in ranges), max(r.maxval for r in ranges))
        else:
            raise Unsupported(self.why_not(op))

    def why_not(self, op) -> str:
        """The one line for an op this export does not turn into a Hexagon node: MACE's own
        refusal where ``hexagon_converter.py`` has one, else what is missing."""
        fallback = "MACE's DSP runtime runs the whole graph on the Hexagon, with no float fallback"
        name = op.name[len(OUTPUT_PREFIX) + 1:] if op.name.startswith(OUTPUT_PREFIX + "_") else op.name
        op = _Named(op, name)
        refusal = self.maces_refusal(op)
        if refusal:
            return f"mace dsp: {op.type} '{op.name}': {refusal} (hexagon_converter.py); {fallback}"
        if op.type not in MACE_HEXAGON_CONVERTERS:
            return (f"mace dsp: no Hexagon NN op for MACE {op.type} '{op.name}' (hexagon_converter.py converts "
                    f"no {op.type}); {fallback}")
        return (f"mace dsp: {op.type} '{op.name}' ({self.describe(op)}) is not written by edgeconv's Hexagon "
                f"export yet; {fallback}")

    def maces_refusal(self, op) -> str | None:
        if op.type == "Reduce":
            if _arg_i(op, "reduce_type", 0) != REDUCE_MEAN:
                return f"Hexagon Reduce only supports Mean (reduce_type {_arg_i(op, 'reduce_type', 0)})"
            if _arg_i(op, "keepdims", 0) != 1:
                return "Hexagon Reduce Mean only supports keep dims"
        if op.type == "Eltwise" and _arg_i(op, "type", 14) not in HEXAGON_ELTWISE:
            return f"Hexagon does not support elementwise type {_arg_i(op, 'type', 14)}"
        if op.type == "Activation" and _arg(op, "activation").s.decode() not in HEXAGON_ACTIVATIONS:
            return f"Hexagon does not support activation {_arg(op, 'activation').s.decode()}"
        if op.type in ("Conv2D", "DepthwiseConv2d") and _arg(op, "dilations") is not None \
                and list(_arg(op, "dilations").ints) != [1, 1]:
            return "Hexagon only support dilations[1,1]"
        return None

    def eltwise_operands(self, op) -> list[str] | None:
        """Two tensors of one shape, or a tensor and a constant (quantized as a weight,
        ``quantize_weights``; a per-channel one as NHWC ``[1, 1, 1, C]``, ``transpose_filters``;
        a scalar operand ``add_quantized_scalar_const_node`` ``<op>/b``), or None."""
        em = self.em
        out_rank = len(em.shapes.get(op.output[0]) or [])
        if len(op.input) == 1:
            if _arg_i(op, "scalar_input_index", 1) != 1:
                return None
            q, info = quantize_for_hexagon(np.array([_arg(op, "scalar_input").f]))
            return [self.source(op.input[0]), self.const(op.name + "/b", q, DT_UINT8, info)]
        if len(op.input) != 2 or op.input[0] in em.weights:
            return None
        a, c = op.input
        if c not in em.weights:
            return [self.source(a), self.source(c)] if em.shapes.get(a) == em.shapes.get(c) else None
        value = np.asarray(em.weights[c][0], np.float64)
        channels = (em.shapes.get(op.output[0]) or [0, 0])[1]
        if out_rank == 4 and value.ndim == 1 and value.size == channels:
            value = value.reshape(1, 1, 1, -1)
        elif out_rank == 4 and value.ndim == 4 and _arg_i(op, "has_data_format") == 1 \
                and list(value.shape[:3]) == [1, 1, 1]:
            pass  # stored NHWC already (an AUTO op's 4-D constant)
        elif value.size != 1:
            return None
        if c not in self.weights:
            q, info = quantize_for_hexagon(value)
            self.const(c, q, DT_UINT8, info)
        return [self.source(a), c]

    def describe(self, op) -> str:
        if op.type == "Eltwise":
            return f"Eltwise type {_arg_i(op, 'type', 14)}" + (" with a constant" if any(
                i in self.em.weights for i in op.input) else "")
        if op.type == "Reduce":
            return f"reduce_type {_arg_i(op, 'reduce_type', 0)}, keepdims {_arg_i(op, 'keepdims', 0)}"
        if op.type == "Activation":
            return f"activation {_arg(op, 'activation').s.decode()}"
        return "as written"

    def layout_safe_reshape(self, op) -> bool:
        """Hexagon tensors are NHWC: a Reshape is the ONNX one only when it moves no element
        between NCHW and NHWC order (a 1x1 spatial input or an unchanged channel-last split)."""
        src = self.em.shapes.get(op.input[0]) or []
        dst = self.em.shapes.get(op.output[0]) or []
        if not src or not dst:
            return False
        if len(src) == 4 and src[2] * src[3] != 1:
            return False
        return len(dst) != 4 or dst[2] * dst[3] == 1

    def convolution(self, op, dims) -> None:
        em = self.em
        if list(_arg(op, "dilations").ints) != [1, 1]:
            raise Unsupported(f"mace dsp: {op.type} '{op.name}' is dilated (Hexagon only supports dilations [1, 1])")
        x = self.source(op.input[0])
        filt, _ = em.weights[op.input[1]]
        kernel, strides = list(filt.shape[2:4]), list(_arg(op, "strides").ints)
        padding = _padding(op, em.shapes[op.input[0]], em.shapes[op.output[0]], kernel, strides)
        q, winfo = quantize_for_hexagon(filt.transpose(2, 3, 1, 0))  # OIHW / [M, C, kh, kw] -> HWIO / HWCM
        w = self.const(op.input[1], q, DT_UINT8, winfo)
        x_info = self.range_of(x)
        scale = x_info.scale * winfo.scale
        if len(op.input) > 2:
            bias = np.asarray(em.weights[op.input[2]][0], np.float64)
            bias_name = op.input[2]
        else:  # add_bias: Hexagon convolutions always take one
            bias, bias_name = np.zeros(dims[3]), op.name + "/bias"
        b = self.const(bias_name, int32_bias(bias, scale), DT_INT32,
                       QInfo(scale, 0, scale * -(2**31), scale * (2**31 - 1)))
        out = self.out_range(op)
        hop = self.emit("Supernode_8x8p32to8" if op.type == "Conv2D" else "DepthwiseSupernode_8x8p32to8", op.name,
                        [x, w, *self.min_max(x), *self.min_max(w)], op.output[0], dims, padding)
        hop.input.append(self.arg_const(hop, "/strides", [1, strides[0], strides[1], 1]))
        hop.input.extend([b, *self.min_max(b), *self.min_max(op.output[0], out)])
        self.ranges[op.output[0]] = out


def hexagon_net(em, inputs, outputs, record: dict) -> dict:
    """Rewrite ``em`` (ops and weights) into the Hexagon graph; returns the summary for the
    artifact meta with ``io`` (input/output name -> QInfo) and ``node_ids`` (tensor -> node id)."""
    if record.get("activation_dtype") != "uint8":
        raise Unsupported(f"mace dsp: Hexagon NN runs uint8 models only, not {record.get('mode')}")
    infos = activation_infos(record, adjust_range_for_hexagon)
    out_names = [o.name for o in outputs]
    folded = _fold_activations(em, set(out_names))
    net = HexagonNet(em, inputs, outputs, infos)
    float_inputs = [i for i in inputs if i.dtype == "float32"]
    if len(float_inputs) != len(inputs):
        raise Unsupported("mace dsp: Hexagon models take float inputs only (QuantizeINPUT_f_to_8)")
    # QuantizeINPUT_f_to_8: one node for every input, in input_info order (convert_input_output_node)
    input_op = net.emit("QuantizeINPUT_f_to_8", INPUT_NODE, [], None)
    for info in inputs:
        name = f"{INPUT_PREFIX}_{info.name}"
        if info.name not in infos:
            raise Unsupported(f"mace dsp: model input '{info.name}' has no calibrated range")
        for shape, dtype in ((info.mace_dims, DT_UINT8), ([1], DT_FLOAT), ([1], DT_FLOAT)):
            input_op.output_shape.add().dims.extend(shape)
            input_op.output_type.append(dtype)
            input_op.out_max_byte_size.append(reduce(mul, shape, 1) * (4 if dtype == DT_FLOAT else 1))
        input_op.output.append(name)
        net.renamed[info.name] = name
        net.ranges[name] = infos[info.name]
    produced = {name: op for op in em.ops for name in op.output}
    for name in out_names:  # quantize_nodes: a model output's producer and tensor are renamed
        op = produced.get(name)
        if op is None or len(op.output) != 1 or name in net.renamed:
            raise Unsupported(f"mace dsp: model output '{name}' is not written by a single-output op")
        inner = f"{OUTPUT_PREFIX}_{name}"
        op.name, op.output[0] = f"{OUTPUT_PREFIX}_{op.name}", inner
        net.renamed[name] = inner
        em.shapes[inner] = em.shapes.get(name, [])
        if name in infos:
            infos[inner] = infos[name]
    net.readers = _readers(em.ops)
    for op in em.ops:
        net.convert(op)
    output_inputs = []
    for name in out_names:
        src = net.source(name)
        output_inputs.extend([src, f"{src}:1", f"{src}:2"])
    net.emit("DequantizeOUTPUT_8tof", out_names[-1].replace(":", "_"), output_inputs, None)

    # the model's own constants keep their NetDef order, the converter's (min/max scalars,
    # argument tensors, added biases) follow in the order it adds them
    original = [n for n in em.weights if n in net.weights]
    added = [n for n in net.weights if n not in em.weights]
    net.weights = {n: net.weights[n] for n in original + added}
    # add_node_id: constants first, then ops; inputs resolved to (node id, output port)
    node_ids, where = {}, {}
    for k, name in enumerate(net.weights):
        node_ids[name] = k
        where[name] = (k, 0)
    next_id = len(net.weights)
    for op in net.ops:
        op.node_id = next_id
        for port, name in enumerate(op.output):
            where[name] = (next_id, 3 * port if op.type == "QuantizeINPUT_f_to_8" else port)
        next_id += 1
    for op in net.ops:
        for name in op.input:
            base, _, port = name.partition(":")
            node, first = where[base]
            op.node_input.add(node_id=node, output_port=first + (int(port) if port else 0))
    em.ops[:] = net.ops
    em.weights.clear()
    em.weights.update(net.weights)
    em.quant_weights.clear()
    em.quant_weights.update(net.quant)
    counts: dict[str, int] = {}
    for op in net.ops:
        counts[op.type] = counts.get(op.type, 0) + 1
    io = {i.name: infos[i.name] for i in inputs}
    io.update({name: net.ranges[net.source(name)] for name in out_names})
    return {"hexagon_ops": counts, "folded_activations": folded,
            "uint8_weights": sum(1 for v in net.weights.values() if v[1] == DT_UINT8),
            "int32_biases": sum(1 for n, v in net.weights.items() if v[1] == DT_INT32 and n in net.quant),
            "io": io, "node_ids": node_ids, "const_dims": net.shape_only}

"""Native uint8 MACE for the CPU: the float NetDef's ops rewritten the way MACE's converter
writes a quantized model (``quantize: 1`` in the deployment file).

Written from XiaoMi/mace@0fc55a5 ``tools/python/transform/transformer.py`` and the uint8 CPU
kernels (``mace/ops/*.cc`` ``MACE_REGISTER_OP(..., uint8_t)``):

* activation ranges are the QDQ model's (``edgeconv.quant/1`` ``activations``), turned into
  MACE's ``QuantizeActivationInfo`` with ``quantize_util.adjust_range`` (``non_zero`` False, as
  ``add_quantize_tensor_range`` does for a range file): ``minval``/``maxval``/``scale``/
  ``zero_point`` on every uint8 op output (``op.quantize_info``);
* a Conv2D / DepthwiseConv2d followed by its only reader ReLU / ReLUX carries it
  (``fold_activation``: the op takes the activation's name, output and args; during quantization
  only RELU/RELUX fold) — the uint8 kernel does not apply it, the output range (0 at zero point 0)
  does;
* filters are transposed (``transpose_filters``, quantized CPU: Conv2D OIHW -> OHWI,
  DepthwiseConv2d [M, C, kh, kw] -> [kh, kw, C, M]) and quantized
  per tensor with ``quantize_util.quantize(non_zero=True)`` (gemmlowp's
  ``L8R8WithLhsNonzeroBitDepthParams`` wants filter values in [1, 255]); the bias becomes int32
  with ``scale = input_scale * filter_scale``, zero point 0, ``np.round`` as
  ``quantize_with_scale_and_zero``; every quantized ConstTensor has ``quantized`` set and its
  scale/zero point/minval/maxval;
* uint8 ops have ``T = DT_UINT8``: Conv2D, DepthwiseConv2d, Pooling, Reduce MEAN/MIN/MAX and
  Concat, the ops whose uint8 kernel every MACE CPU build has and computes alike; Pooling and
  Reduce outputs take their input's quantize info (``add_quantize_tensor_range``: "default
  quantize info for ops like Pooling"; their kernels copy the input's scale and zero point).
  Eltwise and Activation stay float (see :data:`FLOAT_IN_UINT8_NETS`);
* model inputs pass a ``Quantize`` op ``mace_input_node_<name>`` with ``find_range_every_time``
  (the range of each actual input) and model outputs a ``Dequantize`` op whose producer's output
  is renamed ``mace_output_node_<name>`` (``quantize_nodes``); ``input_info``/``output_info``
  get the scale and zero point; the net gets ``quantize_flag`` 1.

Ops with no uint8 kernel modelled here (MACE's converter makes every op uint8 and the runtime then
refuses an op without one, e.g. Reshape) stay float between a ``Dequantize`` and a ``Quantize``
(static scale), the rule TFLite's int8 export follows where the hardware runs float.  MACE runs
every op of a quantized CPU net in NHWC (``net_def_adapter.cc`` ``GetDefaultDataFormat``: a
quantized model's CPU ops, ``data_format`` AUTO or NCHW alike, become NHWC), while its float CPU
kernels compute NCHW (Conv2D, Deconv2D, Pooling) or broadcast a per-channel constant along
``dim(1)`` (Eltwise): so a float op whose numbers depend on the layout cannot sit in a uint8 net,
and :func:`quantize_net` refuses it (:func:`layout_free`) instead of writing a file MACE
miscomputes (measured: a U-Net's float Deconv2D corrupts mace_run's heap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import Unsupported
from ...ir.graph import unique_name
from ...ir.integers import int32_bias
from .data_file import DT_FLOAT, DT_INT32, DT_UINT8

QUANTIZE_FLAG = "quantize_flag"  # base_converter.py MaceKeyword.mace_quantize_flag_arg_str
INPUT_PREFIX, OUTPUT_PREFIX = "mace_input_node", "mace_output_node"
FOLDED_ACTIVATIONS = ("RELU", "RELUX")
#: uint8 ops whose kernel copies the input's scale and zero point to the output.
SAME_SCALE = {"Pooling", "Reduce"}
#: Ops MACE's converter would write uint8 that stay float between Dequantize and Quantize here,
#: because a MACE built without NEON (x86 hosts: the mace_run that judges files) computes them
#: differently from an arm64 build or not at all: its uint8 Eltwise (the reference q8 kernel)
#: truncates the float sum to an integer before requantizing it
#: (XiaoMi/mace@0fc55a5:mace/ops/ref/q8/eltwise.cc#L49-L53: ``int32_t res; ... res =
#: real_input0 + real_input1``; measured: MobileNetV2 0.9 dB against 42 dB for the NEON
#: arithmetic), and it registers no uint8 Activation delegator (the reference one is float,
#: XiaoMi/mace@0fc55a5:mace/ops/ref/activation.cc#L133-L136; the uint8 one is NEON's,
#: mace/ops/arm/base/activation.cc#L301-L302: "Delegator not exist: Activation_2_0_0_general").  Float,
#: they compute the same on every build (and a float add of the dequantized inputs is closer to
#: the float model than either integer kernel).
FLOAT_IN_UINT8_NETS = ("Eltwise", "Activation")
CONVOLUTIONS = ("Conv2D", "DepthwiseConv2d")
SUM, SUB = 0, 1  # mace/ops/common/eltwise_type.h
REDUCE_MEAN, REDUCE_MIN, REDUCE_MAX = 0, 1, 2


@dataclass(frozen=True)
class QInfo:
    scale: float
    zero_point: int
    minval: float
    maxval: float


def adjust_range(in_min: float, in_max: float, non_zero: bool) -> QInfo:
    """``quantize_util.adjust_range`` for the CPU (python floats, as MACE's converter)."""
    out_max = max(0.0, in_max)
    out_min = min(0.0, in_min)
    if non_zero:
        out_min = min(out_min, in_min - (out_max - in_min) / 254.0)
    scale = (out_max - out_min) / 255.0
    eps = 1e-6
    if out_min < -eps and out_max > eps:
        zero = -out_min / scale
        zero_int = int(round(zero))
        if abs(zero - zero_int) > eps and non_zero:
            zero_int = int(math.ceil(zero))
    elif out_min > -eps:
        zero_int = 0
    else:
        zero_int = 255
    return QInfo(scale, zero_int, -zero_int * scale, (255 - zero_int) * scale)


def quantize_weights(data: np.ndarray) -> tuple[np.ndarray, QInfo]:
    """``quantize_util.quantize(data, cpu, non_zero=True)``: per-tensor uint8."""
    values = np.asarray(data, np.float64)
    info = adjust_range(float(values.min()), float(values.max()), non_zero=True)
    if info.scale == 0:
        raise ValueError("all-zero weights")
    return to_uint8(values, info), info


def to_uint8(values: np.ndarray, info: QInfo) -> np.ndarray:
    """``values`` on ``info``'s uint8 grid (round half to even, as numpy and MACE's converter)."""
    return np.clip(np.round(info.zero_point + values / info.scale).astype(np.int32), 0, 255).astype(np.uint8)


def activation_infos(record: dict, adjust=None) -> dict[str, QInfo]:
    """MACE quantize info per tensor from the QDQ model's per-tensor uint8 activations;
    ``adjust(min, max)`` is the device's ``adjust_range`` (the CPU's by default)."""
    adjust = adjust or (lambda lo, hi: adjust_range(lo, hi, non_zero=False))
    out = {}
    entries = {**record.get("calibrated", {}), **record.get("activations", {})}
    for name, entry in entries.items():
        if entry.get("dtype") != "uint8" or len(entry["scale"]) != 1:
            continue
        scale, zero = float(entry["scale"][0]), int(entry["zero_point"][0])
        out[name] = adjust(scale * (0 - zero), scale * (255 - zero))
    return out


def _arg(op, name, default=None):
    for a in op.arg:
        if a.name == name:
            return a
    return default


def _arg_i(op, name, default=0) -> int:
    a = _arg(op, name)
    return int(a.i) if a is not None else default


def _set_i(op, name: str, value: int) -> None:
    a = _arg(op, name)
    if a is None:
        a = op.arg.add()
        a.name = name
    a.i = int(value)


def _readers(ops) -> dict[str, list]:
    readers: dict[str, list] = {}
    for op in ops:
        for name in op.input:
            readers.setdefault(name, []).append(op)
    return readers


def _fold_activations(em, outputs: set[str]) -> dict[str, str]:
    """``fold_activation`` restricted to what quantization folds (RELU/RELUX into Conv2D);
    returns {the activation's output, now the convolution's: the convolution's own output}."""
    folded = {}
    readers = _readers(em.ops)
    drop = set()
    for op in em.ops:
        if op.type not in CONVOLUTIONS or op.output[0] in outputs or _arg(op, "activation") is not None:
            continue
        after = readers.get(op.output[0], [])
        if len(after) != 1 or after[0].type != "Activation":
            continue
        act = after[0]
        if _arg(act, "activation").s.decode() not in FOLDED_ACTIVATIONS:
            continue
        folded[act.output[0]] = op.output[0]
        op.name = act.name
        op.output[0] = act.output[0]
        for a in act.arg:
            if a.name in ("activation", "max_limit", "activation_coefficient"):
                op.arg.add().CopyFrom(a)
        drop.add(id(act))
    em.ops[:] = [op for op in em.ops if id(op) not in drop]
    return folded


def _uint8_kind(op, em) -> bool:
    """Does MACE have a uint8 CPU kernel for this op instance (and do we model it)?"""
    if op.type in CONVOLUTIONS:
        return (list(_arg(op, "dilations").ints) == [1, 1] and len(op.input) >= 2 and op.input[1] in em.weights
                and (len(op.input) < 3 or op.input[2] in em.weights))
    if op.type == "Pooling":
        return True
    if op.type == "Concat":  # a 4-D axis must be the NHWC one (has_data_format) uint8 tensors use
        four_d = len(em.shapes.get(op.input[0]) or []) == 4
        return not any(i in em.weights for i in op.input) and (not four_d or _arg_i(op, "has_data_format") == 1)
    if op.type == "Reduce":
        return _arg_i(op, "reduce_type", 0) in (REDUCE_MEAN, REDUCE_MIN, REDUCE_MAX) and _arg_i(op, "has_data_format") == 1
    return False


def layout_free(op, em) -> bool:
    """Does a float op compute the same numbers on NHWC tensors (a quantized net's layout in
    MACE) as on the NCHW ones the float net and edgeconv's reader use?  An op with no 4-D tensor,
    an Activation, an Eltwise of equal shapes or with a scalar, and a Reshape of an
    ``[N, C, 1, 1]`` map (one order either way) do; everything else reads the layout."""
    shapes = [em.shapes.get(name) or [] for name in list(op.input) + list(op.output) if name not in em.weights]
    if all(len(shape) != 4 for shape in shapes):
        return True
    if op.type == "Activation":
        return True
    if op.type == "Eltwise":
        constants = [em.weights[i][0] for i in op.input if i in em.weights]
        data = [em.shapes.get(i) for i in op.input if i not in em.weights]
        return all(np.size(c) == 1 for c in constants) and all(d == data[0] for d in data)
    if op.type == "Reshape":
        shape = em.shapes.get(op.input[0]) or []
        return len(shape) == 4 and shape[2] == shape[3] == 1
    return False


def quantize_net(em, inputs, outputs, record: dict, hw: str) -> dict:
    """Rewrite ``em`` (ops and weights) in place; returns a summary for the artifact meta and
    ``(input/output name -> QInfo)`` for ``input_info``/``output_info`` as ``summary["io"]``."""
    if record.get("activation_dtype") != "uint8":
        raise Unsupported(f"mace: native {record.get('mode')} export is uint8 only")
    if hw != "cpu":
        raise Unsupported(UNSUPPORTED_HW.get(hw, f"mace {hw}: uint8 export not implemented"))
    if record.get("given") is not None:
        raise Unsupported(GIVEN_WEIGHTS)
    infos = activation_infos(record)
    out_names = {o.name for o in outputs}
    folded = _fold_activations(em, out_names)
    uint8, chosen = _choose_uint8_ops(em, infos, folded)
    _refuse_layout_bound_float_ops(em, chosen)
    quant_weights = _quantize_weights_of(em, chosen, uint8)
    edges = _Edges(em, infos, {i.name for i in inputs if i.dtype == "float32"})
    edges.rewire(chosen, out_names)
    em.quant_weights.update(quant_weights)
    io = {name: infos[name] for name in edges.quantized_as if name in edges.in_names}
    io.update({name: uint8[name] for name in edges.renamed_out})
    counts = edges.counts
    return {"uint8_ops": len(chosen), "float_ops": sum(1 for op in em.ops if op.type not in counts) - len(chosen),
            "quantize_ops": counts["Quantize"], "dequantize_ops": counts["Dequantize"],
            "folded_activations": len(folded), "uint8_weights": sum(1 for v in em.weights.values() if v[1] == DT_UINT8),
            "int32_biases": sum(1 for n in quant_weights if em.weights[n][1] == DT_INT32), "io": io}


def _weight_users(em) -> dict[str, int]:
    """How many ops read each weight."""
    users: dict[str, int] = {}
    for op in em.ops:
        for name in op.input:
            if name in em.weights:
                users[name] = users.get(name, 0) + 1
    return users


def _output_info(op, infos: dict[str, QInfo], folded: dict[str, str], readers: dict[str, list]) -> QInfo | None:
    """The quantize info of ``op``'s output: its own range, else the one the QDQ model gave the
    tensor a folded or following Relu stands for."""
    name = op.output[0]
    if name in infos:
        return infos[name]
    if folded.get(name) in infos:  # the QDQ model quantizes the convolution's output, not its Relu's
        return infos[folded[name]]
    after = readers.get(name, [])
    # the QDQ model folds a Relu into the op before it (an Add): its range is the Relu's
    if len(after) == 1 and after[0].type == "Activation" and after[0].output[0] in infos:
        return infos[after[0].output[0]]
    return None


def _choose_uint8_ops(em, infos: dict[str, QInfo], folded: dict[str, str]) -> tuple[dict[str, QInfo], list]:
    """(tensors carried as uint8 -> their quantize info, the ops that compute in uint8): an op
    with a uint8 kernel whose data inputs all have a range and whose output has one; a
    convolution only when it alone reads its filter and bias."""
    readers = _readers(em.ops)
    weight_users = _weight_users(em)
    uint8: dict[str, QInfo] = {}
    chosen = []
    for op in em.ops:
        if not _uint8_kind(op, em) or len(op.output) != 1:
            continue
        data_inputs = [i for i in op.input if i not in em.weights]
        if op.type in CONVOLUTIONS:
            data_inputs = [op.input[0]]
            if weight_users.get(op.input[1]) != 1 or (len(op.input) > 2 and weight_users.get(op.input[2]) != 1):
                continue
        if not all(i in uint8 or i in infos for i in data_inputs):
            continue
        if op.type in SAME_SCALE:
            info = uint8.get(data_inputs[0]) or infos[data_inputs[0]]
        else:
            info = _output_info(op, infos, folded, readers)
        if info is None:
            continue
        for i in data_inputs:
            uint8.setdefault(i, infos.get(i))
        uint8[op.output[0]] = info
        chosen.append(op)
    if not chosen:  # quantize_flag would make MACE run the float ops in NHWC
        raise Unsupported("mace uint8: no op of this model has a MACE uint8 CPU kernel edgeconv writes "
                          "(Conv2D, DepthwiseConv2d, Pooling, Reduce, Concat)")
    return uint8, chosen


def _refuse_layout_bound_float_ops(em, chosen: list) -> None:
    """Unsupported for the first op left float whose numbers depend on the layout (:func:`layout_free`)."""
    chosen_ids = {id(op) for op in chosen}
    for op in em.ops:
        if id(op) not in chosen_ids and not layout_free(op, em):
            raise Unsupported(
                f"mace uint8: {op.type} '{op.name}' has no MACE uint8 kernel and would stay float in the "
                "quantized net, whose tensors MACE lays out NHWC (net_def_adapter.cc GetDefaultDataFormat), "
                f"while its float {op.type} reads them as NCHW: MACE would miscompute it (use --quantize fp16 "
                "for MACE, or int8 for another framework)")


def _quantize_weights_of(em, chosen: list, uint8: dict[str, QInfo]) -> dict[str, QInfo]:
    """Mark the chosen ops uint8 with their quantize info; quantize each convolution's filter
    (transposed as ``transpose_filters`` does) and bias.  Returns weight name -> its QInfo."""
    quant_weights: dict[str, QInfo] = {}
    for op in chosen:
        _set_i(op, "T", DT_UINT8)
        del op.quantize_info[:]
        op.quantize_info.add(**vars(uint8[op.output[0]]))
        if op.type not in CONVOLUTIONS:
            continue
        filt, _ = em.weights[op.input[1]]
        # transpose_filters: Conv2D OIHW -> OHWI; DepthwiseConv2d [M, C, kh, kw] -> [kh, kw, C, M]
        q, winfo = quantize_weights(filt.transpose(0, 2, 3, 1) if op.type == "Conv2D" else filt.transpose(2, 3, 1, 0))
        em.weights[op.input[1]] = (q, DT_UINT8)
        quant_weights[op.input[1]] = winfo
        if len(op.input) > 2:
            scale = uint8[op.input[0]].scale * winfo.scale
            bias, _ = em.weights[op.input[2]]
            em.weights[op.input[2]] = (int32_bias(bias, scale), DT_INT32)  # quantize_with_scale_and_zero(b, s, 0)
            quant_weights[op.input[2]] = QInfo(scale, 0, 0.0, 0.0)
    return quant_weights


class _Edges:
    """The edges of the uint8 region: a ``Quantize`` where a float tensor enters it (the model
    input's with ``find_range_every_time``), a ``Dequantize`` where a uint8 tensor leaves it
    (a model output's producer renamed ``mace_output_node_<name>``)."""

    def __init__(self, em, infos: dict[str, QInfo], in_names: set[str]):
        self.em, self.infos, self.in_names = em, infos, in_names
        self.new_ops: list = []
        self.renamed_out: dict[str, str] = {}
        self.quantized_as: dict[str, str] = {}
        self.dequantized_as: dict[str, str] = {}
        self.counts = {"Quantize": 0, "Dequantize": 0}

    def io_format(self, name: str) -> int:
        return 1 if len(self.em.shapes.get(name) or []) == 4 else 0

    def mace_dims(self, name: str) -> list[int]:
        dims = self.em.shapes.get(name) or []
        return [dims[0], dims[2], dims[3], dims[1]] if len(dims) == 4 else list(dims)

    def edge_op(self, op_type: str, name: str, src: str, dst: str, info: QInfo | None, args=(),
                output_type=None, shape=None):
        from ._generated import mace_pb2
        from .data_file import set_arg

        op = mace_pb2.OperatorDef(name=name, type=op_type)
        op.input.append(src)
        op.output.append(dst)
        for arg_name, kind, value in [("T", "i", DT_UINT8), *args]:
            set_arg(op.arg.add(), arg_name, kind, value)
        if shape:
            op.output_shape.add().dims.extend(shape)
        if output_type is not None:
            op.output_type.append(output_type)
        if info is not None:
            op.quantize_info.add(**vars(info))
        self.counts[op_type] += 1
        return op

    def quantized_name(self, name: str) -> str:
        """The uint8 copy of float tensor ``name`` (its ``Quantize`` written once)."""
        em = self.em
        if name not in self.quantized_as:
            if name in self.in_names:
                new = f"{INPUT_PREFIX}_{name}"
                args = [("data_format", "i", self.io_format(name)), ("find_range_every_time", "i", 1)]
            else:
                new = unique_name(f"{name}_quantized", em.used_names)
                args = [("data_format", "i", self.io_format(name))]
            em.used_names.add(new)
            em.shapes[new] = em.shapes.get(name, [])
            self.new_ops.append(self.edge_op("Quantize", new.replace(":", "_"), name, new, self.infos[name], args,
                                             shape=self.mace_dims(name)))
            self.quantized_as[name] = new
        return self.quantized_as[name]

    def dequantized_name(self, name: str) -> str:
        """The float copy of uint8 tensor ``name`` (its ``Dequantize`` written once)."""
        em = self.em
        if name not in self.dequantized_as:
            new = unique_name(f"{name}_dequantized", em.used_names)
            em.used_names.add(new)
            em.shapes[new] = em.shapes.get(name, [])
            self.new_ops.append(self.edge_op("Dequantize", new, name, new, None,
                                             [("data_format", "i", self.io_format(name))], output_type=DT_FLOAT,
                                             shape=self.mace_dims(name)))
            self.dequantized_as[name] = new
        return self.dequantized_as[name]

    def rewire(self, chosen: list, out_names: set[str]) -> None:
        """Every op reads its inputs in its own type; ``em.ops`` gets the edge ops in order."""
        em = self.em
        chosen_ids = {id(op) for op in chosen}
        carried = {op.output[0] for op in chosen}
        for op in em.ops:
            is_q = id(op) in chosen_ids
            for k, name in enumerate(op.input):
                if name in em.weights:
                    continue
                if is_q and name not in carried:
                    op.input[k] = self.quantized_name(name)
                elif not is_q and name in carried:
                    # a model output is float already (its Dequantize); any other uint8 tensor gets one
                    op.input[k] = name if name in self.renamed_out else self.dequantized_name(name)
                elif name in self.renamed_out:
                    op.input[k] = self.renamed_out[name]
            self.new_ops.append(op)
            if is_q and op.output[0] in out_names:
                self._dequantize_output(op)
        em.ops[:] = self.new_ops

    def _dequantize_output(self, op) -> None:
        """A uint8 model output: its producer writes ``mace_output_node_<name>``, a Dequantize the output."""
        name = op.output[0]
        inner = f"{OUTPUT_PREFIX}_{name}"
        op.name = f"{OUTPUT_PREFIX}_{op.name}"
        op.output[0] = inner
        self.em.used_names.add(inner)
        self.renamed_out[name] = inner
        self.new_ops.append(self.edge_op("Dequantize", name.replace(":", "_"), inner, name, None,
                                         [("data_format", "i", self.io_format(name))], output_type=DT_FLOAT,
                                         shape=self.mace_dims(name)))


#: Why a model that came quantized is not written for MACE's CPU with its own scales.
GIVEN_WEIGHTS = ("mace uint8: the model's own weight scales cannot be kept: MACE quantizes every filter itself, "
                 "per tensor, uint8 in [1, 255] from its min/max (XiaoMi/mace@0fc55a5 tools/python/quantize/"
                 "quantize_util.py quantize(non_zero=True)); quantize the float model for MACE with --calibration, "
                 "or port the quantized model to TFLite/TNN int8")


#: Why a quantized file is not written for MACE's integer-only processors (the DSP's is
#: hexagon.py's, not this module's).
UNSUPPORTED_HW = {
    "apu": ("mace apu: MACE's converter takes APU models from TensorFlow only (tools/python/convert.py: "
            "\"apu only support model from tensorflow\"); an ONNX model cannot be written for the APU"),
}

"""Native int8 TFLite: the written float ops made integer, with the QDQ model's parameters.

``convert`` lowers the float (legalized) model as usual; :func:`quantize_int8` then rewrites the
ModelWriter's ops the way TensorFlow's full-integer post-training quantization lays a file out:

* activations are INT8 tensors with one scale/zero point each, taken from the QDQ model
  (``quantization.json``'s ``activations``, keyed by the float model's tensor names; every layout
  copy of a tensor shares them);
* CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV weights are INT8, symmetric
  (zero point 0, range [-127, 127]) with one scale per output channel (``quantized_dimension``
  0, or 3 for the depthwise filter ``[1, H, W, C]``) — onnxruntime's scheme, so the integers are
  the QDQ model's; biases are INT32 with scale ``input_scale * weight_scale[c]``;
* ops whose int8 kernel copies or compares raw integers (RESHAPE, TRANSPOSE, PAD, MAX_POOL_2D,
  AVERAGE_POOL_2D, STRIDED_SLICE, RESIZE_*, ...) get their input's parameters on the output;
  CONCATENATION, MAXIMUM and MINIMUM inputs are requantized (QUANTIZE int8 -> int8) to the
  output's, because LiteRT's int8 kernels refuse differing scales
  (``tflite/kernels/concatenation.cc``: "TF_LITE_ENSURE_EQ(context, t->params.scale,
  output->params.scale)");
* SOFTMAX and LOGISTIC outputs are scale 1/256, zero point -128, TANH 1/128 and 0 — what
  ``SoftmaxPrepare`` / ``SigmoidPrepare`` require;
* an op with no int8 kernel here (or a tensor without parameters) stays float between a
  DEQUANTIZE and a QUANTIZE — allowed only when the hardware runs float (``full_integer=False``);
  on 8-bit-only hardware it is one Unsupported line naming the op;
* the interface: ``full_integer`` — int8 inputs and outputs (the Edge TPU's rule); otherwise
  float32 inputs and outputs with one QUANTIZE after each input and one DEQUANTIZE before each
  output, as TensorFlow's converter writes by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import Unsupported
from ...ir.integers import int32_bias
from ._generated import schema_generated as fb


@dataclass(frozen=True)
class QParams:
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0

    @classmethod
    def of(cls, scale, zero_point, axis: int = 0) -> QParams:
        return cls(tuple(float(np.float32(s)) for s in np.ravel(scale)),
                   tuple(int(z) for z in np.ravel(zero_point)), int(axis))

    def to_flatbuffer(self):
        q = fb.QuantizationParametersT()
        q.scale = list(self.scale)
        q.zeroPoint = list(self.zero_point)
        q.quantizedDimension = self.axis
        return q

    def real_range(self) -> tuple[float, float]:
        s, z = self.scale[0], self.zero_point[0]
        return s * (-128 - z), s * (127 - z)

    def to_dict(self) -> dict:
        return {"scale": list(self.scale), "zero_point": list(self.zero_point), "axis": self.axis}


SOFTMAX_OUT = QParams((1.0 / 256,), (-128,))
TANH_OUT = QParams((1.0 / 128,), (0,))

#: op -> (weight input, activation input, bias input, channel axis of the stored weight)
WEIGHTED = {"CONV_2D": (1, 0, 2, 0), "DEPTHWISE_CONV_2D": (1, 0, 2, 3), "FULLY_CONNECTED": (1, 0, 2, 0),
            "TRANSPOSE_CONV": (1, 2, 3, 0)}
#: Int8 kernels that move or compare raw integers: the output has the (data) input's parameters.
SAME_SCALE = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "PAD", "PADV2", "MAX_POOL_2D", "AVERAGE_POOL_2D",
              "STRIDED_SLICE", "SLICE", "GATHER", "SPLIT", "SPLIT_V", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
              "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "TILE",
              "BROADCAST_TO", "REDUCE_MAX", "REDUCE_MIN", "PACK", "UNPACK"}
#: Int8 kernels whose inputs must all carry the output's parameters (requantized when not).
OUTPUT_SCALE_INPUTS = {"CONCATENATION", "MAXIMUM", "MINIMUM"}
#: Int8 kernels with fixed output parameters.
FIXED_OUTPUT = {"SOFTMAX": SOFTMAX_OUT, "LOGISTIC": SOFTMAX_OUT, "TANH": TANH_OUT}
#: Int8 kernels that rescale between any input and output parameters.
RESCALING = {"ADD", "SUB", "MUL", "MEAN", "SUM", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "HARD_SWISH",
             "PRELU", "GELU"}
INT8_OPS = set(WEIGHTED) | SAME_SCALE | OUTPUT_SCALE_INPUTS | set(FIXED_OUTPUT) | RESCALING


def _data_input(op) -> int:
    """Position of the tensor a SAME_SCALE op moves (SPLIT's first input is the axis)."""
    return 1 if op.builtin == "SPLIT" else 0


def _minmax_params(lo: float, hi: float) -> QParams:
    """Asymmetric int8 parameters covering [lo, hi] and 0 (onnxruntime's compute_scale_zp)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zero = int(np.clip(np.rint(-128 - lo / scale), -128, 127))
    return QParams.of([scale], [zero])


def quantize_tensor(value: np.ndarray, q: QParams, dtype=np.int8) -> np.ndarray:
    scale, zero = np.asarray(q.scale, np.float64), np.asarray(q.zero_point, np.float64)
    if len(q.scale) > 1:
        shape = [1] * value.ndim
        shape[q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    info = np.iinfo(dtype)
    return np.clip(np.rint(value.astype(np.float64) / scale) + zero, info.min, info.max).astype(dtype)


def weight_params(weights: np.ndarray, axis: int | None) -> QParams:
    """Symmetric int8 per output channel (``axis``) or per tensor (``None``): scale = max|w| / 127."""
    if axis is None:
        absmax = np.array([np.max(np.abs(weights))]) if weights.size else np.zeros(1)
    else:
        absmax = np.max(np.abs(np.moveaxis(weights, axis, 0).reshape(weights.shape[axis], -1)), axis=1)
    scale = np.where(absmax > 0, absmax.astype(np.float64) / 127.0, 1.0)
    return QParams.of(scale.astype(np.float32), np.zeros(len(scale), np.int64), 0 if axis is None else axis)


@dataclass
class Int8Result:
    inputs: list[int]
    outputs: list[int]
    #: Ops left in float (builtin and reason), each between DEQUANTIZE and QUANTIZE.
    float_ops: list[dict]
    quantize_ops: int = 0
    dequantize_ops: int = 0
    requantize_ops: int = 0
    #: per-channel int8 weight tensors written
    weights: int = 0


class _Int8Pass:
    def __init__(self, writer, record: dict, per_channel: bool, full_integer: bool):
        self.w, self.record, self.per_channel, self.full_integer = writer, record, per_channel, full_integer
        self.qp: dict[int, QParams] = {}
        self.producer = {o: op for op in writer.ops for o in op.outputs}

    # -- parameters -------------------------------------------------------------------------------
    def seed(self, lowering) -> None:
        activations = self.record.get("activations", {})
        calibrated = self.record.get("calibrated", {}) if self.full_integer else {}
        for onnx_name, forms in lowering.written().items():
            entry = activations.get(onnx_name) or calibrated.get(onnx_name)
            if entry is None or entry.get("dtype") != "int8" or len(entry["scale"]) != 1:
                continue
            for index in forms.values():
                if self.w.tensors[index].dtype == np.float32:
                    self.qp[index] = QParams.of(entry["scale"], entry["zero_point"])

    def is_const(self, index: int) -> bool:
        return index >= 0 and self.w.value(index) is not None and index not in self.producer

    def is_float_activation(self, index: int) -> bool:
        return index >= 0 and not self.is_const(index) and self.w.tensors[index].dtype == np.float32

    def propagate(self) -> None:
        for _ in range(3):  # forward and backward until nothing changes (short chains)
            changed = False
            for op in self.w.ops:
                changed |= self._propagate_op(op)
            if not changed:
                return

    def _propagate_op(self, op) -> bool:
        qp, changed = self.qp, False
        outs = [o for o in op.outputs if self.w.tensors[o].dtype == np.float32]
        if op.builtin in FIXED_OUTPUT:
            for o in outs:
                if qp.get(o) != FIXED_OUTPUT[op.builtin]:
                    qp[o], changed = FIXED_OUTPUT[op.builtin], True
        elif op.builtin in SAME_SCALE:
            src = op.inputs[_data_input(op)]
            if src in qp:
                for o in outs:
                    if qp.get(o) != qp[src]:
                        qp[o], changed = qp[src], True
            elif outs and all(o in qp for o in outs) and self.is_float_activation(src):
                qp[src], changed = qp[outs[0]], True
        elif op.builtin in OUTPUT_SCALE_INPUTS and outs and outs[0] not in qp:
            known = [qp[i] for i in op.inputs if i in qp]
            if known and len(known) == sum(self.is_float_activation(i) for i in op.inputs):
                lows, highs = zip(*(k.real_range() for k in known))
                qp[outs[0]], changed = _minmax_params(min(lows), max(highs)), True
        elif op.builtin in ("RELU", "RELU6", "RELU_N1_TO_1"):
            src = op.inputs[0]
            if src not in qp and outs and outs[0] in qp and self.is_float_activation(src):
                qp[src], changed = qp[outs[0]], True
        return changed

    # -- which ops run in int8 ---------------------------------------------------------------------
    def why_float(self, op) -> str | None:
        """None when ``op`` runs in int8, else the reason it stays float."""
        if op.builtin not in INT8_OPS:
            return f"{op.builtin} has no int8 kernel mapping"
        if op.builtin == "CONV_2D" and op.extra.get("grouped"):
            return "grouped CONV_2D has no int8 kernel"
        if op.builtin in WEIGHTED:
            w_in = WEIGHTED[op.builtin][0]
            if not self.is_const(op.inputs[w_in]):
                return f"{op.builtin} weights are not constant"
        for i in op.inputs:
            if self.is_float_activation(i) and i not in self.qp:
                return f"no quantization parameters for '{self.w.tensors[i].name}'"
        for o in op.outputs:
            if self.w.tensors[o].dtype != np.float32:
                return f"output '{self.w.tensors[o].name}' is {self.w.tensors[o].dtype.name}"
            if o not in self.qp:
                return f"no quantization parameters for '{self.w.tensors[o].name}'"
        return None

    @staticmethod
    def touches_float(w, op) -> bool:
        return any(i >= 0 and w.tensors[i].dtype == np.float32 for i in list(op.inputs) + list(op.outputs))

    # -- rewriting -----------------------------------------------------------------------------------
    def run(self, inputs: list[int], outputs: list[int]) -> Int8Result:
        w = self.w
        decisions = {id(op): self.why_float(op) for op in w.ops}
        float_ops = [{"op": op.builtin, "output": w.tensors[op.outputs[0]].name, "reason": decisions[id(op)]}
                     for op in w.ops if decisions[id(op)] is not None and self.touches_float(w, op)]
        if self.full_integer and float_ops:
            first = float_ops[0]
            more = f" (and {len(float_ops) - 1} more)" if len(float_ops) > 1 else ""
            raise Unsupported(f"tflite full-integer int8: {first['op']} -> '{first['output']}' cannot run in int8: "
                              f"{first['reason']}{more}; this hardware runs no float ops")
        result = Int8Result(list(inputs), list(outputs), float_ops)
        # Retype every tensor an int8 op produces (and full-integer graph inputs) before rewiring.
        int8_ops = [op for op in w.ops if decisions[id(op)] is None]
        for op in int8_ops:
            for o in op.outputs:
                self._retype(o, self.qp[o])
        if self.full_integer:
            for i in inputs:
                if w.tensors[i].dtype == np.float32:
                    if i not in self.qp:
                        raise Unsupported(f"tflite full-integer int8: input '{w.tensors[i].name}' has no "
                                          "quantization parameters")
                    self._retype(i, self.qp[i])
        self._quantized_of: dict[tuple[int, QParams], int] = {}
        self._dequantized_of: dict[int, int] = {}
        self._new_ops: list = []
        for op in w.ops:
            if decisions[id(op)] is None:
                self._rewire_int8(op, result)
            else:
                op.inputs = [self._dequantized(i, result) if i >= 0 and w.tensors[i].dtype == np.int8
                             and w.tensors[i].quant is not None and not self.is_const(i) else i for i in op.inputs]
            self._new_ops.append(op)
        for k, o in enumerate(outputs):
            if w.tensors[o].dtype == np.int8 and not self.full_integer:
                name = w.tensors[o].name
                result.outputs[k] = self._dequantized(o, result)
                w.rename(result.outputs[k], name)
        w.ops = self._new_ops
        return result

    def _retype(self, index: int, q: QParams) -> None:
        t = self.w.tensors[index]
        t.dtype, t.quant = np.dtype(np.int8), q

    def _emit(self, builtin: str, src: int, dst: int) -> None:
        from .writer import Op

        self._new_ops.append(Op(builtin, [src], [dst]))

    def _quantized(self, index: int, q: QParams, result: Int8Result) -> int:
        """``index`` (float, or int8 with other parameters) as int8 with parameters ``q``."""
        key = (index, q)
        if key not in self._quantized_of:
            t = self.w.tensors[index]
            requant = t.dtype == np.int8
            out = self.w.tensor(f"{t.name}/{'requantized' if requant else 'int8'}", t.shape, np.int8)
            self.w.tensors[out].quant = q
            self._emit("QUANTIZE", index, out)
            if requant:
                result.requantize_ops += 1
            else:
                result.quantize_ops += 1
            self._quantized_of[key] = out
        return self._quantized_of[key]

    def _dequantized(self, index: int, result: Int8Result) -> int:
        if index not in self._dequantized_of:
            t = self.w.tensors[index]
            out = self.w.tensor(f"{t.name}/float", t.shape, np.float32)
            self._emit("DEQUANTIZE", index, out)
            result.dequantize_ops += 1
            self._dequantized_of[index] = out
        return self._dequantized_of[index]

    def _rewire_int8(self, op, result: Int8Result) -> None:
        w = self.w
        out_q = self.qp[op.outputs[0]]
        weighted = WEIGHTED.get(op.builtin)
        new_inputs = list(op.inputs)
        if weighted is not None:
            w_in, x_in, b_in, axis = weighted
            weights = np.asarray(w.value(op.inputs[w_in]), np.float32)
            wq = weight_params(weights, axis if self.per_channel else None)
            new_inputs[w_in] = w.quantized_constant(f"{w.tensors[op.inputs[w_in]].name}/int8",
                                                    quantize_tensor(weights, wq), wq)
            x_index = op.inputs[x_in]
            x_q = self.qp.get(x_index) or w.tensors[x_index].quant
            if b_in < len(op.inputs) and op.inputs[b_in] >= 0:
                bias = np.asarray(w.value(op.inputs[b_in]), np.float64).reshape(-1)
                # int32, zero point 0, scale input_scale * weight_scale (per channel when the weights are)
                bq = QParams.of(np.asarray(wq.scale, np.float64) * x_q.scale[0], np.zeros(len(wq.scale), np.int64))
                q_bias = int32_bias(bias, np.broadcast_to(np.asarray(bq.scale, np.float64), bias.shape))
                new_inputs[b_in] = w.quantized_constant(f"{w.tensors[op.inputs[b_in]].name}/int32", q_bias, bq)
        for k, i in enumerate(op.inputs):
            if i < 0 or (weighted is not None and k in (weighted[0], weighted[2])):
                continue
            t = w.tensors[i]
            required = out_q if op.builtin in OUTPUT_SCALE_INPUTS or op.builtin == "PADV2" and k == 2 else None
            if self.is_const(i):
                value = w.value(i)
                if value.dtype != np.float32:
                    continue  # shapes, axes, paddings, indices
                q = required or _minmax_params(float(value.min()), float(value.max()))
                new_inputs[k] = w.quantized_constant(f"{t.name}/int8", quantize_tensor(value, q), q)
            elif t.dtype == np.int8:
                if required is not None and t.quant != required:
                    new_inputs[k] = self._quantized(i, required, result)
            elif t.dtype == np.float32:
                new_inputs[k] = self._quantized(i, required or self.qp[i], result)
        op.inputs = new_inputs


def quantize_int8(writer, lowering, inputs: list[int], outputs: list[int], record: dict,
                  full_integer: bool) -> Int8Result:
    """Rewrite ``writer``'s float ops as int8 ops (module docstring); returns the new interface."""
    if record.get("activation_dtype") != "int8":
        raise Unsupported(f"tflite: native {record.get('mode')} export is int8 only "
                          f"(activations {record.get('activation_dtype')})")
    p = _Int8Pass(writer, record, bool(record.get("per_channel", True)), full_integer)
    p.seed(lowering)
    p.propagate()
    return p.run(inputs, outputs)


def quantize_weights_only(writer, record: dict) -> int:
    """``--quantize int8-weights`` (TFLite's dynamic-range quantization): the weights of
    CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV become INT8 (symmetric, per
    output channel unless ``per_channel`` is false), activations and biases stay float32: LiteRT
    runs these ops with its hybrid kernels (CONV_2D v5, DEPTHWISE_CONV_2D v6, FULLY_CONNECTED v12
    when per channel).  Returns the number of weight tensors quantized."""
    per_channel = bool(record.get("per_channel", True))
    count = 0
    for op in writer.ops:
        if op.builtin not in WEIGHTED or (op.builtin == "CONV_2D" and op.extra.get("grouped")):
            continue
        w_in, x_in, _, axis = WEIGHTED[op.builtin]
        index = op.inputs[w_in]
        value = writer.value(index)
        if value is None or value.dtype != np.float32 or writer.tensors[op.inputs[x_in]].dtype != np.float32:
            continue
        q = weight_params(value, axis if per_channel else None)
        op.inputs[w_in] = writer.quantized_constant(f"{writer.tensors[index].name}/int8", quantize_tensor(value, q), q)
        count += 1
    return count


def count_int8_weights(writer) -> int:
    return sum(1 for op in writer.ops if op.builtin in WEIGHTED
               and writer.tensors[op.inputs[WEIGHTED[op.builtin][0]]].dtype == np.int8)

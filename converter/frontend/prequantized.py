"""A model that is already quantized (QDQ ONNX; an int8 ``.tflite`` through tf2onnx): its float
graph, and the scales and zero points it was quantized with, kept for the quantize stage.

onnxruntime's quantizer, NNCF and QAT exports (torch, TensorFlow) write QuantizeLinear /
DequantizeLinear (Q/DQ) pairs around float ops; tf2onnx writes an int8 ``.tflite`` the same
way, with data-movement ops (Transpose, Reshape) on the int8 tensors between a Q and its DQ.
Checked, legalized and exported as they are, the Q/DQ nodes would be custom layers.  Instead
:func:`dequantize_input` turns the model into its float graph::

    x -> Q(s, z) -> DQ(s, z) -> Conv(W = DQ(Wq, sw, 0))      x -> Conv(W = sw * Wq)
                                                       ==>   given: x: (s, z), W: (sw, 0, axis 0)

* a DQ of a constant becomes the constant it computes (``(q - z) * s`` in float32, as
  onnxruntime's DequantizeLinear); a Q of a constant (QAT weights) is folded first;
* a Q or DQ of a tensor is bypassed (its readers read its input); an int8 tensor between them
  (a Transpose of int8) becomes float, and an int8 graph input or output becomes a float one of
  the same name;
* each tensor's scale, zero point, type and axis go into the model's metadata
  (:data:`GIVEN_KEY`, format ``edgeconv.given_quant/1``), keyed by the float tensor's name
  (activations) or the float constant's (``weights``; int32 ones are biases).

The rest of the pipeline is the float one; :mod:`converter.quantize.given` then quantizes the
legalized model with exactly these parameters (onnxruntime's ``TensorQuantOverrides``) instead
of calibrating.  QOperator models (QLinearConv, ConvInteger, ...) are refused in one line, as
are Q/DQ of types or layouts no edge framework has (float8, int4, block-wise).
"""

from __future__ import annotations

import json

import numpy as np
import onnx

from ..errors import BadInput

GIVEN_KEY = "edgeconv.given_quantization"
FORMAT = "edgeconv.given_quant/1"
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
#: Operator-format quantized ops: integer kernels with their scales as inputs, not Q/DQ pairs.
QOPERATOR_OPS = frozenset({"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QLinearAdd",
                           "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat",
                           "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "DynamicQuantizeLinear",
                           "QGemm", "QAttention", "DynamicQuantizeMatMul"})
_INTEGER_TYPES = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.int32): "int32"}


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


def dequantize_input(model: onnx.ModelProto, what: str = "model", rename: bool = False) -> onnx.ModelProto:
    """``model`` itself when it has no Q/DQ node; else its float graph with the given
    quantization in its metadata (module docstring).  Bad quantized forms: one BadInput line.
    ``rename``: name the result's tensors as normalization does (a normalized model's float
    graph is named as if it had been normalized float)."""
    ops = {n.op_type for n in model.graph.node}
    qoperator = sorted(ops & QOPERATOR_OPS)
    if qoperator:
        raise BadInput(f"{what}: operator-format quantized ONNX ({', '.join(qoperator)}) is not read; export it "
                       "with QuantizeLinear/DequantizeLinear pairs (onnxruntime: quant_format=QuantFormat.QDQ)")
    if not ops & set(QDQ_OPS):
        return model
    from ..ir.graph import to_graph, to_model

    graph = to_graph(model)
    _check_forms(graph, what)
    counts = {op: sum(1 for n in graph.nodes if n.op == op) for op in QDQ_OPS}
    given = _Given()
    _fold_quantized_constants(graph, given)
    _bypass(graph, given)
    for tensor in graph.tensors().values():
        if not _is_constant(tensor) and tensor.dtype is not None and np.dtype(tensor.dtype) in _INTEGER_TYPES:
            tensor.dtype = np.float32  # an int8 tensor between a Q and its DQ now carries floats
    if rename:
        from .normalize import _rename

        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        _rename(graph)
    graph.metadata = {**graph.__dict__.get("metadata", {}), GIVEN_KEY: json.dumps(given.record(counts), sort_keys=True)}
    out = to_model(graph)
    out.ir_version = model.ir_version
    return out


def given_quantization(model: onnx.ModelProto) -> dict | None:
    """The record :func:`dequantize_input` left in ``model`` (None: the input was float)."""
    for prop in model.metadata_props:
        if prop.key == GIVEN_KEY:
            return json.loads(prop.value)
    return None


# ----------------------------------------------------------------------------- the rewrite


class _Given:
    """The parameters found, by tensor object (renames keep them), turned into names at the end."""

    def __init__(self):
        self.activations: dict[int, tuple] = {}
        self.weights: list[tuple] = []
        self.conflicts: list[str] = []

    def activation(self, tensor, entry: dict) -> None:
        known = self.activations.get(id(tensor))
        if known is None:
            self.activations[id(tensor)] = (tensor, entry)
        elif known[1] != entry:
            self.conflicts.append(tensor.name)

    def record(self, counts: dict) -> dict:
        activations = {t.name: e for t, e in self.activations.values()}
        weights = {t.name: e for t, e in self.weights}
        source = ", ".join(f"{n} {op}" for op, n in counts.items() if n)
        return {"format": FORMAT, "source": f"QDQ model ({source})", "activations": dict(sorted(activations.items())),
                "weights": dict(sorted(weights.items())), "conflicts": sorted(set(self.conflicts))}


def _is_constant(tensor) -> bool:
    import onnx_graphsurgeon as gs

    return isinstance(tensor, gs.Constant)


def _params(node) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(scale, zero point, axis) of a Q/DQ node with constant parameters."""
    from ..ir.graph import attr, constant_value

    scale = constant_value(node.inputs[1]) if len(node.inputs) > 1 else None
    if scale is None:
        raise BadInput(f"{node.op} '{node.name}': its scale is computed, not a constant")
    has_zero = len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].name
    zero = constant_value(node.inputs[2]) if has_zero else np.zeros(scale.shape, np.uint8)
    if zero is None:
        raise BadInput(f"{node.op} '{node.name}': its zero point is computed, not a constant")
    axis = int(attr(node, "axis", 1)) if scale.size > 1 else None
    return np.asarray(scale, np.float32), np.asarray(zero), axis


def _entry(scale: np.ndarray, zero: np.ndarray, axis: int | None, rank: int | None) -> dict:
    if axis is not None and axis < 0 and rank:
        axis += rank
    return {"dtype": _INTEGER_TYPES[np.dtype(zero.dtype)], "scale": [float(v) for v in scale.reshape(-1)],
            "zero_point": [int(v) for v in zero.reshape(-1)], "axis": axis}


def _check_forms(graph, what: str) -> None:
    """One line for Q/DQ forms no edge framework writes (float8, int4/int16, block-wise)."""
    for node in graph.nodes:
        if node.op not in QDQ_OPS:
            continue
        if node.attrs.get("block_size"):
            raise BadInput(f"{what}: {node.op} '{node.name}' is block-wise (block_size); edge frameworks quantize "
                           "per tensor or per channel")
        _, zero, _ = _params(node)
        if np.dtype(zero.dtype) not in _INTEGER_TYPES:
            raise BadInput(f"{what}: {node.op} '{node.name}' quantizes to {zero.dtype}; edgeconv reads int8/uint8 "
                           "(and int32 biases)")


def _broadcast(values: np.ndarray, axis: int | None, rank: int) -> np.ndarray:
    if axis is None:
        return values.reshape(())
    shape = [1] * rank
    shape[axis] = -1
    return values.reshape(shape)


def _fold_quantized_constants(graph, given: _Given) -> None:
    """Q of a constant (a QAT export's weights) -> the integer constant it computes."""
    import onnx_graphsurgeon as gs

    for node in [n for n in graph.nodes if n.op == "QuantizeLinear" and _is_constant(n.inputs[0])]:
        scale, zero, axis = _params(node)
        value = np.asarray(node.inputs[0].values, np.float32)
        rank = value.ndim
        info = np.iinfo(zero.dtype)
        q = np.rint(value / _broadcast(scale, axis, rank)) + _broadcast(zero, axis, rank).astype(np.float32)
        folded = gs.Constant(node.outputs[0].name + "_folded", np.clip(q, info.min, info.max).astype(zero.dtype))
        _replace_uses(graph, node.outputs[0], folded)
        node.outputs.clear()


def _bypass(graph, given: _Given) -> None:
    """Every DQ of a constant becomes a float constant; every other Q/DQ is bypassed."""
    import onnx_graphsurgeon as gs

    from ..ir.graph import NameAllocator

    names = NameAllocator(graph)
    relus: dict[int, object] = {}
    for node in [n for n in graph.nodes if n.op in QDQ_OPS]:
        if not node.outputs:
            continue
        source, result = node.inputs[0], node.outputs[0]
        scale, zero, axis = _params(node)
        if node.op == "DequantizeLinear" and _is_constant(source):
            ints = np.asarray(source.values)
            rank = ints.ndim
            # onnxruntime's DequantizeLinear: (float)((int32)q - zero_point) * scale, in float32
            value = ((ints.astype(np.int32) - _broadcast(zero, axis, rank).astype(np.int32)).astype(np.float32)
                     * _broadcast(scale, axis, rank))
            base = result.name.removesuffix("_DequantizeLinear_Output")
            if base == result.name:  # the constant takes the name its readers knew
                result.name = names(f"{base}_dequantized")
            else:
                base = names(base)
            constant = gs.Constant(base, value.astype(np.float32))
            given.weights.append((constant, _entry(scale, zero.astype(ints.dtype), axis, rank)))
            _replace_uses(graph, result, constant)
            node.outputs.clear()
            continue
        rank = len(source.shape) if source.shape is not None else None
        if node.op == "QuantizeLinear" and _clamps_at_zero(zero, axis) and not _nonnegative(source):
            source = relus.setdefault(id(source), _relu(graph, names, source))
        given.activation(source, _entry(scale, zero, axis, rank))
        _replace_uses(graph, result, source)
        node.outputs.clear()
    for tensor in graph.inputs:
        if tensor.dtype is not None and np.dtype(tensor.dtype) in _INTEGER_TYPES:
            tensor.dtype = np.float32  # an integer interface (a full-integer model) becomes float


#: Ops whose output is never negative, and ops that output only values of their first input.
_NONNEGATIVE = {"Relu", "Sigmoid", "Softmax", "Exp", "Abs", "Sqrt", "HardSigmoid"}
_MOVES = {"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Concat",
          "Split", "Gather", "Resize", "GlobalMaxPool", "AveragePool", "GlobalAveragePool", "DepthToSpace",
          "SpaceToDepth"}


def _clamps_at_zero(zero: np.ndarray, axis: int | None) -> bool:
    """Does a Q with this zero point clamp at 0 (zero point at the type's lowest value)?"""
    return axis is None and int(zero.reshape(-1)[0]) == int(np.iinfo(zero.dtype).min)


def _nonnegative(tensor, depth: int = 0) -> bool:
    """Is ``tensor`` never negative by construction (so a Q clamping at 0 removed no Relu)?"""
    if depth > 8 or len(tensor.inputs) != 1:
        return False
    producer = tensor.inputs[0]
    if producer.op in _NONNEGATIVE:
        return True
    if producer.op == "Clip" and len(producer.inputs) > 1 and _is_constant(producer.inputs[1]):
        return float(np.asarray(producer.inputs[1].values)) >= 0.0
    if producer.op in _MOVES:
        data = [t for t in producer.inputs[:1 if producer.op != "Concat" else None] if not _is_constant(t)]
        return bool(data) and all(_nonnegative(t, depth + 1) for t in data)
    return False


def _relu(graph, names, source):
    """The Relu a quantizer folded into a Q's range (onnxruntime drops a Relu after a Conv and
    quantizes the Conv's output from 0): the float model computes it again."""
    import onnx_graphsurgeon as gs

    out = gs.Variable(names(f"{source.name}_relu"), dtype=np.float32, shape=source.shape)
    graph.nodes.append(gs.Node("Relu", names(f"{source.name}_Relu"), inputs=[source], outputs=[out]))
    return out


def _replace_uses(graph, old, new) -> None:
    """Readers of ``old`` read ``new``; a graph output ``old`` becomes ``new`` under ``old``'s name
    (``new`` renamed when nothing else names it; else an Identity writes the output)."""
    import onnx_graphsurgeon as gs

    for reader in list(old.outputs):
        for k, tensor in enumerate(list(reader.inputs)):
            if tensor is old:
                reader.inputs[k] = new
    if old not in graph.outputs:
        return
    index = graph.outputs.index(old)
    fixed = _is_constant(new) or new in graph.inputs or new in graph.outputs
    if fixed:
        out = gs.Variable(old.name, dtype=np.float32, shape=old.shape)
        old.name = old.name + "_quantized"
        graph.nodes.append(gs.Node("Identity", out.name + "_Identity", inputs=[new], outputs=[out]))
        graph.outputs[index] = out
        return
    name = old.name
    old.name = name + "_quantized"
    new.name = name
    new.dtype = np.float32
    new.shape = new.shape if new.shape is not None else old.shape
    graph.outputs[index] = new

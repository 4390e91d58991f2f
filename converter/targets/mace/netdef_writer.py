"""Build the MACE ``.pb`` (a ``MultiNetDef`` wrapping one ``NetDef``) and its ``.data`` blob.

Current MACE (master, v1.1.x) parses the ``.pb`` as ``MultiNetDef`` first
(``mace/libmace/mace_engine.cc``) and refuses a net without the ``runtime_type`` argument
(``mace/libmace/engines/serial_engine.cc:190-193``), so both are always written.  Layout rules
are documented in ``ops.py``.  Tensor-name rules MACE applies: tensor names are free strings,
but the runtime derives new names from them (``<name>_const_used_by_cpu``,
``mace/flows/cpu/transpose_const.cc``; ``TransformedName`` in ``mace/core/net_def_adapter.cc``
appends a data-format / memory-type suffix), and inputs/outputs are looked up by the exact
names listed in ``input_info``/``output_info`` and the deployment YAML; so every name must be
non-empty and unique, and must not end in those reserved suffixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from ...errors import BadInput, Unsupported
from ...ir.graph import constant_value, dtype_name, static_shape, to_graph, unique_name
from ..driver import NodeContext, lower_nodes
from ._generated import mace_pb2
from .custom import convert_custom
from .data_file import DT_FLOAT, DT_HALF, DT_INT32, pack, set_arg
from .ops import APU_OPS, DF_AUTO, DF_NCHW, DF_NHWC, DF_NONE, DSP_OPS, FRAMEWORK_ONNX, GPU_OPS, OPS

#: include/mace/public/mace.h RuntimeType, keyed by our hardware names.
RUNTIME_TYPE = {"cpu": 0, "gpu": 2, "dsp": 3, "apu": 5}
FILTER_FORMAT_OIHW = 101  # tools/python/utils/config_parser.py DataFormat.OIHW
OPENCL_IMAGE = 2  # MemoryType GPU_IMAGE, MACE's default cl_mem_type
_RESERVED_SUFFIXES = ("_const_used_by_cpu", "_mem_type_")


@dataclass
class IoInfo:
    name: str
    shape: list[int]  # as ONNX (NCHW) shape
    dtype: str  # as MACE carries it: float32 or int32
    mace_dims: list[int]  # as written into input_info/output_info
    data_format: int  # DF_NHWC for 4-D, else DF_NONE
    onnx_dtype: str = ""  # the ONNX dtype (int64 / bool are carried as int32)


@dataclass
class Emitter(NodeContext):
    """What an op converter writes into: MACE ops and weights, plus ONNX shape facts."""

    title = OPS.title

    shapes: dict[str, list[int]]
    dtypes: dict[str, str]
    fp16: bool
    ops: list = field(default_factory=list)
    weights: dict[str, tuple[np.ndarray, int]] = field(default_factory=dict)
    used_names: set[str] = field(default_factory=set)
    #: ONNX constant names: a weight may take such a name once, as itself.
    onnx_consts: set[str] = field(default_factory=set)
    #: names of the ONNX graph outputs (a folded Constant that is an output still needs an op).
    graph_outputs: set[str] = field(default_factory=set)
    #: The MACE hardware written for (some layouts differ between the CPU and GPU kernels).
    hw: str = "cpu"
    #: ConstTensor quantization (scale, zero point, minval, maxval) of uint8/int32 weights.
    quant_weights: dict = field(default_factory=dict)

    def shape(self, tensor) -> list[int]:
        name = tensor if isinstance(tensor, str) else tensor.name
        value = None if isinstance(tensor, str) else constant_value(tensor)
        if value is not None:
            return list(value.shape)
        if name not in self.shapes:
            raise Unsupported(f"MACE export needs static shapes; tensor '{name}' has none")
        return self.shapes[name]

    def dtype(self, tensor) -> str:
        """The ONNX dtype name of a tensor (float32 when unknown)."""
        value = None if isinstance(tensor, str) else constant_value(tensor)
        if value is not None:
            return value.dtype.name
        return self.dtypes.get(tensor if isinstance(tensor, str) else tensor.name, "float32")

    def mace_dtype(self, tensor) -> int:
        """The MACE DataType a tensor is carried as: int64/bool/int become DT_INT32."""
        name = self.dtype(tensor)
        if name.startswith("float"):
            return DT_FLOAT
        if name.startswith(("int", "uint")) or name == "bool":
            return DT_INT32
        raise Unsupported(f"MACE has no {name} tensors ('{getattr(tensor, 'name', tensor)}')")

    def name_of(self, tensor) -> str:
        if constant_value(tensor) is not None:
            return self.weight(tensor.name, constant_value(tensor))
        return tensor.name

    def tensor(self, base: str, shape: list[int]) -> str:
        name = unique_name(base, self.used_names)
        self.shapes[name] = [int(d) for d in shape]
        return name

    def weight(self, base: str, value: np.ndarray) -> str:
        value = np.asarray(value)
        if value.dtype.kind == "f":
            dtype, value = (DT_HALF if self.fp16 else DT_FLOAT), value.astype(np.float32)
        elif value.dtype.kind in "iub":
            if value.size and (value.min() < -(2**31) or value.max() >= 2**31):
                raise Unsupported(f"constant '{base}' does not fit MACE's int32")
            dtype, value = DT_INT32, value.astype(np.int32)
        else:
            raise Unsupported(f"constant '{base}' has dtype {value.dtype}, which MACE cannot store")
        existing = self.weights.get(base)
        if existing is not None and existing[0].shape == value.shape and np.array_equal(existing[0], value):
            return base
        free = base not in self.weights and (base in self.onnx_consts or base not in self.used_names)
        name = base if free else unique_name(base, self.used_names)
        self.used_names.add(name)
        self.weights[name] = (value, dtype)
        return name

    def op(self, op_type: str, name: str, inputs: list[str], outputs: list[str], *, args=(),
           fixed: bool = False, transposable: bool = False, T: int = DT_FLOAT,
           output_types: list[int] | None = None) -> None:
        auto = fixed or transposable
        op = mace_pb2.OperatorDef(name=unique_name(name, self.used_names), type=op_type)
        op.input.extend(inputs)
        op.output.extend(outputs)
        # Common args, as onnx_converter.py:convert_general_op writes them.
        common = [("T", "i", T), ("framework_type", "i", FRAMEWORK_ONNX),
                  ("data_format", "i", DF_AUTO if auto else DF_NCHW)]
        if transposable:
            common.append(("has_data_format", "i", 1))
        for arg_name, kind, value in [*common, *args]:
            set_arg(op.arg.add(), arg_name, kind, value)
        for out in outputs:
            dims = self.shapes.get(out)
            if dims is not None:
                # 4-D shapes of AUTO ops are written NHWC (net_def_adapter.cc:454-473).
                op.output_shape.add().dims.extend(_nhwc(dims) if auto and len(dims) == 4 else dims)
        if output_types:
            op.output_type.extend(output_types)
        self.ops.append(op)


#: MACE ops whose output reuses their input's buffer (``output->ReuseTensorBuffer(*input)``:
#: reshape.cc:118, expand_dims.cc, squeeze.cc).
_BUFFER_REUSING = {"Reshape", "ExpandDims", "Squeeze"}


def _copy_aliased_outputs(em: Emitter, output_names: list[str]) -> None:
    """A graph output written by a buffer-reusing op goes through an exact copy (Eltwise PROD by
    scalar 1.0, bit-exact for every float and int32).  MACE's memory planner merges a reusing
    op's output into its input's buffer only when the output has readers; a model output has
    none, so the input buffer is released after the op and handed to a later tensor, which
    overwrites the output before it is read (allocate_opt_strategy.cc:213-216; measured in
    mace_run: the zoo detector's score branch off by 0.5)."""
    from .ops.common import PROD

    wanted = set(output_names)
    for op in list(em.ops):
        if op.type not in _BUFFER_REUSING:
            continue
        for k, out in enumerate(op.output):
            if out not in wanted:
                continue
            alias = unique_name(f"{out}_buffer", em.used_names)
            em.used_names.add(alias)
            em.shapes[alias] = em.shapes.get(out, [])
            op.output[k] = alias
            dtype = next((a.i for a in op.arg if a.name == "T"), DT_FLOAT)
            em.op("Eltwise", f"{out}_copy", [alias], [out], T=dtype,
                  args=[("type", "i", PROD), ("scalar_input", "f", 1.0), ("scalar_input_index", "i", 1)],
                  output_types=[DT_INT32] if dtype == DT_INT32 else None)


def _nhwc(dims: list[int]) -> list[int]:
    return [dims[0], dims[2], dims[3], dims[1]]


def _io_info(tensor) -> IoInfo:
    shape = static_shape(tensor)
    if shape is None:
        raise BadInput(f"MACE needs static shapes: '{tensor.name}' has shape {tensor.shape}; pass input shapes")
    onnx_dtype = dtype_name(tensor) or "float32"
    # MACE has no int64/bool tensors: they are carried as int32 (ops/eltwise.cc:990-992).
    dtype = {"float32": "float32", "int32": "int32", "int64": "int32", "bool": "int32"}.get(onnx_dtype)
    if dtype is None:
        raise Unsupported(f"MACE model inputs/outputs are float32 or int32 (int64/bool carried as "
                          f"int32); '{tensor.name}' is {onnx_dtype}")
    # convert.py:175-193 writes 4-D NCHW interfaces as NHWC dims with data_format NHWC.
    if len(shape) == 4:
        return IoInfo(tensor.name, list(shape), dtype, _nhwc(list(shape)), DF_NHWC, onnx_dtype)
    return IoInfo(tensor.name, list(shape), dtype, list(shape), DF_NONE, onnx_dtype)


def _check_names(names) -> None:
    for name in names:
        if not name:
            raise BadInput("MACE needs every tensor to have a name; normalize the model first")
        if name.endswith(_RESERVED_SUFFIXES):
            raise BadInput(f"tensor name '{name}' ends in a suffix MACE's runtime reserves")


def build(model: onnx.ModelProto, hw: str, name: str, fp16_weights: bool = False, quantization: dict | None = None):
    """Return ``(pb_bytes, data_bytes, inputs: list[IoInfo], outputs: list[IoInfo], meta)``;
    ``quantization`` (the QDQ model's ``edgeconv.quant/1`` params): a uint8 net (``quantized.py``)."""
    if hw not in RUNTIME_TYPE:
        raise BadInput(f"unknown MACE hardware '{hw}'; choose one of: {', '.join(RUNTIME_TYPE)}")
    graph = to_graph(model)
    tensors = graph.tensors()
    _check_names(tensors)
    shapes = {n: list(s) for n, t in tensors.items() if (s := static_shape(t)) is not None}
    dtypes = {n: d for n, t in tensors.items() if (d := dtype_name(t))}
    consts = {n for n, t in tensors.items() if constant_value(t) is not None}
    em = Emitter(shapes=shapes, dtypes=dtypes, fp16=fp16_weights, used_names=set(tensors), onnx_consts=consts,
                 graph_outputs={t.name for t in graph.outputs}, hw=hw)
    inputs = [_io_info(t) for t in graph.inputs if constant_value(t) is None]
    outputs = [_io_info(t) for t in graph.outputs]
    # remedy (4): a marked node becomes an op of its own type, registered by the app
    lower_nodes(OPS, em, graph.nodes, model=model, custom=convert_custom)
    hexagon = quantization is not None and hw == "dsp"
    if not hexagon:  # Hexagon NN has no buffer-reusing ops (and no Eltwise PROD copy)
        _copy_aliased_outputs(em, [o.name for o in outputs])
    uint8 = None
    if hexagon:
        from .hexagon import hexagon_net

        uint8 = hexagon_net(em, inputs, outputs, quantization)
    elif quantization is not None:
        from .quantized import quantize_net

        uint8 = quantize_net(em, inputs, outputs, quantization, hw)
    allowed = {"dsp": DSP_OPS, "apu": APU_OPS}.get(hw)
    if allowed is not None and not hexagon:
        for op in em.ops:
            if op.type not in allowed:
                raise Unsupported(f"MACE {hw} runtime has no '{op.type}' op (node '{op.name}')")
    cpu_fallback = sorted({op.type for op in em.ops if op.type not in GPU_OPS}) if hw == "gpu" else []

    blob, placed = pack([em.weights[n] for n in em.weights])
    net = mace_pb2.NetDef(name="default_graph", data_type=DT_HALF if fp16_weights else DT_FLOAT,
                          data_offset=0, data_size=len(blob))
    net.op.extend(em.ops)
    net_args = [("runtime_type", "i", RUNTIME_TYPE[hw]), ("data_format", "i", DF_NCHW),
                ("framework_type", "i", FRAMEWORK_ONNX), ("filter_format", "i", FILTER_FORMAT_OIHW)]
    if hw == "gpu":
        net_args.append(("opencl_mem_type", "i", OPENCL_IMAGE))
    if uint8 is not None:
        from .quantized import QUANTIZE_FLAG

        net_args.append((QUANTIZE_FLAG, "i", 1))  # transformer.py quantize_nodes
    for arg_name, kind, value in net_args:
        set_arg(net.arg.add(), arg_name, kind, value)
    quant_weights = em.quant_weights
    for (tensor_name, (value, dtype)), (offset, size) in zip(em.weights.items(), placed):
        dims = (uint8 or {}).get("const_dims", {}).get(tensor_name, list(value.shape))
        tensor = net.tensors.add(name=tensor_name, dims=dims, data_type=dtype, offset=offset, data_size=size)
        if hexagon:  # add_node_id: constants are Hexagon NN const nodes
            tensor.node_id = uint8["node_ids"][tensor_name]
        q = quant_weights.get(tensor_name)
        if q is not None:
            tensor.scale, tensor.zero_point, tensor.minval, tensor.maxval = q.scale, q.zero_point, q.minval, q.maxval
            tensor.quantized = True
    io_q = (uint8 or {}).get("io", {})
    for info, target in [(i, net.input_info) for i in inputs] + [(o, net.output_info) for o in outputs]:
        entry = target.add(name=info.name, dims=info.mace_dims, data_format=info.data_format,
                           data_type=DT_INT32 if info.dtype == "int32" else DT_FLOAT)
        if info.name in io_q:
            entry.scale, entry.zero_point = io_q[info.name].scale, io_q[info.name].zero_point
    multi = mace_pb2.MultiNetDef(name=name, version_code=1)
    multi.net_def.append(net)
    multi.input_tensor.extend(i.name for i in inputs)
    multi.output_tensor.extend(o.name for o in outputs)
    pb = multi.SerializeToString(deterministic=True)
    from .intermediates import tensor_map

    meta = {"ops": [op.type for op in em.ops], "gpu_cpu_fallback_ops": cpu_fallback,
            "uint8": None if uint8 is None else {k: v for k, v in uint8.items() if k not in ("io", "node_ids", "const_dims")},
            # which ONNX tensor each op output holds, for per-layer verification
            "tensor_map": tensor_map(em.ops, {n: dtypes.get(n, "float32") for n in tensors if n not in consts})}
    if hw == "gpu":
        meta["compute_precision"] = gpu_precision(em.ops)
    return pb, blob, inputs, outputs, meta


def gpu_precision(ops) -> str:
    """The precision MACE's OpenCL kernels compute a GPU net in: each op's output is of the op's
    ``T`` argument (XiaoMi/mace@0fc55a5:mace/core/net_def_adapter.cc#L286-L293), half where the
    file asks for DT_HALF (MACE's own converter does for ``data_type: fp16_fp32``).  edgeconv
    writes T = DT_FLOAT, with --fp16-weights too (half weights, float arithmetic): "fp32"."""
    half = any(a.name == "T" and a.i == DT_HALF for op in ops for a in op.arg)
    return "fp16" if half else "fp32"

"""TFLite target: a legalized ONNX model -> one ``.tflite`` flatbuffer, run with LiteRT.

No TensorFlow: the file is written with the ``flatbuffers`` package and bindings generated from
LiteRT's schema (``schema_generated.py``).  Builtin ops only (no Flex), lowest sufficient op
versions, deduplicated constant buffers, activations fused, NCHW graphs stored NHWC with
Transposes only where the model's own semantics need them (``layout.py``).

Interface layout (``ExportOptions.keep_nchw_io``):
* default — image tensors are NHWC (what TFLite users feed a camera frame as): a rank-4 input
  that reaches a convolution/pool/resize through element-wise ops only, and a rank-4 output that
  leaves the network in NHWC.  Other tensors keep their ONNX layout;
* ``keep_nchw_io=True`` — every input/output keeps its ONNX layout (a conversion at each end).  ``artifact.meta["inputs"/"outputs"]`` record each
tensor's ``perm`` (stored = onnx.transpose(perm)); :meth:`TFLiteTarget.run` applies it, so callers
always pass and get ONNX-layout arrays.

Options: ``fp16_weights`` stores float weights as float16 (+ DEQUANTIZE);
``ExportOptions.name`` names the file (default: the ONNX graph name); ``num_threads``
sets LiteRT's thread count in :meth:`run`.  Hardware (``cpu``, ``gpu``, ``nnapi``, ``edgetpu``)
is the matrix column the planner legalized for; the float32 file itself is the same for all
(int8 for the Edge TPU is a later issue), except that only ``cpu`` files compute a softmax or
reduction over a short innermost axis where it is strided (``layout.strided_layout``, measured
on the CPU path).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ...errors import MissingExtra, Unsupported
from ...infra.fsutil import atomic_write_bytes, sha256_bytes
from ...ir.graph import dtype_name, to_graph
from ..base import Artifact, ExportOptions, Target
from ..naming import FILE_STEM
from . import layout as L
from .registry import OPS


class TFLiteTarget(Target):
    name = "tflite"
    custom_module = "converter.targets.tflite.custom"
    title = OPS.title
    executor = "litert"

    def executor_oracle(self, executor: str):
        from ...runtimes.base import Oracle, package_version

        return Oracle(f"LiteRT {package_version('ai-edge-litert')}")
    ops_module = "converter.targets.tflite.ops"
    hardware = ("cpu", "gpu", "nnapi", "edgetpu")
    default_hw = "cpu"
    #: --quantize modes written natively (besides fp16): int8 tensors, see quantized.py.
    quantized_modes = ("int8", "int8-weights", "fp16")

    def carries_qdq_weight_integers(self, per_channel: bool) -> bool:
        return True  # quantized.py writes the QDQ model's weight integers, per channel or not

    def export(self, model: onnx.ModelProto, out_dir: Path, hw: str = "cpu",
               options: ExportOptions | None = None) -> Artifact:
        options = options or ExportOptions()
        self.check_hw(hw)
        from .writer import FlatbufferFile

        data, meta = convert(model, options, hw)
        name = FILE_STEM(options.name or model.graph.name or "model")
        out_dir = Path(out_dir)
        streamed = isinstance(data, FlatbufferFile)
        sha256 = data.sha256_meanwhile() if streamed else lambda: sha256_bytes(data)
        path = atomic_write_bytes(out_dir / f"{name}.tflite", data.write if streamed else data)
        meta.update(sha256=sha256(), size=len(data), hw=hw,
                    num_threads=options.num_threads)
        return Artifact(target=self.name, hw=hw, files=[path], out_dir=out_dir, meta=meta, runtime="litert")

    def preload(self) -> None:
        import ai_edge_litert.interpreter  # noqa: F401 - imported early on purpose, see Target.preload

        from . import writer  # noqa: F401

    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError:  # pragma: no cover - depends on the environment
            raise MissingExtra("tflite", "running a .tflite file") from None
        path = next(p for p in artifact.files if str(p).endswith(".tflite"))
        from ...infra.fsutil import quiet_native_stderr

        with quiet_native_stderr():  # LiteRT prints "INFO: Created ... delegate" from C++
            interpreter = Interpreter(model_path=str(path), num_threads=artifact.meta.get("num_threads"))
            interpreter.allocate_tensors()
        from .interface import feed_inputs

        feed_inputs(interpreter, artifact, inputs)
        interpreter.invoke()
        out_by_name = {d["name"]: d for d in interpreter.get_output_details()}
        results = {}
        for spec in artifact.meta["outputs"]:
            stored = interpreter.get_tensor(out_by_name[spec["name"]]["index"])
            if spec.get("quantization"):  # an int8 output (full-integer file): its real values
                q = spec["quantization"]
                stored = (stored.astype(np.float32) - np.float32(q["zero_point"][0])) * np.float32(q["scale"][0])
            results[spec["name"]] = np.array(stored.transpose(np.argsort(spec["perm"])), order="C")
        return results

    def latency(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict | None:
        """The file's median run time in LiteRT on this host (``latency.py``)."""
        from .latency import litert_latency

        try:
            return litert_latency(artifact, inputs, self.executor_oracle(self.executor).name)
        except ImportError:  # pragma: no cover - no LiteRT here (the tflite extra)
            return None

    def intermediates(self, artifact: Artifact, inputs: dict[str, np.ndarray]):
        """Every tensor LiteRT computed, by legalized ONNX name (see ``intermediates.py``)."""
        try:
            from .intermediates import intermediates
        except ImportError:  # pragma: no cover - depends on the environment
            raise MissingExtra("tflite", "running a .tflite file") from None
        return intermediates(artifact, inputs)


class Int8Summary:
    """What the weight-only pass did (the int8 pass returns a ``quantized.Int8Result``)."""

    def __init__(self, weights: int):
        self.weights, self.float_ops = weights, []
        self.quantize_ops = self.dequantize_ops = self.requantize_ops = 0


def convert(model: onnx.ModelProto, options: ExportOptions, hw: str = "cpu") -> tuple[bytes, dict]:
    """The ``.tflite`` bytes for ``model`` (a :class:`~.writer.FlatbufferFile` unless custom
    operators were rewritten: ``len``, ``write``, ``sha256``, ``tobytes``) and the interface
    description for ``run``."""
    from ..driver import lower_nodes
    from .custom import finish_custom, lower_custom
    from .lower import Lowering
    from .ops import OPS
    from .writer import ModelWriter

    graph = _fused_graph(model, options)
    writer = ModelWriter(fp16_weights=options.fp16_weights)
    lowering = Lowering(writer)
    # measured on LiteRT's CPU path (XNNPACK); the GPU delegate stores channels in slices of 4,
    # where a channel softmax is native, and int8 files quantize SOFTMAX whole
    lowering.short_axis_layouts = hw == "cpu" and options.quantization is None
    lowering.graph_outputs = frozenset(t.name for t in graph.outputs)
    inputs, in_meta = _define_inputs(graph, lowering, writer, options)
    # remedy (4): a marked node becomes a CUSTOM op the app registers with its resolver
    lower_nodes(OPS, lowering, graph.nodes, model=model, custom=lower_custom)
    outputs, out_meta = _define_outputs(graph, lowering, writer, options, inputs)
    folded, fused = _fold_written_ops(writer, set(outputs), options)
    int8, inputs, outputs = _quantize(writer, lowering, inputs, outputs, in_meta, out_meta, options.quantization)
    if lowering.customs:  # rewritten through the object API: bytes
        data = finish_custom(writer.serialize(inputs, outputs, description="edgeconv"), lowering.customs)
    else:  # the big weights written from their arrays, never copied into the builder
        data = writer.serialize(inputs, outputs, description="edgeconv", streamed=True)
    meta = {"inputs": in_meta, "outputs": out_meta, "ops": _op_counts(writer),
            "fused_activations": fused, "folded_bias_adds": folded, "fp16_weights": options.fp16_weights,
            "interface": "nchw" if options.keep_nchw_io else "nhwc",
            "int8": _int8_meta(int8, options.quantization),
            # which ONNX tensor each TFLite tensor holds, for per-layer verification
            "tensor_map": _tensor_map(graph, lowering, writer, inputs, outputs)}
    return data, meta


def _fused_graph(model: onnx.ModelProto, options: ExportOptions):
    """``model`` as a graph with the ONNX-level fusions applied (:mod:`.fuse`)."""
    from . import fuse

    graph = to_graph(model)
    fuse.fuse_gelu(graph)
    fuse.fold_crd_into_conv(graph)
    if options.quantization is None:
        # Float files only: the int8 pass takes activation ranges by the float model's tensor
        # names and weight integers from the QDQ model, which the folded Conv would not match.
        fuse.fold_channel_affine_into_conv(graph)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    return graph


def _define_inputs(graph, lowering, writer, options: ExportOptions) -> tuple[list[int], list[dict]]:
    """The graph inputs as TFLite tensors (NHWC where they feed an NHWC op, unless
    ``keep_nchw_io``) and their interface descriptions."""
    inputs, in_meta = [], []
    for t in graph.inputs:
        shape = lowering.shape(t)
        perm = L.NHWC if len(shape) == 4 and not options.keep_nchw_io and _feeds_nhwc_op(t) else L.identity(len(shape))
        inputs.append(lowering.define(t, perm))
        in_meta.append(_io_meta(t.name, shape, perm, writer.tensors[inputs[-1]].dtype))
        if perm != L.NHWC and len(shape) == 4 and _feeds_nhwc_op(t):
            # Convert an NCHW interface right at the input, not after the element-wise ops that
            # precede the first convolution (e.g. mean/std normalization).
            lowering.get(t, L.NHWC)
            lowering.set_home(t, L.NHWC)
    return inputs, in_meta


def _define_outputs(graph, lowering, writer, options: ExportOptions,
                    inputs: list[int]) -> tuple[list[int], list[dict]]:
    """The graph outputs as TFLite tensors named like the ONNX outputs (NHWC where the network
    leaves them NHWC, unless ``keep_nchw_io``) and their interface descriptions."""
    outputs, out_meta = [], []
    for t in graph.outputs:
        shape = lowering.shape(t)
        nhwc = len(shape) == 4 and not options.keep_nchw_io and lowering.home(t) == L.NHWC
        perm = L.NHWC if nhwc else L.identity(len(shape))
        index = lowering.get(t, perm)
        if index in inputs or index in outputs or writer.value(index) is not None:
            raise Unsupported(f"tflite: output '{t.name}' is a graph input, another output or a constant")
        writer.rename(index, t.name)
        outputs.append(index)
        out_meta.append(_io_meta(t.name, shape, perm, writer.tensors[index].dtype))
    return outputs, out_meta


def _fold_written_ops(writer, keep: set[int], options: ExportOptions) -> tuple[int, int]:
    """The TFLite-level fusions (:mod:`.fuse`) on the written ops: (bias adds folded,
    activations fused)."""
    from . import fuse

    folded = fuse.fold_bias_add(writer, keep)
    if options.quantization is None:  # the int8 pass takes the QDQ model's biases
        folded += fuse.fold_channel_offset_into_conv(writer, keep)
        fuse.fold_reshape_into_reduce(writer, keep)
    fused = fuse.fuse_activations(writer, keep)
    fuse.prune_dead_ops(writer, keep)
    return folded, fused


def _quantize(writer, lowering, inputs: list[int], outputs: list[int], in_meta: list[dict], out_meta: list[dict],
              quant_spec):
    """``--quantize`` on the written float ops: (what was done or None, the file's inputs, its
    outputs); an int8 file's interface descriptions get their tensors' dtypes and quantization."""
    if quant_spec is None:
        return None, inputs, outputs
    if quant_spec.get("mode") == "int8-weights":
        from .quantized import quantize_weights_only

        return Int8Summary(weights=quantize_weights_only(writer, quant_spec["params"])), inputs, outputs
    # --quantize int8: the float ops rewritten as int8 ones with the QDQ model's parameters
    from .quantized import count_int8_weights, quantize_int8

    int8 = quantize_int8(writer, lowering, inputs, outputs, quant_spec["params"], bool(quant_spec.get("full_integer")))
    int8.weights = count_int8_weights(writer)
    for index, spec in list(zip(int8.inputs, in_meta)) + list(zip(int8.outputs, out_meta)):
        spec["dtype"] = writer.tensors[index].dtype.name
        if writer.tensors[index].quant is not None:
            spec["quantization"] = writer.tensors[index].quant.to_dict()
    return int8, int8.inputs, int8.outputs


def _op_counts(writer) -> dict[str, int]:
    ops: dict[str, int] = {}
    for op in writer.ops:
        ops[op.builtin] = ops.get(op.builtin, 0) + 1
    return dict(sorted(ops.items()))


def _int8_meta(int8, quant_spec) -> dict | None:
    if int8 is None:
        return None
    return {"mode": quant_spec["mode"], "full_integer": bool(quant_spec.get("full_integer")),
            **{k: getattr(int8, k) for k in ("float_ops", "quantize_ops", "dequantize_ops", "requantize_ops",
                                             "weights")}}


def _tensor_map(graph, lowering, writer, inputs: list[int], outputs: list[int]):
    from .intermediates import tensor_map

    dtypes = {name: d for name, t in graph.tensors().items() if (d := dtype_name(t))}
    return tensor_map(lowering, writer, inputs, outputs, dtypes)


#: Ops that run in NHWC, and ops that pass any layout through unchanged.
_NHWC_OPS = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "Resize", "DepthToSpace", "SpaceToDepth"}
_LAYOUT_FREE_OPS = {"Add", "Sub", "Mul", "Div", "Relu", "Clip", "PRelu", "Sigmoid", "Tanh", "Pow", "Sqrt",
                    "Exp", "Log", "Abs", "Neg", "LeakyRelu", "HardSwish", "BatchNormalization", "Identity"}


def _feeds_nhwc_op(t, depth: int = 8) -> bool:
    """Does ``t`` reach an NHWC op through layout-free ops only (within ``depth`` steps)?"""
    for node in t.outputs:
        if node.op in _NHWC_OPS and node.inputs[0] is t:
            return True
        if depth and node.op in _LAYOUT_FREE_OPS and any(_feeds_nhwc_op(o, depth - 1) for o in node.outputs):
            return True
    return False


def _io_meta(name: str, shape, perm, dtype) -> dict:
    layout = "NHWC" if tuple(perm) == L.NHWC else ("NCHW" if len(perm) == 4 else "as-onnx")
    return {"name": name, "shape": [int(d) for d in shape], "perm": list(perm),
            "stored_shape": [int(d) for d in L.stored_shape(shape, perm)], "layout": layout,
            "dtype": np.dtype(dtype).name}


TARGET = TFLiteTarget()

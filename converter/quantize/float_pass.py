"""One float pass over the calibration samples: MinMax ranges, and what bias correction needs.

onnxruntime's MinMax calibrator appends a ReduceMin and a ReduceMax to every float tensor and
runs that graph unoptimized (edgeconv gave it an optimized session, :mod:`.ranges`); bias
correction then ran the float model again over its first samples for the mean input of every
Conv/Gemm and the reference outputs (:mod:`.bias_correction`).  :func:`minmax_pass` does both
in one run per sample: the float model with a ReduceMin and a ReduceMax on every tensor to
calibrate (the set onnxruntime's calibrator selects, ``select_tensors_to_calibrate``), graph
optimizations on (float only: no integer kernel; exact, so the ranges are onnxruntime's MinMax
ranges value for value), and, while a sample is among the first
:data:`.bias_correction.MEAN_SAMPLES` / :data:`.bias_correction.CHECK_SAMPLES`, every Conv/Gemm
input (summed) and the outputs (:class:`FloatStats`); later samples return two numbers a tensor.

MobileNetV2 at 224x224, 100 samples: 83 ms a sample instead of the calibrator's 105 ms when each
tensor was copied out and scanned by numpy, and no second float pass (32 samples) for bias
correction; taking the extremes in the graph made the quantize stage of a 128x128 MobileNetV2
(64 samples) 6.2 -> 4.0 s, with the same files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx


@dataclass
class FloatStats:
    """Float-model statistics over the first calibration samples, for bias correction."""

    #: Tensor -> mean over the first ``mean_samples`` samples (batch axis averaged, float64).
    means: dict[str, np.ndarray] = field(default_factory=dict)
    mean_samples: int = 0
    #: Graph outputs of the first samples, in order.
    references: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: Bias correction's output shifts of these means, by layer and weight rounding error.
    shifts: dict = field(default_factory=dict)


def tensors_to_calibrate(model: onnx.ModelProto) -> list[str]:
    """The float tensors onnxruntime's calibrators calibrate (on its shape-inferred copy)."""
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    from ..infra.fsutil import private_temp_dir

    with private_temp_dir("calib") as tmp:  # marked: a killed run's is removed by the next
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path))
        calibrator = MinMaxCalibrater(path, [], augmented_model_path=str(Path(tmp) / "augmented.onnx"))
        tensors, _ = calibrator.select_tensors_to_calibrate(calibrator.model)
    return sorted(tensors)


def minmax_pass(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], stats: FloatStats | None = None,
                mean_samples: int = 0, reference_samples: int = 0):
    """onnxruntime ``TensorsData`` (MinMax) of ``model`` over ``samples``; fills ``stats`` with the
    mean of every Conv/Gemm data input over the first ``mean_samples`` samples and the outputs of
    the first ``reference_samples``."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    from ..infra.limits import Deadline, guarded_run
    from .bias_correction import corrected_inputs
    from .parallel import SESSION_THREADS, ordered_map

    calibrated = tensors_to_calibrate(model)
    outputs = [o.name for o in model.graph.output]
    inputs = {i.name for i in model.graph.input}
    averaged = [n for n in corrected_inputs(model) if stats is not None]
    extremes = _Extremes(model, [n for n in calibrated if n not in inputs])
    full = list(dict.fromkeys(outputs + [n for n in averaged if n not in inputs])) + extremes.outputs
    session = optimized_session(extremes.model, [n for n in full if n not in outputs], threads=SESSION_THREADS)
    feeds = [i.name for i in session.get_inputs()]
    deadline = Deadline(f"calibration ({len(samples)} samples, onnxruntime)")  # --timeout bounds the total
    needs_tensors = max(mean_samples, reference_samples) if stats is not None else 0

    def one(item):
        k, sample = item
        # only the extremes (scalars) once no tensor is needed: nothing large leaves onnxruntime
        wanted = full if k < needs_tensors else extremes.outputs
        # --timeout and Ctrl-C stop it like every other run
        ran = guarded_run(session, wanted, {n: sample[n] for n in feeds}, "calibration (onnxruntime)", deadline)
        values = {**dict(zip(wanted, ran)), **sample}
        found = {name: (np.min(values[name]), np.max(values[name])) for name in calibrated if name in inputs}
        found.update(extremes.of(values))
        means = {}
        if stats is not None and k < mean_samples:
            for name in averaged:
                value = values[name]
                means[name] = value if value.ndim and value.shape[0] == 1 else value.mean(axis=0, keepdims=True)
        references = {n: values[n] for n in outputs} if stats is not None and k < reference_samples else None
        return found, means, references

    low: dict[str, np.float32] = {}
    high: dict[str, np.float32] = {}
    for found, means, references in ordered_map(one, enumerate(samples)):  # in order: the same sums every run
        for name, (lo, hi) in found.items():
            low[name] = lo if name not in low else min(low[name], lo)
            high[name] = hi if name not in high else max(high[name], hi)
        for name, mean in means.items():
            if name not in stats.means:
                stats.means[name] = np.zeros(mean.shape, np.float64)
            np.add(stats.means[name], mean, out=stats.means[name])  # summed in float64, no copy
        if references is not None:
            stats.references.append(references)
    if stats is not None:
        stats.mean_samples = min(mean_samples, len(samples))
        stats.means = {n: v / stats.mean_samples for n, v in stats.means.items()}
    return TensorsData(CalibrationMethod.MinMax, {
        name: TensorData(lowest=np.asarray(low[name], np.float32).reshape(()),
                         highest=np.asarray(high[name], np.float32).reshape(()))
        for name in calibrated if name in low})


class _Extremes:
    """``model`` with a ReduceMin and a ReduceMax (all axes, a scalar) on each of ``tensors``:
    onnxruntime returns two numbers per tensor instead of the tensor (ResNet-18 at 224x224: about
    80 MB a sample copied out and scanned twice by numpy).  Exact: a minimum is the same value
    whichever order it is taken in."""

    def __init__(self, model: onnx.ModelProto, tensors: list[str]):
        from onnx import helper

        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        graph = model.graph
        taken = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | \
            {i.name for i in graph.initializer} | {n.name for n in graph.node}
        self.pairs: list[tuple[str, str, str]] = []
        for tensor in tensors:
            low, high = (_fresh(f"{tensor}__edgeconv_{kind}", taken) for kind in ("min", "max"))
            self.model.graph.node.extend([helper.make_node("ReduceMin", [tensor], [low], low, keepdims=0),
                                          helper.make_node("ReduceMax", [tensor], [high], high, keepdims=0)])
            self.pairs.append((tensor, low, high))
        self.outputs = [name for _, low, high in self.pairs for name in (low, high)]

    def of(self, values: dict) -> dict[str, tuple]:
        """``{tensor: (lowest, highest)}`` from a run's outputs."""
        return {tensor: (values[low][()], values[high][()]) for tensor, low, high in self.pairs}


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def optimized_session(model: onnx.ModelProto, extra_outputs: list[str], threads: int | None = None):
    """``model`` with ``extra_outputs`` as graph outputs, in onnxruntime with its optimizations
    (a float graph: every exposed tensor stays computed as its node says; never an integer graph,
    whose fused kernels differ by CPU)."""
    import os

    import onnxruntime as ort

    from ..ir.light_model import without_weight_bytes

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in extra_outputs)  # types inferred
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
    # idle pool threads sleep: spinning ones took the CPU the other core's work needed (ResNet-18,
    # 224x224, a shared 2-core host: 0.45 s a sample spinning, 0.30 s not)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source, arrays = without_weight_bytes(exposed, options=options)
    weights = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays.values()]
    if arrays:
        options.add_external_initializers(list(arrays), weights)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    session.edgeconv_weights = weights  # keep the arrays alive with the session
    return session

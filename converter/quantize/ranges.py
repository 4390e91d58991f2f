"""Activation ranges from calibration data, computed by onnxruntime's calibrators.

``collect_ranges(model, samples, method)`` runs one of onnxruntime's calibrators
(``onnxruntime.quantization.calibrate.create_calibrator``) and returns its ``TensorsData``:
``{tensor name: TensorData(lowest, highest, ...)}`` for every float tensor the quantizer may
quantize.  The data is fed in chunks of :data:`CHUNK` samples: onnxruntime's histogram
calibrators keep every intermediate tensor of every sample they are given in memory before
histogramming, and a fixed chunk size keeps both memory and the merged histograms (and so the
ranges) the same on every run.

Methods:

* ``minmax``     — onnxruntime's MinMax calibrator: the observed min and max.
* ``percentile`` — onnxruntime's Percentile calibrator at the 99.99th percentile of |x| (the
  common choice, e.g. NVIDIA's pytorch-quantization; onnxruntime's default 99.999 keeps a single
  outlier among fewer than 100k values), clamped to the observed min/max, so ReLU outputs keep a
  zero lower bound.
* ``entropy``    — onnxruntime's Entropy calibrator (KL divergence, TensorRT's method) with its
  defaults (128-bin histograms: its threshold search is quadratic in the bins, 2048 bins take
  minutes; so a distribution an outlier squeezes into one bin is not resolved: use percentile).
* ``mse``        — onnxruntime has no MSE calibrator (its ``Distribution`` method fits float8
  scales, not integer ranges), so edgeconv picks, on the value histogram onnxruntime's
  calibrator collected (2048 bins), the range ``[alpha * min, alpha * max]`` (alpha in
  0.05..1) with the least expected squared error: clipping error outside the range plus the
  uniform rounding noise ``step**2 / 12`` inside it, ``step = range / 255``.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import numpy as np
import onnx

METHODS = ("minmax", "percentile", "entropy", "mse")
#: Samples per calibrator call (bounds the intermediate tensors held in memory at once).
CHUNK = 8
PERCENTILE = 99.99
_MSE_ALPHAS = np.linspace(0.05, 1.0, 96)


@contextlib.contextmanager
def quiet_onnxruntime_quantization():
    """onnxruntime's quantization tools print progress on stdout and log warnings ("consider
    pre-processing") through the root logger: neither may reach edgeconv's output."""
    prior = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(prior)


class _Chunk:
    """A CalibrationDataReader over a list of feed dicts."""

    def __init__(self, samples):
        self._iter = iter(samples)

    def get_next(self):
        return next(self._iter, None)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item


def collect_ranges(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], method: str = "minmax",
                   percentile: float = PERCENTILE, stats=None):
    """onnxruntime ``TensorsData`` (method ``MinMax`` for every method, see :func:`as_minmax`).
    ``minmax`` takes onnxruntime's ranges in one float pass of its own (:mod:`.float_pass`),
    which also fills ``stats`` (a :class:`.float_pass.FloatStats`) for bias correction."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}")
    if method == "minmax":
        from .bias_correction import CHECK_SAMPLES, MEAN_SAMPLES
        from .float_pass import minmax_pass

        return minmax_pass(model, samples, stats, MEAN_SAMPLES, CHECK_SAMPLES)
    ort_method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
                  "entropy": CalibrationMethod.Entropy, "mse": CalibrationMethod.Percentile}[method]
    options = {"percentile": percentile} if method == "percentile" else {}
    if method == "mse":
        options = {"symmetric": False}  # a histogram of values, not of |values|
    from ..infra.fsutil import private_temp_dir
    from ..infra.limits import Deadline

    deadline = Deadline(f"calibration ({len(samples)} samples, onnxruntime)")  # --timeout bounds the total
    with private_temp_dir("calib") as tmp, quiet_onnxruntime_quantization():
        model_path = Path(tmp) / "model.onnx"
        onnx.save(model, str(model_path))
        calibrator = create_calibrator(model_path, [], augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=ort_method, extra_options=options)
        calibrator.infer_session = _GuardedSession(_optimized_session(calibrator.augmented_model_path), deadline)
        for start in range(0, len(samples), CHUNK):
            deadline.check()
            calibrator.collect_data(_Chunk(samples[start:start + CHUNK]))
        if method == "mse":
            data = _mse_ranges(calibrator.collector.histogram_dict)
        else:
            data = as_minmax(calibrator.compute_data())
        del calibrator
    return data


class _GuardedSession:
    """The calibrator's session, each of its runs stopped by ``--timeout`` and Ctrl-C like every
    other onnxruntime run (:func:`converter.infra.limits.guarded_run`); the rest is the session's."""

    def __init__(self, session, deadline=None):
        self._session, self._deadline = session, deadline

    def __getattr__(self, name):
        return getattr(self._session, name)

    def run(self, names, feeds, run_options=None):
        from ..infra.limits import guarded_run

        return guarded_run(self._session, names, feeds, "calibration (onnxruntime)", self._deadline)


def _optimized_session(path: str):
    """The calibrator's session with onnxruntime's graph optimizations on (it turns them off):
    every calibrated tensor is a graph output of the augmented model, so no fusion removes one,
    and the optimized kernels halve the calibration time of a MobileNetV2."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def as_minmax(tensors_data):
    """The same ranges labelled ``MinMax``: the quantizer reads only ``lowest``/``highest`` for
    integer types, and one label lets ranges of several methods be merged (``auto``)."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    return TensorsData(CalibrationMethod.MinMax, {
        name: TensorData(lowest=np.asarray(td.range_value[0], dtype=np.float32).reshape(()),
                         highest=np.asarray(td.range_value[1], dtype=np.float32).reshape(()))
        for name, td in sorted(tensors_data.data.items())})


def merged(base, override, names) -> object:
    """``base`` with the ranges of ``names`` taken from ``override``."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorsData

    data = dict(base.data)
    for name in names:
        if name in override.data:
            data[name] = override.data[name]
    return TensorsData(CalibrationMethod.MinMax, dict(sorted(data.items())))


def range_of(tensors_data, name: str) -> tuple[float, float] | None:
    td = tensors_data.data.get(name)
    return None if td is None else (float(td.range_value[0]), float(td.range_value[1]))


def mse_range(hist: np.ndarray, edges: np.ndarray, low: float, high: float) -> tuple[float, float]:
    """The ``[alpha * low, alpha * high]`` range (always holding 0) with the least expected
    squared quantization error over the histogram (``hist`` counts between ``edges``)."""
    centers = (edges[:-1].astype(np.float64) + edges[1:]) / 2.0
    counts = hist.astype(np.float64)
    lows = np.minimum(0.0, low * _MSE_ALPHAS)[:, None]
    highs = np.maximum(0.0, high * _MSE_ALPHAS)[:, None]
    step = (highs - lows) / 255.0
    clipped = np.clip(centers[None, :], lows, highs)
    error = np.where(centers[None, :] == clipped, step ** 2 / 12.0, (centers[None, :] - clipped) ** 2)
    total = (error * counts[None, :]).sum(axis=1)
    total[step[:, 0] == 0] = np.inf
    best = int(np.argmin(total)) if np.isfinite(total).any() else len(_MSE_ALPHAS) - 1
    return float(lows[best, 0]), float(highs[best, 0])


def _mse_ranges(histograms: dict):
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    data = {}
    for name, (hist, edges, low, high, *_rest) in sorted(histograms.items()):
        lo, hi = mse_range(np.asarray(hist), np.asarray(edges), float(low), float(high))
        data[name] = TensorData(lowest=np.array(lo, dtype=np.float32), highest=np.array(hi, dtype=np.float32))
    return TensorsData(CalibrationMethod.MinMax, data)


#: Ops whose output range a lone Add input shares (see :func:`share_add_ranges`): the Add's
#: output is quantized after them (onnxruntime folds the activation into the Add's range).
_FOLDED_ACTIVATIONS = ("Relu", "Clip")


def share_add_ranges(model: onnx.ModelProto, tensors_data):
    """The ranges with the branch closing each Add widened to also cover the Add's output range.

    The branch is the Add input computed last (the other one, the skip, was computed before the
    branch started); it is widened only when that Add alone reads it.  Its new range is the
    union of its own and the Add's: where the Add's output range holds the branch's, both get
    one scale and the int8 ADD passes the branch's integers through unrequantized.  This is the
    layout TensorFlow's full-integer converter writes for a residual block (the projection
    CONV_2D before each ADD carries that union; the shortcut's 1x1 CONV_2D and the skip keep
    their own range): with it edgeconv's int8 file has TensorFlow's scale and zero point on every
    tensor of the zoo's MobileNetV2 (224x224) and ResNet (32x32).  Measured (LiteRT, median SQNR
    over held-out samples against the float model, ``benchmarks/bench_quant_peers.py``): with 100
    calibration / 16 held-out samples at 224x224, MobileNetV2 41.8 -> 42.1 dB, ResNet 43.8 ->
    44.1 dB; with 16 calibration samples at 32x32, ResNet 41.1 dB either way on 32 held-out
    samples (the 39.8 -> 42.5 dB once measured on 8 was one sample's swing: the rule is
    TensorFlow's layout, not a gain on every model).

    The Add's output range is the range it is quantized with: that of a lone Relu/Clip after it
    when there is one (onnxruntime's ``adjust_tensor_ranges`` folds the activation).  Adds are
    visited last to first so that a chain of them shares the last one's range.

    These numbers are with plain biases.  With bias correction each tensor's own range can gain
    more, so ``qdq.quantize_model`` then scores both layouts (:mod:`.bias_correction`)."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    position = {o: k for k, node in enumerate(model.graph.node) for o in node.output}
    data = dict(tensors_data.data)

    def quantized_range(name: str) -> tuple[float, float] | None:
        after = consumers.get(name, [])
        if len(after) == 1 and after[0].op_type in _FOLDED_ACTIVATIONS and after[0].output[0] in data:
            name = after[0].output[0]
        td = data.get(name)
        return None if td is None else (float(td.range_value[0]), float(td.range_value[1]))

    for node in reversed(model.graph.node):
        if node.op_type != "Add" or (out := quantized_range(node.output[0])) is None:
            continue
        computed = [name for name in node.input if name in position]
        if not computed:
            continue
        branch = max(computed, key=position.get)
        if branch not in data or len(consumers[branch]) != 1:
            continue
        low, high = (float(v) for v in data[branch].range_value)
        data[branch] = TensorData(lowest=np.array(min(low, out[0]), dtype=np.float32),
                                  highest=np.array(max(high, out[1]), dtype=np.float32))
    return TensorsData(CalibrationMethod.MinMax, dict(sorted(data.items())))


#: Ops whose int8 kernels output their input's parameters (the writers give the output the
#: input's scale): a range shared across a Concat extends through them to the tensor they read.
_SAME_RANGE_OPS = ("Resize", "Reshape", "Transpose", "MaxPool", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def share_concat_ranges(model: onnx.ModelProto, tensors_data):
    """The ranges with every Concat's inputs given the Concat's output range (the union of all).

    LiteRT's int8 CONCATENATION refuses inputs whose scale differs from the output's
    (google-ai-edge/LiteRT@f674577:tflite/kernels/concatenation.cc, "TF_LITE_ENSURE_EQ(context,
    t->params.scale, output->params.scale)"), so a file with each input's own range needs an
    int8 -> int8 QUANTIZE per differing input.  TensorFlow's converter gives the inputs the
    output's range instead (the Concat is a same-scale op to its quantizer), and so does this:
    each input the Concat alone reads takes the union, and so does the tensor behind it through
    ops whose int8 kernel keeps its input's parameters (Resize, Reshape, MaxPool, ...: the HED
    edge detector's side outputs are Conv -> Resize -> Concat), as long as nothing else reads
    it.  The Concat's output is requantized at its own range anyway; written in that range at the
    producer, the value is rounded once instead of twice."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    consumers: dict[str, list[onnx.NodeProto]] = {}
    producer: dict[str, onnx.NodeProto] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
        for name in node.output:
            producer[name] = node
    data = dict(tensors_data.data)
    for node in reversed(model.graph.node):
        if node.op_type != "Concat" or node.output[0] not in data:
            continue
        inputs = [t for t in node.input if t in data]
        ranges = [tuple(float(v) for v in data[t].range_value) for t in [node.output[0], *inputs]]
        union = TensorData(lowest=np.array(min(r[0] for r in ranges), np.float32),
                           highest=np.array(max(r[1] for r in ranges), np.float32))
        data[node.output[0]] = union
        for tensor in inputs:
            while tensor in data and len(consumers.get(tensor, [])) == 1:
                data[tensor] = union
                before = producer.get(tensor)
                if before is None or before.op_type not in _SAME_RANGE_OPS:
                    break
                tensor = before.input[0]
    return TensorsData(CalibrationMethod.MinMax, dict(sorted(data.items())))

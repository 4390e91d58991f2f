"""Bias correction: remove the mean output shift that rounding a layer's weights causes.

Rounding weights ``W`` to ``Wq = W + dW`` moves every output channel's expected value by
``E[conv(x, dW)]``.  Rounding errors of a few weights (a 3x3 depthwise kernel has nine) do
not average out, so the shift is systematic, and it accumulates through the network
(Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction",
ICCV 2019, section 4.2).  The correction is exact in expectation and needs no retraining:
a convolution is linear, so ``E[conv(x, dW)] = conv(E[x], dW)`` with the padding included,
where ``E[x]`` is the mean input map over (up to :data:`MEAN_SAMPLES`) calibration samples; the spatial mean of that
map per output channel is subtracted from the float bias before it is quantized.  Gemm is
the same with the mean input row.

Before / after (the int32 bias integers change, nothing else)::

    x -> DQ -> Conv(DQ(w_int8), DQ(b_int32)) -> Q        b_int32 = round(b / (s_x * s_w))
    x -> DQ -> Conv(DQ(w_int8), DQ(b'_int32)) -> Q       b'_int32 = round((b - delta) / (s_x * s_w))

The correction is fitted to the calibration samples, so it is kept only where it helps on
samples it was not fitted to: :func:`correct_biases` scores the QDQ model with plain and with
corrected biases, and the same for each alternative range layout it is given
(``qdq.quantize_model`` gives the one without :func:`.ranges.share_add_ranges`), by the worst
output SQNR (every Q/DQ applied), and keeps the best.  A port scores on its held-out samples
(:mod:`.holdout`: ``--inputs``, or a seeded part of the calibration set that calibrated
nothing); called without a scorer it scores on up to :data:`CHECK_SAMPLES` calibration samples
(in-sample, and the record says so).  The outcome is recorded in the chosen model's metadata
(:data:`METADATA_KEY`) and from there in ``quantization.json``.

Layers it corrects: Conv (any group) and Gemm (``alpha = beta = 1``, ``transA = 0``) whose
weight is a dequantized integer constant and whose bias is a dequantized int32 constant read
by that layer alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .params import BIAS_CORRECTION_KEY as METADATA_KEY
from .params import QdqView, QuantEdge, bias_correction_record, dequantize, int32_bias

#: Calibration samples the keep-or-drop check runs without a scorer of held-out samples.
CHECK_SAMPLES = 16
#: Calibration samples the mean input maps are taken over: the correction is their spatial mean
#: per channel, which 32 samples already pin down (ResNet-18 at 224x224: 100 samples took 20 s
#: of float runs for the same gain within 0.05 dB).
MEAN_SAMPLES = 32


@dataclass
class _Layer:
    node: onnx.NodeProto          # the layer (the float model's node; the QDQ model's has its name)
    bias: str                     # its bias initializer in the float model
    float_weight: np.ndarray
    float_bias: np.ndarray
    weight_real: np.ndarray       # the dequantized weight the QDQ model computes with
    bias_edge: QuantEdge          # the int32 bias: its integers' initializer and its scale


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _layers(view: QdqView, only: set[str] | None = None) -> list[_Layer]:
    floats = {i.name: i for i in view.float_model.graph.initializer}
    layers = []
    for node in view.float_model.graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3 or (only is not None and node.input[1] not in only):
            continue
        a = _attrs(node)
        if node.op_type == "Gemm" and (a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0)):
            continue
        weights, bias = view.weight_values(node.input[1]), view.constants.get(node.input[2])
        # a bias shared by several layers cannot take one layer's correction
        if (weights is None or bias is None or bias.dtype != "int32"
                or view.constant_consumers[node.input[2]] != [node.name]):
            continue
        layers.append(_Layer(node, node.input[2], weights[0].astype(np.float64),
                             numpy_helper.to_array(floats[node.input[2]]).astype(np.float64).reshape(-1),
                             weights[1], bias))
    return layers


def corrected_inputs(float_model: onnx.ModelProto) -> list[str]:
    """The data input of every Conv/Gemm with a bias: the tensors whose mean a correction needs."""
    return list(dict.fromkeys(n.input[0] for n in float_model.graph.node
                              if n.op_type in ("Conv", "Gemm") and len(n.input) > 2))


def _float_pass(float_model: onnx.ModelProto, names: list[str], samples: list[dict],
                check: int) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """One float run per sample: the mean (over samples and batch, layout kept) of each named
    tensor, and the model outputs of the first ``check`` samples (the SQNR references)."""
    from ..runtimes.onnxruntime import run_session, session

    outputs = [o.name for o in float_model.graph.output]
    inner = [n for n in dict.fromkeys(names) if n not in samples[0] and n not in outputs]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(float_model)
    exposed.graph.output.extend(onnx.ValueInfoProto(name=n) for n in inner)  # onnxruntime infers the types
    runner = session(exposed)
    sums: dict[str, np.ndarray] = {}
    references = []
    for k, sample in enumerate(samples):
        values = {**sample, **run_session(runner, sample, outputs + inner)}
        if k < check:
            references.append({n: values[n] for n in outputs})
        for name in dict.fromkeys(names):
            value = np.asarray(values[name], dtype=np.float64)
            mean = value.mean(axis=0, keepdims=True) if value.ndim else value
            sums[name] = sums[name] + mean if name in sums else mean
    return {name: total / len(samples) for name, total in sums.items()}, references


def _conv_shift(layer: _Layer, mean_input: np.ndarray) -> np.ndarray:
    """Per output channel: spatial mean of conv(E[x], dW) (one onnxruntime Conv)."""
    from ..runtimes.onnxruntime import run_session, session

    node = helper.make_node("Conv", ["x", "w"], ["y"], **_attrs(layer.node))
    graph = helper.make_graph([node], "bias_shift", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array((layer.weight_real - layer.float_weight).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    y = run_session(session(model), {"x": mean_input.astype(np.float32)})["y"].astype(np.float64)
    return y.mean(axis=tuple(i for i in range(y.ndim) if i != 1))


def _gemm_shift(layer: _Layer, mean_input: np.ndarray) -> np.ndarray:
    """Per output: E[A] @ dB (the mean input row; B stored [N, K] when transB)."""
    dw = layer.weight_real - layer.float_weight
    if _attrs(layer.node).get("transB", 0):
        dw = dw.T
    return mean_input.reshape(-1, dw.shape[0]).mean(axis=0) @ dw


def _worst_sqnr(qdq_model: onnx.ModelProto, samples: list[dict], references: list[dict]) -> float:
    """The lowest, over the outputs, of the median SQNR of ``qdq_model`` (every Q/DQ applied)."""
    from ..runtimes.onnxruntime import onnx_runner
    from .verify import compare_quantized

    by_sample = {id(sample): reference for sample, reference in zip(samples, references)}
    quality = compare_quantized(lambda sample: by_sample[id(sample)], onnx_runner(qdq_model), samples)
    return min((o.sqnr_db for o in quality.outputs), default=float("nan"))


def _corrected(qdq_model: onnx.ModelProto, layers: list[_Layer], means: dict[str, np.ndarray],
               shifts: dict | None = None) -> onnx.ModelProto:
    """``qdq_model`` with the corrected int32 biases; ``shifts``: the shifts computed before, by
    (layer, its weights' rounding error), reused (a keep-float variant has the same weights)."""
    corrected = onnx.ModelProto()
    corrected.CopyFrom(qdq_model)
    inits = {i.name: i for i in corrected.graph.initializer}
    shifts = {} if shifts is None else shifts
    for layer in layers:
        error = (layer.weight_real - layer.float_weight).tobytes()
        key = (layer.node.name, layer.node.input[0], hashlib.sha1(error).hexdigest())
        if key not in shifts:
            shifts[key] = (_conv_shift if layer.node.op_type == "Conv" else _gemm_shift)(layer, means[layer.node.input[0]])
        shift = shifts[key]
        target = inits[layer.bias_edge.quantized]
        target.CopyFrom(numpy_helper.from_array(int32_bias(layer.float_bias - shift, layer.bias_edge.scale), target.name))
    return corrected


def correct_biases(float_model: onnx.ModelProto, qdq_model: onnx.ModelProto, samples: list[dict],
                   alternatives: dict[str, onnx.ModelProto] | None = None,
                   only: set[str] | None = None, stats=None, score: Scorer | None = None,
                   fixed: dict | None = None) -> onnx.ModelProto:
    """The best, by worst output SQNR, of ``qdq_model`` and each of ``alternatives`` (the same
    model with other activation ranges), each as it is and with corrected biases; ties go to
    ``qdq_model`` as it is.  With more than three candidates, all are scored on the first half of
    the samples and the :data:`FINALISTS` best (and the plain shared layout) on all of them; the
    winner is the best finalist.  The chosen model's metadata records every candidate's SQNR, the
    samples it was measured on (``pruned``: the candidates scored on the first half only) and why
    the winner won.

    ``score``: a :class:`Scorer` on held-out samples (a port's, :class:`.judge.Judge`); without
    one, the candidates are scored on the first :data:`CHECK_SAMPLES` of ``samples`` (the
    calibration samples: in-sample, the library's default).  The mean input maps always come
    from ``samples`` (``stats``: the calibration pass's :class:`.float_pass.FloatStats` of them,
    else the float model runs here).

    ``alternatives`` exist because the best ranges depend on the biases: with plain biases,
    residual Adds sharing their output's range (TensorFlow's layout, :func:`.ranges.share_add_ranges`)
    gain, with corrected biases each tensor's own range can gain more (MobileNetV2 at 224x224,
    64 held-out samples: shared 43.5 dB, own 46.4 dB).  ``only``: the weights whose layers may be
    corrected (a target that writes its own integers for these alone, :mod:`.target_weights`).
    ``fixed``: another model's record (:func:`bias_correction_record`) whose choice (layout,
    corrected or not) is taken as it is, without scoring (a variant of that model)."""
    candidates = {"shared": qdq_model, **(alternatives or {})}
    if fixed is not None:
        label = fixed.get("add_ranges", "shared") if fixed.get("add_ranges") in candidates else "shared"
        candidates = {label: candidates[label]}
    layers = {label: _layers(QdqView(float_model, model), only) for label, model in candidates.items()}
    first = next(iter(candidates))
    record: dict = {"layers": len(layers[first]), "applied": False, "add_ranges": first}
    if not layers[first]:
        record["why"] = "no Conv/Gemm with an integer weight and an int32 bias of its own"
    if not samples or not any(layers.values()):
        _set_metadata(candidates[first], record)
        return candidates[first]
    names = [layer.node.input[0] for found in layers.values() for layer in found]
    if fixed is not None:
        return _as_fixed(float_model, candidates[first], layers[first], samples, names, stats, fixed, record)
    means, score = _means_and_scorer(float_model, samples, names, stats, score)
    models = []  # (label, corrected?, model)
    for label, model in candidates.items():
        models.append((label, False, model))
        if layers[label]:
            models.append((label, True, _corrected(model, layers[label], means, _shifts(stats))))
    scored = _scored(models, score)  # (sqnr, order, label, corrected?, model, samples)
    best = max(scored, key=lambda t: (t[0], -t[1]) if t[5] == score.count else (float("-inf"), 0))
    _, _, label, applied, chosen, _ = best
    for candidate in scored:
        score.done(candidate[4], keep=candidate is best)
    record.update(layers=len(layers[label]), applied=applied, add_ranges=label, samples=score.count,
                  samples_from=score.label, sqnr_db_before=round(scored[0][0], 3), sqnr_db_after=round(best[0], 3),
                  candidates={f"{t[2]}/{'corrected' if t[3] else 'plain'}": round(t[0], 3) for t in scored})
    pruned = {f"{t[2]}/{'corrected' if t[3] else 'plain'}": t[5] for t in scored if t[5] != score.count}
    if pruned:
        record["pruned"] = {"samples": next(iter(pruned.values())), "candidates": sorted(pruned)}
    if applied:
        record["float_biases"] = sorted(layer.bias for layer in layers[label])
    elif layers[label]:
        record["why"] = (f"corrected biases lowered the worst output SQNR on {score.label} "
                         f"({best[0]:.2f} dB kept)")
    _set_metadata(chosen, record)
    return chosen


def _shifts(stats) -> dict | None:
    """The shift cache of the calibration pass's statistics (the means it holds are the same)."""
    return None if stats is None else stats.shifts


#: With more candidates than this, all are scored on the first half of the samples and only this
#: many best, and the plain biases of the shared layout (the "before" of the record), on all.
FINALISTS = 2


def _scored(models: list[tuple], score) -> list[tuple]:
    """(sqnr, order, label, corrected?, model, samples scored on) per candidate: successive
    halving (Jamieson and Talwalkar, 2016) when there are more than FINALISTS + 1 candidates."""
    if len(models) <= FINALISTS + 1 or score.count < 8:
        return [(score(m), k, label, fixed, m, score.count) for k, (label, fixed, m) in enumerate(models)]
    half = score.count // 2
    first = [(score.partial(m, half), k, label, fixed, m, half) for k, (label, fixed, m) in enumerate(models)]
    ahead = sorted(first, key=lambda t: (-t[0], t[1]))[:FINALISTS]
    final = {t[1] for t in ahead} | {0}
    return [(score(t[4]), *t[1:5], score.count) if t[1] in final else t for t in first]


def _as_fixed(float_model, model, layers, samples, names, stats, fixed: dict, record: dict) -> onnx.ModelProto:
    """``model`` with the biases corrected iff ``fixed`` says so (no scoring)."""
    if fixed.get("applied"):
        means, _ = _means_and_scorer(float_model, samples, names, stats, Scorer(lambda m, n: 0.0, 0, ""))
        model = _corrected(model, layers, means, _shifts(stats))
        record.update(applied=True, float_biases=sorted(layer.bias for layer in layers))
    record["chosen_by"] = "the choice made for the model this one varies"
    _set_metadata(model, record)
    return model


class Scorer:
    """How bias correction scores a candidate: ``scorer(model) -> dB`` (the worst output's median
    SQNR), on ``count`` samples named by ``label``; ``done(model, keep)`` once it was scored."""

    def __init__(self, score: Callable[[onnx.ModelProto, int], float], count: int, label: str,
                 done: Callable[[onnx.ModelProto, bool], None] | None = None):
        self._score, self.count, self.label = score, count, label
        self._done = done

    def __call__(self, model: onnx.ModelProto) -> float:
        return self._score(model, self.count)

    def partial(self, model: onnx.ModelProto, count: int) -> float:
        """The score on the first ``count`` samples only."""
        return self._score(model, count)

    def done(self, model: onnx.ModelProto, keep: bool) -> None:
        if self._done is not None:
            self._done(model, keep)


def _means_and_scorer(float_model, samples, names, stats, score: Scorer | None):
    """(mean input maps over the first MEAN_SAMPLES calibration samples, the scorer): from the
    calibration pass's statistics where it took them, else from a float pass here."""
    check = samples[:CHECK_SAMPLES]
    averaged = samples[:max(MEAN_SAMPLES, len(check))]
    have_means = stats is not None and stats.mean_samples == len(averaged) and all(n in stats.means for n in names)
    if have_means and (score is not None or len(stats.references) >= len(check)):
        means, references = stats.means, stats.references[:len(check)]
    else:
        means, references = _float_pass(float_model, names, averaged, 0 if score is not None else len(check))
    if score is None:
        score = Scorer(lambda model, count: _worst_sqnr(model, check[:count], references), len(check),
                       f"{len(check)} calibration samples (in-sample)")
    return means, score


def _set_metadata(model: onnx.ModelProto, record: dict) -> None:
    kept = [p for p in model.metadata_props if p.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    model.metadata_props.add(key=METADATA_KEY, value=json.dumps(record, sort_keys=True))


def with_corrected_biases(float_model: onnx.ModelProto, qdq_model: onnx.ModelProto) -> onnx.ModelProto:
    """``float_model`` with each corrected bias replaced by the QDQ model's dequantized int32 bias,
    so that an exporter that quantizes the float bias itself (``round(b / (s_x * s_w))``) writes
    the corrected integers; ``float_model`` itself when no correction was applied."""
    record = bias_correction_record(qdq_model) or {}
    if not record.get("applied"):
        return float_model
    view = QdqView(float_model, qdq_model)
    out = onnx.ModelProto()
    out.CopyFrom(float_model)
    for init in out.graph.initializer:
        if init.name in record["float_biases"]:
            edge = view.constants[init.name]
            value = dequantize(numpy_helper.to_array(view.inits[edge.quantized]), edge)
            init.CopyFrom(numpy_helper.from_array(value.astype(np.float32).reshape(init.dims), init.name))
    return out

"""Where does quantization lose accuracy, and why: the per-layer SQNR table (after ML-EXray).

The float model and its QDQ version run on the same samples with every intermediate tensor
exposed (``converter.verify.localize.expose_intermediates``, the same machinery that localizes
conversion errors).  Each float tensor is compared with the tensor carrying it in the QDQ model
(its DequantizeLinear output, see :class:`~.params.QdqView`) by SQNR
(``converter.verify.metrics.sqnr_db``), per sample; a row reports the median over samples.

A row's **drop** is its input SQNR minus its output SQNR: the accuracy this layer loses on top of
what it was fed (a tensor the QDQ model does not materialize, such as a Conv output whose Relu
the quantizer folded into the range, passes its inputs' SQNR on).  Inputs no quantization
touched count at :data:`BASELINE_SQNR_DB`, what the format gives a bell-shaped tensor over its
min-max range (8 bits over +-4 sigma: 10 log10(12 * 255**2 / 64) = 40.9 dB; float16's 11 bits:
about 18 dB more), so the first quantized tensor is charged only for doing worse than that.
The rows with the largest drops are named, each with a diagnosis:

* ``per-tensor squash`` — the layer's weights share one scale, and some output channels' weights
  span fewer than :data:`SQUASH_LEVELS` integer levels (their range is far below the largest
  channel's): those channels quantize to almost nothing.  Suggestion: per-channel weights.
* ``saturated range`` — clipping at qmin/qmax adds more squared error than rounding inside the
  range does (and at least 0.01% of values clip).  Suggestion: a wider range (minmax) or float.
* ``outlier-inflated scale`` — the quantization range exceeds :data:`OUTLIER_RATIO` times the
  typical sample's 99.99th percentile of |x| (two bits, 12 dB, lost; clean minmax ranges stay
  within 1.5x): a few calibration values (one sample) set the scale and the bulk of the values
  get few levels.  Suggestion: percentile calibration.
* ``weight error`` — the dequantized weights are far from the float ones (weight SQNR below
  :data:`WEIGHT_MIN_SQNR_DB`) without a squash to explain it (a wrong scale, a clipped weight).
* ``quantized op`` — a large drop that none of the range checks explains: the quantized op
  itself misbehaves.  Suggestion: keep the layer in float.
* ``amplifies input error`` — the same for a layer computed in float (its output is not
  quantized): it magnifies the error of its quantized input (Exp turns absolute into relative
  error).  Suggestion: quantize upstream more finely.

Only rows that lose something are diagnosed: a drop of at least :data:`DIAGNOSE_DROP_DB`, or a
channel far below the layer (:data:`CHANNEL_GAP_DB`), so that a benign clip in a layer that
gains SQNR (an average pool) is not reported as a problem.

A local drop is not what the outputs lose: for the rows with the largest drops, :mod:`.recovery`
measures the output SQNR the model gains with the layer in float (``recovered_db``), and
:meth:`LayerTable.ranked` and the summary rank by that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..ir.graph import to_graph
from ..verify import metrics
from ..verify.localize import expose_intermediates
from ..runtimes.onnxruntime import run_session, session
from .parallel import SESSION_THREADS, ordered_map
from .params import QdqView

BASELINE_SQNR_DB = {"int8": 40.0, "uint8": 40.0, "int8-weights": 40.0, "fp16": 58.0}
SQUASH_LEVELS = 8
OUTLIER_RATIO = 4.0
SATURATION_FRACTION = 1e-4
WEIGHT_MIN_SQNR_DB = 30.0
DIAGNOSE_DROP_DB = 1.0
CHANNEL_GAP_DB = 20.0
#: A drop this large (one bit) is worth a diagnosis even when no range check explains it.
NOTABLE_DROP_DB = 6.0
#: Held-out samples the table is taken on (with 4, a heavy-tailed layer's rare saturation went
#: unseen: tests/test_quantize_qdq.py).
DEBUG_SAMPLES = 8
#: The ``op`` of a row for a quantized graph input.
INPUT_OP = "graph input"

SUGGESTIONS = {
    "per-tensor squash": "per-channel weights",
    "saturated range": "wider range (minmax calibration) or keep float",
    "outlier-inflated scale": "percentile calibration",
    "weight error": "keep float (or per-channel weights)",
    "quantized op": "keep float",
    "amplifies input error": "finer quantization upstream (per-channel, percentile)",
}


@dataclass
class LayerRow:
    #: The layer: the float node, or "conv_3+relu_2" when the quantized model computes the
    #: tensor in another node (a Relu folded into the range of the Conv before it).
    node: str
    op: str
    tensor: str
    sqnr_db: float
    input_sqnr_db: float
    drop_db: float
    #: Diagnosis codes (keys of SUGGESTIONS), most specific first.
    diagnosis: list[str] = field(default_factory=list)
    detail: str = ""
    suggestion: str = ""
    #: The evidence behind the diagnosis.
    clipped_fraction: float = 0.0
    range: tuple[float, float] | None = None
    typical_absmax: float | None = None
    squashed_channels: int = 0
    #: Largest over smallest non-zero output-channel weight range (per-tensor weights).
    channel_spread: float | None = None
    #: Squared error from clipping at the range, and the expected rounding error inside it.
    clip_noise: float = 0.0
    rounding_noise: float = 0.0
    weight_sqnr_db: float | None = None
    #: The lowest per-channel (axis 1) SQNR, pooled over samples: a layer can look fine overall
    #: while its small channels are lost.
    worst_channel_sqnr_db: float | None = None
    #: The float-model nodes this row stands for (what ``auto`` keeps in float).
    nodes: list[str] = field(default_factory=list)
    #: Measured for the top candidates (:mod:`.recovery`): the worst output's SQNR gain (dB) with
    #: this layer (and ``kept_float_with``, the nodes reading its output) in float, and on which samples.
    recovered_db: float | None = None
    recovered_on: str = ""
    kept_float_with: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["range"] = list(self.range) if self.range else None
        return d


@dataclass
class LayerTable:
    rows: list[LayerRow]
    samples: int
    baseline_sqnr_db: float
    #: The samples the keep-float gains were measured on ("" when none was measured).
    measured_on: str = ""
    #: Why no keep-float gain was measured (:mod:`.recovery`), or "".
    unmeasured: str = ""

    def worst(self, count: int = 3) -> list[LayerRow]:
        ranked = sorted((r for r in self.rows if r.drop_db > 0), key=lambda r: -r.drop_db)
        return ranked[:count]

    def measured(self) -> list[LayerRow]:
        """The rows whose keep-float gain was measured, the largest gain first."""
        return sorted((r for r in self.rows if r.recovered_db is not None), key=lambda r: -r.recovered_db)

    def ranked(self) -> list[LayerRow]:
        """The measured rows by output SQNR recovered in float, then the others by local drop."""
        measured = self.measured()
        return measured + sorted((r for r in self.rows if r.recovered_db is None), key=lambda r: -r.drop_db)

    def row(self, node: str) -> LayerRow | None:
        return next((r for r in self.rows if r.node == node), None)

    def diagnosed(self) -> list[LayerRow]:
        return [r for r in self.rows if r.diagnosis]

    def summary(self) -> str:
        measured = self.measured()
        if measured:
            return self._measured_summary(measured)
        worst = [r for r in self.worst(1) if r.drop_db >= DIAGNOSE_DROP_DB]
        if worst:
            r = worst[0]
            why = f": {', '.join(r.diagnosis)}" if r.diagnosis else ""
            line = f"{r.node} ({r.op}) loses the most, {r.drop_db:.1f} dB (SQNR {r.sqnr_db:.1f} dB){why}"
            return f"{line}; {self.unmeasured}" if self.unmeasured else line
        if self.diagnosed():
            r = self.diagnosed()[0]
            return f"{r.node} ({r.op}): {', '.join(r.diagnosis)} ({r.detail})"
        return f"no layer loses accuracy ({len(self.rows)} layers compared)"

    def _measured_summary(self, measured: list[LayerRow]) -> str:
        best = measured[0]
        why = f", {', '.join(best.diagnosis)}" if best.diagnosis else ""
        line = (f"keeping {best.node} ({best.op}) in float would recover the most, {best.recovered_db:+.1f} dB at "
                f"the outputs (it loses {best.drop_db:.1f} dB locally{why}; {len(measured)} layer"
                f"{'s' if len(measured) != 1 else ''} measured on {self.measured_on})")
        top = self.worst(1)[0] if self.worst(1) else best
        if top is not best and top.recovered_db is not None:
            line += f"; {top.node} loses the most locally, {top.drop_db:.1f} dB, but would recover {top.recovered_db:+.1f} dB"
        return line

    def to_dict(self) -> dict:
        return {"samples": self.samples, "baseline_sqnr_db": self.baseline_sqnr_db, "summary": self.summary(),
                "measured_on": self.measured_on, "unmeasured": self.unmeasured, "ranked": [r.node for r in self.ranked()[:5]],
                "worst": [r.node for r in self.worst(5)],
                "diagnosed": [r.node for r in self.diagnosed()], "rows": [r.to_dict() for r in self.rows]}


class _Stats:
    """Per-tensor accumulators over samples."""

    def __init__(self):
        self.sqnr: list[float] = []
        self.clip_noise = 0.0
        self.clipped = 0
        self.inside = 0
        self.total = 0
        self.robust_absmax: list[float] = []
        #: Per channel (axis 1), signal and noise energy summed over samples.
        self.channel_signal: np.ndarray | None = None
        self.channel_noise: np.ndarray | None = None
        self.range: tuple[float, float] = (0.0, 0.0)
        self.scale = 0.0


def _channel_ranges(weight: np.ndarray, node: onnx.NodeProto) -> np.ndarray:
    axis = 0
    if node.op_type == "Gemm":
        axis = 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
    elif node.op_type == "MatMul":
        axis = weight.ndim - 1
    elif node.op_type == "ConvTranspose":
        axis = 1
    moved = np.moveaxis(np.abs(weight.astype(np.float64)), axis, 0)
    return moved.reshape(moved.shape[0], -1).max(axis=1)


def _median(values: list[float]) -> float:
    """The median SQNR over samples (+-inf count as very large/small, never as NaN)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan
    ranked = sorted(values)
    mid = len(ranked) // 2
    if len(ranked) % 2:
        return float(ranked[mid])
    low, high = ranked[mid - 1], ranked[mid]
    if math.isinf(low) or math.isinf(high):
        return float(low)  # no mean of infinities: the more pessimistic middle value
    return (low + high) / 2.0


def debug_layers(float_model: onnx.ModelProto, qdq_model: onnx.ModelProto, samples: list[dict[str, np.ndarray]],
                 mode: str = "int8", max_samples: int = DEBUG_SAMPLES) -> LayerTable:
    """The per-layer table of ``qdq_model`` against ``float_model`` on ``samples``."""
    view = QdqView(float_model, qdq_model)
    baseline = BASELINE_SQNR_DB.get(mode, BASELINE_SQNR_DB["int8"])
    float_exposed, _ = expose_intermediates(float_model)
    qdq_exposed, _ = expose_intermediates(qdq_model)
    float_session, qdq_session = session(float_exposed, SESSION_THREADS), session(qdq_exposed, SESSION_THREADS)
    graph = to_graph(float_model)
    graph.toposort()
    inputs = [t.name for t in graph.inputs]
    tensors = inputs + [o.name for n in graph.nodes for o in n.outputs]
    stats = {name: _Stats() for name in tensors}
    used = samples[:max_samples]
    # the float and the QDQ model of a sample run at once (:mod:`.parallel`), read in order
    ran = ordered_map(lambda job: run_session(job[0], job[1]),
                      [(s, sample) for sample in used for s in (float_session, qdq_session)])
    for sample in used:
        fv = next(ran)
        fv.update({k: v for k, v in sample.items() if k in inputs})
        qv = next(ran)
        for name in tensors:
            target = view.quantized_view(name)
            if name not in fv or target is None:
                continue
            got = sample[target] if target in sample else qv.get(target)
            ref = fv[name]
            if got is None or np.shape(got) != np.shape(ref) or not np.issubdtype(np.asarray(ref).dtype, np.floating):
                continue
            st = stats[name]
            st.sqnr.append(metrics.sqnr_db(ref, got))
            if np.ndim(ref) >= 2 and np.shape(ref)[1] > 1:
                signal, noise = metrics.channel_energies(ref, got, axis=1)
                st.channel_signal = signal if st.channel_signal is None else st.channel_signal + signal
                st.channel_noise = noise if st.channel_noise is None else st.channel_noise + noise
            edge = view.activations.get(name)
            if edge is not None and edge.axis is None:
                _range_stats(st, np.asarray(ref), edge)
    rows = []
    known: dict[str, float] = {}
    for name in inputs:
        st = stats[name]
        if st.sqnr and name in view.activations:
            known[name] = _median(st.sqnr)
            rows.append(_row(view, None, INPUT_OP, name, known[name], baseline, st))
    for node in graph.nodes:
        in_sqnr = min([known[t.name] for t in node.inputs if t.name in known] + [baseline])
        for out in node.outputs:
            st = stats.get(out.name)
            if st is None or not st.sqnr:
                known[out.name] = in_sqnr  # not materialized in the QDQ model: carries its inputs' SQNR on
                continue
            known[out.name] = _median(st.sqnr)
            rows.append(_row(view, node, node.op, out.name, known[out.name], in_sqnr, st))
    table = LayerTable(rows, len(used), baseline)
    for r in rows:
        _diagnose(r)
    return table


def _range_stats(st: _Stats, values: np.ndarray, edge) -> None:
    x = values.astype(np.float64)
    lo_q, hi_q = edge.qrange()
    scale, zero = float(edge.scale.reshape(-1)[0]), float(edge.zero_point.reshape(-1)[0])
    lo, hi = scale * (lo_q - zero), scale * (hi_q - zero)
    clipped = np.clip(x, lo, hi)
    outside = x != clipped
    st.clip_noise += float(np.sum((x - clipped) ** 2))
    st.clipped += int(np.count_nonzero(outside))
    st.inside += int(x.size - np.count_nonzero(outside))
    st.total += int(x.size)
    # the partial sort on the float32 values: it selects the same elements as on their float64
    # copies (the conversion keeps the order), at half the memory traffic
    st.robust_absmax.append(_percentile(np.abs(values).reshape(-1), 99.99) if x.size else 0.0)
    st.range = (lo, hi)
    st.scale = scale


def _percentile(values: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation), by partial sort: the same value, about
    five times faster on a feature map."""
    position = q / 100.0 * (values.size - 1)
    low, high = int(np.floor(position)), int(np.ceil(position))
    part = np.partition(values, [low, high])
    a, b, t = float(part[low]), float(part[high]), position - low
    return float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)  # numpy's own lerp


def _row(view: QdqView, node, op: str, tensor: str, sqnr: float, in_sqnr: float, st: _Stats) -> LayerRow:
    row = LayerRow(node.name if node is not None else tensor, op, tensor, sqnr, in_sqnr, 0.0)
    row.nodes = [node.name] if node is not None else []
    compute = view.computed_by(tensor) if node is not None else None
    float_node = view.float_nodes.get(node.name) if node is not None else None
    if compute is not None and compute.name != node.name and compute.name in view.float_nodes:
        row.node, row.op = f"{compute.name}+{node.name}", f"{compute.op_type}+{op}"
        row.nodes = [compute.name, node.name]
        float_node = view.float_nodes[compute.name]
    row.drop_db = (in_sqnr - sqnr) if math.isfinite(sqnr) else 0.0
    if st.channel_signal is not None and (st.channel_signal > 0).any():
        live = st.channel_signal > 0  # a channel that is always zero has no SQNR to speak of
        per_channel = metrics.sqnr_from_energies(st.channel_signal[live], st.channel_noise[live])
        row.worst_channel_sqnr_db = float(np.min(per_channel))
    if st.total:
        row.clipped_fraction = st.clipped / st.total
        row.range = (float(st.range[0]), float(st.range[1]))
        row.typical_absmax = float(np.median(st.robust_absmax))
        row.rounding_noise = st.inside * st.scale ** 2 / 12.0
        row.clip_noise = st.clip_noise
    if float_node is not None:
        for weight in float_node.input[1:2]:
            values = view.weight_values(weight)
            if values is None:
                continue
            w, dq = values
            row.weight_sqnr_db = metrics.sqnr_db(w, dq)
            edge = view.constants[weight]
            if edge.axis is None and w.ndim >= 2:
                levels = _channel_ranges(w, float_node) / float(edge.scale.reshape(-1)[0])
                row.squashed_channels = int(np.count_nonzero((levels < SQUASH_LEVELS) & (levels > 0)))
                if (levels > 0).any():
                    row.channel_spread = float(levels.max() / levels[levels > 0].min())
    return row


def _diagnose(row: LayerRow) -> None:
    details = []
    channel_gap = row.worst_channel_sqnr_db is not None and row.worst_channel_sqnr_db < row.sqnr_db - CHANNEL_GAP_DB
    if row.drop_db < DIAGNOSE_DROP_DB and not channel_gap:
        return
    if row.squashed_channels:
        row.diagnosis.append("per-tensor squash")
        details.append(f"{row.squashed_channels} output channel(s) of its per-tensor weights span < {SQUASH_LEVELS} "
                       f"levels (channel ranges differ {row.channel_spread or 0:.0f}x)")
    if row.clipped_fraction > SATURATION_FRACTION and row.clip_noise > row.rounding_noise:
        row.diagnosis.append("saturated range")
        details.append(f"{row.clipped_fraction:.2%} of values clip at the range {row.range[0]:.3g}..{row.range[1]:.3g}")
    if row.range is not None and row.typical_absmax:
        span = max(abs(row.range[0]), abs(row.range[1]))
        if span > OUTLIER_RATIO * row.typical_absmax:
            row.diagnosis.append("outlier-inflated scale")
            details.append(f"range +-{span:.3g} is {span / row.typical_absmax:.0f}x a typical sample's 99.99th "
                           f"percentile ({row.typical_absmax:.3g})")
    if not row.diagnosis and row.weight_sqnr_db is not None and row.weight_sqnr_db < WEIGHT_MIN_SQNR_DB:
        row.diagnosis.append("weight error")
        details.append(f"dequantized weights are {row.weight_sqnr_db:.1f} dB from the float weights")
    if not row.diagnosis and row.drop_db >= NOTABLE_DROP_DB:
        if row.range is None:  # its output is not quantized: the layer runs in float
            row.diagnosis.append("amplifies input error")
            details.append("a float layer magnifying the error of its quantized input")
        else:
            row.diagnosis.append("quantized op")
            details.append("no range or weight problem explains the drop")
    row.detail = "; ".join(details)
    row.suggestion = SUGGESTIONS[row.diagnosis[0]] if row.diagnosis else ""

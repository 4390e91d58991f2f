"""``--quantize auto``: mixed precision, one recorded decision per layer that needed one.

Start from the plan's mode with per-channel weights and the chosen calibration method.  While
some output misses its ``min_sqnr_db`` (tolerance profile), take the layer whose SQNR drop
*dominates* the per-layer table (:mod:`.debug`; dominant = the largest drop, at least
:data:`DOMINANT_DB` and at least :data:`DOMINANT_SHARE` of all positive drops together) and try,
in this order, the remedies its diagnosis points at:

1. ``per-channel weights`` — for a per-tensor squash when weights are per tensor;
2. for an outlier-inflated scale, ``drop outlier samples`` — recalibrate without the calibration
   samples whose largest |value| in an inflated tensor exceeds :data:`.debug.OUTLIER_RATIO` times
   the median sample's (the one corrupted image ML-EXray warns about), and
   ``percentile range`` — that tensor's range, and the range of
   every other tensor the table finds inflated (one outlier sample inflates everything
   downstream of it), from onnxruntime's percentile calibrator instead (the rest keep theirs);
3. ``keep float`` — exclude the node, and the nodes reading its output (else they would
   quantize it at their input), from quantization; only where the hardware runs float (matrix
   ``dtypes``); on 8-bit-only hardware the decision says it cannot.

Every applicable remedy is tried; the one raising the worst output's SQNR margin most is kept
if it gains at least :data:`MIN_GAIN_DB`, the others are recorded as tried and undone.  (A range
that both clips and is inflated, a heavy tail, gets no percentile attempt: narrowing it clips
more.)  At most :data:`MAX_STEPS` layers are treated.
Every decision (kept or not) is a :class:`Decision` with its reason, shown in the report like the
planner's rewrite reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import onnx

import numpy as np

from ..verify.localize import expose_intermediates
from ..runtimes.onnxruntime import onnx_runner, run_session, session
from ..verify.stages import Tolerances
from .debug import INPUT_OP, OUTLIER_RATIO, LayerTable, debug_layers
from .qdq import QuantConfig, quantize_model
from .ranges import collect_ranges, merged
from .verify import QuantVerification, compare_quantized

DOMINANT_DB = 3.0
DOMINANT_SHARE = 0.3
MIN_GAIN_DB = 0.5
MAX_STEPS = 4


@dataclass
class Decision:
    layer: str
    op: str
    diagnosis: str
    choice: str
    kept: bool
    reason: str
    sqnr_before_db: float
    sqnr_after_db: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class AutoResult:
    config: QuantConfig
    ranges: object
    model: onnx.ModelProto
    table: LayerTable
    quality: QuantVerification
    decisions: list[Decision] = field(default_factory=list)


def _margin(quality: QuantVerification) -> float:
    return min((o.sqnr_db - o.threshold_db for o in quality.outputs), default=0.0)


def _worst_sqnr(quality: QuantVerification) -> float:
    return min((o.sqnr_db for o in quality.outputs), default=float("inf"))


def dominant_row(table: LayerTable, skip: set[str]):
    rows = [r for r in table.worst(len(table.rows)) if r.node not in skip]
    total = sum(r.drop_db for r in table.rows if r.drop_db > 0)
    if rows and rows[0].drop_db >= DOMINANT_DB and rows[0].drop_db >= DOMINANT_SHARE * total:
        return rows[0]
    return None


def outlier_samples(model: onnx.ModelProto, samples: list[dict], tensors: list[str]) -> list[int]:
    """Indices of the samples whose largest |value| in any of ``tensors`` exceeds OUTLIER_RATIO
    times the median sample's."""
    exposed, _ = expose_intermediates(model)
    runner = session(exposed)
    peaks = []
    for sample in samples:
        values = {**run_session(runner, sample), **sample}
        peaks.append([float(np.max(np.abs(values[t]))) if t in values and np.size(values[t]) else 0.0 for t in tensors])
    peaks = np.array(peaks, dtype=np.float64).reshape(len(samples), len(tensors))
    typical = np.median(peaks, axis=0)
    bad = np.any(peaks > OUTLIER_RATIO * np.maximum(typical, np.finfo(np.float64).tiny), axis=1)
    return [int(i) for i in np.nonzero(bad)[0]]


def auto_quantize(model: onnx.ModelProto, config: QuantConfig, ranges, calibration: list[dict],
                  evaluation: list[dict], tolerances: Tolerances | None, float_allowed: bool,
                  evaluate=None, stats=None) -> AutoResult:
    """Mixed precision as described in the module docstring.  ``evaluate(quantized model) ->
    QuantVerification`` defaults to comparing outputs with the float model on ``evaluation``;
    ``stats``: the calibration pass's float statistics of ``calibration`` (bias correction)."""
    run_float = onnx_runner(model)
    if evaluate is None:
        def evaluate(candidate):
            return compare_quantized(run_float, onnx_runner(candidate), evaluation, tolerances, config.mode)

    def attempt(cfg, rng):
        candidate = quantize_model(model, cfg, rng, calibration, stats)
        return candidate, evaluate(candidate)

    current, quality = attempt(config, ranges)
    table = debug_layers(model, current, evaluation, config.mode)
    result = AutoResult(config, ranges, current, table, quality)
    percentile_ranges = None
    treated: set[str] = set()
    for _ in range(MAX_STEPS):
        if result.quality.ok:
            break
        row = dominant_row(result.table, treated)
        if row is None:
            result.decisions.append(Decision(
                "(model)", "", "", "none", False,
                "no single layer dominates the loss (largest drop below "
                f"{DOMINANT_DB:g} dB or {DOMINANT_SHARE:.0%} of the total): nothing to trade for precision",
                _worst_sqnr(result.quality), _worst_sqnr(result.quality)))
            break
        treated.add(row.node)
        diagnosis = ", ".join(row.diagnosis) or "largest drop"
        remedies = []
        if "per-tensor squash" in row.diagnosis and not result.config.per_channel:
            remedies.append(("per-channel weights", replace(result.config, per_channel=True), result.ranges))
        if "outlier-inflated scale" in row.diagnosis and "saturated range" not in row.diagnosis:
            # One outlier sample inflates every range downstream of it: re-range them together.
            inflated = [r for r in result.table.rows if "outlier-inflated scale" in r.diagnosis
                        and "saturated range" not in r.diagnosis]
            dropped = outlier_samples(model, calibration, [r.tensor for r in inflated])
            if dropped and len(dropped) < len(calibration):
                kept_samples = [s for i, s in enumerate(calibration) if i not in set(dropped)]
                remedies.append((f"drop outlier samples ({len(dropped)} of {len(calibration)}: "
                                 f"{', '.join(f'#{i}' for i in dropped[:5])}{', ...' if len(dropped) > 5 else ''})",
                                 result.config, collect_ranges(model, kept_samples, config.method)))
            if percentile_ranges is None:
                percentile_ranges = collect_ranges(model, calibration, "percentile")
            others = [r.node for r in inflated if r is not row]
            choice = "percentile range" + (f" (also for {', '.join(others)})" if others else "")
            remedies.append((choice, result.config, merged(result.ranges, percentile_ranges, [r.tensor for r in inflated])))
        is_node = row.op != INPUT_OP
        if is_node and float_allowed:
            # The tensor stays float only if its consumers read it unquantized too.
            readers = sorted(n.name for n in model.graph.node if row.tensor in n.input)
            choice = "keep float" + (f" (with {', '.join(readers)} reading it)" if readers else "")
            remedies.append((choice, replace(result.config, nodes_to_exclude=tuple(sorted(
                set(result.config.nodes_to_exclude) | set(row.nodes) | set(readers)))), result.ranges))
        before = _worst_sqnr(result.quality)
        tried = []
        for choice, cfg, rng in remedies:
            candidate, quality = attempt(cfg, rng)
            tried.append((_margin(quality) - _margin(result.quality), choice, cfg, rng, candidate, quality))
        best = max(tried, key=lambda t: t[0], default=None)
        kept = best is not None and best[0] >= MIN_GAIN_DB
        for gain, choice, _cfg, _rng, _candidate, quality in tried:
            if kept and choice == best[1]:
                result.decisions.append(Decision(
                    row.node, row.op, diagnosis, choice, True,
                    f"{row.node} lost {row.drop_db:.1f} dB ({diagnosis}); {choice} raised the worst output "
                    f"SQNR by {gain:.1f} dB", before, _worst_sqnr(quality)))
            else:
                result.decisions.append(Decision(
                    row.node, row.op, diagnosis, choice, False,
                    f"tried {choice} for {row.node}: {gain:+.1f} dB" + (", less than the kept remedy" if kept else
                                                                        ", not kept"), before, _worst_sqnr(quality)))
        if kept:
            _, _, cfg, rng, candidate, quality = best
            result.config, result.ranges, result.model, result.quality = cfg, rng, candidate, quality
            result.table = debug_layers(model, candidate, evaluation, cfg.mode)
        if not kept and not (is_node and float_allowed):
            why = "it is a graph input" if not is_node else "the hardware runs only 8-bit"
            result.decisions.append(Decision(
                row.node, row.op, diagnosis, "none", False,
                f"{row.node} lost {row.drop_db:.1f} dB ({diagnosis}) but cannot stay in float: {why}",
                before, before))
    return result


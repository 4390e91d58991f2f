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

When no layer dominates, but keeping one of the table's top layers in float was measured
(:mod:`.recovery`) to raise the worst output's SQNR by at least :data:`MIN_GAIN_DB`, that layer
is treated (its measured model is the keep-float remedy, not quantized again).

Every candidate (bias correction's, each remedy's) is judged on the held-out samples
(:mod:`.holdout`, :class:`.judge.Judge`), never on the samples that calibrated it.
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
from ..runtimes.onnxruntime import run_session, session
from .debug import INPUT_OP, OUTLIER_RATIO, LayerTable, debug_layers
from .qdq import QuantConfig, quantize_model
from .ranges import collect_ranges, merged
from .verify import QuantVerification

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
    #: The keep-float variants the table measured (:mod:`.recovery`), reused as remedies.
    measured: list = field(default_factory=list)


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


def auto_quantize(model: onnx.ModelProto, config: QuantConfig, ranges, calibration: list[dict], judge,
                  float_allowed: bool, stats=None, score=None) -> AutoResult:
    """Mixed precision as described in the module docstring.  ``judge``: a :class:`.judge.Judge`
    of the held-out samples every candidate is compared on (or a list of samples: a judge of
    them is made); ``stats``: the calibration pass's float statistics of ``calibration`` (bias
    correction); ``score``: bias correction's scorer (default: the judge's)."""
    search = _Search(model, calibration, _as_judge(model, judge, config.mode), float_allowed, stats, score)
    result = search.start(config, ranges)
    for _ in range(MAX_STEPS):
        if result.quality.ok:
            break
        row = search.next_row(result)
        if row is None:
            result.decisions.append(search.nothing_to_trade(result))
            break
        search.treat(result, row)
    return result


def _as_judge(model, judge, mode: str):
    if isinstance(judge, list):
        from .holdout import INPUTS, QuantSamples
        from .judge import Judge

        return Judge(model, QuantSamples([], judge, INPUTS, f"{len(judge)} evaluation samples"), mode=mode)
    return judge


class _Search:
    """One ``auto`` search: every candidate built from the same calibration samples and judged on
    the same held-out samples."""

    def __init__(self, model, calibration, judge, float_allowed: bool, stats, score):
        self.model, self.calibration, self.judge = model, calibration, judge
        self.float_allowed, self.stats = float_allowed, stats
        self.score = score if score is not None else judge.scorer()
        self.treated: set[str] = set()
        self.percentile_ranges = None

    def attempt(self, cfg: QuantConfig, rng):
        candidate = quantize_model(self.model, cfg, rng, self.calibration, self.stats, self.score)
        return candidate, self.judge.verification(candidate)

    def table(self, candidate, cfg: QuantConfig, rng) -> tuple[LayerTable, list]:
        """The per-layer table of ``candidate`` with its top rows' keep-float gains measured."""
        from .recovery import measure_model

        table = debug_layers(self.model, candidate, self.judge.held, cfg.mode)
        return table, measure_model(self.model, table, candidate, cfg, rng, self.calibration, self.stats, self.judge)

    def start(self, config: QuantConfig, ranges) -> AutoResult:
        current, quality = self.attempt(config, ranges)
        table, measured = self.table(current, config, ranges)
        return AutoResult(config, ranges, current, table, quality, measured=measured)

    def next_row(self, result: AutoResult):
        """The layer to treat: the one dominating the local drops, else (where layers may stay
        float) the one whose keep-float gain, measured, is largest and at least MIN_GAIN_DB."""
        row = dominant_row(result.table, self.treated)
        if row is None and self.float_allowed:
            row = next((r for r in result.table.measured() if r.node not in self.treated
                        and r.recovered_db >= MIN_GAIN_DB), None)
        if row is not None:
            self.treated.add(row.node)
        return row

    def nothing_to_trade(self, result: AutoResult) -> Decision:
        worst = _worst_sqnr(result.quality)
        reason = ("no single layer dominates the loss (largest drop below "
                  f"{DOMINANT_DB:g} dB or {DOMINANT_SHARE:.0%} of the total)")
        measured = result.table.measured()
        if measured:
            best = measured[0]
            reason += (f", and keeping a layer in float would recover at most {best.recovered_db:+.1f} dB "
                       f"({best.node}, measured on {result.table.measured_on})")
        return Decision("(model)", "", "", "none", False, reason + ": nothing to trade for precision", worst, worst)

    def remedies(self, result: AutoResult, row) -> list[tuple]:
        """(choice, config, ranges, a measured model or None) for each remedy ``row``'s diagnosis points at."""
        remedies = []
        if "per-tensor squash" in row.diagnosis and not result.config.per_channel:
            remedies.append(("per-channel weights", replace(result.config, per_channel=True), result.ranges, None))
        if "outlier-inflated scale" in row.diagnosis and "saturated range" not in row.diagnosis:
            remedies += self._range_remedies(result, row)
        if row.op != INPUT_OP and self.float_allowed:
            remedies.append(self._keep_float(result, row))
        return remedies

    def _range_remedies(self, result: AutoResult, row) -> list[tuple]:
        # One outlier sample inflates every range downstream of it: re-range them together.
        remedies = []
        inflated = [r for r in result.table.rows if "outlier-inflated scale" in r.diagnosis
                    and "saturated range" not in r.diagnosis]
        calibration = self.calibration
        dropped = outlier_samples(self.model, calibration, [r.tensor for r in inflated])
        if dropped and len(dropped) < len(calibration):
            kept_samples = [s for i, s in enumerate(calibration) if i not in set(dropped)]
            remedies.append((f"drop outlier samples ({len(dropped)} of {len(calibration)}: "
                             f"{', '.join(f'#{i}' for i in dropped[:5])}{', ...' if len(dropped) > 5 else ''})",
                             result.config, collect_ranges(self.model, kept_samples, result.config.method), None))
        if self.percentile_ranges is None:
            self.percentile_ranges = collect_ranges(self.model, calibration, "percentile")
        others = [r.node for r in inflated if r is not row]
        choice = "percentile range" + (f" (also for {', '.join(others)})" if others else "")
        remedies.append((choice, result.config, merged(result.ranges, self.percentile_ranges,
                                                       [r.tensor for r in inflated]), None))
        return remedies

    def _keep_float(self, result: AutoResult, row) -> tuple:
        # The tensor stays float only if its consumers read it unquantized too.
        readers = sorted(n.name for n in self.model.graph.node if row.tensor in n.input)
        nodes = tuple(sorted(set(result.config.nodes_to_exclude) | set(row.nodes) | set(readers)))
        choice = "keep float" + (f" (with {', '.join(readers)} reading it)" if readers else "")
        measured = next((v.model for v in result.measured if v.row is row and v.nodes == nodes), None)
        return choice, replace(result.config, nodes_to_exclude=nodes), result.ranges, measured

    def treat(self, result: AutoResult, row) -> None:
        """Try every remedy for ``row``, keep the best if it gains MIN_GAIN_DB, record each."""
        diagnosis = ", ".join(row.diagnosis) or "largest drop"
        before = _worst_sqnr(result.quality)
        tried = []
        for choice, cfg, rng, measured in self.remedies(result, row):
            if measured is not None:
                candidate, quality = measured, self.judge.verification(measured)
            else:
                candidate, quality = self.attempt(cfg, rng)
            tried.append((_margin(quality) - _margin(result.quality), choice, cfg, rng, candidate, quality))
        best = max(tried, key=lambda t: t[0], default=None)
        kept = best is not None and best[0] >= MIN_GAIN_DB
        for gain, choice, _cfg, _rng, candidate, quality in tried:
            if kept and choice == best[1]:
                result.decisions.append(Decision(
                    row.node, row.op, diagnosis, choice, True,
                    f"{row.node} lost {row.drop_db:.1f} dB ({diagnosis}); {choice} raised the worst output "
                    f"SQNR by {gain:.1f} dB on {self.judge.short_label}", before, _worst_sqnr(quality)))
            else:
                self.judge.forget(candidate)
                result.decisions.append(Decision(
                    row.node, row.op, diagnosis, choice, False,
                    f"tried {choice} for {row.node}: {gain:+.1f} dB" + (", less than the kept remedy" if kept else
                                                                        ", not kept"), before, _worst_sqnr(quality)))
        if kept:
            _, _, cfg, rng, candidate, quality = best
            result.config, result.ranges, result.model, result.quality = cfg, rng, candidate, quality
            result.table, result.measured = self.table(candidate, cfg, rng)
        if not kept and not (row.op != INPUT_OP and self.float_allowed):
            why = "it is a graph input" if row.op == INPUT_OP else "the hardware runs only 8-bit"
            result.decisions.append(Decision(
                row.node, row.op, diagnosis, "none", False,
                f"{row.node} lost {row.drop_db:.1f} dB ({diagnosis}) but cannot stay in float: {why}",
                before, before))

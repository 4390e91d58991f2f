"""Judge a quantized model against its float original, output by output.

Per output, over the evaluation samples: SQNR (``verify.metrics.sqnr_db``; the median over
samples is judged, the lowest is reported), the lowest cosine, the largest absolute error, and
where the output looks like class scores (rank 2, ``[batch, classes]`` with more than one
class) the top-1 agreement (same argmax) and top-5 agreement (the float model's top-1 class is
among the quantized model's top 5).  An output passes when its SQNR reaches
``Tolerances.sqnr_for_output(name, mode)`` (the tolerance profile's ``min_sqnr_db``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

from ..verify import metrics
from ..verify.stages import Tolerances

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class OutputQuality:
    name: str
    sqnr_db: float
    min_sqnr_db: float
    cosine: float
    max_abs: float
    threshold_db: float
    top1: float | None = None
    top5: float | None = None

    @property
    def passed(self) -> bool:
        return not math.isnan(self.sqnr_db) and self.sqnr_db >= self.threshold_db

    def to_dict(self) -> dict:
        return {**self.__dict__, "passed": self.passed}


@dataclass
class QuantVerification:
    mode: str
    samples: int
    outputs: list[OutputQuality] = field(default_factory=list)
    #: Which samples: "16 samples of --inputs held.npz", "25 held out of the calibration set (seed 0)".
    samples_from: str = ""

    @property
    def ok(self) -> bool:
        return all(o.passed for o in self.outputs)

    def summary(self) -> str:
        failed = [o for o in self.outputs if not o.passed]
        if not failed:
            parts = [f"{o.name} {o.sqnr_db:.1f} dB" + (f", top-1 {o.top1:.0%}" if o.top1 is not None else "")
                     for o in self.outputs]
            return f"{self.mode} model within tolerance of the float model: {'; '.join(parts)}{self._on()}"
        o = failed[0]
        return (f"{self.mode} model: output '{o.name}' SQNR {o.sqnr_db:.1f} dB < {o.threshold_db:g} dB"
                + (f" (top-1 agreement {o.top1:.0%})" if o.top1 is not None else "") + self._on())

    def _on(self) -> str:
        return f" (median of {self.samples_from})" if self.samples_from else ""

    def to_dict(self) -> dict:
        return {"ok": self.ok, "mode": self.mode, "samples": self.samples, "samples_from": self.samples_from,
                "summary": self.summary(), "outputs": [o.to_dict() for o in self.outputs]}


def _class_scores(value: np.ndarray) -> bool:
    return value.ndim == 2 and value.shape[-1] > 1


def compare_quantized(run_float: Runner, run_quant: Runner, samples: list[dict[str, np.ndarray]],
                      tolerances: Tolerances | None = None, mode: str = "int8") -> QuantVerification:
    """Run both on ``samples`` and judge every output of the float model."""
    tolerances = tolerances or Tolerances()
    refs = [run_float(s) for s in samples]
    gots = [run_quant(s) for s in samples]
    result = QuantVerification(mode, len(samples))
    for name in refs[0]:
        pairs = [(np.asarray(r[name]), np.asarray(g[name]).reshape(np.shape(r[name]))) for r, g in zip(refs, gots)]
        sqnrs = [metrics.sqnr_db(r, g) for r, g in pairs]
        quality = OutputQuality(
            name=name, sqnr_db=float(np.median(sqnrs)), min_sqnr_db=float(min(sqnrs)),
            cosine=float(min(metrics.cosine(r, g) for r, g in pairs)),
            max_abs=float(max(metrics.max_abs(r, g) for r, g in pairs)),
            threshold_db=tolerances.sqnr_for_output(name, mode))
        if all(_class_scores(r) for r, _ in pairs):
            ref_rows = np.concatenate([r for r, _ in pairs]).astype(np.float64)
            got_rows = np.concatenate([g for _, g in pairs]).astype(np.float64)
            top_ref = ref_rows.argmax(axis=1)
            quality.top1 = float(np.mean(top_ref == got_rows.argmax(axis=1)))
            if ref_rows.shape[1] > 5:
                top5 = np.argsort(-got_rows, axis=1, kind="stable")[:, :5]
                quality.top5 = float(np.mean([t in row for t, row in zip(top_ref, top5)]))
        result.outputs.append(quality)
    return result

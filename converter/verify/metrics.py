"""Error metrics between a reference tensor and a candidate tensor.

All metrics are computed in float64 so that the comparison itself adds no float32 rounding.

* ``max_abs``  = max |got - ref|
* ``max_rel``  = max |got - ref| / max(|ref|, floor), with ``floor = 1e-6 * max|ref|`` so that the
  exact zeros a ReLU produces do not turn a 1e-9 difference into an infinite relative error
* ``cosine``   = <ref, got> / (|ref| |got|)   (1.0 when both are all-zero)
* ``sqnr_db``  = 10 log10(sum ref^2 / sum (got - ref)^2)   (+inf when identical)
* ``normalized_rmse`` = sqrt(mean (got - ref)^2) / (max ref - min ref), the per-layer score of
  ML-EXray (Qiu et al., MLSys 2022): divided by the reference's value range so that layers with
  large activations are not blamed just for being large.  A constant reference tensor (range 0)
  is divided by max|ref| instead, and by 1 when that is 0 too.

Non-finite candidate values (NaN/inf where the reference is finite) make every error infinite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """Pass when every element satisfies ``|got - ref| <= atol + rtol * |ref|`` (numpy.allclose)."""

    atol: float = 1e-4
    rtol: float = 1e-3

    def to_dict(self) -> dict:
        return {"atol": self.atol, "rtol": self.rtol}


@dataclass(frozen=True)
class Metrics:
    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    normalized_rmse: float
    #: Elements violating ``atol + rtol * |ref|``.
    mismatched: int
    size: int

    def to_dict(self) -> dict:
        return {
            "max_abs": self.max_abs, "max_rel": self.max_rel, "cosine": self.cosine,
            "sqnr_db": self.sqnr_db, "normalized_rmse": self.normalized_rmse,
            "mismatched": self.mismatched, "size": self.size,
        }


def _as_f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64, copy=False)


def _finite_mismatch(ref: np.ndarray, got: np.ndarray) -> bool:
    """True when the candidate is non-finite somewhere the reference is not (or vice versa)."""
    return bool(np.any(np.isfinite(ref) != np.isfinite(got)))


def max_abs(ref, got) -> float:
    ref, got = _as_f64(ref), _as_f64(got)
    if ref.size == 0:
        return 0.0
    if _finite_mismatch(ref, got):
        return math.inf
    if not np.isfinite(ref).any():
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.nanmax(np.abs(got - ref)))


def max_rel(ref, got) -> float:
    ref, got = _as_f64(ref), _as_f64(got)
    if ref.size == 0:
        return 0.0
    if _finite_mismatch(ref, got):
        return math.inf
    mag = np.abs(ref)
    finite = np.isfinite(ref)
    if not finite.any():
        return 0.0
    floor = 1e-6 * float(np.max(mag[finite]))
    denom = np.maximum(mag, floor if floor > 0 else np.finfo(np.float64).tiny)
    with np.errstate(invalid="ignore"):
        return float(np.nanmax(np.abs(got - ref) / denom))


def cosine(ref, got) -> float:
    ref, got = _as_f64(ref).ravel(), _as_f64(got).ravel()
    if _finite_mismatch(ref, got):
        return float("nan")
    nr, ng = float(np.linalg.norm(ref)), float(np.linalg.norm(got))
    if nr == 0.0 and ng == 0.0:
        return 1.0
    if nr == 0.0 or ng == 0.0:
        return 0.0
    return float(np.dot(ref, got) / (nr * ng))


def sqnr_db(ref, got) -> float:
    ref, got = _as_f64(ref), _as_f64(got)
    if _finite_mismatch(ref, got):
        return -math.inf
    noise = float(np.sum((got - ref) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def channel_energies(ref, got, axis: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per slice along ``axis`` (a layer's channels): (sum ref^2, sum (got - ref)^2); the noise is
    infinite where the candidate is non-finite and the reference is not.  Sums over several
    samples give their pooled SQNR (:func:`sqnr_from_energies`)."""
    ref, got = np.moveaxis(_as_f64(ref), axis, 0), np.moveaxis(_as_f64(got), axis, 0)
    ref, got = ref.reshape(ref.shape[0], -1), got.reshape(got.shape[0], -1)
    mismatch = np.any(np.isfinite(ref) != np.isfinite(got), axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        noise = np.sum((got - ref) ** 2, axis=1)
        signal = np.sum(ref ** 2, axis=1)
    return signal, np.where(mismatch, math.inf, noise)


def sqnr_from_energies(signal: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``sqnr_db`` from signal and noise energies, element-wise (+inf without noise, -inf without signal)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 10.0 * np.log10(np.asarray(signal, dtype=np.float64) / np.asarray(noise, dtype=np.float64))
    return np.where(noise == 0.0, math.inf, np.where(signal == 0.0, -math.inf, out))


def channel_sqnr_db(ref, got, axis: int = 1) -> np.ndarray:
    """``sqnr_db`` of each slice along ``axis`` (a layer's channels), in one pass."""
    return sqnr_from_energies(*channel_energies(ref, got, axis))


def normalized_rmse(ref, got) -> float:
    ref, got = _as_f64(ref), _as_f64(got)
    if ref.size == 0:
        return 0.0
    if _finite_mismatch(ref, got):
        return math.inf
    rmse = math.sqrt(float(np.mean((got - ref) ** 2)))
    if rmse == 0.0:
        return 0.0
    value_range = float(np.max(ref) - np.min(ref))
    if value_range <= 0.0:
        value_range = float(np.max(np.abs(ref))) or 1.0
    return rmse / value_range


def mismatched(ref, got, tol: Tolerance) -> int:
    ref, got = _as_f64(ref), _as_f64(got)
    ok = np.isclose(got, ref, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    return int(ok.size - np.count_nonzero(ok))


def compare(ref, got, tol: Tolerance) -> Metrics:
    """Every metric at once.  Shapes must match (callers report a shape mismatch themselves)."""
    ref, got = _as_f64(ref), _as_f64(got)
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: reference {list(ref.shape)}, candidate {list(got.shape)}")
    return Metrics(
        max_abs=max_abs(ref, got), max_rel=max_rel(ref, got), cosine=cosine(ref, got),
        sqnr_db=sqnr_db(ref, got), normalized_rmse=normalized_rmse(ref, got),
        mismatched=mismatched(ref, got, tol), size=int(ref.size),
    )


def worst(metrics: list[Metrics]) -> Metrics:
    """Combine the metrics of several samples into the worst case of each."""
    def lowest(values):  # NaN (undefined cosine) counts as the worst
        return float("nan") if any(math.isnan(v) for v in values) else min(values)

    return Metrics(
        max_abs=max(m.max_abs for m in metrics), max_rel=max(m.max_rel for m in metrics),
        cosine=lowest([m.cosine for m in metrics]), sqnr_db=lowest([m.sqnr_db for m in metrics]),
        normalized_rmse=max(m.normalized_rmse for m in metrics),
        mismatched=sum(m.mismatched for m in metrics), size=sum(m.size for m in metrics),
    )

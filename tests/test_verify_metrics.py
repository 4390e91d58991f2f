"""Metrics of converter.verify.metrics against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from converter.verify import metrics
from converter.verify.metrics import Tolerance


def test_max_abs_and_max_rel_by_hand():
    ref = np.array([1.0, -2.0, 4.0, 0.5], np.float32)
    got = np.array([1.1, -2.0, 3.0, 0.5], np.float32)
    assert metrics.max_abs(ref, got) == pytest.approx(1.0, rel=1e-6)
    # |d|/|ref|: 0.1/1, 0, 1/4, 0 -> 0.25
    assert metrics.max_rel(ref, got) == pytest.approx(0.25, rel=1e-6)


def test_max_rel_floor_keeps_exact_zeros_finite():
    # A ReLU's exact zeros: the floor is 1e-6 * max|ref| = 1e-6, so 1e-9 off a zero is 1e-3.
    ref = np.array([0.0, 1.0])
    got = np.array([1e-9, 1.0])
    assert metrics.max_rel(ref, got) == pytest.approx(1e-3)


def test_cosine_by_hand():
    a = np.array([1.0, 0.0, 2.0])
    assert metrics.cosine(a, a * 3) == pytest.approx(1.0)
    assert metrics.cosine(a, -a) == pytest.approx(-1.0)
    assert metrics.cosine(np.array([1.0, 0.0]), np.array([0.0, 5.0])) == pytest.approx(0.0)
    assert metrics.cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert metrics.cosine(np.zeros(3), a) == 0.0


def test_sqnr_by_hand():
    ref = np.ones(100)
    # signal sum 100, noise sum 100 * 0.01 = 1 -> 10 log10(100) = 20 dB
    assert metrics.sqnr_db(ref, ref + 0.1) == pytest.approx(20.0)
    assert metrics.sqnr_db(ref, ref) == math.inf


def test_normalized_rmse_by_hand():
    ref = np.linspace(0.0, 10.0, 11)
    # rmse 0.5, range 10 -> 0.05, independent of the tensor's offset and scale
    assert metrics.normalized_rmse(ref, ref + 0.5) == pytest.approx(0.05)
    assert metrics.normalized_rmse(ref * 7 + 3, ref * 7 + 3 + 3.5) == pytest.approx(0.05)
    # A constant reference is divided by max|ref|: rmse 1 / 4
    assert metrics.normalized_rmse(np.full(5, 4.0), np.full(5, 5.0)) == pytest.approx(0.25)
    assert metrics.normalized_rmse(ref, ref) == 0.0


def test_non_finite_candidate_is_infinitely_wrong():
    ref = np.array([1.0, 2.0])
    got = np.array([1.0, np.nan])
    assert metrics.max_abs(ref, got) == math.inf
    assert metrics.max_rel(ref, got) == math.inf
    assert metrics.normalized_rmse(ref, got) == math.inf
    assert metrics.sqnr_db(ref, got) == -math.inf
    assert math.isnan(metrics.cosine(ref, got))


def test_mismatched_uses_allclose_semantics():
    ref = np.array([0.0, 1.0, 100.0, -5.0])
    got = np.array([5e-5, 1.0015, 100.05, -5.1])
    tol = Tolerance(atol=1e-4, rtol=1e-3)
    # 5e-5 <= 1e-4 ok; 1.5e-3 > 1e-4+1e-3 fail; 0.05 <= 1e-4+0.1 ok; 0.1 > 1e-4+5e-3 fail
    assert metrics.mismatched(ref, got, tol) == 2
    assert metrics.mismatched(ref, got, tol) == int(np.sum(~np.isclose(got, ref, rtol=1e-3, atol=1e-4)))


def test_compare_refuses_shape_mismatch_and_worst_combines():
    with pytest.raises(ValueError, match="shape mismatch"):
        metrics.compare(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance())
    a = metrics.compare(np.ones(4), np.ones(4) + 0.1, Tolerance())
    b = metrics.compare(np.ones(4), np.ones(4) - 0.3, Tolerance())
    w = metrics.worst([a, b])
    assert w.max_abs == pytest.approx(0.3)
    assert w.sqnr_db == pytest.approx(b.sqnr_db)
    assert w.mismatched == 8 and w.size == 8

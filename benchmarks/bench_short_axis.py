"""Softmax and reductions over a short axis in LiteRT: innermost (contiguous) vs strided.

    .venv/bin/python benchmarks/bench_short_axis.py [--elements 20480] [--extents 2,4,5,8,16,20,32,64]

For each extent K, one-op (or few-op) ``.tflite`` files over an ``[R, K]`` tensor
(R = elements // K), written with edgeconv's own ``ModelWriter``, timed in one LiteRT
(``ai_edge_litert``, 1 thread, XNNPACK), files interleaved round by round in random order:

* ``softmax``   SOFTMAX over the innermost K (what a softmax over NHWC channels is);
* ``decomposed`` REDUCE_MAX, SUB, EXP, SUM, DIV over the same innermost K;
* ``strided``   TRANSPOSE to ``[K, R]``, the decomposed softmax over axis 0, TRANSPOSE back
  (the worst case of ``layout.strided_layout``: a transpose on both sides);
* ``max`` / ``max strided``: REDUCE_MAX over the innermost K / TRANSPOSE + REDUCE_MAX over
  axis 0; ``sum`` / ``sum strided`` the same with SUM.

The ratios (to ``softmax`` resp. ``max`` / ``sum``) set ``layout.SHORT_SOFTMAX_AXIS``,
``SHORT_REDUCED_AXIS`` and ``SHORT_AXIS_MIN_ROWS``.  The machine is shared: compare the ratios of
one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from converter.targets.tflite.ops_tensor import builtin_options  # noqa: E402
from converter.targets.tflite.writer import ModelWriter  # noqa: E402

VARIANTS = ("softmax", "decomposed", "strided", "max", "max strided", "sum", "sum strided")
BASELINE = {"decomposed": "softmax", "strided": "softmax", "max strided": "max", "sum strided": "sum"}


def build(variant: str, rows: int, extent: int) -> bytes:
    """One variant as ``.tflite`` bytes: input ``x`` [rows, extent], output in the same shape
    (softmax) or [rows, 1] / [1, rows] (reductions)."""
    w = ModelWriter()
    x = w.tensor("x", (rows, extent))
    keep = builtin_options("ReducerOptions", keepDims=True)

    def op(builtin, inputs, shape, name, options=None):
        out = w.tensor(name, shape)
        w.op(builtin, inputs, [out], options)
        return out

    def axis(a):
        return w.constant(f"axis{a}", np.asarray([a], np.int32))

    def transposed(t, shape, name):
        return op("TRANSPOSE", [t, w.constant("perm", np.asarray([1, 0], np.int32))], shape, name)

    def softmax(t, a, shape, kept):
        peak = op("REDUCE_MAX", [t, axis(a)], kept, "max", keep)
        shifted = op("SUB", [t, peak], shape, "shifted", builtin_options("SubOptions"))
        exp = op("EXP", [shifted], shape, "exp")
        total = op("SUM", [exp, axis(a)], kept, "sum", keep)
        return op("DIV", [exp, total], shape, "softmax", builtin_options("DivOptions"))

    inner, outer = (rows, extent), (extent, rows)
    if variant == "softmax":
        y = op("SOFTMAX", [x], inner, "y", builtin_options("SoftmaxOptions", beta=1.0))
    elif variant == "decomposed":
        y = softmax(x, 1, inner, (rows, 1))
    elif variant == "strided":
        y = transposed(softmax(transposed(x, outer, "xt"), 0, outer, (1, rows)), inner, "y")
    else:
        builtin = "REDUCE_MAX" if variant.startswith("max") else "SUM"
        if variant.endswith("strided"):
            y = op(builtin, [transposed(x, outer, "xt"), axis(0)], (1, rows), "y", keep)
        else:
            y = op(builtin, [x, axis(1)], (rows, 1), "y", keep)
    return bytes(w.serialize([x], [y]))


def timed(files: dict[str, Path], rounds: int, invokes: int) -> dict[str, float]:
    """Median over rounds of each file's median invoke time (s); files in a new random order
    each round."""
    from bench_tflite import ready_interpreters

    interps = ready_interpreters(files, warmup=5)
    per_round: dict[str, list[float]] = {label: [] for label in interps}
    order = list(interps)
    for r in range(rounds):
        random.Random(r).shuffle(order)
        for label in order:
            samples = []
            for _ in range(invokes):
                start = time.perf_counter()
                interps[label].invoke()
                samples.append(time.perf_counter() - start)
            per_round[label].append(statistics.median(samples))
    return {label: statistics.median(ts) for label, ts in per_round.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=20480, help="R * K of every tensor")
    ap.add_argument("--extents", default="2,4,5,8,16,20,32,64")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--invokes", type=int, default=30)
    args = ap.parse_args()
    print(f"LiteRT, 1 thread; [R, K] float32 with R*K = {args.elements}; us per invoke (ratio to the "
          "innermost op)")
    print(f"{'K':>4} {'R':>6} " + " ".join(f"{v:>18}" for v in VARIANTS))
    with tempfile.TemporaryDirectory(prefix="bench-short-axis-") as tmp:
        for extent in (int(k) for k in args.extents.split(",")):
            rows = args.elements // extent
            files = {}
            for v in VARIANTS:
                files[v] = Path(tmp) / f"{v.replace(' ', '_')}_{extent}.tflite"
                files[v].write_bytes(build(v, rows, extent))
            t = timed(files, args.rounds, args.invokes)
            cells = []
            for v in VARIANTS:
                ratio = f" ({t[v] / t[BASELINE[v]]:.2f}x)" if v in BASELINE else ""
                cells.append(f"{1e6 * t[v]:7.1f}{ratio:>8}".rjust(18))
            print(f"{extent:4d} {rows:6d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: quantize a MobileNetV2-size model (zoo ``mobilenetv2`` size="full", 224x224) with
100 calibration samples; compare with onnxruntime's defaults.

Times edgeconv's calibration + QDQ quantization (goal: under 30 s) and, separately, its checks
(output comparison on held-out inputs and the per-layer table).  Then quantizes the same model
with ``onnxruntime.quantization.quantize_static`` at its defaults (QDQ, MinMax, per-tensor
weights, all 100 samples in one calibrator call) and prints both models' output SQNR against
the float model on the same held-out inputs (edgeconv's per-channel weights should be at least
as good), the same per layer, and the time ratio.  On the zoo's seeded MobileNetV2 the output
SQNR is set by the final int8 output quantization (10 logits), so the per-layer comparison is
the telling one.  Later phases extend it (native int8 exports, other models).

    python benchmarks/bench_quantize.py [--samples 100] [--held-out 16] [--size full]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from converter.demo import zoo  # noqa: E402
from converter.frontend.normalize import normalize  # noqa: E402
from converter.quantize.debug import debug_layers  # noqa: E402
from converter.quantize.qdq import QuantConfig, quantize_model  # noqa: E402
from converter.quantize.ranges import collect_ranges, quiet_onnxruntime_quantization  # noqa: E402
from converter.quantize.verify import compare_quantized  # noqa: E402
from converter.runtimes.onnxruntime import onnx_runner  # noqa: E402


def samples(shape, count, seed):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def onnxruntime_defaults(model: onnx.ModelProto, calibration) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(calibration)

        def get_next(self):
            return next(self.items, None)

    with tempfile.TemporaryDirectory() as tmp, quiet_onnxruntime_quantization():
        src, out = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(model, str(src))
        quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ)
        return onnx.load(str(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=16)
    parser.add_argument("--size", default="full", choices=["test", "full"])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = normalize(onnx.load(str(zoo.export_onnx("mobilenetv2", Path(tmp) / "m.onnx", size=args.size))))
    shape = zoo.input_shapes("mobilenetv2", args.size)["input"]
    calibration, held_out = samples(shape, args.samples, 0), samples(shape, args.held_out, 1)
    print(f"MobileNetV2 ({args.size}, input {shape}): {len(model.graph.node)} nodes, "
          f"{args.samples} calibration samples, {args.held_out} held-out")

    start = time.perf_counter()
    ranges = collect_ranges(model, calibration, "minmax")
    ours = quantize_model(model, QuantConfig("int8", per_channel=True), ranges)
    ours_seconds = time.perf_counter() - start

    start = time.perf_counter()
    theirs = onnxruntime_defaults(model, calibration)
    theirs_seconds = time.perf_counter() - start

    start = time.perf_counter()
    run_float = onnx_runner(model)
    ours_quality = compare_quantized(run_float, onnx_runner(ours), held_out).outputs[0]
    theirs_quality = compare_quantized(run_float, onnx_runner(theirs), held_out).outputs[0]
    table = debug_layers(model, ours, held_out)
    check_seconds = time.perf_counter() - start
    their_rows = {r.node: r.sqnr_db for r in debug_layers(model, theirs, held_out).rows}
    pairs = [(r.sqnr_db, their_rows[r.node]) for r in table.rows if r.node in their_rows]

    print(f"edgeconv calibrate + quantize (per-channel, minmax): {ours_seconds:6.1f} s "
          f"({'within' if ours_seconds < 30 else 'OVER'} the 30 s goal)")
    print(f"onnxruntime quantize_static defaults (per-tensor):   {theirs_seconds:6.1f} s   "
          f"ratio edgeconv/onnxruntime {ours_seconds / theirs_seconds:.2f}x")
    print(f"checks (2 output comparisons + per-layer table):      {check_seconds:6.1f} s")
    print(f"output SQNR: edgeconv {ours_quality.sqnr_db:.2f} dB (top-1 {ours_quality.top1:.0%}), onnxruntime "
          f"defaults {theirs_quality.sqnr_db:.2f} dB (top-1 {theirs_quality.top1:.0%}); "
          f"difference {ours_quality.sqnr_db - theirs_quality.sqnr_db:+.2f} dB")
    better = sum(a >= b for a, b in pairs)
    print(f"per layer: edgeconv's SQNR >= onnxruntime defaults' at {better} of {len(pairs)} layers "
          f"(median difference {float(np.median([a - b for a, b in pairs])):+.2f} dB); {table.summary()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

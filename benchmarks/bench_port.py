"""Time `edgeconv port` per zoo model and batch throughput with -j 1 vs -j 2.

    .venv/bin/python benchmarks/bench_port.py [--size test|full] [--to tflite --hw cpu]

Prints seconds per model (with the per-stage split) and the -j 2 / -j 1 throughput ratio of the
same manifest, measured in the same run.  Numbers, not assertions: nothing here is a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from converter import zoo  # noqa: E402
from converter.batch import run_batch  # noqa: E402
from converter.pipeline import PortOptions, port  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="test", choices=["test", "full"])
    ap.add_argument("--to", default="tflite")
    ap.add_argument("--hw", default="cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = {n: zoo.export_onnx(n, tmp / f"{n}.onnx", size=args.size) for n in zoo.NAMES}
        print(f"port --to {args.to} --hw {args.hw} ({args.size} sizes)")
        print(f"{'model':18} {'status':14} {'seconds':>8}  stages")
        for name, path in paths.items():
            start = time.perf_counter()
            try:
                r = port(str(path), PortOptions(target=args.to, hw=args.hw, out_dir=tmp / "out" / name))
                status, stages = r.status, ", ".join(f"{k} {v:.2f}" for k, v in r.timings.items())
            except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not stop
                status, stages = "error", str(err)[:80]
            print(f"{name:18} {status:14} {time.perf_counter() - start:8.2f}  {stages}")

        manifest = tmp / "release.yaml"
        manifest.write_text("targets: [{to: tflite, hw: cpu}, {to: tnn, hw: arm}, {to: mace, hw: cpu}]\nmodels:\n"
                            + "".join(f"  - path: {n}.onnx\n" for n in paths))
        seconds = {}
        for jobs in (1, 2):
            start = time.perf_counter()
            result = run_batch(manifest, tmp / f"batch-j{jobs}", jobs=jobs, force=True)
            seconds[jobs] = time.perf_counter() - start
            print(f"batch -j {jobs}: {len(result.results)} jobs in {seconds[jobs]:.1f} s "
                  f"({len(result.results) / seconds[jobs]:.2f} jobs/s)")
        print(f"throughput ratio -j 2 / -j 1: {seconds[1] / seconds[2]:.2f}x")


if __name__ == "__main__":
    main()

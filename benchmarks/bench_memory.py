"""Peak RSS of `edgeconv port` on a 1 GB model, as a multiple of the weight size.

    .venv/bin/python benchmarks/bench_memory.py [--gb 1.0] [--targets tflite,tnn]

The model is the large-model test's embedding lookup (tests/test_large_model.py's writer: a small
.onnx pointing into an external ``.data`` file, written in chunks so the benchmark itself never
holds the table), sized to ``--gb`` of float32 weights.  Each ``edgeconv port big.onnx --to T``
(with verification) runs in a child process; its peak resident set size comes from the kernel
(``wait4`` rusage ``ru_maxrss``).  Printed: peak RSS, weight size, their ratio (goal: <= 2.5x),
wall time and status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import test_large_model as large  # noqa: E402

_EDGECONV = """
import contextlib, io, json, sys
from converter.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
text = out.getvalue()
print(json.dumps({"code": code, "result": json.loads(text)["results"][0] if text.strip() else None}))
"""


def peak_rss(argv: list[str]) -> tuple[int, float, dict]:
    """(peak RSS in bytes, wall seconds, the driver's JSON) of ``python argv``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, env=env)
        _, _, usage = os.wait4(proc.pid, 0)  # the child's own rusage (ru_maxrss: its peak RSS)
        proc.returncode = 0  # reaped here; keep Popen from waiting again
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        out, err = out.read(), err.read()
    lines = out.decode().strip().splitlines()
    if not lines:
        raise RuntimeError(err.decode()[-800:])
    return usage.ru_maxrss * 1024, wall, json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0, help="weight size in GB (10^9 bytes)")
    ap.add_argument("--targets", default="tflite")
    args = ap.parse_args()
    rows = int(args.gb * 1e9 / (large.DIM * 4))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = large._write_big_model(tmp, rows=rows)
        weights = rows * large.DIM * 4
        print(f"embedding model: {rows} x {large.DIM} float32 = {weights / 1e9:.2f} GB of weights (external data)")
        print(f"{'command':40} {'peak RSS GB':>11} {'x weights':>9} {'wall s':>7}  status")
        baseline, _, _ = peak_rss(["-c", "import converter.cli, onnx, onnxruntime, numpy; print('{}')"])
        print(f"{'(interpreter + libraries, no model)':40} {baseline / 1e9:11.2f} {baseline / weights:9.2f}")
        for target in [t for t in args.targets.split(",") if t]:
            rss, wall, info = peak_rss(["-c", _EDGECONV, "port", str(model), "--to", target, "--hw", "cpu",
                                        "-o", str(tmp / f"out-{target}"), "--json"])
            result = info.get("result") or {}
            print(f"{'port --to ' + target:40} {rss / 1e9:11.2f} {rss / weights:9.2f} {wall:7.1f}  "
                  f"{result.get('status', info.get('code'))} (goal <= 2.5x)")


if __name__ == "__main__":
    main()

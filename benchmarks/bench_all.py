"""`edgeconv port --to all --hw all` against its slowest single pair, in one run.

    .venv/bin/python benchmarks/bench_all.py [--model detector] [--size test|full] [--jobs 2]

Every framework x hardware pair is first ported alone (``port M --to F --hw H``, a fresh process
each, as a user would run them one by one); then ``port M --to all --hw all`` runs with ``-j 1``
and with ``-j N``: one load and normalization, reference outputs computed once for all pairs
(``converter/port/shared_work.py``), up to N pairs at once.  Printed: each single pair's wall time,
the sum and the slowest, both ``--to all`` times, and the ratios (goal: ``-j N`` <= 4x the
slowest single pair).  Wall times of one run on a shared machine: compare the ratios.
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

from converter.demo import zoo  # noqa: E402

_DRIVER = """
import contextlib, io, json, sys
from converter.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": json.loads(out.getvalue() or "null")}))
"""


def timed_port(args: list[str]) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _DRIVER, "port", *args, "--json"], capture_output=True,
                          text=True, env=env)
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    return wall, json.loads(lines[-1]) if lines else {"code": done.returncode, "out": None,
                                                       "error": done.stderr.strip()[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="detector", choices=zoo.NAMES)
    ap.add_argument("--size", default="test", choices=["test", "full"])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    from converter.matrix import load_matrix
    from converter.port.resolve import resolve_pairs

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = zoo.export_onnx(args.model, tmp / f"{args.model}.onnx", size=args.size)
        pairs = resolve_pairs(load_matrix(), "all", "all")
        timed_port([str(model), "--to", "tflite", "--hw", "cpu", "-o", str(tmp / "warmup")])
        print(f"{args.model} ({args.size}): {len(pairs)} framework x hardware pairs")
        singles = {}
        for fw, hw in pairs:
            wall, info = timed_port([str(model), "--to", fw, "--hw", hw, "-o", str(tmp / f"single-{fw}-{hw}")])
            result = (info.get("out") or {}).get("results") or [{}]
            status = result[0].get("status") or (info.get("out") or {}).get("errors", [{}])[0].get("error", "error")[:40] \
                if info.get("out") else f"exit {info['code']}"
            singles[fw, hw] = wall
            print(f"  single {fw + '/' + hw:22} {wall:6.2f} s  {status}")
        slowest_pair = max(singles, key=singles.get)
        slowest = singles[slowest_pair]
        all_times = {}
        for jobs in (1, args.jobs):
            wall, info = timed_port([str(model), "--to", "all", "--hw", "all", "-j", str(jobs),
                                     "-o", str(tmp / f"all-j{jobs}")])
            out = info.get("out") or {}
            all_times[jobs] = wall
            print(f"  --to all --hw all -j {jobs:<4}   {wall:6.2f} s  ({len(out.get('results', []))} ported, "
                  f"{len(out.get('errors', []))} refused)")
        print(f"sum of single pairs {sum(singles.values()):.2f} s; slowest single pair "
              f"{'/'.join(slowest_pair)} {slowest:.2f} s")
        for jobs, wall in all_times.items():
            print(f"--to all -j {jobs}: {wall / slowest:.2f}x the slowest single pair (goal <= 4x), "
                  f"{sum(singles.values()) / wall:.2f}x faster than the pairs one by one")


if __name__ == "__main__":
    main()

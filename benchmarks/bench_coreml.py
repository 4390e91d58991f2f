"""edgeconv's CoreML port vs ``coremltools.convert`` from the same torch model, side by side.

    .venv/bin/python benchmarks/bench_coreml.py [--runs 3] [--model resnet] [--size full]

The zoo model (ResNet-18 by default: ``zoo.build("resnet", "full")``, seeded) is saved as
TorchScript.  Each measurement is a fresh process, alternating the tools run by run so both
see the same machine load; printed are medians of ``--runs``:

* ``python -m converter port M.pt --to coreml --hw cpu --json`` (what the ``edgeconv`` console
  script runs) with verification (the whole port: torch -> ONNX,
  normalize, legalize, export the .mlpackage, run it in the MIL executor against onnxruntime)
  and with ``--no-verify``; its ``export`` stage (goal: < 1.5 s for ResNet-18 size);
* ``coremltools.convert(torch.jit.load(M.pt), inputs=[TensorType(shape)], convert_to="mlprogram",
  minimum_deployment_target=iOS16)`` then ``.save`` — coremltools' own torch frontend, the same
  deployment target and fp32 compute precision as edgeconv's ``--hw cpu``;
* the ratios coremltools / edgeconv (goal: >= 3x for the whole port), wall and CPU time.

The machine is shared: compare the ratios of one run, not the seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from converter.demo import zoo  # noqa: E402


_COREMLTOOLS = """
import logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
import coremltools as ct
import torch
path, out, shape = sys.argv[1], sys.argv[2], [int(d) for d in sys.argv[3].split("x")]
model = torch.jit.load(path, map_location="cpu").eval()
mlmodel = ct.convert(model, inputs=[ct.TensorType(name="input", shape=shape)], convert_to="mlprogram",
                     minimum_deployment_target=ct.target.iOS16, compute_precision=ct.precision.FLOAT32,
                     compute_units=ct.ComputeUnit.CPU_ONLY, skip_model_load=True)
mlmodel.save(out)
print("{}")
"""


def timed(argv: list[str]) -> tuple[float, float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... failed: {done.stderr.strip()[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = json.loads(done.stdout)
    return wall, cpu, report["results"][0] if "results" in report else report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="resnet", choices=zoo.NAMES)
    ap.add_argument("--size", default="full", choices=["test", "full"])
    args = ap.parse_args()
    import torch

    shape = zoo.input_shapes(args.model, args.size)["input"]
    dims = "x".join(map(str, shape))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pt = tmp / f"{args.model}.pt"
        with torch.no_grad():
            torch.jit.trace(zoo.build(args.model, args.size), torch.zeros(shape)).save(str(pt))
        tools = {
            "edgeconv port (verified)": ["-m", "converter", "port", str(pt), "-s", dims, "--to", "coreml", "--hw", "cpu",
                                          "-o", str(tmp / "edgeconv"), "--json"],
            "edgeconv port --no-verify": ["-m", "converter", "port", str(pt), "-s", dims, "--to", "coreml", "--hw",
                                          "cpu", "-o", str(tmp / "edgeconv-nv"), "--json", "--no-verify"],
            "coremltools.convert": ["-c", _COREMLTOOLS, str(pt), str(tmp / "ct.mlpackage"), dims],
        }
        timed(tools["edgeconv port --no-verify"])  # warm-up: compiled modules cached, files in page cache
        samples: dict[str, list] = {name: [] for name in tools}
        for _ in range(args.runs):
            for name, argv in tools.items():
                samples[name].append(timed(argv))
    print(f"{args.model} ({args.size}, input {dims}) -> CoreML ML Program (iOS16, fp32, cpu); "
          f"medians of {args.runs} fresh processes, tools alternating")
    print(f"{'':28} {'wall s':>7} {'cpu s':>7}  stages (s)")
    wall = {n: statistics.median(s[0] for s in v) for n, v in samples.items()}
    cpu = {n: statistics.median(s[1] for s in v) for n, v in samples.items()}
    for name, runs in samples.items():
        timings = runs[0][2].get("timings") or {}
        stages = {k: statistics.median(r[2]["timings"].get(k, 0.0) for r in runs) for k in timings}
        status = runs[0][2].get("status")
        print(f"{name:28} {wall[name]:7.2f} {cpu[name]:7.2f}  "
              + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + (f" [{status}]" if status not in (None, "ok") else ""))
    export = statistics.median(r[2]["timings"]["export"] for r in samples["edgeconv port (verified)"])
    print(f"edgeconv export stage: {export:.2f} s (goal < 1.5 s)")
    for name in ("edgeconv port (verified)", "edgeconv port --no-verify"):
        print(f"coremltools.convert / {name}: {wall['coremltools.convert'] / wall[name]:.2f}x wall, "
              f"{cpu['coremltools.convert'] / cpu[name]:.2f}x cpu (goal >= 3x)")


if __name__ == "__main__":
    main()

"""Cold `edgeconv port` of a ResNet-18, stage by stage; then per zoo model and batch throughput.

    .venv/bin/python benchmarks/bench_port.py [--runs 3] [--targets tflite,coreml] [--zoo]
        [--size test|full] [--to tflite --hw cpu]

**Cold ports** (default): the zoo's ResNet-18 (``zoo.build("resnet", "full")``, seeded weights,
45 MB) is saved as TorchScript (``torch.jit.trace``) and as ONNX, then each
``edgeconv port MODEL --to T --hw cpu`` (with verification) runs ``--runs`` times, each in a fresh
interpreter, as a user runs it.  Printed per source x target, medians over the runs: the wall time
of the whole process, its CPU time (user + sys: steadier than wall time on a shared machine),
the report's stage times, what is left outside the stages (interpreter start, imports, the matrix,
writing the report), the heavy libraries the process imported, and the ratio to the goal
(issue 20: ResNet-18 TorchScript -> tflite <= 5 s, .onnx -> tflite <= 3 s on an idle machine).

``--zoo``: seconds per zoo model (with the per-stage split) and the -j 2 / -j 1 batch throughput
ratio of the same manifest, measured in the same run.  Numbers, not assertions: nothing here is a
test.  Python caches compiled modules as usual (``PYTHONDONTWRITEBYTECODE`` is dropped for the
child processes, one warm-up run first), as in an installed edgeconv.
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
from converter.batch import run_batch  # noqa: E402
from converter.port import port  # noqa: E402


HEAVY = ("torch", "tensorflow", "coremltools", "onnxruntime", "ai_edge_litert", "tf2onnx")
#: Issue 20's goals, seconds on an idle machine of this type: (source suffix, target) -> seconds.
GOALS = {(".pt", "tflite"): 5.0, (".onnx", "tflite"): 3.0}

#: Runs ``edgeconv ARGS`` the way the console script does, then reports which heavy libraries
#: the process imported (its last stdout line).
_DRIVER = """
import contextlib, io, json, sys
from converter.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[2:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1].split(',')))
print(json.dumps({"code": code, "heavy": heavy, "result": json.loads(out.getvalue() or "null")}))
"""


def cold_port(model: Path, target: str, out: Path, extra=()) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _DRIVER, ",".join(HEAVY), "port", str(model), "--to", target,
                           "--hw", "cpu", "-o", str(out), "--json", *extra], capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"port {model.name} --to {target} failed: {done.stderr.strip()[-500:]}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    result = info["result"]["results"][0]
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "status": result["status"], "timings": result["timings"], "heavy": info["heavy"]}


def resnet18_files(tmp: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """ResNet-18 as TorchScript and as ONNX: {label: (path, extra port flags)}."""
    import torch

    model = zoo.build("resnet", "full")
    shape = zoo.input_shapes("resnet", "full")["input"]
    with torch.no_grad():
        torch.jit.trace(model, torch.zeros(shape)).save(str(tmp / "resnet18.pt"))
    zoo.export_onnx("resnet", tmp / "resnet18.onnx", size="full")
    return {"resnet18.pt": (tmp / "resnet18.pt", ("--input-shape", "x".join(map(str, shape)))),
            "resnet18.onnx": (tmp / "resnet18.onnx", ())}


def cold_ports(tmp: Path, runs: int, targets: list[str]) -> None:
    files = resnet18_files(tmp)
    print(f"cold `edgeconv port` of ResNet-18 ({(tmp / 'resnet18.onnx').stat().st_size / 1e6:.0f} MB of weights), "
          f"with verification; medians of {runs} fresh processes (after one warm-up)")
    cold_port(files["resnet18.onnx"][0], "tflite", tmp / "warmup")
    print(f"{'source':15} {'target':7} {'wall s':>7} {'cpu s':>6} {'goal':>9}  stages (s)  | outside stages | heavy imports")
    for label, (path, extra) in files.items():
        for target in targets:
            samples = [cold_port(path, target, tmp / f"out-{label}-{target}-{i}", extra) for i in range(runs)]
            wall = statistics.median(s["wall"] for s in samples)
            cpu = statistics.median(s["cpu"] for s in samples)
            stages = {k: statistics.median(s["timings"].get(k, 0.0) for s in samples) for k in samples[0]["timings"]}
            goal = GOALS.get((path.suffix, target))
            verdict = f"{wall / goal:.2f}x" if goal else "-"
            print(f"{label:15} {target:7} {wall:7.2f} {cpu:6.2f} {verdict:>9}  "
                  + ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
                  + f"  | {wall - sum(stages.values()):.2f} | {' '.join(samples[0]['heavy'])}"
                  + ("" if samples[0]["status"] == "ok" else f"  [{samples[0]['status']}]"))
    print("goal column: wall time / issue-20 goal (<= 1.00x meets it; the goal is for an idle machine)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--targets", default="tflite,coreml")
    ap.add_argument("--zoo", action="store_true", help="per zoo model and batch throughput instead")
    ap.add_argument("--size", default="test", choices=["test", "full"])
    ap.add_argument("--to", default="tflite")
    ap.add_argument("--hw", default="cpu")
    args = ap.parse_args()
    if not args.zoo:
        with tempfile.TemporaryDirectory() as tmp:
            cold_ports(Path(tmp), args.runs, [t for t in args.targets.split(",") if t])
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = {n: zoo.export_onnx(n, tmp / f"{n}.onnx", size=args.size) for n in zoo.NAMES}
        print(f"port --to {args.to} --hw {args.hw} ({args.size} sizes)")
        print(f"{'model':18} {'status':14} {'seconds':>8}  stages")
        for name, path in paths.items():
            start = time.perf_counter()
            try:
                r = port(str(path), to=args.to, hw=args.hw, out=tmp / "out" / name)
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

"""TFLite side by side: edgeconv vs onnx2tf (from .onnx) vs litert-torch (from the torch module).

    .venv/bin/python benchmarks/bench_tflite.py [--models resnet,mobilenetv2] [--size full] [--runs 30]

For each zoo model (converter/demo/zoo.py, seeded weights, ``--size full`` by default), in one run:

* **conversion time**, each tool in a fresh process as a user runs it:
  ``edgeconv port M.onnx --to tflite --hw cpu --no-verify`` (and from the TorchScript ``M.pt``),
  ``onnx2tf -i M.onnx -n`` (its own venv, see bench_tflite_vs_onnx2tf.py: it pins TensorFlow,
  onnx and numpy), and ``litert_torch.convert(module, sample).export(M.tflite)`` (Google's
  PyTorch -> TFLite converter, the ``bench`` extra; run from an overlay venv under
  ``~/.cache/edgeconv`` that sees this venv's torch, since litert-torch's dependencies pin
  versions this project's venv must not take);
* **LiteRT latency** of every produced file under one LiteRT (this venv's ``ai_edge_litert``),
  1 thread, XNNPACK, median of ``--runs`` (>= 20) invokes, files interleaved run by run;
* the ratios: the faster other tool's conversion time / edgeconv's (goal >= 10x), and edgeconv's
  latency / the better other file's (goal <= 1.00).

A tool that is not installed is reported with the reason instead of a number.  The machine is
shared: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from converter.demo import zoo  # noqa: E402

LITERT_TORCH_VERSION = "0.10.0"  # torch<2.15, ai-edge-litert 2.3 (the versions of this venv)
LITERT_TORCH_VENV = Path.home() / ".cache" / "edgeconv" / f"litert-torch-{LITERT_TORCH_VERSION}"

_LITERT_TORCH = """
import sys, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
sys.path.insert(0, sys.argv[1])
import torch
import litert_torch
from converter import zoo
name, size, out = sys.argv[2], sys.argv[3], sys.argv[4]
module = zoo.build(name, size)
sample = tuple(torch.zeros(s) for s in zoo.input_shapes(name, size).values())
litert_torch.convert(module, sample).export(out)
"""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def timed(argv: list[str], cwd=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the child: user + sys, its result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def litert_torch_python() -> tuple[Path | None, str]:
    """This interpreter when it has litert-torch (``pip install edgeconv[bench]``), else the
    overlay venv's python (created on first use), or (None, why not)."""
    import importlib.util

    if importlib.util.find_spec("litert_torch") is not None:
        return Path(sys.executable), ""
    python = LITERT_TORCH_VENV / "bin" / "python"
    if not python.exists():
        import site

        subprocess.run([sys.executable, "-m", "venv", str(LITERT_TORCH_VENV)], check=True)
        pth = next((LITERT_TORCH_VENV / "lib").glob("python3*/site-packages")) / "edgeconv-shared.pth"
        pth.write_text(site.getsitepackages()[0] + "\n")  # torch, numpy, ... of this venv
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"litert-torch=={LITERT_TORCH_VERSION}"])
    probe = subprocess.run([str(python), "-c", "import litert_torch"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"litert-torch unavailable: {(probe.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    return python, ""


def onnx2tf_python() -> tuple[Path | None, str]:
    import bench_tflite_vs_onnx2tf as o2t

    try:
        return o2t.onnx2tf_python(), ""
    except Exception as err:  # noqa: BLE001 - report, don't stop
        return None, f"onnx2tf unavailable: {str(err)[:120]}"


def ready_interpreters(files: dict[str, Path], warmup: int) -> dict:
    """One single-thread LiteRT interpreter per file, its inputs set to seeded standard-normal
    values, invoked ``warmup`` times."""
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(0)
    interps = {}
    for label, path in files.items():
        interp = Interpreter(model_path=str(path), num_threads=1)
        interp.allocate_tensors()
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(d["dtype"]))
        for _ in range(warmup):
            interp.invoke()
        interps[label] = interp
    return interps


def latency(files: dict[str, Path], runs: int) -> dict[str, float]:
    """Median single-thread invoke time per file (seconds), interleaved run by run."""
    interps = ready_interpreters(files, warmup=3)
    times: dict[str, list[float]] = {label: [] for label in interps}
    for _ in range(runs):
        for label, interp in interps.items():
            start = time.perf_counter()
            interp.invoke()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(ts) for label, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(zoo.NAMES))
    ap.add_argument("--size", default="full", choices=["test", "full"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--keep", default=None, help="keep the produced files in this directory")
    args = ap.parse_args()
    assert args.runs >= 20, "latency is a median of at least 20 runs"
    import torch

    o2t, o2t_why = onnx2tf_python()
    lt, lt_why = litert_torch_python()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-tflite-"))
    rows = []
    for name in args.models.split(","):
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        onnx_path = zoo.export_onnx(name, folder / f"{name}.onnx", size=args.size)
        shapes = zoo.input_shapes(name, args.size)
        pt = folder / f"{name}.pt"
        with torch.no_grad():
            torch.jit.trace(zoo.build(name, args.size), tuple(torch.zeros(s) for s in shapes.values())).save(str(pt))
        convert, cpu, files, notes = {}, {}, {}, []
        seconds, cpu["edgeconv"], done = timed([sys.executable, "-m", "converter", "port", str(onnx_path), "--to", "tflite", "--hw", "cpu",
                               "--no-verify", "-o", str(folder / "edgeconv")])
        if done.returncode == 0:
            convert["edgeconv"], files["edgeconv"] = seconds, next((folder / "edgeconv").glob("*.tflite"))
        else:
            notes.append(f"edgeconv failed: {done.stderr.strip()[-120:]}")
        # TorchScript keeps the forward's argument names (``x``), not the zoo's ONNX input names.
        shape_flags = [f for s in shapes.values() for f in ("-s", "x".join(map(str, s)))][:2]
        seconds, cpu["edgeconv .pt"], done = timed([sys.executable, "-m", "converter", "port", str(pt), *shape_flags, "--to", "tflite",
                               "--hw", "cpu", "--no-verify", "-o", str(folder / "edgeconv-pt")])
        if done.returncode == 0:
            convert["edgeconv .pt"] = seconds
        else:
            notes.append(f"edgeconv .pt failed: {done.stderr.strip()[-120:]}")
        if o2t is not None:
            import bench_tflite_vs_onnx2tf as o2t_mod

            try:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                convert["onnx2tf"], files["onnx2tf"] = o2t_mod.run_onnx2tf(o2t, onnx_path, folder / "onnx2tf")
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu["onnx2tf"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            except Exception as err:  # noqa: BLE001
                notes.append(f"onnx2tf failed: {str(err).strip().splitlines()[0][:100]}")
        if lt is not None:
            out = folder / "litert_torch.tflite"
            seconds, cpu["litert-torch"], done = timed([str(lt), "-c", _LITERT_TORCH, str(ROOT), name, args.size, str(out)])
            if done.returncode == 0 and out.exists():
                convert["litert-torch"], files["litert-torch"] = seconds, out
            else:
                notes.append(f"litert-torch failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:100]}")
        lat = latency(files, args.runs) if files else {}
        rows.append((name, convert, cpu, lat, notes))
        print(f"{name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in convert.items()) + " | "
              + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in lat.items()) + (" | " + "; ".join(notes) if notes else ""),
              flush=True)
    print()
    print(f"conversion (s, fresh process each) and LiteRT latency (ms, 1 thread, median of {args.runs}); "
          f"{args.size} zoo sizes")
    if o2t_why:
        print(f"  {o2t_why}")
    if lt_why:
        print(f"  {lt_why}")
    head = f"{'model':18} {'edgeconv':>9} {'ec .pt':>7} {'onnx2tf':>8} {'lt-torch':>9} {'conv ratio':>11} " \
           f"{'ec ms':>7} {'o2t ms':>7} {'ltt ms':>7} {'lat ratio':>9}"
    print(head)
    for name, convert, cpu, lat, _ in rows:
        others = [k for k in ("onnx2tf", "litert-torch") if k in convert]
        conv_ratio = "n/a"
        if others and "edgeconv" in convert:
            fastest = min(others, key=convert.get)
            conv_ratio = f"{convert[fastest] / convert['edgeconv']:.1f}x/{cpu[fastest] / cpu['edgeconv']:.1f}x"
        other_lat = [lat[k] for k in ("onnx2tf", "litert-torch") if k in lat]
        lat_ratio = f"{lat['edgeconv'] / min(other_lat):.2f}" if other_lat and "edgeconv" in lat else "n/a"

        def cell(d, k, scale=1.0, width=8, fmt=".1f"):
            return f"{scale * d[k]:{width}{fmt}}" if k in d else f"{'-':>{width}}"
        print(f"{name:18} {cell(convert, 'edgeconv', width=9)} {cell(convert, 'edgeconv .pt', width=7)} "
              f"{cell(convert, 'onnx2tf')} {cell(convert, 'litert-torch', width=9)} {conv_ratio:>11} "
              f"{cell(lat, 'edgeconv', 1e3, 7, '.2f')} {cell(lat, 'onnx2tf', 1e3, 7, '.2f')} "
              f"{cell(lat, 'litert-torch', 1e3, 7, '.2f')} {lat_ratio:>9}")
    print("conv ratio: the faster other tool's conversion time / edgeconv's from .onnx, wall/CPU (goal >= 10x); "
          "lat ratio: edgeconv's latency / the better other file's (goal <= 1.00)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

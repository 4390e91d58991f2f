"""edgeconv's TFLite writer vs onnx2tf on the same ONNX files, in one run.

For each zoo model (``--size full`` by default) this prints:
* conversion wall time of onnx2tf and of edgeconv, and their ratio,
* LiteRT latency (median of ``--runs`` invokes, XNNPACK, 1 and 2 threads) of both files, ratio,
* file sizes,
* max |error| of each file against onnxruntime.
For superres it also times the sub-pixel rewrite (ConvTranspose -> Conv + DepthToSpace) when the
legalization package provides it, to see whether it is faster than TRANSPOSE_CONV.

onnx2tf pins exact versions of numpy, onnx, onnxruntime and TensorFlow, so it lives in its own
venv (created on first use under ``~/.cache/edgeconv/onnx2tf-<version>``, reused afterwards); it is
driven in a subprocess.  Two onnx2tf habits are handled here: offline, it tries to download a
calibration sample for 3-channel inputs, so a seeded stand-in
``calibration_image_sample_data_20x128x128x3_float32.npy`` is put in its working directory, where it
looks first; and it overwrites its input ``.onnx`` in place, so it gets a copy.

    python benchmarks/bench_tflite_vs_onnx2tf.py [--size test|full] [--models resnet,unet] [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONNX2TF_VERSION = "1.29.0"  # its wheel pins tensorflow 2.19.0, onnx 1.19.0, onnxruntime 1.23.0, numpy 1.26.4
VENV = Path.home() / ".cache" / "edgeconv" / f"onnx2tf-{ONNX2TF_VERSION}"
CALIBRATION_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"


def onnx2tf_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} (installs onnx2tf=={ONNX2TF_VERSION} and its pinned TensorFlow; minutes)")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "ensurepip", "-q"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"onnx2tf=={ONNX2TF_VERSION}"], check=True)
    return python


def run_onnx2tf(python: Path, onnx_path: Path, work: Path, extra: tuple[str, ...] = (),
                result: str = "*_float32.tflite") -> tuple[float, Path]:
    """(seconds, the file matching ``result``) of ``onnx2tf -i onnx_path -n *extra`` in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(work / CALIBRATION_FILE, rng.random((20, 128, 128, 3), dtype=np.float32))
    copy = work / onnx_path.name  # onnx2tf rewrites its input file
    shutil.copy(onnx_path, copy)
    out = work / "saved_model"
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "onnx2tf", "-i", str(copy), "-o", str(out), "-n", *extra],
                          cwd=work, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    files = sorted(out.glob(result))
    if proc.returncode != 0 or not files:
        raise RuntimeError(f"onnx2tf failed on {onnx_path.name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed, files[0]


def paired_latency(files: list[tuple[Path, list[np.ndarray] | None]], threads: int, runs: int) -> list[float]:
    """Median invoke time of each file, measured interleaved (a, b, a, b, ...) so that load from
    other processes on the shared cores hits every file alike (feeds None: zeros)."""
    from ai_edge_litert.interpreter import Interpreter

    interps = []
    for path, feeds in files:
        interp = Interpreter(model_path=str(path), num_threads=threads)
        interp.allocate_tensors()
        for k, d in enumerate(interp.get_input_details()):
            interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]) if feeds is None else feeds[k])
        for _ in range(3):
            interp.invoke()
        interps.append(interp)
    times: list[list[float]] = [[] for _ in interps]
    for _ in range(runs):
        for k, interp in enumerate(interps):
            t = time.perf_counter()
            interp.invoke()
            times[k].append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def onnx2tf_outputs(path: Path, feeds: dict, ref: dict) -> float:
    """Max error of onnx2tf's file vs onnxruntime: its inputs/outputs are NHWC (4-D) and its output
    order may differ, so each output is matched by shape after undoing NHWC."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    for d, x in zip(interp.get_input_details(), feeds.values()):
        interp.set_tensor(d["index"], x.transpose(0, 2, 3, 1) if x.ndim == 4 else x)
    interp.invoke()
    outs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    worst = 0.0
    for r in ref.values():
        candidates = []
        for o in outs:
            for cand in (o, o.transpose(0, 3, 1, 2) if o.ndim == 4 else o):
                if cand.shape == r.shape:
                    candidates.append(float(np.max(np.abs(cand - r))))
        worst = max(worst, min(candidates) if candidates else float("nan"))
    return worst


def main() -> None:
    import onnx
    import onnxruntime as ort

    from converter.demo import zoo
    from converter.frontend.normalize import normalize
    from converter.targets.base import ExportOptions
    from converter.targets.tflite import TARGET

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="full", choices=["test", "full"])
    ap.add_argument("--models", default=",".join(zoo.NAMES))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "tflite_vs_onnx2tf"))
    args = ap.parse_args()
    out = Path(args.out)
    python = onnx2tf_python()
    rows = []
    for name in args.models.split(","):
        work = out / name
        onnx_path = zoo.export_onnx(name, work / f"{name}.onnx", size=args.size)
        model = normalize(onnx.load(onnx_path))
        onnx.save(model, onnx_path)  # both tools convert the same normalized file
        feeds = zoo.example_inputs(name, size=args.size)
        ref = dict(zip([o.name for o in model.graph.output],
                       ort.InferenceSession(model.SerializeToString()).run(None, feeds)))
        row = {"model": name}
        try:
            row["onnx2tf_s"], theirs = run_onnx2tf(python, onnx_path, work / "onnx2tf")
            row["onnx2tf_err"] = onnx2tf_outputs(theirs, feeds, ref)
        except RuntimeError as err:
            print(err)
            theirs = None
        start = time.perf_counter()
        art = TARGET.export(onnx.load(onnx_path), work / "edgeconv", "cpu", ExportOptions(name=name))
        row["edgeconv_s"] = time.perf_counter() - start
        ours = art.files[0]
        got = TARGET.run(art, feeds)
        row["edgeconv_err"] = max(float(np.max(np.abs(got[k] - v))) for k, v in ref.items())
        stored = [np.ascontiguousarray(feeds[s["name"]].transpose(s["perm"])) for s in art.meta["inputs"]]
        nhwc = [x.transpose(0, 2, 3, 1) if x.ndim == 4 else x for x in feeds.values()]
        row["edgeconv_kb"] = ours.stat().st_size / 1024
        files = [(ours, stored)] + ([(theirs, nhwc)] if theirs is not None else [])
        if name == "superres":
            sub = subpixel_file(model, work, feeds, ref, row)
            if sub is not None:
                files.append((sub, stored))
        for threads in (1, 2):
            times = paired_latency(files, threads, args.runs)
            row[f"edgeconv_ms_t{threads}"] = 1e3 * times[0]
            if theirs is not None:
                row[f"onnx2tf_ms_t{threads}"] = 1e3 * times[1]
            if len(files) > (2 if theirs is not None else 1):
                row[f"subpixel_ms_t{threads}"] = 1e3 * times[-1]
        if theirs is not None:
            row["onnx2tf_kb"] = theirs.stat().st_size / 1024
        rows.append(row)
        print(json.dumps(row))
    print_table(rows)
    (out / "results.json").write_text(json.dumps(rows, indent=1))


def subpixel_file(model, work: Path, feeds, ref, row) -> Path | None:
    """superres with its ConvTranspose rewritten to Conv + DepthToSpace (the legalization rule
    ``convtranspose_to_depth_to_space``), exported by us: is it faster than TRANSPOSE_CONV?"""
    try:
        from converter.legalize.rewrites.base import apply_rule
    except ImportError:
        return None
    from converter.targets.base import ExportOptions
    from converter.targets.tflite import TARGET

    rewritten = apply_rule(model, "convtranspose_to_depth_to_space")
    art = TARGET.export(rewritten, work / "subpixel", "cpu", ExportOptions(name="superres_subpixel"))
    got = TARGET.run(art, feeds)
    row["subpixel_err"] = max(float(np.max(np.abs(got[k] - v))) for k, v in ref.items())
    print("sub-pixel superres ops:", art.meta["ops"], "max err", row["subpixel_err"])
    return art.files[0]


def print_table(rows) -> None:
    def ratio(a, b):
        return f"{a / b:6.2f}x" if a and b else "   n/a"

    print()
    print(f"{'model':18} {'convert onnx2tf/ours':>22} {'latency t1 o2t/ours':>22} {'latency t2 o2t/ours':>22} "
          f"{'size KB o2t/ours':>20} {'max err o2t/ours':>22}")
    for r in rows:
        conv = f"{r.get('onnx2tf_s', 0):6.1f}s/{r['edgeconv_s']:5.2f}s {ratio(r.get('onnx2tf_s'), r['edgeconv_s'])}"
        lat = [f"{r.get(f'onnx2tf_ms_t{t}', 0):6.2f}/{r[f'edgeconv_ms_t{t}']:6.2f}ms "
               f"{ratio(r.get(f'onnx2tf_ms_t{t}'), r[f'edgeconv_ms_t{t}'])}" for t in (1, 2)]
        size = f"{r.get('onnx2tf_kb', 0):7.0f}/{r['edgeconv_kb']:7.0f}"
        err = f"{r.get('onnx2tf_err', float('nan')):.1e}/{r['edgeconv_err']:.1e}"
        print(f"{r['model']:18} {conv:>22} {lat[0]:>22} {lat[1]:>22} {size:>20} {err:>22}")
        if "subpixel_ms_t1" in r:
            print(f"{'  superres subpixel':18} latency t1 {r['subpixel_ms_t1']:.2f} ms, t2 {r['subpixel_ms_t2']:.2f} ms "
                  f"(TRANSPOSE_CONV file: {r['edgeconv_ms_t1']:.2f} / {r['edgeconv_ms_t2']:.2f} ms), "
                  f"max err {r['subpixel_err']:.1e}")


if __name__ == "__main__":
    main()

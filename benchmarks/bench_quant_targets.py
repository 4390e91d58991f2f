"""Held-out quantization numbers and the per-target table on a model whose output depends on its
input (issues 29 item 5, 31 items 1 and 4).

The zoo's MobileNetV2 (its ``full`` configuration) with random weights and BatchNorm statistics
re-estimated on real photos (scikit-image's sample photos, as in signal_models.py, so that
activations stay alive), at ``--size``:

1. ``port --to tflite --quantize int8`` three times, judged on different samples: the held-out
   quarter of the calibration set (the default), the calibration samples themselves
   (``--inputs`` = the calibration file: in-sample), and crops of other photos (``--inputs``);
2. ``port --to all --quantize auto``: the console's per-target table, and the TFLite pair's
   per-layer table (local SQNR and the measured keep-float gains).

    python benchmarks/bench_quant_targets.py [--size 128] [--samples 64] [--held 16]

Needs the ``signal`` extra (scikit-image) and torch.  Wall times printed are this host's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from signal_models import constant_sqnr, imagenet_inputs, photo_crops, reestimate_batchnorm  # noqa: E402


def bn_mobilenetv2(path: Path, calibration: np.ndarray, size: int) -> Path:
    """The zoo's full MobileNetV2, BatchNorm statistics re-estimated on ``calibration``."""
    import warnings

    import torch

    from converter.demo import zoo

    model = reestimate_batchnorm(zoo.build("mobilenetv2", "full", 0), calibration)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 3, size, size),), str(path), input_names=["input"],
                          output_names=["output"], opset_version=17, dynamo=False)
    return path


def port(args: list[str], out: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "converter", "port", *args, "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode not in (0, 3, 4, 8):  # ok, unsupported, verify_failed, unverified
        sys.exit(done.stderr[-2000:])
    return time.perf_counter() - start, done.stdout


def tflite_numbers(out: Path) -> dict:
    quant = json.loads((out / "report.json").read_text())["quantization"]
    judged = quant["file_verification"]
    o = judged["outputs"][0]
    return {"sqnr": o["sqnr_db"], "lowest": o["min_sqnr_db"], "top1": o["top1"], "on": judged["samples_from"],
            "bias": quant.get("bias_correction") or {}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--held", type=int, default=16)
    a = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-quant-targets-"))
    calib = imagenet_inputs(photo_crops(a.samples, a.size, 0, held_out=False))
    held = imagenet_inputs(photo_crops(a.held, a.size, 1, held_out=True))
    np.savez(tmp / "calib.npz", input=calib)
    np.savez(tmp / "held.npz", input=held)
    model = bn_mobilenetv2(tmp / "mobilenetv2_bn.onnx", calib, a.size)
    _constant_note(model, held)
    base = [str(model), "--calibration", str(tmp / "calib.npz")]
    print(f"MobileNetV2 (zoo full, BN re-estimated on photos), {a.size}x{a.size}, {a.samples} calibration crops, "
          f"{a.held} crops of other photos")
    print("| judged on | SQNR median dB | lowest | top-1 | bias correction | port s |")
    print("|---|---|---|---|---|---|")
    for label, extra in (("held-out quarter (default)", []), ("calibration samples (in-sample)",
                                                                ["--inputs", str(tmp / "calib.npz")]),
                         ("other photos (--inputs)", ["--inputs", str(tmp / "held.npz")])):
        out = tmp / f"tflite-{len(extra)}-{label.split()[0]}"
        seconds, _ = port(base + ["--to", "tflite", "--quantize", "int8", *extra], out)
        n = tflite_numbers(out)
        bias = n["bias"].get("why") or ("applied" if n["bias"].get("applied") else "not applied")
        print(f"| {n['on']} | {n['sqnr']:.2f} | {n['lowest']:.2f} | {n['top1']:.2f} | {bias[:90]} | {seconds:.0f} |")
    seconds, text = port(base + ["--to", "all", "--quantize", "auto"], tmp / "all")
    print(f"\nport --to all --quantize auto ({seconds:.0f} s):")
    print(text[text.index("Quantization per target:"):] if "Quantization per target:" in text else text)
    layers = json.loads((tmp / "all" / "tflite-cpu" / "report.json").read_text())["quantization"]["layers"]
    print(f"TFLite per-layer table: {layers['summary']}")
    for r in sorted((r for r in layers["rows"] if r.get("recovered_db") is not None),
                    key=lambda r: -r["recovered_db"])[:5]:
        print(f"  {r['node']} ({r['op']}): local {r['sqnr_db']:.1f} dB, drop {r['drop_db']:.1f} dB, "
              f"in float {r['recovered_db']:+.2f} dB at the output")
    print(f"\nfiles under {tmp}")


def _constant_note(model: Path, held: np.ndarray) -> None:
    """How much the output depends on the input: the SQNR of predicting the mean output for every
    held-out crop (the zoo's random-weight MobileNetV2 scores 136.8 dB: a constant)."""
    import onnx

    from converter.runtimes.onnxruntime import onnx_runner

    run = onnx_runner(onnx.load(str(model)))
    outs = [run({"input": x})["output"] for x in held]
    print(f"predicting the mean output scores {constant_sqnr(outs):.1f} dB on the held-out crops")


if __name__ == "__main__":
    main()

"""Quantization quality side by side with the peer tools (issue 15): same model, same samples.

For each zoo model (``--size full``: MobileNetV2 and ResNet at 224x224) every tool gets the same
``--samples`` seeded calibration inputs and is judged on the same ``--held-out`` inputs (seeded
Gaussian, NCHW; ``bench_tflite_int8.samples``): SQNR, the median over held-out samples, of each
tool's quantized model against the float ONNX model in onnxruntime.

Full-integer int8 (float interface, int8 inside), each file run by this venv's LiteRT:

* edgeconv ``port --to tflite --quantize int8 --calibration`` (``bench_tflite_int8.edgeconv_int8``);
* TensorFlow's ``TFLiteConverter`` with the samples as ``representative_dataset``, on a Keras model
  rebuilt from the float ONNX (``bench_tflite_int8.tensorflow_int8``; needs ``.[tf]``);
* onnx2tf ``-oiqt`` with the samples as ``-cind input calib.npy 0 1`` (NHWC, mean 0, std 1: the
  data is used as is), its ``*_integer_quant.tflite`` (onnx2tf's venv, see
  ``bench_tflite_vs_onnx2tf.py``);
* litert-torch's PT2E quantizer (``PT2EQuantizer`` with ``get_symmetric_quantization_config(
  is_per_channel=True)``: int8 per-channel weights, int8 activations) on the zoo's torch module,
  calibrated on the samples, converted by ``litert_torch.convert`` (its overlay venv, see
  ``bench_tflite.py``); its file has int8 input and output, fed and read with the file's
  parameters.  The PT2E-quantized torch module's own SQNR (fake-quant, before conversion) is
  printed under it ("in torch"), to tell the quantizer from the converter;
* onnxruntime.quantization: ``quant_pre_process`` then ``quantize_static`` (QDQ, int8 activations
  and per-channel weights, MinMax) with the samples; its QDQ model run by onnxruntime as it runs
  it by default — not a full-integer execution: where its CPU kernels have no fused int8 pattern
  (some Conv, every Add of these models) the optimized graph computes in float on dequantized
  inputs, skipping those requantizations; the count is printed — and, under it, with graph
  optimizations off ("QDQ semantics": every Q/DQ pair applied, as an integer runtime must).

Weight-only int8 CoreML (no macOS here: both ``.mlpackage`` files are executed op by op by
edgeconv's MIL numpy executor, as ``port --to coreml`` verifies its files):

* edgeconv ``port --to coreml --quantize int8-weights``;
* coremltools.optimize ``linear_quantize_weights`` (``linear_symmetric``, int8, per channel) on
  edgeconv's float ``.mlpackage``, on the same weights edgeconv quantizes (the const inputs of
  rank >= 2 of conv/linear ops; coremltools' default 2048-element threshold would leave the
  small ones float, a different model).

A peer that fails or is not installed prints its one-line reason.

Timing: edgeconv's quantize stage (the port's own stage timer) and TFLiteConverter's
``convert()`` (the full-integer conversion with the representative dataset), measured in the same
run, one after the other for each model, printed as a ratio.

    python benchmarks/bench_quant_peers.py [--models mobilenetv2,resnet] [--size full] [--samples 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_tflite_int8 import edgeconv_int8, make_case, median_sqnr, run_tflite, tensorflow_int8  # noqa: E402

TFLITE_PEERS = ("TFLiteConverter", "onnx2tf -oiqt", "litert-torch PT2E", "onnxruntime QDQ")

_LITERT_TORCH_PT2E = """
import sys, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
sys.path.insert(0, sys.argv[1])
import numpy as np
import torch
import litert_torch
from litert_torch.quantize import pt2e_quantizer, quant_config
from torchao.quantization.pt2e import quantize_pt2e
from converter.demo import zoo
name, size, calib_path, held_path, out = sys.argv[2:7]
calib, held = np.load(calib_path), np.load(held_path)
sample = (torch.from_numpy(calib[0]),)
quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
    pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
module = torch.export.export(zoo.build(name, size).eval(), sample).module()
module = quantize_pt2e.prepare_pt2e(module, quantizer)
with torch.no_grad():
    for x in calib:
        module(torch.from_numpy(x))
module = quantize_pt2e.convert_pt2e(module, fold_quantize=False)
with torch.no_grad():  # the quantized torch module itself (fake-quant), before litert-torch converts it
    np.save(out + ".torch.npy", np.stack([module(torch.from_numpy(x)).numpy() for x in held]))
litert_torch.convert(module, sample, quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer)).export(out)
"""


def one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "?")[:160]


def onnx2tf_int8(onnx_path: Path, calib: np.ndarray, work: Path) -> Path:
    import bench_tflite_vs_onnx2tf as o2t

    python = o2t.onnx2tf_python()
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "calib_nhwc.npy", calib[:, 0].transpose(0, 2, 3, 1))
    try:
        _, path = o2t.run_onnx2tf(python, onnx_path, work, ("-oiqt", "-cind", "input", str(work / "calib_nhwc.npy"),
                                                            "0", "1"), result="*_integer_quant.tflite")
    except RuntimeError as err:
        raise RuntimeError(one_line(err)) from None
    return path


def litert_torch_int8(name: str, size: str, calib: np.ndarray, held: np.ndarray, work: Path
                      ) -> tuple[Path, np.ndarray]:
    """(litert-torch's int8 file, the PT2E-quantized torch module's own outputs on ``held``)."""
    from bench_tflite import _env, litert_torch_python

    python, why = litert_torch_python()
    if python is None:
        raise RuntimeError(why)
    np.save(work / "calib_nchw.npy", calib)
    np.save(work / "held_nchw.npy", held)
    out = work / f"{name}_pt2e.tflite"
    done = subprocess.run([str(python), "-c", _LITERT_TORCH_PT2E, str(ROOT), name, size, str(work / "calib_nchw.npy"),
                           str(work / "held_nchw.npy"), str(out)], capture_output=True, text=True, env=_env())
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(one_line(done.stderr))
    return out, np.load(str(out) + ".torch.npy")


def onnxruntime_qdq(onnx_path: Path, calib: np.ndarray, work: Path):
    """onnxruntime's own static QDQ model of ``onnx_path`` as two onnxruntime sessions: as
    onnxruntime runs it by default (graph optimizations on: its int8 kernels where it has a
    fused pattern, float Conv/Add with dequantized inputs where not), and as the QDQ model says
    (optimizations off: every Q/DQ pair applied).  Also {op: count} of the float Conv and Add
    nodes left in the optimized graph."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from converter.quantize.ranges import quiet_onnxruntime_quantization

    class Reader:
        def __init__(self):
            self.items = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.items, None)

    pre, out = work / "ort_pre.onnx", work / "ort_qdq.onnx"
    with quiet_onnxruntime_quantization():
        quant_pre_process(str(onnx_path), str(pre))
        quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
    sessions = []
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = level
        if level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL:
            options.optimized_model_filepath = str(work / "ort_optimized.onnx")
        sessions.append(ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"]))
    optimized = onnx.load(str(work / "ort_optimized.onnx"))
    floats = {op: sum(n.op_type == op and n.domain in ("", "ai.onnx") for n in optimized.graph.node)
              for op in ("Conv", "Add")}
    return sessions[0], sessions[1], floats


def tflite_peers(name: str, size: str, ours: dict, calib: np.ndarray, held: np.ndarray, tmp: Path) -> dict:
    """{peer: median SQNR dB or the one-line reason it has none}."""
    refs, out = ours["refs"], {}

    def judge(peer, make):
        try:
            out[peer] = make()
        except Exception as err:  # noqa: BLE001 - a peer's failure is a result, not a stop
            out[peer] = f"{type(err).__name__}: {one_line(err)}"

    def tensorflow():
        with contextlib.redirect_stdout(sys.stderr):  # Keras prints every exported tensor spec
            _, int8, seconds = tensorflow_int8(ours["float_model"], calib, tmp)
        out["TFLiteConverter seconds"] = seconds
        return median_sqnr(refs, [run_tflite(int8, x) for x in held])

    def onnx2tf():
        path = onnx2tf_int8(ours["onnx_path"], calib, tmp / f"{name}_onnx2tf")
        return median_sqnr(refs, [run_tflite(path, x) for x in held])

    def litert_torch():
        path, in_torch = litert_torch_int8(name, size, calib, held, tmp)
        out["PT2E in torch"] = median_sqnr(refs, list(in_torch))
        return median_sqnr(refs, [run_tflite(path, x) for x in held])

    def ort_qdq():
        default, semantics, floats = onnxruntime_qdq(ours["onnx_path"], calib, tmp)
        out["QDQ semantics"] = median_sqnr(refs, [semantics.run(None, {"input": x})[0] for x in held])
        out["onnxruntime float ops"] = floats
        return median_sqnr(refs, [default.run(None, {"input": x})[0] for x in held])

    for peer, make in zip(TFLITE_PEERS, (tensorflow, onnx2tf, litert_torch, ort_qdq)):
        judge(peer, make)
    return out


def coreml_weight_only(name: str, ours: dict, held: np.ndarray, tmp: Path) -> dict:
    """{"edgeconv": dB, "coremltools": dB or reason, "weights": (edgeconv's, coremltools') count}."""
    import coremltools as ct
    import coremltools.optimize as cto

    from converter.port import port
    from converter.targets.coreml.mil_executor import load_program, run_package
    from converter.targets.coreml.quiet import silenced

    refs, onnx_path = ours["refs"], ours["onnx_path"]
    packages = {}
    for kind, quantize in (("float", None), ("w8", "int8-weights")):
        result = port(str(onnx_path), to="coreml", hw="cpu", out=tmp / f"{name}_coreml_{kind}", quantize=quantize, verify=False)
        if result.status != "ok":
            raise RuntimeError(f"edgeconv coreml {kind}: {result.reason}")
        (packages[kind],) = (tmp / f"{name}_coreml_{kind}").glob("*.mlpackage")

    def count(package) -> int:
        return sum(op.op_type.startswith("constexpr_") for op in load_program(package).functions["main"].operations)

    out = {"edgeconv": median_sqnr(refs, [next(iter(run_package(packages["w8"], {"input": x}).values()))
                                          for x in held])}
    try:
        program = load_program(packages["float"])
        weights = [op.outputs[0].name for op in program.functions["main"].operations
                   if op.op_type == "const" and np.asarray(op.outputs[0].val).ndim >= 2
                   and any(c.op_type in ("conv", "linear", "conv_transpose", "matmul")
                           for c in op.outputs[0].child_ops)]
        config = cto.coreml.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                                    weight_threshold=0)
        with silenced():
            model = ct.models.MLModel(str(packages["float"]), skip_model_load=True)
            quantized = cto.coreml.linear_quantize_weights(
                model, cto.coreml.OptimizationConfig(op_name_configs={w: config for w in weights}))
            theirs = tmp / f"{name}_coremltools.mlpackage"
            quantized.save(str(theirs))
        out["coremltools"] = median_sqnr(refs, [next(iter(run_package(theirs, {"input": x}).values())) for x in held])
        out["weights"] = (count(packages["w8"]), count(theirs))
    except Exception as err:  # noqa: BLE001
        out["coremltools"] = f"{type(err).__name__}: {one_line(err)}"
        out["weights"] = (count(packages["w8"]), None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mobilenetv2,resnet")
    ap.add_argument("--size", default="full")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--no-coreml", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-qpeers-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            work = tmp / name
            work.mkdir()
            # seeded Gaussian calibration (seed 0) and held-out (seed 1) inputs of the zoo model
            case = make_case(name, args.size, work, args.samples, args.held_out, 0)
            calib, held = case.calib, case.held
            ours = edgeconv_int8(case, work)
            row = {"model": name, "size": args.size, "edgeconv": ours["sqnr_db"], "quantize seconds": ours["quantize_s"],
                   **tflite_peers(name, args.size, ours, calib, held, work)}
            if not args.no_coreml:
                try:
                    row["coreml"] = coreml_weight_only(name, ours, held, work)
                except Exception as err:  # noqa: BLE001
                    row["coreml"] = f"{type(err).__name__}: {one_line(err)}"
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    print_table(rows, args)


def print_table(rows: list[dict], args) -> None:
    def cell(value, width=9):
        return f"{value:{width}.1f}" if isinstance(value, float) else f"{'failed':>{width}}"

    print(f"\nint8 SQNR (dB, median of {args.held_out} held-out samples, {args.samples} calibration samples, "
          f"{args.size} zoo sizes) against the float ONNX model")
    print(f"{'model':12} {'edgeconv':>9} " + " ".join(f"{p:>18}" for p in TFLITE_PEERS) + f" {'ours-best':>9}")
    notes = []
    for r in rows:
        peers = [r[p] for p in TFLITE_PEERS if isinstance(r[p], float)]
        margin = f"{r['edgeconv'] - max(peers):+9.1f}" if peers else f"{'-':>9}"
        print(f"{r['model']:12} {cell(r['edgeconv'])} " + " ".join(cell(r[p], 18) for p in TFLITE_PEERS) + f" {margin}")
        notes += [f"  {r['model']} {p}: {r[p]}" for p in TFLITE_PEERS if not isinstance(r[p], float)]
        below = [format("in torch " + format(r["PT2E in torch"], ".1f") if isinstance(r.get("PT2E in torch"), float)
                        else "", ">18"),
                 format("QDQ semantics " + format(r["QDQ semantics"], ".1f") if isinstance(r.get("QDQ semantics"), float)
                        else "", ">18")]
        if any(b.strip() for b in below):
            print(f"{'':12} {'':9} {'':18} {'':18} {below[0]} {below[1]}")
        if isinstance(r.get("onnxruntime float ops"), dict):
            floats = ", ".join(f"{n} {op}" for op, n in r["onnxruntime float ops"].items())
            notes.append(f"  {r['model']} onnxruntime QDQ: its optimized graph still runs {floats} in float")
    print("\nint8 conversion time (s, this run): edgeconv's quantize stage (calibration, quantization, bias "
          "correction, its verdict and per-layer table) against TFLiteConverter's full-integer convert() "
          "(goal: ratio <= 1.0)")
    print(f"{'model':12} {'edgeconv':>9} {'TFLiteConverter':>16} {'ratio':>6}")
    for r in rows:
        theirs = r.get("TFLiteConverter seconds")
        ratio = f"{r['quantize seconds'] / theirs:6.2f}" if theirs else f"{'-':>6}"
        print(f"{r['model']:12} {r['quantize seconds']:9.1f} {theirs or float('nan'):16.1f} {ratio}")
    if not args.no_coreml:
        print("\nCoreML int8 weight-only SQNR (dB, executed by edgeconv's MIL numpy executor)")
        print(f"{'model':12} {'edgeconv':>9} {'coremltools':>12} {'ours-them':>9} {'weights':>9}")
        for r in rows:
            c = r["coreml"]
            if not isinstance(c, dict):
                notes.append(f"  {r['model']} coreml: {c}")
                continue
            margin = f"{c['edgeconv'] - c['coremltools']:+9.1f}" if isinstance(c["coremltools"], float) else f"{'-':>9}"
            weights = "/".join("-" if w is None else str(w) for w in c["weights"])
            print(f"{r['model']:12} {cell(c['edgeconv'])} {cell(c['coremltools'], 12)} {margin} {weights:>9}")
            if not isinstance(c["coremltools"], float):
                notes.append(f"  {r['model']} coremltools: {c['coremltools']}")
    print("ours-best: edgeconv's SQNR minus the best peer's (goal >= 0); in torch: the PT2E-quantized torch module "
          "itself, before litert-torch converts it (not a file); QDQ semantics: onnxruntime's QDQ model with every "
          "Q/DQ applied (graph optimizations off); weights: int8 weight tensors, edgeconv/coremltools")
    if notes:
        print("notes:")
        print("\n".join(notes))


if __name__ == "__main__":
    main()

"""edgeconv's native int8 .tflite vs its fp32 file and vs TensorFlow's own full-integer quantization.

For each model (``real:mobilenet_v2``: torchvision's MobileNetV2, 3.5 M parameters, random init;
zoo models at ``--size full``: MobileNetV2 and ResNet at 224x224) this runs, on the same
``--samples`` calibration inputs and ``--held-out`` evaluation inputs (seeded Gaussian, NCHW):

* ``edgeconv port --to tflite --quantize int8`` (the port's quantize stage is timed: calibration
  + QDQ + checks) and the plain fp32 port;
* TensorFlow's ``TFLiteConverter`` with ``optimizations=[DEFAULT]`` and the same samples as its
  ``representative_dataset`` (float32 interface, int8 inside), on a Keras model rebuilt from the
  float ONNX with the same weights (``keras_from_onnx``: Conv/depthwise Conv, Relu/Clip, Add,
  MaxPool, GlobalAveragePool, Flatten, Gemm — what these zoo models use), when tensorflow is
  installed (``pip install -e .[tf]``);
* the other peers (onnx2tf ``-oiqt``, litert-torch's PT2E quantizer, onnxruntime's QDQ, and
  coremltools.optimize for CoreML weight-only files) are in ``bench_quant_peers.py``, which
  shares this file's helpers.

Printed per model: file sizes and the int8/fp32 size ratio (goal <= 0.3), LiteRT latency with 1
thread (median of ``--runs``, files interleaved) and the fp32/int8 speed-up (goal >= 2), the
quantize time (goal < 30 s for 100 samples), and SQNR (median over held-out samples) against
the float ONNX model in onnxruntime, side by side with TensorFlow's (edgeconv's should be >=).

    python benchmarks/bench_tflite_int8.py [--models mobilenetv2,resnet] [--size full] [--samples 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from converter.verify.metrics import sqnr_db  # noqa: E402
from signal_models import Case, constant_sqnr, mean_removed_sqnr, signal_case  # noqa: E402


def samples(shape, count, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, *shape)).astype(np.float32)


def latency(paths: list[Path], runs: int) -> list[float]:
    """Median 1-thread invoke time of each file, interleaved so that load hits all alike."""
    from bench_tflite_vs_onnx2tf import paired_latency

    return paired_latency([(path, None) for path in paths], threads=1, runs=runs)


def run_tflite(path: Path, x_nchw: np.ndarray) -> np.ndarray:
    """Run a peer's one-input .tflite file on an NCHW sample: the input is fed NCHW or NHWC as the
    file declares it, int8/uint8 interfaces are (de)quantized with the file's parameters."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), num_threads=1)
    interp.allocate_tensors()
    (d,) = interp.get_input_details()
    x = x_nchw if tuple(d["shape"]) == x_nchw.shape else x_nchw.transpose(0, 2, 3, 1)
    if d["dtype"] != np.float32:
        scale, zero = d["quantization"]
        info = np.iinfo(d["dtype"])
        x = np.clip(np.rint(x / scale) + zero, info.min, info.max)
    interp.set_tensor(d["index"], x.astype(d["dtype"]))
    interp.invoke()
    o = interp.get_output_details()[0]
    y = interp.get_tensor(o["index"])
    if o["dtype"] != np.float32:
        scale, zero = o["quantization"]
        y = (y.astype(np.float32) - zero) * scale
    return y


def median_sqnr(refs: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """Median over samples of each output's SQNR (dB) against its float reference."""
    return statistics.median(sqnr_db(r, np.asarray(y).reshape(r.shape)) for r, y in zip(refs, outputs))


def pooled_sqnr(refs: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """SQNR (dB) of all samples together: signal energy over error energy.  A small output (ten
    class scores) takes a few discrete SQNR values per sample, set by the int8 rounding of its last
    tensor, so the median jumps between them; the pooled value does not."""
    signal = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in refs)
    noise = sum(float(np.sum((np.asarray(r, np.float64) - np.asarray(y, np.float64).reshape(r.shape)) ** 2))
                for r, y in zip(refs, outputs))
    return float(10 * np.log10(signal / noise)) if noise > 0 else float("inf")


def edgeconv_int8(case, tmp: Path) -> dict:
    """``port --to tflite`` of ``case`` (:class:`signal_models.Case`): the fp32 file and
    ``--quantize int8`` with its calibration samples (verified on its held-out ones).  Returns the
    files, the float ONNX model and its outputs on the held-out samples (the reference every peer
    is judged against), edgeconv's SQNR and timings."""
    import onnx

    from converter.port import port
    from converter.targets import get as get_target
    from converter.targets.base import Artifact
    from converter.runtimes.onnxruntime import onnx_runner

    key = case.name.replace(":", "_")
    np.savez(tmp / f"{key}_calib.npz", **{case.input: case.calib})
    np.savez(tmp / f"{key}_held.npz", **{case.input: case.held})
    port(str(case.source), to="tflite", hw="cpu", out=tmp / f"{key}_fp32", verify=False)
    start = time.perf_counter()
    int8 = port(str(case.source), to="tflite", hw="cpu", out=tmp / f"{key}_int8", quantize="int8",
                calibration=str(tmp / f"{key}_calib.npz"), inputs=str(tmp / f"{key}_held.npz"))
    port_seconds = time.perf_counter() - start
    # A random-init deep network can miss the 25 dB floor (its logits are mostly noise); the file
    # is written all the same, and its size and speed are what this benchmark is about.
    assert int8.status in ("ok", "verify_failed"), int8.reason
    if int8.status != "ok":
        print(f"{case.name}: the int8 port ends {int8.status}: {int8.reason}")
    (fp32_file,), (int8_file,) = (list((tmp / f"{key}_{k}").glob("*.tflite")) for k in ("fp32", "int8"))
    float_model = onnx.load(str(tmp / f"{key}_int8" / "float.onnx"))
    output = float_model.graph.output[0].name
    run_float = onnx_runner(float_model)
    refs = [run_float({case.input: x})[output] for x in case.held]
    meta = int8.report["artifact"]["meta"]
    artifact = Artifact("tflite", "cpu", [int8_file], int8_file.parent, meta, "litert")
    target = get_target("tflite")
    outputs = [target.run(artifact, {case.input: x})[output] for x in case.held]
    return {**signal_scores(refs, outputs), "onnx_path": case.source, "fp32_file": fp32_file, "int8_file": int8_file,
            "float_model": float_model, "refs": refs, "quantize_s": int8.timings["quantize"], "port_s": port_seconds,
            "ops": meta["ops"], "constant_db": constant_sqnr(refs)}


def signal_scores(refs: list[np.ndarray], outputs: list[np.ndarray]) -> dict:
    """Median, pooled and mean-removed (pooled) SQNR of ``outputs`` against ``refs``."""
    return {"sqnr_db": median_sqnr(refs, outputs), "sqnr_pooled_db": pooled_sqnr(refs, outputs),
            "sqnr_signal_db": mean_removed_sqnr(refs, [np.asarray(y).reshape(r.shape) for r, y in zip(refs, outputs)])}


def file_ops(path: Path) -> dict[str, int]:
    """Builtin op counts of a .tflite file."""
    from collections import Counter

    from ai_edge_litert.interpreter import Interpreter

    return dict(sorted(Counter(d["op_name"] for d in Interpreter(model_path=str(path))._get_ops_details()).items()))


def make_case(name: str, size: str, tmp: Path, count: int, held_out: int, signal_size: int):
    """The benchmark case for ``name``: a zoo or ``real:`` model on seeded Gaussian samples, or a
    model whose output depends on its input (``hed``, ``bn:<arch>``) on real photos."""
    if name == "hed" or name.startswith("bn:"):
        return signal_case(name, tmp, count, held_out, signal_size)
    shape = input_shape(name, size)
    return Case(name, export_model(name, size, tmp), "input", samples(shape, count, 0), samples(shape, held_out, 1))


REAL_PREFIX = "real:"


def input_shape(name: str, size: str) -> tuple[int, ...]:
    """The zoo model's input, or for ``real:<arch>`` (benchmarks/real_zoo.py) 1x3x224x224."""
    from converter.demo import zoo

    return (1, 3, 224, 224) if name.startswith(REAL_PREFIX) else zoo.input_shapes(name, size)["input"]


def export_model(name: str, size: str, tmp: Path) -> Path:
    """``name`` as ONNX with one input "input" and one output "output": a zoo model, or with
    ``real:<arch>`` a published architecture from benchmarks/real_zoo.py (random init and
    randomized BatchNorm statistics, the real layer sizes: ``real:mobilenet_v2`` is the 3.5 M
    parameter MobileNetV2)."""
    import warnings

    from converter.demo import zoo

    path = tmp / f"{name.replace(':', '_')}.onnx"
    if not name.startswith(REAL_PREFIX):
        return zoo.export_onnx(name, path, size=size)
    import torch
    from real_zoo import ENTRIES, build

    entry = next(e for e in ENTRIES if e.name == name[len(REAL_PREFIX):])
    model = build(entry)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(input_shape(name, size)),), str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"])
    return path


def keras_from_onnx(model):
    """A Keras (NHWC) model computing the float ONNX model, for TFLiteConverter."""
    import tensorflow as tf
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    attrs = {n.name: {a.name: onnx_attr(a) for a in n.attribute} for n in model.graph.node}
    (graph_input,) = [i for i in model.graph.input if i.name not in inits]
    dims = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    x = tf.keras.Input(shape=(dims[2], dims[3], dims[1]), batch_size=dims[0])
    values = {graph_input.name: x}
    for node in model.graph.node:
        a = attrs[node.name]
        ins = [values.get(i) for i in node.input]
        if node.op_type == "Conv":
            w = inits[node.input[1]]
            b = inits[node.input[2]] if len(node.input) > 2 else np.zeros(w.shape[0], np.float32)
            pads, strides, group = a.get("pads", [0, 0, 0, 0]), a.get("strides", [1, 1]), a.get("group", 1)
            h = ins[0]
            if any(pads):
                h = tf.keras.layers.ZeroPadding2D(((pads[0], pads[2]), (pads[1], pads[3])))(h)
            if group == 1:
                layer = tf.keras.layers.Conv2D(w.shape[0], w.shape[2:], strides=strides, padding="valid")
                y = layer(h)
                layer.set_weights([w.transpose(2, 3, 1, 0), b])
            else:
                layer = tf.keras.layers.DepthwiseConv2D(w.shape[2:], strides=strides, padding="valid")
                y = layer(h)
                layer.set_weights([w.transpose(2, 3, 0, 1), b])
        elif node.op_type == "Relu":
            y = tf.keras.layers.ReLU()(ins[0])
        elif node.op_type == "Clip":
            lo, hi = (float(inits[n]) for n in node.input[1:3])
            assert lo == 0.0, "Clip with a non-zero floor"
            y = tf.keras.layers.ReLU(max_value=hi)(ins[0])
        elif node.op_type == "Add":
            y = tf.keras.layers.Add()(ins)
        elif node.op_type == "MaxPool":
            pads = a.get("pads", [0, 0, 0, 0])
            h = ins[0]
            if any(pads):  # inputs are Relu outputs (>= 0): zero padding acts as -inf padding
                h = tf.keras.layers.ZeroPadding2D(((pads[0], pads[2]), (pads[1], pads[3])))(h)
            y = tf.keras.layers.MaxPool2D(a["kernel_shape"], a.get("strides", [1, 1]), padding="valid")(h)
        elif node.op_type == "GlobalAveragePool":
            y = tf.keras.layers.GlobalAveragePooling2D(keepdims=True)(ins[0])
        elif node.op_type == "Flatten":
            y = tf.keras.layers.Flatten()(ins[0])
        elif node.op_type == "Gemm":
            w, b = inits[node.input[1]], inits[node.input[2]]
            w = w.T if a.get("transB", 0) else w
            layer = tf.keras.layers.Dense(w.shape[1])
            y = layer(ins[0])
            layer.set_weights([w, b])
        else:
            raise NotImplementedError(f"keras_from_onnx: {node.op_type}")
        values[node.output[0]] = y
    return tf.keras.Model(x, values[model.graph.output[0].name])


def onnx_attr(a):
    from onnx import helper

    return helper.get_attribute_value(a)


def tensorflow_int8(model, calib: np.ndarray, out: Path, keras_path: Path | None = None) -> tuple[Path, Path, float]:
    """(fp32 file, int8 file, seconds of the int8 conversion) made by TensorFlow's converter, from
    the Keras model at ``keras_path`` or one rebuilt from the float ONNX ``model``."""
    import tensorflow as tf

    keras_model = tf.keras.models.load_model(str(keras_path), compile=False) if keras_path else keras_from_onnx(model)
    fp32 = out / "tf_fp32.tflite"
    fp32.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras_model).convert())
    nhwc = tuple(keras_model.inputs[0].shape[1:]) == tuple(calib.shape[2:])

    def representative():
        for x in calib:
            yield [x if nhwc else x.transpose(0, 2, 3, 1)]

    converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    start = time.perf_counter()
    data = converter.convert()
    seconds = time.perf_counter() - start
    int8 = out / "tf_int8.tflite"
    int8.write_bytes(data)
    return fp32, int8, seconds


def main() -> None:

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="hed,bn:mobilenet_v2,real:mobilenet_v2,mobilenetv2,resnet",
                    help="zoo names; real:<arch> (benchmarks/real_zoo.py at 224x224); hed (the trained HED edge "
                         "detector) and bn:<torchvision arch> (BatchNorm re-estimated) on real photos")
    ap.add_argument("--size", default="full")
    ap.add_argument("--signal-size", type=int, default=192, help="image size of hed and bn: models")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    try:
        import tensorflow  # noqa: F401

        have_tf = True
    except ImportError:
        have_tf = False
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            case = make_case(name, args.size, tmp, args.samples, args.held_out, args.signal_size)
            rows.append(measure(case, tmp, args.runs, have_tf))
            print(json.dumps(rows[-1], default=str), flush=True)
    print_table(rows, have_tf)


def measure(case, tmp: Path, runs: int, have_tf: bool) -> dict:
    """One model: edgeconv's int8 file against its fp32 file and TensorFlow's int8 file."""
    ours = edgeconv_int8(case, tmp)
    fp32_file, int8_file, refs = ours["fp32_file"], ours["int8_file"], ours["refs"]
    row = {"model": case.name, "data": case.data, "fp32_bytes": fp32_file.stat().st_size,
           "int8_bytes": int8_file.stat().st_size, "quantize_s": ours["quantize_s"], "port_s": ours["port_s"],
           "constant_db": ours["constant_db"], "ops": ours["ops"],
           **{k: ours[k] for k in ("sqnr_db", "sqnr_pooled_db", "sqnr_signal_db")}}
    files = [fp32_file, int8_file]
    if have_tf:
        with contextlib.redirect_stdout(sys.stderr):  # Keras prints every exported tensor spec
            tf_fp32, tf_int8, tf_seconds = tensorflow_int8(ours["float_model"], case.calib, tmp, case.keras)
        tf_outputs = [run_tflite(tf_int8, x) for x in case.held]
        row.update(tf_int8_bytes=tf_int8.stat().st_size, tf_convert_s=tf_seconds, tf_ops=file_ops(tf_int8),
                   **{f"tf_{k}": v for k, v in signal_scores(refs, tf_outputs).items()},
                   tf_fp32_sqnr_db=median_sqnr(refs, [run_tflite(tf_fp32, x) for x in case.held]))
        files += [tf_int8]
    times = latency(files, runs)
    row.update(fp32_ms=times[0] * 1e3, int8_ms=times[1] * 1e3)
    if have_tf:
        row["tf_int8_ms"] = times[2] * 1e3
    return row


def print_table(rows, have_tf: bool) -> None:
    print(f"{'model':18} {'fp32 KB':>8} {'int8 KB':>8} {'size x':>7} {'fp32 ms':>8} {'int8 ms':>8} {'speed-up':>8} "
          f"{'quant s':>7} {'SQNR dB':>8} {'signal':>7}" + (f" {'TF SQNR':>8} {'signal':>7} {'ours-TF':>8} {'TF KB':>7} {'TF ms':>7}"
                                                             if have_tf else ""))
    for r in rows:
        line = (f"{r['model']:18} {r['fp32_bytes'] / 1024:8.0f} {r['int8_bytes'] / 1024:8.0f} "
                f"{r['int8_bytes'] / r['fp32_bytes']:7.3f} {r['fp32_ms']:8.2f} {r['int8_ms']:8.2f} "
                f"{r['fp32_ms'] / r['int8_ms']:8.2f} {r['quantize_s']:7.1f} {r['sqnr_db']:8.1f} {r['sqnr_signal_db']:7.1f}")
        if have_tf:
            line += (f" {r['tf_sqnr_db']:8.1f} {r['tf_sqnr_signal_db']:7.1f} {r['sqnr_db'] - r['tf_sqnr_db']:+8.1f}"
                     f" {r['tf_int8_bytes'] / 1024:7.0f} {r['tf_int8_ms']:7.2f}")
        print(line)
    for r in rows:
        print(f"{r['model']}: pooled SQNR {r['sqnr_pooled_db']:.2f} dB"
              + (f" (TensorFlow's {r['tf_sqnr_pooled_db']:.2f} dB)" if have_tf else "")
              + f"; predicting the mean output scores {r['constant_db']:.1f} dB; data: {r['data']}")
        ops = f"  ops in edgeconv's file: {sum(r['ops'].values())} {r['ops']}"
        if have_tf:
            ops += f"\n  ops in TensorFlow's file: {sum(r['tf_ops'].values())} {r['tf_ops']}"
        print(ops)
    print("SQNR: median over held-out samples against the float model; signal: pooled SQNR with each side's mean "
          "output (over the samples) removed, the part of the output that depends on the input")
    if not have_tf:
        print("tensorflow not installed: no TFLiteConverter comparison (pip install -e .[tf])")


if __name__ == "__main__":
    main()

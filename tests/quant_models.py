"""Seeded models and data for the quantization tests (no tests here)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, name) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def squash_model(ratio: float = 1000.0, seed: int = 0) -> onnx.ModelProto:
    """x -> conv1 -> relu1 -> conv2 -> y, where conv2's output channels 4..7 have weights
    ``ratio`` times smaller than channels 0..3 (as BatchNorm folding leaves them)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    w2[4:] /= ratio
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                  {"w1": w1, "w2": w2, "b2": np.zeros(8, np.float32)}, "squash")


def unpadded_conv_model(seed: int = 0) -> onnx.ModelProto:
    """An image model whose first Conv does not pad (the mean folds into its bias)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], name="stem", strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["logits"], name="flatten")]
    return _model(nodes, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 6])],
                  {"w": (rng.standard_normal((6, 3, 3, 3)) * 0.5).astype(np.float32)}, "unpadded")


def gaussian_samples(shape, count: int, seed: int, name: str = "input") -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def photo_like_images(count: int, size: int = 16, seed: int = 0) -> np.ndarray:
    """``count`` HxWx3 uint8 images with photo statistics: smooth, and redder than blue on average
    (per-image colour drawn around ImageNet's channel means R 124, G 116, B 104)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(count):
        base = rng.normal([124.0, 116.0, 104.0], 20.0)  # R > B in about 3 of 4 images
        gradient = rng.normal(0, 30.0) * (yy + xx)[:, :, None]  # a brightness gradient
        noise = rng.normal(0, 10.0, (size, size, 3))
        images.append(np.clip(base + gradient + noise, 0, 255).astype(np.uint8))
    return np.stack(images)


def heavy_tail_model(seed: int = 0) -> onnx.ModelProto:
    """x -> conv_a -> Exp -> conv_b -> y: Exp turns a bell curve into a heavy tail that 8-bit
    uniform quantization serves badly, whatever the range (a layer to keep in float)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Exp", ["a"], ["e"], name="exp"),
             helper.make_node("Conv", ["e", "wb"], ["y"], name="conv_b")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                  {"wa": (rng.standard_normal((8, 3, 3, 3)) * 0.6).astype(np.float32),
                   "wb": (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)}, "heavy_tail")


def two_branch_model(seed: int = 0, attenuation: float = 0.05) -> onnx.ModelProto:
    """y = conv_e(exp(conv_a(x))) + conv_c(relu(conv_b(x))): conv_c loses the most locally (its
    range is the Add's), conv_e's (weights scaled by ``attenuation``) is what the output loses."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Exp", ["a"], ["e"], name="exp"),
             helper.make_node("Conv", ["e", "we"], ["eo"], name="conv_e"),
             helper.make_node("Conv", ["x", "wb", "bb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["rb"], name="relu_b"),
             helper.make_node("Conv", ["rb", "wc", "bc"], ["c"], name="conv_c", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["eo", "c"], ["y"], name="add")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                  {"wa": (rng.standard_normal((8, 3, 3, 3)) * 0.6).astype(np.float32),
                   "we": (rng.standard_normal((8, 8, 1, 1)) * attenuation).astype(np.float32),
                   "wb": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
                   "bb": (rng.standard_normal(8) * 0.1).astype(np.float32),
                   "wc": (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
                   "bc": (rng.standard_normal(8) * 0.1).astype(np.float32)}, "two_branch")


def ops_mix_model(seed: int = 0) -> onnx.ModelProto:
    """Conv -> LeakyRelu -> depthwise Conv -> HardSwish -> AveragePool -> Resize -> Concat -> Slice
    -> Sigmoid -> Mul -> Transpose -> ReduceMean -> Softmax: the int8 kernels beyond conv/add."""
    rng = np.random.default_rng(seed)
    inits = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "b1": (rng.standard_normal(8) * 0.3).astype(np.float32),
             "wd": (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32),
             "scales": np.array([1, 1, 2, 2], np.float32), "ax": np.array([1], np.int64),
             "st": np.array([0], np.int64), "en": np.array([4], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c1"], ["l1"], name="leaky", alpha=0.1),
             helper.make_node("Conv", ["l1", "wd"], ["d1"], name="dw", pads=[1, 1, 1, 1], group=8),
             helper.make_node("HardSwish", ["d1"], ["h1"], name="hswish"),
             helper.make_node("AveragePool", ["h1"], ["p1"], name="avg", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Resize", ["p1", "", "scales"], ["r1"], name="resize", mode="nearest"),
             helper.make_node("Concat", ["r1", "h1"], ["cat"], name="cat", axis=1),
             helper.make_node("Slice", ["cat", "st", "en", "ax"], ["sl"], name="slice"),
             helper.make_node("Sigmoid", ["sl"], ["sg"], name="sig"),
             helper.make_node("Mul", ["sg", "sl"], ["m1"], name="mul"),
             helper.make_node("Transpose", ["m1"], ["t1"], name="tr", perm=[0, 1, 3, 2]),
             helper.make_node("ReduceMean", ["t1"], ["gm"], name="gmean", axes=[2, 3], keepdims=0),
             helper.make_node("Softmax", ["gm"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits, "opsmix")


def calibration_folder(folder, calibration: int = 32, held: int = 16, shape=(1, 3, 32, 32)):
    """``folder`` with seeded ``calib.npz`` (calibration samples) and ``held.npz`` (held-out
    samples for the SQNR checks) of the zoo models' ``input``; returns ``folder``."""
    rng = np.random.default_rng(0)
    np.savez(folder / "calib.npz", input=rng.standard_normal((calibration, *shape)).astype(np.float32))
    np.savez(folder / "held.npz", input=rng.standard_normal((held, *shape)).astype(np.float32))
    return folder


def residual_model(seed: int = 0) -> onnx.ModelProto:
    """x -> conv_a -> relu_a -> conv_b -> (+ x) -> relu_out -> head (1x1 conv) -> y: a ResNet
    basic block (the skip is the graph input, which conv_a reads too) and a layer after it."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["ca"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["ca"], ["ra"], name="relu_a"),
             helper.make_node("Conv", ["ra", "wb", "bb"], ["cb"], name="conv_b", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["cb", "x"], ["sum"], name="add"),
             helper.make_node("Relu", ["sum"], ["r"], name="relu_out"),
             helper.make_node("Conv", ["r", "wh"], ["y"], name="head")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                  {"wa": (rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32),
                   "ba": (rng.standard_normal(8) * 0.1).astype(np.float32),
                   "wb": (rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32),
                   "bb": (rng.standard_normal(8) * 0.1).astype(np.float32),
                   "wh": (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)}, "residual")


def assert_mace_reexport_identical(out, name: str, hw: str, full_integer: bool, tmp_path) -> None:
    """Exporting a MACE 8-bit port's float model again (with the biases bias correction changed)
    from its quantization.json, twice, gives the port's files byte for byte."""
    import json
    from pathlib import Path

    from converter.quantize.bias_correction import with_corrected_biases
    from converter.targets import get as get_target
    from converter.targets.base import ExportOptions

    params = json.loads((out / "quantization.json").read_text())["params"]
    spec = {"mode": "uint8", "params": params, "full_integer": full_integer}
    model = with_corrected_biases(onnx.load(str(out / "float.onnx")), onnx.load(str(out / "quantized.onnx")))
    for k in range(2):
        artifact = get_target("mace").export(model, tmp_path / f"a{k}", hw,
                                             ExportOptions(name=name, quantization=spec))
        for path in artifact.files:
            assert path.read_bytes() == (out / Path(path).name).read_bytes(), path.name


def assert_mace_reader_sqnr(result, out, hw: str, held, min_db: float, against=("float.onnx",)) -> None:
    """The written MACE 8-bit file, run by edgeconv's reader on held-out samples, is within
    ``min_db`` SQNR of each model in ``against`` (the float model, and the QDQ one)."""
    from converter.targets import get as get_target
    from converter.targets.base import Artifact
    from converter.verify.metrics import sqnr_db
    from converter.runtimes.onnxruntime import onnx_runner

    artifact = Artifact("mace", hw, [], out, result.report["artifact"]["meta"])
    references = [onnx_runner(str(out / name)) for name in against]
    for x in held:
        got = get_target("mace").run(artifact, {"input": x})
        for reference in references:
            expected = reference({"input": x})
            for key, value in got.items():
                assert sqnr_db(expected[key], value) >= min_db, key


def mace_ports(zoo_onnx_path, data, tmp_path_factory, hw: str, **options):
    """``name -> (PortResult, out dir)``: the zoo model ported once to MACE ``hw`` with the
    calibration set in ``data`` (calib.npz, verified on held.npz)."""
    from converter.port import port

    cache: dict = {}

    def ported(name: str):
        if name not in cache:
            out = tmp_path_factory.mktemp(f"mace-{hw}-{name}") / "out"
            cache[name] = port(str(zoo_onnx_path(name)), to="mace", hw=hw, out=out, calibration=str(data / "calib.npz"), inputs=str(data / "held.npz"), **options), out
        return cache[name]

    return ported


def read_mace_netdef(path):
    """The first NetDef of a MACE ``.pb``."""
    from converter.targets.mace._generated import mace_pb2

    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(path.read_bytes())
    return multi.net_def[0]


def two_input_add_port(tmp_path, hw: str, **options):
    """A seeded model adding two 1x4x5x5 inputs (ranges 1 and 3), saved as add.onnx and ported
    to MACE ``hw`` with 16 calibration samples of each, unverified (the tests check the numbers
    themselves); returns (PortResult, out dir, the generator, for the samples the test draws next)."""
    from converter.port import port

    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "c"], ["y"], name="add")], "one_add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 5, 5]) for n in ("a", "c")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])])
    path = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(tmp_path / "calib.npz", a=rng.standard_normal((16, 1, 4, 5, 5)).astype(np.float32),
             c=(rng.standard_normal((16, 1, 4, 5, 5)) * 3).astype(np.float32))
    out = tmp_path / "out"
    result = port(str(path), to="mace", hw=hw, out=out, calibration=str(tmp_path / "calib.npz"), verify=False, **options)
    return result, out, rng


def tiny_classifier_model(seed: int = 0) -> onnx.ModelProto:
    """x [1,3,16,16] -> conv1 -> Relu -> conv2 (stride 2) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm -> y [1,10]: ten class scores (top-1 agreement is measured), every op on every CPU
    target in int8/uint8/fp16."""
    rng = np.random.default_rng(seed)
    inits = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32),
             "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
             "w2": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
             "b2": (rng.standard_normal(16) * 0.1).astype(np.float32),
             "wf": (rng.standard_normal((10, 16)) * 0.5).astype(np.float32),
             "bf": (rng.standard_normal(10) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits, "tiny_classifier")

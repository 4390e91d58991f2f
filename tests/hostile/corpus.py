"""A seeded corpus of hostile and broken model inputs, and what edgeconv must answer to each.

``build_corpus(root, seed)`` writes every file under ``root`` and returns one :class:`Case` per
file: the command-line arguments and the exit code ``inspect``, ``check --to tflite`` and
``port --to tflite`` must give.  Payload files try to create ``root/PWNED-<case>`` when they are
unpickled or run; the test asserts that file never appears.

Classes covered (issue 17, plus what was handled before): code in pickles (.pt2 constants and
sample inputs, TorchScript data.pkl, torch.save modules), code in Keras configs (Lambda, foreign
modules) and TF graphs (PyFunc in a frozen graph, EagerPyFunc in a SavedModel's functions), a
TorchScript forward that never returns, an ONNX Loop that never ends, YAML alias bombs,
constant-folding bombs, huge declared or requested dims, old IR-3/opset-7 models, console markup
in names and paths, plus corrupt/truncated/empty files, wrong extensions, zips named .onnx,
unknown ops, external data outside the model directory, cycles, dynamic shapes, missing files,
directories that are not SavedModels, opsets newer than onnx knows.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OK, BAD, UNSUPPORTED, NEEDS_CUSTOM, UNVERIFIED, TIMEOUT = 0, 2, 3, 7, 8, 9


@dataclass
class Case:
    name: str
    model: str  # path relative to the corpus root
    expect: dict  # command -> exit code ("inspect", "check", "port")
    args: list = field(default_factory=list)  # extra arguments for every command
    check_args: list = field(default_factory=list)  # extra arguments for check and port
    inspect_args: list = field(default_factory=lambda: ["--normalized"])
    marker: str | None = None  # a file a payload would create: must never exist
    port_args: list = field(default_factory=list)  # extra arguments for port only
    target: str = "tflite"
    out_arg: str | None = None  # port's -o as given (default: the test's fresh directory)

    def argv(self, command: str, root: Path, out: Path) -> list[str]:
        model = str(root / self.model)
        if command == "inspect":
            return ["inspect", model, *self.inspect_args, *self.args]
        if command == "check":
            return ["check", model, "-t", self.target, *self.args, *self.check_args]
        out_arg = str(out) if self.out_arg is None else self.out_arg
        return ["port", model, "-t", self.target, "-o", out_arg, *self.args, *self.check_args, *self.port_args]


# ----------------------------------------------------------------------------------- builders


def _model(nodes, inputs, outputs, initializers=(), opset=17, ir=8, domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = ir
    return model


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def relu_model(shape=(1, 4), in_name="x", out_name="y") -> onnx.ModelProto:
    return _model([helper.make_node("Relu", [in_name], [out_name])], [_vi(in_name, list(shape))],
                  [_vi(out_name, list(shape))])


def conv_model(rng, ir: int, opset: int) -> onnx.ModelProto:
    """Conv+Relu as old model zoos stored it: weights are initializers *and* graph inputs."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    inputs = [_vi("x", [1, 3, 8, 8]), _vi("w", [4, 3, 3, 3]), _vi("b", [4])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, inputs, [_vi("y", [1, 4, 6, 6])], [w, b], opset=opset, ir=ir)


class _Payload:
    """Unpickling this runs ``touch marker`` (it must never happen)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch '{self.marker}'",))


def payload_pickle(marker: Path, protocol: int = 2) -> bytes:
    return pickle.dumps(_Payload(marker), protocol=protocol)


def _rewrite_zip(src: Path, dst: Path, replace) -> None:
    """Copy a zip, passing each member through ``replace(name, data) -> data``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, replace(info.filename, zin.read(info)))


def _torch_save_zip(data_pkl: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/version", "3\n")
        z.writestr("archive/byteorder", "little")
    return buf.getvalue()


def build_torch_files(root: Path) -> dict[str, Path]:
    """A real ExportedProgram and TorchScript files, made in a separate interpreter: torch's
    thread pools must not start in the caller (a process with threads cannot fork the
    loader's child, see converter.frontend.isolate, and would start a fresh interpreter per load)."""
    import subprocess
    import sys

    script = "import sys; from pathlib import Path; from tests.hostile.corpus import _build_torch_files; " \
             "_build_torch_files(Path(sys.argv[1]))"
    repo = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PYTHONPATH": str(repo)}
    subprocess.run([sys.executable, "-c", script, str(root)], check=True, env=env, capture_output=True)
    return {"pt2": root / "_base.pt2", "ts": root / "_base_ts.pt", "spin": root / "spin_forever.pt"}


def _build_torch_files(root: Path) -> dict[str, Path]:
    import torch

    torch.manual_seed(0)

    class Small(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return torch.relu(self.fc(x)) + torch.tensor([1.0, 2.0])

    class Spin(torch.nn.Module):
        def forward(self, x):
            while bool(x.sum() > -1.0):  # never false: x only grows
                x = x + 1.0
            return x

    files = {}
    program = torch.export.export(Small().eval(), (torch.zeros(1, 4),))
    files["pt2"] = root / "_base.pt2"
    torch.export.save(program, str(files["pt2"]))
    files["ts"] = root / "_base_ts.pt"
    torch.jit.save(torch.jit.script(Small().eval()), str(files["ts"]))
    files["spin"] = root / "spin_forever.pt"
    torch.jit.save(torch.jit.script(Spin()), str(files["spin"]))
    return files


def _graphdef_with(op: str) -> bytes:
    """A TF GraphDef (hand-encoded protobuf: node = 1 {name = 1, op = 2, input = 3})."""

    def field_bytes(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2]) + _varint(len(payload)) + payload

    def node(name: str, op_type: str, inputs=()) -> bytes:
        body = field_bytes(1, name.encode()) + field_bytes(2, op_type.encode())
        for i in inputs:
            body += field_bytes(3, i.encode())
        return field_bytes(1, body)

    return node("x", "Placeholder") + node("run", op, ["x"]) + node("y", "Identity", ["run"])


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2]) + _varint(len(payload)) + payload


def saved_model_with(op: str) -> bytes:
    """A SavedModel proto whose function library holds one ``op`` node (hand-encoded:
    SavedModel.meta_graphs = 2 -> MetaGraphDef.graph_def = 2 -> GraphDef.library = 2 ->
    FunctionDefLibrary.function = 1 -> FunctionDef.node_def = 3 -> NodeDef{name = 1, op = 2})."""
    node = _field(1, b"call") + _field(2, op.encode())
    library = _field(1, _field(3, node))
    graph = _field(1, _field(1, b"x") + _field(2, b"Placeholder")) + _field(2, library)
    return b"\x08\x01" + _field(2, _field(2, graph))


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def endless_loop_model() -> onnx.ModelProto:
    """An ONNX Loop of 10^15 iterations: onnxruntime would run it for days."""
    one = numpy_helper.from_array(np.ones((1, 4), np.float32), "one")
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "one"], ["v_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [1, 4])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [1, 4])], [one])
    trips = numpy_helper.from_array(np.array(10 ** 15, np.int64), "trips")
    cond = numpy_helper.from_array(np.array(True), "cond")
    return _model([helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)], [_vi("x", [1, 4])],
                  [_vi("y", [1, 4])], [trips, cond])


def alias_bomb_yaml(levels: int = 12, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"frameworks: {{tflite: {{ops: {{Relu: {{notes: *a{levels - 1}}}}}}}}}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ corpus


def build_corpus(root: Path, seed: int = 0, torch_files: bool = True, tf_files: bool = True) -> list[Case]:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    cases: list[Case] = []

    def add(name, model, expect, **kw):
        if isinstance(expect, int):
            expect = {"inspect": expect, "check": expect, "port": expect}
        cases.append(Case(name, model, expect, **kw))

    def save(model, name):
        onnx.save(model, str(root / name))
        return name

    good = save(relu_model(), "good.onnx")
    add("good", good, OK)

    # --- broken files (handled before issue 17)
    (root / "random_bytes.onnx").write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    add("random_bytes", "random_bytes.onnx", BAD)
    blob = conv_model(rng, 8, 17).SerializeToString()
    (root / "truncated.onnx").write_bytes(blob[: len(blob) // 2])
    add("truncated", "truncated.onnx", BAD)
    (root / "empty.onnx").write_bytes(b"")
    add("empty", "empty.onnx", BAD)
    (root / "model.txt").write_bytes(relu_model().SerializeToString())
    add("wrong_extension", "model.txt", BAD)
    with zipfile.ZipFile(root / "zip_named.onnx", "w") as z:
        z.writestr("a.txt", "not a model")
    add("zip_named_onnx", "zip_named.onnx", BAD)
    add("missing_file", "does_not_exist.onnx", BAD)
    (root / "not_a_savedmodel").mkdir(exist_ok=True)
    (root / "not_a_savedmodel" / "readme.txt").write_text("nothing here")
    add("plain_directory", "not_a_savedmodel", BAD)
    unknown = _model([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.hostile")],
                     [_vi("x", [1, 4])], [_vi("y", [1, 4])], domains=["com.hostile"])
    # An op no framework knows becomes a custom-layer scaffold: files written, kernels to write.
    add("unknown_op", save(unknown, "unknown_op.onnx"),
        {"inspect": OK, "check": UNSUPPORTED, "port": NEEDS_CUSTOM})
    outside = relu_model()
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../../../etc/passwd"), ("offset", "0"), ("length", "16")):
        weight.external_data.add(key=key, value=value)
    outside.graph.initializer.append(weight)
    outside.graph.node.insert(0, helper.make_node("Add", ["x", "w"], ["x2"]))
    outside.graph.node[1].input[0] = "x2"
    add("external_data_outside", save(outside, "external_outside.onnx"), BAD)
    cycle = _model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Add", ["x", "b"], ["y"])], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    add("cycle", save(cycle, "cycle.onnx"), BAD)
    dynamic = relu_model(shape=(1, 3, "h", "w"))
    add("dynamic_dims", save(dynamic, "dynamic.onnx"), {"inspect": OK, "check": OK, "port": BAD})
    add("opset_too_new", save(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 4])],
                                     [_vi("y", [1, 4])], opset=99), "opset99.onnx"), BAD)

    # --- code in pickles and model files (defect 1)
    marker = lambda case: root / f"PWNED-{case}"  # noqa: E731
    (root / "module_pickle.pt").write_bytes(_torch_save_zip(payload_pickle(marker("module_pickle"))))
    add("torch_save_pickle", "module_pickle.pt", BAD, args=["-s", "1x4"], marker="PWNED-module_pickle")
    keras_lambda = {"class_name": "Sequential", "config": {"layers": [
        {"class_name": "Lambda", "module": "keras.layers", "config": {
            "function": {"class_name": "__lambda__", "config": {"code": "4wEAAAAAAAAA", "defaults": None}}}}]}}
    with zipfile.ZipFile(root / "lambda.keras", "w") as z:
        z.writestr("config.json", json.dumps(keras_lambda))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.0.0"}))
    add("keras_lambda", "lambda.keras", BAD)
    keras_module = {"class_name": "system", "module": "os", "config": {"command": "touch PWNED"}}
    with zipfile.ZipFile(root / "foreign_module.keras", "w") as z:
        z.writestr("config.json", json.dumps(keras_module))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.0.0"}))
    add("keras_foreign_module", "foreign_module.keras", BAD)
    if tf_files:
        (root / "pyfunc.pb").write_bytes(_graphdef_with("PyFunc"))
        add("tf_pyfunc", "pyfunc.pb", BAD)
        (root / "eager_pyfunc_savedmodel").mkdir(exist_ok=True)
        (root / "eager_pyfunc_savedmodel" / "saved_model.pb").write_bytes(saved_model_with("EagerPyFunc"))
        add("savedmodel_eager_pyfunc", "eager_pyfunc_savedmodel", BAD)
    if torch_files:
        files = build_torch_files(root)

        def evil_constant(name, data):
            if name.endswith("model_constants_config.json"):
                config = json.loads(data)
                first = sorted(config["config"])[0]
                config["config"][first]["use_pickle"] = True
                return json.dumps(config).encode()
            if name.endswith("data/constants/tensor_0"):
                return payload_pickle(marker("pt2_constant"))
            return data

        _rewrite_zip(files["pt2"], root / "pickled_constant.pt2", evil_constant)
        add("pt2_pickled_constant", "pickled_constant.pt2", BAD, marker="PWNED-pt2_constant")

        def evil_sample(name, data):
            if "sample_inputs/" in name:
                return _torch_save_zip(payload_pickle(marker("pt2_sample")))
            return data

        _rewrite_zip(files["pt2"], root / "pickled_sample.pt2", evil_sample)
        add("pt2_pickled_sample_inputs", "pickled_sample.pt2", BAD, marker="PWNED-pt2_sample")
        _rewrite_zip(files["ts"], root / "torchscript_payload.pt",
                     lambda n, d: payload_pickle(marker("torchscript")) if n.endswith("/data.pkl") else d)
        add("torchscript_data_pkl", "torchscript_payload.pt", BAD, args=["-s", "1x4"], marker="PWNED-torchscript")
        # --- a forward that never returns (defect 2)
        add("torchscript_spins_forever", "spin_forever.pt", TIMEOUT, args=["-s", "1x4", "--timeout", "3"])

    # --- a graph that never ends in onnxruntime (defect 2, reference inference)
    add("onnx_endless_loop", save(endless_loop_model(), "endless_loop.onnx"),
        {"inspect": OK, "check": UNSUPPORTED, "port": TIMEOUT}, args=["--timeout", "3"])

    # --- YAML alias bomb (defect 3)
    (root / "alias_bomb.yaml").write_text(alias_bomb_yaml())
    add("yaml_alias_bomb", good, {"inspect": OK, "check": BAD, "port": BAD},
        check_args=["--matrix-overlay", str(root / "alias_bomb.yaml")])

    # --- constant-folding bomb (defect 4): 37 GiB if folded; its inference is refused (defect 5)
    shape = numpy_helper.from_array(np.array([100000, 100000], np.int64), "shape")
    bomb = _model([helper.make_node("ConstantOfShape", ["shape"], ["big"],
                                    value=numpy_helper.from_array(np.array([1.0], np.float32))),
                   helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
                   helper.make_node("Add", ["x", "s"], ["y"])], [_vi("x", [1, 4])], [_vi("y", [1, 4])], [shape])
    add("constant_of_shape_bomb", save(bomb, "fold_bomb.onnx"), {"inspect": OK, "check": OK, "port": BAD})
    # --- huge dims (defect 5): declared by the model, or asked for with -s
    add("huge_declared_dims", save(relu_model(shape=(1, 3, 99999, 99999)), "huge_dims.onnx"),
        {"inspect": OK, "check": OK, "port": BAD})
    add("huge_requested_dims", "dynamic.onnx", {"inspect": OK, "check": OK, "port": BAD},
        args=["-s", "1x3x99999x99999"])

    # --- old IR-3 / opset-7 model (defect 6)
    add("ir3_opset7", save(conv_model(rng, 3, 7), "ir3_opset7.onnx"), OK)

    # --- console markup in names and paths (defect 7)
    (root / "markup[").mkdir(exist_ok=True)
    names = relu_model(in_name="[/x]", out_name="[bold]y[/bold]")
    add("markup_in_names_and_path", save(names, "markup[/x].onnx"), OK)
    markup_op = _model([helper.make_node("Op[/x]", ["x"], ["y"], domain="com.hostile")],
                       [_vi("x", [1, 4])], [_vi("y", [1, 4])], domains=["com.hostile"])
    add("markup_in_op_type", save(markup_op, "markup_op.onnx"),
        {"inspect": OK, "check": UNSUPPORTED, "port": NEEDS_CUSTOM})
    cases += new_surfaces(root, rng, save)
    return cases


# ------------------------------------------------------- issue 28: the surfaces added since issue 17


def image_model(rng) -> onnx.ModelProto:
    """Conv+Relu on one 1x3x8x8 image input (weights as initializers only)."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])], [w])


def invalid_attribute_models() -> dict[str, onnx.ModelProto]:
    """Models onnxruntime refuses to run (attributes out of range): no reference, no verdict."""
    pads = numpy_helper.from_array(np.array([0, 0, 10, 10, 0, 0, 10, 10], np.int64), "pads")
    pad = _model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [_vi("x", [1, 3, 6, 6])],
                 [_vi("y", [1, 3, 26, 26])], [pads])
    w = numpy_helper.from_array(np.ones((3, 4, 3, 3), np.float32), "w")
    deconv = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_padding=[1000, 1000])],
                    [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 1010, 1010])], [w])
    shape = numpy_helper.from_array(np.array([7, 7], np.int64), "s")
    reshape = _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [_vi("x", [1, 3, 8, 8])], [_vi("y", [7, 7])],
                     [shape])
    return {"pad_reflect_beyond_input": pad, "convtranspose_output_padding": deconv, "reshape_wrong_size": reshape}


def png16(path: Path, gray: np.ndarray) -> Path:
    """A 16-bit grayscale PNG of ``gray`` (uint16), written by Pillow."""
    from PIL import Image

    Image.fromarray(gray.astype(np.uint16)).save(path)
    return path


def npy_header_only(path: Path, shape: tuple) -> Path:
    """An .npy file whose header declares ``shape`` (float32) and that holds 16 bytes of data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + b"\0" * 16)
    return path


def sleeping_runtime(path: Path, seconds: int = 987654) -> Path:
    """A --runtime tool that never answers: a shell whose child sleeps (``sleep SECONDS``, a
    number no other process uses, so a test can look for it afterwards)."""
    path.write_text(f"#!/bin/sh\nsleep {seconds}\necho done\n")
    path.chmod(0o755)
    return path


def alias_bomb_mapping(key: str, levels: int = 10, width: int = 9) -> str:
    """A YAML mapping whose ``key`` holds ``width ** levels`` values through nested aliases."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines + [f"{key}: *a{levels - 1}"]) + "\n"


def user_directory(path: Path) -> Path:
    """A directory of the user's, with names edgeconv uses for its own temp entries."""
    (path / ".old-x").mkdir(parents=True, exist_ok=True)
    (path / ".old-x" / "a").write_text("mine")
    (path / ".partial-y").write_text("mine")
    (path / ".edgeconv-notes").write_text("mine")
    (path / "index.html").write_text("mine")
    return path


def new_surfaces(root: Path, rng, save) -> list[Case]:
    """Calibration data, --preprocess, -o, --runtime and overlays (issue 28)."""
    cases: list[Case] = []

    def add(name, model, expect, **kw):
        if isinstance(expect, int):
            expect = {"inspect": expect, "check": expect, "port": expect}
        cases.append(Case(name, model, expect, **kw))

    both_bad = {"inspect": OK, "check": BAD, "port": BAD}
    port_bad = {"inspect": OK, "check": OK, "port": BAD}
    image = save(image_model(rng), "image_model.onnx")
    imgs = root / "imgs8"
    imgs.mkdir(exist_ok=True)
    from PIL import Image

    for k in range(4):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(imgs / f"{k}.png")

    def calibrate(source, *more):
        return ["--quantize", "int8", "--calibration", str(source), *more]

    # --- calibration data
    os.mkfifo(root / "fifo.onnx")
    add("fifo_as_model", "fifo.onnx", BAD, args=["--timeout", "5"])
    (root / "calib_fifo").mkdir(exist_ok=True)
    os.mkfifo(root / "calib_fifo" / "x.npz")
    add("calibration_fifo", image, port_bad, port_args=calibrate(root / "calib_fifo" / "x.npz", "--timeout", "5"))
    (root / "calib_huge_npy").mkdir(exist_ok=True)
    npy_header_only(root / "calib_huge_npy" / "x.npy", (1000000, 1, 3, 224, 224))
    add("calibration_npy_header_561gib", image, port_bad, port_args=calibrate(root / "calib_huge_npy"))
    np.savez(root / "calib_2000.npz", x=rng.random((2000, 1, 3, 8, 8), dtype=np.float32))
    add("calibration_2000_samples_subset", image, OK, port_args=calibrate(root / "calib_2000.npz"))
    (root / "calib_16bit").mkdir(exist_ok=True)
    for k in range(16):
        png16(root / "calib_16bit" / f"{k:02d}.png", rng.integers(256, 65536, (8, 8)))
    add("calibration_16bit_png", image, OK, port_args=calibrate(root / "calib_16bit", "--preprocess", "rgb"))
    (root / "calib_bomb").mkdir(exist_ok=True)
    Image.new("L", (12000, 12000)).save(root / "calib_bomb" / "big.png")
    add("calibration_decompression_bomb", image, port_bad,
        port_args=calibrate(root / "calib_bomb", "--preprocess", "rgb"))
    # --- --preprocess
    (root / "preprocess_bomb.yaml").write_text(alias_bomb_mapping("mean"))
    add("preprocess_alias_bomb", image, port_bad, port_args=calibrate(imgs, "--preprocess", str(root / "preprocess_bomb.yaml")))
    (root / "preprocess_inf.yaml").write_text("resize: [.inf, 12]\n")
    add("preprocess_resize_inf", image, port_bad, port_args=calibrate(imgs, "--preprocess", str(root / "preprocess_inf.yaml")))
    for name, spec in (("std_1e-50", "std=1e-50"), ("range_1e39", "range=1e39-1e40"), ("mean_1e308", "mean=1e308,std=1e-308")):
        add(f"preprocess_{name}", image, port_bad, port_args=calibrate(imgs, "--preprocess", spec))
    # --- -o
    add("out_dot", "good.onnx", port_bad, out_arg=".")
    add("out_empty", "good.onnx", port_bad, out_arg="")
    add("out_root", "good.onnx", port_bad, out_arg="/")
    add("out_users_directory", "good.onnx", port_bad, out_arg=str(user_directory(root / "users_dir")))
    add("out_model_directory", "good.onnx", port_bad, out_arg=str(root))
    # --- --runtime that never answers
    rt = sleeping_runtime(root / "rt_sleep.sh")
    add("runtime_never_answers", "good.onnx", {"inspect": OK, "check": OK, "port": TIMEOUT}, target="tnn",
        port_args=["--runtime", f"tnn={rt}", "--timeout", "3"])
    # --- overlays
    (root / "overlay_list_key.yaml").write_text("frameworks:\n  tflite:\n    ? [a, b]\n    : 1\n")
    add("overlay_list_key", "good.onnx", both_bad, check_args=["--matrix-overlay", str(root / "overlay_list_key.yaml")])
    (root / "overlay_line_5000_digits.yaml").write_text(
        "frameworks:\n  tnn:\n    ops:\n      Relu:\n        supported: [arm]\n"
        f"        source: Tencent/TNN@f0cb081:doc/en/user/support_en.md#L{'9' * 5000}\n")
    add("overlay_line_5000_digits", "good.onnx", both_bad, target="tnn",
        check_args=["--matrix-overlay", str(root / "overlay_line_5000_digits.yaml")])
    # --- no reference: never ok
    for name, model in invalid_attribute_models().items():
        add(name, save(model, f"{name}.onnx"), {"inspect": OK, "check": OK, "port": UNVERIFIED})
    control = _model([helper.make_node("Op\x01", ["x"], ["y"], domain="com.hostile")], [_vi("x", [1, 4])],
                     [_vi("y", [1, 4])], domains=["com.hostile"])
    add("control_char_in_op_type", save(control, "control_op.onnx"),
        {"inspect": OK, "check": UNSUPPORTED, "port": NEEDS_CUSTOM})
    return cases


@dataclass
class ManifestCase:
    """A batch manifest and the exit code ``batch`` must give (``args``: extra flags)."""

    name: str
    manifest: str  # relative to the corpus root
    expect: int
    args: list = field(default_factory=list)
    #: The output directory, when it is the user's (it must be byte-identical after the run).
    users_dir: str | None = None


def build_manifests(root: Path) -> list[ManifestCase]:
    """Hostile batch manifests over the files :func:`build_corpus` wrote into ``root``."""
    cases: list[ManifestCase] = []

    def add(name, text, expect, **kw):
        (root / f"{name}.yaml").write_text(text)
        cases.append(ManifestCase(name, f"{name}.yaml", expect, **kw))

    good = f"models:\n  - path: {root / 'good.onnx'}\n"
    tflite = "targets: [{to: tflite, hw: cpu}]\n"
    add("manifest_alias_bomb", alias_bomb_mapping("defaults") + tflite + good, BAD)
    add("manifest_list_key", tflite + good + "    ? [a, b]\n    : 1\n", BAD)
    add("manifest_fifo_model", tflite + f"models:\n  - path: {root / 'fifo.onnx'}\n", BAD)
    add("manifest_fifo_calibration", tflite + good + f"    quantize: int8\n    calibration: {root / 'calib_fifo' / 'x.npz'}\n",
        BAD)
    add("manifest_preprocess_bomb", tflite + f"models:\n  - path: {root / 'image_model.onnx'}\n    quantize: int8\n"
        f"    calibration: {root / 'imgs8'}\n    preprocess: {root / 'preprocess_bomb.yaml'}\n", BAD)
    users = user_directory(root / "users_batch_dir")
    add("manifest_output_users_directory", f"output: {users}\n" + tflite + good, BAD, users_dir="users_batch_dir")
    add("manifest_runtime_never_answers", f"runtimes: {{tnn: {root / 'rt_sleep.sh'}}}\n"
        "targets: [{to: tnn, hw: arm}]\n" + good + "    timeout: 3\n", BATCH_FAILED)
    add("manifest_control_char_op", tflite + f"models:\n  - path: {root / 'control_op.onnx'}\n", BATCH_FAILED)
    add("manifest_ray_unreachable", tflite + good, BAD, args=["--executor", "ray", "--address", "127.0.0.1:1"])
    return cases


BATCH_FAILED = 6

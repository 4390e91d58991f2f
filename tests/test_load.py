"""Every loader path, and every kind of bad input, as the user meets them."""

from __future__ import annotations

import os
import time
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from converter.demo import zoo
from converter.errors import BadInput, MissingExtra
from converter.frontend.load import load_model
from converter.frontend.source import parse_shape_flags
from converter.ir.onnx_file import save_onnx
from converter.frontend.normalize import normalize

ROOT = Path(__file__).resolve().parents[1]


def _ort(model: onnx.ModelProto, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _small_torch():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 2, 1)).eval()


# ------------------------------------------------------------------------------ shape flags


def test_parse_shape_flags():
    assert parse_shape_flags(["x=1x3x8x8", "2x5"]) == {"x": (1, 3, 8, 8), "": (2, 5)}
    for bad in (["x=1x3xx8"], ["x=0x3"], ["x=a"], ["x=1", "x=2"]):
        with pytest.raises(BadInput):
            parse_shape_flags(bad)


# --------------------------------------------------------------------------------------- ONNX


def test_onnx_with_external_data(tmp_path, zoo_model):
    model = zoo_model("resnet")
    path = tmp_path / "ext.onnx"
    onnx.save_model(onnx.ModelProto.FromString(model.SerializeToString()), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").stat().st_size > 50_000
    loaded = load_model(path)
    feeds = zoo.example_inputs("resnet")
    np.testing.assert_array_equal(_ort(loaded, feeds)[0], _ort(model, feeds)[0])


def test_save_onnx_is_atomic_and_roundtrips(tmp_path, zoo_model):
    model = zoo_model("unet")
    out = save_onnx(model, tmp_path / "u.onnx")
    assert out.read_bytes() == model.SerializeToString()
    assert [p.name for p in tmp_path.iterdir()] == ["u.onnx"]  # no temp file left behind


@pytest.mark.parametrize("corrupt", ["truncated", "garbage", "empty"])
def test_corrupt_onnx(tmp_path, zoo_onnx_path, corrupt):
    data = Path(zoo_onnx_path("resnet")).read_bytes()
    bad = {"truncated": data[: len(data) // 3], "garbage": os.urandom(4096), "empty": b""}[corrupt]
    path = tmp_path / "bad.onnx"
    path.write_bytes(bad)
    with pytest.raises(BadInput, match="bad.onnx"):
        load_model(path)


def test_wrong_extension_missing_file_and_plain_directory(tmp_path, zoo_onnx_path):
    txt = tmp_path / "model.txt"
    txt.write_bytes(Path(zoo_onnx_path("resnet")).read_bytes())
    with pytest.raises(BadInput, match="unrecognized model file extension '.txt'"):
        load_model(txt)
    with pytest.raises(BadInput, match="no such file"):
        load_model(tmp_path / "missing.onnx")
    with pytest.raises(BadInput, match="not a TF SavedModel"):
        load_model(tmp_path)


def test_torch_file_named_onnx(tmp_path):
    import torch

    path = tmp_path / "model.onnx"
    torch.jit.save(torch.jit.script(_small_torch()), str(path))
    with pytest.raises(BadInput, match="zip archive"):
        load_model(path)


# -------------------------------------------------------------------------------------- torch


def test_torchscript_archive(tmp_path):
    import torch

    net = _small_torch()
    path = tmp_path / "net.pt"
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 3, 8, 8)), str(path))
    with pytest.raises(BadInput, match="--input-shape"):
        load_model(path)
    model = normalize(load_model(path, {"": (1, 3, 8, 8)}))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = net(torch.from_numpy(x)).detach().numpy()
    got = _ort(model, {model.graph.input[0].name: x})[0]
    assert np.max(np.abs(got - expected)) <= 1e-5


def test_scripted_archive_with_named_input(tmp_path):
    import torch

    path = tmp_path / "net.pt"
    torch.jit.save(torch.jit.script(_small_torch()), str(path))
    model = load_model(path, {"input": (1, 3, 6, 6)})
    assert [i.name for i in model.graph.input] == ["input"]
    with pytest.raises(BadInput, match="inputs are: input"):
        load_model(path, {"x": (1, 3, 6, 6)})


def test_exported_program(tmp_path):
    import torch

    net = _small_torch()
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(1, 3, 8, 8),)), str(path))
    model = normalize(load_model(path))
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = net(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(_ort(model, {model.graph.input[0].name: x})[0] - expected)) <= 1e-5


def test_pickled_module_is_refused_unless_trusted(tmp_path):
    import torch

    net = _small_torch()
    path = tmp_path / "pickled.pt"
    torch.save(net, str(path))
    with pytest.raises(BadInput, match="runs arbitrary code.*--trust-pickle"):
        load_model(path, {"": (1, 3, 8, 8)})
    model = normalize(load_model(path, {"": (1, 3, 8, 8)}, trust_pickle=True))
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = net(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(_ort(model, {model.graph.input[0].name: x})[0] - expected)) <= 1e-5


def test_state_dict_is_explained(tmp_path):
    import torch

    path = tmp_path / "weights.pt"
    torch.save(_small_torch().state_dict(), str(path))
    with pytest.raises(BadInput, match="state_dict"):
        load_model(path)


def test_corrupt_torch_file(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(BadInput, match="broken.pt"):
        load_model(path)


# ----------------------------------------------------------------------------------------- TF


def test_tf_extra_missing_is_one_line(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in ("tensorflow", "tf2onnx") else real(n, *a))
    path = tmp_path / "m.tflite"
    path.write_bytes(b"x")
    with pytest.raises(MissingExtra, match=r"pip install 'edgeconv\[tf\]'"):
        load_model(path)


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    out = tmp_path_factory.mktemp("tf")
    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input((8, 8, 3), batch_size=1, name="img")
    x = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(5)(x))
    model.save(out / "m.keras")
    model.save(out / "m.h5")
    model.export(str(out / "saved"), verbose=False)
    fn = tf.function(lambda t: model(t)).get_concrete_function(tf.TensorSpec((1, 8, 8, 3), tf.float32, name="img"))
    (out / "m.pb").write_bytes(convert_variables_to_constants_v2(fn).graph.as_graph_def().SerializeToString())
    (out / "m.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype(np.float32)
    return out, x, model(x).numpy()


@pytest.mark.parametrize("name", ["m.keras", "m.h5", "saved", "m.pb", "m.tflite"])
def test_tensorflow_sources(keras_files, name):
    out, x, expected = keras_files
    model = normalize(load_model(out / name))
    got = _ort(model, {model.graph.input[0].name: x})[0]
    assert np.max(np.abs(got - expected)) <= 1e-5


def test_tensorflow_conversion_is_time_limited(keras_files):
    """tf2onnx runs in the killable child, like torch's exporter: --timeout stops it (exit 9)."""
    from converter.errors import TimedOut

    out, _, _ = keras_files
    start = time.monotonic()
    with pytest.raises(TimedOut, match=r"saved: converting the TensorFlow model did not finish within 0\.2 s"):
        load_model(out / "saved", timeout=0.2)
    assert time.monotonic() - start < 30  # stopped, not waited for


def test_corrupt_frozen_graph(tmp_path):
    pytest.importorskip("tensorflow")
    path = tmp_path / "bad.pb"
    path.write_bytes(os.urandom(64))
    with pytest.raises(BadInput, match="bad.pb"):
        load_model(path)


# ------------------------------------------------------------------------------------- CLI


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "converter", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("content,name", [(b"\x08\x07garbage", "bad.onnx"), (b"hello", "model.txt"),
                                           (None, "missing.onnx")])
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, content, name):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "out" / "norm.onnx"
    res = _cli("normalize", str(path), "-o", str(out))
    assert res.returncode == 2
    assert res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("edgeconv: error: ")
    assert not out.exists() and not (tmp_path / "out").exists()


def test_cli_unsafe_pickle_and_bad_flag(tmp_path):
    import torch

    path = tmp_path / "pickled.pt"
    torch.save(_small_torch(), str(path))
    res = _cli("inspect", str(path), "--input-shape", "1x3x8x8")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--trust-pickle" in res.stderr
    res = _cli("inspect", str(path), "--no-such-flag")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith("edgeconv: error: No such option: --no-such-flag")


def test_cli_normalize_and_inspect_json(tmp_path, zoo_onnx_path):
    import json

    out = tmp_path / "det.onnx"
    res = _cli("normalize", str(zoo_onnx_path("detector")), "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["nodes_before"] == 19 and info["nodes_after"] == 17 and info["max_abs_error"] <= 1e-5
    res = _cli("inspect", str(out), "--json")
    desc = json.loads(res.stdout)
    assert desc["outputs"] == [{"name": "scores", "shape": [1, 4, 5, 8, 8], "dtype": "float32"},
                               {"name": "boxes", "shape": [1, 16, 8, 8], "dtype": "float32"}]
    assert desc["op_histogram"]["Conv"] == 6 and desc["opset"] == 17 and desc["parameters"] == 18418  # 18,408 weights + two Reshape shapes of 5


def test_help_does_not_import_heavy_frameworks():
    code = ("import sys; from converter.cli import main; rc = main(['--help']);"
            "heavy = [m for m in ('torch', 'tensorflow', 'coremltools', 'onnx', 'onnxruntime') if m in sys.modules];"
            "print(rc, heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.stdout.strip().splitlines()[-1] == "0 []"


def test_exported_program_with_opset18_reductions(tmp_path):
    """torch.export's ONNX is opset 18 (ReduceMean with noop_with_empty_axes): normalized to 17."""
    import torch

    net = zoo.build("resnet")
    path = tmp_path / "resnet.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(1, 3, 32, 32),)), str(path))
    model = normalize(load_model(path))
    x = zoo.example_inputs("resnet")["input"]
    expected = net(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(_ort(model, {model.graph.input[0].name: x})[0] - expected)) <= 1e-5


def test_binary_file_as_matrix_overlay_is_one_line(tmp_path, zoo_onnx_path):
    from converter.matrix import load_matrix

    with pytest.raises(BadInput, match="not a YAML file"):
        load_matrix(overlays=[zoo_onnx_path("resnet")])
    with pytest.raises(BadInput, match="is a directory|not found"):
        load_matrix(overlays=[tmp_path])


def test_torchscript_outputs_get_readable_names(tmp_path):
    import torch

    net = zoo.build("detector")  # two outputs
    path = tmp_path / "det.pt"
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 3, 32, 32)), str(path))
    model = load_model(path, {"": (1, 3, 32, 32)})
    assert [o.name for o in model.graph.output] == ["output_0", "output_1"]


def test_all_tensors_walks_what_onnx_external_data_helper_walks():
    """load.all_tensors replaces onnx's private walker: the same tensors, subgraphs included."""
    from onnx import external_data_helper, helper

    from converter.frontend.load import all_tensors

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
            np.full((2,), value, np.float32), name + "_t"))

    branch = lambda v: helper.make_graph(  # noqa: E731
        [const(f"c{v}", v)], f"b{v}", [], [helper.make_tensor_value_info(f"c{v}", onnx.TensorProto.FLOAT, [2])],
        initializer=[onnx.numpy_helper.from_array(np.zeros(1, np.float32), f"i{v}")])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch(1), else_branch=branch(2)), const("k", 3.0)],
        "g", [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        initializer=[onnx.numpy_helper.from_array(np.ones(3, np.float32), "w")])
    model = helper.make_model(graph)
    ours = sorted(t.name for t in all_tensors(model))
    assert ours == sorted(t.name for t in external_data_helper._get_all_tensors(model))
    assert ours == ["c1_t", "c2_t", "i1", "i2", "k_t", "w"]

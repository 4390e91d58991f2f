"""What users declare about inputs (issue 27, items 3 and 4): ``-s name=1x128:int64``,
``--input-range``, the manifest's and the API's spelling, what random inputs draw for integer
inputs, and calibration/verification data in the natural [N, ...] layout.  Every mistake is one
line (exit 2), never a traceback, and nothing is written."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.errors import BadInput
from converter.frontend.declared_inputs import (check_declared, check_range, parse_input_flags, ranges_from_value,
                                                shapes_from_value)
from converter.port.request import PortRequest
from converter.runtimes.feeds import random_inputs, samples_from_arrays
from quant_models import squash_model
from test_integer_inputs import VOCAB, lookup_model


def test_shape_flags_with_and_without_a_type():
    shapes, dtypes = parse_input_flags(["input_ids=1x128:int64", "attention_mask=1x128:bool", "1x3x8x8"])
    assert shapes == {"input_ids": (1, 128), "attention_mask": (1, 128), "": (1, 3, 8, 8)}
    assert dtypes == {"input_ids": "int64", "attention_mask": "bool"}
    assert parse_input_flags(["x=2x3:float16", "y=4:int32"])[1] == {"x": "float16", "y": "int32"}


@pytest.mark.parametrize("flag, message", [
    ("ids=1x128:int8", "--input-shape 'ids=1x128:int8': unknown element type 'int8'; choose one of: float32, "
                       "float16, int64, int32, bool"),
    ("ids=1x128:", "unknown element type ''"),
    ("ids=1x128x:int64", "expected name=1x3x224x224 or name=1x128:int64"),
    ("ids=0x128:int64", "every dimension must be positive"),
])
def test_bad_shape_flags_are_one_line(flag, message):
    with pytest.raises(BadInput) as info:
        parse_input_flags([flag])
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name, dtype, span, message", [
    ("ids", "int32", (0, 3e9), "--input-range ids=0:3e+09: outside what int32 holds ([-2.14748e+09, 2.14748e+09))"),
    ("ids", "int64", (0.5, 9), "input 'ids' is int64; give whole numbers"),
    ("x", "float16", (0, 1e5), "outside what float16 holds"),
    ("m", "bool", (0, 3), "outside what bool holds ([0, 2))"),
])
def test_a_range_the_type_cannot_hold_is_one_line(name, dtype, span, message):
    with pytest.raises(BadInput) as info:
        check_range(name, dtype, span)
    assert message in str(info.value)
    check_range(name, dtype, (0, 2))  # a range every one of these types holds


def test_api_and_manifest_spellings_agree_with_the_flags():
    flags = parse_input_flags(["input_ids=1x16:int64", "pixels=1x3x8x8"])
    assert shapes_from_value(["input_ids=1x16:int64", "pixels=1x3x8x8"]) == flags
    assert shapes_from_value({"input_ids": "1x16:int64", "pixels": [1, 3, 8, 8]}) == flags
    assert ranges_from_value({"input_ids": [0, 30522], "pixels": "0:1"}) == ranges_from_value(
        ["input_ids=0:30522", "pixels=0:1"]) == {"input_ids": (0.0, 30522.0), "pixels": (0.0, 1.0)}
    request = PortRequest.from_flags("m.pt", input_shapes={"input_ids": "1x16:int64"},
                                     input_ranges={"input_ids": (0, 30522)})
    assert request.source.input_shapes == {"input_ids": (1, 16)}
    assert request.source.input_dtypes == {"input_ids": "int64"}
    assert request.verify.ranges == {"input_ids": (0.0, 30522.0)}
    with pytest.raises(BadInput, match="input_shapes 'ids': expected a list of positive integers"):
        PortRequest.from_flags("m.pt", input_shapes={"ids": [1, True]})
    bad = PortRequest.from_flags("m.pt", input_shapes=["ids=1x8:int32"], input_ranges=["ids=0:3000000000"])
    with pytest.raises(BadInput, match="outside what int32 holds"):  # before any model is loaded
        bad.validate()


def masked_encoder_inputs_model() -> onnx.ModelProto:
    """Four integer inputs named as a tokenizer names them (outputs: their sum as float)."""
    names = ["input_ids", "attention_mask", "position_ids", "token_type_ids"]
    nodes = [helper.make_node("Cast", [n], [f"{n}_f"], to=TensorProto.FLOAT) for n in names]
    nodes += [helper.make_node("Sum", [f"{n}_f" for n in names], ["output"])]
    graph = helper.make_graph(nodes, "tokens", [helper.make_tensor_value_info(n, TensorProto.INT64, [2, 12])
                                                for n in names],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 12])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_integer_inputs_draw_what_their_names_say():
    model = masked_encoder_inputs_model()
    sample = random_inputs(model, seed=0, ranges={"input_ids": (100, 30522), "": (5.0, 6.0)})[0]
    ids = sample["input_ids"]
    assert ids.dtype == np.int64 and ids.min() >= 100 and ids.max() < 30522 and ids.max() > 10000
    assert (sample["attention_mask"] == 1).all()
    assert np.array_equal(sample["position_ids"], np.broadcast_to(np.arange(12), (2, 12)))
    assert set(np.unique(sample["token_type_ids"])) == {0, 1}  # BERT's two segments; the bare range is for floats
    default = random_inputs(model, seed=0)[0]["input_ids"]
    assert set(np.unique(default)) <= {0, 1, 2, 3}  # small ids by default: valid for any embedding
    ranged = random_inputs(model, seed=0, ranges={"attention_mask": (0, 2)})[0]["attention_mask"]
    assert set(np.unique(ranged)) == {0, 1}  # a given range wins over the name
    with pytest.raises(BadInput, match="input 'input_ids' is int64; give whole numbers"):
        random_inputs(model, ranges={"input_ids": (0.0, 9.5)})


def test_declared_types_must_agree_with_a_file_that_carries_its_own():
    model = lookup_model()
    check_declared(model, {"input_ids": "int64", "": "int64"}, {"input_ids": (0, 50)})
    with pytest.raises(BadInput, match=r"input 'input_ids' of m.onnx is int64; --input-shape declares int32"):
        check_declared(model, {"input_ids": "int32"}, {}, "m.onnx")
    with pytest.raises(BadInput, match=r"no input named 'ids' in the model; its inputs are: input_ids, attention_mask"):
        check_declared(model, {}, {"ids": (0, 5)})


# -- the command line: one line, exit 2, nothing written -------------------------------------------


def run_port(capsys, *args) -> tuple[int, str]:
    from converter.cli import main

    code = main(["port", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("flags, message", [
    (["-s", "input_ids=1x8:long"], "unknown element type 'long'; choose one of: float32, float16, int64, int32, bool"),
    (["-s", "input_ids=1x8:int32"], "input 'input_ids' of {model} is int64; --input-shape declares int32"),
    (["--input-range", "token_ids=0:50"], "no input named 'token_ids' in the model; its inputs are: input_ids, "
                                          "attention_mask"),
    (["--input-range", "input_ids=0:1e20"], "--input-range input_ids=0:1e+20: outside what int64 holds"),
    (["--input-range", "input_ids=9:3"], "--input-range 'input_ids=9:3': expected name=LOW:HIGH with LOW < HIGH"),
])
def test_cli_mistakes_are_one_line(tmp_path, capsys, flags, message):
    model = tmp_path / "lookup.onnx"
    onnx.save(lookup_model(), model)
    out = tmp_path / "out"
    code, text = run_port(capsys, model, "--to", "tflite", "-o", out, *flags)
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("edgeconv: error: "), text
    assert message.format(model=model) in lines[0]
    assert "Traceback" not in text and not out.exists()


def test_cli_port_draws_the_declared_range_and_says_so(tmp_path, capsys):
    model = tmp_path / "lookup.onnx"
    onnx.save(lookup_model(), model)
    code, text = run_port(capsys, model, "--to", "tflite", "-o", tmp_path / "out", "--json",
                          "--input-range", f"input_ids=0:{VOCAB}")
    assert code == 0, text
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    source = report["verification"]["input_source"]
    assert f"input_ids [0, {VOCAB})" in source and "masks all ones" in source, source


def test_cli_verify_reads_an_mlpackage_of_a_port(tmp_path, capsys):
    """``edgeconv verify MODEL out/x.mlpackage``: the package directory is the file a CoreML port
    wrote (its report lists the files inside)."""
    pytest.importorskip("coremltools")
    from converter.cli import main

    model = tmp_path / "lookup.onnx"
    onnx.save(lookup_model(), model)
    assert run_port(capsys, model, "--to", "coreml", "-o", tmp_path / "out")[0] == 0
    code = main(["verify", str(model), str(tmp_path / "out" / "lookup.mlpackage"), "--json",
                 "--input-range", f"input_ids=0:{VOCAB}"])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(text)
    stage = report["stages"][0]
    assert stage["status"] == "pass" and stage["outputs"][0]["metrics"]["max_abs"] == 0.0
    assert f"input_ids [0, {VOCAB})" in report["input_source"], report["input_source"]


# -- calibration and verification data: the sample axis is the first -------------------------------


def test_calibration_with_an_nchw_array_for_a_1xcxhxw_input(tmp_path):
    """32 samples as [32, 3, 8, 8] (a data loader's layout) for a 1x3x8x8 input: 32 samples of
    [1, 3, 8, 8]; the same data as [32, 1, 3, 8, 8] gives the same samples."""
    from converter.quantize.calibration import load_calibration

    data = np.random.default_rng(0).standard_normal((32, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "nchw.npz", x=data)
    np.savez(tmp_path / "n1chw.npz", x=data[:, None])
    natural = load_calibration(tmp_path / "nchw.npz", squash_model())
    stacked = load_calibration(tmp_path / "n1chw.npz", squash_model())
    assert len(natural.samples) == len(stacked.samples) == 32 and natural.warnings == []
    for a, b, want in zip(natural.samples, stacked.samples, data):
        assert a["x"].shape == (1, 3, 8, 8) and np.array_equal(a["x"], want[None]) and np.array_equal(b["x"], a["x"])
    (tmp_path / "npy").mkdir()  # a directory of .npy files in the same layout
    np.save(tmp_path / "npy" / "a.npy", data[:20])
    np.save(tmp_path / "npy" / "b.npy", data[20:])
    from_dir = load_calibration(tmp_path / "npy", squash_model())
    assert len(from_dir.samples) == 32 and np.array_equal(from_dir.samples[31]["x"], data[31][None])


def batch_model(batch: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "b",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_sample_axis_with_a_batch_of_several():
    data = np.zeros((6, 3, 4, 4), np.float32)
    assert len(samples_from_arrays({"x": data[:2]}, batch_model(2))) == 1  # exactly the input's shape: one
    assert len(samples_from_arrays({"x": data.reshape(3, 2, 3, 4, 4)}, batch_model(2))) == 3
    with pytest.raises(BadInput) as info:
        samples_from_arrays({"x": data}, batch_model(2), source="--calibration c.npz")
    assert str(info.value) == ("--calibration c.npz: 'x' has shape [6, 3, 4, 4] for an input of shape [2, 3, 4, 4]: "
                               "with a batch of 2, give one sample as [2, 3, 4, 4] or N samples as "
                               "['N', 2, 3, 4, 4]")
    with pytest.raises(BadInput, match=r"sample shape \[6, 3, 5, 4\] does not fit the input shape \[1, 3, 4, 4\]"):
        samples_from_arrays({"x": np.zeros((6, 3, 5, 4), np.float32)}, batch_model(1))


def test_int8_port_calibrated_on_an_nchw_array(tmp_path):
    """The whole port: ``--quantize int8 --calibration`` with [32, 3, 8, 8] for a 1x3x8x8 input."""
    from converter.port import port

    data = np.random.default_rng(1).standard_normal((32, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=data)
    model = tmp_path / "squash.onnx"
    onnx.save(squash_model(), model)
    result = port(str(model), to="tflite", out=tmp_path / "out", quantize="int8", calibration=str(tmp_path / "calib.npz"))
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["calibration"]["samples"] == 32
    assert quant["file_verification"]["ok"] is True

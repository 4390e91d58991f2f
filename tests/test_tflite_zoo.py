"""The whole zoo through the TFLite target: LiteRT runs every file and matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from converter.demo import zoo
from converter.errors import BadInput, Unsupported
from converter.targets import get as get_target
from converter.targets.base import ExportOptions
from tflite_helpers import (export, internal_transposes, litert_ops, max_error, op_names, opcodes,
                            reference)

CNNS = ("mobilenetv2", "resnet", "unet", "superres", "detector", "normalized_input")


@pytest.mark.parametrize("keep_nchw_io", [False, True], ids=["nhwc_io", "nchw_io"])
@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_model_matches_onnxruntime(zoo_model, tmp_path, name, keep_nchw_io):
    model = zoo_model(name)
    art = export(model, tmp_path, name, keep_nchw_io=keep_nchw_io)
    assert art.files == [tmp_path / f"{name}.tflite"]
    feeds = zoo.example_inputs(name, seed=0)
    got = get_target("tflite").run(art, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    assert max_error(reference(model, feeds), got) <= 1e-4
    ops = op_names(art.files[0])  # loads with the builtin-only resolver: no Flex, no custom ops
    assert ops and not any(op.startswith("Flex") or op == "CUSTOM" for op in ops)
    for spec in art.meta["inputs"]:
        assert spec["layout"] == ("NCHW" if keep_nchw_io else "NHWC") or len(spec["shape"]) != 4


@pytest.mark.parametrize("name", CNNS)
def test_cnn_has_no_transpose_inside(zoo_model, tmp_path, name):
    # The detector's class softmax reduces 5 classes: its logits and objectness go to ONNX order
    # (n, anchors, classes, h, w), where the classes are strided (layout.strided_layout), and the
    # rank-5 `scores` output is then already in the order it is handed out in.
    inside = 2 if name == "detector" else 0
    for keep in (False, True):
        art = export(zoo_model(name), tmp_path, f"{name}_{keep}", keep_nchw_io=keep)
        assert internal_transposes(art.files[0]) == inside
    art = export(zoo_model(name), tmp_path, name)
    assert op_names(art.files[0]).count("TRANSPOSE") == inside  # NHWC interface: none at the ends


def test_exact_op_counts(zoo_model, tmp_path):
    """Activations fused, GELU kept whole, LayerNorm decomposed into builtins."""
    counts = {}
    for name in ("resnet", "mobilenetv2", "transformer", "superres", "unet"):
        art = export(zoo_model(name), tmp_path, name)
        ops = op_names(art.files[0])
        counts[name] = {op: ops.count(op) for op in set(ops)}
    resnet = counts["resnet"]
    assert resnet["CONV_2D"] == 9 and resnet["FULLY_CONNECTED"] == 1 and resnet["ADD"] == 3
    assert "RELU" not in resnet  # all 7 fused (into 6 convs and... the residual ADDs)
    mobilenet = counts["mobilenetv2"]
    assert mobilenet["CONV_2D"] + mobilenet["DEPTHWISE_CONV_2D"] == 13 and mobilenet["DEPTHWISE_CONV_2D"] == 4
    assert "RELU6" not in mobilenet
    transformer = counts["transformer"]
    # GELU kept whole (no Erf polynomial: no SIGN, no EXP of its own); the one EXP is the attention
    # softmax over 16 keys, decomposed where the keys are strided (layout.SHORT_SOFTMAX_AXIS)
    assert transformer["GELU"] == 1 and transformer["EXP"] == 1 and "SIGN" not in transformer
    assert "SOFTMAX" not in transformer and transformer["TRANSPOSE"] == 6
    assert transformer["FULLY_CONNECTED"] == 4 and "ADD" in transformer
    assert transformer["RSQRT"] == 2 and transformer["MEAN"] == 4  # two LayerNorms
    assert counts["superres"] == {"CONV_2D": 5, "PRELU": 5, "TRANSPOSE_CONV": 1, "STRIDED_SLICE": 1}
    assert counts["unet"] == {"CONV_2D": 6, "MAX_POOL_2D": 2, "TRANSPOSE_CONV": 2, "CONCATENATION": 2}


def test_op_versions_follow_op_version_cc(zoo_model, tmp_path):
    versions = opcodes(export(zoo_model("superres"), tmp_path, "s").files[0])
    assert versions["TRANSPOSE_CONV"] == 3  # bias input (op_version.cc: inputs.size() == 4)
    assert versions["CONV_2D"] == 1 and versions["PRELU"] == 1
    versions = opcodes(export(zoo_model("transformer"), tmp_path, "t").files[0])
    assert versions["FULLY_CONNECTED"] == 5  # keep_num_dims
    assert versions["TRANSPOSE"] == 1 and versions["GELU"] == 1
    versions = opcodes(export(zoo_model("detector"), tmp_path, "d").files[0])
    assert versions["SUB"] == 3  # 5-D broadcast (logits - max)


def test_export_is_deterministic(zoo_model, tmp_path):
    for name in ("transformer", "detector"):
        a = export(zoo_model(name), tmp_path / "a", name).files[0].read_bytes()
        b = export(zoo_model(name), tmp_path / "b", name).files[0].read_bytes()
        assert a == b


def test_fp16_weights_halve_the_file_and_stay_close(zoo_model, tmp_path):
    model = zoo_model("resnet")
    f32 = export(model, tmp_path / "f32", "resnet")
    f16 = export(model, tmp_path / "f16", "resnet", fp16_weights=True)
    size32, size16 = f32.files[0].stat().st_size, f16.files[0].stat().st_size
    assert size16 < 0.56 * size32
    ops = op_names(f16.files[0])
    assert ops.count("DEQUANTIZE") >= 9
    assert opcodes(f16.files[0])["DEQUANTIZE"] == 3  # float16 input
    feeds = zoo.example_inputs("resnet", seed=1)
    err = max_error(reference(model, feeds), get_target("tflite").run(f16, feeds))
    assert 0 < err <= 1e-2


def test_identical_constants_share_one_buffer(tmp_path):
    from onnx import helper

    from converter.targets.tflite._generated import schema_generated as fb
    from tflite_helpers import make_model

    w = np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": (1, 8, 6, 6)}, {"w1": w, "w2": w.copy()})
    art = export(model, tmp_path)
    fbm = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(art.files[0].read_bytes(), 0))
    sizes = sorted(len(b.data) if b.data is not None else 0 for b in fbm.buffers)
    assert sizes.count(w.nbytes) == 1  # one filter buffer for both convolutions
    assert sizes.count(8 * 4) == 1  # one zero-bias buffer
    ops = litert_ops(art.files[0])
    assert ops[0]["inputs"][1] == ops[1]["inputs"][1]  # even the same tensor


def test_unmapped_op_is_one_clear_error_and_no_file(tmp_path):
    from onnx import helper

    from tflite_helpers import make_model

    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["r"], ["y"])],
                       {"x": (2, 3, 3)})
    with pytest.raises(Unsupported, match=r"node '.*' \(Det\)"):
        export(model, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unknown_hardware_is_bad_input(zoo_model, tmp_path):
    with pytest.raises(BadInput, match="choose one of: cpu, gpu, nnapi, edgetpu"):
        get_target("tflite").export(zoo_model("resnet"), tmp_path, "tpu", ExportOptions())


def test_run_checks_input_shape(zoo_model, tmp_path):
    art = export(zoo_model("resnet"), tmp_path, "r")
    with pytest.raises(BadInput, match="shape"):
        get_target("tflite").run(art, {"input": np.zeros((1, 32, 32, 3), np.float32)})

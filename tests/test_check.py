"""edgeconv check: exact per-node reasons for every zoo model on every framework x hardware."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter import zoo
from converter.check import check_model, check_targets, results_to_json
from converter.errors import EXIT_BAD_INPUT, EXIT_UNSUPPORTED
from converter.matrix import load_matrix


@pytest.fixture(scope="module")
def m():
    return load_matrix()


def _cli(argv):
    from converter import cli
    from converter.commands import COMMAND_MODULES, check, report

    if "check" not in COMMAND_MODULES and not getattr(cli.app, "_test_check_registered", False):
        check.register(cli.app)
        report.register(cli.app)
        cli.app._test_check_registered = True
    return cli.main(argv)


def _one_node_model(op, in_shape, attrs=None, extra_inputs=(), out_shape=None, opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape or in_shape)
    inits = [onnx.numpy_helper.from_array(np.asarray(v), name=f"c{i}") for i, v in enumerate(extra_inputs)]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], ["y"], name="n0", **(attrs or {}))
    graph = helper.make_graph([node], "g", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_every_zoo_model_on_every_target_has_reasons(m, zoo_model):
    pairs = m.resolve_targets("all", "all")
    assert len(pairs) == 21
    for name in zoo.NAMES:
        model = zoo_model(name)
        results = check_targets(model, pairs, m)
        for r in results:
            assert len(r.verdicts) == len(model.graph.node)
            for v in r.verdicts:
                assert v.status in ("supported", "unverified", "unsupported")
                if v.status == "unsupported":
                    assert v.reason.startswith(f"{v.op}") and len(v.reason) > len(v.op) + 10, v
        assert results_to_json(results, name)["targets"][0]["counts"]["nodes"] == len(model.graph.node)


def test_exact_reasons_on_zoo_models(m, zoo_model):
    unet_rknpu = check_model(zoo_model("unet"), "tnn", "rknpu", m)
    bad = [v for v in unet_rknpu.verdicts if not v.supported]
    assert [v.op for v in bad] == ["ConvTranspose", "ConvTranspose"]
    assert {v.reason for v in bad} == {"ConvTranspose: rknpu has no Deconvolution"}
    assert bad[0].source == "tnn/doc_en_user_support_en.md"

    superres = check_model(zoo_model("superres"), "mace", "cpu", m)
    (bad,) = superres.unsupported
    assert bad.reason == ("ConvTranspose output_padding=[2, 2]: cpu supports every output_padding == 0 "
                          "(convert_deconv rejects output_padding)")
    assert bad.constraint == "every output_padding == 0"

    transformer = check_model(zoo_model("transformer"), "tflite", "cpu", m)
    assert [v.reason for v in transformer.unsupported] == [
        "Erf: no TFLite builtin for Erf (the Erf-GELU pattern maps to GELU)"]
    assert {v.op for v in check_model(zoo_model("transformer"), "tnn", "arm", m).unsupported} == {"Erf"}

    resnet = check_model(zoo_model("resnet"), "tflite", "cpu", m)
    assert resnet.ok and resnet.counts()["supported"] == len(resnet.verdicts)

    mobilenet = check_model(zoo_model("mobilenetv2"), "mace", "gpu", m)
    (gemm,) = [v for v in mobilenet.unsupported]
    assert gemm.op == "Gemm" and gemm.reason.startswith("Gemm on rank-2 input 0: gpu supports rank == 4 (input 0)")

    edgetpu = check_model(zoo_model("resnet"), "tflite", "edgetpu", m)
    assert not edgetpu.ok and all(v.supported for v in edgetpu.verdicts)
    assert [i.reason for i in edgetpu.model_issues] == [
        "edgetpu runs only int8/uint8 models; input 'input' is float32 (quantize the model)"]


def test_constraint_messages_name_the_values(m):
    from converter.graph import to_graph

    def verdict(model, fw, hw):
        return m.check_node(to_graph(model).nodes[0], fw, hw)

    softmax5 = _one_node_model("Softmax", [1, 2, 3, 4, 5], {"axis": 1})
    v = verdict(softmax5, "tflite", "gpu")
    assert (v.status, v.reason) == ("unsupported", "Softmax on rank-5 input 0: gpu supports rank <= 4")
    v = verdict(softmax5, "mace", "cpu")
    assert v.reason.startswith("Softmax axis=1 on rank-5 input: cpu supports the last axis only, or axes [1] on rank 4")
    assert verdict(_one_node_model("Softmax", [1, 8, 4, 4], {"axis": 1}), "mace", "cpu").status == "supported"

    big = _one_node_model("Softmax", [1, 20000], {"axis": -1})
    assert "input 0 of 20000 elements [1, 20000]: edgetpu supports elements <= 16000" in verdict(big, "tflite", "edgetpu").reason

    grouped = _one_node_model("Conv", [1, 8, 6, 6], {"group": 2}, [np.zeros((8, 4, 3, 3), np.float32)], [1, 8, 4, 4])
    v = verdict(grouped, "mace", "cpu")
    assert v.reason.startswith("Conv group=2 (grouped conv): cpu supports group in 1/depthwise")
    depthwise = _one_node_model("Conv", [1, 8, 6, 6], {"group": 8}, [np.zeros((8, 1, 3, 3), np.float32)], [1, 8, 4, 4])
    assert verdict(depthwise, "mace", "cpu").status == "supported"

    mean = _one_node_model("ReduceMean", [1, 8, 6, 6], {"axes": [1]}, out_shape=[1, 1, 6, 6])
    assert verdict(mean, "mace", "gpu").reason.startswith("ReduceMean axes=[1] on rank-4 input: gpu supports axes == [2, 3]")
    assert verdict(mean, "mace", "cpu").status == "supported"

    slice_steps = _one_node_model("Slice", [1, 8, 6, 6], {}, [np.array([0]), np.array([4]), np.array([2]),
                                                              np.array([2])], [1, 8, 6, 2])
    assert verdict(slice_steps, "tflite", "edgetpu").reason.startswith(
        "Slice input 4=[2]: edgetpu supports every value of input 4 == 1")

    dilated = _one_node_model("Conv", [1, 3, 9, 9], {"dilations": [2, 2]}, [np.zeros((4, 3, 3, 3), np.float32)],
                              [1, 4, 5, 5])
    v = verdict(dilated, "coreml", "ane")
    assert v.status == "unverified" and "dilations=[2, 2]" in v.reason

    custom = helper.make_model(helper.make_graph(
        [helper.make_node("FooBar", ["x"], ["y"], name="f", domain="acme")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    v = verdict(custom, "tflite", "cpu")
    assert (v.status, v.reason) == ("unsupported", "acme:FooBar: no mapping in tflite")


def test_max_outputs_issue_has_postprocess_remedy(tmp_path, zoo_model):
    overlay = tmp_path / "one_output.yaml"
    overlay.write_text("frameworks:\n  tflite:\n    hardware:\n      gpu:\n        properties: "
                       "{max_outputs: 1, dtypes: [float32], max_rank: 4, dynamic_shapes: false}\n")
    m1 = load_matrix(overlays=[overlay])
    r = check_model(zoo_model("detector"), "tflite", "gpu", m1)
    issue = next(i for i in r.model_issues if i.kind == "outputs")
    assert issue.reason == "gpu exposes at most 1 model output(s); the model has 2"
    assert issue.remedy == "postprocess" and not r.ok


def test_cli_exit_codes_and_json(tmp_path, zoo_onnx_path, capsys):
    resnet, unet = str(zoo_onnx_path("resnet")), str(zoo_onnx_path("unet"))
    assert _cli(["check", resnet, "--to", "tflite", "--hw", "cpu"]) == 0
    assert "tflite/cpu: OK: 23 supported" in capsys.readouterr().out
    assert _cli(["check", unet, "--to", "tnn", "--hw", "rknpu", "--json"]) == EXIT_UNSUPPORTED
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "edgeconv.check/1" and doc["ok"] is False
    (target,) = doc["targets"]
    assert (target["framework"], target["hw"], target["counts"]["unsupported"]) == ("tnn", "rknpu", 2)
    assert set(target["verdicts"][0]) == {"node", "op", "status", "reason", "constraint", "source", "remedy", "target"}
    assert _cli(["check", unet, "--to", "tnn", "--hw", "npu"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == "edgeconv: error: 'npu' is ambiguous for tnn; choose one of: huawei_npu, rknpu, apple_npu\n"
    assert _cli(["check", str(tmp_path / "missing.onnx"), "--to", "tflite"]) == EXIT_BAD_INPUT
    assert "Traceback" not in capsys.readouterr().err
    assert _cli(["check", unet, "--to", "all", "--hw", "all"]) == EXIT_UNSUPPORTED
    out = capsys.readouterr().out
    assert "of 21 framework/hardware targets run the whole model" in out
    assert "ConvTranspose: rknpu has no Deconvolution" in out

"""edgeconv check: exact per-node reasons for every zoo model on every framework x hardware."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.demo import zoo
from converter.legalize.check import check_model, check_targets, results_to_json
from converter.errors import EXIT_BAD_INPUT, EXIT_UNSUPPORTED
from converter.matrix import load_matrix


@pytest.fixture(scope="module")
def m():
    return load_matrix()


def _cli(argv):
    from converter import cli
    from converter.cli.commands import COMMAND_MODULES, check, report

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
    assert bad[0].source == "Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190"
    assert bad[0].citation.url == ("https://github.com/Tencent/TNN/blob/f0cb08129a05c5b60f08e4ef66042a54a883a56a/"
                                   "doc/en/user/support_en.md#L65-L190")

    superres = check_model(zoo_model("superres"), "mace", "cpu", m)
    (bad,) = superres.unsupported
    assert bad.reason == ("ConvTranspose output_padding=[2, 2]: cpu supports every output_padding == 0 "
                          "(convert_deconv rejects output_padding)")
    assert bad.constraint == "every output_padding == 0"

    # The transformer's Erf sits inside the exact GELU, which the TFLite exporter makes one GELU op.
    transformer = check_model(zoo_model("transformer"), "tflite", "cpu", m)
    assert transformer.ok and transformer.unsupported == []
    (erf,) = [v for v in transformer.verdicts if v.op == "Erf"]
    assert (erf.status, erf.reason) == ("supported", "maps to GELU (the Erf-GELU pattern only)")
    nnapi = check_model(zoo_model("transformer"), "tflite", "nnapi", m)
    assert [v.reason for v in nnapi.unsupported if v.op == "Erf"] == [
        "Erf: no TFLite builtin for Erf; GELU is never delegated to NNAPI (not in Validate)"]
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
    from converter.ir.graph import to_graph

    def verdict(model, fw, hw):
        return m.check_node(to_graph(model).nodes[0], fw, hw)

    softmax5 = _one_node_model("Softmax", [1, 2, 3, 4, 5], {"axis": 1})
    v = verdict(softmax5, "tflite", "gpu")
    assert (v.status, v.reason) == ("unsupported", "Softmax on rank-5 input 0: gpu supports rank <= 4")
    v = verdict(softmax5, "mace", "cpu")
    assert v.reason.startswith("Softmax axis=1 on rank-5 input: cpu supports the last axis only, or axes [0, 1] "
                               "on rank 2, or axes [0, 1, 2] on rank 3, or axes [0, 1, 2, 3] on rank 4")
    assert verdict(_one_node_model("Softmax", [1, 8, 4, 4], {"axis": 1}), "mace", "cpu").status == "supported"
    # Another axis of a rank 2-4 input goes through Transpose, which MACE's GPU lacks.
    softmax3 = _one_node_model("Softmax", [2, 5, 3], {"axis": 1})
    assert verdict(softmax3, "mace", "cpu").status == "supported"
    assert verdict(softmax3, "mace", "gpu").reason.startswith(
        "Softmax axis=1 on rank-3 input: gpu supports the last axis only, or axes [1] on rank 4")

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
    assert set(target["verdicts"][0]) == {"node", "op", "status", "reason", "constraint", "source", "remedy", "target",
                                          "citation"}
    bad = next(v for v in target["verdicts"] if v["status"] == "unsupported")
    assert bad["citation"] == {
        "text": bad["source"], "repo": "Tencent/TNN", "commit": "f0cb08129a05c5b60f08e4ef66042a54a883a56a",
        "path": "doc/en/user/support_en.md", "lines": [65, 190],
        "url": "https://github.com/Tencent/TNN/blob/f0cb08129a05c5b60f08e4ef66042a54a883a56a/doc/en/user/support_en.md#L65-L190"}
    _cli(["check", unet, "--to", "tnn", "--hw", "npu", "--json"])  # the class word checks each NPU
    doc = json.loads(capsys.readouterr().out)
    assert [t["hw"] for t in doc["targets"]] == ["huawei_npu", "rknpu", "apple_npu"]
    assert _cli(["check", str(tmp_path / "missing.onnx"), "--to", "tflite"]) == EXIT_BAD_INPUT
    assert "Traceback" not in capsys.readouterr().err
    assert _cli(["check", unet, "--to", "all", "--hw", "all"]) == EXIT_UNSUPPORTED
    out = capsys.readouterr().out
    assert "of 21 framework/hardware targets run the whole model" in out
    assert "ConvTranspose: rknpu has no Deconvolution" in out


# ------------------------------------------------------------------ the TNN / MACE kernel reviews, node by node

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _node(op, inputs, inits=(), out=(F, None), n_out=1, **attrs):
    """One ``op`` node; ``inputs``: [(name, elem_type, shape)] graph inputs; ``inits``: [(name, array)]."""
    tensors = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in inits]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [n for n, *_ in inputs] + [t.name for t in tensors], outs, name="n0", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(o, out[0], out[1]) for o in outs], tensors)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _x(*shape):
    return [("x", F, list(shape))]


_SCALES2 = [("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))]
_W_GROUPED = [("w", np.zeros((4, 3, 3, 3), np.float32))]  # ConvTranspose 4 -> 6 channels in 2 groups
_W_DEPTHWISE = [("w", np.zeros((4, 1, 3, 3), np.float32))]

#: (id, framework, [hw], model, status, a fragment of the reason (None: not checked)).
REVIEW_CASES = [
    # MACE 1: Where's condition is bool, which no MACE op produces.
    ("mace-where", "mace", ["cpu"], _node("Where", [("c", BOOL, [2, 3]), ("a", F, [2, 3]), ("b", F, [2, 3])]),
     "unsupported", "where.cc:38"),
    # MACE 2: LpNorm spans axis..end.
    ("mace-lpnorm-last", "mace", ["cpu", "gpu"], _node("LpNormalization", _x(2, 3, 7), axis=-1), "supported", None),
    ("mace-lpnorm-trailing-ones", "mace", ["cpu"], _node("LpNormalization", _x(2, 3, 1, 1), axis=1), "supported", None),
    ("mace-lpnorm-middle", "mace", ["cpu", "gpu"], _node("LpNormalization", _x(2, 3, 7), axis=1), "unsupported",
     "LpNormalization axis=1 on rank-3 input of shape [2, 3, 7]: {hw} supports every dim after the axis == 1"),
    # MACE 4: Gather does not wrap negative runtime indices; float params only.
    ("mace-gather-const", "mace", ["cpu"], _node("Gather", _x(4, 5), [("i", np.array([0, -1], np.int64))], axis=0),
     "supported", None),
    ("mace-gather-runtime", "mace", ["cpu"], _node("Gather", _x(4, 5) + [("i", I64, [2])], axis=0), "unverified",
     "gather.cc:65"),
    ("mace-gather-int", "mace", ["cpu"], _node("Gather", [("x", I64, [4, 5])], [("i", np.array([1], np.int64))],
                                               out=(I64, None)), "unsupported", "dtype=int64"),
    # MACE 5: StridedSlice loops cover rank 1-4.
    ("mace-slice-rank5", "mace", ["cpu"], _node("Slice", _x(1, 2, 3, 4, 5), [("s", np.array([1])), ("e", np.array([3])),
                                                                            ("a", np.array([2]))]),
     "unsupported", "rank-5 input 0: cpu supports rank >= 1 and rank <= 4"),
    ("mace-slice-rank4", "mace", ["cpu", "dsp"], _node("Slice", _x(1, 2, 3, 4), [("s", np.array([1])), ("e", np.array([3])),
                                                                                ("a", np.array([2]))]),
     "supported", None),
    # MACE 6: grouped deconvolution runs on the CPU (GroupDeconv2d); the GPU is depthwise only; DSP/APU group 1.
    ("mace-deconv-grouped-cpu", "mace", ["cpu"], _node("ConvTranspose", _x(1, 4, 5, 5), _W_GROUPED, group=2),
     "supported", None),
    ("mace-deconv-grouped-gpu", "mace", ["gpu"], _node("ConvTranspose", _x(1, 4, 5, 5), _W_GROUPED, group=2),
     "unsupported", "group=2 (grouped conv): gpu supports group in 1/depthwise"),
    ("mace-deconv-depthwise", "mace", ["cpu", "gpu"], _node("ConvTranspose", _x(1, 4, 5, 5), _W_DEPTHWISE, group=4),
     "supported", None),
    ("mace-deconv-depthwise-dsp", "mace", ["dsp", "apu"], _node("ConvTranspose", _x(1, 4, 5, 5), _W_DEPTHWISE, group=4),
     "unsupported", "hexagon_converter.py:159-186"),
    # MACE 7: nearest HALF_PIXEL is tf_half_pixel_for_nn; align_corners rounds half up; bilinear modes.
    ("mace-resize-nearest-half-pixel", "mace", ["cpu", "gpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2),
     "unsupported", "coordinate_transformation_mode=half_pixel: {hw} supports coordinate_transformation_mode in "
                    "['asymmetric', 'tf_half_pixel_for_nn', 'align_corners'] when mode in ['nearest']"),
    ("mace-resize-nearest-tf", "mace", ["cpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2, nearest_mode="floor",
                                                      coordinate_transformation_mode="tf_half_pixel_for_nn"),
     "supported", None),
    ("mace-resize-nearest-ceil", "mace", ["cpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2, nearest_mode="ceil",
                                                        coordinate_transformation_mode="asymmetric"),
     "unsupported", "nearest_mode=ceil"),
    ("mace-resize-corners-floor", "mace", ["cpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2,
                                                         coordinate_transformation_mode="align_corners"),
     "unsupported", "nearest_mode=round_prefer_floor: cpu supports nearest_mode == round_prefer_ceil"),
    ("mace-resize-corners-ceil", "mace", ["cpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2, nearest_mode="round_prefer_ceil",
                                                        coordinate_transformation_mode="align_corners"),
     "supported", None),
    ("mace-resize-linear-half-pixel", "mace", ["cpu", "gpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2, mode="linear"),
     "supported", None),
    ("mace-resize-linear-tf", "mace", ["cpu"], _node("Resize", _x(1, 2, 3, 3), _SCALES2, mode="linear",
                                                     coordinate_transformation_mode="tf_half_pixel_for_nn"),
     "unsupported", "when mode in ['linear']"),
    # MACE 8 / TNN 4: LRN maps exactly with an odd size only.
    ("mace-lrn-odd", "mace", ["cpu"], _node("LRN", _x(1, 6, 3, 3), size=3), "unverified", None),
    ("mace-lrn-even", "mace", ["cpu"], _node("LRN", _x(1, 6, 3, 3), size=4), "unsupported", "LRN size=4: cpu supports size odd"),
    ("tnn-lrn-even", "tnn", ["naive"], _node("LRN", _x(1, 6, 3, 3), size=4), "unsupported", "cpu_lrn_layer_acc.cc:59-60"),
    # x86's LRN sums into a workspace it never zeroes (measured in tnn_run): no LRN on x86 at all.
    ("tnn-lrn-x86", "tnn", ["x86"], _node("LRN", _x(1, 6, 3, 3), size=5), "unsupported", "x86_lrn_layer_acc.cc:47-61"),
    ("tnn-lrn-odd", "tnn", ["naive"], _node("LRN", _x(1, 6, 3, 3), size=5), "supported", None),
    # MACE 9 / TNN 1: OneHot.
    ("mace-onehot", "mace", ["cpu"], _node("OneHot", [("i", I64, [4])], [("d", np.int64(3)), ("v", np.array([0.0, 1.0], np.float32))]),
     "unsupported", "one_hot.cc:82-84"),
    ("tnn-onehot", "tnn", ["naive", "cuda", "arm"], _node("OneHot", [("i", I64, [4])],
                                                         [("d", np.int64(3)), ("v", np.array([0.0, 1.0], np.float32))]),
     "unsupported", "onehot_layer.cc:67-85"),
    # TNN 2: Where selects float/int32 data only.
    ("tnn-where-float", "tnn", ["naive"], _node("Where", [("c", BOOL, [2, 3]), ("a", F, [2, 3]), ("b", F, [2, 3])]),
     "supported", None),
    ("tnn-where-int64", "tnn", ["naive"], _node("Where", [("c", BOOL, [2, 3]), ("a", I64, [2, 3]), ("b", I64, [2, 3])],
                                                out=(I64, None)), "unsupported", "cpu_where_layer_acc.cc:40"),
    # TNN 3: an integer Range may lose its last element -- and TNN's naive runtime sizes any Range
    # on runtime inputs before they hold values (measured in tnn_run): unsupported either way.
    ("tnn-range-int", "tnn", ["naive"], _node("Range", [("s", I64, []), ("l", I64, []), ("d", I64, [])], out=(I64, None)),
     "unsupported", "measured in tnn_run"),
    ("tnn-range-float", "tnn", ["naive"], _node("Range", [("s", F, []), ("l", F, []), ("d", F, [])]), "unsupported",
     "measured in tnn_run"),
    # TNN 5: GridSample on the CPU kernel: bilinear / zeros / align_corners=0.
    ("tnn-gridsample-corners", "tnn", ["naive"], _node("GridSample", _x(1, 2, 5, 7) + [("g", F, [1, 3, 4, 2])], align_corners=1),
     "unsupported", "cpu_gridsample_layer_acc.cc:35"),
    ("tnn-gridsample-cuda", "tnn", ["cuda"], _node("GridSample", _x(1, 2, 5, 7) + [("g", F, [1, 3, 4, 2])], align_corners=1),
     "supported", None),
    ("tnn-gridsample-plain", "tnn", ["naive"], _node("GridSample", _x(1, 2, 5, 7) + [("g", F, [1, 3, 4, 2])]), "supported", None),
    # TNN 6: RoiAlign = ONNX output_half_pixel, average mode.
    ("tnn-roialign-default", "tnn", ["naive", "cuda"], _node("RoiAlign", _x(1, 3, 8, 9) + [("r", F, [1, 4])],
                                                            [("b", np.array([0], np.int64))]),
     "unsupported", "cpu_roialign_layer_acc.cc:145-148"),
    ("tnn-roialign-output-half-pixel", "tnn", ["naive"], _node("RoiAlign", _x(1, 3, 8, 9) + [("r", F, [1, 4])],
                                                              [("b", np.array([0], np.int64))],
                                                              coordinate_transformation_mode="output_half_pixel"),
     "supported", None),
    # TNN 7: Cast pairs, ScatterND float, constant BitShift, Einsum a-z.
    ("tnn-cast-bool", "tnn", ["arm", "naive"], _node("Cast", _x(2, 3), out=(BOOL, None), to=TensorProto.BOOL),
     "unsupported", "to=9"),
    ("tnn-cast-int32", "tnn", ["arm"], _node("Cast", _x(2, 3), out=(TensorProto.INT32, None), to=TensorProto.INT32),
     "supported", None),
    ("tnn-scatternd-int", "tnn", ["naive"], _node("ScatterND", [("x", I64, [4, 3]), ("i", I64, [2, 1]), ("u", I64, [2, 3])],
                                                  out=(I64, None)), "unsupported", "cpu_scatter_nd_layer_acc.cc:55"),
    ("tnn-bitshift-runtime", "tnn", ["naive"], _node("BitShift", [("x", TensorProto.UINT32, [4]), ("n", TensorProto.UINT32, [4])],
                                                     out=(TensorProto.UINT32, None), direction="RIGHT"),
     "unsupported", "input(s) [1] computed at runtime"),
    ("tnn-einsum-upper", "tnn", ["naive"], _node("Einsum", [("a", F, [2, 3]), ("b", F, [3, 4])], equation="iJ,Jk->ik"),
     "unsupported", "einsum_layer.cc:145"),
    ("tnn-einsum-lower", "tnn", ["naive"], _node("Einsum", [("a", F, [2, 3]), ("b", F, [3, 4])], equation="ij,jk->ik"),
     "supported", None),
    # TNN 8: Split and Squeeze have CPU kernels, so the naive device runs them.
    ("tnn-split-naive", "tnn", ["naive"], _node("Split", _x(2, 6), [("s", np.array([2, 4]))], n_out=2, axis=1),
     "supported", None),
    ("tnn-squeeze-naive", "tnn", ["naive"], _node("Squeeze", _x(2, 1, 3), [("a", np.array([1]))]), "supported", None),
]


@pytest.mark.parametrize("case", REVIEW_CASES, ids=[c[0] for c in REVIEW_CASES])
def test_kernel_review_findings(m, case):
    from converter.ir.graph import to_graph

    _, fw, hardware, model, status, fragment = case
    node = to_graph(model).nodes[0]
    for hw in hardware:
        v = m.check_node(node, fw, hw)
        assert v.status == status, (hw, v.reason)
        if fragment is not None:
            assert fragment.format(hw=hw) in v.reason, (hw, v.reason)


# ------------------------------------------------------------------ TFLite / Core ML entries vs their exporters

_ROI0 = ("roi", np.zeros(0, np.float32))
_LSTM_W = [("W", np.zeros((1, 8, 3), np.float32)), ("R", np.zeros((1, 8, 2), np.float32))]
_GRU_W = [("W", np.zeros((1, 6, 3), np.float32)), ("R", np.zeros((1, 6, 2), np.float32))]


def _chain(nodes, inputs, inits=(), outputs=("y",)):
    """A model of ``nodes`` (node 0 is the one checked); ``inputs``: [(name, elem_type, shape)]."""
    tensors = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in inits]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs], tensors)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _lstm(inits=(), n_out=2, read_yc=False, runtime_h0=False, **attrs):
    """LSTM over x [5, 1, 3] with hidden 2; ``inits`` after W, R: [(slot name, array)] for B,
    sequence_lens, initial_h, initial_c (absent: '')."""
    slots = dict(inits)
    names = ["x", "W", "R"] + [n if n in slots or (n == "h0" and runtime_h0) else "" for n in ("B", "lens", "h0", "c0")]
    while names[-1] == "":
        names.pop()
    outs = ["y0", "y1", "yc"][:n_out]
    nodes = [helper.make_node("LSTM", names, outs, name="n0", hidden_size=2, **attrs)]
    if read_yc:
        nodes.append(helper.make_node("Neg", ["yc"], ["z"], name="reads_yc"))
    inputs = [("x", F, [5, 1, 3])] + ([("h0", F, [1, 1, 2])] if runtime_h0 else [])
    return _chain(nodes, inputs, _LSTM_W + list(inits), ["y0"] + (["z"] if read_yc else []))


def _resize(in_shape, scales=None, sizes=None, **attrs):
    inits = [_ROI0, ("scales", np.array(scales if scales is not None else [], np.float32))]
    if sizes is not None:
        inits.append(("sizes", np.array(sizes, np.int64)))
    return _node("Resize", _x(*in_shape), inits, **attrs)


def _nms():
    return _node("NonMaxSuppression", [("b", F, [1, 6, 4]), ("s", F, [1, 2, 6])],
                 [("m", np.array([3], np.int64)), ("iou", np.array([0.5], np.float32))], out=(I64, None))


def Z(*shape):
    """float32 zeros (a short name: the case table below is wide)."""
    return np.zeros(shape, np.float32)


#: (id, framework, [hw], model, status, the exact reason with {hw} filled in per hardware).
EXPORTER_CASES = [
    ("tfl-lstm-plain", "tflite", ["cpu", "nnapi"], _lstm(),
     'supported', 'maps to UNIDIRECTIONAL_SEQUENCE_LSTM (per direction; REVERSE_V2 + CONCATENATION)'),
    ("tfl-lstm-clip", "tflite", ["cpu"], _lstm(clip=3.0),
     'unsupported', 'LSTM clip=3.0: {hw} supports clip not set (ONNX clip clips the gate inputs; cell_clip clips the cell state (schema.fbs:1041))'),
    ("tfl-lstm-layout", "tflite", ["cpu"], _lstm(layout=1),
     'unsupported', 'LSTM layout=1: {hw} supports layout == 0 (the exporter writes time-major sequences (UnidirectionalSequenceLSTMOptions.time_major, schema.fbs:1041))'),
    ("tfl-lstm-acts", "tflite", ["cpu"], _lstm(activations=["Sigmoid", "Relu", "Tanh"]),
     'unsupported', "LSTM activations=['Sigmoid', 'Relu', 'Tanh']: {hw} supports activations in [['Sigmoid', 'Tanh', 'Tanh'], ['Sigmoid', 'Tanh', 'Tanh', 'Sigmoid', 'Tanh', 'Tanh']] (the kernel has sigmoid gates and one fused cell/output activation (schema.fbs:1041))"),
    ("tfl-lstm-forget", "tflite", ["cpu"], _lstm(input_forget=1),
     'unsupported', 'LSTM input_forget=1: {hw} supports input_forget == 0 (the exporter maps no coupled input-forget gate)'),
    ("tfl-lstm-h0-runtime", "tflite", ["cpu"], _lstm(runtime_h0=True),
     'unsupported', "LSTM input(s) [5] computed at runtime: {hw} supports constant input(s) [1, 2, 3, 4, 5, 6, 7] (the exporter writes weights as constant buffers and checks states and lengths at export); LSTM input 5 computed at runtime: cannot check 'every value of input 5 == 0' for cpu"),
    ("tfl-lstm-h0-nonzero", "tflite", ["cpu"], _lstm([("h0", np.full((1, 1, 2), 0.5, np.float32))]),
     'unsupported', 'LSTM input 5=[[[0.5, 0.5]]]: {hw} supports every value of input 5 == 0 (the states are variable tensors that start at zero (unidirectional_sequence_lstm.cc:970-974 GetVariableInput, kernel_util.cc:127))'),
    ("tfl-lstm-h0-zero", "tflite", ["cpu"], _lstm([("h0", Z(1, 1, 2)), ("c0", Z(1, 1, 2))]),
     'supported', 'maps to UNIDIRECTIONAL_SEQUENCE_LSTM (per direction; REVERSE_V2 + CONCATENATION)'),
    ("tfl-lstm-yc", "tflite", ["cpu"], _lstm(n_out=3, read_yc=True),
     'unsupported', 'LSTM output(s) [2] read by another node: {hw} supports output(s) [2] absent or unread (UNIDIRECTIONAL_SEQUENCE_LSTM outputs the sequence only; Y_c stays in the variable cell-state tensor (unidirectional_sequence_lstm.cc:973))'),
    ("tfl-lstm-short", "tflite", ["cpu"], _lstm([("lens", np.array([3], np.int32))]),
     'unsupported', 'LSTM input 4=[3] with dim 0 of input 0 = 5: {hw} supports every value of input 4 == dim 0 of input 0 (the kernel takes 20 or 24 inputs, none of them sequence lengths (unidirectional_sequence_lstm.cc:896-910))'),
    ("tfl-lstm-full", "tflite", ["cpu"], _lstm([("lens", np.array([5], np.int32))]),
     'supported', 'maps to UNIDIRECTIONAL_SEQUENCE_LSTM (per direction; REVERSE_V2 + CONCATENATION)'),
    ("tfl-maxpool-1d", "tflite", ["cpu", "gpu", "edgetpu"], _node("MaxPool", _x(1, 2, 9), kernel_shape=[3]),
     'supported', 'maps to MAX_POOL_2D'),
    ("tfl-maxpool-3d", "tflite", ["cpu"], _node("MaxPool", _x(1, 2, 4, 4, 4), kernel_shape=[2, 2, 2]),
     'unsupported', 'MaxPool on rank-5 input 0: {hw} supports rank in [3, 4] (input 0) (1-D pools run as MAX_POOL_2D on an H=1 view; MaxPool3D is not a builtin (pooling3d.cc:33,438 register it in namespace custom))'),
    ("tfl-avgpool-1d", "tflite", ["cpu", "nnapi"], _node("AveragePool", _x(1, 2, 9), kernel_shape=[3]),
     'supported', 'maps to AVERAGE_POOL_2D'),
    ("tfl-avgpool-3d", "tflite", ["cpu"], _node("AveragePool", _x(1, 2, 4, 4, 4), kernel_shape=[2, 2, 2]),
     'unsupported', 'AveragePool on rank-5 input 0: {hw} supports rank in [3, 4] (input 0) (1-D pools run as AVERAGE_POOL_2D on an H=1 view; AveragePool3D is not a builtin (pooling3d.cc:33,431 register it in namespace custom))'),
    ("tfl-deconv-grouped-dilated", "tflite", ["cpu", "gpu", "nnapi"], _node("ConvTranspose", _x(1, 4, 5, 5), [("w", Z(4, 3, 3, 3))], group=2, dilations=[2, 1]),
     'supported', 'maps to TRANSPOSE_CONV (groups - SPLIT + TRANSPOSE_CONV per group + CONCATENATION)'),
    ("tfl-deconv-1d", "tflite", ["cpu", "gpu"], _node("ConvTranspose", _x(1, 3, 7), [("w", Z(3, 2, 4))], strides=[2]),
     'supported', 'maps to TRANSPOSE_CONV (groups - SPLIT + TRANSPOSE_CONV per group + CONCATENATION)'),
    ("tfl-deconv-3d", "tflite", ["cpu"], _node("ConvTranspose", _x(1, 2, 3, 3, 3), [("w", Z(2, 2, 2, 2, 2))]),
     'unsupported', 'ConvTranspose on rank-5 input 0: {hw} supports rank in [3, 4] (input 0) (TRANSPOSE_CONV is 2-D (TransposeConvOptions, schema.fbs:1233; transpose_conv.cc:324 checks a 4-D input); the exporter lifts 1-D to an H=1 view, 3-D has no builtin)'),
    ("tfl-deconv-edgetpu", "tflite", ["edgetpu"], _node("ConvTranspose", _x(1, 4, 5, 5), [("w", Z(4, 3, 3, 3))]),
     'unsupported', 'ConvTranspose: {hw} has no TRANSPOSE_CONV (groups - SPLIT + TRANSPOSE_CONV per group + CONCATENATION)'),
    ("tfl-conv3d-grouped", "tflite", ["cpu"], _node("Conv", _x(1, 4, 5, 5, 5), [("w", Z(6, 2, 3, 3, 3))], group=2),
     'unsupported', 'Conv group=2 (grouped conv): {hw} supports group in 1 when rank == 5 (input 0) (CONV_3D has no groups: conv3d.cc:129 requires input channels == filter in-channels (Conv3DOptions, schema.fbs:874))'),
    ("tfl-conv3d", "tflite", ["cpu"], _node("Conv", _x(1, 4, 5, 5, 5), [("w", Z(6, 4, 3, 3, 3))]),
     'supported', 'maps to CONV_2D / DEPTHWISE_CONV_2D / CONV_3D'),
    ("tfl-conv1d", "tflite", ["gpu", "nnapi"], _node("Conv", _x(1, 4, 9), [("w", Z(6, 4, 3))]),
     'supported', 'maps to CONV_2D / DEPTHWISE_CONV_2D / CONV_3D'),
    ("tfl-conv-runtime-w", "tflite", ["cpu"], _node("Conv", _x(1, 4, 9, 9) + [("w", F, [6, 4, 3, 3])]),
     'unsupported', 'Conv input(s) [1] computed at runtime: {hw} supports constant input(s) [1] (the exporter writes the filter as a constant buffer)'),
    ("tfl-pad-edge", "tflite", ["cpu", "gpu", "nnapi"], _node("Pad", _x(1, 2, 4, 5), [("p", np.array([0, 0, 2, 1, 0, 0, 1, 3]))], mode="edge"),
     'supported', 'maps to PAD / PADV2 / MIRROR_PAD / GATHER (edge)'),
    ("tfl-pad-edge-tpu", "tflite", ["edgetpu"], _node("Pad", _x(1, 2, 4, 5), [("p", np.array([0, 0, 2, 1, 0, 0, 1, 3]))], mode="edge"),
     'unsupported', 'Pad mode=edge: {hw} supports mode == constant (the Edge TPU table has Pad, not MirrorPad or Gather)'),
    ("tfl-pad-reflect", "tflite", ["cpu", "gpu", "nnapi"], _node("Pad", _x(1, 2, 4, 5), [("p", np.array([0, 0, 2, 1, 0, 0, 1, 3]))], mode="reflect"),
     'supported', 'maps to PAD / PADV2 / MIRROR_PAD / GATHER (edge)'),
    ("tfl-pad-negative", "tflite", ["cpu"], _node("Pad", _x(1, 2, 4, 5), [("p", np.array([0, 0, -1, 1, 0, 0, 1, 3]))]),
     'unsupported', 'Pad input 1=[0, 0, -1, 1, 0, 0, 1, 3]: {hw} supports every value of input 1 >= 0 (negative pads (cropping) are not mapped by the exporter)'),
    ("tfl-lpnorm-p1", "tflite", ["cpu", "gpu", "nnapi"], _node("LpNormalization", _x(2, 5, 3), axis=1, p=1),
     'supported', 'maps to L2_NORMALIZATION / ABS+SUM+DIV'),
    ("tfl-lpnorm-p1-edgetpu", "tflite", ["edgetpu"], _node("LpNormalization", _x(2, 5, 3), axis=1, p=1),
     'unsupported', 'LpNormalization p=1: {hw} supports p == 2 (L2Normalization is in the Edge TPU table; ABS, SUM and DIV are not)'),
    ("tfl-lpnorm-p2", "tflite", ["cpu", "nnapi", "edgetpu"], _node("LpNormalization", _x(2, 5, 3), axis=1),
     'supported', 'maps to L2_NORMALIZATION / ABS+SUM+DIV'),
    ("tfl-lpnorm-p2-gpu", "tflite", ["gpu"], _node("LpNormalization", _x(2, 5, 3), axis=1),
     'unsupported', "LpNormalization p=2: {hw} supports p == 1 (L2_NORMALIZATION has no GPU parser; p=1's ABS, SUM and DIV have one)"),
    ("tfl-erf-lone", "tflite", ["cpu"], _node("Erf", _x(2, 7)),
     'unsupported', 'Erf outside the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2))): {hw} supports only inside the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2))) (no TFLite builtin for Erf; only the Erf-GELU pattern maps to GELU)'),
    ("tfl-gathernd-batch", "tflite", ["cpu"], _node("GatherND", _x(2, 3, 4), [("i", np.array([[1], [0]], np.int64))], batch_dims=1),
     'unsupported', 'GatherND batch_dims=1: {hw} supports batch_dims == 0 (GatherNdOptions is empty (schema.fbs:1360): output = indices.shape[:-1] + params.shape[indices.shape[-1]:] (gather_nd.cc:101), no batch dims)'),
    ("tfl-gathernd", "tflite", ["cpu"], _node("GatherND", _x(2, 3, 4), [("i", np.array([[1, 2]], np.int64))]),
     'supported', 'maps to GATHER_ND'),
    ("tfl-scatternd-mul", "tflite", ["cpu"], _node("ScatterND", _x(4, 3) + [("i", I64, [2, 1]), ("u", F, [2, 3])], reduction="mul"),
     'unsupported', "ScatterND reduction=mul: {hw} supports reduction in ['none', 'add'] (SCATTER_ND sums the updates into zeros (reference_ops.h:682,697; ScatterNdOptions is empty, schema.fbs:1400): the exporter builds none and add from it, not mul/max/min)"),
    ("tfl-scatternd-add", "tflite", ["cpu"], _node("ScatterND", _x(4, 3) + [("i", I64, [2, 1]), ("u", F, [2, 3])], reduction="add"),
     'supported', 'maps to SCATTER_ND (+ SELECT_V2 for reduction none)'),
    ("tfl-resize-linear-inexact", "tflite", ["cpu", "gpu"], _resize((1, 2, 4, 4), [1, 1, 1.3, 1.3], mode="linear"),
     'unsupported', "Resize scales [1.0, 1.0, 1.2999999523162842, 1.2999999523162842] resize [1, 2, 4, 4] to [1, 2, 5, 5]: {hw} supports scales (input 2) x input size == output size when mode in ['linear'] and coordinate_transformation_mode not in ['align_corners'] (RESIZE_BILINEAR takes output sizes and uses scale = in/out (reference/resize_bilinear.h:80); ONNX's grid uses the given scale)"),
    ("tfl-resize-linear-sizes", "tflite", ["cpu"], _resize((1, 2, 4, 4), sizes=[1, 2, 5, 5], mode="linear"),
     'supported', 'maps to RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR'),
    ("tfl-resize-linear-corners", "tflite", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 1.3, 1.3], mode="linear", coordinate_transformation_mode="align_corners"),
     'supported', 'maps to RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR'),
    ("tfl-resize-nearest-inexact", "tflite", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 1.3, 1.3]),
     'supported', 'maps to RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR'),
    ("tfl-resize-tf-half-pixel", "tflite", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 2, 2], coordinate_transformation_mode="tf_half_pixel_for_nn"),
     'unsupported', "Resize coordinate_transformation_mode=tf_half_pixel_for_nn: {hw} supports coordinate_transformation_mode in ['half_pixel', 'pytorch_half_pixel', 'align_corners', 'asymmetric'] (ResizeBilinearOptions / ResizeNearestNeighborOptions have align_corners and half_pixel_centers only (schema.fbs:1075): the exporter maps these four grids)"),
    ("tfl-lrn-even", "tflite", ["cpu", "nnapi"], _node("LRN", _x(1, 6, 3, 3), size=4),
     'unsupported', 'LRN size=4: {hw} supports size odd (LocalResponseNormalizationOptions has one radius (schema.fbs:1009; local_response_norm.cc:76 range = radius): a symmetric window, which an even ONNX size is not)'),
    ("tfl-lrn-odd", "tflite", ["cpu"], _node("LRN", _x(1, 6, 3, 3), size=5),
     'supported', 'maps to LOCAL_RESPONSE_NORMALIZATION'),
    ("cml-rank6", "coreml", ["cpu", "gpu", "ane"], _node("Unsqueeze", _x(1, 2, 3, 4, 5), [("a", np.array([0]))]),
     'unsupported', 'Unsqueeze on rank-6 output: {hw} supports rank <= 5'),
    ("cml-rank5", "coreml", ["cpu"], _node("Unsqueeze", _x(2, 3, 4, 5), [("a", np.array([0]))]),
     'supported', 'maps to expand_dims'),
    ("cml-lpnorm", "coreml", ["cpu"], _node("LpNormalization", _x(2, 5, 3), axis=1, p=1),
     'supported', 'maps to reduce_l2_norm / reduce_l1_norm + real_div'),
    ("cml-gru", "coreml", ["cpu"], _node("GRU", [("x", F, [5, 1, 3])], _GRU_W, hidden_size=2),
     'supported', 'maps to linear+sigmoid+tanh+mul+add'),
    ("cml-gru-clip", "coreml", ["cpu"], _node("GRU", [("x", F, [5, 1, 3])], _GRU_W, hidden_size=2, clip=1.0),
     'unsupported', 'GRU clip=1.0: {hw} supports clip not set (the exporter maps no ONNX clip)'),
    ("cml-gru-layout", "coreml", ["cpu"], _node("GRU", [("x", F, [1, 5, 3])], _GRU_W, hidden_size=2, layout=1),
     'unsupported', "GRU layout=1: {hw} supports layout == 0 (the unrolled steps slice x as <s, b, I>, MIL gru's layout (iOS15/recurrent.py:43))"),
    ("cml-gru-acts", "coreml", ["cpu"], _node("GRU", [("x", F, [5, 1, 3])], _GRU_W, hidden_size=2, activations=["Sigmoid", "Relu"]),
     'unsupported', "GRU activations=['Sigmoid', 'Relu']: {hw} supports activations in [['Sigmoid', 'Tanh'], ['Sigmoid', 'Tanh', 'Sigmoid', 'Tanh']] (the exporter maps ONNX's default activations only)"),
    ("cml-gru-short", "coreml", ["cpu"], _node("GRU", [("x", F, [5, 1, 3])], _GRU_W + [("B", Z(1, 12)), ("l", np.array([4], np.int32))], hidden_size=2),
     'unsupported', 'GRU input 4=[4] with dim 0 of input 0 = 5: {hw} supports every value of input 4 == dim 0 of input 0 (the unrolled steps run every sequence to the end, as MIL gru would (iOS15/recurrent.py:43))'),
    ("cml-lstm-forget", "coreml", ["cpu"], _lstm(input_forget=1),
     'unsupported', 'LSTM input_forget=1: {hw} supports input_forget == 0 (the exporter maps no coupled input-forget gate)'),
    ("cml-lstm-h0-runtime", "coreml", ["cpu"], _lstm(runtime_h0=True),
     'supported', 'maps to lstm'),
    ("cml-roialign-batch2", "coreml", ["cpu"], _node("RoiAlign", _x(2, 3, 8, 9) + [("r", F, [1, 4])], [("b", np.array([1], np.int64))], sampling_ratio=2),
     'unsupported', 'RoiAlign input 0 of shape [2, 3, 8, 9]: {hw} supports dim 0 == 1 (input 0) (crop_resize declares [N, B, C, h, w] for every roi form (iOS15/image_resizing.py:564), so batch indices select nothing: batch 1 only)'),
    ("cml-roialign-adaptive", "coreml", ["cpu"], _node("RoiAlign", _x(1, 3, 8, 9) + [("r", F, [1, 4])], [("b", np.array([0], np.int64))]),
     'unsupported', "RoiAlign sampling_ratio=0: {hw} supports sampling_ratio >= 1 (a fixed sampling grid: crop_resize's target size is static (iOS15/image_resizing.py:564))"),
    ("cml-roialign-max", "coreml", ["cpu"], _node("RoiAlign", _x(1, 3, 8, 9) + [("r", F, [1, 4])], [("b", np.array([0], np.int64))], mode="max", sampling_ratio=2),
     'unsupported', 'RoiAlign mode=max: {hw} supports mode == avg (the exporter averages the bins with avg_pool)'),
    ("cml-roialign-ok", "coreml", ["cpu"], _node("RoiAlign", _x(1, 3, 8, 9) + [("r", F, [1, 4])], [("b", np.array([0], np.int64))], sampling_ratio=2),
     'supported', 'maps to crop_resize+avg_pool'),
    ("cml-lrn-even", "coreml", ["cpu"], _node("LRN", _x(1, 6, 3, 3), size=4),
     'unsupported', 'LRN size=4: {hw} supports size odd (the MIL spec does not place an even window (iOS15/normalization.py:338); ONNX puts the extra channel after the center)'),
    ("cml-gridsample-cubic", "coreml", ["cpu"], _node("GridSample", _x(1, 2, 5, 7) + [("g", F, [1, 3, 4, 2])], mode="bicubic"),
     'unsupported', "GridSample mode=bicubic: {hw} supports mode in ['bilinear', 'nearest'] (resample sampling_mode is bilinear or nearest (iOS15/image_resizing.py:790))"),
    ("cml-resize-nearest-1.5", "coreml", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 1.5, 1.5]),
     'unsupported', "Resize resizes [1, 2, 4, 4] to [1, 2, 6, 6]: {hw} supports output size a whole multiple of the input size when mode in ['nearest'] (the exporter writes integer upsample_nearest_neighbor factors, whose floor grid is ONNX's (iOS15/image_resizing.py:17))"),
    ("cml-resize-nearest-2", "coreml", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 2, 2]),
     'supported', 'maps to resize_bilinear / upsample_nearest_neighbor'),
    ("cml-resize-nearest-asym-round", "coreml", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 2, 2], coordinate_transformation_mode="asymmetric"),
     'unsupported', "Resize nearest_mode=round_prefer_floor: {hw} supports nearest_mode == floor when mode in ['nearest'] and coordinate_transformation_mode == asymmetric (asymmetric x / s is floored by upsample_nearest_neighbor (iOS15/image_resizing.py:17))"),
    ("cml-resize-linear-inexact", "coreml", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 1.3, 1.3], mode="linear"),
     'unsupported', "Resize scales [1.0, 1.0, 1.2999999523162842, 1.2999999523162842] resize [1, 2, 4, 4] to [1, 2, 5, 5]: {hw} supports scales (input 2) x input size == output size (resize_bilinear takes output sizes (iOS15/image_resizing.py:265); ONNX's grid uses the scale, which agrees only when input size x scale is the output size)"),
    ("cml-resize-linear-1.5", "coreml", ["cpu"], _resize((1, 2, 4, 4), [1, 1, 1.5, 1.5], mode="linear"),
     'supported', 'maps to resize_bilinear / upsample_nearest_neighbor'),
    ("cml-einsum-ellipsis", "coreml", ["cpu"], _node("Einsum", [("a", F, [2, 3, 4]), ("b", F, [2, 4, 5])], equation="...ij,...jk->...ik"),
     'unsupported', "Einsum equation=...ij,...jk->...ik: {hw} supports equation matching ^[^.]*$ (no '...' (MIL einsum takes explicit axes: iOS15/linear.py:275-277; the exporter refuses ellipsis))"),
    ("cml-einsum", "coreml", ["cpu"], _node("Einsum", [("a", F, [3, 4]), ("b", F, [4, 5])], equation="ij,jk->ik"),
     'supported', 'maps to einsum / transpose+matmul+reduce_sum'),
]


@pytest.mark.parametrize("case", EXPORTER_CASES, ids=[c[0] for c in EXPORTER_CASES])
def test_tflite_and_coreml_entries_follow_the_exporters(m, case):
    """Each changed TFLite / Core ML entry, node by node: what the exporter maps is supported, what it
    refuses (or the runtime cannot run) is unsupported with the cited reason."""
    from converter.ir.graph import to_graph

    _, fw, hardware, model, status, reason = case
    node = to_graph(model).nodes[0]
    for hw in hardware:
        v = m.check_node(node, fw, hw)
        assert (v.status, v.reason) == (status, reason.format(hw=hw)), hw


def test_tflite_nms_has_no_mapping_and_becomes_a_custom_layer(m):
    from converter.ir.graph import to_graph
    from converter.legalize.plan import plan_model
    from converter.postproc.ops_numpy import KERNELS

    node = to_graph(_nms()).nodes[0]
    reasons = {hw: m.check_node(node, "tflite", hw) for hw in m.hardware("tflite")}
    assert {v.status for v in reasons.values()} == {"unsupported"}
    assert reasons["cpu"].reason == (
        "NonMaxSuppression: NON_MAX_SUPPRESSION_V4/V5 take one class of one image ([num_boxes, 4] boxes, [num_boxes] "
        "scores: non_max_suppression.cc:86,93) and return padded indices + a count (non_max_suppression.cc:151,155); "
        "ONNX's NonMaxSuppression covers every batch and class with a data-dependent length")
    assert reasons["gpu"].reason == ("NonMaxSuppression: NON_MAX_SUPPRESSION_V4/V5 has no GPU parser, and ONNX's "
                                     "NonMaxSuppression has no builtin mapping")
    # The post-processing code has no NMS kernel, so even a trailing NMS becomes a custom layer.
    assert "NonMaxSuppression" not in KERNELS
    (entry,) = plan_model(_nms(), "tflite", "cpu", m).entries
    assert entry.remedy == "custom" and "no post-processing kernel for NonMaxSuppression" in entry.reason

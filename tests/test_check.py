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
    from converter.graph import to_graph

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
    ("tnn-lrn-even", "tnn", ["naive", "x86"], _node("LRN", _x(1, 6, 3, 3), size=4), "unsupported", "cpu_lrn_layer_acc.cc:59-60"),
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
    # TNN 3: an integer Range may lose its last element.
    ("tnn-range-int", "tnn", ["naive"], _node("Range", [("s", I64, []), ("l", I64, []), ("d", I64, [])], out=(I64, None)),
     "unverified", "dims_function_utils.cc:87-103"),
    ("tnn-range-float", "tnn", ["naive"], _node("Range", [("s", F, []), ("l", F, []), ("d", F, [])]), "supported", None),
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
    from converter.graph import to_graph

    _, fw, hardware, model, status, fragment = case
    node = to_graph(model).nodes[0]
    for hw in hardware:
        v = m.check_node(node, fw, hw)
        assert v.status == status, (hw, v.reason)
        if fragment is not None:
            assert fragment.format(hw=hw) in v.reason, (hw, v.reason)
